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


class BusinessDaySpec(Resource):
    """The ``business_day``-th open day of each month (negative: from its end) at ``at``."""

    business_day: int
    at: str
    """A local time of day, ``HH:MM``."""
    time_zone: str
    dst_gap: Literal["shift_to_gap_end", "skip"]
    dst_overlap: Literal["first", "last", "both"]


class HolidayRegion(Resource):
    country: str
    """ISO 3166-1, e.g. ``DE``."""
    subdivision: str | None
    """ISO 3166-2 within it, e.g. ``BY``; ``null``: the country's nationwide holidays."""


class Calendar(Resource):
    """Which local dates are open: closed are the regions' public holidays, the weekend and
    the extra closed dates, unless an extra open date."""

    holidays: list[HolidayRegion]
    weekend: list[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]]
    extra_holidays: list[str]
    extra_workdays: list[str]
    on_closed_day: Literal["skip", "next_open_day", "previous_open_day"]


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
    spec: CronSpec | IntervalSpec | BusinessDaySpec
    """The first of ``specs``."""
    specs: list[CronSpec | IntervalSpec | BusinessDaySpec] = []
    """Every spec: it fires at the union of their instants, one occurrence per instant."""
    calendar: Calendar | None = None
    """Closed days are skipped or moved (``on_closed_day``); ``null``: every day is open."""
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
    spec_indexes: list[int] | None = None
    """The indexes of the schedule's specs that yielded it; ``null`` for a trigger or a
    record of several instants."""
    calendar_moved_from: datetime | None = None
    """When the calendar moved it off a closed day: the instant it would have had."""
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
    spec_indexes: list[int] = [0]
    """The specs that yield it."""
    calendar_moved_from: datetime | None = None
    """When the calendar moves it off a closed day: the instant it would have had."""


class PreviewSkip(Resource):
    """An instant where nothing fires, and why."""

    at: datetime
    reason: Literal["dst_gap", "calendar", "blackout"]
    detail: str | None
    """The closed day's reason (a holiday's name, ``weekend``) or the blackout's."""
    spec_indexes: list[int]
    until: datetime | None
    """A blackout: its end (its fires up to it are skipped, shown once)."""


class AuditPause(Resource):
    """An interval the schedule was paused; ``to`` is ``null`` while it still is."""

    model_config = ConfigDict(populate_by_name=True)

    start: datetime = Field(alias="from")
    end: datetime | None = Field(alias="to")
    by: str
    """Who paused it (``punctual`` for an auto-disable)."""


class AuditItem(Resource):
    instant: datetime
    spec_indexes: list[int]
    outcome: Literal["fired", "skipped", "not_generated", "missing"]
    reason: str | None
    """Why it was skipped (the recorded reason), or not generated: ``before_creation``,
    ``deleted``, ``paused``, ``ended``, ``not_yet_decided``."""
    occurrence_id: str | None
    run_id: str | None
    run_state: str | None
    pause: AuditPause | None
    """For ``not_generated`` while paused: the pause."""


class ScheduleAudit(Resource):
    """Every instant the schedule's specs yielded in the range, and what became of it."""

    items: list[AuditItem]
    paused: list[AuditPause]


class SchedulePreview(Resource):
    items: list[Fire]
    skipped: list[PreviewSkip] = []
    """The decisions not to fire met before the last item (at most 100)."""
