"""DST behaviour of recurring schedules (SPEC RS-2, docs/dst-policy.md).

Named cases pin the policy on real transitions from the packaged tzdata; property tests
compare the scheduler with a brute-force oracle that walks every UTC minute and reads
the wall clock, so the policy is checked independently of how candidates are found.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from punctual.domain.recurrence import (
    CronSpec,
    DstAdjustment,
    DstGap,
    DstOverlap,
    Fire,
    IntervalSpec,
    InvalidCron,
    fires_between,
    load_zone,
    next_fires,
    skipped_by_dst,
)

SHIFTED = DstAdjustment.GAP_SHIFTED
SECOND = DstAdjustment.OVERLAP_SECOND

Row = tuple[str, str, DstAdjustment | None]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def rows(fires: list[Fire]) -> list[Row]:
    """(local with offset, nominal wall time, adjustment), minute precision."""
    for fire in fires:
        assert fire.at.tzinfo is UTC
        assert fire.local.astimezone(UTC) == fire.at
    return [
        (
            fire.local.isoformat(timespec="minutes"),
            fire.nominal.isoformat(timespec="minutes"),
            fire.dst_adjustment,
        )
        for fire in fires
    ]


# ---------------------------------------------------------------------------------------
# Named cases: (zone, expression, dst_gap, dst_overlap, after (UTC), expected fires)

FIRST, LAST, BOTH = DstOverlap.FIRST, DstOverlap.LAST, DstOverlap.BOTH
SHIFT, SKIP = DstGap.SHIFT_TO_GAP_END, DstGap.SKIP


@dataclass(frozen=True)
class Case:
    zone: str
    expression: str
    after: str
    expected: list[Row]
    gap: DstGap = SHIFT
    overlap: DstOverlap = FIRST


CASES = {
    # Europe/Berlin: 2024-03-31 02:00 -> 03:00 (+01 -> +02); 2024-10-27 03:00 -> 02:00.
    "berlin_spring_gap_0230_shifts_to_0300": Case(
        "Europe/Berlin",
        "30 2 * * *",
        "2024-03-30T12:00",
        [
            ("2024-03-31T03:00+02:00", "2024-03-31T02:30", SHIFTED),
            ("2024-04-01T02:30+02:00", "2024-04-01T02:30", None),
        ],
    ),
    "berlin_spring_gap_0230_skip_does_not_fire": Case(
        "Europe/Berlin",
        "30 2 * * *",
        "2024-03-30T12:00",
        [
            ("2024-04-01T02:30+02:00", "2024-04-01T02:30", None),
            ("2024-04-02T02:30+02:00", "2024-04-02T02:30", None),
        ],
        gap=SKIP,
    ),
    "berlin_spring_gap_0200_and_0230_fire_once": Case(
        "Europe/Berlin",
        "0,30 2 * * *",
        "2024-03-30T12:00",
        [
            ("2024-03-31T03:00+02:00", "2024-03-31T02:00", SHIFTED),
            ("2024-04-01T02:00+02:00", "2024-04-01T02:00", None),
        ],
    ),
    "berlin_spring_gap_0200_merges_into_real_0300": Case(
        "Europe/Berlin",
        "0 2,3 * * *",
        "2024-03-30T12:00",
        [
            ("2024-03-31T03:00+02:00", "2024-03-31T03:00", None),
            ("2024-04-01T02:00+02:00", "2024-04-01T02:00", None),
        ],
    ),
    "berlin_fall_overlap_0230_first_fires_first_pass": Case(
        "Europe/Berlin",
        "30 2 * * *",
        "2024-10-26T12:00",
        [
            ("2024-10-27T02:30+02:00", "2024-10-27T02:30", None),
            ("2024-10-28T02:30+01:00", "2024-10-28T02:30", None),
        ],
    ),
    "berlin_fall_overlap_0230_last_fires_second_pass": Case(
        "Europe/Berlin",
        "30 2 * * *",
        "2024-10-26T12:00",
        [
            ("2024-10-27T02:30+01:00", "2024-10-27T02:30", SECOND),
            ("2024-10-28T02:30+01:00", "2024-10-28T02:30", None),
        ],
        overlap=LAST,
    ),
    "berlin_fall_overlap_0230_both_fires_twice": Case(
        "Europe/Berlin",
        "30 2 * * *",
        "2024-10-26T12:00",
        [
            ("2024-10-27T02:30+02:00", "2024-10-27T02:30", None),
            ("2024-10-27T02:30+01:00", "2024-10-27T02:30", SECOND),
            ("2024-10-28T02:30+01:00", "2024-10-28T02:30", None),
        ],
        overlap=BOTH,
    ),
    "berlin_fall_minute_30_every_hour_fires_both_passes": Case(
        "Europe/Berlin",
        "30 * * * *",
        "2024-10-26T23:00",
        [
            ("2024-10-27T01:30+02:00", "2024-10-27T01:30", None),
            ("2024-10-27T02:30+02:00", "2024-10-27T02:30", None),
            ("2024-10-27T02:30+01:00", "2024-10-27T02:30", SECOND),
            ("2024-10-27T03:30+01:00", "2024-10-27T03:30", None),
        ],
    ),
    "berlin_fall_minute_30_overrides_do_not_apply": Case(
        "Europe/Berlin",
        "30 * * * *",
        "2024-10-26T23:00",
        [
            ("2024-10-27T01:30+02:00", "2024-10-27T01:30", None),
            ("2024-10-27T02:30+02:00", "2024-10-27T02:30", None),
            ("2024-10-27T02:30+01:00", "2024-10-27T02:30", SECOND),
            ("2024-10-27T03:30+01:00", "2024-10-27T03:30", None),
        ],
        gap=SKIP,
        overlap=LAST,
    ),
    "berlin_fall_after_inside_first_pass_still_sees_second_pass": Case(
        "Europe/Berlin",
        "*/20 2 * * *",
        "2024-10-27T00:30",  # 02:30+02:00, first pass of the repeated hour
        [
            ("2024-10-27T02:40+02:00", "2024-10-27T02:40", None),
            ("2024-10-27T02:00+01:00", "2024-10-27T02:00", SECOND),
            ("2024-10-27T02:20+01:00", "2024-10-27T02:20", SECOND),
            ("2024-10-27T02:40+01:00", "2024-10-27T02:40", SECOND),
            ("2024-10-28T02:00+01:00", "2024-10-28T02:00", None),
        ],
    ),
    "berlin_spring_minute_30_every_hour_has_no_0230": Case(
        "Europe/Berlin",
        "30 * * * *",
        "2024-03-30T23:00",
        [
            ("2024-03-31T00:30+01:00", "2024-03-31T00:30", None),
            ("2024-03-31T01:30+01:00", "2024-03-31T01:30", None),
            ("2024-03-31T03:30+02:00", "2024-03-31T03:30", None),
        ],
    ),
    "berlin_spring_every_minute_of_hour_2_is_not_shifted": Case(
        "Europe/Berlin",
        "* 2 * * *",
        "2024-03-30T12:00",
        [
            ("2024-04-01T02:00+02:00", "2024-04-01T02:00", None),
            ("2024-04-01T02:01+02:00", "2024-04-01T02:01", None),
        ],
    ),
    "berlin_spring_hourly_macro_skips_missing_0200": Case(
        "Europe/Berlin",
        "@hourly",
        "2024-03-31T00:30",
        [
            ("2024-03-31T03:00+02:00", "2024-03-31T03:00", None),
            ("2024-03-31T04:00+02:00", "2024-03-31T04:00", None),
        ],
    ),
    "berlin_fall_hourly_macro_fires_0200_twice": Case(
        "Europe/Berlin",
        "@hourly",
        "2024-10-26T23:30",
        [
            ("2024-10-27T02:00+02:00", "2024-10-27T02:00", None),
            ("2024-10-27T02:00+01:00", "2024-10-27T02:00", SECOND),
            ("2024-10-27T03:00+01:00", "2024-10-27T03:00", None),
        ],
    ),
    # America/New_York: 2024-03-10 02:00 -> 03:00; 2024-11-03 02:00 -> 01:00.
    "new_york_spring_gap_0230_sundays_shifts_to_0300": Case(
        "America/New_York",
        "30 2 * * SUN",
        "2024-03-09T12:00",
        [
            ("2024-03-10T03:00-04:00", "2024-03-10T02:30", SHIFTED),
            ("2024-03-17T02:30-04:00", "2024-03-17T02:30", None),
        ],
    ),
    "new_york_spring_skip_both_is_literal_wall_clock": Case(
        "America/New_York",
        "30 1,2 * * *",
        "2024-03-09T12:00",
        [
            ("2024-03-10T01:30-05:00", "2024-03-10T01:30", None),
            ("2024-03-11T01:30-04:00", "2024-03-11T01:30", None),
            ("2024-03-11T02:30-04:00", "2024-03-11T02:30", None),
        ],
        gap=SKIP,
        overlap=BOTH,
    ),
    "new_york_fall_overlap_0130_first": Case(
        "America/New_York",
        "30 1 * * *",
        "2024-11-02T12:00",
        [
            ("2024-11-03T01:30-04:00", "2024-11-03T01:30", None),
            ("2024-11-04T01:30-05:00", "2024-11-04T01:30", None),
        ],
    ),
    "new_york_fall_overlap_0130_last": Case(
        "America/New_York",
        "30 1 * * *",
        "2024-11-02T12:00",
        [
            ("2024-11-03T01:30-05:00", "2024-11-03T01:30", SECOND),
            ("2024-11-04T01:30-05:00", "2024-11-04T01:30", None),
        ],
        overlap=LAST,
    ),
    "new_york_fall_skip_both_is_literal_wall_clock": Case(
        "America/New_York",
        "30 1,2 * * *",
        "2024-11-02T12:00",
        [
            ("2024-11-03T01:30-04:00", "2024-11-03T01:30", None),
            ("2024-11-03T01:30-05:00", "2024-11-03T01:30", SECOND),
            ("2024-11-03T02:30-05:00", "2024-11-03T02:30", None),
        ],
        gap=SKIP,
        overlap=BOTH,
    ),
    # Australia/Lord_Howe moves by 30 minutes: 2024-10-06 02:00 -> 02:30 (+10:30 -> +11);
    # 2024-04-07 02:00 -> 01:30.
    "lord_howe_spring_gap_0215_shifts_to_0230": Case(
        "Australia/Lord_Howe",
        "15 2 * * *",
        "2024-10-05T00:00",
        [
            ("2024-10-06T02:30+11:00", "2024-10-06T02:15", SHIFTED),
            ("2024-10-07T02:15+11:00", "2024-10-07T02:15", None),
        ],
    ),
    "lord_howe_spring_0230_exists": Case(
        "Australia/Lord_Howe",
        "30 2 * * *",
        "2024-10-05T00:00",
        [("2024-10-06T02:30+11:00", "2024-10-06T02:30", None)],
    ),
    "lord_howe_fall_overlap_0145_first": Case(
        "Australia/Lord_Howe",
        "45 1 * * *",
        "2024-04-06T00:00",
        [
            ("2024-04-07T01:45+11:00", "2024-04-07T01:45", None),
            ("2024-04-08T01:45+10:30", "2024-04-08T01:45", None),
        ],
    ),
    "lord_howe_fall_overlap_0145_last": Case(
        "Australia/Lord_Howe",
        "45 1 * * *",
        "2024-04-06T00:00",
        [
            ("2024-04-07T01:45+10:30", "2024-04-07T01:45", SECOND),
            ("2024-04-08T01:45+10:30", "2024-04-08T01:45", None),
        ],
        overlap=LAST,
    ),
    "lord_howe_fall_overlap_0145_both": Case(
        "Australia/Lord_Howe",
        "45 1 * * *",
        "2024-04-06T00:00",
        [
            ("2024-04-07T01:45+11:00", "2024-04-07T01:45", None),
            ("2024-04-07T01:45+10:30", "2024-04-07T01:45", SECOND),
        ],
        overlap=BOTH,
    ),
    "lord_howe_fall_quarter_hours_repeat_half_an_hour": Case(
        "Australia/Lord_Howe",
        "*/15 * * * *",
        "2024-04-06T14:30",  # 01:30+11:00, start of the first pass
        [
            ("2024-04-07T01:45+11:00", "2024-04-07T01:45", None),
            ("2024-04-07T01:30+10:30", "2024-04-07T01:30", SECOND),
            ("2024-04-07T01:45+10:30", "2024-04-07T01:45", SECOND),
            ("2024-04-07T02:00+10:30", "2024-04-07T02:00", None),
        ],
    ),
    # America/Santiago changes at midnight: 2024-09-08 00:00 -> 01:00;
    # 2024-04-07 00:00 -> 2024-04-06 23:00.
    "santiago_spring_midnight_gap_shifts_to_0100": Case(
        "America/Santiago",
        "0 0 * * *",
        "2024-09-07T12:00",
        [
            ("2024-09-08T01:00-03:00", "2024-09-08T00:00", SHIFTED),
            ("2024-09-09T00:00-03:00", "2024-09-09T00:00", None),
        ],
    ),
    "santiago_spring_daily_macro_is_fixed_time": Case(
        "America/Santiago",
        "@daily",
        "2024-09-07T12:00",
        [("2024-09-08T01:00-03:00", "2024-09-08T00:00", SHIFTED)],
    ),
    "santiago_spring_midnight_skip": Case(
        "America/Santiago",
        "0 0 * * *",
        "2024-09-07T12:00",
        [("2024-09-09T00:00-03:00", "2024-09-09T00:00", None)],
        gap=SKIP,
    ),
    "santiago_fall_2330_first": Case(
        "America/Santiago",
        "30 23 * * *",
        "2024-04-06T12:00",
        [
            ("2024-04-06T23:30-03:00", "2024-04-06T23:30", None),
            ("2024-04-07T23:30-04:00", "2024-04-07T23:30", None),
        ],
    ),
    "santiago_fall_2330_last": Case(
        "America/Santiago",
        "30 23 * * *",
        "2024-04-06T12:00",
        [
            ("2024-04-06T23:30-04:00", "2024-04-06T23:30", SECOND),
            ("2024-04-07T23:30-04:00", "2024-04-07T23:30", None),
        ],
        overlap=LAST,
    ),
    # America/Sao_Paulo kept DST until February 2019 (gap at midnight), then dropped it.
    "sao_paulo_2018_midnight_gap_shifts_to_0100": Case(
        "America/Sao_Paulo",
        "0 0 * * *",
        "2018-11-03T12:00",
        [
            ("2018-11-04T01:00-02:00", "2018-11-04T00:00", SHIFTED),
            ("2018-11-05T00:00-02:00", "2018-11-05T00:00", None),
        ],
    ),
    "sao_paulo_2019_first_sunday_of_november_no_longer_shifts": Case(
        "America/Sao_Paulo",
        "0 0 * * *",
        "2019-11-02T12:00",
        [
            ("2019-11-03T00:00-03:00", "2019-11-03T00:00", None),
            ("2019-11-04T00:00-03:00", "2019-11-04T00:00", None),
        ],
    ),
    # Asia/Tehran: last DST 2022 (gap 2022-03-22 00:00 -> 01:00), none from 2023.
    "tehran_2022_midnight_gap_0030_shifts_to_0100": Case(
        "Asia/Tehran",
        "30 0 * * *",
        "2022-03-21T00:00",
        [
            ("2022-03-22T01:00+04:30", "2022-03-22T00:30", SHIFTED),
            ("2022-03-23T00:30+04:30", "2022-03-23T00:30", None),
        ],
    ),
    "tehran_2023_no_dst_after_abolition": Case(
        "Asia/Tehran",
        "30 0 * * *",
        "2023-03-21T00:00",
        [
            ("2023-03-22T00:30+03:30", "2023-03-22T00:30", None),
            ("2023-03-23T00:30+03:30", "2023-03-23T00:30", None),
        ],
    ),
}


@pytest.mark.parametrize("case", [pytest.param(c, id=name) for name, c in CASES.items()])
def test_named_dst_case(case: Case) -> None:
    spec = CronSpec(case.expression, case.zone, dst_gap=case.gap, dst_overlap=case.overlap)
    assert rows(next_fires(spec, utc(case.after), len(case.expected))) == case.expected


def test_berlin_spring_skip_is_reported_at_the_gap_end() -> None:
    spec = CronSpec("30 2 * * *", "Europe/Berlin", dst_gap=DstGap.SKIP)
    skips = skipped_by_dst(spec, utc("2024-03-01T00:00"), utc("2024-04-30T00:00"))
    assert [(s.at, s.nominal, s.dst_adjustment) for s in skips] == [
        (utc("2024-03-31T01:00"), datetime(2024, 3, 31, 2, 30), DstAdjustment.GAP_SKIPPED)
    ]


def test_berlin_spring_shifted_fire_is_not_a_skip() -> None:
    spec = CronSpec("30 2 * * *", "Europe/Berlin")
    assert skipped_by_dst(spec, utc("2024-03-01T00:00"), utc("2024-04-30T00:00")) == []


def test_berlin_spring_wildcard_lists_missing_wall_times_as_skips() -> None:
    spec = CronSpec("*/30 * * * *", "Europe/Berlin")
    assert not spec.fixed_time
    skips = skipped_by_dst(spec, utc("2024-03-30T12:00"), utc("2024-04-01T00:00"))
    assert [s.nominal.isoformat(timespec="minutes") for s in skips] == [
        "2024-03-31T02:00",
        "2024-03-31T02:30",
    ]
    assert {s.at for s in skips} == {utc("2024-03-31T01:00")}


def test_skip_boundary_is_strictly_after_start() -> None:
    spec = CronSpec("30 2 * * *", "Europe/Berlin", dst_gap=DstGap.SKIP)
    gap_end = utc("2024-03-31T01:00")
    assert skipped_by_dst(spec, gap_end, gap_end + timedelta(days=1)) == []
    assert len(skipped_by_dst(spec, gap_end - timedelta(seconds=1), gap_end)) == 1


def test_berlin_fall_every_minute_of_hour_2_fires_120_times() -> None:
    spec = CronSpec("* 2 * * *", "Europe/Berlin")
    fires = fires_between(spec, utc("2024-10-26T12:00"), utc("2024-10-27T12:00"))
    assert len(fires) == 120
    assert [f.dst_adjustment for f in fires] == [None] * 60 + [SECOND] * 60
    assert [f.local.utcoffset() for f in fires] == [timedelta(hours=2)] * 60 + [
        timedelta(hours=1)
    ] * 60


def test_berlin_spring_every_minute_loses_one_hour() -> None:
    spec = CronSpec("* * * * *", "Europe/Berlin")
    # local midnight to midnight: 2024-03-31 00:00+01:00 to 2024-04-01 00:00+02:00
    fires = fires_between(spec, utc("2024-03-30T23:00"), utc("2024-03-31T22:00"))
    assert len(fires) == 23 * 60  # a 23-hour day, one fire per real minute
    assert all(f.dst_adjustment is None for f in fires)
    assert {f.nominal.hour for f in fires} == set(range(24)) - {2}


def test_sao_paulo_no_adjustments_in_a_year_without_dst() -> None:
    spec = CronSpec("0 0 * * *", "America/Sao_Paulo")
    fires = fires_between(spec, utc("2020-01-01T12:00"), utc("2021-01-01T12:00"))
    assert len(fires) == 366
    assert {f.dst_adjustment for f in fires} == {None}
    assert {f.local.utcoffset() for f in fires} == {timedelta(hours=-3)}


def test_interval_ignores_dst() -> None:
    spec = IntervalSpec(3_600_000, utc("2024-03-30T22:00"))
    fires = next_fires(spec, utc("2024-03-30T23:30"), 4)
    assert [f.at for f in fires] == [utc(f"2024-03-31T0{h}:00") for h in range(4)]
    assert {f.dst_adjustment for f in fires} == {None}


# ---------------------------------------------------------------------------------------
# Property tests against a brute-force wall-clock oracle

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "America/Havana",
    "Pacific/Chatham",
    "Africa/Casablanca",
    "Europe/Dublin",
    "America/Sao_Paulo",
    "Asia/Tehran",
    "Asia/Kolkata",
    "UTC",
]
DST_ZONES = ZONES[:8]  # with transitions every year from 2020 to 2030
EPOCH_2020 = datetime(2020, 1, 1, tzinfo=UTC)
EPOCH_2030 = datetime(2030, 12, 31, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


@cache
def transitions(zone_name: str) -> tuple[datetime, ...]:
    """Offset changes between 2020 and 2030, found by a daily scan and bisection."""
    zone = load_zone(zone_name)
    found = []
    day = EPOCH_2020
    while day < EPOCH_2030:
        nxt = day + timedelta(days=1)
        if day.astimezone(zone).utcoffset() != nxt.astimezone(zone).utcoffset():
            low, high = day, nxt
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(zone).utcoffset() == low.astimezone(zone).utcoffset():
                    low = middle
                else:
                    high = middle
            found.append(high.replace(microsecond=0))
        day = nxt
    return tuple(found)


@dataclass(frozen=True)
class Expr:
    """A generated expression with the value sets it stands for, for the oracle."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    day_star: bool
    weekday_star: bool

    @property
    def fixed_time(self) -> bool:
        minute, hour = self.text.split()[:2]
        return not minute.startswith("*") and not hour.startswith("*")

    def matches(self, wall: datetime) -> bool:
        if (
            wall.minute not in self.minutes
            or wall.hour not in self.hours
            or wall.month not in self.months
        ):
            return False
        day_ok = wall.day in self.days
        weekday_ok = wall.isoweekday() % 7 in self.weekdays
        if self.day_star or self.weekday_star:
            return day_ok and weekday_ok
        return day_ok or weekday_ok


MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
WEEKDAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


@st.composite
def field(
    draw: Any,
    low: int,
    high: int,
    names: list[str] | None = None,
    name_base: int = 0,
    star: bool = True,
) -> tuple[str, frozenset[int]]:
    """One field as text plus the values it stands for (Vixie semantics)."""

    def render(value: int) -> str:
        if names and 0 <= value - name_base < len(names) and draw(st.booleans()):
            return names[value - name_base]
        return str(value)

    def term() -> tuple[str, set[int]]:
        kind = draw(st.sampled_from(["value", "range", "range_step"]))
        a = draw(st.integers(low, high))
        if kind == "value":
            return render(a), {a}
        b = draw(st.integers(a, high))
        if kind == "range":
            return f"{render(a)}-{render(b)}", set(range(a, b + 1))
        step = draw(st.integers(1, max(1, high - low)))
        return f"{render(a)}-{render(b)}/{step}", set(range(a, b + 1, step))

    kinds = ["star", "star_step", "term", "list"] if star else ["term", "list"]
    kind = draw(st.sampled_from(kinds))
    if kind == "star":
        return "*", frozenset(range(low, high + 1))
    if kind == "star_step":
        step = draw(st.integers(1, high - low + 1))
        return f"*/{step}", frozenset(range(low, high + 1, step))
    parts = [term() for _ in range(draw(st.integers(1, 3)) if kind == "list" else 1)]
    return ",".join(text for text, _ in parts), frozenset().union(*(s for _, s in parts))


@st.composite
def expressions(
    draw: Any, hot_hours: tuple[int, ...] = (), fixed: bool = False, focus: bool = False
) -> Expr:
    """Random five-field expressions (``fixed``: fixed-time ones only). ``hot_hours``, the
    wall hours a DST transition touches, often (with ``focus``: always) fill the hour
    field, and then the day fields are mostly (always) ``*``, so the expression meets the
    transition."""
    minute, minutes = draw(field(0, 59, star=not fixed))
    if hot_hours and (focus or draw(st.integers(0, 3)) < 3):
        # the first missing or repeated hour, and maybe the hours after it
        chosen = sorted({hot_hours[0], *draw(st.lists(st.sampled_from(hot_hours)))})
        hour, hours = ",".join(map(str, chosen)), frozenset(chosen)
    else:
        hour, hours = draw(field(0, 23, star=not fixed))

    def mostly_every(low: int, high: int, *rest: Any) -> tuple[str, frozenset[int]]:
        # Mostly "*", so a window of a day or so usually has fires.
        if focus or draw(st.integers(0, 3)) < 3:
            return "*", frozenset(range(low, high + 1))
        result: tuple[str, frozenset[int]] = draw(field(low, high, *rest))
        return result

    day, days = mostly_every(1, 31)
    month, months = mostly_every(1, 12, MONTHS, 1)
    weekday, weekdays = mostly_every(0, 7, WEEKDAYS, 0)
    return Expr(
        text=f"{minute} {hour} {day} {month} {weekday}",
        minutes=minutes,
        hours=hours,
        days=days,
        months=months,
        weekdays=frozenset(v % 7 for v in weekdays),
        day_star=day.startswith("*"),
        weekday_star=weekday.startswith("*"),
    )


def hot_hours(zone_name: str, transition: datetime) -> tuple[int, ...]:
    """The wall hours that are missing or repeated at ``transition``, and the next one."""
    zone = load_zone(zone_name)
    old = (transition - MINUTE).astimezone(zone).utcoffset()
    new = transition.astimezone(zone).utcoffset()
    assert old is not None and new is not None
    wall = (transition + min(old, new)).replace(tzinfo=None)
    last = (transition + max(old, new)).replace(tzinfo=None)
    hours = {last.hour}
    while wall < last:
        hours.add(wall.hour)
        wall += MINUTE
    return tuple(sorted(hours))


@st.composite
def scenarios(draw: Any, fixed: bool = False, focus: bool = False) -> tuple[Expr, str, datetime]:
    """An expression, a zone and an ``after`` instant. Three times in four (with
    ``focus``: always) ``after`` lies up to a day before one of the zone's transitions
    (2020-2030), so a window of 30 hours meets it; otherwise anywhere in 2020-2030."""
    zone = draw(st.sampled_from(DST_ZONES if focus else ZONES))
    near = transitions(zone)
    if near and (focus or draw(st.integers(0, 3)) < 3):
        transition = draw(st.sampled_from(near))
        # Mostly before the transition; hypothesis favours 0, so `after == transition`
        # (a gap end is not after itself) comes up in the other branch.
        if draw(st.integers(0, 3)) < 3:
            after = transition - timedelta(seconds=draw(st.integers(1, 24 * 3600)))
        else:
            after = transition + timedelta(seconds=draw(st.integers(0, 2 * 3600)))
        expr = draw(expressions(hot_hours(zone, transition), fixed, focus))
    else:
        after = draw(
            st.datetimes(datetime(2020, 1, 1), datetime(2030, 12, 31), timezones=st.just(UTC))
        )
        expr = draw(expressions(fixed=fixed))
    if draw(st.booleans()):
        after = after.replace(second=0, microsecond=0)
    return expr, zone, after


def cron_spec(expr: Expr, zone: str, gap: DstGap, overlap: DstOverlap) -> CronSpec:
    try:
        return CronSpec(expr.text, zone, dst_gap=gap, dst_overlap=overlap)
    except InvalidCron as exc:
        # Only "a day no selected month has" (e.g. 30 in February alone) is refused.
        assert exc.field == "day-of-month", exc
        assume(False)
        raise


def oracle(
    expr: Expr, zone_name: str, gap: DstGap, overlap: DstOverlap, after: datetime, end: datetime
) -> tuple[list[tuple[datetime, datetime, DstAdjustment | None]], list[tuple[datetime, datetime]]]:
    """Fires and skips in (after, end], by reading the wall clock at every UTC minute."""
    zone = load_zone(zone_name)
    fixed = expr.fixed_time
    fires: dict[datetime, tuple[datetime, DstAdjustment | None]] = {}
    skips: list[tuple[datetime, datetime]] = []
    moment = after.replace(second=0, microsecond=0) + MINUTE
    previous = (moment - MINUTE).astimezone(zone).utcoffset()
    assert previous is not None
    while moment <= end:
        local = moment.astimezone(zone)
        offset = local.utcoffset()
        assert offset is not None
        if offset > previous:  # a gap ended at this instant
            wall = (moment + previous).replace(tzinfo=None)
            missing = []
            while wall < (moment + offset).replace(tzinfo=None):
                if expr.matches(wall):
                    missing.append(wall)
                wall += MINUTE
            if missing and fixed and gap is DstGap.SHIFT_TO_GAP_END:
                fires[moment] = (missing[0], DstAdjustment.GAP_SHIFTED)
            elif missing:
                skips.extend((moment, nominal) for nominal in missing)
        wall = local.replace(tzinfo=None)
        if expr.matches(wall):
            other = wall.replace(tzinfo=zone, fold=1 - local.fold).utcoffset()
            repeated = other != offset
            second_pass = repeated and local.fold == 1
            wanted = (
                not fixed
                or not repeated
                or overlap is DstOverlap.BOTH
                or (overlap is DstOverlap.FIRST and not second_pass)
                or (overlap is DstOverlap.LAST and second_pass)
            )
            if wanted:  # a real match outranks a fire shifted onto the same instant
                fires[moment] = (wall, DstAdjustment.OVERLAP_SECOND if second_pass else None)
        previous = offset
        moment += MINUTE
    return [(at, nominal, adj) for at, (nominal, adj) in sorted(fires.items())], skips


POLICIES = st.tuples(st.sampled_from(list(DstGap)), st.sampled_from(list(DstOverlap)))
FAST = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@settings(FAST, max_examples=200)
@given(
    scenario=st.one_of(scenarios(), scenarios(focus=True), scenarios(fixed=True, focus=True)),
    policy=POLICIES,
)
def test_fires_and_skips_match_wall_clock_oracle(
    scenario: tuple[Expr, str, datetime], policy: tuple[DstGap, DstOverlap]
) -> None:
    expr, zone, after = scenario
    gap, overlap = policy
    spec = cron_spec(expr, zone, gap, overlap)
    end = after + timedelta(hours=30)
    expected_fires, expected_skips = oracle(expr, zone, gap, overlap, after, end)
    fires = fires_between(spec, after, end)
    assert [(f.at, f.nominal, f.dst_adjustment) for f in fires] == expected_fires
    skips = skipped_by_dst(spec, after, end)
    assert [(s.at, s.nominal) for s in skips] == expected_skips
    # --hypothesis-show-statistics shows how often each DST path was exercised
    for kind in sorted({str(f.dst_adjustment) for f in fires if f.dst_adjustment}):
        event(f"window has {kind}")
    if skips:
        event("window has gap_skipped")


@FAST
@given(scenario=scenarios(), policy=POLICIES)
def test_fires_strictly_increase_after_after(
    scenario: tuple[Expr, str, datetime], policy: tuple[DstGap, DstOverlap]
) -> None:
    expr, zone, after = scenario
    spec = cron_spec(expr, zone, *policy)
    fires = next_fires(spec, after, 25)
    instants = [f.at for f in fires]
    assert len(fires) == 25
    assert all(at.tzinfo is UTC for at in instants)
    assert instants[0] > after
    assert all(a < b for a, b in itertools.pairwise(instants))


@FAST
@given(scenario=scenarios(), policy=POLICIES)
def test_no_fire_in_a_gap_unless_shifted_to_its_end(
    scenario: tuple[Expr, str, datetime], policy: tuple[DstGap, DstOverlap]
) -> None:
    expr, zone_name, after = scenario
    zone = load_zone(zone_name)
    spec = cron_spec(expr, zone_name, *policy)
    for fire in next_fires(spec, after, 25):
        assert fire.local == fire.at.astimezone(zone)
        assert fire.local.tzinfo is zone
        exists = fire.nominal.replace(tzinfo=zone).astimezone(UTC).astimezone(zone)
        if fire.dst_adjustment is DstAdjustment.GAP_SHIFTED:
            assert spec.fixed_time
            assert spec.dst_gap is DstGap.SHIFT_TO_GAP_END
            assert exists.replace(tzinfo=None) != fire.nominal  # the nominal time is missing
            before = (fire.at - timedelta(seconds=1)).astimezone(zone)
            assert before.utcoffset() != fire.local.utcoffset()  # a transition at `at`
            assert before.replace(tzinfo=None) < fire.nominal < fire.local.replace(tzinfo=None)
        else:
            assert fire.local.replace(tzinfo=None) == fire.nominal  # fires at its wall time
            assert expr.matches(fire.nominal)


@FAST
@given(scenario=scenarios(fixed=True))
def test_fixed_time_first_fires_each_wall_time_once(scenario: tuple[Expr, str, datetime]) -> None:
    expr, zone_name, after = scenario
    assert expr.fixed_time
    zone = load_zone(zone_name)
    spec = cron_spec(expr, zone_name, DstGap.SHIFT_TO_GAP_END, DstOverlap.FIRST)
    fires = next_fires(spec, after, 25)
    nominals = [f.nominal for f in fires]
    assert len(set(nominals)) == len(nominals)
    for fire in fires:
        assert fire.dst_adjustment is not DstAdjustment.OVERLAP_SECOND
        if fire.dst_adjustment is None:
            # the earlier reading of a folded wall time
            assert fire.nominal.replace(tzinfo=zone, fold=0).astimezone(UTC) == fire.at


@FAST
@given(scenario=scenarios(), policy=POLICIES, cut=st.integers(0, 19))
def test_resuming_from_any_fire_continues_the_same_sequence(
    scenario: tuple[Expr, str, datetime], policy: tuple[DstGap, DstOverlap], cut: int
) -> None:
    expr, zone, after = scenario
    spec = cron_spec(expr, zone, *policy)
    fires = next_fires(spec, after, 20)
    assert next_fires(spec, fires[cut].at, 20 - cut - 1) == fires[cut + 1 :]


@settings(max_examples=100, deadline=None, database=None)
@given(
    interval_ms=st.integers(1000, 7 * 86_400_000),
    starts_at=st.datetimes(datetime(2020, 1, 1), datetime(2030, 12, 31), timezones=st.just(UTC)),
    offset_ms=st.integers(-10 * 86_400_000, 400 * 86_400_000),
)
def test_interval_fires_are_exactly_one_interval_apart(
    interval_ms: int, starts_at: datetime, offset_ms: int
) -> None:
    spec = IntervalSpec(interval_ms, starts_at)
    after = starts_at + timedelta(milliseconds=offset_ms)
    fires = next_fires(spec, after, 10)
    step = timedelta(milliseconds=interval_ms)
    assert fires[0].at > after
    assert fires[0].at == starts_at or fires[0].at - step <= after
    assert (fires[0].at - starts_at) % step == timedelta(0)
    assert all(b.at - a.at == step for a, b in itertools.pairwise(fires))
    assert all(f.nominal == f.at.replace(tzinfo=None) and f.local == f.at for f in fires)
    assert {f.dst_adjustment for f in fires} == {None}
