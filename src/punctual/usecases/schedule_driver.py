"""Keeping the firing driver in step with the store, and firing for it (SPEC CR-6, CR-7).

The store is the source of truth. Under the Temporal Schedules driver every schedule is
also a Temporal Schedule:

* **create** inserts the record and ensures the Temporal Schedule inside the same
  transaction, before it commits: a failed ensure rolls the insert back (the record is
  removed, ``rollback_failed`` false) and the answer is ``503 engine_unavailable``. A
  create that dies after the ensure leaves a marked Temporal Schedule with no record,
  which fires nothing (the fire use case finds no record) and which reconciliation removes.
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

from punctual.domain.ids import new_id
from punctual.domain.recurrence import (
    CronSpec,
    DstGap,
    DstOverlap,
    RecurrenceSpec,
    fires_between,
    iter_fires,
    load_zone,
)
from punctual.domain.schedules import MissedPolicy, OccurrenceOrigin, Schedule, SchedulePolicy
from punctual.domain.starts import ScheduledStart, StartState
from punctual.errors import InvalidRequest
from punctual.ports.driver import DriverSchedule, SyncRecord, SyncState
from punctual.ports.engine import EngineUnavailable
from punctual.ports.records import CursorMove, NewOccurrence
from punctual.ports.store import Tx
from punctual.usecases.context import Services
from punctual.usecases.projections import schedule_view

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


def check_supported(services: Services, spec: RecurrenceSpec, jitter: timedelta) -> None:
    """Refuse what the Temporal Schedules driver cannot honour (a no-op on the SQL one)."""
    if not uses_driver(services):
        return
    if jitter > timedelta(0):
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
) -> None:
    tx.schedule_sync.record(SyncRecord(schedule_id, state, now, list(next_fire_times), digest))


def ensure_on_create(services: Services, tx: Tx, schedule: Schedule, now: datetime) -> None:
    """Ensure before the insert commits; a failure rolls the insert back (503)."""
    if not uses_driver(services):
        return
    wanted = desired(schedule)
    try:
        times = services.driver.ensure(wanted)
    except EngineUnavailable as exc:
        raise EngineUnavailable(
            f"schedule {schedule.id} was not created: Temporal did not take it ({exc}); "
            "the record was removed, retry the same request",
            rollback_failed=False,
        ) from exc
    record_sync(tx, schedule.id, SyncState.IN_SYNC, now, times, wanted.digest)


def ensure_on_change(services: Services, tx: Tx, schedule: Schedule, now: datetime) -> None:
    """Re-ensure after an edit, pause, resume or auto-disable; a failure marks drift."""
    if not uses_driver(services):
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
    """For paths that must not wait on Temporal (dispatch's auto-disable): reconcile ensures."""
    if uses_driver(services):
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
class Fire:
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


def fire(services: Services, cmd: Fire) -> Fired:
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
        nominal, adjustment = _nominal(schedule.spec, at)
        occurrence_id = new_id("occ")
        tx.starts.insert_occurrences(
            [
                NewOccurrence(
                    id=occurrence_id,
                    tenant=schedule.tenant,
                    schedule_id=schedule.id,
                    revision=schedule.revision,
                    workflow=schedule.workflow,
                    workload_class=schedule.workload_class,
                    input=tx.schedules.input_of(schedule.id),
                    created_by=schedule.created_by,
                    business_request_id=schedule.name,
                    occurrence_at=at,
                    due_at=at,
                    nominal=nominal,
                    dst_adjustment=adjustment,
                    run_id=new_id("run"),
                    state=StartState.SCHEDULED.value,
                    origin=OccurrenceOrigin.SCHEDULE.value,
                )
            ],
            now,
        )
        tx.schedules.move_cursors(
            [
                CursorMove(
                    schedule.id,
                    max(schedule.cursor, at),
                    None,
                    schedule.version,
                    fires_counted=schedule.fires_counted + 1,
                )
            ]
        )
        services.crash_point("after_fire_insert")
    services.on_due_change()
    return Fired(occurrence_id, StartState.SCHEDULED.value)


def _occurrence_at(tx: Tx, schedule_id: str, at: datetime) -> ScheduledStart | None:
    rows = tx.starts.occurrences_between(schedule_id, at - timedelta(microseconds=1), at)
    return rows[0].occurrence if rows else None


def _nominal(spec: RecurrenceSpec, at: datetime) -> tuple[str | None, str | None]:
    for found in iter_fires(spec, at - timedelta(microseconds=1)):
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
