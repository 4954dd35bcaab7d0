"""Several specs and business calendars in the generation plan (SPEC RS-10).

Generation passes at any times decide every instant of the timeline exactly once and
generate exactly what the preview shows; the ``holidays`` package is the oracle for which
local dates fire; rolled days never give an instant twice; a holiday on a DST change day
resolves by the spec's DST policy.
"""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import holidays
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.domain.calendar_timeline import BusinessDaySpec, ScheduleSpec, Timing
from punctual.domain.calendars import BusinessCalendar, OnClosedDay
from punctual.domain.recurrence import CronSpec, DstGap, IntervalSpec, iter_fires
from punctual.domain.schedules import (
    MissedPolicy,
    OverlapPolicy,
    SchedulePolicy,
    plan_occurrences,
    preview_timing,
)

LOOKAHEAD = timedelta(seconds=2)
ON_TIME = SchedulePolicy(
    OverlapPolicy.ALLOW_ALL,
    MissedPolicy.CATCH_UP,
    max_catch_up=100,
    misfire_grace=timedelta(days=3660),
)
REGIONS = [("DE", "BY"), ("US", "NY"), ("FR", None), ("JP", None), ("GB", "SCT"), ("IN", None)]
ZONES = {
    "DE": "Europe/Berlin",
    "US": "America/New_York",
    "FR": "Europe/Paris",
    "JP": "Asia/Tokyo",
    "GB": "Europe/London",
    "IN": "Asia/Kolkata",
}


class Decisions:
    """What passes decided: generated instants (with specs and moves) and skips."""

    def __init__(self) -> None:
        self.generated: list[tuple[datetime, tuple[int, ...], datetime | None]] = []
        self.calendar: list[tuple[datetime, datetime, int, str | None]] = []
        self.dst: list[datetime] = []


def run_passes(timing: Timing, start: datetime, pass_hours: list[int], hours: int) -> Decisions:
    """Generation passes at the given hours after ``start`` (and one at the end) with a
    small budget, as the runner makes them when the schedule is due."""
    decided = Decisions()
    cursor: datetime = start
    next_fire_at: datetime | None = start
    for hour in [*sorted(pass_hours), hours, hours]:
        now = start + timedelta(hours=hour)
        while next_fire_at is not None and next_fire_at <= now + LOOKAHEAD:
            plan = plan_occurrences(timing, ON_TIME, cursor, now, 7, LOOKAHEAD)
            decided.generated += [(o.at, o.spec_indexes, o.moved_from) for o in plan.occurrences]
            decided.calendar += [
                (r.first, r.last, r.count, r.detail) for r in plan.calendar_skipped
            ]
            decided.dst += [skip.at for skip in plan.dst_skipped]
            assert plan.cursor >= cursor
            if plan.cursor == cursor and not plan.occurrences:
                break
            cursor, next_fire_at = plan.cursor, plan.next_fire_at
    return decided


def closed_dates(country: str, subdivision: str | None, years: range) -> set[date]:
    table = holidays.country_holidays(country, subdiv=subdivision, years=list(years))
    return set(table)


@settings(max_examples=30, deadline=None)
@given(
    region=st.sampled_from(REGIONS),
    year=st.integers(2025, 2029),
    month=st.integers(1, 12),
    on_closed_day=st.sampled_from(list(OnClosedDay)),
    passes=st.lists(st.integers(0, 24 * 62), max_size=8),
)
def test_passes_generate_what_the_preview_shows_on_the_open_days_of_the_oracle(
    region: tuple[str, str | None],
    year: int,
    month: int,
    on_closed_day: OnClosedDay,
    passes: list[int],
) -> None:
    """Two months of a weekday-morning cron, a last-business-day spec and a six-hour
    interval... under a real region's holidays: every generated instant is one the preview
    shows, none twice, and the days that fire are the oracle's open days."""
    country, subdivision = region
    zone = ZONES[country]
    calendar = BusinessCalendar.of(holidays=[region], on_closed_day=on_closed_day)
    specs: list[ScheduleSpec] = [
        CronSpec("0 9 * * *", zone),
        BusinessDaySpec(-1, time(17, 30), zone),
    ]
    if on_closed_day is OnClosedDay.SKIP:
        specs.append(IntervalSpec(6 * 3_600_000, datetime(2024, 1, 1, tzinfo=UTC)))
    timing = Timing(tuple(specs), calendar)
    start = datetime(year, month, 1, tzinfo=ZoneInfo(zone)).astimezone(UTC)
    hours = 24 * 62
    end = start + timedelta(hours=hours)

    decided = run_passes(timing, start, passes, hours)
    instants = [at for at, _, _ in decided.generated]
    assert instants == sorted(set(instants)), "an instant generated twice, or out of order"
    fires, _ = preview_timing(timing, (), start, 400)  # more than the stretch holds
    shown = [f.at for f in fires if f.at <= end]
    assert instants == shown

    closed = closed_dates(country, subdivision, range(year - 1, year + 3))
    local = ZoneInfo(zone)
    daily = [(at, moved) for at, indexes, moved in decided.generated if 0 in indexes]
    for at, moved in daily:
        day = at.astimezone(local).date()
        assert day not in closed and day.weekday() < 5, (at, "fired on a closed day")
        if moved is not None:
            original = moved.astimezone(local).date()
            assert original in closed or original.weekday() >= 5, (moved, "moved an open day")
    if on_closed_day is OnClosedDay.SKIP:
        # Exactly the oracle's open days of the stretch fire at 09:00, each once.
        open_days = {
            day
            for day in _dates(start.astimezone(local).date(), end.astimezone(local).date())
            if day not in closed
            and day.weekday() < 5
            and start < datetime.combine(day, time(9), local) <= end
        }
        assert {at.astimezone(local).date() for at, _ in daily} == open_days
        # Every instant the calendar took is recorded once, with the day's reason, and
        # nothing else is: the oracle's closed dates of each spec's own fires (a fire of
        # another spec at the same instant wins).
        raw: dict[datetime, list[bool]] = {}
        for spec in (specs[0], specs[2]):
            assert not isinstance(spec, BusinessDaySpec)
            for fire in iter_fires(spec, start):
                if fire.at > end:
                    break
                day = fire.nominal.date()
                raw.setdefault(fire.at, []).append(day in closed or day.weekday() >= 5)
        expected = {at for at, shut in raw.items() if all(shut)} - set(instants)
        assert sum(count for _, _, count, _ in decided.calendar) == len(expected)
        for first, last, _, reason in decided.calendar:
            assert first in expected and last in expected and reason
    # The last business day of each month fires once, on the oracle's last open day.
    last_days = [at for at, indexes, _ in decided.generated if 1 in indexes]
    for at in last_days:
        day = at.astimezone(local).date()
        following = _dates(day + timedelta(days=1), _month_end(day))
        assert all(d in closed or d.weekday() >= 5 for d in following), (at, "not the last")


def _dates(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def _month_end(day: date) -> date:
    following = date(day.year + day.month // 12, day.month % 12 + 1, 1)
    return following - timedelta(days=1)


def test_rolled_days_never_give_an_instant_twice() -> None:
    """Christmas to New Year in Bavaria, previous_open_day: the closed run's fires all move
    onto 23 December, where the day's own fire is; one occurrence there, naming it."""
    calendar = BusinessCalendar.of(
        holidays=[("DE", "BY")],
        extra_holidays=[date(2026, 12, 24), date(2026, 12, 31)],
        on_closed_day=OnClosedDay.PREVIOUS_OPEN_DAY,
    )
    timing = Timing((CronSpec("0 9 * * *", "Europe/Berlin"),), calendar)
    start = datetime(2026, 12, 20, tzinfo=UTC)
    decided = run_passes(timing, start, [30, 90, 100, 200], 24 * 20)
    instants = [at for at, _, _ in decided.generated]
    assert len(instants) == len(set(instants))
    berlin = ZoneInfo("Europe/Berlin")
    by_day = {at.astimezone(berlin).date(): moved for at, _, moved in decided.generated}
    # 23 Dec fires once (its own fire wins, unmoved); 24-27 Dec moved onto it are absorbed.
    assert by_day[date(2026, 12, 23)] is None
    assert date(2026, 12, 24) not in by_day
    assert date(2026, 12, 28) in by_day and date(2026, 12, 30) in by_day
    assert date(2026, 12, 31) not in by_day and date(2027, 1, 1) not in by_day


def test_several_specs_fire_one_occurrence_per_instant_naming_each_spec() -> None:
    """Two specs meeting at 09:00 on weekdays make one occurrence with both indexes."""
    timing = Timing(
        (
            CronSpec("0 9 * * 1-5", "Europe/Berlin"),
            CronSpec("0 9,18 * * *", "Europe/Berlin"),
        )
    )
    start = datetime(2026, 12, 7, tzinfo=UTC)  # a Monday
    decided = run_passes(timing, start, [5, 27, 50], 48)
    assert [
        (at.astimezone(ZoneInfo("Europe/Berlin")).hour, ix) for at, ix, _ in decided.generated
    ] == [
        (9, (0, 1)),
        (18, (1,)),
        (9, (0, 1)),
        (18, (1,)),
    ]


@pytest.mark.parametrize(
    ("on_closed_day", "closed", "fires_on", "adjustment"),
    [
        # Spring forward in Berlin: 29 March 2026 has no 02:30. A fire moved onto it
        # from the closed 30th lands at the gap's end, 03:00 CEST, as a DST shift.
        (
            OnClosedDay.PREVIOUS_OPEN_DAY,
            date(2026, 3, 30),
            datetime(2026, 3, 29, 1, 0),
            "gap_shifted",
        ),
        # The 29th closed, moved forward: the 30th's 02:30 exists, and its own fire is there.
        (OnClosedDay.NEXT_OPEN_DAY, date(2026, 3, 29), datetime(2026, 3, 30, 0, 30), None),
    ],
)
def test_a_holiday_on_a_dst_change_day_resolves_by_the_dst_policy(
    on_closed_day: OnClosedDay, closed: date, fires_on: datetime, adjustment: str | None
) -> None:
    calendar = BusinessCalendar.of(weekend=[], extra_holidays=[closed], on_closed_day=on_closed_day)
    timing = Timing((CronSpec("30 2 * * *", "Europe/Berlin"),), calendar)
    start = datetime(2026, 3, 27, tzinfo=UTC)
    plan = plan_occurrences(timing, ON_TIME, start, start + timedelta(days=6), 100)
    at_day = [o for o in plan.occurrences if o.at == fires_on.replace(tzinfo=UTC)]
    assert len(at_day) == 1
    found = at_day[0].dst_adjustment
    assert (found.value if found else None) == adjustment
    # Nothing fires on the closed day, and no instant is there twice.
    berlin = ZoneInfo("Europe/Berlin")
    assert all(o.at.astimezone(berlin).date() != closed for o in plan.occurrences)
    assert len({o.at for o in plan.occurrences}) == len(plan.occurrences)


def test_a_skipped_dst_gap_on_a_closed_day_and_closed_days_are_recorded_not_counted() -> None:
    """Skip: each closed day is one recorded decision with the holiday's name; a run of
    closed days with one reason is one range; neither counts against max_occurrences."""
    calendar = BusinessCalendar.of(holidays=[("DE", "BY")])
    timing = Timing((CronSpec("0 9 * * *", "Europe/Berlin"),), calendar)
    start = datetime(2026, 12, 23, tzinfo=UTC)
    plan = plan_occurrences(timing, ON_TIME, start, start + timedelta(days=5), 100, remaining=3)
    berlin = ZoneInfo("Europe/Berlin")
    assert [o.at.astimezone(berlin).date() for o in plan.occurrences] == [
        date(2026, 12, 23),
        date(2026, 12, 24),
    ]
    reasons = [
        (r.first.astimezone(berlin).date(), r.count, r.detail) for r in plan.calendar_skipped
    ]
    assert reasons == [
        (date(2026, 12, 25), 1, "Christmas Day"),
        (date(2026, 12, 26), 1, "Second Day of Christmas"),
        (date(2026, 12, 27), 1, "weekend"),
    ]
    assert plan.counted == 2


def test_an_interval_through_a_weekend_is_one_range_per_closed_day_reason() -> None:
    """A one-minute interval over a Saturday and Sunday: 2,880 skipped instants recorded as
    one range (reason weekend), not 2,880 rows."""
    calendar = BusinessCalendar.of()
    start = datetime(2026, 12, 4, 23, 0, tzinfo=UTC)  # Friday 23:00 UTC
    timing = Timing((IntervalSpec(60_000, start),), calendar)
    plan = plan_occurrences(timing, ON_TIME, start, start + timedelta(hours=49, minutes=30), 10_000)
    assert [(r.count, r.detail) for r in plan.calendar_skipped] == [(2 * 24 * 60, "weekend")]
    assert len(plan.occurrences) == 60 + 30  # Friday's last hour and Monday's first half hour


def test_move_needs_a_fixed_time_spec_and_business_days_need_a_calendar() -> None:
    calendar = BusinessCalendar.of(on_closed_day=OnClosedDay.NEXT_OPEN_DAY)
    start = datetime(2026, 12, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="fixed-time"):
        next(Timing((IntervalSpec(60_000, start),), calendar).timeline(start))
    with pytest.raises(ValueError, match="needs a calendar"):
        next(Timing((BusinessDaySpec(-1, time(17, 30), "Europe/Berlin"),)).timeline(start))
    assert list(itertools.islice(Timing((CronSpec("0 9 * * *"),), calendar).fires(start), 1))


def test_dst_gap_skip_under_a_calendar_is_recorded_once() -> None:
    timing = Timing(
        (CronSpec("30 2 * * *", "Europe/Berlin", dst_gap=DstGap.SKIP),),
        BusinessCalendar.of(weekend=[]),
    )
    start = datetime(2026, 3, 28, tzinfo=UTC)
    plan = plan_occurrences(timing, ON_TIME, start, start + timedelta(days=3), 100)
    assert [s.at for s in plan.dst_skipped] == [datetime(2026, 3, 29, 1, 0, tzinfo=UTC)]
