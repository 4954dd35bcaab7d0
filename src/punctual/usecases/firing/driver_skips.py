"""Recording the fire times Temporal decided not to fire (RS-4 under the Temporal Schedules
driver, CR-6).

Under this driver Temporal, not the generation pass, decides when a schedule fires. Its
overlap policy skips a fire time that comes while the previous fire workflow still runs
(that workflow lives until the run ends and is followed through), and its catch-up window
drops a time it reached too late; a ``dst_gap: skip`` expression's missing wall times are
skipped too. None of that reaches the fire use case, so the reconciliation sweep records
it: per schedule, the fire times Temporal's own spec yields between the schedule's skip
mark and a horizon, minus the instants the store or Temporal's actions account for, become
``skipped`` occurrences (``domain.driver_skips`` names the reason), and the mark moves to
the horizon in the same transaction. A second sweep finds the rows and adds nothing.

What is decided is only what nothing can still fire:

* fire times before Temporal's next fire time (it has decided every one of them) and at
  least ``MARGIN`` old; never one Temporal took an action for, and nothing after an action
  whose fire workflow runs without having inserted its occurrence yet (it would explain
  the skips after it), nor after the start of the running action while Temporal buffers
  one (``buffer_one``: the buffered time starts later), nor anything while the oldest of
  the actions Temporal still lists is unrecorded (an older, unlisted one may be too);
* only while the schedule was enabled: from its mark while its version is unchanged, else
  from its last mutation (a pause, resume or edit bumps the version, and what came before
  it is not known to have been enabled: those fire times are left unrecorded); never
  before the schedule or its Temporal copy was created, nor after ``end_at`` or, once
  ``max_occurrences`` is used up, after its last fire.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from punctual.domain.driver_skips import (
    OVERLAP_REASON,
    Accounted,
    DriverSkips,
    FireLifetime,
    driver_skips,
    dst_gap_skips,
)
from punctual.domain.recurrence import DstSkip
from punctual.domain.schedules import Schedule, first_fire_after
from punctual.domain.starts import ScheduledStart, StartState
from punctual.errors import Unavailable
from punctual.ports.driver import (
    FIRE_TIMES_LIMIT,
    DriverView,
    SkipMark,
    SyncRecord,
    SyncState,
)
from punctual.ports.events import Event
from punctual.ports.records import CursorMove, EncryptedInput, FollowThroughRecord, NewOccurrence
from punctual.ports.store import Tx
from punctual.usecases.firing.schedule_driver import uses_driver
from punctual.usecases.kernel.context import Services
from punctual.usecases.recurring.occurrence_rows import (
    dst_gap_row,
    new_occurrence,
    skipped_range_row,
)

log = logging.getLogger("punctual.driver")

PAGE = 200
MARGIN = timedelta(seconds=5)
"""Fire times younger than this wait for the next sweep, whatever Temporal says."""
SETTLE_SLACK = timedelta(seconds=5)
"""A fire workflow closes a little after its occurrence settles (the settle activity's poll,
the workflow's end): Temporal still sees it running that long."""
FIRST_LOOKBACK = timedelta(days=1)
"""How far back the first sweep of a schedule without a mark looks."""
_WATCHED = (SyncState.IN_SYNC, SyncState.DRIFTED)
"""Schedules whose Temporal copy fires: orphaned ones and unfinished creates do not."""
_ENDED_UNRUN = (StartState.FAILED, StartState.CANCELED)
_TICK = timedelta(microseconds=1)


@dataclass
class DriverSkipsReport:
    schedules: int = 0
    overlap: int = 0
    missed: int = 0
    """Fire times recorded as missed (ranges counted in full)."""
    dst_skipped: int = 0


@dataclass(frozen=True)
class _Window:
    """What one sweep may decide for a schedule: fire times in ``(start, until]``."""

    schedule: Schedule
    mark: SkipMark | None
    view: DriverView
    start: datetime
    until: datetime


def record_driver_skips(services: Services) -> DriverSkipsReport:
    """One pass over every live schedule, describing them page by page (a reconciliation
    sweep instead hands each page it described to ``record_page``)."""
    report = DriverSkipsReport()
    if not uses_driver(services):
        return report
    after = ""
    while True:
        with services.store.transaction(readonly=True) as tx:
            page = [schedule_id for schedule_id, _ in tx.schedule_sync.live_schedules(after, PAGE)]
        if not page:
            return report
        after = page[-1]
        record_page(services, page, services.driver.describe_many(page), report)


def record_page(
    services: Services,
    schedule_ids: Sequence[str],
    views: Mapping[str, DriverView],
    report: DriverSkipsReport,
) -> None:
    """Record the skips Temporal made for these schedules, given what it holds of them;
    raises ``EngineUnavailable`` when Temporal cannot be reached. A schedule whose
    recording fails for another reason is logged and left for the next sweep."""
    with services.store.transaction(readonly=True) as tx:
        schedules = tx.schedules.get_many(list(schedule_ids))
        synced = tx.schedule_sync.get_many(list(schedule_ids))
        marks = tx.schedule_sync.skip_marks(list(schedule_ids))
    now = services.clock.now()
    windows = [
        window
        for schedule in schedules.values()
        if schedule.deleted_at is None
        and (
            window := _window(
                schedule,
                synced.get(schedule.id),
                marks.get(schedule.id),
                views.get(schedule.id),
                now,
            )
        )
        is not None
    ]
    times = services.driver.fire_times(
        {w.schedule.id: (w.start, w.until) for w in windows if w.until > w.start}
    )
    for window in windows:
        try:
            _record(services, window, times.get(window.schedule.id, []), report)
        except Unavailable:
            raise
        except Exception as exc:
            log.warning(
                "event=driver_skips_failed schedule=%s error_type=%s",
                window.schedule.id,
                type(exc).__name__,
            )


def _window(
    schedule: Schedule,
    sync: SyncRecord | None,
    mark: SkipMark | None,
    view: DriverView | None,
    now: datetime,
) -> _Window | None:
    if view is None or not view.present or not view.marked:
        return None
    if sync is None or sync.state not in _WATCHED:
        return None
    horizon = now - MARGIN
    if not schedule.enabled:
        # Nothing to decide. The mark records this version, so that the resume (a new
        # version) starts from its own time, never from before the pause.
        if mark is None:
            through = horizon
        elif mark.schedule_version == schedule.version:
            through = mark.checked_through
        else:
            through = max(horizon, mark.checked_through)
        return _Window(schedule, mark, view, through, through)
    if mark is None:
        start = max(schedule.updated_at, now - FIRST_LOOKBACK)
    elif mark.schedule_version == schedule.version:
        start = mark.checked_through
    else:
        start = max(mark.checked_through, schedule.updated_at)
    start = max(start, schedule.created_at, view.created_at or start)
    until = horizon
    if view.decided_before is not None:
        until = min(until, view.decided_before - _TICK)
    if schedule.end_at is not None:
        until = min(until, schedule.end_at)
    if schedule.remaining_occurrences == 0:
        until = min(until, schedule.cursor)
    if view.buffered:
        # The buffered time came after the running action started: it starts later.
        started = [a.started_at for a in view.actions if a.started_at is not None]
        until = min(until, max(started, default=start))
    return _Window(schedule, mark, view, start, max(start, until))


def _record(
    services: Services, window: _Window, times: Sequence[datetime], report: DriverSkipsReport
) -> None:
    schedule_id = window.schedule.id
    if window.until <= window.start:
        if window.mark == SkipMark(schedule_id, window.start, window.schedule.version):
            return
    elif not times and not dst_gap_skips(
        window.schedule.timing.plain, window.start, window.until, Accounted()
    ):
        return  # no fire time in the window: the mark stays, the next sweep looks again
    with services.store.transaction() as tx:
        # The lock orders this with the fire use case, which takes it too.
        schedule = tx.schedules.get(window.schedule.tenant, schedule_id, lock=True)
        if schedule is None or schedule.version != window.schedule.version:
            return  # edited meanwhile: the next sweep starts from the edit
        if tx.schedule_sync.skip_marks([schedule_id]).get(schedule_id) != window.mark:
            return  # another sweep decided this window first
        skips, dst, through = _decide(tx, schedule, window, times)
        occurrences = _occurrences(schedule, tx.schedules.input_of(schedule_id), skips, dst)
        if occurrences:
            tx.starts.insert_occurrences(occurrences, services.clock.now())
            last = max(o.range_last or o.occurrence_at for o in occurrences)
            tx.schedules.move_cursors(
                [
                    CursorMove(
                        schedule_id,
                        max(schedule.cursor, last),
                        schedule.next_fire_at,
                        schedule.version,
                        fires_counted=schedule.fires_counted + skips.counted,
                    )
                ]
            )
        mark = SkipMark(schedule_id, through, schedule.version)
        if mark != window.mark:
            tx.schedule_sync.record_skip_mark(mark)
    report.schedules += 1
    report.overlap += len(skips.overlap)
    report.missed += sum(r.count for r in skips.missed)
    report.dst_skipped += len(dst)
    for occurrence in occurrences:
        if occurrence.reason == OVERLAP_REASON:
            data: dict[str, object] = {"reason": OVERLAP_REASON, "schedule_id": schedule_id}
            services.events.emit(Event("occurrence.skipped", schedule.tenant, occurrence.id, data))
        elif occurrence.range_count is not None:
            data = {"reason": occurrence.reason, "count": occurrence.range_count}
            services.events.emit(Event("occurrence.skipped", schedule.tenant, schedule_id, data))


def _decide(
    tx: Tx, schedule: Schedule, window: _Window, times: Sequence[datetime]
) -> tuple[DriverSkips, list[DstSkip], datetime]:
    """The skips of the window's decidable part, and how far that part reaches."""
    start, until, view = window.start, window.until, window.view
    if until <= start:
        return DriverSkips(), [], start
    if len(times) >= FIRE_TIMES_LIMIT:
        until = min(until, times[-1])
    acted = [action.scheduled_at for action in view.actions]
    lowest, highest = min([start, *acted]), max([until, *acted])
    rows = [
        r.occurrence for r in tx.starts.occurrences_between(schedule.id, lowest - _TICK, highest)
    ]
    present = {o.occurrence_at for o in rows if o.occurrence_at is not None}
    pending = [a.scheduled_at for a in view.actions if a.running and a.scheduled_at not in present]
    if pending:
        # Its fire has not inserted its occurrence yet: what follows it waits for it.
        until = min(until, min(pending) - _TICK)
    since = view.actions_since
    if since is not None and since > start and since not in present:
        # Temporal no longer lists older actions: one of them may be unrecorded too.
        until = start
    if until <= start:
        return DriverSkips(), [], start
    accounted = Accounted(
        instants=frozenset(present | set(acted)),
        ranges=tuple(
            (o.occurrence_at, o.range_last)
            for o in rows
            if o.occurrence_at is not None and o.range_last is not None
        ),
    )
    fired = [o for o in rows if _fired(o)]
    earlier = tx.starts.latest_fired_before(schedule.id, lowest)
    if earlier is not None:
        fired.append(earlier.occurrence)
    follows = tx.follow_through.get_many([o.id for o in fired])
    lifetimes = [
        FireLifetime(o.occurrence_at, _settled_at(o, follows.get(o.id)))
        for o in fired
        if o.occurrence_at is not None
    ]
    expected = [at for at in times if start < at <= until]
    skips = driver_skips(expected, accounted, lifetimes, schedule.policy.overlap)
    return skips, dst_gap_skips(schedule.timing.plain, start, until, accounted), until


def _fired(occurrence: ScheduledStart) -> bool:
    """One of the spec's own fires that was not skipped: Temporal ran a fire workflow for it
    (triggers and backfills are not Temporal's actions; skipped rows never ran one long)."""
    own = "occurrence_origin" not in occurrence.origin
    return own and occurrence.state is not StartState.SKIPPED


def _settled_at(occurrence: ScheduledStart, follow: FollowThroughRecord | None) -> datetime | None:
    """When the occurrence's fire workflow stopped running, as Temporal saw it; None while
    it runs (its run is unfinished or not yet followed through)."""
    if follow is not None:
        return follow.recorded_at + SETTLE_SLACK
    if occurrence.state in _ENDED_UNRUN:
        return occurrence.updated_at + SETTLE_SLACK
    return None


def _occurrences(
    schedule: Schedule, encrypted: EncryptedInput, skips: DriverSkips, dst: Sequence[DstSkip]
) -> list[NewOccurrence]:
    rows: list[NewOccurrence] = []
    for at in skips.overlap:
        fire = first_fire_after(schedule.timing, at - _TICK)
        named = fire is not None and fire.at == at
        rows.append(
            new_occurrence(
                schedule,
                encrypted,
                at,
                at,
                state=StartState.SKIPPED,
                reason=OVERLAP_REASON,
                nominal=fire.nominal.isoformat() if fire is not None and named else None,
                dst_adjustment=(
                    fire.dst_adjustment.value
                    if fire is not None and named and fire.dst_adjustment
                    else None
                ),
            )
        )
    rows += [skipped_range_row(schedule, encrypted, missed) for missed in skips.missed]
    rows += [dst_gap_row(schedule, encrypted, skip) for skip in dst]
    return rows
