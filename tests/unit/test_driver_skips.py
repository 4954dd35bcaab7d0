"""Which of a firing driver's fire times were skipped, and why (RS-4 under CR-6).

``driver_skips`` turns the holes among the driver's fire times into ``overlap`` skips (an
earlier fire's workflow was still alive then) and ``missed`` ranges (consecutive holes
otherwise); ``dst_gap_skips`` adds the wall times a ``dst_gap: skip`` expression named
that did not exist. Everything the store or the driver accounts for is left alone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from punctual.domain.driver_skips import (
    Accounted,
    FireLifetime,
    driver_skips,
    dst_gap_skips,
)
from punctual.domain.recurrence import CronSpec, DstAdjustment, DstGap, IntervalSpec
from punctual.domain.schedules import OverlapPolicy, SkippedRange

T0 = datetime(2027, 5, 3, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def every_second(first: int, last: int) -> list[datetime]:
    return [at(s) for s in range(first, last + 1)]


def test_holes_while_the_previous_fire_lives_are_overlap_skips_the_others_missed() -> None:
    # Fired at 0 (alive until 3.5) and at 5 (alive until 6.5); nothing at 1-4 and 7-9.
    skips = driver_skips(
        every_second(1, 9),
        Accounted(instants=frozenset({at(5)})),
        [FireLifetime(at(0), at(3.5)), FireLifetime(at(5), at(6.5))],
        OverlapPolicy.SKIP,
    )
    assert skips.overlap == [at(1), at(2), at(3), at(6)]
    assert skips.missed == [
        SkippedRange(at(4), at(4), 1, "missed"),
        SkippedRange(at(7), at(9), 3, "missed"),
    ]
    assert skips.counted == 8


def test_a_fire_still_running_makes_every_later_hole_an_overlap_skip() -> None:
    skips = driver_skips(
        every_second(1, 4), Accounted(), [FireLifetime(at(0), None)], OverlapPolicy.BUFFER_ONE
    )
    assert skips.overlap == every_second(1, 4)
    assert skips.missed == []


def test_allow_all_never_skips_for_overlap() -> None:
    skips = driver_skips(
        every_second(1, 3), Accounted(), [FireLifetime(at(0), None)], OverlapPolicy.ALLOW_ALL
    )
    assert skips.overlap == []
    assert skips.missed == [SkippedRange(at(1), at(3), 3, "missed")]


def test_what_is_accounted_for_is_never_a_skip() -> None:
    # A row at 2, a range covering 4-5, and an action the driver took at 7 (no row yet).
    accounted = Accounted(instants=frozenset({at(2), at(7)}), ranges=((at(4), at(5)),))
    skips = driver_skips(every_second(1, 8), accounted, [], OverlapPolicy.SKIP)
    assert skips.overlap == []
    assert skips.missed == [
        SkippedRange(at(1), at(1), 1, "missed"),
        SkippedRange(at(3), at(3), 1, "missed"),
        SkippedRange(at(6), at(6), 1, "missed"),
        SkippedRange(at(8), at(8), 1, "missed"),
    ]


def test_a_fire_after_the_hole_does_not_explain_it() -> None:
    # Only fires strictly before a hole can have overlapped it.
    skips = driver_skips(
        [at(1)],
        Accounted(),
        [FireLifetime(at(2), None), FireLifetime(at(1.5), None)],
        OverlapPolicy.SKIP,
    )
    assert skips.overlap == []
    assert skips.missed == [SkippedRange(at(1), at(1), 1, "missed")]


@given(
    holes=st.sets(st.integers(min_value=1, max_value=40)),
    alive=st.sets(st.integers(min_value=1, max_value=40)),
    policy=st.sampled_from(list(OverlapPolicy)),
)
def test_every_hole_is_decided_exactly_once(
    holes: set[int], alive: set[int], policy: OverlapPolicy
) -> None:
    expected = every_second(1, 40)
    present = frozenset(at(s) for s in range(1, 41) if s not in holes)
    # Every second that is not a hole fired (0 included); one in ``alive`` lived a second
    # longer, so a hole right after it is an overlap skip.
    lifetimes = [
        FireLifetime(at(s), at(s + 1) if s in alive else at(s))
        for s in range(0, 41)
        if s not in holes
    ]
    skips = driver_skips(expected, Accounted(instants=present), lifetimes, policy)
    decided = list(skips.overlap)
    for missed in skips.missed:
        decided += [t for t in expected if missed.first <= t <= missed.last]
    assert sorted(decided) == sorted(at(s) for s in holes)
    assert skips.counted == len(holes)
    overlapped = {at(s) for s in holes if s - 1 in alive and s - 1 not in holes}
    if policy is OverlapPolicy.ALLOW_ALL:
        overlapped = set()
    assert set(skips.overlap) == overlapped


NEW_YORK_0230_SKIP = CronSpec("30 2 * * *", "America/New_York", dst_gap=DstGap.SKIP)
SPRING_2027 = (datetime(2027, 3, 13, 12, tzinfo=UTC), datetime(2027, 3, 15, 12, tzinfo=UTC))


def test_a_dst_gap_skip_expression_records_the_missing_wall_time() -> None:
    skips = dst_gap_skips(NEW_YORK_0230_SKIP, *SPRING_2027, Accounted())
    assert len(skips) == 1
    assert skips[0].nominal == datetime(2027, 3, 14, 2, 30)
    assert skips[0].dst_adjustment is DstAdjustment.GAP_SKIPPED
    # Recorded already: nothing again.
    again = dst_gap_skips(NEW_YORK_0230_SKIP, *SPRING_2027, Accounted(frozenset({skips[0].at})))
    assert again == []


def test_only_fixed_time_dst_gap_skip_expressions_record_dst_skips() -> None:
    shifted = CronSpec("30 2 * * *", "America/New_York")
    wildcard = CronSpec("*/30 2 * * *", "America/New_York", dst_gap=DstGap.SKIP)
    interval = IntervalSpec(60_000, SPRING_2027[0])
    for spec in (shifted, wildcard, interval):
        assert dst_gap_skips(spec, *SPRING_2027, Accounted()) == []
