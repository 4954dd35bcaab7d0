"""Recurring schedules: their policies and the one function that interprets them.

A schedule is split into *when* (a ``RecurrenceSpec``), *what* (workflow, input, workload
class), *how* (``SchedulePolicy``) and *state* (enabled, cursor, last fired). Only
``plan_occurrences`` reads the missed policy and the catch-up bounds; only
``overlap_decision`` reads the overlap policy. Both are pure: time comes in as ``now``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from punctual.domain.recurrence import (
    CronSpec,
    DstAdjustment,
    DstGap,
    DstOverlap,
    DstSkip,
    Fire,
    IntervalSpec,
    RecurrenceSpec,
    count_fires_between,
    iter_fires,
    iter_timeline,
    skipped_by_dst,
)

MAX_CATCH_UP_LIMIT = 100
DEFAULT_MAX_CATCH_UP = 10
DEFAULT_MISFIRE_GRACE_MS = 60_000


class OverlapPolicy(StrEnum):
    """What an occurrence does when it is due while the schedule's previous run is unfinished."""

    SKIP = "skip"
    """Recorded ``skipped`` with reason ``overlap``; no run."""
    BUFFER_ONE = "buffer_one"
    """Waits (``buffered``) and starts when the previous run ends; at most one waits, a
    further one is skipped."""
    ALLOW_ALL = "allow_all"
    """Starts regardless."""


class MissedPolicy(StrEnum):
    """What the generation pass does with occurrences it reaches later than the grace."""

    CATCH_UP = "catch_up"
    """Generate them (bounded by ``max_catch_up`` per pass and ``catch_up_window``)."""
    SKIP = "skip"
    """Record them as one skipped range and move on to the next future time."""


class VersionPolicy(StrEnum):
    """Which definition version an occurrence runs."""

    ACTIVE_AT_FIRE = "active_at_fire"
    """The version active when the occurrence is dispatched."""
    PINNED = "pinned"
    """The version that was active when the schedule was created."""


@dataclass(frozen=True)
class SchedulePolicy:
    overlap: OverlapPolicy
    missed: MissedPolicy
    max_catch_up: int = DEFAULT_MAX_CATCH_UP
    catch_up_window: timedelta | None = None
    misfire_grace: timedelta = timedelta(milliseconds=DEFAULT_MISFIRE_GRACE_MS)


@dataclass(frozen=True)
class PlannedOccurrence:
    at: datetime
    nominal: datetime
    dst_adjustment: DstAdjustment | None
    late: bool


@dataclass(frozen=True)
class SkippedRange:
    """Occurrences that were not generated, recorded once as a range (RS-4)."""

    first: datetime
    last: datetime
    count: int
    reason: str


@dataclass(frozen=True)
class Plan:
    occurrences: list[PlannedOccurrence]
    missed: SkippedRange | None
    dst_skipped: list[DstSkip]
    cursor: datetime
    """The logical time up to which every fire has been decided."""
    next_fire_at: datetime | None
    """When the next pass should look at this schedule again."""


def spec_from_json(data: dict[str, Any]) -> RecurrenceSpec:
    """The stored or requested spec; raises ``RecurrenceError`` subclasses when invalid."""
    if "cron" in data:
        return CronSpec(
            expression=str(data["cron"]),
            time_zone=str(data.get("time_zone") or "UTC"),
            dst_gap=DstGap(data.get("dst_gap") or DstGap.SHIFT_TO_GAP_END),
            dst_overlap=DstOverlap(data.get("dst_overlap") or DstOverlap.FIRST),
        )
    starts_at = data.get("starts_at")
    return IntervalSpec(
        interval_ms=int(data["interval_ms"]),
        starts_at=datetime.fromisoformat(starts_at) if isinstance(starts_at, str) else starts_at,
    )


def spec_to_json(spec: RecurrenceSpec) -> dict[str, Any]:
    if isinstance(spec, CronSpec):
        return {
            "cron": spec.expression,
            "time_zone": spec.time_zone,
            "dst_gap": spec.dst_gap.value,
            "dst_overlap": spec.dst_overlap.value,
        }
    starts_at = spec.starts_at.isoformat().replace("+00:00", "Z") if spec.starts_at else None
    return {"interval_ms": spec.interval_ms, "starts_at": starts_at}


def _is_fixed_time(spec: RecurrenceSpec) -> bool:
    return isinstance(spec, CronSpec) and spec.fixed_time


def skipped_range(
    spec: RecurrenceSpec, after: datetime, until: datetime, reason: str
) -> SkippedRange | None:
    """The fires in ``(after, until]`` as one range, without materialising them all."""
    fires = iter_fires(spec, after)
    first = next(fires, None)
    if first is None or first.at > until:
        return None
    if isinstance(spec, IntervalSpec) and spec.starts_at is not None:
        count = count_fires_between(spec, after, until)
        step = timedelta(milliseconds=spec.interval_ms)
        last = first.at + step * (count - 1)
        return SkippedRange(first.at, last, count, reason)
    last, count = first.at, 1
    for fire in fires:
        if fire.at > until:
            break
        last, count = fire.at, count + 1
    return SkippedRange(first.at, last, count, reason)


def plan_occurrences(
    spec: RecurrenceSpec,
    policy: SchedulePolicy,
    cursor: datetime,
    now: datetime,
    budget: int,
    lookahead: timedelta = timedelta(0),
) -> Plan:
    """Decide every fire after ``cursor`` up to ``now + lookahead``: generate, skip, or
    leave for a later pass.

    * A fire reached more than ``misfire_grace`` after its time is *missed*. Under
      ``missed=skip``, and under ``catch_up`` for fires older than ``catch_up_window``,
      missed fires become one skipped range (reason ``missed``) and use no budget.
    * Other missed fires are generated, at most ``max_catch_up`` per pass; the rest wait
      for later passes (the schedule stays due, so catch-up converges).
    * ``budget`` caps the occurrences generated by this call (the runner's batch size).
    * Named wall times that DST removed (``dst_gap=skip`` on fixed-time expressions) are
      returned in ``dst_skipped`` so that they are recorded, not silently lost.

    A cap or window never stops a schedule: ``next_fire_at`` is always the next fire that
    has not been decided.
    """
    horizon = now + lookahead
    missed_before = now - policy.misfire_grace  # strictly older than this is missed
    until: datetime | None = None  # fires at or before this are skipped as missed
    if policy.missed is MissedPolicy.SKIP:
        until = missed_before - _TICK
    elif policy.catch_up_window is not None:
        # Catch-up reaches back less than the window: a fire exactly that old is out.
        until = min(missed_before - _TICK, now - policy.catch_up_window)
    missed = None
    dst_skipped: list[DstSkip] = []
    if until is not None and until > cursor:
        missed = skipped_range(spec, cursor, until, "missed")
        if _is_fixed_time(spec):
            # A wall time DST removed is its own decision, also inside a missed stretch.
            dst_skipped += [
                skip
                for skip in skipped_by_dst(spec, cursor, until)
                if not _has_fire_at(spec, skip.at)
            ]
        if missed is not None:
            cursor = missed.last
        elif dst_skipped:
            cursor = dst_skipped[-1].at
    occurrences: list[PlannedOccurrence] = []
    late_generated = 0
    next_fire_at: datetime | None = None
    timeline = itertools.islice(iter_timeline(spec, cursor), _MAX_ITEMS_PER_PASS)
    # Decide instant by instant: a fire and the DST skip of another wall time that land
    # on the same instant are one decision (the fire), so a pass never splits them.
    for at, group in itertools.groupby(timeline, key=lambda item: item.at):
        items = list(group)
        if at > horizon:
            next_fire_at = at
            break
        fire = next((item for item in items if isinstance(item, Fire)), None)
        if fire is None:
            skip = items[0]
            assert isinstance(skip, DstSkip)
            if _is_fixed_time(spec):
                dst_skipped.append(skip)
            cursor = at
            continue
        late = at < missed_before
        if len(occurrences) >= budget or (late and late_generated >= policy.max_catch_up):
            next_fire_at = at
            break
        occurrences.append(PlannedOccurrence(at, fire.nominal, fire.dst_adjustment, late))
        late_generated += late
        cursor = at
    return Plan(occurrences, missed, dst_skipped, cursor, next_fire_at)


_TICK = timedelta(microseconds=1)
_MAX_ITEMS_PER_PASS = 1_000_000


def _has_fire_at(spec: RecurrenceSpec, instant: datetime) -> bool:
    fire = first_fire_after(spec, instant - _TICK)
    return fire is not None and fire.at == instant


def first_fire_after(spec: RecurrenceSpec, after: datetime) -> Fire | None:
    return next(iter_fires(spec, after), None)


class OverlapDecision(StrEnum):
    START = "start"
    SKIP = "skip"
    BUFFER = "buffer"


def overlap_decision(
    policy: OverlapPolicy, previous_unfinished: bool, one_already_buffered: bool
) -> OverlapDecision:
    """RS-3, applied at dispatch: a run is unfinished until it is terminal."""
    if policy is OverlapPolicy.ALLOW_ALL or not previous_unfinished:
        return OverlapDecision.START
    if policy is OverlapPolicy.BUFFER_ONE and not one_already_buffered:
        return OverlapDecision.BUFFER
    return OverlapDecision.SKIP


AUTO_DISABLED_PREFIX = "Auto-disabled: "
LAST_STATUS_LIMIT = 300


def auto_disabled_status(reason: str) -> str:
    """The visible ``last_status`` of a schedule that disabled itself (CR-3)."""
    return (AUTO_DISABLED_PREFIX + reason)[:LAST_STATUS_LIMIT]


@dataclass(frozen=True)
class Schedule:
    """A schedule as the store holds it; its input stays encrypted and is not part of it."""

    id: str
    tenant: str
    name: str
    workflow: str
    spec: RecurrenceSpec
    policy: SchedulePolicy
    enabled: bool
    version: int
    revision: int
    version_policy: VersionPolicy
    pinned_version: str | None
    workload_class: str
    regression: dict[str, Any] | None
    created_by: str
    cursor: datetime
    next_fire_at: datetime | None
    last_fired_at: datetime | None
    last_run_id: str | None
    last_status: str | None
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = None
