"""Schedule controls (RS-9): trigger now, backfill a past range, and upsert by name.

* ``trigger``: one occurrence at the current millisecond (the next free one if taken),
  origin ``trigger``, under the schedule's overlap policy or the one the request names;
  allowed while paused or ended; idempotent by its key like every mutation.
* ``backfill``: the fire times the spec and DST policy give in ``(from, to]`` become
  occurrences, origin ``backfill``, except where a live or finished occurrence already
  holds the instant (``domain.schedules.plan_backfill``). Without a named overlap policy
  they wait (``buffered``) and dispatch one after another in ``occurrence_at`` order;
  unstarted, they count against the tenant's pending-start quota.
* ``upsert_by_name``: ``PUT …/schedules/by-name/{name}`` creates the schedule, changes
  the fields that differ, or changes nothing; ``plan_by_name`` is its dry run, the plan a
  ``punctual schedules apply`` prints. An omitted ``enabled`` keeps the schedule's own,
  so applying a file never re-enables a paused or auto-disabled schedule.

Trigger and backfill take no ``version`` and leave it alone: they add occurrences, they
do not edit the schedule. Check order (API.md): existence, validation that reads only the
request, role, checks that need stored input, state, version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from punctual.domain.calendar_timeline import ScheduleSpec
from punctual.domain.permissions import Action, Principal, require
from punctual.domain.recurrence import IntervalSpec
from punctual.domain.schedules import (
    BackfillItem,
    BackfillRange,
    BackfillTooLarge,
    OccurrenceOrigin,
    OverlapPolicy,
    Schedule,
    StoredInstant,
    backfill_fires,
    check_backfill_range,
    plan_backfill,
    spec_to_json,
    trigger_instant,
)
from punctual.domain.starts import ScheduledStart, StartState
from punctual.domain.timeutil import parse_rfc3339, require_aware, to_rfc3339
from punctual.errors import InvalidRequest, QuotaExceeded, not_found, version_conflict
from punctual.ports.records import EncryptedInput, NewOccurrence, NewSchedule
from punctual.ports.store import Tx
from punctual.usecases.firing import schedule_driver
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import Answer, Mutation, Outcome
from punctual.usecases.kernel.projections import occurrence_view, schedule_view
from punctual.usecases.recurring import history
from punctual.usecases.recurring.occurrence_rows import new_occurrence
from punctual.usecases.recurring.schedule_fields import (
    FIELDS,
    INPUT,
    UpdateSchedule,
    UpsertByName,
)
from punctual.usecases.recurring.schedules import (
    UpdatePlan,
    apply_update,
    decide_create,
    decide_update,
)

_TAKEN_WINDOW = timedelta(seconds=1)
"""How far past now a trigger looks for a free millisecond (one per trigger is plenty)."""


def _load(tx: Tx, principal: Principal, schedule_id: str) -> Schedule:
    """The live schedule, locked: every writer of a schedule's occurrences holds it, so no
    instant ever gets two live occurrences."""
    schedule = tx.schedules.get(principal.tenant, schedule_id, lock=True)
    if schedule is None:
        raise not_found("schedule", schedule_id)
    return schedule


def _named_overlap(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return OverlapPolicy(value).value
    except ValueError:
        raise InvalidRequest(
            f"overlap must be one of {', '.join(p.value for p in OverlapPolicy)}",
            errors=[{"loc": ["body", "overlap"], "msg": "not an allowed value", "type": "enum"}],
        ) from None


# --- trigger (RS-9a) ----------------------------------------------------------------------


@dataclass(frozen=True)
class TriggerSchedule:
    schedule_id: str
    overlap: str | None = None
    """The overlap policy this occurrence is dispatched under; None: the schedule's."""


def trigger(services: Services, principal: Principal, cmd: TriggerSchedule) -> Mutation:
    """``201`` with the occurrence, due now."""

    def mutation(tx: Tx, now: datetime) -> Outcome:
        schedule = _load(tx, principal, cmd.schedule_id)
        overlap = _named_overlap(cmd.overlap)
        require(principal, Action.CREATE)
        nearby = tx.starts.occurrences_between(
            schedule.id, now - _TAKEN_WINDOW, now + _TAKEN_WINDOW
        )
        taken = {row.occurrence.occurrence_at for row in nearby}
        instant = trigger_instant(now, {at for at in taken if at is not None})
        new = new_occurrence(
            schedule,
            tx.schedules.input_of(schedule.id),
            instant,
            instant,
            origin=OccurrenceOrigin.TRIGGER,
            overlap=overlap,
        )
        tx.starts.insert_occurrences([new], now)
        tx.starts.notify_due()
        created = tx.starts.get_occurrence(schedule.tenant, schedule.id, new.id)
        assert created is not None
        return Outcome(Answer.CREATED, occurrence_view(created), resource_id=new.id)

    return mutation


# --- backfill (RS-9b) ---------------------------------------------------------------------


@dataclass(frozen=True)
class BackfillSchedule:
    schedule_id: str
    start: datetime | str
    """``from``: the range is ``(start, end]``."""
    end: datetime | str
    """``to``: not in the future."""
    overlap: str | None = None
    """None: the backfilled occurrences dispatch one after another."""


def _instant(value: datetime | str, name: str) -> datetime:
    try:
        return parse_rfc3339(value) if isinstance(value, str) else require_aware(value)
    except (TypeError, ValueError, AttributeError, OverflowError):
        raise InvalidRequest(
            f"{name} must be an RFC 3339 timestamp with an offset, e.g. 2026-11-23T00:00:00Z",
            code="backfill_range_invalid",
            field=name,
        ) from None


def backfill(services: Services, principal: Principal, cmd: BackfillSchedule) -> Mutation:
    """``200 {"generated", "existing", "items"}``: every fire time of the range, in order,
    as the occurrence that now holds it."""

    def mutation(tx: Tx, now: datetime) -> Outcome:
        schedule = _load(tx, principal, cmd.schedule_id)
        start, end = _instant(cmd.start, "from"), _instant(cmd.end, "to")
        try:
            check_backfill_range(start, end, now)
        except BackfillRange as exc:
            raise InvalidRequest(
                str(exc), code="backfill_range_invalid", to=to_rfc3339(end)
            ) from None
        overlap = _named_overlap(cmd.overlap)
        require(principal, Action.EDIT_SCHEDULE, owner=schedule.created_by)
        try:
            fires = backfill_fires(schedule.timing, start, end)
        except BackfillTooLarge as exc:
            raise InvalidRequest(str(exc), code="backfill_too_large", limit=1_000) from None
        stored = tx.starts.occurrences_between(schedule.id, start, end)
        plan = plan_backfill(fires, [_stored_instant(row.occurrence, row.rerun) for row in stored])
        generated = [item for item in plan if item.existing_id is None]
        _admit(services, tx, schedule, len(generated))
        sealed = tx.schedules.input_of(schedule.id)
        new = [_backfilled(schedule, sealed, item, now, overlap) for item in generated]
        tx.starts.insert_occurrences(new, now)
        if new:
            tx.starts.release_buffered(now)
            tx.starts.notify_due()
        rows = {
            row.occurrence.id: row.occurrence
            for row in tx.starts.occurrences_between(schedule.id, start, end)
        }
        new_ids = iter(occurrence.id for occurrence in new)
        items = [occurrence_view(rows[item.existing_id or next(new_ids)]) for item in plan]
        body = {"generated": len(new), "existing": len(plan) - len(new), "items": items}
        return Outcome(Answer.DONE, body, resource_id=schedule.id)

    return mutation


def _stored_instant(occurrence: ScheduledStart, rerun: int) -> StoredInstant:
    assert occurrence.occurrence_at is not None
    return StoredInstant(
        occurrence.id,
        occurrence.occurrence_at,
        occurrence.state.value,
        rerun,
        occurrence.range_last,
    )


def _backfilled(
    schedule: Schedule,
    sealed: EncryptedInput,
    item: BackfillItem,
    now: datetime,
    overlap: str | None,
) -> NewOccurrence:
    """Due now; without a named overlap policy it waits its turn (``buffered``)."""
    fire = item.fire
    return new_occurrence(
        schedule,
        sealed,
        fire.at,
        now,
        nominal=fire.nominal.isoformat(),
        dst_adjustment=fire.dst_adjustment.value if fire.dst_adjustment else None,
        origin=OccurrenceOrigin.BACKFILL,
        overlap=overlap,
        state=StartState.SCHEDULED if overlap is not None else StartState.BUFFERED,
        rerun=item.rerun,
        spec_indexes=fire.spec_indexes,
        calendar_moved_from=fire.moved_from,
    )


def _admit(services: Services, tx: Tx, schedule: Schedule, count: int) -> None:
    """Backfilled occurrences are pending starts until they start (RS-9b, QA-1): all of
    them fit under the tenant's quota, or none is generated."""
    if count == 0:
        return
    limits = services.policy.tenant_policy(schedule.tenant)
    answers = services.quota.admit_starts(
        tx,
        schedule.tenant,
        [schedule.workload_class] * count,
        limits.max_pending_starts,
        limits.max_pending_by_class,
    )
    index, refusal = next(
        ((i, answer) for i, answer in enumerate(answers) if answer is not None), (0, None)
    )
    if isinstance(refusal, QuotaExceeded):
        # The controller counted this backfill's earlier occurrences as admitted.
        pending = int(refusal.details["count"]) - index
        raise QuotaExceeded(
            f"tenant {schedule.tenant} has {pending} pending starts and its limit is "
            f"{refusal.details['limit']}; this backfill would add {count}. Backfill a "
            "shorter range, or wait for pending starts to dispatch",
            **{**refusal.details, "count": pending, "requested": count},
        )
    if refusal is not None:
        raise refusal


# --- declarative schedules (RS-9e) --------------------------------------------------------


class UpsertAction(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class UpsertPlan:
    action: UpsertAction
    changed_fields: list[str]
    create: NewSchedule | None = None
    update: UpdatePlan | None = None
    schedule: Schedule | None = None
    """The schedule as it is (update and unchanged)."""

    def view(self) -> dict[str, Any]:
        return {"action": self.action.value, "changed_fields": list(self.changed_fields)}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _same_spec(stored: ScheduleSpec, desired: ScheduleSpec) -> bool:
    """An interval without ``starts_at`` keeps the stored one: its default (one interval
    after now) would otherwise differ on every apply."""
    if (
        isinstance(desired, IntervalSpec)
        and desired.starts_at is None
        and isinstance(stored, IntervalSpec)
    ):
        return desired.interval_ms == stored.interval_ms
    return spec_to_json(desired) == spec_to_json(stored)


def _changed_fields(
    services: Services, tx: Tx, schedule: Schedule, cmd: UpsertByName
) -> dict[str, Any]:
    """The fields whose desired value differs from the stored one, with the desired value
    (a ``kept`` field the body omits is not compared). Reads the stored input: call only
    after the role check (FT-4)."""
    stored, desired = schedule.settings, cmd.create.settings
    changes = {
        f.name: f.read(desired)
        for f in FIELDS
        if f.name not in ("spec", "specs")
        and (f.name in cmd.sent or not f.kept)
        and f.read(desired) != f.read(stored)
    }
    if len(stored.specs) != len(desired.specs) or not all(
        _same_spec(old, new) for old, new in zip(stored.specs, desired.specs, strict=True)
    ):
        # One spec before and after is named as the body names it; several, as specs.
        one = len(stored.specs) == len(desired.specs) == 1
        changes.update({"spec": desired.spec} if one else {"specs": desired.specs})
    stored_input = services.codec.decrypt(tx.schedules.input_of(schedule.id), schedule.tenant)
    if _canonical(cmd.create.input) != _canonical(stored_input):
        changes[INPUT] = cmd.create.input
    return changes


def plan_upsert(
    services: Services, principal: Principal, cmd: UpsertByName, tx: Tx, now: datetime
) -> UpsertPlan:
    """Decide create, update (with the changed fields) or unchanged, every check passed;
    nothing is written. The tenant's create lock comes first: a concurrent ``PUT`` or
    create of the same new name then commits before this one looks the name up, so two
    ``PUT``s of one new name converge (one creates, the other updates or changes nothing)
    instead of one losing to the unique index."""
    tx.schedules.lock_for_create(principal.tenant)
    schedule = tx.schedules.by_name(principal.tenant, cmd.create.settings.name, lock=True)
    if schedule is None:
        return UpsertPlan(
            UpsertAction.CREATE, [], create=decide_create(services, principal, cmd.create, tx, now)
        )
    require(principal, Action.EDIT_SCHEDULE, owner=schedule.created_by)
    changes = _changed_fields(services, tx, schedule, cmd)
    if not changes:
        if cmd.version is not None and cmd.version != schedule.version:
            raise version_conflict("schedule", schedule.id, schedule.version)
        return UpsertPlan(UpsertAction.UNCHANGED, [], schedule=schedule)
    update = decide_update(
        services,
        principal,
        UpdateSchedule(schedule.id, cmd.version or schedule.version, changes),
        tx,
        now,
        schedule=schedule,
        revise_on_content=True,
    )
    return UpsertPlan(UpsertAction.UPDATE, sorted(changes), update=update, schedule=schedule)


def upsert_by_name(services: Services, principal: Principal, cmd: UpsertByName) -> Mutation:
    """``201`` created, ``200`` updated (a new version and revision) or ``200`` unchanged;
    the schedule's view carries ``"changed"``."""

    def mutation(tx: Tx, now: datetime) -> Outcome:
        changed = {"changed": True}
        resumed = schedule_driver.resumable(
            services, tx, principal.tenant, cmd.create.settings.name
        )
        if resumed is not None:
            return schedule_driver.created(services, tx, resumed, now, extra=changed)
        plan = plan_upsert(services, principal, cmd, tx, now)
        # The firing driver sees every change a PUT makes, as it sees POST and PATCH (CR-6);
        # what it cannot honour was refused by the plan's decide_create or decide_update.
        if plan.create is not None:
            created = tx.schedules.insert(plan.create, now)
            history.created(tx, created, principal.subject)
            return schedule_driver.created(services, tx, created, now, extra=changed)
        if plan.update is not None:
            updated = apply_update(tx, plan.update, now)
            schedule_driver.ensure_on_change(services, tx, updated, now)
            body = schedule_driver.view(services, tx, updated, now) | {"changed": True}
            return Outcome(Answer.DONE, body, resource_id=updated.id)
        assert plan.schedule is not None
        body = schedule_driver.view(services, tx, plan.schedule, now) | {"changed": False}
        return Outcome(Answer.DONE, body, resource_id=plan.schedule.id)

    return mutation


def plan_by_name(services: Services, principal: Principal, cmd: UpsertByName) -> dict[str, Any]:
    """The dry run: ``{"action", "changed_fields"}``, with the errors the apply would
    answer; stores nothing (it needs no idempotency key)."""
    now = services.clock.now()
    with services.store.transaction() as tx:
        return plan_upsert(services, principal, cmd, tx, now).view()


def get_by_name(services: Services, principal: Principal, name: str) -> dict[str, Any]:
    now = services.clock.now()
    with services.store.transaction(readonly=True) as tx:
        schedule = tx.schedules.by_name(principal.tenant, name)
    if schedule is None:
        raise not_found("schedule", name)
    return schedule_view(schedule, now)
