"""Keeping the firing driver in step with the store, and firing for it (SPEC CR-6, CR-7).

The store is the source of truth. Under the Temporal Schedules driver every schedule is
also a Temporal Schedule:

* **create** is a saga in the contract's order: the record is stored (its sync
  ``creating``, with the token of the request), then, outside any transaction, the
  Temporal Schedule is ensured, and a second transaction marks it ``in_sync`` and answers
  ``201``. If Temporal fails, the record is removed and the answer is ``503
  engine_unavailable`` with ``rollback_failed`` false; if the removal fails too,
  ``rollback_failed`` is true, the record reads ``orphaned`` and health has an
  ``orphaned_schedule`` finding. A saga that never finished (the process died between its
  steps) is resumed by a retry of the same request (same key and body), or settled by
  reconciliation: the record and any Temporal copy are removed.
* **update**, pause, resume re-ensure; a failed ensure leaves the change committed and
  the schedule ``drifted`` until reconciliation ensures it.
* **delete** removes the Temporal Schedule first; if Temporal fails the record stays.
* **fire** is what a Temporal Schedule's action reaches: one occurrence per (schedule id,
  scheduled time), inserted idempotently, dispatched by the runner exactly like the SQL
  driver's occurrences (overlap, identity, auto-disable), and followed through once.

What Temporal cannot honour is refused when the schedule is written: deterministic
``jitter_ms`` (``unsupported_by_driver``), and a DST policy whose fires would differ from
Temporal's literal wall-clock matching over the zone's coming transitions
(``dst_policy_unsupported``). docs/dst-policy.md explains the rule.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from punctual.domain.calendar_timeline import BusinessDaySpec, Timing
from punctual.domain.ids import new_id
from punctual.domain.recurrence import (
    CronSpec,
    DstGap,
    DstOverlap,
    IntervalSpec,
    RecurrenceSpec,
    fires_between,
    load_zone,
)
from punctual.domain.schedules import (
    MissedPolicy,
    Schedule,
    SchedulePolicy,
    next_bounded_fire,
    remaining_occurrences,
)
from punctual.domain.starts import ScheduledStart, StartState
from punctual.errors import InvalidRequest, Unavailable
from punctual.ports.driver import DriverSchedule, SyncRecord, SyncState
from punctual.ports.engine import EngineUnavailable
from punctual.ports.records import CursorMove
from punctual.ports.store import Tx
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import Answer, Mutation, Outcome, request_token
from punctual.usecases.kernel.projections import schedule_view
from punctual.usecases.recurring import history
from punctual.usecases.recurring.occurrence_rows import new_occurrence
from punctual.usecases.tenancy.health import ORPHANED_SCHEDULE

log = logging.getLogger("punctual.driver")

SQL = "sql"
TEMPORAL_SCHEDULES = "temporal_schedules"
DEFAULT_CATCHUP_WINDOW = timedelta(days=365)
"""Catch-up without a window reaches as far back as Temporal's own default (one year)."""
DST_HORIZON_YEARS = 28
"""Weekdays and dates repeat every 28 years: a spec that matches literal matching over this
many years of a zone's transitions matches it at every transition the rules foresee."""
_TRANSITION_MARGIN = timedelta(hours=3)


def uses_driver(services: Services) -> bool:
    return services.driver.name != SQL


# ---- what the driver is asked to hold ----------------------------------------------


def catchup_window(policy: SchedulePolicy) -> timedelta:
    """``skip`` never catches up past the misfire grace; ``catch_up`` reaches back its
    window (Temporal has no per-pass count, so ``max_catch_up`` does not apply)."""
    if policy.missed is MissedPolicy.SKIP:
        return policy.misfire_grace
    return policy.catch_up_window or DEFAULT_CATCHUP_WINDOW


def desired(schedule: Schedule) -> DriverSchedule:
    return DriverSchedule(
        schedule_id=schedule.id,
        tenant=schedule.tenant,
        spec=schedule.spec,
        overlap=schedule.policy.overlap,
        catchup_window=catchup_window(schedule.policy),
        paused=not schedule.enabled or schedule.deleted_at is not None,
        end_at=schedule.end_at,
        remaining_actions=schedule.remaining_occurrences,
    )


def _unsupported(field: str, message: str, code: str) -> InvalidRequest:
    return InvalidRequest(message, code=code, field=field, driver=TEMPORAL_SCHEDULES)


def check_supported(
    services: Services,
    timing: Timing,
    policy: SchedulePolicy,
    *,
    pause_until: datetime | None = None,
    stored: bool = False,
) -> None:
    """Refuse what the Temporal Schedules driver cannot honour (a no-op on the SQL one).
    ``stored``: a record made before (under the SQL driver, or before this rule), whose
    interval's first fire off a whole second Temporal honours on the next whole second."""
    if not uses_driver(services):
        return
    if len(timing.specs) > 1:
        raise _unsupported(
            "specs",
            "several specs are not honoured by Temporal Schedules yet (one occurrence per "
            "instant, naming its specs, is punctual's merge); use one spec per schedule "
            "with this driver, or the SQL driver",
            "unsupported_by_driver",
        )
    spec = timing.specs[0]
    if isinstance(spec, BusinessDaySpec):
        raise _unsupported(
            "spec.business_day",
            "business_day specs are not honoured by Temporal Schedules (Temporal knows no "
            "business days); use a cron spec with this driver, or the SQL driver",
            "unsupported_by_driver",
        )
    if timing.calendar is not None:
        raise _unsupported(
            "calendar",
            "calendars are not honoured by Temporal Schedules yet (Temporal knows no "
            "holidays, and a fire activity would have to skip or move closed days); leave "
            "calendar null with this driver, or use the SQL driver",
            "unsupported_by_driver",
        )
    if isinstance(spec, IntervalSpec):
        if spec.interval_ms % 1000:
            raise _unsupported(
                "spec.interval_ms",
                "interval_ms must be a whole number of seconds with Temporal Schedules "
                "(Temporal counts intervals in whole seconds); use a multiple of 1000",
                "unsupported_by_driver",
            )
        if not stored and spec.starts_at is not None and spec.starts_at.microsecond:
            raise _unsupported(
                "spec.starts_at",
                "starts_at must be on a whole second with Temporal Schedules (Temporal "
                "places interval fires on whole seconds); drop the fraction of a second",
                "unsupported_by_driver",
            )
    if pause_until is not None:
        raise _unsupported(
            "pause_until",
            "pause_until is not honoured by Temporal Schedules yet (the Temporal Schedule "
            "would have to resume itself); pause and resume the schedule instead",
            "unsupported_by_driver",
        )
    if policy.blackouts:
        raise _unsupported(
            "blackouts",
            "blackouts are not honoured by Temporal Schedules yet (a fire activity would have "
            "to skip them); leave blackouts empty with this driver, or use the SQL driver",
            "unsupported_by_driver",
        )
    if policy.jitter > timedelta(0):
        raise _unsupported(
            "jitter_ms",
            "jitter_ms cannot be honoured by Temporal Schedules (Temporal's jitter is random, "
            "punctual's is deterministic); set jitter_ms to 0 with this driver",
            "unsupported_by_driver",
        )
    field = dst_policy_refusal(spec, services.clock.now())
    if field is not None:
        assert isinstance(spec, CronSpec)
        value = spec.dst_gap.value if field == "dst_gap" else spec.dst_overlap.value
        raise _unsupported(
            f"spec.{field}",
            f"{field} {value} of {spec.expression!r} in {spec.time_zone} cannot be honoured by "
            "Temporal Schedules at a coming DST transition (Temporal skips times that do not "
            "exist and fires repeated times differently per zone); choose times outside the "
            "zone's transitions, dst_gap skip, or the sql driver (docs/dst-policy.md)",
            "dst_policy_unsupported",
        )


def dst_policy_refusal(spec: RecurrenceSpec, now: datetime) -> str | None:
    """The DST field whose policy Temporal cannot honour for this spec, or None.

    Temporal skips wall times that do not exist (``dst_gap=skip``), so another gap policy
    is honoured only when it yields the same fires as skipping around each of the zone's
    transitions over the coming ``DST_HORIZON_YEARS``. Wall times that occur twice Temporal
    does not handle one way: measured on its server, New York fires both passes, Berlin
    only the first, Lord Howe only the second (docs/dst-policy.md). So a fixed-time
    expression that names a repeated time is refused whatever its ``dst_overlap``. Both
    checks pass for fixed times that never fall in a transition (API.md's ``30 2 * * 1-5``
    in New York: that zone changes its clocks on Sundays). Wildcard expressions are not
    refused (their policy is literal matching, RS-2): their difference is documented."""
    if not isinstance(spec, CronSpec) or not spec.fixed_time:
        return None
    gap_literal = replace(spec, dst_gap=DstGap.SKIP)
    windows = _transition_windows(spec.time_zone, now.year)
    if spec.dst_gap is not DstGap.SKIP and not _same_fires(spec, gap_literal, windows):
        return "dst_gap"
    first = replace(gap_literal, dst_overlap=DstOverlap.FIRST)
    both = replace(gap_literal, dst_overlap=DstOverlap.BOTH)
    if not _same_fires(first, both, windows):
        return "dst_overlap"
    return None


def _same_fires(
    one: CronSpec, other: CronSpec, windows: Sequence[tuple[datetime, datetime]]
) -> bool:
    for start, end in windows:
        first = [f.at for f in fires_between(one, start, end)]
        if first != [f.at for f in fires_between(other, start, end)]:
            return False
    return True


@functools.cache
def _transition_windows(zone_name: str, year: int) -> tuple[tuple[datetime, datetime], ...]:
    """A few hours either side of each offset change of the zone, from ``year`` on."""
    zone = load_zone(zone_name)
    start = datetime(year, 1, 1, tzinfo=UTC)
    end = datetime(year + DST_HORIZON_YEARS, 1, 1, tzinfo=UTC)
    step = timedelta(hours=12)
    windows: list[tuple[datetime, datetime]] = []
    at = start
    offset = at.astimezone(zone).utcoffset()
    while at < end:
        later = at + step
        later_offset = later.astimezone(zone).utcoffset()
        if later_offset != offset:
            windows.append((at - _TRANSITION_MARGIN, later + _TRANSITION_MARGIN))
            offset = later_offset
        at = later
    return tuple(windows)


# ---- ensure, remove, record -------------------------------------------------------


def record_sync(
    tx: Tx,
    schedule_id: str,
    state: SyncState,
    now: datetime,
    next_fire_times: Sequence[datetime] = (),
    digest: str | None = None,
    create_token: str | None = None,
) -> None:
    tx.schedule_sync.record(
        SyncRecord(schedule_id, state, now, list(next_fire_times), digest, create_token)
    )


def created(
    services: Services,
    tx: Tx,
    schedule: Schedule,
    now: datetime,
    *,
    status: Answer = Answer.CREATED,
    extra: dict[str, Any] | None = None,
) -> Outcome:
    """The answer to a create of ``schedule`` (just stored, or found by ``resumable``):
    at once under the SQL driver; under a driver the saga's first step, whose next step
    ensures the Temporal Schedule outside this transaction."""
    extra = extra or {}
    if not uses_driver(services):
        return Outcome(status, view(services, tx, schedule, now) | extra, resource_id=schedule.id)
    token = request_token() or new_id("saga")
    record_sync(tx, schedule.id, SyncState.CREATING, now, create_token=token)
    return Outcome(
        status,
        None,
        resource_id=schedule.id,
        then=functools.partial(_ensure_created, services, schedule, token, status, extra),
    )


def resumable(services: Services, tx: Tx, tenant: str, name: str) -> Schedule | None:
    """The schedule named ``name`` whose create saga this very request began and did not
    finish (a retry with the same key and body), or None."""
    token = request_token()
    if not uses_driver(services) or token is None:
        return None
    schedule = tx.schedules.by_name(tenant, name, lock=True)
    if schedule is None:
        return None
    record = tx.schedule_sync.get_many([schedule.id]).get(schedule.id)
    return schedule if record is not None and record.create_token == token else None


def _ensure_created(
    services: Services, schedule: Schedule, token: str, status: int, extra: dict[str, Any]
) -> Mutation:
    """The saga's second step: ensure; on failure remove the record (its compensation)."""
    services.crash_point("after_create_stored")
    wanted = desired(schedule)
    try:
        times = services.driver.ensure(wanted)
    except EngineUnavailable as exc:
        raise _compensate(services, schedule, token, exc) from exc

    def finish(tx: Tx, now: datetime) -> Outcome:
        current = tx.schedules.get(schedule.tenant, schedule.id, lock=True)
        record = tx.schedule_sync.get_many([schedule.id]).get(schedule.id)
        if current is None or record is None:
            # Reconciliation settled the saga meanwhile (removed the record); the copy
            # just ensured fires nothing without a record, and its next sweep removes it.
            raise EngineUnavailable(
                f"schedule {schedule.id} was not created: its unfinished create was removed "
                "by reconciliation while this request ran; retry the same request",
                rollback_failed=False,
            )
        if record.create_token == token:
            state = SyncState.IN_SYNC if desired(current) == wanted else SyncState.DRIFTED
            record_sync(tx, schedule.id, state, now, times, wanted.digest)
            tx.findings.clear(current.tenant, ORPHANED_SCHEDULE, current.id)
        return Outcome(status, view(services, tx, current, now) | extra, resource_id=current.id)

    return finish


def _compensate(
    services: Services, schedule: Schedule, token: str, cause: EngineUnavailable
) -> EngineUnavailable:
    """Remove the record of a create Temporal did not take; the error to answer."""
    try:
        with services.store.transaction() as tx:
            now = services.clock.now()
            record = tx.schedule_sync.get_many([schedule.id]).get(schedule.id)
            current = tx.schedules.get(schedule.tenant, schedule.id, lock=True)
            if current is not None and record is not None and record.create_token == token:
                discard_unfinished_create(tx, current, now)
                tx.schedule_sync.forget(current.id)
    except Unavailable:
        log.error("event=create_rollback_failed schedule=%s", schedule.id)
        _declare_orphan(services, schedule, token)
        return EngineUnavailable(
            f"schedule {schedule.id} was not created: Temporal did not take it ({cause}) and "
            "its record could not be removed; it reads orphaned until a retry of the same "
            "request or reconciliation settles it",
            rollback_failed=True,
            schedule_id=schedule.id,
        )
    return EngineUnavailable(
        f"schedule {schedule.id} was not created: Temporal did not take it ({cause}); "
        "the record was removed, retry the same request",
        rollback_failed=False,
        schedule_id=schedule.id,
    )


def discard_unfinished_create(tx: Tx, schedule: Schedule, now: datetime) -> None:
    """Remove the record of a create that never answered ``201`` (as a delete would) and
    its ``orphaned_schedule`` finding; the caller has removed or will remove its copy."""
    if tx.schedules.compare_and_set(
        schedule.id, schedule.version, now, enabled=False, deleted_at=now, next_fire_at=None
    ):
        history.discarded(tx, schedule, now)
    tx.findings.clear(schedule.tenant, ORPHANED_SCHEDULE, schedule.id)


def _declare_orphan(services: Services, schedule: Schedule, token: str) -> None:
    """Best effort, the store having just failed: the record reads ``orphaned`` and health
    shows the finding at once (if this fails too, reconciliation settles the saga)."""
    try:
        with services.store.transaction() as tx:
            now = services.clock.now()
            record_sync(tx, schedule.id, SyncState.ORPHANED, now, create_token=token)
            tx.findings.raise_finding(
                schedule.tenant,
                ORPHANED_SCHEDULE,
                schedule.id,
                "error",
                f"schedule {schedule.id} has no Temporal Schedule: its create failed and "
                "its record could not be removed; reconciliation removes it",
                now,
            )
    except Unavailable:
        log.error("event=orphan_not_recorded schedule=%s", schedule.id)


def ensure_on_change(services: Services, tx: Tx, schedule: Schedule, now: datetime) -> None:
    """Re-ensure after an edit, pause, resume or auto-disable; a failure marks drift. An
    unfinished create is left to its saga: its last step sees the edit and marks drift."""
    if not uses_driver(services):
        return
    record = tx.schedule_sync.get_many([schedule.id]).get(schedule.id)
    if record is not None and record.unfinished_create:
        return
    wanted = desired(schedule)
    try:
        times = services.driver.ensure(wanted)
    except EngineUnavailable as exc:
        log.warning("event=schedule_drifted schedule=%s error_type=%s", schedule.id, type(exc))
        record_sync(tx, schedule.id, SyncState.DRIFTED, now)
        return
    record_sync(tx, schedule.id, SyncState.IN_SYNC, now, times, wanted.digest)


def mark_drifted(services: Services, tx: Tx, schedule_id: str, now: datetime) -> None:
    """For paths that must not wait on Temporal (dispatch's auto-disable): reconcile ensures.
    An unfinished create is left to its saga, which ensures what the record then says."""
    if not uses_driver(services):
        return
    record = tx.schedule_sync.get_many([schedule_id]).get(schedule_id)
    if record is None or not record.unfinished_create:
        record_sync(tx, schedule_id, SyncState.DRIFTED, now)


def remove_before_delete(services: Services, tx: Tx, schedule_id: str) -> None:
    """Temporal first: if it fails the delete fails (503) and the record stays."""
    if not uses_driver(services):
        return
    try:
        services.driver.remove(schedule_id)
    except EngineUnavailable as exc:
        raise EngineUnavailable(
            f"schedule {schedule_id} was not deleted: its Temporal Schedule could not be "
            f"removed ({exc}); the schedule is unchanged, retry the same request"
        ) from exc
    tx.schedule_sync.forget(schedule_id)


def view(services: Services, tx: Tx, schedule: Schedule, now: datetime) -> dict[str, Any]:
    """The schedule view; under a driver with its ``sync`` and the cached fire times."""
    return views(services, tx, [schedule], now)[0]


def views(
    services: Services, tx: Tx, schedules: Sequence[Schedule], now: datetime
) -> list[dict[str, Any]]:
    if not uses_driver(services):
        return [schedule_view(s, now) for s in schedules]
    synced = tx.schedule_sync.get_many([s.id for s in schedules])
    return [schedule_view(s, now, sync=synced.get(s.id), driven=True) for s in schedules]


def installation_id(services: Services) -> str:
    """This store's installation id (made on first use): the mark on owned Schedules."""
    with services.store.transaction() as tx:
        candidate = f"punctual-{uuid.uuid4().hex}"
        return tx.schedule_sync.installation_id(candidate, services.clock.now())


# ---- firing ------------------------------------------------------------------------


@dataclass(frozen=True)
class TemporalFire:
    """Temporal Schedules fired ``schedule_id`` for ``scheduled_at`` (its fire activity's
    request): not a spec's fire time (``domain.recurrence.Fire``) nor the API's."""

    schedule_id: str
    tenant: str
    scheduled_at: datetime


@dataclass(frozen=True)
class Fired:
    occurrence_id: str | None
    state: str


@dataclass(frozen=True)
class Settled:
    state: str
    follow_through: str | None


def fire(services: Services, cmd: TemporalFire) -> Fired:
    """One occurrence for (schedule, Temporal's scheduled time), inserted idempotently
    (CR-7: a retried fire finds the same row) and left to the runner's dispatch, which
    applies the overlap policy, the creator's identity and auto-disable as for any
    occurrence. A fire with no live record, or of a paused record, fires nothing."""
    at = cmd.scheduled_at.astimezone(UTC).replace(microsecond=0)
    now = services.clock.now()
    with services.store.transaction() as tx:
        schedule = tx.schedules.get(cmd.tenant, cmd.schedule_id, lock=True)
        if schedule is None:
            log.warning("event=fire_without_record schedule=%s", cmd.schedule_id)
            return Fired(None, "no_schedule")
        existing = _occurrence_at(tx, schedule.id, at)
        if existing is not None:
            return Fired(existing.id, existing.state.value)
        if not schedule.enabled:
            mark_drifted(services, tx, schedule.id, now)
            return Fired(None, "paused")
        nominal, adjustment = _nominal(schedule.timing, at)
        row = new_occurrence(
            schedule,
            tx.schedules.input_of(schedule.id),
            at,
            at,
            nominal=nominal,
            dst_adjustment=adjustment,
        )
        tx.starts.insert_occurrences([row], now)
        # The next fire its own recurrence gives, as a generation pass leaves it: what the
        # SQL runner continues from if the driver is switched back (CR-7).
        cursor, counted = max(schedule.cursor, at), schedule.fires_counted + 1
        remaining = remaining_occurrences(schedule.max_occurrences, counted)
        following = next_bounded_fire(schedule.timing, cursor, schedule.end_at, remaining)
        tx.schedules.move_cursors(
            [CursorMove(schedule.id, cursor, following, schedule.version, fires_counted=counted)]
        )
    services.on_due_change()
    services.crash_point("after_fire_recorded")
    return Fired(row.id, StartState.SCHEDULED.value)


def _occurrence_at(tx: Tx, schedule_id: str, at: datetime) -> ScheduledStart | None:
    rows = tx.starts.occurrences_between(schedule_id, at - timedelta(microseconds=1), at)
    return rows[0].occurrence if rows else None


def _nominal(timing: Timing, at: datetime) -> tuple[str | None, str | None]:
    for found in timing.fires(at - timedelta(microseconds=1)):
        if found.at == at:
            adjustment = found.dst_adjustment.value if found.dst_adjustment else None
            return found.nominal.isoformat(), adjustment
        break
    return None, None


_UNRUN = {StartState.SKIPPED, StartState.FAILED, StartState.CANCELED}


def heal(services: Services, tenant: str, schedule_id: str) -> None:
    """Ensure a drifted schedule now (an auto-disable during its fire pauses it in Temporal
    as soon as the fire workflow sees the occurrence settle, not at the next sweep)."""
    now = services.clock.now()
    with services.store.transaction() as tx:
        record = tx.schedule_sync.get_many([schedule_id]).get(schedule_id)
        schedule = tx.schedules.get(tenant, schedule_id)
        if schedule is None or (record is not None and record.state is SyncState.IN_SYNC):
            return
        ensure_on_change(services, tx, schedule, now)


def settled(
    services: Services, tenant: str, schedule_id: str, occurrence_id: str
) -> Settled | None:
    """None while the occurrence's run is unfinished or not yet followed through; what it
    came to once it is (or once it ended without a run: skipped, failed, canceled)."""
    with services.store.transaction(readonly=True) as tx:
        occurrence = tx.starts.get_occurrence(tenant, schedule_id, occurrence_id)
        if occurrence is None:
            return Settled("missing", None)
        follow = tx.follow_through.get_many([occurrence_id]).get(occurrence_id)
    if follow is not None:
        return Settled(occurrence.state.value, follow.status)
    if occurrence.state in _UNRUN:
        return Settled(occurrence.state.value, None)
    return None
