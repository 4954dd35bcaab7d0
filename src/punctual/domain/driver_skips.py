"""Which of a firing driver's fire times it decided not to fire, and why (RS-4, CR-6).

Under the Temporal Schedules driver Temporal decides, by itself, that some fire times start
no action: its overlap policy skips (or drops from its one-place buffer) a time that comes
while the previous fire's workflow still runs, and its catch-up window drops a time it
reached too late. Those decisions leave holes in a schedule's occurrences. Given the fire
times the driver's own spec yields in a window, what the store holds there, and how long
each fired occurrence kept its fire workflow alive, ``driver_skips`` names every hole and
its reason, exactly once: ``overlap`` when an earlier fire was still alive then (and the
policy lets the driver skip at all), otherwise ``missed``, consecutive missed times as one
range like the generation pass records them. ``dst_gap_skips`` adds the wall times a
``dst_gap: skip`` expression named that did not exist (the driver skips them too).

Pure: the caller decides the window (enabled, created, not ended, nothing in flight).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from punctual.domain.recurrence import CronSpec, DstSkip, RecurrenceSpec, skipped_by_dst
from punctual.domain.schedules import OverlapPolicy, SkippedRange, first_fire_after

MISSED_REASON = "missed"
OVERLAP_REASON = "overlap"
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class FireLifetime:
    """How long the driver's action for one fired occurrence ran: from its fire time until
    its occurrence settled (None: it still runs). The driver's overlap policy sees it."""

    at: datetime
    until: datetime | None


@dataclass(frozen=True)
class Accounted:
    """What the store and the driver already account for in a window: instants with a row
    (any state, any origin), instants the driver took an action for, and skipped ranges."""

    instants: frozenset[datetime] = frozenset()
    ranges: tuple[tuple[datetime, datetime], ...] = ()

    def covers(self, at: datetime) -> bool:
        if at in self.instants:
            return True
        return any(first <= at <= last for first, last in self.ranges)


@dataclass(frozen=True)
class DriverSkips:
    overlap: list[datetime] = field(default_factory=list)
    """Fire times skipped because an earlier fire was still alive: one row each."""
    missed: list[SkippedRange] = field(default_factory=list)
    """Runs of consecutive fire times the driver dropped otherwise: one range each."""

    @property
    def counted(self) -> int:
        """The spec's fires these decisions account for (``max_occurrences`` counts them)."""
        return len(self.overlap) + sum(r.count for r in self.missed)


def driver_skips(
    expected: Sequence[datetime],
    accounted: Accounted,
    lifetimes: Sequence[FireLifetime],
    overlap: OverlapPolicy,
) -> DriverSkips:
    """The holes among ``expected`` (the driver's fire times of a decided window, ascending)
    and why each is one. ``lifetimes`` are the fired occurrences up to the window's end and
    the last one before it, in any order: the driver runs one fire at a time under ``skip``
    and ``buffer_one``, so a hole is an overlap skip exactly when the latest fire before it
    was still alive at its time. ``allow_all`` never skips for overlap: its holes are missed.
    """
    ordered = sorted(lifetimes, key=lambda lifetime: lifetime.at)
    starts = [lifetime.at for lifetime in ordered]
    skips = DriverSkips()
    run: list[datetime] = []

    def close_run() -> None:
        if run:
            skips.missed.append(SkippedRange(run[0], run[-1], len(run), MISSED_REASON))
            run.clear()

    for at in expected:
        if accounted.covers(at):
            close_run()
            continue
        if overlap is not OverlapPolicy.ALLOW_ALL and _alive_at(ordered, starts, at):
            close_run()
            skips.overlap.append(at)
            continue
        run.append(at)
    close_run()
    return skips


def _alive_at(ordered: Sequence[FireLifetime], starts: Sequence[datetime], at: datetime) -> bool:
    index = bisect.bisect_left(starts, at) - 1  # the latest fire strictly before ``at``
    if index < 0:
        return False
    until = ordered[index].until
    return until is None or at <= until


def dst_gap_skips(
    spec: RecurrenceSpec | None, after: datetime, until: datetime, accounted: Accounted
) -> list[DstSkip]:
    """The wall times a fixed-time ``dst_gap: skip`` expression named in ``(after, until]``
    that did not exist, as the generation pass records them (reason ``dst_gap``); one that
    lands on an instant the expression also fires at, or already has a row, is left out.
    None: a timing the driver does not fire (several specs, a calendar) has none."""
    if not isinstance(spec, CronSpec) or not spec.fixed_time:
        return []
    return [
        skip
        for skip in skipped_by_dst(spec, after, until)
        if not accounted.covers(skip.at) and not _fires_at(spec, skip.at)
    ]


def _fires_at(spec: RecurrenceSpec, at: datetime) -> bool:
    fire = first_fire_after(spec, at - _TICK)
    return fire is not None and fire.at == at
