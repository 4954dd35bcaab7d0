"""The timeline's rules: what each occurrence view is drawn as, and what the window holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
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


def test_the_window_holds_the_last_7_days_and_ranges_that_reach_into_it() -> None:
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
    built = timeline.build([old, recent, reaching, future, followed], NOW)
    decided = {m.occurrence["id"]: m for m in built.decision_marks}
    assert set(decided) == {recent["id"], reaching["id"], followed["id"]}
    assert decided[reaching["id"]].x == timeline.PLOT_LEFT, "a range is cut at the window"
    assert decided[reaching["id"]].width > 0
    assert all(timeline.PLOT_LEFT <= m.x <= timeline.PLOT_RIGHT for m in built.marks)
    assert [m.kind.name for m in built.marks if m.kind.lane == "follow_through"] == [
        "follow_through_regressed"
    ]
    assert [row["id"] for row in built.rows] == [followed["id"], recent["id"], reaching["id"]]
    assert len(built.ticks) == 7, "one tick per midnight in the week"
    assert "3 decisions" in built.summary()


def test_the_close_up_holds_the_last_day_with_a_tick_every_three_hours() -> None:
    inside = occurrence(NOW - timedelta(hours=23))
    outside = occurrence(NOW - timedelta(hours=25))
    built = timeline.build([inside, outside], NOW, window=timeline.CLOSE_UP)
    assert [m.occurrence["id"] for m in built.marks] == [inside["id"]]
    assert [t.label for t in built.ticks] == [
        "15:00",
        "18:00",
        "21:00",
        "00:00",
        "03:00",
        "06:00",
        "09:00",
        "12:00",
    ]


def test_an_empty_window_says_so() -> None:
    built = timeline.build([], NOW)
    assert built.marks == []
    assert built.summary() == "No decisions in this period."
