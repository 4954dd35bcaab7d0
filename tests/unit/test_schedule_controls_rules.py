"""The pure rules of the schedule controls (SPEC RS-9a..RS-9d).

Jitter is a deterministic delay in ``[0, jitter_ms)`` per (schedule, occurrence_at) and
must stay shorter than the smallest gap between fires (DST passes included); an end or a
count stops the plan; a backfill covers exactly the preview's fire times of ``(from,
to]`` and generates again only what was skipped or failed; a trigger takes the next free
millisecond; dispatch decides a triggered or backfilled occurrence under its own policy.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.domain.fire_gaps import smallest_gap
from punctual.domain.recurrence import (
    CronSpec,
    DstOverlap,
    IntervalSpec,
    RecurrenceSpec,
    fires_between,
    load_zone,
)
from punctual.domain.schedules import (
    BACKFILL_LIMIT,
    MAX_JITTER_MS,
    BackfillRange,
    BackfillTooLarge,
    MissedPolicy,
    OverlapDecision,
    OverlapPolicy,
    SchedulePolicy,
    StoredInstant,
    backfill_fires,
    check_backfill_range,
    has_ended,
    jitter_delay,
    max_jitter_ms,
    next_bounded_fire,
    occurrence_overlap_decision,
    plan_backfill,
    plan_occurrences,
    remaining_occurrences,
    trigger_instant,
)
from punctual.domain.timeutil import to_rfc3339
from punctual.usecases.recurring.schedules import preview

MS = timedelta(milliseconds=1)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
YEAR = timedelta(days=366)
T0 = datetime(2027, 1, 4, 12, 0, tzinfo=UTC)
PROPERTY = settings(max_examples=60, deadline=None, database=None)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def catch_up(jitter: timedelta = timedelta(0)) -> SchedulePolicy:
    return SchedulePolicy(OverlapPolicy.ALLOW_ALL, MissedPolicy.CATCH_UP, jitter=jitter)


def brute_smallest_gap(spec: RecurrenceSpec, after: datetime, horizon: timedelta) -> timedelta:
    fires = [fire.at for fire in fires_between(spec, after, after + horizon)]
    return min(later - earlier for earlier, later in itertools.pairwise(fires))


# --------------------------------------------------------------------------- jitter (RS-9d)


def test_jitter_is_the_same_for_the_same_schedule_and_instant() -> None:
    at = utc(2027, 3, 1, 2, 30)
    first = jitter_delay("sch_a", at, timedelta(minutes=10))
    assert jitter_delay("sch_a", at, timedelta(minutes=10)) == first
    # The same instant written in another offset is the same instant.
    tokyo = at.astimezone(load_zone("Asia/Tokyo"))
    assert jitter_delay("sch_a", tokyo, timedelta(minutes=10)) == first


def test_jitter_spreads_schedules_and_instants() -> None:
    at = utc(2027, 3, 1, 2, 30)
    by_schedule = {jitter_delay(f"sch_{n}", at, HOUR) for n in range(50)}
    by_instant = {jitter_delay("sch_a", at + n * DAY, HOUR) for n in range(50)}
    assert len(by_schedule) > 40
    assert len(by_instant) > 40


@PROPERTY
@given(
    schedule_id=st.text(min_size=1, max_size=30),
    offset_ms=st.integers(min_value=0, max_value=10**12),
    jitter_ms=st.integers(min_value=1, max_value=10**9),
)
def test_jitter_is_whole_milliseconds_within_its_bound(
    schedule_id: str, offset_ms: int, jitter_ms: int
) -> None:
    delay = jitter_delay(schedule_id, T0 + offset_ms * MS, jitter_ms * MS)
    assert timedelta(0) <= delay < jitter_ms * MS
    assert delay % MS == timedelta(0)


def test_no_jitter_is_no_delay() -> None:
    assert jitter_delay("sch_a", T0, timedelta(0)) == timedelta(0)
    assert jitter_delay("sch_a", T0, timedelta(microseconds=999)) == timedelta(0)


@pytest.mark.parametrize(
    ("spec", "expected_ms"),
    [
        pytest.param(IntervalSpec(60_000, T0), 59_999, id="interval"),
        pytest.param(CronSpec("*/5 * * * *", "Europe/Berlin"), 299_999, id="every_5_minutes"),
        # 02:30 does not exist on the spring night: the fire moves to 03:00 CEST.
        pytest.param(CronSpec("30 2 * * *", "Europe/Berlin"), 23.5 * 3_600_000 - 1, id="gap"),
        # With both passes of the repeated hour, two fires are one hour apart.
        pytest.param(
            CronSpec("30 1 * * *", "America/New_York", dst_overlap=DstOverlap.BOTH),
            3_599_999,
            id="overlap_both",
        ),
        pytest.param(CronSpec("30 1 * * *", "America/New_York"), 23 * 3_600_000 - 1, id="spring"),
        pytest.param(CronSpec("0 9 * * 1-5", "UTC"), 24 * 3_600_000 - 1, id="weekdays"),
    ],
)
def test_max_jitter_is_just_below_the_smallest_gap_over_a_year(
    spec: RecurrenceSpec, expected_ms: float
) -> None:
    assert max_jitter_ms(spec, T0) == int(expected_ms)


def test_max_jitter_without_two_fires_in_a_year_is_the_ceiling() -> None:
    leap_day = CronSpec("0 0 29 2 *", "UTC")  # next 29 February: 2028, beyond a year from T0
    assert max_jitter_ms(leap_day, utc(2026, 12, 1)) == MAX_JITTER_MS


@pytest.mark.parametrize(
    ("expression", "zone", "after", "horizon"),
    [
        # Dense enough that the transition lies past the fires read from the start.
        pytest.param("59 0-23 * * *", "Europe/Berlin", utc(2027, 1, 1), 120 * DAY, id="spring_59"),
        pytest.param("*/5 * * * *", "Europe/Berlin", utc(2027, 3, 10), 30 * DAY, id="wildcard"),
        pytest.param(
            "0,20,40 0-23 * * *", "America/New_York", utc(2027, 9, 1), 90 * DAY, id="fall_list"
        ),
        pytest.param("30 2 * * 0", "Europe/Berlin", utc(2027, 1, 1), YEAR, id="weekly"),
        pytest.param("0 3 1 * *", "America/New_York", utc(2027, 1, 1), YEAR, id="monthly"),
    ],
)
def test_smallest_gap_matches_reading_every_fire(
    expression: str, zone: str, after: datetime, horizon: timedelta
) -> None:
    spec = CronSpec(expression, zone, dst_overlap=DstOverlap.BOTH)
    assert smallest_gap(spec, after, horizon) == brute_smallest_gap(spec, after, horizon)


def test_smallest_gap_finds_the_minute_a_spring_gap_leaves() -> None:
    # 01:59 CET and 02:59, which does not exist and moves to 03:00 CEST: one minute apart.
    spec = CronSpec("59 0-23 * * *", "Europe/Berlin")
    assert smallest_gap(spec, utc(2027, 1, 1), 120 * DAY) == MINUTE


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(CronSpec("30 1 * * *", "America/New_York", dst_overlap="both"), id="ny"),
        pytest.param(CronSpec("30 2 * * *", "Europe/Berlin", dst_overlap="last"), id="berlin"),
        pytest.param(CronSpec("*/15 1-3 * * *", "Europe/Berlin"), id="wildcard"),
    ],
)
def test_jitter_at_its_bound_never_reaches_the_next_fire_across_dst(spec: CronSpec) -> None:
    bound = max_jitter_ms(spec, T0) * MS
    fires = [fire.at for fire in fires_between(spec, T0, T0 + YEAR)]
    for at, following in itertools.pairwise(fires):
        assert at + jitter_delay("sch_dst", at, bound) < following


# --------------------------------------------------------------------------- end and count


def test_a_plan_stops_at_end_at_and_says_the_schedule_ended() -> None:
    spec = IntervalSpec(60_000, T0 + MINUTE)
    plan = plan_occurrences(spec, catch_up(), T0, T0 + 10 * MINUTE, 100, end_at=T0 + 3 * MINUTE)
    assert [o.at for o in plan.occurrences] == [T0 + MINUTE, T0 + 2 * MINUTE, T0 + 3 * MINUTE]
    assert plan.ended and plan.next_fire_at is None
    assert plan.counted == 3


def test_a_fire_exactly_at_end_at_is_the_last() -> None:
    spec = IntervalSpec(60_000, T0 + MINUTE)
    plan = plan_occurrences(spec, catch_up(), T0, T0 + MINUTE, 100, end_at=T0 + MINUTE)
    assert [o.at for o in plan.occurrences] == [T0 + MINUTE]
    assert plan.next_fire_at is None


def test_a_plan_before_the_end_looks_again_at_the_next_fire() -> None:
    spec = IntervalSpec(60_000, T0 + MINUTE)
    plan = plan_occurrences(spec, catch_up(), T0, T0 + MINUTE, 100, end_at=T0 + HOUR)
    assert not plan.ended and plan.next_fire_at == T0 + 2 * MINUTE


def test_max_occurrences_counts_generated_fires() -> None:
    spec = IntervalSpec(60_000, T0 + MINUTE)
    plan = plan_occurrences(spec, catch_up(), T0, T0 + 10 * MINUTE, 100, remaining=4)
    assert len(plan.occurrences) == 4 and plan.ended and plan.counted == 4


def test_a_missed_range_counts_its_count_and_is_cut_at_what_remains() -> None:
    spec = IntervalSpec(60_000, T0 + MINUTE)
    skip = SchedulePolicy(OverlapPolicy.ALLOW_ALL, MissedPolicy.SKIP)
    plan = plan_occurrences(spec, skip, T0, T0 + 30 * MINUTE, 100, remaining=12)
    assert plan.missed is not None and plan.missed.count == 12
    assert plan.missed.last == T0 + 12 * MINUTE
    assert plan.occurrences == [] and plan.ended and plan.counted == 12


def test_a_missed_range_and_later_fires_share_what_remains() -> None:
    spec = IntervalSpec(60_000, T0 + MINUTE)
    skip = SchedulePolicy(OverlapPolicy.ALLOW_ALL, MissedPolicy.SKIP)
    plan = plan_occurrences(spec, skip, T0, T0 + 10 * MINUTE + MS, 100, 3 * MINUTE, remaining=12)
    assert plan.missed is not None and plan.missed.count == 9
    assert [o.at for o in plan.occurrences] == [
        T0 + 10 * MINUTE,
        T0 + 11 * MINUTE,
        T0 + 12 * MINUTE,
    ]
    assert plan.counted == 12 and plan.ended


def test_an_end_bounds_a_missed_range_too() -> None:
    spec = IntervalSpec(60_000, T0 + MINUTE)
    skip = SchedulePolicy(OverlapPolicy.ALLOW_ALL, MissedPolicy.SKIP)
    plan = plan_occurrences(spec, skip, T0, T0 + HOUR, 100, end_at=T0 + 5 * MINUTE)
    assert plan.missed is not None and plan.missed.last == T0 + 5 * MINUTE
    assert plan.missed.count == 5 and plan.ended


def test_remaining_and_the_end_of_a_schedule() -> None:
    spec = IntervalSpec(60_000, T0 + MINUTE)
    assert remaining_occurrences(None, 7) is None
    assert remaining_occurrences(5, 7) == 0
    assert remaining_occurrences(10, 7) == 3
    assert not has_ended(spec, T0, None, None)
    assert has_ended(spec, T0, None, 0)
    assert has_ended(spec, T0 + MINUTE, T0 + 90 * timedelta(seconds=1), None)
    assert not has_ended(spec, T0, T0 + MINUTE, 1)
    assert next_bounded_fire(spec, T0, T0 + MINUTE, None) == T0 + MINUTE
    assert next_bounded_fire(spec, T0 + MINUTE, T0 + MINUTE, None) is None


# --------------------------------------------------------------------------- backfill (RS-9b)

DST_NIGHTS = {
    # (zone, local night's start, local night's end); transitions of 2026.
    "berlin_spring_forward": ("Europe/Berlin", utc(2026, 3, 28, 22), utc(2026, 3, 29, 4)),
    "berlin_fall_back": ("Europe/Berlin", utc(2026, 10, 24, 22), utc(2026, 10, 25, 4)),
    "new_york_spring_forward": ("America/New_York", utc(2026, 3, 8, 4), utc(2026, 3, 8, 10)),
    "new_york_fall_back": ("America/New_York", utc(2026, 11, 1, 4), utc(2026, 11, 1, 10)),
}
NIGHT_SPECS = {
    "fixed_default": {"cron": "30 2 * * *"},
    "fixed_1_30_both": {"cron": "30 1 * * *", "dst_overlap": "both"},
    "fixed_1_30_last": {"cron": "30 1 * * *", "dst_overlap": "last"},
    "fixed_2_30_skip": {"cron": "30 2 * * *", "dst_gap": "skip"},
    "every_20_minutes": {"cron": "*/20 * * * *"},
    "hourly_at_15": {"cron": "15 * * * *"},
}


@pytest.mark.parametrize(
    ("night", "spec_name"),
    [pytest.param(n, s, id=f"{n}-{s}") for n in DST_NIGHTS for s in NIGHT_SPECS],
)
def test_backfill_of_a_dst_night_is_exactly_what_the_preview_shows(
    night: str, spec_name: str
) -> None:
    zone, start, end = DST_NIGHTS[night]
    data = {**NIGHT_SPECS[spec_name], "time_zone": zone}
    spec = CronSpec(
        data["cron"],
        zone,
        dst_gap=data.get("dst_gap", "shift_to_gap_end"),
        dst_overlap=data.get("dst_overlap", "first"),
    )
    previewed = [
        item["fire_at"]
        for item in preview({"spec": data}, start, 100)["items"]
        if item["fire_at"] <= to_rfc3339(end)
    ]
    assert [to_rfc3339(fire.at) for fire in backfill_fires(spec, start, end)] == previewed


def test_backfill_of_the_berlin_spring_night_fires_the_missing_02_30_at_03_00() -> None:
    spec = CronSpec("30 2 * * *", "Europe/Berlin")
    (fire,) = backfill_fires(spec, *DST_NIGHTS["berlin_spring_forward"][1:])
    assert fire.at == utc(2026, 3, 29, 1, 0)  # 03:00 CEST
    assert fire.dst_adjustment is not None and fire.dst_adjustment.value == "gap_shifted"


def test_backfill_of_the_new_york_fall_night_fires_both_passes_when_asked() -> None:
    spec = CronSpec("30 1 * * *", "America/New_York", dst_overlap=DstOverlap.BOTH)
    fires = backfill_fires(spec, *DST_NIGHTS["new_york_fall_back"][1:])
    assert [fire.at for fire in fires] == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30)]


def test_backfill_range_is_left_open_and_right_closed() -> None:
    spec = IntervalSpec(60_000, T0)
    fires = backfill_fires(spec, T0, T0 + 3 * MINUTE)
    assert [fire.at for fire in fires] == [T0 + MINUTE, T0 + 2 * MINUTE, T0 + 3 * MINUTE]


def test_backfill_refuses_more_than_its_limit() -> None:
    spec = IntervalSpec(60_000, T0)
    assert len(backfill_fires(spec, T0, T0 + BACKFILL_LIMIT * MINUTE)) == BACKFILL_LIMIT
    with pytest.raises(BackfillTooLarge):
        backfill_fires(spec, T0, T0 + (BACKFILL_LIMIT + 1) * MINUTE)


@pytest.mark.parametrize(
    ("start", "end"),
    [
        pytest.param(T0, T0, id="empty"),
        pytest.param(T0 + MINUTE, T0, id="backwards"),
        pytest.param(T0 - HOUR, T0 + MS, id="to_in_the_future"),
    ],
)
def test_backfill_range_must_be_a_past_stretch(start: datetime, end: datetime) -> None:
    with pytest.raises(BackfillRange):
        check_backfill_range(start, end, T0)


def test_backfill_may_end_now() -> None:
    check_backfill_range(T0 - HOUR, T0, T0)


def test_backfill_keeps_live_and_finished_and_regenerates_skipped_and_failed() -> None:
    spec = IntervalSpec(60_000, T0)
    fires = backfill_fires(spec, T0, T0 + 8 * MINUTE)
    at = [fire.at for fire in fires]
    stored = [
        StoredInstant("occ_scheduled", at[0], "scheduled", 0),
        StoredInstant("occ_buffered", at[1], "buffered", 0),
        StoredInstant("occ_dispatched", at[2], "dispatched", 0),
        StoredInstant("occ_canceled", at[3], "canceled", 0),
        StoredInstant("occ_overlap", at[4], "skipped", 0),
        StoredInstant("occ_failed", at[5], "failed", 0),
        # at[6] has no row: a missed range that starts earlier covers it.
        StoredInstant("occ_missed", at[5], "skipped", 1, range_last=at[7]),
        StoredInstant("occ_failed_twice", at[7], "failed", 0),
        StoredInstant("occ_failed_again", at[7], "failed", 1),
    ]
    plan = plan_backfill(fires, stored)
    assert [(item.existing_id, item.rerun) for item in plan] == [
        ("occ_scheduled", 0),
        ("occ_buffered", 0),
        ("occ_dispatched", 0),
        ("occ_canceled", 0),
        (None, 1),
        (None, 2),
        (None, 0),
        (None, 2),
    ]


def test_an_instant_regenerated_once_is_existing_the_second_time() -> None:
    spec = IntervalSpec(60_000, T0)
    fires = backfill_fires(spec, T0, T0 + MINUTE)
    stored = [
        StoredInstant("occ_missed", fires[0].at, "skipped", 0, range_last=T0 + HOUR),
        StoredInstant("occ_backfilled", fires[0].at, "buffered", 1),
    ]
    assert [item.existing_id for item in plan_backfill(fires, stored)] == ["occ_backfilled"]


# --------------------------------------------------------------------------- trigger (RS-9a)


def test_trigger_takes_now_to_the_millisecond() -> None:
    now = utc(2027, 1, 4, 12, 0) + timedelta(microseconds=123_456)
    assert trigger_instant(now, set()) == utc(2027, 1, 4, 12, 0) + 123 * MS


def test_trigger_takes_the_next_free_millisecond() -> None:
    now = T0 + timedelta(microseconds=5_500)
    taken = {T0 + 5 * MS, T0 + 6 * MS}
    assert trigger_instant(now, taken) == T0 + 7 * MS


# --------------------------------------------------------------------------- overlap at dispatch


@pytest.mark.parametrize(
    ("schedule_policy", "origin", "named", "unfinished", "buffered", "expected"),
    [
        # A trigger under the schedule's policy, or under the one it names.
        ("skip", "trigger", None, True, False, OverlapDecision.SKIP),
        ("skip", "trigger", "allow_all", True, False, OverlapDecision.START),
        ("allow_all", "trigger", "skip", True, False, OverlapDecision.SKIP),
        ("skip", "trigger", "buffer_one", True, False, OverlapDecision.BUFFER),
        # A queued backfilled occurrence waits for the previous run, never skips.
        ("skip", "backfill", None, True, False, OverlapDecision.BUFFER),
        ("skip", "backfill", None, True, True, OverlapDecision.BUFFER),
        ("allow_all", "backfill", None, True, False, OverlapDecision.BUFFER),
        ("skip", "backfill", None, False, False, OverlapDecision.START),
        # A backfill that named a policy is decided by it.
        ("skip", "backfill", "allow_all", True, False, OverlapDecision.START),
        ("allow_all", "backfill", "skip", True, False, OverlapDecision.SKIP),
        # The spec's own occurrences are unchanged (RS-3).
        ("buffer_one", "schedule", None, True, True, OverlapDecision.SKIP),
        ("buffer_one", "schedule", None, True, False, OverlapDecision.BUFFER),
    ],
)
def test_occurrence_overlap_decision(
    schedule_policy: str,
    origin: str,
    named: str | None,
    unfinished: bool,
    buffered: bool,
    expected: OverlapDecision,
) -> None:
    decision = occurrence_overlap_decision(
        OverlapPolicy(schedule_policy), origin, named, unfinished, buffered
    )
    assert decision is expected
