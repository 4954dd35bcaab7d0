"""Business calendars and a schedule's timeline from several specs (SPEC RS-10), checked
against the ``holidays`` package as the oracle over random regions, years and months."""

from __future__ import annotations

import calendar as month_calendar
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import holidays
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.domain.calendar_timeline import (
    BusinessDaySpec,
    CalendarSkip,
    InvalidBusinessDay,
    PlannedFire,
    PlannedSkip,
    ScheduleSpec,
    iter_schedule_timeline,
    next_planned_fires,
)
from punctual.domain.calendars import (
    BusinessCalendar,
    CalendarNeverOpen,
    InvalidCalendar,
    OnClosedDay,
    UnknownHolidayRegion,
    holidays_version,
)
from punctual.domain.recurrence import CronSpec, DstAdjustment, IntervalSpec

REGIONS = [
    ("DE", "BY", "Europe/Berlin"),
    ("DE", "BB", "Europe/Berlin"),
    ("US", "CA", "America/Los_Angeles"),
    ("GB", "SCT", "Europe/London"),
    ("FR", None, "Europe/Paris"),
    ("JP", None, "Asia/Tokyo"),
    ("BR", "SP", "America/Sao_Paulo"),
    ("AU", "NSW", "Australia/Sydney"),
    ("CH", "ZH", "Europe/Zurich"),
]
EXAMPLES = settings(max_examples=40, deadline=None, database=None)

regions = st.sampled_from(REGIONS)
months = st.tuples(st.integers(2000, 2040), st.integers(1, 12))


def oracle(country: str, subdivision: str | None) -> Callable[[date], bool]:
    """Open by the package itself: not one of the region's holidays, not Sat or Sun."""
    table = holidays.country_holidays(country, subdiv=subdivision, years=range(1999, 2043))
    return lambda day: day not in table and day.weekday() < 5


def days_of(year: int, month: int) -> list[date]:
    return [date(year, month, d) for d in range(1, month_calendar.monthrange(year, month)[1] + 1)]


def month_bounds(year: int, month: int, zone: ZoneInfo) -> tuple[datetime, datetime]:
    first = datetime(year, month, 1, tzinfo=zone)
    following = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=zone)
    return first - timedelta(seconds=1), following


def planned(
    specs: list[ScheduleSpec], cal: BusinessCalendar | None, after: datetime, end: datetime
) -> list[PlannedFire | PlannedSkip]:
    items = []
    for item in iter_schedule_timeline(specs, cal, after):
        if item.at >= end:
            break
        items.append(item)
    return items


def region_calendar(
    country: str, subdivision: str | None, on_closed_day: str = "skip"
) -> BusinessCalendar:
    return BusinessCalendar.of(holidays=[(country, subdivision)], on_closed_day=on_closed_day)


# ------------------------------------------------------------------------ open and closed


@EXAMPLES
@given(regions, months)
def test_open_days_are_those_of_the_holidays_package(
    region: tuple[str, str | None, str], month: tuple[int, int]
) -> None:
    country, subdivision, _ = region
    cal, is_open = region_calendar(country, subdivision), oracle(country, subdivision)
    table = holidays.country_holidays(country, subdiv=subdivision, years=month[0])
    for day in days_of(*month):
        assert cal.is_open(day) == is_open(day), day
        reason = cal.closed_because(day)
        if day in table:
            assert reason is not None and table[day].split("; ")[0] in reason
        elif day.weekday() >= 5:
            assert reason == "weekend"


def test_extra_dates_and_the_weekend_override_in_order() -> None:
    cal = BusinessCalendar.of(
        holidays=[("DE", "BY")],
        weekend=["fri", "sat"],
        extra_holidays=[date(2026, 12, 24)],
        extra_workdays=[date(2026, 12, 26), date(2026, 12, 25)],
    )
    assert cal.closed_because(date(2026, 12, 24)) == "extra closed date"  # a Thursday
    assert cal.is_open(date(2026, 12, 25)), "an extra open date wins over Christmas"
    assert cal.is_open(date(2026, 12, 26)), "and over the weekend"
    assert cal.closed_because(date(2026, 12, 18)) == "weekend"  # a Friday
    assert cal.is_open(date(2026, 12, 20)), "Sunday is a workday here"
    assert cal.weekend_names == ["fri", "sat"]


@EXAMPLES
@given(regions, months, st.sampled_from([1, 2, 3, 5, 10, -1, -2, -5]))
def test_the_nth_and_last_business_day_are_counted_on_open_days(
    region: tuple[str, str | None, str], month: tuple[int, int], n: int
) -> None:
    country, subdivision, zone_name = region
    cal, is_open = region_calendar(country, subdivision), oracle(country, subdivision)
    open_days = [day for day in days_of(*month) if is_open(day)]
    expected = open_days[n - 1 if n > 0 else n] if abs(n) <= len(open_days) else None
    assert cal.business_day(*month, n) == expected
    spec = BusinessDaySpec(n, time(17, 30), zone_name)
    zone = ZoneInfo(zone_name)
    after, end = month_bounds(*month, zone)
    fires = [i for i in planned([spec], cal, after, end) if isinstance(i, PlannedFire)]
    if expected is None:
        assert fires == []
    else:
        [fire] = fires
        assert fire.at.astimezone(zone).replace(tzinfo=None) == datetime.combine(
            expected, time(17, 30)
        )
        assert fire.spec_indexes == (0,)


# ------------------------------------------------------------------ skip and move policies


@EXAMPLES
@given(regions, months)
def test_skip_fires_on_open_days_and_reports_every_closed_one(
    region: tuple[str, str | None, str], month: tuple[int, int]
) -> None:
    country, subdivision, zone_name = region
    zone, is_open = ZoneInfo(zone_name), oracle(country, subdivision)
    spec = CronSpec("0 9 * * *", zone_name)
    after, end = month_bounds(*month, zone)
    items = planned([spec], region_calendar(country, subdivision), after, end)
    fired = {i.at.astimezone(zone).date() for i in items if isinstance(i, PlannedFire)}
    skipped = {
        i.at.astimezone(zone).date(): i.skip
        for i in items
        if isinstance(i, PlannedSkip) and isinstance(i.skip, CalendarSkip)
    }
    days = days_of(*month)
    assert fired == {day for day in days if is_open(day)}
    assert set(skipped) == {day for day in days if not is_open(day)}
    assert all(skip.closed for skip in skipped.values())
    assert [i.at for i in items] == sorted({i.at for i in items}), "in order, one per instant"


@EXAMPLES
@given(regions, months, st.sampled_from(["next_open_day", "previous_open_day"]))
def test_a_closed_days_fire_moves_to_the_nearest_open_day_at_the_same_local_time(
    region: tuple[str, str | None, str], month: tuple[int, int], policy: str
) -> None:
    """Fires every fourth day of the month: each on an open day stays, each on a closed
    day moves to the nearest open day in the policy's direction, and nothing else fires."""
    country, subdivision, zone_name = region
    zone, is_open = ZoneInfo(zone_name), oracle(country, subdivision)
    spec = CronSpec("15 9 1,5,9,13,17,21,25,29 * *", zone_name)
    cal = region_calendar(country, subdivision, policy)
    step = 1 if policy == "next_open_day" else -1

    def nearest_open(day: date) -> date:
        return next(
            day + timedelta(days=step * k)
            for k in range(1, 60)
            if is_open(day + timedelta(days=step * k))
        )

    after, end = month_bounds(*month, zone)
    wide_after, wide_end = after - timedelta(days=40), end + timedelta(days=40)
    items = planned([spec], cal, wide_after, wide_end)
    assert all(isinstance(i, PlannedFire) for i in items)
    fires = [i for i in items if isinstance(i, PlannedFire)]
    assert [f.at for f in fires] == sorted({f.at for f in fires}), "in order, one per instant"
    named = [d for d in days_of(*month) if d.day in (1, 5, 9, 13, 17, 21, 25, 29)]
    expected = {d if is_open(d) else nearest_open(d) for d in named}
    fired = {f.at.astimezone(zone).date(): f for f in fires}
    assert expected <= set(fired)
    for day in expected:
        assert fired[day].at.astimezone(zone).time() == time(9, 15)
    for fire in fires:
        local = fire.at.astimezone(zone)
        assert is_open(local.date())
        if fire.moved_from is not None:
            origin = fire.moved_from.astimezone(zone).date()
            assert not is_open(origin) and nearest_open(origin) == local.date()


def test_a_holiday_on_a_dst_change_day() -> None:
    """Easter Sunday 2024 (a holiday in Brandenburg) is the day Berlin's clocks go forward:
    02:30 does not exist that day. Skipped, it is reported with the holiday's name; moved,
    it fires at 02:30 on the next open day (Easter Monday is closed too: Tuesday)."""
    zone = ZoneInfo("Europe/Berlin")
    spec = CronSpec("30 2 31 3 *", "Europe/Berlin")
    after = datetime(2024, 3, 30, 12, tzinfo=zone)
    skip = BusinessCalendar.of(holidays=[("DE", "BB")], weekend=[])
    [first, *_] = planned([spec], skip, after, datetime(2024, 4, 1, tzinfo=zone))
    assert isinstance(first, PlannedSkip) and isinstance(first.skip, CalendarSkip)
    assert "Easter" in first.skip.closed
    assert first.at == datetime(2024, 3, 31, 1, tzinfo=UTC), "at the gap's end"
    moved = BusinessCalendar.of(holidays=[("DE", "BB")], on_closed_day="next_open_day")
    [fire] = next_planned_fires([spec], moved, after, 1)
    assert fire.at.astimezone(zone) == datetime(2024, 4, 2, 2, 30, tzinfo=zone)
    assert fire.moved_from == datetime(2024, 3, 31, 1, tzinfo=UTC)
    assert fire.fire.dst_adjustment is None, "02:30 exists on the day it moved to"


def test_a_gap_shifted_fire_on_an_open_day_keeps_its_adjustment() -> None:
    zone = ZoneInfo("Europe/Berlin")
    cal = BusinessCalendar.of(weekend=[])
    [fire] = next_planned_fires(
        [CronSpec("30 2 * * *", "Europe/Berlin")], cal, datetime(2024, 3, 31, tzinfo=zone), 1
    )
    assert fire.fire.dst_adjustment is DstAdjustment.GAP_SHIFTED


# ---------------------------------------------------------------------------- several specs


def test_several_specs_fire_at_the_union_one_occurrence_per_instant() -> None:
    """Weekdays at 09:00 and the last business day at 09:00 and at 17:30: the last business
    day's 09:00 is one occurrence naming both specs."""
    zone = ZoneInfo("Europe/Berlin")
    cal = BusinessCalendar.of(holidays=[("DE", "BY")])
    specs: list[ScheduleSpec] = [
        CronSpec("0 9 * * 1-5", "Europe/Berlin"),
        BusinessDaySpec(-1, time(9, 0), "Europe/Berlin"),
        BusinessDaySpec(-1, time(17, 30), "Europe/Berlin"),
    ]
    after, end = month_bounds(2026, 12, zone)
    items = planned(specs, cal, after, end)
    fires = [i for i in items if isinstance(i, PlannedFire)]
    assert [f.at for f in fires] == sorted({f.at for f in fires})
    last_day = date(2026, 12, 31)  # a Thursday; the 24th to 26th are holidays or closed
    by_instant = {f.at.astimezone(zone).replace(tzinfo=None): f.spec_indexes for f in fires}
    assert by_instant[datetime.combine(last_day, time(9))] == (0, 1)
    assert by_instant[datetime.combine(last_day, time(17, 30))] == (2,)
    assert by_instant[datetime(2026, 12, 30, 9)] == (0,)
    assert datetime(2026, 12, 25, 9) not in by_instant, "Christmas Day is closed"


def test_one_spec_and_an_interval_without_a_calendar() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    specs: list[ScheduleSpec] = [
        IntervalSpec(30 * 60 * 1000, starts_at=start),
        CronSpec("0 * * * *"),
    ]
    fires = next_planned_fires(specs, None, start - timedelta(seconds=1), 4)
    assert [(f.at.minute, f.spec_indexes) for f in fires] == [
        (0, (0, 1)),
        (30, (0,)),
        (0, (0, 1)),
        (30, (0,)),
    ]


def test_a_sparse_spec_with_moves_still_ends_its_walk() -> None:
    cal = BusinessCalendar.of(holidays=[("DE", None)], on_closed_day="previous_open_day")
    fires = next_planned_fires(
        [CronSpec("0 12 29 2 *", "Europe/Berlin")], cal, datetime(2026, 1, 1, tzinfo=UTC), 3
    )
    zone = ZoneInfo("Europe/Berlin")
    assert [f.at.astimezone(zone).date() for f in fires] == [
        date(2028, 2, 29),  # a Tuesday
        date(2032, 2, 27),  # the 29th is a Sunday: the Friday before
        date(2036, 2, 29),  # a Friday
    ]


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("build", "error", "details"),
    [
        (
            lambda: BusinessCalendar.of(holidays=[("XX", None)]),
            UnknownHolidayRegion,
            {"country": "XX", "subdivision": None},
        ),
        (
            lambda: BusinessCalendar.of(holidays=[("DE", "ZZ")]),
            UnknownHolidayRegion,
            {"country": "DE", "subdivision": "ZZ"},
        ),
        (
            lambda: BusinessCalendar.of(weekend=["mon", "tue", "wed", "thu", "fri", "sat", "sun"]),
            CalendarNeverOpen,
            {"year": None},
        ),
        (
            lambda: BusinessCalendar.of(
                weekend=["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                extra_workdays=[date(2026, 3, 2)],
            ),
            CalendarNeverOpen,
            {"year": None},
        ),
        (
            lambda: BusinessCalendar.of(
                weekend=[],
                extra_holidays=[date(2027, 1, 1) + timedelta(days=i) for i in range(365)],
            ),
            CalendarNeverOpen,
            {"year": 2027},
        ),
        (
            lambda: BusinessCalendar.of(
                extra_holidays=[date(2027, 1, 4)], extra_workdays=[date(2027, 1, 4)]
            ),
            InvalidCalendar,
            {"field": "calendar.extra_workdays"},
        ),
        (lambda: BusinessCalendar.of(weekend=["fri", "funday"]), InvalidCalendar, {}),
        (lambda: BusinessCalendar.of(on_closed_day="tomorrow"), ValueError, {}),
        (lambda: BusinessDaySpec(0, time(9)), InvalidBusinessDay, {"field": "business_day"}),
        (lambda: BusinessDaySpec(24, time(9)), InvalidBusinessDay, {"field": "business_day"}),
        (lambda: BusinessDaySpec(-24, time(9)), InvalidBusinessDay, {"field": "business_day"}),
        (lambda: BusinessDaySpec(1, time(9, 0, 30)), InvalidBusinessDay, {"field": "at"}),
    ],
)
def test_bad_calendars_and_specs_are_refused_by_name(
    build: Callable[[], object], error: type[Exception], details: dict[str, object]
) -> None:
    with pytest.raises(error) as raised:
        build()
    for key, value in details.items():
        assert getattr(raised.value, "details", {}).get(key) == value


def test_what_needs_a_calendar_or_a_fixed_time_says_so() -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(InvalidBusinessDay) as raised:
        next_planned_fires([BusinessDaySpec(-1, time(17, 30))], None, after, 1)
    assert raised.value.details == {"field": "calendar"}
    moving = BusinessCalendar.of(on_closed_day=OnClosedDay.NEXT_OPEN_DAY)
    for spec in (IntervalSpec(60_000, starts_at=after), CronSpec("*/5 9 * * *")):
        with pytest.raises(InvalidCalendar) as refused:
            next_planned_fires([spec], moving, after, 1)
        assert refused.value.details == {"field": "calendar.on_closed_day"}


def test_a_business_day_the_weekend_never_allows_is_refused_and_a_preview_ends() -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    short_weeks = BusinessCalendar.of(weekend=["fri", "sat", "sun"])
    with pytest.raises(InvalidBusinessDay) as raised:
        next_planned_fires([BusinessDaySpec(20, time(9))], short_weeks, after, 1)
    assert raised.value.details == {"field": "business_day"}
    # 19: only a 31-day month beginning on a Monday or a Tuesday has that many
    # (Mon-Thu open); the 19th from the end is then its first open day.
    fires = next_planned_fires([BusinessDaySpec(-19, time(9))], short_weeks, after, 2)
    assert [f.at.date() for f in fires] == [date(2026, 12, 1), date(2027, 3, 1)]
    # Every fire of this spec falls on the weekend: the preview ends, empty, at its horizon.
    weekend_only = CronSpec("0 9 * * 6")
    assert next_planned_fires([weekend_only], BusinessCalendar.of(), after, 5) == []


def test_a_fire_moved_into_a_dst_gap_it_skips_is_reported() -> None:
    """Saturday 28 March 2026 is closed; its 02:30 moves to Sunday 29 March, a day whose
    02:30 does not exist in Berlin, and the spec skips gaps: the skip is in the timeline."""
    zone = ZoneInfo("Europe/Berlin")
    cal = BusinessCalendar.of(
        weekend=[], extra_holidays=[date(2026, 3, 28)], on_closed_day="next_open_day"
    )
    spec = CronSpec("30 2 * * 6", "Europe/Berlin", dst_gap="skip")
    after = datetime(2026, 3, 22, tzinfo=zone)
    items = planned([spec], cal, after, datetime(2026, 4, 5, tzinfo=zone))
    assert isinstance(items[0], PlannedSkip)
    assert items[0].at == datetime(2026, 3, 29, 1, tzinfo=UTC)
    assert [i.at.astimezone(zone).date() for i in items[1:]] == [date(2026, 4, 4)]


def test_the_holidays_version_is_known() -> None:
    assert holidays_version() == holidays.__version__
