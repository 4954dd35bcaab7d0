"""The smallest gap between a spec's consecutive fires, DST passes included: what bounds a
schedule's jitter (RS-9d), so a jittered fire never passes the next one.

Apart from ``recurrence`` because it reads a spec's timeline rather than defining it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from punctual.domain.calendar_timeline import BusinessDaySpec, PlannedFire, Timing
from punctual.domain.recurrence import (
    Fire,
    IntervalSpec,
    RecurrenceSpec,
    iter_fires,
    load_zone,
    utc_instant,
    utc_offset,
)

_GAP_SCAN_FIRES = 2_000
"""Fires read from the start of a gap search; beyond them only the weeks around DST
transitions are read (a cron pattern repeats otherwise, see ``smallest_gap``)."""
_MERGED_SCAN_FIRES = 20_000
"""Fires read of a timing with several specs or a calendar."""
_CRON_RESOLUTION = timedelta(minutes=1)
"""No two cron fires are closer: fires and tzdata transitions fall on whole minutes."""
_OFFSET_SAMPLE = timedelta(hours=6)
"""Offsets are sampled this often to find transitions; no zone changes twice in 6 h."""


def _fires_until(spec: RecurrenceSpec, after: datetime, until: datetime, limit: int) -> list[Fire]:
    fires: list[Fire] = []
    for fire in iter_fires(spec, after):
        if fire.at > until or len(fires) >= limit:
            break
        fires.append(fire)
    return fires


def _smallest_step(fires: Sequence[Fire | PlannedFire]) -> timedelta | None:
    steps = [later.at - earlier.at for earlier, later in itertools.pairwise(fires)]
    return min(steps) if steps else None


def _transitions(zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """Instants just after each UTC offset change in ``(start, end]`` (to the sampling)."""
    found: list[datetime] = []
    at, offset = start, utc_offset(start.astimezone(zone))
    while at < end:
        at = min(at + _OFFSET_SAMPLE, end)
        current = utc_offset(at.astimezone(zone))
        if current != offset:
            found.append(at)
            offset = current
    return found


def smallest_gap(
    when: Timing | RecurrenceSpec, after: datetime, horizon: timedelta
) -> timedelta | None:
    """The shortest time between two consecutive fires of a schedule's timing in
    ``(after, after + horizon]``; None when fewer than two fires lie there.

    Several specs or a calendar: the merged fires are read, at most ``_MERGED_SCAN_FIRES``
    of them; past those, each spec's own smallest gap bounds the answer too (a gap
    between two specs' fires, or made by a move, beyond the first fires read is not
    seen: a jitter bound, not a promise).
    """
    timing = when if isinstance(when, Timing) else Timing((when,))
    plain = timing.plain
    if plain is not None:
        return _plain_smallest_gap(plain, after, horizon)
    start = utc_instant(after, "after")
    end = start + horizon
    fires = list(
        itertools.islice(
            itertools.takewhile(lambda f: f.at <= end, timing.fires(start)), _MERGED_SCAN_FIRES
        )
    )
    smallest = _smallest_step(fires)
    if len(fires) < _MERGED_SCAN_FIRES:
        return smallest
    for spec in timing.specs:
        if isinstance(spec, BusinessDaySpec):
            continue
        own = _plain_smallest_gap(spec, after, horizon)
        if own is not None and (smallest is None or own < smallest):
            smallest = own
    return smallest


def _plain_smallest_gap(
    spec: RecurrenceSpec, after: datetime, horizon: timedelta
) -> timedelta | None:
    """The shortest time between two consecutive fires in ``(after, after + horizon]``,
    DST passes included; None when fewer than two fires lie there.

    Reading every fire of a dense expression for a year is slow (``*/5`` fires 105,120
    times), so the first ``_GAP_SCAN_FIRES`` fires are read, and beyond them only the
    stretch around each DST transition. That is exact for cron: its wall times are the
    product of its fields, so every matching day has the same times of day and the gaps
    between fires on ordinary days repeat what the first fires already showed; only a
    transition changes the instants (a gap-shifted fire, the two passes of a repeated
    hour, a neighbour fire on the other side of an offset change).
    """
    start = utc_instant(after, "after")
    end = start + horizon
    if isinstance(spec, IntervalSpec):
        fires = _fires_until(spec, start, end, 2)
        return _smallest_step(fires)
    fires = _fires_until(spec, start, end, _GAP_SCAN_FIRES)
    smallest = _smallest_step(fires)
    if len(fires) < _GAP_SCAN_FIRES or (smallest is not None and smallest <= _CRON_RESOLUTION):
        return smallest
    zone = load_zone(spec.time_zone)
    for transition in _transitions(zone, fires[-1].at, end):
        # From the last fire before the transition (looking back as far as it takes) to
        # the second fire after it.
        reach = timedelta(days=1)
        while True:
            window_start = max(transition - _OFFSET_SAMPLE - reach, start)
            window = _fires_until(spec, window_start, end, _GAP_SCAN_FIRES)
            before = [f for f in window if f.at <= transition - _OFFSET_SAMPLE]
            if before or window_start == start:
                break
            reach *= 2
        around = [f for f in window if f.at <= transition + timedelta(days=1)]
        after_transition = [f for f in window if f.at > transition + timedelta(days=1)][:1]
        step = _smallest_step(around + after_transition)
        if step is not None and (smallest is None or step < smallest):
            smallest = step
    return smallest
