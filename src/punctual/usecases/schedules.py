"""Recurring schedules: create, read, edit, pause/resume, delete, occurrences, preview (RS-*).

Every mutation is a function ``(tx, now) -> Outcome`` built from a frozen command, run by
the same idempotency mechanism as starts. Check order (API.md): existence, validation that
reads only the request, role, checks that need stored input (FT-4), state, version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from punctual.domain.ids import new_id
from punctual.domain.permissions import Action, Principal, require
from punctual.domain.recurrence import (
    IntervalSpec,
    RecurrenceError,
    RecurrenceSpec,
    next_fires,
)
from punctual.domain.schedules import (
    MAX_CATCH_UP_LIMIT,
    MissedPolicy,
    OverlapPolicy,
    Schedule,
    SchedulePolicy,
    VersionPolicy,
    first_fire_after,
    skipped_range,
    spec_from_json,
)
from punctual.domain.starts import StartState, check_mutable
from punctual.errors import Conflict, InvalidRequest, QuotaExceeded, not_found, version_conflict
from punctual.ports.records import NewOccurrence, NewSchedule
from punctual.ports.store import Tx
from punctual.usecases.admission import admit_input_and_class, admit_input_size
from punctual.usecases.context import Services
from punctual.usecases.definitions import input_problems, require_active
from punctual.usecases.idempotency import Mutation, Outcome
from punctual.usecases.paging import check_choice, check_limit, decode_cursor, page
from punctual.usecases.projections import fire_view, occurrence_view, schedule_view

PREVIEW_DEFAULT_COUNT = 10
EDITABLE_FIELDS = frozenset(
    {
        "name",
        "workflow",
        "input",
        "spec",
        "overlap",
        "missed",
        "max_catch_up",
        "catch_up_window",
        "misfire_grace_ms",
        "enabled",
        "version_policy",
        "workload_class",
        "regression",
    }
)
_REVISION_FIELDS = frozenset({"workflow", "input", "spec"})


@dataclass(frozen=True)
class CreateSchedule:
    name: str
    workflow: str
    input: Any
    spec: dict[str, Any]
    overlap: str | None
    missed: str | None
    workload_class: str
    max_catch_up: int = 10
    catch_up_window: float | None = None
    misfire_grace_ms: int = 60_000
    enabled: bool = True
    version_policy: str = VersionPolicy.ACTIVE_AT_FIRE.value
    regression: dict[str, Any] | None = None


@dataclass(frozen=True)
class UpdateSchedule:
    schedule_id: str
    version: int
    changes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ListOccurrences:
    schedule_id: str
    state: str | None = None
    limit: int = 50
    cursor: str | None = None


def parse_spec(data: dict[str, Any], now: datetime) -> RecurrenceSpec:
    """A spec from the API; an interval without ``starts_at`` starts one interval from now."""
    if not isinstance(data, dict) or ("cron" in data) == ("interval_ms" in data):
        raise InvalidRequest(
            "spec must have either 'cron' (with an optional 'time_zone') or 'interval_ms'",
            errors=[{"loc": ["body", "spec"], "msg": "cron or interval_ms", "type": "spec"}],
        )
    allowed = (
        {"cron", "time_zone", "dst_gap", "dst_overlap"}
        if "cron" in data
        else {"interval_ms", "starts_at"}
    )
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InvalidRequest(
            f"spec does not take {', '.join(unknown)}",
            errors=[
                {"loc": ["body", "spec", k], "msg": "unknown field", "type": "extra"}
                for k in unknown
            ],
        )
    try:
        spec = spec_from_json(data)
    except RecurrenceError as exc:
        raise InvalidRequest(exc.message, code=exc.code, **exc.details) from exc
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(
            f"invalid spec: {exc}",
            errors=[{"loc": ["body", "spec"], "msg": str(exc), "type": "value_error"}],
        ) from exc
    if isinstance(spec, IntervalSpec) and spec.starts_at is None:
        spec = IntervalSpec(spec.interval_ms, now + timedelta(milliseconds=spec.interval_ms))
    return spec


def _choice(name: str, value: Any, enum: type[Any]) -> Any:
    if value is None:
        raise InvalidRequest(
            f"{name} is required: choose what happens "
            + ("when a run is still going" if name == "overlap" else "after downtime")
            + f" ({', '.join(e.value for e in enum)})",
            code="policy_required",
            field=name,
        )
    try:
        return enum(value)
    except ValueError:
        raise InvalidRequest(
            f"{name} must be one of {', '.join(e.value for e in enum)}",
            errors=[{"loc": ["body", name], "msg": "not an allowed value", "type": "enum"}],
        ) from None


def parse_policy(values: dict[str, Any]) -> SchedulePolicy:
    overlap = _choice("overlap", values.get("overlap"), OverlapPolicy)
    missed = _choice("missed", values.get("missed"), MissedPolicy)
    max_catch_up = values.get("max_catch_up", 10)
    window = values.get("catch_up_window")
    grace = values.get("misfire_grace_ms", 60_000)
    problems = []
    if not isinstance(max_catch_up, int) or not 1 <= max_catch_up <= MAX_CATCH_UP_LIMIT:
        problems.append(("max_catch_up", f"must be a whole number from 1 to {MAX_CATCH_UP_LIMIT}"))
    if window is not None and (not isinstance(window, int | float) or window <= 0):
        problems.append(("catch_up_window", "must be a positive number of seconds"))
    if not isinstance(grace, int) or grace < 0:
        problems.append(("misfire_grace_ms", "must be a whole number of milliseconds >= 0"))
    if problems:
        raise InvalidRequest(
            "; ".join(f"{name} {msg}" for name, msg in problems),
            errors=[{"loc": ["body", n], "msg": m, "type": "value_error"} for n, m in problems],
        )
    return SchedulePolicy(
        overlap=overlap,
        missed=missed,
        max_catch_up=max_catch_up,
        catch_up_window=timedelta(seconds=window) if window is not None else None,
        misfire_grace=timedelta(milliseconds=grace),
    )


def parse_regression(value: Any) -> dict[str, Any] | None:
    """``{"metrics": [{"path", "better": higher|lower, "tolerance" >= 0}]}`` or null."""
    if value is None:
        return None
    try:
        metrics = value["metrics"]
        assert isinstance(metrics, list) and metrics
        cleaned = []
        for metric in metrics:
            assert isinstance(metric["path"], str) and metric["path"]
            assert metric["better"] in ("higher", "lower")
            tolerance = float(metric.get("tolerance", 0.0))
            assert tolerance >= 0
            cleaned.append(
                {"path": metric["path"], "better": metric["better"], "tolerance": tolerance}
            )
    except (AssertionError, KeyError, TypeError, ValueError):
        raise InvalidRequest(
            "regression must be {'metrics': [{'path': 'metrics.score', 'better': 'higher' or "
            "'lower', 'tolerance': number >= 0}, ...]}",
            errors=[{"loc": ["body", "regression"], "msg": "invalid policy", "type": "value"}],
        ) from None
    return {"metrics": cleaned}


def _check_input(tx: Tx, workflow: str, payload: Any) -> str:
    definition = require_active(tx, workflow)
    problems = input_problems(definition, payload)
    if problems:
        raise InvalidRequest(
            f"input does not validate against {workflow} version {definition.version}: "
            + "; ".join(problems),
            code="input_invalid",
            errors=problems,
        )
    return definition.version


def _version_policy(value: Any) -> VersionPolicy:
    try:
        return VersionPolicy(value)
    except ValueError:
        raise InvalidRequest(
            "version_policy must be active_at_fire or pinned",
            errors=[{"loc": ["body", "version_policy"], "msg": "enum", "type": "enum"}],
        ) from None


def _next_fire(spec: RecurrenceSpec, after: datetime) -> datetime | None:
    fire = first_fire_after(spec, after)
    return fire.at if fire else None


def create(services: Services, principal: Principal, cmd: CreateSchedule) -> Mutation:
    def mutation(tx: Tx, now: datetime) -> Outcome:
        if not cmd.name or len(cmd.name) > 200:
            raise InvalidRequest("name must be 1 to 200 characters")
        spec = parse_spec(cmd.spec, now)
        policy = parse_policy(
            {
                "overlap": cmd.overlap,
                "missed": cmd.missed,
                "max_catch_up": cmd.max_catch_up,
                "catch_up_window": cmd.catch_up_window,
                "misfire_grace_ms": cmd.misfire_grace_ms,
            }
        )
        version_policy = _version_policy(cmd.version_policy)
        regression = parse_regression(cmd.regression)
        active_version = _check_input(tx, cmd.workflow, cmd.input)
        require(principal, Action.CREATE)
        admit_input_and_class(services, principal.tenant, cmd.workload_class, cmd.input)
        limit = services.policy.tenant_policy(principal.tenant).max_schedules
        tx.schedules.lock_for_create(principal.tenant)  # exact count and name check
        count = tx.schedules.count_live(principal.tenant)
        if count >= limit:
            raise QuotaExceeded(
                f"tenant {principal.tenant} has {count} schedules, its limit is {limit}",
                limit=limit,
                count=count,
                scope="schedules",
            )
        if tx.schedules.name_taken(principal.tenant, cmd.name):
            raise Conflict(
                f"a schedule named {cmd.name!r} already exists in this tenant",
                code="name_taken",
            )
        schedule_id = new_id("sch")
        schedule = tx.schedules.insert(
            NewSchedule(
                id=schedule_id,
                tenant=principal.tenant,
                name=cmd.name,
                workflow=cmd.workflow,
                input=services.codec.encrypt(cmd.input, principal.tenant),
                spec=spec,
                policy=policy,
                enabled=cmd.enabled,
                version_policy=version_policy,
                pinned_version=active_version if version_policy is VersionPolicy.PINNED else None,
                workload_class=cmd.workload_class,
                regression=regression,
                created_by=principal.subject,
                cursor=now,
                next_fire_at=_next_fire(spec, now),
            ),
            now,
        )
        return Outcome(201, schedule_view(schedule, now), resource_id=schedule_id)

    return mutation


def _load(tx: Tx, principal: Principal, schedule_id: str, *, lock: bool = True) -> Schedule:
    schedule = tx.schedules.get(principal.tenant, schedule_id, lock=lock)
    if schedule is None:
        raise not_found("schedule", schedule_id)
    return schedule


def _changed(tx: Tx, schedule: Schedule, now: datetime, **changes: Any) -> Schedule:
    if not tx.schedules.compare_and_set(schedule.id, schedule.version, now, **changes):
        latest = tx.schedules.get(schedule.tenant, schedule.id)
        raise version_conflict("schedule", schedule.id, latest.version if latest else 0)
    updated = tx.schedules.get(schedule.tenant, schedule.id, deleted=True)
    assert updated is not None
    return updated


def _record_dropped_by_edit(tx: Tx, schedule: Schedule, now: datetime) -> None:
    """Fires of the old spec that the runner had not reached when the spec changed are
    recorded as one skipped range, so an edit never drops an occurrence silently."""
    dropped = skipped_range(schedule.spec, schedule.cursor, now, "schedule_edited")
    if dropped is None:
        return
    tx.starts.insert_occurrences(
        [
            NewOccurrence(
                id=new_id("occ"),
                tenant=schedule.tenant,
                schedule_id=schedule.id,
                revision=schedule.revision,
                workflow=schedule.workflow,
                workload_class=schedule.workload_class,
                input=tx.schedules.input_of(schedule.id),
                created_by=schedule.created_by,
                business_request_id=schedule.name,
                occurrence_at=dropped.first,
                due_at=dropped.first,
                nominal=None,
                dst_adjustment=None,
                run_id=new_id("run"),
                state=StartState.SKIPPED.value,
                reason=dropped.reason,
                range_last=dropped.last,
                range_count=dropped.count,
            )
        ],
        now,
    )


def update(services: Services, principal: Principal, cmd: UpdateSchedule) -> Mutation:
    def mutation(tx: Tx, now: datetime) -> Outcome:
        schedule = _load(tx, principal, cmd.schedule_id)
        unknown = sorted(set(cmd.changes) - EDITABLE_FIELDS)
        if unknown:
            raise InvalidRequest(
                f"these fields cannot be changed: {', '.join(unknown)}",
                errors=[
                    {"loc": ["body", k], "msg": "not editable", "type": "extra"} for k in unknown
                ],
            )
        values = _current_values(schedule) | cmd.changes
        changes: dict[str, Any] = {}
        spec = schedule.spec
        if "spec" in cmd.changes:
            spec = parse_spec(cmd.changes["spec"], now)
            changes["spec"] = spec
        policy = parse_policy(values)
        if policy != schedule.policy:
            changes["policy"] = policy
        if "name" in cmd.changes:
            name = cmd.changes["name"]
            if not isinstance(name, str) or not 1 <= len(name) <= 200:
                raise InvalidRequest("name must be 1 to 200 characters")
            changes["name"] = name
        workflow = values["workflow"]
        if "input" in cmd.changes:
            # The request's own input: validation that reads only the request (422).
            _check_input(tx, workflow, cmd.changes["input"])
        elif "workflow" in cmd.changes:
            require_active(tx, workflow)
        if "version_policy" in cmd.changes:
            changes["version_policy"] = _version_policy(cmd.changes["version_policy"]).value
        if "regression" in cmd.changes:
            changes["regression"] = parse_regression(cmd.changes["regression"])
        if "enabled" in cmd.changes:
            if not isinstance(cmd.changes["enabled"], bool):
                raise InvalidRequest("enabled must be true or false")
            changes["enabled"] = cmd.changes["enabled"]
        content_edit = set(cmd.changes) - {"enabled"}
        if content_edit:
            require(principal, Action.EDIT_SCHEDULE, owner=schedule.created_by)
        else:
            require(principal, Action.OPERATE)
        if "workload_class" in cmd.changes:
            admit_input_and_class(services, schedule.tenant, cmd.changes["workload_class"], None)
            changes["workload_class"] = cmd.changes["workload_class"]
        if "input" in cmd.changes:
            admit_input_size(services, schedule.tenant, cmd.changes["input"])
            changes["workflow"] = workflow
            changes["input"] = services.codec.encrypt(cmd.changes["input"], schedule.tenant)
        elif "workflow" in cmd.changes:
            # Needs the stored input, so only after the role and ownership checks: a caller
            # who may not edit learns nothing about it (FT-4).
            stored = services.codec.decrypt(tx.schedules.input_of(schedule.id), schedule.tenant)
            _check_input(tx, workflow, stored)
            changes["workflow"] = workflow
        if schedule.version != cmd.version:
            raise version_conflict("schedule", schedule.id, schedule.version)
        if changes.get("name") and tx.schedules.name_taken(
            schedule.tenant, changes["name"], other_than=schedule.id
        ):
            raise Conflict(
                f"a schedule named {changes['name']!r} already exists", code="name_taken"
            )
        if set(cmd.changes) & _REVISION_FIELDS:
            changes["revision"] = schedule.revision + 1
        if "spec" in changes:
            # RS-5b: continue from max(last occurrence, edit time); nothing re-runs.
            if schedule.cursor < now:
                _record_dropped_by_edit(tx, schedule, now)
            cursor = max(schedule.cursor, now)
            changes["cursor"] = cursor
            changes["next_fire_at"] = _next_fire(spec, cursor)
        elif changes.get("enabled") is True and not schedule.enabled:
            changes["next_fire_at"] = _next_fire(spec, schedule.cursor)
        if "version_policy" in changes or "workflow" in changes:
            pinned = changes.get("version_policy", schedule.version_policy.value) == "pinned"
            active = require_active(tx, workflow).version if pinned else None
            changes["pinned_version"] = active
        updated = _changed(tx, schedule, now, **changes)
        return Outcome(200, schedule_view(updated, now), resource_id=schedule.id)

    return mutation


def _current_values(schedule: Schedule) -> dict[str, Any]:
    window = schedule.policy.catch_up_window
    return {
        "workflow": schedule.workflow,
        "overlap": schedule.policy.overlap.value,
        "missed": schedule.policy.missed.value,
        "max_catch_up": schedule.policy.max_catch_up,
        "catch_up_window": window.total_seconds() if window is not None else None,
        "misfire_grace_ms": int(schedule.policy.misfire_grace.total_seconds() * 1000),
    }


def set_enabled(
    services: Services, principal: Principal, schedule_id: str, version: int, enabled: bool
) -> Mutation:
    """Pause keeps the cursor; resume applies the missed policy from it (RS-6)."""
    return update(services, principal, UpdateSchedule(schedule_id, version, {"enabled": enabled}))


def delete(services: Services, principal: Principal, schedule_id: str, version: int) -> Mutation:
    """Cancels unstarted occurrences (``schedule_deleted``), leaves runs, keeps history."""
    del services

    def mutation(tx: Tx, now: datetime) -> Outcome:
        schedule = _load(tx, principal, schedule_id)
        require(principal, Action.EDIT_SCHEDULE, owner=schedule.created_by)
        if schedule.version != version:
            raise version_conflict("schedule", schedule.id, schedule.version)
        _changed(tx, schedule, now, enabled=False, deleted_at=now, next_fire_at=None)
        tx.starts.cancel_unstarted(schedule.id, "schedule_deleted", now)
        return Outcome(204, None, resource_id=schedule.id)

    return mutation


def get(services: Services, principal: Principal, schedule_id: str) -> dict[str, Any]:
    now = services.clock.now()
    with services.store.transaction(readonly=True) as tx:
        return schedule_view(_load(tx, principal, schedule_id, lock=False), now)


def list_schedules(
    services: Services, principal: Principal, limit: int, cursor: str | None
) -> dict[str, Any]:
    limit = check_limit(limit)
    now = services.clock.now()
    with services.store.transaction(readonly=True) as tx:
        rows = tx.schedules.find(principal.tenant, decode_cursor(cursor), limit + 1)
    return page(rows, limit, lambda schedule: schedule_view(schedule, now))


def list_occurrences(
    services: Services, principal: Principal, query: ListOccurrences
) -> dict[str, Any]:
    limit = check_limit(query.limit)
    check_choice("state", query.state, [s.value for s in StartState])
    with services.store.transaction(readonly=True) as tx:
        if tx.schedules.get(principal.tenant, query.schedule_id, deleted=True) is None:
            raise not_found("schedule", query.schedule_id)
        rows = tx.starts.find_occurrences(
            query.schedule_id, query.state, decode_cursor(query.cursor), limit + 1
        )
        follows = tx.follow_through.get_many([o.id for _, o in rows[:limit]])
    return page(rows, limit, lambda o: occurrence_view(o, follows.get(o.id)))


def cancel_occurrence(
    services: Services, principal: Principal, schedule_id: str, occurrence_id: str, version: int
) -> Mutation:
    del services

    def mutation(tx: Tx, now: datetime) -> Outcome:
        occurrence = tx.starts.get_occurrence(
            principal.tenant, schedule_id, occurrence_id, lock=True
        )
        if occurrence is None:
            raise not_found("occurrence", occurrence_id)
        require(principal, Action.OPERATE)
        check_mutable(occurrence, version)
        changes = {
            "state": StartState.CANCELED.value,
            "reason": "canceled",
            "claimed_by": None,
            "lease_until": None,
        }
        if not tx.starts.compare_and_set(occurrence.id, occurrence.version, now, **changes):
            latest = tx.starts.get_occurrence(principal.tenant, schedule_id, occurrence_id)
            assert latest is not None
            check_mutable(latest, version)
        updated = tx.starts.get_occurrence(principal.tenant, schedule_id, occurrence_id)
        assert updated is not None
        return Outcome(200, occurrence_view(updated), resource_id=occurrence_id)

    return mutation


def preview(
    spec_data: dict[str, Any], after: datetime, count: int = PREVIEW_DEFAULT_COUNT
) -> dict[str, Any]:
    """Fire times strictly after ``after`` for any spec, DST decisions included (RS-8)."""
    if not 1 <= count <= 100:
        raise InvalidRequest(
            "count must be between 1 and 100",
            errors=[{"loc": ["query", "count"], "msg": "1..100", "type": "range"}],
        )
    spec = parse_spec(spec_data, after)
    return {"items": [fire_view(fire) for fire in next_fires(spec, after, count)]}
