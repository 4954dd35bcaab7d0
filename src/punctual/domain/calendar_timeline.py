"""A schedule's timeline from several specs and a business calendar (SPEC RS-10).

``recurrence`` walks one spec; this module puts several together and applies a calendar:

- the N-th or last business day of each month at a local time (``BusinessDaySpec``), by
  the DST policy of a fixed-time cron;
- a fire on a closed local date (a holiday, the weekend, an extra closed date) is skipped
  and reported with the reason, or moved to the same local time on the next or previous
  open day (``moved_from`` keeps the instant it would have had). Moves apply to fixed-time
  specs only: an interval or a wildcard cron fires at every matching instant, and moving
  a closed day's worth of them onto an open day that already has its own is meaningless;
- several specs fire at the union of their instants, one occurrence per instant, which
  names the indexes of every spec that yielded it.

Everything is lazy and in instant order, and pure: the same inputs give the same timeline
in every process (for one version of tzdata and of the ``holidays`` package).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from punctual.domain.calendars import BusinessCalendar, InvalidCalendar, OnClosedDay
from punctual.domain.recurrence import (
    CronSpec,
    DstAdjustment,
    DstGap,
    DstOverlap,
    DstSkip,
    Fire,
    IntervalSpec,
    RecurrenceError,
    iter_fires,
    iter_timeline,
    load_zone,
    resolve_wall_time,
    utc_instant,
)

__all__ = [
    "MAX_BUSINESS_DAY",
    "MAX_SPECS",
    "BusinessDaySpec",
    "CalendarSkip",
    "InvalidBusinessDay",
    "PlannedFire",
    "PlannedSkip",
    "ScheduleSpec",
    "Timing",
    "iter_schedule_timeline",
    "next_planned_fires",
]

MAX_BUSINESS_DAY = 23
"""No month has more business days than this (31 days less at least 4 weekend days)."""
MAX_SPECS = 10
FIRE_SEARCH_ITEMS = 50_000
"""A timing whose next fire is further than this many skipped instants away is taken
to fire no more (a weekly cron on a closed weekday; refused when it is set)."""
_MAX_BARREN_MONTHS = 120
"""A business-day walk that finds no fire for ten years ends: none will come."""
_PREVIEW_HORIZON = timedelta(days=366 * 50)
_PREVIEW_MAX_ITEMS = 100_000
"""The preview looks this far ahead and at this many items at most: a spec whose every
fire is skipped would otherwise be walked to the end of the calendar."""


class InvalidBusinessDay(RecurrenceError):
    """A business-day spec field that cannot be accepted; ``field`` names it."""

    code = "validation_error"

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}", field=name)


@dataclass(frozen=True, slots=True)
class BusinessDaySpec:
    """Fire on the ``business_day``-th open date of every month (1 to 23 from its start,
    -1 to -23 from its end) at the local time ``at`` in ``time_zone``. Needs a calendar;
    a month with fewer open dates does not fire."""

    business_day: int
    at: time
    time_zone: str = "UTC"
    dst_gap: DstGap = DstGap.SHIFT_TO_GAP_END
    dst_overlap: DstOverlap = DstOverlap.FIRST

    def __post_init__(self) -> None:
        n = self.business_day
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= abs(n) <= MAX_BUSINESS_DAY:
            raise InvalidBusinessDay(
                "business_day",
                f"must be 1 to {MAX_BUSINESS_DAY} (from the month's start) or -1 to "
                f"-{MAX_BUSINESS_DAY} (from its end)",
            )
        if self.at.tzinfo is not None or self.at.second or self.at.microsecond:
            raise InvalidBusinessDay("at", "must be a local time of day as HH:MM")
        object.__setattr__(self, "dst_gap", DstGap(self.dst_gap))
        object.__setattr__(self, "dst_overlap", DstOverlap(self.dst_overlap))
        load_zone(self.time_zone)


ScheduleSpec = CronSpec | IntervalSpec | BusinessDaySpec


@dataclass(frozen=True, slots=True)
class PlannedFire:
    """An instant the schedule fires at: the spec's ``fire``, the specs that yielded it,
    and, when the calendar moved it off a closed day, the instant it would have had."""

    fire: Fire
    spec_indexes: tuple[int, ...]
    moved_from: datetime | None = None

    @property
    def at(self) -> datetime:
        return self.fire.at

    @property
    def nominal(self) -> datetime:
        return self.fire.nominal

    @property
    def dst_adjustment(self) -> DstAdjustment | None:
        return self.fire.dst_adjustment


@dataclass(frozen=True, slots=True)
class CalendarSkip:
    """A fire the calendar skipped: ``at`` is the instant it would have had, ``closed``
    why its local date is closed (a holiday's name, ``weekend``, ``extra closed date``)."""

    at: datetime
    nominal: datetime
    closed: str


@dataclass(frozen=True, slots=True)
class PlannedSkip:
    """An instant the specs named where nothing fires: a DST gap (``DstSkip``) or a closed
    day (``CalendarSkip``), with the specs that named it."""

    skip: DstSkip | CalendarSkip
    spec_indexes: tuple[int, ...]

    @property
    def at(self) -> datetime:
        return self.skip.at


_Item = Fire | DstSkip | CalendarSkip
_Moved = tuple[Fire, datetime | None]


def iter_schedule_timeline(
    specs: Sequence[ScheduleSpec], calendar: BusinessCalendar | None, after: datetime
) -> Iterator[PlannedFire | PlannedSkip]:
    """Everything that happens strictly after ``after``, lazily and in instant order: one
    ``PlannedFire`` per instant any spec fires at, and a ``PlannedSkip`` per instant where
    specs named a time and none fires (at one instant, a fire absorbs skips)."""
    if not 1 <= len(specs) <= MAX_SPECS:
        raise ValueError(f"a schedule has 1 to {MAX_SPECS} specs, not {len(specs)}")
    start = utc_instant(after, "after")
    streams = [_tagged(_spec_timeline(spec, calendar, start), i) for i, spec in enumerate(specs)]
    merged = heapq.merge(*streams, key=lambda pair: (_instant(pair[0]), pair[1]))
    for at, group in itertools.groupby(merged, key=lambda pair: _instant(pair[0])):
        del at
        items = list(group)
        fires = [(item, index) for item, index in items if isinstance(item, tuple)]
        if fires:
            # An unmoved fire wins over a moved one; among equals, the first spec's.
            (fire, moved_from), _ = min(fires, key=lambda pair: (pair[0][1] is not None, pair[1]))
            indexes = tuple(sorted({index for _, index in fires}))
            yield PlannedFire(fire, indexes, moved_from)
            continue
        skip = min(
            (item for item, _ in items if not isinstance(item, tuple)),
            key=lambda item: isinstance(item, CalendarSkip),
        )
        yield PlannedSkip(skip, tuple(sorted({index for _, index in items})))


def next_planned_fires(
    specs: Sequence[ScheduleSpec], calendar: BusinessCalendar | None, after: datetime, count: int
) -> list[PlannedFire]:
    """The first ``count`` fires strictly after ``after`` (the preview)."""
    end = utc_instant(after, "after") + _PREVIEW_HORIZON
    walked = itertools.islice(iter_schedule_timeline(specs, calendar, after), _PREVIEW_MAX_ITEMS)
    items = itertools.takewhile(lambda item: item.at <= end, walked)
    return list(itertools.islice((i for i in items if isinstance(i, PlannedFire)), count))


def _tagged(
    items: Iterator[_Moved | DstSkip | CalendarSkip], index: int
) -> Iterator[tuple[_Moved | DstSkip | CalendarSkip, int]]:
    return ((item, index) for item in items)


def _instant(item: _Moved | DstSkip | CalendarSkip) -> datetime:
    return item[0].at if isinstance(item, tuple) else item.at


def _spec_timeline(
    spec: ScheduleSpec, calendar: BusinessCalendar | None, after: datetime
) -> Iterator[_Moved | DstSkip | CalendarSkip]:
    """One spec's items after ``after``, the calendar applied: fires as (fire, moved_from)."""
    if isinstance(spec, BusinessDaySpec):
        if calendar is None:
            raise InvalidBusinessDay("calendar", "a business_day spec needs a calendar")
        return (
            (item, None) if isinstance(item, Fire) else item
            for item in _business_days(spec, calendar, after)
        )
    if calendar is None:
        return (
            (item, None) if isinstance(item, Fire) else item for item in iter_timeline(spec, after)
        )
    if calendar.on_closed_day is OnClosedDay.SKIP:
        return _skipping(spec, calendar, after)
    if not (isinstance(spec, CronSpec) and spec.fixed_time):
        raise InvalidCalendar(
            "on_closed_day",
            f"{calendar.on_closed_day.value} moves fixed-time cron specs only: use skip with "
            "an interval or a cron whose minute or hour is '*'",
        )
    return _moving(spec, calendar, after)


def _business_days(
    spec: BusinessDaySpec, calendar: BusinessCalendar, after: datetime
) -> Iterator[Fire | DstSkip]:
    most = max(
        sum(1 for d in range(length) if (first + d) % 7 not in calendar.weekend)
        for length in (28, 29, 30, 31)
        for first in range(7)
    )
    if abs(spec.business_day) > most:
        raise InvalidBusinessDay(
            "business_day",
            f"{spec.business_day} never occurs: with this weekend a month has at most {most} "
            "business days",
        )
    zone = load_zone(spec.time_zone)
    local = after.astimezone(zone)
    year, month = local.year, local.month
    barren = 0
    while year <= 9999 and barren < _MAX_BARREN_MONTHS:
        day = calendar.business_day(year, month, spec.business_day)
        barren = barren + 1 if day is None else 0
        if day is not None:
            naive = datetime.combine(day, spec.at)
            items = resolve_wall_time(naive, zone, True, spec.dst_gap, spec.dst_overlap)
            for item in sorted(items, key=lambda i: i.at):
                if item.at > after:
                    yield item
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)


def _skipping(
    spec: CronSpec | IntervalSpec, calendar: BusinessCalendar, after: datetime
) -> Iterator[_Moved | DstSkip | CalendarSkip]:
    for item in iter_timeline(spec, after):
        if isinstance(item, DstSkip):
            yield item
            continue
        closed = calendar.closed_because(item.nominal.date())  # the local date it named
        yield (item, None) if closed is None else CalendarSkip(item.at, item.nominal, closed)


def _moving(
    spec: CronSpec, calendar: BusinessCalendar, after: datetime
) -> Iterator[_Moved | DstSkip | CalendarSkip]:
    """Day windows, each one open day and the closed run that moves onto it: previous open
    day = the open day and the closed days after it; next open day = the closed days
    before it and the open day. Windows are disjoint and in order, so the items of one
    window, sorted, keep the timeline in order."""
    zone = load_zone(spec.time_zone)
    forward = calendar.on_closed_day is OnClosedDay.NEXT_OPEN_DAY

    def window_of(day: date) -> tuple[date, date, date]:
        """(first, last, target) of the window holding the local date ``day``."""
        if forward:
            target = day if calendar.is_open(day) else calendar.next_open(day)
            return calendar.previous_open(target) + timedelta(days=1), target, target
        target = day if calendar.is_open(day) else calendar.previous_open(day)
        return target, calendar.next_open(target) - timedelta(days=1), target

    first, last, target = window_of(after.astimezone(zone).date())
    while True:
        items = _window(spec, zone, first, last, target)
        for item in sorted(items, key=lambda i: (_instant(i), _moved_rank(i))):
            if _instant(item) > after:
                yield item
        done = last
        walk = iter_timeline(spec, _day_start(done, zone))
        upcoming = next((i for i in walk if i.nominal.date() > done), None)
        if upcoming is None:
            return
        first, last, target = window_of(upcoming.nominal.date())


def _window(
    spec: CronSpec, zone: ZoneInfo, first: date, last: date, target: date
) -> list[_Moved | DstSkip]:
    """The spec's items on the local dates ``first``..``last``, those of other dates than
    ``target`` moved to the same local time on it."""
    found: list[_Moved | DstSkip] = []
    begin = _day_start(first, zone) - timedelta(days=1)
    stop = _day_start(last + timedelta(days=2), zone)
    for item in iter_timeline(spec, begin):
        if item.at >= stop:
            break
        day = item.nominal.date()  # the local date the spec named
        if not first <= day <= last:
            continue
        if day == target:
            found.append(item if isinstance(item, DstSkip) else (item, None))
            continue
        naive = datetime.combine(target, item.nominal.time())
        for moved in resolve_wall_time(naive, zone, True, spec.dst_gap, spec.dst_overlap):
            found.append((moved, item.at) if isinstance(moved, Fire) else moved)
    return found


def _moved_rank(item: _Moved | DstSkip) -> int:
    if isinstance(item, DstSkip):
        return 0
    return 1 if item[1] is None else 2


def _day_start(day: date, zone: ZoneInfo) -> datetime:
    """An instant at or just around local midnight of ``day`` (a bound for walking)."""
    return datetime.combine(day, time()).replace(tzinfo=zone).astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Timing:
    """When a schedule fires: its specs merged and its calendar applied, read as one
    timeline by generation, the preview, backfill and the audit alike (SPEC RS-10).

    A single cron or interval spec without a calendar is *plain*: it takes the same
    path with no merge, and the arithmetic shortcuts of ``recurrence`` (counting an
    interval's fires without walking them) stay available.
    """

    specs: tuple[ScheduleSpec, ...]
    calendar: BusinessCalendar | None = None

    def __post_init__(self) -> None:
        if not 1 <= len(self.specs) <= MAX_SPECS:
            raise ValueError(f"a schedule has 1 to {MAX_SPECS} specs, not {len(self.specs)}")

    @property
    def plain(self) -> CronSpec | IntervalSpec | None:
        """The one spec when nothing is merged or applied, else None."""
        spec = self.specs[0]
        if len(self.specs) == 1 and self.calendar is None and not isinstance(spec, BusinessDaySpec):
            return spec
        return None

    @property
    def records_skips(self) -> bool:
        """Whether its timeline can hold a skip that is recorded (``recorded``)."""
        return self.calendar is not None or any(_names_wall_times(s) for s in self.specs)

    def timeline(self, after: datetime) -> Iterator[PlannedFire | PlannedSkip]:
        """``iter_schedule_timeline`` of these specs and this calendar."""
        plain = self.plain
        if plain is None:
            return iter_schedule_timeline(self.specs, self.calendar, after)
        return _plain_timeline(plain, after)

    def fires(self, after: datetime) -> Iterator[PlannedFire]:
        return (item for item in self.timeline(after) if isinstance(item, PlannedFire))

    def first_fire_after(self, after: datetime) -> PlannedFire | None:
        plain = self.plain
        if plain is not None:  # the hot path of every pass: no merge, no grouping
            fire = next(iter_fires(plain, after), None)
            return PlannedFire(fire, _FIRST) if fire is not None else None
        walked = itertools.islice(self.timeline(after), FIRE_SEARCH_ITEMS)
        return next((item for item in walked if isinstance(item, PlannedFire)), None)

    def recorded(self, skip: PlannedSkip) -> bool:
        """A closed day is always a decision worth recording; a DST gap only where a spec
        named that wall time (a wildcard cron names every minute and records none)."""
        if isinstance(skip.skip, CalendarSkip):
            return True
        return any(_names_wall_times(self.specs[index]) for index in skip.spec_indexes)


def _names_wall_times(spec: ScheduleSpec) -> bool:
    return isinstance(spec, BusinessDaySpec) or (isinstance(spec, CronSpec) and spec.fixed_time)


def _plain_timeline(
    spec: CronSpec | IntervalSpec, after: datetime
) -> Iterator[PlannedFire | PlannedSkip]:
    """One spec's items, one per instant: a fire absorbs a skip at its instant."""
    if isinstance(spec, IntervalSpec):  # one fire per instant, and no DST skips
        yield from (PlannedFire(each, _FIRST) for each in iter_fires(spec, after))
        return
    for _, group in itertools.groupby(iter_timeline(spec, after), key=lambda item: item.at):
        fire: Fire | None = None
        skip: DstSkip | None = None
        for item in group:
            if isinstance(item, Fire):
                fire = item
            elif skip is None:
                skip = item
        if fire is not None:
            yield PlannedFire(fire, _FIRST)
        elif skip is not None:
            yield PlannedSkip(skip, _FIRST)


_FIRST = (0,)
