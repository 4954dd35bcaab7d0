"""The pure planning of recurring schedules (SPEC RS-3, RS-4, RS-2 decisions).

``plan_occurrences`` decides, for one schedule and one generation pass, which fires after
the cursor are generated, which are recorded as one skipped range, which DST removed, and
when to look again. Passes are simulated by feeding ``plan.cursor`` back in, as the
generation pass does through the store. ``overlap_decision`` is RS-3's truth table.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from punctual.domain.recurrence import (
    CronSpec,
    DstAdjustment,
    DstGap,
    DstSkip,
    Fire,
    IntervalSpec,
    RecurrenceSpec,
    fires_between,
    iter_fires,
    iter_timeline,
)
from punctual.domain.schedules import (
    AUTO_DISABLED_PREFIX,
    LAST_STATUS_LIMIT,
    MissedPolicy,
    OverlapDecision,
    OverlapPolicy,
    Plan,
    SchedulePolicy,
    auto_disabled_status,
    overlap_decision,
    plan_occurrences,
    skipped_range,
)

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
NO_LOOKAHEAD = timedelta(0)
PROPERTY = settings(max_examples=60, deadline=None, database=None)


def every_minute(starts_at: datetime = T0 + MINUTE) -> IntervalSpec:
    return IntervalSpec(60_000, starts_at)


def policy(
    missed: MissedPolicy = MissedPolicy.CATCH_UP,
    max_catch_up: int = 10,
    window: timedelta | None = None,
    grace: timedelta = timedelta(seconds=60),
) -> SchedulePolicy:
    return SchedulePolicy(OverlapPolicy.SKIP, missed, max_catch_up, window, grace)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@dataclass
class Ledger:
    """Everything a sequence of passes decided, to check "none twice, none lost"."""

    generated: list[datetime] = field(default_factory=list)
    ranges: list[tuple[datetime, datetime, int]] = field(default_factory=list)
    dst_skipped: list[tuple[datetime, datetime]] = field(default_factory=list)
    """(instant, nominal wall time): two named wall times may share the gap's end."""
    plans: list[Plan] = field(default_factory=list)

    def add(self, plan: Plan) -> None:
        self.plans.append(plan)
        self.generated += [o.at for o in plan.occurrences]
        if plan.missed is not None:
            self.ranges.append((plan.missed.first, plan.missed.last, plan.missed.count))
        self.dst_skipped += [(s.at, s.nominal) for s in plan.dst_skipped]

    def covered(self, spec: RecurrenceSpec, after: datetime, until: datetime) -> list[datetime]:
        """Every fire in (after, until] that was generated or lies in a skipped range,
        with multiplicity (a fire decided twice appears twice)."""
        decided = list(self.generated)
        for first, last, count in self.ranges:
            inside = [f.at for f in fires_between(spec, first - timedelta(microseconds=1), last)]
            assert len(inside) == count, (first, last, count, inside)
            decided += inside
        return sorted(d for d in decided if after < d <= until)


def run_passes(
    spec: RecurrenceSpec,
    rule: SchedulePolicy,
    cursor: datetime,
    nows: list[datetime],
    budget: int,
    lookahead: timedelta = NO_LOOKAHEAD,
) -> tuple[Ledger, datetime]:
    """One pass per ``now``, each starting from the cursor the previous one returned."""
    ledger = Ledger()
    for now in nows:
        plan = plan_occurrences(spec, rule, cursor, now, budget, lookahead)
        ledger.add(plan)
        assert plan.cursor is not None
        assert plan.cursor >= cursor, "the cursor never moves backwards"
        cursor = plan.cursor
    return ledger, cursor


def converge(
    spec: RecurrenceSpec,
    rule: SchedulePolicy,
    cursor: datetime,
    now: datetime,
    budget: int,
    max_passes: int,
    lookahead: timedelta = NO_LOOKAHEAD,
) -> Ledger:
    """Passes at one fixed ``now`` until a pass generates nothing (the schedule caught up)."""
    ledger = Ledger()
    for _ in range(max_passes):
        plan = plan_occurrences(spec, rule, cursor, now, budget, lookahead)
        ledger.add(plan)
        assert plan.cursor is not None
        cursor = plan.cursor
        if not plan.occurrences:
            return ledger
    raise AssertionError(f"did not converge in {max_passes} passes: {ledger.plans[-1]}")


# ---------------------------------------------------------------------------------------
# Catch-up after downtime


def test_catch_up_generates_max_catch_up_per_pass_then_the_rest_in_later_passes() -> None:
    spec = every_minute()
    rule = policy(max_catch_up=3)
    now = T0 + 20 * MINUTE + timedelta(seconds=5)  # 20 fires, the last one 5 s ago
    ledger = converge(spec, rule, T0, now, budget=100, max_passes=20)

    per_pass = [len(p.occurrences) for p in ledger.plans]
    # 19 fires are late (older than the 60 s grace): 3 per pass; the last is within grace.
    assert per_pass == [3, 3, 3, 3, 3, 3, 2, 0], per_pass
    assert ledger.generated == [T0 + i * MINUTE for i in range(1, 21)]
    assert not ledger.ranges
    for plan in ledger.plans[:-1]:
        assert sum(o.late for o in plan.occurrences) <= 3
    last = ledger.plans[-1]
    assert last.next_fire_at == T0 + 21 * MINUTE  # caught up: the next fire is in the future


def test_a_pass_that_hits_the_catch_up_cap_stays_due() -> None:
    spec = every_minute()
    plan = plan_occurrences(spec, policy(max_catch_up=2), T0, T0 + 30 * MINUTE, 100)
    assert [o.at for o in plan.occurrences] == [T0 + MINUTE, T0 + 2 * MINUTE]
    assert all(o.late for o in plan.occurrences)
    assert plan.cursor == T0 + 2 * MINUTE
    # The first undecided fire: the generation pass finds the schedule due again at once.
    assert plan.next_fire_at == T0 + 3 * MINUTE


@PROPERTY
@given(
    interval_s=st.integers(1, 7200),
    behind=st.integers(0, 400),
    max_catch_up=st.integers(1, 100),
    budget=st.integers(1, 150),
    grace_s=st.integers(0, 600),
    lookahead_s=st.integers(0, 5),
)
def test_catch_up_converges_with_none_twice_and_none_lost(
    interval_s: int, behind: int, max_catch_up: int, budget: int, grace_s: int, lookahead_s: int
) -> None:
    step = timedelta(seconds=interval_s)
    spec = IntervalSpec(interval_s * 1000, T0 + step)
    rule = policy(max_catch_up=max_catch_up, grace=timedelta(seconds=grace_s))
    now = T0 + step * behind + timedelta(milliseconds=137)
    lookahead = timedelta(seconds=lookahead_s)
    bound = max(1, min(max_catch_up, budget))
    passes = math.ceil((behind + 6) / bound) + 2
    ledger = converge(spec, rule, T0, now, budget, passes, lookahead)

    horizon = now + lookahead
    expected = [f.at for f in fires_between(spec, T0, horizon)]
    assert ledger.generated == expected, "every fire generated once, in order"
    assert ledger.covered(spec, T0, horizon) == expected
    for plan in ledger.plans:
        assert len(plan.occurrences) <= budget
        assert sum(o.late for o in plan.occurrences) <= max_catch_up
        assert plan.next_fire_at is not None, "a cap never stops a schedule"
        for occurrence in plan.occurrences:
            assert occurrence.late == (occurrence.at < now - rule.misfire_grace)
    assert ledger.plans[-1].next_fire_at == next(iter_fires(spec, horizon)).at


@PROPERTY
@given(
    interval_s=st.integers(30, 3600),
    advances=st.lists(st.integers(0, 20_000), min_size=1, max_size=12),
    missed=st.sampled_from(list(MissedPolicy)),
    max_catch_up=st.integers(1, 10),
    budget=st.integers(1, 20),
    window_s=st.none() | st.integers(1, 30_000),
)
def test_passes_over_a_moving_clock_decide_every_fire_exactly_once(
    interval_s: int,
    advances: list[int],
    missed: MissedPolicy,
    max_catch_up: int,
    budget: int,
    window_s: int | None,
) -> None:
    """Whatever the policy and however irregular the passes, each fire up to the last
    pass's horizon is generated or counted in a skipped range exactly once, and the
    undecided rest is still ahead of the cursor."""
    step = timedelta(seconds=interval_s)
    spec = IntervalSpec(interval_s * 1000, T0 + step)
    window = timedelta(seconds=window_s) if window_s is not None else None
    rule = policy(missed, max_catch_up, window)
    nows = list(itertools.accumulate(advances, lambda at, s: at + timedelta(seconds=s), initial=T0))
    ledger, cursor = run_passes(spec, rule, T0, nows[1:], budget)

    decided = ledger.covered(spec, T0, cursor)
    assert decided == [f.at for f in fires_between(spec, T0, cursor)]
    assert all(at <= cursor for at in ledger.generated)
    for plan, now in zip(ledger.plans, nows[1:], strict=True):
        assert len(plan.occurrences) <= budget
        assert sum(o.late for o in plan.occurrences) <= max_catch_up
        assert plan.next_fire_at is not None, "a cap or window never stops a schedule"
        assert plan.cursor is not None
        assert plan.next_fire_at == next(iter_fires(spec, plan.cursor)).at
        if missed is MissedPolicy.SKIP:
            assert not any(o.late for o in plan.occurrences), "skip never catches up"
        if window is not None:
            # The window bounds catch-up; a fire within the grace is not missed at all.
            caught_up = [o for o in plan.occurrences if o.late]
            assert all(o.at > now - window for o in caught_up), "window bounds"


# ---------------------------------------------------------------------------------------
# missed = skip


def test_missed_skip_records_exactly_one_range_and_moves_to_the_next_future_time() -> None:
    spec = every_minute()
    now = T0 + 20 * MINUTE + timedelta(seconds=5)
    plan = plan_occurrences(spec, policy(MissedPolicy.SKIP), T0, now, budget=100)

    assert plan.missed is not None
    assert (plan.missed.first, plan.missed.last, plan.missed.count) == (
        T0 + MINUTE,
        T0 + 19 * MINUTE,
        19,
    )
    assert plan.missed.reason == "missed"
    # The fire 5 s ago is within the grace: not missed, generated (and not late).
    assert [(o.at, o.late) for o in plan.occurrences] == [(T0 + 20 * MINUTE, False)]
    assert plan.cursor == T0 + 20 * MINUTE
    assert plan.next_fire_at == T0 + 21 * MINUTE
    assert plan.next_fire_at > now

    again = plan_occurrences(spec, policy(MissedPolicy.SKIP), plan.cursor, now, budget=100)
    assert again.missed is None and not again.occurrences, "a second pass decides nothing"


def test_missed_skip_uses_no_budget() -> None:
    spec = every_minute()
    now = T0 + 500 * MINUTE + timedelta(seconds=5)
    plan = plan_occurrences(spec, policy(MissedPolicy.SKIP), T0, now, budget=1)
    assert plan.missed is not None and plan.missed.count == 499
    assert [o.at for o in plan.occurrences] == [T0 + 500 * MINUTE]


def test_missed_skip_of_a_long_cron_outage_is_one_range() -> None:
    spec = CronSpec("*/5 * * * *", "Europe/Berlin")
    now = utc("2026-01-20T00:00:30")
    plan = plan_occurrences(spec, policy(MissedPolicy.SKIP), T0, now, budget=10)
    fires = fires_between(spec, T0, now - timedelta(seconds=60))
    assert plan.missed is not None
    assert (plan.missed.first, plan.missed.last, plan.missed.count) == (
        fires[0].at,
        fires[-1].at,
        len(fires),
    )
    assert [o.at for o in plan.occurrences] == [utc("2026-01-20T00:00:00")]
    assert plan.next_fire_at == utc("2026-01-20T00:05:00")


def test_a_fire_exactly_the_grace_old_is_not_missed() -> None:
    """RS-4: missed means reached *more than* ``misfire_grace_ms`` after its time.

    The catch-up path agrees (``late`` is ``at < now - grace``), but the skip range is
    built up to ``now - grace`` inclusive, so under ``missed=skip`` a fire exactly the
    grace old is recorded missed instead of generated.
    """
    spec = every_minute()
    now = T0 + 2 * MINUTE + timedelta(seconds=60)  # the fire at T0+2min is exactly 60 s old
    catch_up = plan_occurrences(spec, policy(MissedPolicy.CATCH_UP), T0, now, budget=100)
    assert [(o.at, o.late) for o in catch_up.occurrences] == [
        (T0 + MINUTE, True),
        (T0 + 2 * MINUTE, False),
        (T0 + 3 * MINUTE, False),
    ]
    skip = plan_occurrences(spec, policy(MissedPolicy.SKIP), T0, now, budget=100)
    assert skip.missed is not None
    assert (skip.missed.first, skip.missed.count) == (T0 + MINUTE, 1), skip.missed
    assert [o.at for o in skip.occurrences] == [T0 + 2 * MINUTE, T0 + 3 * MINUTE]


# ---------------------------------------------------------------------------------------
# catch_up_window


def test_catch_up_window_records_older_fires_as_a_range_and_catches_up_the_rest() -> None:
    spec = every_minute()
    rule = policy(max_catch_up=4, window=timedelta(minutes=10))
    now = T0 + 60 * MINUTE + timedelta(seconds=5)
    ledger = converge(spec, rule, T0, now, budget=100, max_passes=10)

    assert ledger.ranges == [(T0 + MINUTE, T0 + 50 * MINUTE, 50)], "older than the window"
    first = ledger.plans[0]
    assert first.missed is not None and first.missed.reason == "missed"
    assert all(p.missed is None for p in ledger.plans[1:]), "recorded once"
    # 51..59 are late but inside the window: caught up 4 per pass; 60 is within grace.
    assert ledger.generated == [T0 + i * MINUTE for i in range(51, 61)]
    assert [len(p.occurrences) for p in ledger.plans] == [4, 4, 2, 0]
    assert ledger.plans[-1].next_fire_at == T0 + 61 * MINUTE


def test_catch_up_window_smaller_than_the_grace_skips_every_missed_fire() -> None:
    spec = every_minute()
    rule = policy(window=timedelta(seconds=10), grace=timedelta(seconds=90))
    now = T0 + 5 * MINUTE + timedelta(seconds=5)
    plan = plan_occurrences(spec, rule, T0, now, budget=100)
    assert plan.missed is not None
    # Fires older than the grace are skipped; fires within the grace still fire.
    assert (plan.missed.first, plan.missed.last, plan.missed.count) == (
        T0 + MINUTE,
        T0 + 3 * MINUTE,
        3,
    )
    assert [o.at for o in plan.occurrences] == [T0 + 4 * MINUTE, T0 + 5 * MINUTE]


# ---------------------------------------------------------------------------------------
# Budget, lookahead, never stopping


def test_budget_caps_every_occurrence_of_a_pass_late_or_not() -> None:
    spec = IntervalSpec(1000, T0 + timedelta(seconds=1))
    rule = policy(max_catch_up=100)
    now = T0 + timedelta(seconds=10)
    plan = plan_occurrences(spec, rule, T0, now, budget=4, lookahead=timedelta(seconds=30))
    assert [o.at for o in plan.occurrences] == [T0 + timedelta(seconds=s) for s in (1, 2, 3, 4)]
    assert plan.next_fire_at == T0 + timedelta(seconds=5)

    upcoming = plan_occurrences(
        spec, rule, now, now, budget=3, lookahead=timedelta(seconds=30)
    )  # all in the future, none late: only the budget limits them
    assert len(upcoming.occurrences) == 3
    assert not any(o.late for o in upcoming.occurrences)
    assert upcoming.next_fire_at == T0 + timedelta(seconds=14)


def test_a_zero_budget_generates_nothing_and_keeps_the_schedule_due() -> None:
    spec = every_minute()
    plan = plan_occurrences(spec, policy(), T0, T0 + 5 * MINUTE, budget=0)
    assert plan.occurrences == []
    assert plan.cursor == T0
    assert plan.next_fire_at == T0 + MINUTE


def test_lookahead_generates_fires_just_ahead_of_now_and_no_further() -> None:
    spec = IntervalSpec(1000, T0 + timedelta(milliseconds=500))
    now = T0
    plan = plan_occurrences(spec, policy(), T0, now, budget=100, lookahead=timedelta(seconds=2))
    assert [o.at for o in plan.occurrences] == [
        T0 + timedelta(milliseconds=500),
        T0 + timedelta(milliseconds=1500),
    ]
    assert not any(o.late for o in plan.occurrences)
    assert plan.cursor == T0 + timedelta(milliseconds=1500)
    assert plan.next_fire_at == T0 + timedelta(milliseconds=2500)

    exact = IntervalSpec(2000, T0 + timedelta(seconds=2))
    edge = plan_occurrences(exact, policy(), T0, now, budget=100, lookahead=timedelta(seconds=2))
    assert [o.at for o in edge.occurrences] == [T0 + timedelta(seconds=2)], "horizon inclusive"

    none = plan_occurrences(spec, policy(), T0, now, budget=100)
    assert none.occurrences == [] and none.next_fire_at == T0 + timedelta(milliseconds=500)


# 60 examples planning up to 400 days each: 24 s on a quiet machine and several times that
# on a loaded one; the timeout only catches a hang (fired inside an example, hypothesis
# would report it as a FlakyFailure).
@pytest.mark.timeout(600)
@PROPERTY
@given(
    expression=st.sampled_from(["*/7 * * * *", "30 2 * * *", "0 0 29 2 *", "15 3 * * 1-5"]),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
    gap=st.sampled_from(list(DstGap)),
    missed=st.sampled_from(list(MissedPolicy)),
    behind_days=st.integers(0, 400),
    max_catch_up=st.integers(1, 3),
    budget=st.integers(0, 3),
    window_h=st.none() | st.integers(1, 48),
)
def test_a_cap_or_a_window_never_stops_a_schedule(
    expression: str,
    zone: str,
    gap: DstGap,
    missed: MissedPolicy,
    behind_days: int,
    max_catch_up: int,
    budget: int,
    window_h: int | None,
) -> None:
    spec = CronSpec(expression, zone, dst_gap=gap)
    window = timedelta(hours=window_h) if window_h is not None else None
    cursor = utc("2023-06-01T00:00:00")
    now = cursor + timedelta(days=behind_days, minutes=17)
    plan = plan_occurrences(spec, policy(missed, max_catch_up, window), cursor, now, budget)
    assert plan.next_fire_at is not None
    assert plan.cursor is not None
    following = next(iter_fires(spec, plan.cursor)).at
    assert plan.next_fire_at <= following, "the next pass is due no later than the next fire"
    assert plan.next_fire_at > plan.cursor


# ---------------------------------------------------------------------------------------
# DST decisions


BERLIN_GAP_DAY = utc("2024-03-31T01:00:00")  # 02:00 -> 03:00 local; the gap ends here


def test_dst_skipped_wall_times_of_fixed_time_expressions_are_reported() -> None:
    spec = CronSpec("30 2 * * *", "Europe/Berlin", dst_gap=DstGap.SKIP)
    cursor, now = utc("2024-03-30T12:00:00"), utc("2024-04-01T01:00:00")
    plan = plan_occurrences(spec, policy(), cursor, now, budget=100)
    assert [(s.at, s.nominal) for s in plan.dst_skipped] == [
        (BERLIN_GAP_DAY, datetime(2024, 3, 31, 2, 30))
    ]
    assert all(s.dst_adjustment is DstAdjustment.GAP_SKIPPED for s in plan.dst_skipped)
    assert [o.at for o in plan.occurrences] == [utc("2024-04-01T00:30:00")]
    assert plan.missed is None, "a DST skip is not a missed occurrence"


def test_a_gap_shifted_fire_is_generated_with_its_adjustment() -> None:
    spec = CronSpec("30 2 * * *", "Europe/Berlin")
    plan = plan_occurrences(
        spec, policy(), utc("2024-03-30T12:00:00"), utc("2024-03-31T01:00:00"), budget=100
    )
    assert [(o.at, o.nominal, o.dst_adjustment, o.late) for o in plan.occurrences] == [
        (BERLIN_GAP_DAY, datetime(2024, 3, 31, 2, 30), DstAdjustment.GAP_SHIFTED, False)
    ]
    assert plan.dst_skipped == []


def test_wildcard_expressions_report_no_dst_skips() -> None:
    spec = CronSpec("30 * * * *", "Europe/Berlin", dst_gap=DstGap.SKIP)
    plan = plan_occurrences(
        spec, policy(), utc("2024-03-30T23:45:00"), utc("2024-03-31T03:00:00"), budget=100
    )
    assert plan.dst_skipped == []
    assert [o.at for o in plan.occurrences] == [
        utc("2024-03-31T00:30:00"),
        utc("2024-03-31T01:30:00"),
        utc("2024-03-31T02:30:00"),
    ]


def test_a_dst_skip_is_reported_by_one_pass_only() -> None:
    """Feeding the cursor back, the pass after the one that reported a DST skip must not
    report it again: the cursor stays before a reported skip when no fire follows it in
    the same pass, so the next pass walks over it once more."""
    spec = CronSpec("30 2 * * *", "Europe/Berlin", dst_gap=DstGap.SKIP)
    nows = [utc("2024-03-31T12:00:00"), utc("2024-04-01T00:30:00"), utc("2024-04-02T00:30:00")]
    ledger, _ = run_passes(spec, policy(), utc("2024-03-30T02:00:00"), nows, budget=100)
    assert ledger.dst_skipped == [(BERLIN_GAP_DAY, datetime(2024, 3, 31, 2, 30))], [
        p.dst_skipped for p in ledger.plans
    ]


def test_a_dst_skip_inside_a_missed_range_is_still_recorded() -> None:
    """RS-4: every decision is recorded, skipped by DST included. When downtime spans a
    skipped wall time and ``missed=skip`` turns the downtime into a range, the range
    counts fires only, so the DST decision must still be reported on its own."""
    spec = CronSpec("30 2 * * *", "Europe/Berlin", dst_gap=DstGap.SKIP)
    cursor, now = utc("2024-03-29T00:00:00"), utc("2024-04-02T00:00:00")
    plan = plan_occurrences(spec, policy(MissedPolicy.SKIP), cursor, now, budget=100)
    assert plan.missed is not None and plan.missed.count == 3
    assert [s.at for s in plan.dst_skipped] == [BERLIN_GAP_DAY]


@PROPERTY
@given(
    expression=st.sampled_from(["30 2 * * *", "0,30 2 * * *", "15 2 * * *", "0 0 * * *"]),
    zone=st.sampled_from(
        ["Europe/Berlin", "America/New_York", "America/Santiago", "Australia/Lord_Howe"]
    ),
    gap=st.sampled_from(list(DstGap)),
    hours=st.lists(st.integers(1, 60), min_size=5, max_size=40),
)
# Found by this property: a DST skip that ends a pass is reported again by the next one.
@example(
    expression="0,30 2 * * *",
    zone="America/New_York",
    gap=DstGap.SKIP,
    hours=[1, 1, 41, 60, 60, 60, 24],
)
def test_catching_up_across_transitions_decides_each_fire_and_skip_at_most_once(
    expression: str, zone: str, gap: DstGap, hours: list[int]
) -> None:
    spec = CronSpec(expression, zone, dst_gap=gap)
    start = utc("2024-03-01T00:00:00") if zone != "America/Santiago" else utc("2024-08-25")
    nows = list(itertools.accumulate(hours, lambda at, h: at + timedelta(hours=h), initial=start))
    ledger, cursor = run_passes(spec, policy(max_catch_up=100), start, nows[1:], budget=1000)
    timeline = list(itertools.takewhile(lambda i: i.at <= cursor, iter_timeline(spec, start)))
    assert ledger.generated == [i.at for i in timeline if isinstance(i, Fire)]
    twice = sorted(at for at, n in Counter(ledger.dst_skipped).items() if n > 1)
    assert not twice, f"DST skips reported by more than one pass: {twice}"
    named = {(i.at, i.nominal) for i in iter_timeline_skips(spec, start, nows[-1])}
    assert set(ledger.dst_skipped) <= named


def iter_timeline_skips(spec: CronSpec, after: datetime, until: datetime) -> list[DstSkip]:
    return [
        item
        for item in itertools.takewhile(lambda i: i.at <= until, iter_timeline(spec, after))
        if isinstance(item, DstSkip)
    ]


# ---------------------------------------------------------------------------------------
# Ranges, overlap, auto-disable status


@PROPERTY
@given(
    interval_s=st.integers(1, 5000),
    start_s=st.integers(-10_000, 10_000),
    after_s=st.integers(-20_000, 20_000),
    span_s=st.integers(0, 50_000),
)
def test_skipped_range_of_an_interval_matches_the_fires_it_replaces(
    interval_s: int, start_s: int, after_s: int, span_s: int
) -> None:
    spec = IntervalSpec(interval_s * 1000, T0 + timedelta(seconds=start_s))
    after = T0 + timedelta(seconds=after_s)
    until = after + timedelta(seconds=span_s)
    fires = fires_between(spec, after, until)
    found = skipped_range(spec, after, until, "missed")
    if not fires:
        assert found is None
        return
    assert found is not None
    assert (found.first, found.last, found.count, found.reason) == (
        fires[0].at,
        fires[-1].at,
        len(fires),
        "missed",
    )


@pytest.mark.parametrize(
    ("rule", "unfinished", "buffered", "expected"),
    [
        (OverlapPolicy.SKIP, False, False, OverlapDecision.START),
        (OverlapPolicy.SKIP, False, True, OverlapDecision.START),
        (OverlapPolicy.SKIP, True, False, OverlapDecision.SKIP),
        (OverlapPolicy.SKIP, True, True, OverlapDecision.SKIP),
        (OverlapPolicy.BUFFER_ONE, False, False, OverlapDecision.START),
        (OverlapPolicy.BUFFER_ONE, False, True, OverlapDecision.START),
        (OverlapPolicy.BUFFER_ONE, True, False, OverlapDecision.BUFFER),
        (OverlapPolicy.BUFFER_ONE, True, True, OverlapDecision.SKIP),
        (OverlapPolicy.ALLOW_ALL, False, False, OverlapDecision.START),
        (OverlapPolicy.ALLOW_ALL, False, True, OverlapDecision.START),
        (OverlapPolicy.ALLOW_ALL, True, False, OverlapDecision.START),
        (OverlapPolicy.ALLOW_ALL, True, True, OverlapDecision.START),
    ],
)
def test_overlap_decision(
    rule: OverlapPolicy, unfinished: bool, buffered: bool, expected: OverlapDecision
) -> None:
    assert overlap_decision(rule, unfinished, buffered) is expected


@given(reason=st.text(max_size=600))
@settings(max_examples=40, deadline=None, database=None)
def test_auto_disabled_status_is_prefixed_and_bounded(reason: str) -> None:
    status = auto_disabled_status(reason)
    assert status.startswith(AUTO_DISABLED_PREFIX)
    assert len(status) <= LAST_STATUS_LIMIT
    assert status == (AUTO_DISABLED_PREFIX + reason)[:LAST_STATUS_LIMIT]
