"""Schedules, their occurrences, fires, previews and follow-through as the API answers them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field

from punctual.resources.base import (
    DstAdjustment,
    FollowThroughStatus,
    LastError,
    Missed,
    OccurrenceOrigin,
    Overlap,
    Resource,
    ScheduleState,
    StartState,
    VersionPolicy,
)

# --------------------------------------------------------------------------- schedules


class CronSpec(Resource):
    cron: str
    time_zone: str
    dst_gap: Literal["shift_to_gap_end", "skip"]
    dst_overlap: Literal["first", "last", "both"]


class IntervalSpec(Resource):
    interval_ms: int
    starts_at: datetime | None


class RegressionMetric(Resource):
    path: str
    """Where the number is in the run's result, e.g. ``metrics.score``."""
    better: Literal["higher", "lower"]
    tolerance: float


class RegressionPolicy(Resource):
    metrics: list[RegressionMetric]


class ScheduleSync(Resource):
    """How the schedule's Temporal Schedule stands (the Temporal Schedules driver only)."""

    state: Literal["in_sync", "drifted", "orphaned"]
    checked_at: datetime | None
    """When punctual last compared it with Temporal; ``null``: not yet."""


class Schedule(Resource):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "sch_01j9z3k4m5",
                    "name": "nightly-scores",
                    "workflow": "score",
                    "spec": {
                        "cron": "30 2 * * 1-5",
                        "time_zone": "America/New_York",
                        "dst_gap": "shift_to_gap_end",
                        "dst_overlap": "first",
                    },
                    "overlap": "skip",
                    "missed": "catch_up",
                    "max_catch_up": 10,
                    "catch_up_window": 86400.0,
                    "misfire_grace_ms": 60000,
                    "enabled": True,
                    "version": 1,
                    "revision": 1,
                    "version_policy": "active_at_fire",
                    "pinned_version": None,
                    "workload_class": "standard",
                    "regression": {
                        "metrics": [{"path": "metrics.score", "better": "higher", "tolerance": 0.0}]
                    },
                    "created_by": "admin",
                    "last_fired_at": None,
                    "last_run_id": None,
                    "last_status": None,
                    "next_fire_times": ["2026-12-01T07:30:00.000Z", "2026-12-02T07:30:00.000Z"],
                    "state": "active",
                    "end_at": None,
                    "max_occurrences": None,
                    "remaining_occurrences": None,
                    "jitter_ms": 0,
                    "source": None,
                    "created_at": "2026-11-29T12:00:00.000Z",
                    "updated_at": "2026-11-29T12:00:00.000Z",
                }
            ]
        }
    )

    id: str
    name: str
    workflow: str
    spec: CronSpec | IntervalSpec
    overlap: Overlap
    missed: Missed
    max_catch_up: int
    catch_up_window: float | None
    """Seconds back that catch-up reaches; ``null``: no bound."""
    misfire_grace_ms: int
    enabled: bool
    version: int
    """Send it back with every mutation of the schedule."""
    revision: int
    """Increments with every edit of spec, workflow or input."""
    version_policy: VersionPolicy
    pinned_version: str | None
    workload_class: str
    regression: RegressionPolicy | None
    created_by: str
    last_fired_at: datetime | None
    last_run_id: str | None
    last_status: str | None
    next_fire_times: list[datetime]
    """The next 5 instants (fewer near its end); empty unless ``active``."""
    state: ScheduleState
    end_at: datetime | None
    """No fire after it."""
    max_occurrences: int | None
    """How many of the spec's own fires it makes, in any state; ``null``: no limit."""
    remaining_occurrences: int | None
    """Of ``max_occurrences``; ``null`` without a limit."""
    jitter_ms: int
    """Each occurrence's ``scheduled_at`` is delayed by a deterministic amount below it."""
    start_deadline_ms: int | None = None
    """An occurrence whose body has not begun this long after it was due never begins
    (``too_late``); ``null``: no deadline."""
    blackouts: list[Blackout] = []
    """Windows in which none of its fires runs (recorded ``skipped``, reason ``blackout``)."""
    pause_until: datetime | None = None
    """A timed pause as it was set (kept once passed)."""
    paused_until: datetime | None = None
    """While a timed pause holds it (``state: paused``): when it resumes by itself."""
    source: str | None
    """The ``source`` of the file ``punctual schedules apply`` last applied it from."""
    sync: ScheduleSync | None = None
    """With ``driver = "temporal_schedules"`` only; ``next_fire_times`` are then Temporal's."""
    created_at: datetime
    updated_at: datetime


class Blackout(Resource):
    """A window without fires: each fire with ``from <= instant < to`` is skipped."""

    model_config = ConfigDict(populate_by_name=True)

    start: datetime = Field(alias="from")
    end: datetime = Field(alias="to")
    reason: str | None = None


class SchedulePage(Resource):
    items: list[Schedule]
    next_cursor: str | None


class ScheduleUpsert(Schedule):
    """The answer of ``PUT …/schedules/by-name/{name}``: the schedule, and whether the
    request changed it."""

    changed: bool
    """``false`` when the body matched the schedule: nothing was written."""


class UpsertPlan(Resource):
    """The dry run of ``PUT …/schedules/by-name/{name}`` (``?dry_run=true``)."""

    action: Literal["create", "update", "unchanged"]
    changed_fields: list[str]
    """For ``update``: the fields that differ (``input`` included), sorted."""


class MissedRange(Resource):
    """A run of missed occurrences recorded as one skipped item."""

    first: datetime
    last: datetime | None
    count: int


class Regression(Resource):
    path: str
    previous: float
    current: float
    better: Literal["higher", "lower"]
    tolerance: float


class FollowThrough(Resource):
    status: FollowThroughStatus
    reason: str | None
    previous_run_id: str | None
    """The completed run compared with, when there was one."""
    regressions: list[Regression]
    recorded_at: datetime | None


class Occurrence(Resource):
    """One firing of a schedule; itself a start with its own id and version."""

    id: str
    schedule_id: str
    occurrence_at: datetime
    """The logical time; it never moves."""
    scheduled_at: datetime
    """When it is due (moves for retry backoff)."""
    nominal: str | None
    """The local wall time the expression named."""
    dst_adjustment: DstAdjustment | None
    state: StartState
    reason: str | None
    """Why it was skipped or canceled: ``overlap``, ``missed``, ``dst_gap``, ``blackout``,
    ``schedule_deleted``, ..."""
    reason_detail: str | None = None
    """What the decision names beyond its reason: the blackout's own reason."""
    version: int
    revision: int | None
    run_id: str | None
    attempts: int
    last_error: LastError | None
    follow_through: FollowThrough | None
    """``null`` until its run ended."""
    origin: OccurrenceOrigin
    """``schedule``: one of the spec's fires; ``trigger`` or ``backfill``: asked for."""
    range: MissedRange | None = None
    """Present on a skipped item that stands for a run of missed occurrences."""


class OccurrencePage(Resource):
    items: list[Occurrence]
    next_cursor: str | None


class BackfillResult(Resource):
    """Every fire time of the range, in order, as the occurrence that holds it now."""

    generated: int
    existing: int
    """Fire times that already had a live or finished occurrence."""
    items: list[Occurrence]


class Fire(Resource):
    fire_at: datetime
    local: str
    """The same instant in the zone, with its offset."""
    nominal: str
    """The local wall time the expression named."""
    dst_adjustment: DstAdjustment | None


class SchedulePreview(Resource):
    items: list[Fire]
