"""Cron grammar, validation, intervals and the public surface of domain.recurrence (RS-1).

DST behaviour has its own file: test_recurrence_dst.py.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from itertools import islice, pairwise
from typing import Any

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.domain import recurrence
from punctual.domain.recurrence import (
    MIN_INTERVAL_MS,
    CronSpec,
    DstAdjustment,
    DstGap,
    DstOverlap,
    IntervalSpec,
    IntervalTooShort,
    InvalidCron,
    RecurrenceError,
    UnknownTimeZone,
    count_fires_between,
    fires_between,
    iter_fires,
    iter_timeline,
    load_zone,
    next_fires,
    skipped_by_dst,
    tzdata_version,
)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def instants(expression: str, after: str, count: int, zone: str = "UTC") -> list[str]:
    fires = next_fires(CronSpec(expression, zone), utc(after), count)
    return [f.at.isoformat(timespec="minutes").removesuffix("+00:00") for f in fires]


# ---------------------------------------------------------------------------------------
# Grammar


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        pytest.param(
            "*/15 * * * *",
            "2024-05-01T10:07",
            ["2024-05-01T10:15", "2024-05-01T10:30", "2024-05-01T10:45", "2024-05-01T11:00"],
            id="star_step",
        ),
        pytest.param(
            "10-30/10 9 * * *",
            "2024-05-01T00:00",
            ["2024-05-01T09:10", "2024-05-01T09:20", "2024-05-01T09:30", "2024-05-02T09:10"],
            id="range_step",
        ),
        pytest.param(
            "0 8,12-13,20 * * *",
            "2024-05-01T00:00",
            ["2024-05-01T08:00", "2024-05-01T12:00", "2024-05-01T13:00", "2024-05-01T20:00"],
            id="list_of_values_and_ranges",
        ),
        pytest.param(
            "5 2-2/3 * * *",
            "2024-05-01T00:00",
            ["2024-05-01T02:05", "2024-05-02T02:05"],
            id="one_value_range_with_step_is_that_value",
        ),
        pytest.param(
            "0 9 * jan,Jul mon",
            "2024-06-01T00:00",
            ["2024-07-01T09:00", "2024-07-08T09:00", "2024-07-15T09:00"],
            id="month_and_weekday_names_any_case_and",
        ),
        pytest.param(
            "0 9 * * MON-FRI",
            "2024-05-03T10:00",  # a Friday
            ["2024-05-06T09:00", "2024-05-07T09:00"],
            id="weekday_name_range",
        ),
        pytest.param(
            "0 9 * MAR-MAY/2 *",
            "2024-01-01T00:00",
            ["2024-03-01T09:00"],
            id="month_name_range_with_step",
        ),
        pytest.param(
            "0 9 1 MAR-5,12-DEC *",
            "2024-01-01T00:00",
            ["2024-03-01T09:00", "2024-04-01T09:00", "2024-05-01T09:00", "2024-12-01T09:00"],
            id="names_and_numbers_mixed_in_ranges",
        ),
        pytest.param(
            "0 9 * * 1-FRI",
            "2024-05-03T10:00",  # a Friday
            ["2024-05-06T09:00"],
            id="weekday_number_to_name_range",
        ),
        pytest.param(
            "0 0 * * 7",
            "2024-05-01T00:00",
            ["2024-05-05T00:00", "2024-05-12T00:00"],
            id="weekday_7_is_sunday",
        ),
        pytest.param(
            "0 0 * * 0",
            "2024-05-01T00:00",
            ["2024-05-05T00:00", "2024-05-12T00:00"],
            id="weekday_0_is_sunday",
        ),
        pytest.param(
            "0 12 13 * FRI",
            "2024-09-01T00:00",
            [
                "2024-09-06T12:00",
                "2024-09-13T12:00",  # Friday the 13th: once
                "2024-09-20T12:00",
                "2024-09-27T12:00",
                "2024-10-04T12:00",
                "2024-10-11T12:00",
                "2024-10-13T12:00",  # a Sunday, matched by day-of-month
            ],
            id="day_of_month_or_day_of_week_when_both_restricted",
        ),
        pytest.param(
            "0 12 13 * *",
            "2024-09-01T00:00",
            ["2024-09-13T12:00", "2024-10-13T12:00"],
            id="day_of_month_alone",
        ),
        pytest.param(
            "0 12 * * FRI",
            "2024-09-01T00:00",
            ["2024-09-06T12:00", "2024-09-13T12:00"],
            id="day_of_week_alone",
        ),
        pytest.param(
            "0 12 */10 * MON",
            "2024-01-01T00:00",
            ["2024-01-01T12:00", "2024-03-11T12:00"],
            id="day_field_starting_with_star_means_and_like_vixie",
        ),
        pytest.param(
            "0 0 29 2 *",
            "2024-03-01T00:00",
            ["2028-02-29T00:00"],
            id="leap_day",
        ),
        pytest.param(
            "  30   4  1  *  *  ",
            "2024-05-01T00:00",
            ["2024-05-01T04:30"],
            id="extra_whitespace",
        ),
    ],
)
def test_grammar(expression: str, after: str, expected: list[str]) -> None:
    assert instants(expression, after, len(expected)) == expected


@pytest.mark.parametrize(
    ("macro", "after", "expected"),
    [
        ("@hourly", "2024-05-01T10:30", ["2024-05-01T11:00", "2024-05-01T12:00"]),
        ("@daily", "2024-05-01T10:30", ["2024-05-02T00:00", "2024-05-03T00:00"]),
        ("@midnight", "2024-05-01T10:30", ["2024-05-02T00:00"]),
        ("@weekly", "2024-05-01T10:30", ["2024-05-05T00:00", "2024-05-12T00:00"]),
        ("@monthly", "2024-05-01T10:30", ["2024-06-01T00:00", "2024-07-01T00:00"]),
        ("@yearly", "2024-05-01T10:30", ["2025-01-01T00:00", "2026-01-01T00:00"]),
        ("@annually", "2024-05-01T10:30", ["2025-01-01T00:00"]),
        ("@DAILY", "2024-05-01T10:30", ["2024-05-02T00:00"]),
    ],
)
def test_macros(macro: str, after: str, expected: list[str]) -> None:
    assert instants(macro, after, len(expected)) == expected


@pytest.mark.parametrize(
    ("expression", "fixed"),
    [
        ("30 2 * * *", True),
        ("0-59 0-23 * * *", True),  # explicit ranges count as explicit (cron lineage)
        ("0 9,17 * * 1-5", True),
        ("@daily", True),
        ("@hourly", False),
        ("* 2 * * *", False),
        ("30 * * * *", False),
        ("*/5 9 * * *", False),
        ("0 */2 * * *", False),
    ],
)
def test_fixed_time_means_minute_and_hour_do_not_start_with_star(
    expression: str, fixed: bool
) -> None:
    assert CronSpec(expression).fixed_time is fixed


@pytest.mark.parametrize(
    ("expression", "field"),
    [
        pytest.param("", "expression", id="empty"),
        pytest.param("* * * *", "expression", id="four_fields"),
        pytest.param("0 0 0 * * *", "expression", id="six_fields_with_seconds"),
        pytest.param("0 0 * * * 2024", "expression", id="six_fields_with_year"),
        pytest.param("@reboot", "expression", id="macro_reboot"),
        pytest.param("@every 5m", "expression", id="macro_every"),
        pytest.param("60 * * * *", "minute", id="minute_out_of_range"),
        pytest.param("-1 * * * *", "minute", id="minute_negative"),
        pytest.param("a * * * *", "minute", id="minute_letters"),
        pytest.param("\u0663 * * * *", "minute", id="minute_non_ascii_digit"),
        pytest.param("*/\u00b2 * * * *", "minute", id="minute_superscript_step"),
        pytest.param("5/10 * * * *", "minute", id="minute_step_without_range"),
        pytest.param("*/0 * * * *", "minute", id="minute_step_zero"),
        pytest.param("*/x * * * *", "minute", id="minute_step_not_a_number"),
        pytest.param("30-10 * * * *", "minute", id="minute_range_backwards"),
        pytest.param("1,,2 * * * *", "minute", id="minute_empty_list_item"),
        pytest.param("0 24 * * *", "hour", id="hour_out_of_range"),
        pytest.param("0 1-2-3 * * *", "hour", id="hour_double_range"),
        pytest.param("0 0 0 * *", "day-of-month", id="day_of_month_zero"),
        pytest.param("0 0 32 * *", "day-of-month", id="day_of_month_32"),
        pytest.param("0 0 L * *", "day-of-month", id="day_of_month_L"),
        pytest.param("0 0 LW * *", "day-of-month", id="day_of_month_LW"),
        pytest.param("0 0 15W * *", "day-of-month", id="day_of_month_W"),
        pytest.param("0 0 ? * MON", "day-of-month", id="day_of_month_question_mark"),
        pytest.param("0 0 MON * *", "day-of-month", id="day_of_month_name"),
        pytest.param("0 0 31 2 *", "day-of-month", id="day_of_month_never_in_february"),
        pytest.param("0 0 31 APR,JUN *", "day-of-month", id="day_of_month_never_in_30_day_months"),
        pytest.param("0 0 * 13 *", "month", id="month_13"),
        pytest.param("0 0 * 0 *", "month", id="month_zero"),
        pytest.param("0 0 * FOO *", "month", id="month_unknown_name"),
        pytest.param("0 0 * JANUARY *", "month", id="month_long_name"),
        pytest.param("0 0 * MON *", "month", id="month_weekday_name"),
        pytest.param("0 0 * * 8", "day-of-week", id="day_of_week_8"),
        pytest.param("0 0 * * 5L", "day-of-week", id="day_of_week_last"),
        pytest.param("0 0 * * 1#2", "day-of-week", id="day_of_week_nth"),
        pytest.param("0 0 1 * ?", "day-of-week", id="day_of_week_question_mark"),
        pytest.param("0 0 * * FUNDAY", "day-of-week", id="day_of_week_unknown_name"),
        pytest.param("0 0 * * JAN", "day-of-week", id="day_of_week_month_name"),
        pytest.param("0 0 * * MON/2", "day-of-week", id="day_of_week_step_without_range"),
    ],
)
def test_invalid_cron_names_the_field(expression: str, field: str) -> None:
    with pytest.raises(InvalidCron) as caught:
        CronSpec(expression)
    error = caught.value
    assert error.field == field
    assert error.code == "invalid_cron"
    assert error.details == {"field": field}
    assert field in str(error)
    assert isinstance(error, RecurrenceError)
    assert isinstance(error, ValueError)


def test_invalid_cron_message_says_what_is_wrong() -> None:
    with pytest.raises(InvalidCron, match="60 is out of range 0-59"):
        CronSpec("60 * * * *")
    with pytest.raises(InvalidCron, match="not supported"):
        CronSpec("0 0 L * *")
    with pytest.raises(InvalidCron, match="seconds field"):
        CronSpec("0 0 0 * * *")


# ---------------------------------------------------------------------------------------
# Time zones


@pytest.mark.parametrize(
    "name",
    ["Mars/Olympus", "europe/berlin", "", "../../etc/passwd", "Europe/../UTC", "/UTC", "zones"],
)
def test_unknown_time_zone(name: str) -> None:
    with pytest.raises(UnknownTimeZone) as caught:
        CronSpec("0 9 * * *", name)
    assert caught.value.code == "unknown_time_zone"
    assert caught.value.details == {"time_zone": name}


def test_zones_come_from_the_packaged_tzdata() -> None:
    zone = load_zone("Europe/Berlin")
    assert zone is load_zone("Europe/Berlin")
    assert zone.key == "Europe/Berlin"
    assert datetime(2024, 7, 1, 12, tzinfo=zone).utcoffset() == timedelta(hours=2)
    assert tzdata_version() == importlib.import_module("tzdata").IANA_VERSION
    assert re.fullmatch(r"\d{4}[a-z]", tzdata_version())


def test_spec_defaults() -> None:
    spec = CronSpec("0 9 * * *")
    assert spec.time_zone == "UTC"
    assert spec.dst_gap is DstGap.SHIFT_TO_GAP_END
    assert spec.dst_overlap is DstOverlap.FIRST


def test_spec_accepts_policy_strings_from_the_api() -> None:
    skip: Any = "skip"
    both: Any = "both"
    spec = CronSpec("0 9 * * *", "Europe/Berlin", dst_gap=skip, dst_overlap=both)
    assert spec.dst_gap is DstGap.SKIP
    assert spec.dst_overlap is DstOverlap.BOTH
    unknown: Any = "sometimes"
    with pytest.raises(ValueError, match="sometimes"):
        CronSpec("0 9 * * *", dst_overlap=unknown)


def test_policy_values_are_the_api_strings() -> None:
    assert [m.value for m in DstGap] == ["shift_to_gap_end", "skip"]
    assert [m.value for m in DstOverlap] == ["first", "last", "both"]
    assert [m.value for m in DstAdjustment] == ["gap_shifted", "gap_skipped", "overlap_second"]

    # Each member carries its own docstring (the string right after it in the source).
    for enum_type in (DstGap, DstOverlap, DstAdjustment):
        (klass,) = ast.parse(textwrap.dedent(inspect.getsource(enum_type))).body
        assert isinstance(klass, ast.ClassDef)
        body = klass.body
        documented = {
            target.id
            for statement, following in pairwise(body)
            if isinstance(statement, ast.Assign)
            for target in statement.targets
            if isinstance(target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        }
        assert documented == {member.name for member in enum_type}


# ---------------------------------------------------------------------------------------
# Results and the public functions


def test_fire_fields_in_a_zone() -> None:
    (fire,) = next_fires(CronSpec("30 9 * * *", "America/New_York"), utc("2024-07-01T00:00"), 1)
    assert fire.at == utc("2024-07-01T13:30")
    assert fire.at.tzinfo is UTC
    assert fire.local.isoformat() == "2024-07-01T09:30:00-04:00"
    assert fire.nominal == datetime(2024, 7, 1, 9, 30)
    assert fire.nominal.tzinfo is None
    assert fire.dst_adjustment is None


def test_after_may_carry_any_offset() -> None:
    spec = CronSpec("0 * * * *")
    after = datetime(2024, 5, 1, 12, 30, tzinfo=timezone(timedelta(hours=5)))  # 07:30Z
    assert next_fires(spec, after, 1)[0].at == utc("2024-05-01T08:00")


def test_fires_are_strictly_after_after() -> None:
    spec = CronSpec("0 * * * *")
    assert next_fires(spec, utc("2024-05-01T08:00"), 1)[0].at == utc("2024-05-01T09:00")
    just_before = utc("2024-05-01T08:00") - timedelta(microseconds=1)
    assert next_fires(spec, just_before, 1)[0].at == utc("2024-05-01T08:00")


def test_naive_after_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fires(CronSpec("0 * * * *"), datetime(2024, 5, 1), 1)


def test_count_must_not_be_negative() -> None:
    assert next_fires(CronSpec("0 * * * *"), utc("2024-05-01T00:00"), 0) == []
    with pytest.raises(ValueError, match="count"):
        next_fires(CronSpec("0 * * * *"), utc("2024-05-01T00:00"), -1)


def test_iter_fires_is_lazy_and_unbounded() -> None:
    fires = iter_fires(CronSpec("0 0 1 1 *"), utc("2024-05-01T00:00"))
    years = [fire.at.year for fire in islice(fires, 100)]
    assert years == list(range(2025, 2125))


def test_fires_between_is_start_exclusive_end_inclusive() -> None:
    spec = CronSpec("0 * * * *")
    fires = fires_between(spec, utc("2024-05-01T08:00"), utc("2024-05-01T11:00"))
    assert [f.at.hour for f in fires] == [9, 10, 11]
    limited = fires_between(spec, utc("2024-05-01T08:00"), utc("2024-05-01T11:00"), limit=2)
    assert [f.at.hour for f in limited] == [9, 10]


def test_count_fires_between() -> None:
    spec = CronSpec("*/5 * * * *")
    start, end = utc("2024-05-01T00:00"), utc("2024-05-02T00:00")
    assert count_fires_between(spec, start, end) == 288
    assert count_fires_between(spec, start, end, limit=10) == 10
    assert count_fires_between(spec, end, start) == 0


def test_timeline_orders_skips_before_the_fire_at_the_same_instant() -> None:
    spec = CronSpec("0 2,3 * * *", "Europe/Berlin", dst_gap=DstGap.SKIP)
    items = list(islice(iter_timeline(spec, utc("2024-03-30T12:00")), 3))
    assert [(type(i).__name__, i.at, i.nominal.hour) for i in items] == [
        ("DstSkip", utc("2024-03-31T01:00"), 2),
        ("Fire", utc("2024-03-31T01:00"), 3),
        ("Fire", utc("2024-04-01T00:00"), 2),
    ]


def test_intervals_have_no_dst_skips() -> None:
    spec = IntervalSpec(60_000, utc("2024-03-31T00:00"))
    assert skipped_by_dst(spec, utc("2024-03-30T00:00"), utc("2024-04-01T00:00")) == []


# ---------------------------------------------------------------------------------------
# Intervals


def test_interval_minimum() -> None:
    assert MIN_INTERVAL_MS == 1000
    IntervalSpec(1000, None)
    with pytest.raises(IntervalTooShort) as caught:
        IntervalSpec(999, None)
    assert caught.value.code == "interval_too_short"
    assert caught.value.details == {"interval_ms": 999, "minimum_ms": 1000}
    with pytest.raises(IntervalTooShort):
        IntervalSpec(0, None)
    not_a_number: Any = True
    with pytest.raises(TypeError):
        IntervalSpec(not_a_number, None)


def test_interval_starts_at_must_be_aware_and_is_kept_in_utc() -> None:
    with pytest.raises(ValueError, match="starts_at"):
        IntervalSpec(60_000, datetime(2024, 5, 1))
    spec = IntervalSpec(60_000, datetime(2024, 5, 1, 12, tzinfo=timezone(timedelta(hours=2))))
    assert spec.starts_at == utc("2024-05-01T10:00")
    assert spec.starts_at is not None and spec.starts_at.tzinfo is UTC


def test_interval_first_fire_is_starts_at_when_in_the_future() -> None:
    spec = IntervalSpec(90_000, utc("2024-05-01T10:00"))
    fires = next_fires(spec, utc("2024-05-01T09:00"), 3)
    assert [f.at for f in fires] == [
        utc("2024-05-01T10:00"),
        utc("2024-05-01T10:01:30"),
        utc("2024-05-01T10:03"),
    ]


def test_interval_continues_the_grid_strictly_after_after() -> None:
    spec = IntervalSpec(90_000, utc("2024-05-01T10:00"))
    assert next_fires(spec, utc("2024-05-01T10:03"), 1)[0].at == utc("2024-05-01T10:04:30")
    assert next_fires(spec, utc("2024-05-01T10:02"), 1)[0].at == utc("2024-05-01T10:03")


def test_interval_without_starts_at_fires_one_interval_after_after() -> None:
    spec = IntervalSpec(60_000, None)
    fires = next_fires(spec, utc("2024-05-01T10:00:30"), 2)
    assert [f.at for f in fires] == [utc("2024-05-01T10:01:30"), utc("2024-05-01T10:02:30")]


def test_interval_fire_fields() -> None:
    (fire,) = next_fires(IntervalSpec(1000, utc("2024-05-01T10:00")), utc("2024-05-01T11:00"), 1)
    assert fire.at == fire.local == utc("2024-05-01T11:00:01")
    assert fire.nominal == datetime(2024, 5, 1, 11, 0, 1)
    assert fire.dst_adjustment is None


@settings(max_examples=100, deadline=None, database=None)
@given(
    interval_ms=st.integers(1000, 3 * 86_400_000),
    starts_at=st.datetimes(datetime(2020, 1, 1), datetime(2030, 12, 31), timezones=st.just(UTC)),
    start_ms=st.integers(-5 * 86_400_000, 30 * 86_400_000),
    length_ms=st.integers(0, 10 * 86_400_000),
)
def test_interval_count_matches_the_fires(
    interval_ms: int, starts_at: datetime, start_ms: int, length_ms: int
) -> None:
    spec = IntervalSpec(interval_ms, starts_at)
    start = starts_at + timedelta(milliseconds=start_ms)
    end = start + timedelta(milliseconds=length_ms)
    fires = fires_between(spec, start, end)
    assert count_fires_between(spec, start, end) == len(fires)
    assert all(start < f.at <= end for f in fires)


# ---------------------------------------------------------------------------------------
# Cost: the API computes five fires per schedule read; catch-up walks many.


class _CountingCronSim(CronSim):
    """cronsim's iterator, counting the wall times it is asked for: the work a fire
    computation does, whatever the machine's load (a timed bound is not)."""

    read = 0

    def __next__(self) -> datetime:
        _CountingCronSim.read += 1
        return super().__next__()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> type[_CountingCronSim]:
    monkeypatch.setattr(recurrence, "CronSim", _CountingCronSim)
    _CountingCronSim.read = 0
    return _CountingCronSim


def test_next_five_fires_is_cheap(counted: type[_CountingCronSim]) -> None:
    """Five fires read about five wall times (one more to know the last is final), never
    a scan of the calendar: a schedule read computes them."""
    spec = CronSpec("30 2 * * 1-5", "America/New_York")
    for _ in range(200):
        assert len(next_fires(spec, utc("2024-03-01T00:00"), 5)) == 5
    assert counted.read <= 200 * 6


def test_ten_thousand_minutely_fires_is_cheap(counted: type[_CountingCronSim]) -> None:
    """Across the end of summer time (the repeated hour's 60 minutes come twice), one wall
    time read per fire at most, and the hour's lookahead."""
    spec = CronSpec("* * * * *", "Europe/Berlin")
    fires = next_fires(spec, utc("2024-10-26T00:00"), 10_000)
    assert len(fires) == 10_000
    assert counted.read <= 10_000 + 61
