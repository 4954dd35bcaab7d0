"""A schedule's timeline: one mark per decision of a recent window, laid out for an SVG.

The marks are read from the occurrence views that ``GET …/occurrences`` returns, so the
picture and the API cannot disagree. Every kind has its own shape, colour and text label
(the legend and each mark's title), so no kind is told apart by colour alone.

The window follows the schedule's rhythm (``window_for``): about ``GAPS_SHOWN`` of its
typical gaps between fires, so a schedule that fires every second shows the last half
minute and a daily one the last month, and their marks are spread, not piled up at "now".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

from punctual.domain.timeutil import parse_rfc3339

GAPS_SHOWN = 30
"""The window holds about this many of the schedule's typical gaps between fires."""
FIRES_MEASURED = GAPS_SHOWN + 1
"""How many upcoming fire times the typical gap is measured on."""
MIN_WINDOW = timedelta(seconds=30)
MAX_WINDOW = timedelta(days=90)
DEFAULT_WINDOW = timedelta(days=7)
"""A schedule with no two upcoming fire times to measure (ended, or a one-off)."""
MAX_TICKS = 8
_UNITS = [
    (timedelta(days=1), "day", timedelta(days=2)),
    (timedelta(hours=1), "hour", timedelta(hours=2)),
    (timedelta(minutes=1), "minute", timedelta(minutes=2)),
    (timedelta(seconds=1), "second", timedelta(0)),
]
"""A window is a whole number of the largest unit it holds at least two of."""
_TICK_STEPS = (
    [timedelta(seconds=n) for n in (1, 2, 5, 10, 15, 30)]
    + [timedelta(minutes=n) for n in (1, 2, 5, 10, 15, 30)]
    + [timedelta(hours=n) for n in (1, 2, 3, 6, 12)]
    + [timedelta(days=n) for n in (1, 2, 7, 14, 28)]
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

WIDTH = 960
HEIGHT = 190
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


def _amount(count: int, unit: str) -> str:
    return f"{count} {unit}" + ("" if count == 1 else "s")


@dataclass(frozen=True)
class Window:
    """How much of the past the picture shows, and how its axis is marked."""

    span: timedelta
    text: str
    """The span in the unit it was rounded to: ``30 seconds``, ``24 hours``."""
    tick: timedelta
    """The step between two ticks of the axis: at most ``MAX_TICKS`` of them."""

    @property
    def tick_text(self) -> str:
        """``5 seconds``, ``6 hours``, ``day``: what follows "a tick every"."""
        size, unit, _ = next(u for u in _UNITS if self.tick % u[0] == timedelta(0))
        count = self.tick // size
        return unit if count == 1 else _amount(count, unit)

    def tick_label(self, at: datetime) -> str:
        """Seconds for a step under a minute; the day's date at midnight and on steps of
        days; the time of day otherwise."""
        if self.tick < timedelta(minutes=1):
            return at.strftime("%H:%M:%S")
        if self.tick >= timedelta(days=1) or (at.hour, at.minute) == (0, 0):
            return at.strftime("%b %d")
        return at.strftime("%H:%M")


def typical_gap(fire_times: Sequence[datetime]) -> timedelta | None:
    """The median gap between consecutive fire times; None with fewer than two."""
    ordered = sorted(fire_times)
    gaps = sorted(b - a for a, b in pairwise(ordered) if b > a)
    if not gaps:
        return None
    middle = len(gaps) // 2
    if len(gaps) % 2:
        return gaps[middle]
    return (gaps[middle - 1] + gaps[middle]) / 2


def window_for(gap: timedelta | None) -> Window:
    """About ``GAPS_SHOWN`` gaps, within ``MIN_WINDOW`` and ``MAX_WINDOW``, rounded up to
    a whole number of seconds, minutes, hours or days; ``DEFAULT_WINDOW`` without a gap."""
    wanted = DEFAULT_WINDOW if gap is None or gap <= timedelta(0) else gap * GAPS_SHOWN
    wanted = min(max(wanted, MIN_WINDOW), MAX_WINDOW)
    size, unit = next((size, unit) for size, unit, at_least in _UNITS if wanted >= at_least)
    count = math.ceil(wanted / size)
    span = size * count
    tick = next((step for step in _TICK_STEPS if span / step <= MAX_TICKS), _TICK_STEPS[-1])
    return Window(span, _amount(count, unit), tick)


def window_reaching(gap: timedelta | None, quiet_for: timedelta | None) -> Window:
    """``window_for(gap)``, stretched to reach the schedule's last fire when that lies
    before it (``quiet_for``: how long ago it fired), up to ``MAX_WINDOW``: a schedule that
    fires in bursts, or that was paused, shows where it stopped rather than an empty
    picture."""
    window = window_for(gap)
    if quiet_for is None or quiet_for < window.span or window.span >= MAX_WINDOW:
        return window
    # A little past the last fire, so its mark is not on the picture's edge.
    return window_for(quiet_for * 1.1 / GAPS_SHOWN)


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
    window: Window
    start: datetime
    end: datetime
    marks: list[Mark]
    ticks: list[Tick]
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
    window: Window,
    *,
    truncated: bool = False,
) -> Timeline:
    """The marks of the occurrences that reach into ``(now - window, now]``."""
    start = now - window.span
    # Drawn left to right, whatever order the list had.
    shown = sorted(
        (o for o in occurrences if in_window(o, start, now)), key=lambda o: o["occurrence_at"]
    )

    def x_of(at: datetime) -> float:
        clamped = min(max(at, start), now)
        share = (clamped - start) / window.span
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
    return Timeline(window, start, now, marks, _ticks(window, start, now, x_of), truncated)


def _ticks(
    window: Window, start: datetime, end: datetime, x_of: Callable[[datetime], float]
) -> list[Tick]:
    """Every multiple of the window's step (counted from 1970-01-01 UTC, so a step of a
    day falls on midnights) inside the window."""
    tick = _EPOCH + ((start - _EPOCH) // window.tick + 1) * window.tick
    ticks = []
    while tick <= end:
        ticks.append(Tick(x_of(tick), window.tick_label(tick), tick))
        tick += window.tick
    return ticks


def legend() -> list[Kind]:
    return list(_KIND_LIST)
