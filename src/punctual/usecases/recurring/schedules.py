"""Recurring schedules: create, read, edit, pause/resume, delete, occurrences, preview (RS-*).

Every mutation is a function ``(tx, now) -> Outcome`` built from a frozen command, run by
the same idempotency mechanism as starts. Check order (API.md): existence, validation that
reads only the request, role, checks that need stored input (FT-4), state, version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from punctual.domain.ids import new_id
from punctual.domain.permissions import Action, Principal, require
from punctual.domain.schedules import (
    SETTINGS,
    OccurrenceOrigin,
    Schedule,
    SkippedRange,
    VersionPolicy,
    has_ended,
    next_bounded_fire,
    preview_timing,
    recorded_skips,
    remaining_occurrences,
    skipped_range,
)
from punctual.domain.starts import StartState, check_mutable
from punctual.errors import Conflict, InvalidRequest, QuotaExceeded, not_found, version_conflict
from punctual.ports.records import NewSchedule, OccurrenceFilter, Order
from punctual.ports.store import Tx
from punctual.usecases.firing import schedule_driver
from punctual.usecases.kernel.admission import admit_input_and_class, admit_input_size
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import Answer, Mutation, Outcome
from punctual.usecases.kernel.paging import check_choice, page, seek, shown
from punctual.usecases.kernel.projections import (
    occurrence_view,
    planned_fire_view,
    preview_skip_view,
)
from punctual.usecases.recurring import history
from punctual.usecases.recurring.occurrence_rows import dst_gap_row, skipped_range_row
from punctual.usecases.recurring.schedule_fields import (
    INPUT,
    REVISING,
    CreateSchedule,
    UpdateSchedule,
    check_end_at,
    check_jitter,
    check_pause_until,
    decode_blackouts,
    decode_timing,
    settle_timing,
    whole_second,
)
from punctual.usecases.running.definitions import input_problems, require_active
from punctual.usecases.running.followthrough import SCHEDULE_FAILING

PREVIEW_DEFAULT_COUNT = 10
TIMING_FIELDS = frozenset({"spec", "specs", "calendar"})
"""The fields of a body that say when the schedule fires."""
TIMING_SETTINGS = frozenset({"specs", "calendar"})
"""Where ``ScheduleSettings`` keeps them: a change of any moves the cursor (RS-5b)."""


@dataclass(frozen=True)
class ListOccurrences:
    schedule_id: str
    state: str | None = None
    limit: int = 50
    cursor: str | None = None
    order: str | None = None
    """``newest`` (the default) or ``oldest``; absent with a cursor, the cursor's order."""
    origin: str | None = None
    """``schedule``, ``trigger`` or ``backfill``."""
    start: datetime | None = None
    end: datetime | None = None
    """``[start, end)`` (the API's ``from`` and ``to``): occurrences whose instant, or an
    instant of whose skipped range, falls in it."""


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


def decide_create(
    services: Services, principal: Principal, cmd: CreateSchedule, tx: Tx, now: datetime
) -> NewSchedule:
    """Every check of a create, in the contract's order, and the row it would insert;
    nothing is written (the dry run of ``PUT …/by-name`` stops here)."""
    settings = settle_timing(cmd.settings, whole_second(now))
    check_end_at(settings.end_at, now)
    check_pause_until(settings.pause_until, now)
    check_jitter(settings.policy.jitter, settings.timing, now)
    schedule_driver.check_supported(
        services, settings.timing, settings.policy, pause_until=settings.pause_until
    )
    active_version = _check_input(tx, settings.workflow, cmd.input)
    require(principal, Action.CREATE)
    admit_input_and_class(services, principal.tenant, settings.workload_class, cmd.input)
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
    if tx.schedules.name_taken(principal.tenant, settings.name):
        raise Conflict(
            f"a schedule named {settings.name!r} already exists in this tenant",
            code="name_taken",
        )
    pinned = settings.version_policy is VersionPolicy.PINNED
    return NewSchedule(
        id=new_id("sch"),
        tenant=principal.tenant,
        settings=settings,
        input=services.codec.encrypt(cmd.input, principal.tenant),
        pinned_version=active_version if pinned else None,
        created_by=principal.subject,
        cursor=now,
        next_fire_at=next_bounded_fire(
            settings.timing, now, settings.end_at, settings.max_occurrences
        ),
    )


def create(services: Services, principal: Principal, cmd: CreateSchedule) -> Mutation:
    def mutation(tx: Tx, now: datetime) -> Outcome:
        resumed = schedule_driver.resumable(services, tx, principal.tenant, cmd.settings.name)
        if resumed is not None:
            return schedule_driver.created(services, tx, resumed, now)
        new = decide_create(services, principal, cmd, tx, now)
        inserted = tx.schedules.insert(new, now)
        history.created(tx, inserted, principal.subject)
        return schedule_driver.created(services, tx, inserted, now)

    return mutation


def _load(tx: Tx, principal: Principal, schedule_id: str, *, lock: bool = True) -> Schedule:
    schedule = tx.schedules.get(principal.tenant, schedule_id, lock=lock)
    if schedule is None:
        raise not_found("schedule", schedule_id)
    return schedule


def _changed(tx: Tx, schedule: Schedule, now: datetime, by: str, **changes: Any) -> Schedule:
    if not tx.schedules.compare_and_set(schedule.id, schedule.version, now, **changes):
        latest = tx.schedules.get(schedule.tenant, schedule.id)
        raise version_conflict("schedule", schedule.id, latest.version if latest else 0)
    updated = tx.schedules.get(schedule.tenant, schedule.id, deleted=True)
    assert updated is not None
    history.changed(tx, schedule, updated, now, by)
    return updated


def _dropped_by_edit(schedule: Schedule, now: datetime) -> SkippedRange | None:
    """Fires of the old spec that the runner had not reached when the spec changed (as
    far as the schedule's end allows): recorded as one skipped range, so an edit never
    drops an occurrence silently, and counted like a missed range (RS-9c)."""
    if schedule.cursor >= now:
        return None
    until = now if schedule.end_at is None else min(now, schedule.end_at)
    return skipped_range(
        schedule.timing,
        schedule.cursor,
        until,
        "schedule_edited",
        limit=schedule.remaining_occurrences,
    )


def _record_dropped(
    tx: Tx, schedule: Schedule, dropped: SkippedRange | None, now: datetime
) -> None:
    """The old timing's fires the edit dropped, and the closed days and DST gaps of the
    same stretch, recorded as generation would have (the audit finds each decided)."""
    if schedule.cursor >= now:
        return
    until = now if schedule.end_at is None else min(now, schedule.end_at)
    left = schedule.remaining_occurrences
    if left == 0:
        return  # it had ended: nothing after its last fire is the schedule's
    if dropped is not None and left is not None and dropped.count >= left:
        until = dropped.last  # its last fire: it ends there
    dst, closed = recorded_skips(schedule.timing, schedule.cursor, until)
    sealed = tx.schedules.input_of(schedule.id)
    rows = [
        skipped_range_row(schedule, sealed, r) for r in [*([dropped] if dropped else []), *closed]
    ]
    rows += [dst_gap_row(schedule, sealed, skip) for skip in dst]
    if rows:
        tx.starts.insert_occurrences(rows, now)


@dataclass(frozen=True)
class UpdatePlan:
    """What an edit changes, decided with every check passed; ``apply_update`` writes it."""

    schedule: Schedule
    changes: dict[str, Any]
    dropped: SkippedRange | None
    by: str
    """Who edits it (the schedule's history names them)."""


def decide_update(
    services: Services,
    principal: Principal,
    cmd: UpdateSchedule,
    tx: Tx,
    now: datetime,
    *,
    schedule: Schedule | None = None,
    revise_on_content: bool = False,
) -> UpdatePlan:
    """Every check of an edit, in the contract's order, and the changes it makes; nothing
    is written. ``revise_on_content`` starts a new revision for any content edit (an
    upsert by name), not only for spec, workflow or input (PATCH, RS-5b)."""
    if schedule is None:
        schedule = _load(tx, principal, cmd.schedule_id)
    sent = set(cmd.changes)
    desired = cmd.apply(schedule.settings)
    timing_sent = bool(TIMING_FIELDS & sent)
    if timing_sent:
        desired = settle_timing(desired, whole_second(now))
    timing = desired.timing
    if "jitter_ms" in sent or (timing_sent and desired.policy.jitter):
        check_jitter(desired.policy.jitter, timing, now)
    stored = not timing_sent  # kept as it is: as the driver honours records
    schedule_driver.check_supported(
        services, timing, desired.policy, pause_until=desired.pause_until, stored=stored
    )
    if "end_at" in sent:
        check_end_at(desired.end_at, now)
    if "pause_until" in sent:
        check_pause_until(desired.pause_until, now)
    # Every setting the edit touches; the policy only when it differs (one value, many fields).
    changes: dict[str, Any] = {
        name: getattr(desired, name)
        for name in SETTINGS
        if getattr(desired, name) != getattr(schedule, name) or name in sent
    }
    if desired.policy == schedule.policy:
        changes.pop("policy", None)
    changes.pop("workflow", None)  # decided below, with the input it must accept
    changes.pop("workload_class", None)  # decided below, once it is admitted
    end_at, max_occurrences = desired.end_at, desired.max_occurrences
    workflow = desired.workflow
    if INPUT in sent:
        # The request's own input: validation that reads only the request (422).
        _check_input(tx, workflow, cmd.changes[INPUT])
    elif "workflow" in sent:
        require_active(tx, workflow)
    content_edit = set(cmd.changes) - {"enabled", "pause_until"}  # operating it (CR-2)
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
    timing_changed = bool(TIMING_SETTINGS & set(changes))
    dropped = _dropped_by_edit(schedule, now) if timing_changed else None
    fires_counted = schedule.fires_counted + (dropped.count if dropped else 0)
    remaining = remaining_occurrences(max_occurrences, fires_counted)
    cursor = max(schedule.cursor, now) if timing_changed else schedule.cursor
    enabling = changes.get("enabled") is True
    if enabling and has_ended(timing, cursor, end_at, remaining):
        raise Conflict(
            f"schedule {schedule.id} has ended (its end_at or max_occurrences is reached); "
            "extend it with a PATCH of end_at or max_occurrences",
            code="invalid_state",
            state="ended",
        )
    if schedule.version != cmd.version:
        raise version_conflict("schedule", schedule.id, schedule.version)
    if changes.get("name") and tx.schedules.name_taken(
        schedule.tenant, changes["name"], other_than=schedule.id
    ):
        raise Conflict(f"a schedule named {changes['name']!r} already exists", code="name_taken")
    revised = sent & REVISING
    if revise_on_content:
        revised = content_edit - {"source"}
    if revised:
        changes["revision"] = schedule.revision + 1
    if timing_changed:
        # RS-5b: continue from max(last occurrence, edit time); nothing re-runs.
        changes["cursor"] = cursor
        if dropped is not None:
            changes["fires_counted"] = fires_counted
    # Blackouts and a timed pause decide which fires run: the next pass looks again.
    bounds_moved = (
        timing_changed
        or bool({"end_at", "max_occurrences"} & set(changes))
        or bool({"blackouts", "pause_until"} & set(sent))
    )
    if bounds_moved or (enabling and not schedule.enabled):
        changes["next_fire_at"] = next_bounded_fire(timing, cursor, end_at, remaining)
    if "version_policy" in changes or "workflow" in changes:
        pinned = changes.get("version_policy", schedule.version_policy) is VersionPolicy.PINNED
        active = require_active(tx, workflow).version if pinned else None
        changes["pinned_version"] = active
    return UpdatePlan(schedule, changes, dropped, principal.subject)


def apply_update(tx: Tx, plan: UpdatePlan, now: datetime) -> Schedule:
    if TIMING_SETTINGS & set(plan.changes):
        _record_dropped(tx, plan.schedule, plan.dropped, now)
    return _changed(tx, plan.schedule, now, plan.by, **plan.changes)


def update(services: Services, principal: Principal, cmd: UpdateSchedule) -> Mutation:
    def mutation(tx: Tx, now: datetime) -> Outcome:
        updated = apply_update(tx, decide_update(services, principal, cmd, tx, now), now)
        schedule_driver.ensure_on_change(services, tx, updated, now)
        body = schedule_driver.view(services, tx, updated, now)
        return Outcome(Answer.DONE, body, resource_id=updated.id)

    return mutation


def set_enabled(
    services: Services, principal: Principal, schedule_id: str, version: int, enabled: bool
) -> Mutation:
    """Pause keeps the cursor; resume applies the missed policy from it (RS-6)."""
    changes: dict[str, Any] = {"enabled": enabled}
    if enabled:
        changes["pause_until"] = None  # resuming ends a timed pause too
    return update(services, principal, UpdateSchedule(schedule_id, version, changes))


def delete(services: Services, principal: Principal, schedule_id: str, version: int) -> Mutation:
    """Cancels unstarted occurrences (``schedule_deleted``), leaves runs, keeps history,
    clears its ``schedule_failing`` finding. Under a firing driver its copy there goes
    first (CR-6: never a firing ghost)."""

    def mutation(tx: Tx, now: datetime) -> Outcome:
        schedule = _load(tx, principal, schedule_id)
        require(principal, Action.EDIT_SCHEDULE, owner=schedule.created_by)
        if schedule.version != version:
            raise version_conflict("schedule", schedule.id, schedule.version)
        schedule_driver.remove_before_delete(services, tx, schedule.id)
        _changed(
            tx, schedule, now, principal.subject, enabled=False, deleted_at=now, next_fire_at=None
        )
        tx.starts.cancel_unstarted(schedule.id, "schedule_deleted", now)
        # A deleted schedule fails no more: nothing is left for an operator to act on.
        tx.findings.clear(schedule.tenant, SCHEDULE_FAILING, schedule.id)
        return Outcome(Answer.REMOVED, None, resource_id=schedule.id)

    return mutation


def get(services: Services, principal: Principal, schedule_id: str) -> dict[str, Any]:
    now = services.clock.now()
    with services.store.transaction(readonly=True) as tx:
        schedule = _load(tx, principal, schedule_id, lock=False)
        return schedule_driver.view(services, tx, schedule, now)


def list_schedules(
    services: Services,
    principal: Principal,
    limit: int,
    cursor: str | None,
    source: str | None = None,
    order: str | None = None,
) -> dict[str, Any]:
    """A page of live schedules, newest first unless ``order`` is ``oldest``; ``source``
    keeps those last applied from that file (what ``punctual schedules apply --prune``
    considers, RS-9e)."""
    at = seek(limit, cursor, order, legacy=Order.OLDEST)
    now = services.clock.now()
    with services.store.transaction(readonly=True) as tx:
        rows = tx.schedules.find(principal.tenant, at, source)
        views = schedule_driver.views(services, tx, [s for _, s in shown(rows, at)], now)
    by_id = {view["id"]: view for view in views}
    return page(rows, at, lambda schedule: by_id[schedule.id])


def list_occurrences(
    services: Services, principal: Principal, query: ListOccurrences
) -> dict[str, Any]:
    with services.store.transaction(readonly=True) as tx:
        # Existence first (404), then what the request itself says (422): API.md's order.
        if tx.schedules.get(principal.tenant, query.schedule_id, deleted=True) is None:
            raise not_found("schedule", query.schedule_id)
        at = seek(query.limit, query.cursor, query.order, legacy=Order.OLDEST)
        check_choice("state", query.state, [s.value for s in StartState])
        check_choice("origin", query.origin, [o.value for o in OccurrenceOrigin])
        if query.start is not None and query.end is not None and query.start >= query.end:
            message = "from must be before to: the range is [from, to)"
            raise InvalidRequest(
                message, errors=[{"loc": ["query", "from"], "msg": message, "type": "range"}]
            )
        where = OccurrenceFilter(query.state, query.origin, query.start, query.end)
        rows = tx.starts.find_occurrences(query.schedule_id, where, at)
        follows = tx.follow_through.get_many([o.id for _, o in shown(rows, at)])
    return page(rows, at, lambda o: occurrence_view(o, follows.get(o.id)))


def occurrences_since(
    services: Services, principal: Principal, schedule_id: str, since: datetime, limit: int
) -> tuple[list[dict[str, Any]], bool]:
    """The views of the schedule's occurrences from ``since`` on (and the skipped ranges
    that reach into it), newest first, at most ``limit``, and whether there were more: what
    a timeline of a window draws, read by instant whatever the history behind it."""
    with services.store.transaction(readonly=True) as tx:
        if tx.schedules.get(principal.tenant, schedule_id, deleted=True) is None:
            raise not_found("schedule", schedule_id)
        rows = tx.starts.occurrences_since(schedule_id, since, limit + 1)
        before = [o for o in rows if o.occurrence_at is not None and o.occurrence_at < since]
        earlier = {o.id for o in before}
        inside = [o for o in rows if o.id not in earlier]
        more = len(inside) > limit
        kept = [*inside[:limit], *before]
        follows = tx.follow_through.get_many([o.id for o in kept])
    return [occurrence_view(o, follows.get(o.id)) for o in kept], more


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
        return Outcome(Answer.DONE, occurrence_view(updated), resource_id=occurrence_id)

    return mutation


def preview(
    fields: Mapping[str, Any], after: datetime, count: int = PREVIEW_DEFAULT_COUNT
) -> dict[str, Any]:
    """Fire times strictly after ``after`` for any schedule's timing fields (``spec`` or
    ``specs``, ``calendar``, ``blackouts``), DST, calendar and blackout decisions
    included (RS-8, RS-10): what generation will decide."""
    if not 1 <= count <= 100:
        raise InvalidRequest(
            "count must be between 1 and 100",
            errors=[{"loc": ["query", "count"], "msg": "1..100", "type": "range"}],
        )
    timing = decode_timing(fields, after)
    blackouts = decode_blackouts(fields.get("blackouts") or [])
    fires, skips = preview_timing(timing, blackouts, after, count)
    return {
        "items": [planned_fire_view(fire) for fire in fires],
        "skipped": [preview_skip_view(skip) for skip in skips],
    }
