"""The timeline's rules: what each occurrence view is drawn as, how long a window the
schedule's rhythm gives, and what the window holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest

from punctual.adapters.http.ui import timeline
from punctual.domain.timeutil import to_rfc3339

NOW = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)


def occurrence(
    at: datetime = NOW - timedelta(hours=1), state: str = "dispatched", **fields: Any
) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": f"occ_{at.timestamp():.0f}_{state}",
        "occurrence_at": to_rfc3339(at),
        "state": state,
        "reason": None,
        "dst_adjustment": None,
        "follow_through": None,
    }
    view.update(fields)
    return view


@pytest.mark.parametrize(
    ("fields", "kind"),
    [
        ({"state": "dispatched"}, "fired"),
        ({"state": "dispatched", "dst_adjustment": "gap_shifted"}, "fired_dst_moved"),
        ({"state": "dispatched", "dst_adjustment": "overlap_second"}, "fired_dst_moved"),
        ({"state": "skipped", "reason": "dst_gap", "dst_adjustment": "gap_skipped"}, "dst_skipped"),
        ({"state": "skipped", "reason": "overlap"}, "skipped_overlap"),
        (
            {
                "state": "skipped",
                "reason": "missed",
                "range": {"first": "2026-03-08T01:00:00.000Z", "last": "x", "count": 3},
            },
            "missed",
        ),
        ({"state": "skipped", "reason": "schedule_edited"}, "skipped"),
        (
            {"state": "skipped", "reason": "calendar", "reason_detail": "Christmas Day"},
            "calendar_skipped",
        ),
        ({"state": "skipped", "reason": "blackout", "reason_detail": "freeze"}, "blackout"),
        ({"state": "skipped", "reason": "too_late"}, "too_late"),
        (
            {"state": "dispatched", "calendar_moved_from": "2026-12-26T08:00:00.000Z"},
            "fired_calendar_moved",
        ),
        ({"state": "failed"}, "failed"),
        ({"state": "canceled", "reason": "canceled"}, "canceled"),
        ({"state": "scheduled"}, "pending"),
        ({"state": "buffered"}, "pending"),
        ({"state": "dispatching"}, "pending"),
    ],
)
def test_each_occurrence_is_drawn_as_what_was_decided(fields: dict[str, Any], kind: str) -> None:
    assert timeline.decision_kind(occurrence(**fields)).name == kind


@pytest.mark.parametrize(
    "status", ["ok", "regressed", "not_comparable", "no_policy", "finalize_timed_out"]
)
def test_each_follow_through_status_has_its_own_mark(status: str) -> None:
    assert timeline.follow_through_kind({"status": status}).name == f"follow_through_{status}"


def test_no_two_kinds_look_alike_and_every_kind_has_a_label() -> None:
    kinds = timeline.legend()
    looks = {(k.lane, k.shape, k.filled, k.colour) for k in kinds}
    assert len(looks) == len(kinds), "two kinds share shape, fill and colour"
    for lane in ("decision", "follow_through"):
        shapes = [(k.shape, k.filled) for k in kinds if k.lane == lane]
        assert len(set(shapes)) == len(shapes), f"{lane}: two kinds differ by colour alone"
    assert all(k.label.strip() for k in kinds)
    assert {k.name for k in kinds} == set(timeline.KINDS)


WEEK = timeline.window_for(None)


def test_the_window_holds_its_span_and_ranges_that_reach_into_it() -> None:
    assert WEEK.span == timedelta(days=7), "without a rhythm to measure: a week"
    old = occurrence(NOW - timedelta(days=8))
    recent = occurrence(NOW - timedelta(days=6), state="skipped", reason="overlap")
    reaching = occurrence(
        NOW - timedelta(days=9),
        state="skipped",
        reason="missed",
        range={
            "first": to_rfc3339(NOW - timedelta(days=9)),
            "last": to_rfc3339(NOW - timedelta(days=5)),
            "count": 97,
        },
    )
    future = occurrence(NOW + timedelta(hours=1), state="scheduled")
    followed = occurrence(NOW - timedelta(hours=2), follow_through={"status": "regressed"})
    built = timeline.build([old, followed, recent, reaching, future], NOW, WEEK)
    decided = {m.occurrence["id"]: m for m in built.decision_marks}
    assert set(decided) == {recent["id"], reaching["id"], followed["id"]}
    assert decided[reaching["id"]].x == timeline.PLOT_LEFT, "a range is cut at the window"
    assert decided[reaching["id"]].width > 0
    assert all(timeline.PLOT_LEFT <= m.x <= timeline.PLOT_RIGHT for m in built.marks)
    assert [m.kind.name for m in built.marks if m.kind.lane == "follow_through"] == [
        "follow_through_regressed"
    ]
    assert [m.occurrence["id"] for m in built.decision_marks] == [
        reaching["id"],
        recent["id"],
        followed["id"],
    ], "drawn left to right whatever the list's order"
    assert len(built.ticks) == 7, "one tick per midnight in the week"
    assert "3 decisions" in built.summary()


@pytest.mark.parametrize(
    ("gap", "span", "text", "tick"),
    [
        (timedelta(seconds=1), timedelta(seconds=30), "30 seconds", "5 seconds"),
        (timedelta(milliseconds=200), timedelta(seconds=30), "30 seconds", "5 seconds"),
        (timedelta(seconds=5), timedelta(minutes=3), "3 minutes", "30 seconds"),
        (timedelta(minutes=1), timedelta(minutes=30), "30 minutes", "5 minutes"),
        (timedelta(minutes=7), timedelta(hours=4), "4 hours", "30 minutes"),
        (timedelta(hours=1), timedelta(hours=30), "30 hours", "6 hours"),
        (timedelta(days=1), timedelta(days=30), "30 days", "7 days"),
        (timedelta(days=7), timedelta(days=90), "90 days", "14 days"),
        (timedelta(days=365), timedelta(days=90), "90 days", "14 days"),
        (None, timedelta(days=7), "7 days", "day"),
        (timedelta(0), timedelta(days=7), "7 days", "day"),
    ],
)
def test_the_window_is_about_thirty_gaps_in_a_whole_unit_within_bounds(
    gap: timedelta | None, span: timedelta, text: str, tick: str
) -> None:
    window = timeline.window_for(gap)
    assert (window.span, window.text, window.tick_text) == (span, text, tick)
    assert timeline.MIN_WINDOW <= window.span <= timeline.MAX_WINDOW
    if gap is not None and timeline.MIN_WINDOW < gap * timeline.GAPS_SHOWN < timeline.MAX_WINDOW:
        assert window.span >= gap * timeline.GAPS_SHOWN, "rounded up, never down"


@pytest.mark.parametrize("seconds", [1, 3, 7, 45, 61, 600, 3599, 5400, 86_400, 200_000, 10**6])
def test_every_window_has_a_few_ticks_at_most_eight(seconds: int) -> None:
    window = timeline.window_for(timedelta(seconds=seconds))
    built = timeline.build([], NOW + timedelta(milliseconds=123), window)
    assert 3 <= len(built.ticks) <= timeline.MAX_TICKS
    assert all(built.start < t.at <= built.end for t in built.ticks)
    assert all(t.at.timestamp() % window.tick.total_seconds() == 0 for t in built.ticks)


@pytest.mark.parametrize(
    ("gap", "quiet_for", "span"),
    [
        (timedelta(minutes=1), None, timedelta(minutes=30)),
        (timedelta(minutes=1), timedelta(minutes=10), timedelta(minutes=30)),
        (timedelta(minutes=1), timedelta(hours=5), timedelta(hours=6)),
        (timedelta(seconds=1), timedelta(hours=1), timedelta(minutes=66)),
        (timedelta(days=1), timedelta(days=400), timeline.MAX_WINDOW),
        (None, timedelta(days=10), timedelta(days=11)),
    ],
)
def test_the_window_reaches_back_to_the_last_fire(
    gap: timedelta | None, quiet_for: timedelta | None, span: timedelta
) -> None:
    """A cron that fires in bursts (every minute from 9 to 10) seen at 15:00, or a paused
    schedule: the window goes back to where it stopped, not to an empty stretch."""
    window = timeline.window_reaching(gap, quiet_for)
    assert window.span == span
    if quiet_for is not None and quiet_for < timeline.MAX_WINDOW:
        assert window.span > quiet_for, "the last fire is on the picture"


def test_the_typical_gap_is_the_median_gap_between_fire_times() -> None:
    def at(*hours: float) -> list[datetime]:
        return [NOW + timedelta(hours=h) for h in hours]

    assert timeline.typical_gap(at(0, 1, 2, 3)) == timedelta(hours=1), "an interval"
    # Weekdays at 09:00: four gaps of a day and one of three; the weekend does not count.
    weekdays = at(0, 24, 48, 72, 96, 168)
    assert timeline.typical_gap(weekdays) == timedelta(days=1)
    # Two specs a day (09:00 and 17:30): 8.5 and 15.5 hours by turns, the median between.
    assert timeline.typical_gap(at(0, 8.5, 24, 32.5)) == timedelta(hours=8.5)
    assert timeline.typical_gap(at(0, 8.5, 24, 32.5, 48)) == timedelta(hours=12)
    assert timeline.typical_gap(at(3, 0, 2, 1)) == timedelta(hours=1), "in any order"
    assert timeline.typical_gap(at(0, 0, 1)) == timedelta(hours=1), "a repeated time is no gap"
    assert timeline.typical_gap(at(0)) is None
    assert timeline.typical_gap([]) is None


def test_a_one_second_schedules_marks_are_spread_across_the_picture() -> None:
    fired = [occurrence(NOW - timedelta(seconds=n)) for n in range(120)]
    built = timeline.build(fired, NOW, timeline.window_for(timedelta(seconds=1)))
    xs = [m.x for m in built.decision_marks]
    assert len(xs) == 31, "the last 30 seconds, both ends included"
    assert xs == sorted(xs)
    gaps = {round(b - a, 2) for a, b in pairwise(xs)}
    assert min(gaps) > 20, "a mark's width apart at least"
    assert xs[0] == timeline.PLOT_LEFT and xs[-1] == timeline.PLOT_RIGHT
    assert [t.label for t in built.ticks] == [
        "11:59:35",
        "11:59:40",
        "11:59:45",
        "11:59:50",
        "11:59:55",
        "12:00:00",
    ]


def test_a_day_window_ticks_every_three_hours_and_names_midnight_by_its_date() -> None:
    window = timeline.window_for(timedelta(minutes=48))
    assert window.text == "24 hours"
    inside = occurrence(NOW - timedelta(hours=23))
    outside = occurrence(NOW - timedelta(hours=25))
    built = timeline.build([inside, outside], NOW, window)
    assert [m.occurrence["id"] for m in built.marks] == [inside["id"]]
    assert [t.label for t in built.ticks] == [
        "15:00",
        "18:00",
        "21:00",
        "Mar 08",
        "03:00",
        "06:00",
        "09:00",
        "12:00",
    ]


def test_an_empty_window_says_so() -> None:
    built = timeline.build([], NOW, WEEK)
    assert built.marks == []
    assert built.summary() == "No decisions in this period."
