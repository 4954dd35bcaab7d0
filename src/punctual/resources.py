"""punctual's resources as the HTTP API answers them (API.md), as pydantic models.

One definition serves two readers: ``/openapi.json`` names these models as its component
schemas (so a generated client is typed), and ``punctual.client`` parses answers into them
(so a Python caller is typed). The fields are exactly those of the server's views
(``punctual.usecases.projections``); a test compares them with live answers.

Models accept fields they do not know (``additionalProperties``): the API may add fields,
and an older client keeps working. Each model keeps the JSON it was parsed from in
``raw``, for callers that print or store the answer exactly as the server sent it.

This module imports nothing else of punctual, so the client needs none of the server.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator
from pydantic.functional_validators import ModelWrapValidatorHandler

StartState = Literal[
    "scheduled", "buffered", "dispatching", "dispatched", "failed", "canceled", "skipped"
]
RunState = Literal[
    "pending", "running", "completed", "failed", "canceled", "terminated", "timed_out"
]
DefinitionState = Literal["active", "deprecated", "retired"]
DstAdjustment = Literal["gap_shifted", "gap_skipped", "overlap_second"]
FollowThroughStatus = Literal[
    "ok", "regressed", "not_comparable", "no_policy", "finalize_timed_out"
]
Overlap = Literal["skip", "buffer_one", "allow_all"]
Missed = Literal["catch_up", "skip"]
VersionPolicy = Literal["active_at_fire", "pinned"]
ScheduleState = Literal["active", "paused", "ended"]
OccurrenceOrigin = Literal["schedule", "trigger", "backfill"]
HoldKind = Literal["start", "schedule", "run", "tenant"]
Role = Literal["admin", "member", "viewer"]


class Resource(BaseModel):
    """Base of every answer's model: unknown fields are kept, the JSON is kept in ``raw``."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    _raw: Any = PrivateAttr(default=None)
    _idempotency_key: str | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_raw(cls, data: Any, handler: ModelWrapValidatorHandler[Resource]) -> Resource:
        parsed = handler(data)
        if isinstance(data, dict):
            parsed._raw = data
        return parsed

    def __eq__(self, other: object) -> bool:
        """Equal answers are equal whatever request brought them (the key is not compared)."""
        if not isinstance(other, Resource):
            return NotImplemented
        return type(self) is type(other) and self.model_dump() == other.model_dump()

    __hash__ = BaseModel.__hash__  # unhashable, like every mutable pydantic model

    @property
    def raw(self) -> Any:
        """The JSON this was parsed from, as the server sent it (``--json`` printing)."""
        return self._raw if self._raw is not None else self.model_dump(mode="json")

    @property
    def idempotency_key(self) -> str | None:
        """The key the client sent the mutation that answered this with; persist it to
        retry the same request later. ``None`` for answers to reads."""
        return self._idempotency_key


# --------------------------------------------------------------------------- shared parts


class LastError(Resource):
    """Why the last attempt did not succeed."""

    code: str
    """Stable: programs branch on it (``version_not_loaded``, ``input_rejected``, ...)."""
    message: str
    at: datetime | None


class ErrorDetail(Resource):
    code: str
    """Stable: programs branch on it. Each route's answers list the codes it uses."""
    message: str
    """For people; may change."""
    details: dict[str, Any]
    """Facts a program can use, e.g. ``current_version`` of a ``version_conflict`` or
    ``errors`` of a ``validation_error``."""


class Error(Resource):
    """Every 4xx and 5xx answer: ``{"error": {"code", "message", "details"}}``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "code": "version_conflict",
                        "message": "start sst_1 is at version 2; read it again and retry "
                        "with the current version",
                        "details": {"current_version": 2},
                    }
                }
            ]
        }
    )

    error: ErrorDetail


class InProgress(Resource):
    """``202``: a mutation not decided within the bounded wait. It carries on; send the
    same request with the same ``Idempotency-Key`` again to learn its outcome."""

    status: Literal["in_progress"]


# --------------------------------------------------------------------------- starts


class Dispatch(Resource):
    """What a start was dispatched as; ``null`` until it is."""

    run_id: str
    definition_version: str
    artifact: str
    dispatched_at: datetime


class Start(Resource):
    """A scheduled start (one-off). Its ``input`` is never returned."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "sst_01j9z3k4m5",
                    "tenant": "default",
                    "workflow": "echo",
                    "business_request_id": "appt-42",
                    "start_at": "2026-12-01T06:00:00.000Z",
                    "time_zone": "Europe/Berlin",
                    "workload_class": "standard",
                    "attributes": {"customer": "c-17"},
                    "traceparent": None,
                    "state": "scheduled",
                    "version": 1,
                    "attempts": 0,
                    "next_attempt_at": None,
                    "last_error": None,
                    "reason": None,
                    "created_by": "admin",
                    "created_at": "2026-11-29T12:00:00.000Z",
                    "updated_at": "2026-11-29T12:00:00.000Z",
                    "dispatch": None,
                }
            ]
        }
    )

    id: str
    tenant: str
    workflow: str
    business_request_id: str
    start_at: datetime
    """The authoritative instant, in UTC."""
    time_zone: str | None
    """The IANA zone the caller named, kept for display."""
    workload_class: str
    attributes: dict[str, str]
    traceparent: str | None
    state: StartState
    version: int
    """Send it back with a reschedule or cancel; every accepted transition increments it."""
    attempts: int
    next_attempt_at: datetime | None
    last_error: LastError | None
    reason: str | None
    """Why it was canceled or skipped, when it was."""
    created_by: str
    created_at: datetime
    updated_at: datetime
    dispatch: Dispatch | None


class StartPage(Resource):
    items: list[Start]
    next_cursor: str | None
    """Pass it as ``cursor`` for the next page; ``null`` on the last one."""


class BatchItemResult(Resource):
    """What ``POST …/scheduled-starts`` with the item's key and body would have answered."""

    status: int
    """201, an error status, or 202 while the item is still in flight."""
    body: Start | Error | InProgress


class BatchCreateResult(Resource):
    """Per-item results, in request order."""

    items: list[BatchItemResult]


# --------------------------------------------------------------------------- runs


class RunOrigin(Resource):
    """What started the run: a scheduled start, or an occurrence of a schedule."""

    source: Literal["scheduled_start", "schedule"]
    id: str
    """The start's or the occurrence's id."""
    schedule_id: str | None = None
    occurrence_at: datetime | None = None
    occurrence_origin: Literal["trigger", "backfill"] | None = None
    """Present when the occurrence was triggered or backfilled, not one of the spec's."""


class RunError(Resource):
    """Why a run did not complete; more fields (``type``, ...) may follow ``code``."""

    code: str
    """``workflow_error``, ``timed_out``, ``terminated``, ``worker_lost``,
    ``input_rejected``, ``input_undecryptable``, ``result_not_storable``, ..."""
    message: str


class Run(Resource):
    id: str
    workflow: str
    definition_version: str
    artifact: str
    state: RunState
    origin: RunOrigin
    started_by: str
    attempts: int
    result: Any
    """What the workflow returned, once ``completed``."""
    error: RunError | None
    traceparent: str | None
    cancel_requested: bool
    created_at: datetime
    claimed_at: datetime | None
    """When a worker took the current attempt."""
    started_at: datetime | None
    """When the current attempt's body began executing."""
    ended_at: datetime | None


class RunPage(Resource):
    items: list[Run]
    next_cursor: str | None


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
    source: str | None
    """The ``source`` of the file ``punctual schedules apply`` last applied it from."""
    sync: ScheduleSync | None = None
    """With ``driver = "temporal_schedules"`` only; ``next_fire_times`` are then Temporal's."""
    created_at: datetime
    updated_at: datetime


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
    """Why it was skipped or canceled: ``overlap``, ``missed``, ``dst_gap``,
    ``schedule_deleted``, ..."""
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


# --------------------------------------------------------------------------- tenant


class Definition(Resource):
    """A host-global workflow definition version."""

    name: str
    version: str
    state: DefinitionState
    artifact: str
    input_schema: dict[str, Any]
    execution_timeout_seconds: float
    loaded: bool
    """A live worker has this version loaded."""
    created_at: datetime


class DefinitionPage(Resource):
    items: list[Definition]
    next_cursor: str | None


class Member(Resource):
    tenant: str
    subject: str
    role: Role


class IssuedToken(Resource):
    id: str
    token: str | None
    """The secret, shown once: a replay of the request answers ``null``."""
    subject: str
    expires_at: datetime | None


class Token(Resource):
    """A token without its secret."""

    id: str
    subject: str
    created_at: datetime
    expires_at: datetime | None
    revoked: bool
    revoked_at: datetime | None


class TokenPage(Resource):
    items: list[Token]
    next_cursor: str | None


class Finding(Resource):
    id: str
    kind: str
    subject_id: str
    severity: str
    message: str
    created_at: datetime
    acknowledged: bool
    acknowledged_at: datetime | None
    acknowledged_by: str | None


class HealthStarts(Resource):
    failed_count: int
    failed: list[Start]
    """The latest failed starts (a window; ``failed_count`` counts them all)."""
    stalled_count: int
    stalled: list[str]
    """Ids of starts whose dispatch lease ran out with no runner recovering them."""


class ScheduleHealth(Resource):
    id: str
    name: str
    enabled: bool
    last_status: str | None
    skipped_count: int
    missed_count: int
    failed_count: int


class EngineHealth(Resource):
    name: str
    available: bool


class LoadedVersion(Resource):
    workflow: str
    version: str
    artifact: str


class WorkerHealth(Resource):
    id: str
    engine: str
    host: str
    task_queues: list[str]
    loaded: list[LoadedVersion]
    slots: int
    heartbeat_at: datetime


class Health(Resource):
    """The tenant's health report: ``degraded`` while a failure is unacknowledged, the
    engine is down or a dispatch is stalled."""

    status: Literal["ok", "degraded"]
    findings: list[Finding]
    open_findings_count: int
    starts: HealthStarts
    schedules: list[ScheduleHealth]
    engine: EngineHealth
    workers: list[WorkerHealth]
    tzdata_version: str


# --------------------------------------------------------------------------- notifications


class Notification(Resource):
    id: str
    kind: str
    """``regression``, ``schedule_auto_disabled``, ``finalize_timed_out``, ``start_failed``."""
    schedule_id: str | None
    occurrence_id: str | None
    run_id: str | None
    title: str
    text: str
    details: dict[str, Any]
    created_at: datetime
    read_at: datetime | None


class NotificationPage(Resource):
    items: list[Notification]
    next_cursor: str | None


class Webhook(Resource):
    id: str
    url: str
    """Cut after the host: the path and query (often a credential) are never shown."""
    events: list[str]
    """Empty: every kind."""
    created_at: datetime


class WebhookPage(Resource):
    items: list[Webhook]
    next_cursor: str | None


class Delivery(Resource):
    id: str
    event_id: str
    """The same on every attempt and every redelivery of one event."""
    kind: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status_code: int | None
    last_error: LastError | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None


class DeliveryPage(Resource):
    items: list[Delivery]
    next_cursor: str | None


class Queued(Resource):
    """``202`` of a webhook test or redelivery: the event is in the outbox."""

    status: Literal["queued"]
    event_id: str
    delivery_id: str | None


# --------------------------------------------------------------------------- holds, audit


class Hold(Resource):
    """Keeps records from retention while active (RT-1): a start, a schedule (its
    occurrences and their runs), a run (its start or occurrence) or the whole tenant."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "hld_5f0c2a9e41b7d3c8a6e1f402",
                    "subject_kind": "schedule",
                    "subject_id": "sch_3b1d9c0e7a5f2e8d4c6b0a19",
                    "reason": "incident 2026-118: keep the nightly runs",
                    "created_by": "admin",
                    "created_at": "2026-11-29T08:15:00Z",
                    "released_at": None,
                    "released_by": None,
                    "placed_by_host": False,
                }
            ]
        }
    )

    id: str
    subject_kind: HoldKind
    subject_id: str
    """The held record's id; a tenant hold names its tenant."""
    reason: str
    created_by: str
    """The admin who placed it, or ``host`` for a hold placed through ``/internal/holds``."""
    created_at: datetime
    released_at: datetime | None
    """``null`` while the hold is active."""
    released_by: str | None
    placed_by_host: bool
    """Only the host can release it (``POST /internal/holds/{id}/release``)."""


class HoldPage(Resource):
    items: list[Hold]
    next_cursor: str | None


class AuditEntry(Resource):
    """One decided user mutation (CR-8): who, with which token, what, when and how it was
    answered; never a body or input."""

    id: str
    at: datetime
    actor: str
    """The caller's subject; ``host`` for the host's own holds."""
    token_id: str | None
    action: str
    """The operation's name (``create_start``, ``pause_schedule``, ``place_hold``, ...)."""
    method: str
    path: str
    """The request path, without its query."""
    subject_kind: str | None
    subject_id: str | None
    status: int
    """The HTTP status answered."""


class AuditPage(Resource):
    items: list[AuditEntry]
    next_cursor: str | None


# --------------------------------------------------------------------------- probes


class Liveness(Resource):
    status: Literal["ok"]


class Readiness(Resource):
    status: Literal["ready"]


PAGES: dict[type[Resource], type[Resource]] = {
    Start: StartPage,
    Run: RunPage,
    Schedule: SchedulePage,
    Occurrence: OccurrencePage,
    Definition: DefinitionPage,
    Token: TokenPage,
    Notification: NotificationPage,
    Webhook: WebhookPage,
    Delivery: DeliveryPage,
    Hold: HoldPage,
    AuditEntry: AuditPage,
}
"""Each listed resource and the model of its page."""
