"""Blackouts in the generation plan (SPEC RS-10): passes at any times decide every fire
exactly once, none inside a blackout runs, each blackout's fires are at most two ranges,
and a blackout wins over lateness, checked against a brute-force walk of the fires."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.domain.recurrence import CronSpec, IntervalSpec, RecurrenceSpec, iter_fires
from punctual.domain.schedules import (
    Blackout,
    MissedPolicy,
    OverlapPolicy,
    SchedulePolicy,
    plan_occurrences,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)
LOOKAHEAD = timedelta(seconds=2)


def run_passes(
    spec: RecurrenceSpec, policy: SchedulePolicy, pass_minutes: list[int], until_minute: int
) -> tuple[list[datetime], list[tuple[datetime, datetime, int, str]]]:
    """Generation passes at the given minutes (and one at the end), as the runner makes
    them when the schedule is due: what ran and what was recorded skipped."""
    cursor, next_fire_at = T0, T0
    ran: list[datetime] = []
    ranges: list[tuple[datetime, datetime, int, str]] = []
    for minute in [*sorted(pass_minutes), until_minute]:
        now = T0 + timedelta(minutes=minute)
        if next_fire_at is None or next_fire_at > now + LOOKAHEAD:
            continue  # not claimed by this pass
        plan = plan_occurrences(spec, policy, cursor, now, 10_000, LOOKAHEAD)
        ran += [o.at for o in plan.occurrences]
        for r in ([plan.missed] if plan.missed else []) + plan.skipped_ranges:
            ranges.append((r.first, r.last, r.count, r.reason))
        cursor, next_fire_at = plan.cursor, plan.next_fire_at
    return ran, ranges


def fires_between(spec: RecurrenceSpec, first: datetime, last: datetime) -> list[datetime]:
    out = []
    for fire in iter_fires(spec, first - timedelta(microseconds=1)):
        if fire.at > last:
            break
        out.append(fire.at)
    return out


@settings(max_examples=150, deadline=None)
@given(
    interval_minutes=st.sampled_from([1, 2, 7]),
    windows=st.lists(st.tuples(st.integers(0, 170), st.integers(1, 40)), min_size=1, max_size=4),
    passes=st.lists(st.integers(0, 200), max_size=12),
    missed=st.sampled_from([MissedPolicy.SKIP, MissedPolicy.CATCH_UP]),
)
def test_every_fire_is_decided_once_and_none_in_a_blackout_runs(
    interval_minutes: int,
    windows: list[tuple[int, int]],
    passes: list[int],
    missed: MissedPolicy,
) -> None:
    blackouts: list[Blackout] = []
    for start, length in sorted(windows):
        begin = T0 + timedelta(minutes=start, seconds=30)
        if blackouts and begin < blackouts[-1].end:
            continue  # the API refuses overlaps
        blackouts.append(Blackout(begin, begin + timedelta(minutes=length), f"w{start}"))
    policy = SchedulePolicy(
        OverlapPolicy.ALLOW_ALL, missed, max_catch_up=10_000, blackouts=tuple(blackouts)
    )
    spec = IntervalSpec(interval_minutes * 60_000, T0)
    until = 230
    ran, ranges = run_passes(spec, policy, passes, until)
    decided = list(ran)
    for first, last, count, _ in ranges:
        covered = fires_between(spec, first, last)
        assert len(covered) == count
        decided += covered
    expected = fires_between(
        spec, T0 + timedelta(microseconds=1), T0 + timedelta(minutes=until) + LOOKAHEAD
    )
    assert sorted(decided) == expected  # each fire once, none lost
    for at in ran:
        assert not any(b.covers(at) for b in blackouts), at
    for first, last, _, reason in ranges:
        inside = [b for b in blackouts if b.covers(first)]
        if reason == "blackout":
            assert inside and inside[0].covers(last)
        else:
            assert not any(
                b.covers(at) for b in blackouts for at in fires_between(spec, first, last)
            )
    for b in blackouts:
        assert (
            sum(1 for first, _, _, reason in ranges if reason == "blackout" and b.covers(first))
            <= 2
        )


def test_a_fixed_time_cron_skips_a_blacked_out_day() -> None:
    spec = CronSpec("30 7 * * *", "Europe/Berlin")
    freeze = Blackout(
        datetime(2026, 12, 24, tzinfo=UTC), datetime(2026, 12, 27, tzinfo=UTC), "xmas"
    )
    policy = SchedulePolicy(OverlapPolicy.SKIP, MissedPolicy.SKIP, blackouts=(freeze,))
    start = datetime(2026, 12, 22, 12, tzinfo=UTC)
    plan = plan_occurrences(spec, policy, start, start + timedelta(days=7), 100, LOOKAHEAD)
    assert plan.missed is not None and plan.missed.count == 1  # the 23rd, missed
    (xmas,) = [r for r in plan.skipped_ranges if r.reason == "blackout"]
    assert (xmas.first.day, xmas.last.day, xmas.count, xmas.detail) == (24, 26, 3, "xmas")
