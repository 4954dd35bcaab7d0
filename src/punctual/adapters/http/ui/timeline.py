"""A schedule's timeline: one mark per decision of the last 7 days, laid out for an SVG.

The marks are read from the occurrence views that ``GET …/occurrences`` returns, so the
picture and the API cannot disagree. Every kind has its own shape, colour and text label
(the legend and each mark's title), so no kind is told apart by colour alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from punctual.domain.timeutil import parse_rfc3339

WINDOW = timedelta(days=7)
CLOSE_UP = timedelta(days=1)
"""The second, closer picture: a week's marks crowd together when they are hours apart."""

WIDTH = 960
HEIGHT = 170
PLOT_LEFT = 150
PLOT_RIGHT = 940
AXIS_Y = 140
LANE_Y = {"decision": 50, "follow_through": 100}
LANE_LABELS = {"decision": "Decisions", "follow_through": "Follow-through"}
_MIN_RANGE_WIDTH = 6.0

BLUE = "#1f5fbf"
PURPLE = "#7a3fb0"
ORANGE = "#a35200"
GREY = "#5c6670"
RED = "#b3261e"
GREEN = "#1e7b34"

_CIRCLE = "M -6 0 A 6 6 0 1 0 6 0 A 6 6 0 1 0 -6 0 Z"
_DIAMOND = "M 0 -7 L 7 0 L 0 7 L -7 0 Z"
_SQUARE = "M -6 -6 L 6 -6 L 6 6 L -6 6 Z"
_CROSS = "M -6 -6 L 6 6 M 6 -6 L -6 6"
_SLASHED_CIRCLE = _CIRCLE + " M -4 4 L 4 -4"
_CHECK = "M -6 0 L -2 5 L 6 -6"
_TRIANGLE_DN = "M -7 -6 L 7 -6 L 0 7 Z"
_TRIANGLE_UP = "M -7 6 L 7 6 L 0 -7 Z"
_DASH = "M -7 0 L 7 0"
_HOURGLASS = "M -6 -7 L 6 -7 L -6 7 L 6 7 Z"
RANGE = "range"
"""The shape of a missed range: a bar from its first to its last fire time."""


@dataclass(frozen=True)
class Kind:
    """One kind of mark: its name (``data-kind``), label, lane and how it is drawn."""

    name: str
    label: str
    lane: str
    shape: str
    colour: str
    filled: bool


_KIND_LIST = [
    Kind("fired", "Fired", "decision", _CIRCLE, BLUE, True),
    Kind("fired_dst_moved", "Fired, moved by DST", "decision", _DIAMOND, PURPLE, True),
    Kind("dst_skipped", "Skipped: time in a DST gap", "decision", _DIAMOND, PURPLE, False),
    Kind("skipped_overlap", "Skipped: previous run unfinished", "decision", _SQUARE, ORANGE, True),
    Kind("missed", "Missed range (not generated)", "decision", RANGE, GREY, True),
    Kind(
        "fired_calendar_moved",
        "Fired, moved off a closed day",
        "decision",
        _TRIANGLE_UP,
        BLUE,
        True,
    ),
    Kind(
        "calendar_skipped",
        "Skipped: closed day (calendar)",
        "decision",
        _TRIANGLE_UP,
        ORANGE,
        False,
    ),
    Kind("blackout", "Skipped: blackout window", "decision", _HOURGLASS, ORANGE, False),
    Kind("too_late", "Skipped: too late to start", "decision", _TRIANGLE_DN, RED, False),
    Kind("skipped", "Skipped: other reason", "decision", _SQUARE, ORANGE, False),
    Kind("failed", "Failed to start", "decision", _CROSS, RED, False),
    Kind("canceled", "Canceled", "decision", _SLASHED_CIRCLE, GREY, False),
    Kind("pending", "Pending", "decision", _CIRCLE, BLUE, False),
    Kind("follow_through_ok", "Result ok", "follow_through", _CHECK, GREEN, False),
    Kind("follow_through_regressed", "Result regressed", "follow_through", _TRIANGLE_DN, RED, True),
    Kind(
        "follow_through_not_comparable",
        "Result not comparable",
        "follow_through",
        _TRIANGLE_UP,
        GREY,
        False,
    ),
    Kind("follow_through_no_policy", "Run ended (no policy)", "follow_through", _DASH, GREY, False),
    Kind(
        "follow_through_finalize_timed_out",
        "Follow-through deadline passed",
        "follow_through",
        _HOURGLASS,
        ORANGE,
        False,
    ),
]
KINDS = {kind.name: kind for kind in _KIND_LIST}

_DST_MOVED = {"gap_shifted", "overlap_second"}
_SKIP_KINDS = {"calendar": "calendar_skipped", "blackout": "blackout", "too_late": "too_late"}
_PENDING_STATES = {"scheduled", "buffered", "dispatching"}


def decision_kind(occurrence: dict[str, Any]) -> Kind:
    """What was decided for one occurrence, from its view (state, reason, range, DST)."""
    state = occurrence.get("state")
    reason = occurrence.get("reason")
    if occurrence.get("range") is not None and reason == "missed":
        return KINDS["missed"]
    if state == "skipped":
        if reason == "overlap":
            return KINDS["skipped_overlap"]
        if reason == "dst_gap" or occurrence.get("dst_adjustment") == "gap_skipped":
            return KINDS["dst_skipped"]
        return KINDS[_SKIP_KINDS.get(reason or "", "skipped")]
    if state == "failed":
        return KINDS["failed"]
    if state == "canceled":
        return KINDS["canceled"]
    if state == "dispatched":
        if occurrence.get("calendar_moved_from"):
            return KINDS["fired_calendar_moved"]
        moved = occurrence.get("dst_adjustment") in _DST_MOVED
        return KINDS["fired_dst_moved" if moved else "fired"]
    return KINDS["pending"] if state in _PENDING_STATES else KINDS["skipped"]


def follow_through_kind(follow_through: dict[str, Any]) -> Kind:
    name = f"follow_through_{follow_through.get('status')}"
    return KINDS.get(name, KINDS["follow_through_no_policy"])


@dataclass(frozen=True)
class Mark:
    kind: Kind
    occurrence: dict[str, Any]
    at: datetime
    x: float
    y: float
    width: float
    """Only for ranges: the bar's length; 0 for a point."""
    label: str


@dataclass(frozen=True)
class Tick:
    x: float
    label: str
    at: datetime


@dataclass(frozen=True)
class Timeline:
    start: datetime
    end: datetime
    marks: list[Mark]
    ticks: list[Tick]
    rows: list[dict[str, Any]]
    """The occurrences shown, newest first, for the equivalent table."""
    truncated: bool

    @property
    def decision_marks(self) -> list[Mark]:
        return [m for m in self.marks if m.kind.lane == "decision"]

    def summary(self) -> str:
        """One sentence a screen reader says for the picture."""
        if not self.decision_marks:
            return "No decisions in this period."
        counts = Counter(m.kind.label for m in self.marks)
        parts = "; ".join(f"{label}: {count}" for label, count in counts.items())
        return f"{len(self.decision_marks)} decisions in this period. {parts}."


def _last_at(occurrence: dict[str, Any]) -> datetime:
    span = occurrence.get("range")
    if span and span.get("last"):
        return parse_rfc3339(span["last"])
    return parse_rfc3339(occurrence["occurrence_at"])


def reaches(occurrence: dict[str, Any], since: datetime) -> bool:
    """Its time, or the end of its range, is at or after ``since``."""
    return _last_at(occurrence) >= since


def in_window(occurrence: dict[str, Any], start: datetime, end: datetime) -> bool:
    return parse_rfc3339(occurrence["occurrence_at"]) <= end and reaches(occurrence, start)


def build(
    occurrences: list[dict[str, Any]],
    now: datetime,
    *,
    window: timedelta = WINDOW,
    truncated: bool = False,
) -> Timeline:
    """The marks of the occurrences that reach into ``(now - window, now]``."""
    start = now - window
    shown = [o for o in occurrences if in_window(o, start, now)]
    shown.sort(key=lambda o: o["occurrence_at"])

    def x_of(at: datetime) -> float:
        clamped = min(max(at, start), now)
        share = (clamped - start) / window
        return round(PLOT_LEFT + share * (PLOT_RIGHT - PLOT_LEFT), 2)

    marks: list[Mark] = []
    for occurrence in shown:
        at = parse_rfc3339(occurrence["occurrence_at"])
        kind = decision_kind(occurrence)
        width = 0.0
        label = f"{kind.label} at {occurrence['occurrence_at']}"
        if kind.shape == RANGE:
            last = parse_rfc3339(occurrence["range"]["last"])
            width = max(_MIN_RANGE_WIDTH, x_of(last) - x_of(at))
            count = occurrence["range"]["count"]
            label = (
                f"{kind.label}: {count} fire time(s) from {occurrence['range']['first']} "
                f"to {occurrence['range']['last']}"
            )
        marks.append(Mark(kind, occurrence, at, x_of(at), LANE_Y[kind.lane], width, label))
        follow = occurrence.get("follow_through")
        if follow is not None:
            ft_kind = follow_through_kind(follow)
            ft_label = f"{ft_kind.label} for the run of {occurrence['occurrence_at']}"
            marks.append(
                Mark(ft_kind, occurrence, at, x_of(at), LANE_Y[ft_kind.lane], 0.0, ft_label)
            )
    rows = [{**o, "kind": decision_kind(o)} for o in reversed(shown)]
    return Timeline(start, now, marks, _ticks(start, now, x_of), rows, truncated)


def _ticks(start: datetime, end: datetime, x_of: Callable[[datetime], float]) -> list[Tick]:
    """Midnights (UTC) over a week; every third hour over a day or less."""
    step, label = (timedelta(days=1), "%b %d")
    if end - start <= timedelta(days=1):
        step, label = (timedelta(hours=3), "%H:%M")
    tick = start.replace(minute=0, second=0, microsecond=0)
    if step == timedelta(days=1):
        tick = tick.replace(hour=0)
    else:
        tick = tick.replace(hour=tick.hour - tick.hour % 3)
    ticks = []
    while tick <= end:
        if tick > start:
            ticks.append(Tick(x_of(tick), tick.strftime(label), tick))
        tick += step
    return ticks


def legend() -> list[Kind]:
    return list(_KIND_LIST)
