"""punctual's resources as the HTTP API answers them (API.md), as pydantic models.

One definition serves two readers: ``/openapi.json`` names these models as its component
schemas (so a generated client is typed), and ``punctual.client`` parses answers into them
(so a Python caller is typed). The fields are exactly those of the server's views
(``punctual.usecases.kernel.projections``); a test compares them with live answers.

Models accept fields they do not know (``additionalProperties``): the API may add fields,
and an older client keeps working. Each model keeps the JSON it was parsed from in
``raw``, for callers that print or store the answer exactly as the server sent it.

This package imports nothing else of punctual, so the client needs none of the server. Its
modules group the resources by family; every name is importable from here.
"""

from __future__ import annotations

from punctual.resources.base import (
    DefinitionState,
    DstAdjustment,
    Error,
    ErrorDetail,
    FollowThroughStatus,
    HoldKind,
    InProgress,
    LastError,
    Missed,
    OccurrenceOrigin,
    Overlap,
    Resource,
    Role,
    RunState,
    ScheduleState,
    StartState,
    VersionPolicy,
)
from punctual.resources.outbox import (
    Delivery,
    DeliveryPage,
    Notification,
    NotificationPage,
    Queued,
    Webhook,
    WebhookPage,
)
from punctual.resources.records import AuditEntry, AuditPage, Hold, HoldPage
from punctual.resources.runs import Run, RunError, RunOrigin, RunPage
from punctual.resources.schedules import (
    BackfillResult,
    CronSpec,
    Fire,
    FollowThrough,
    IntervalSpec,
    MissedRange,
    Occurrence,
    OccurrencePage,
    Regression,
    RegressionMetric,
    RegressionPolicy,
    Schedule,
    SchedulePage,
    SchedulePreview,
    ScheduleSync,
    ScheduleUpsert,
    UpsertPlan,
)
from punctual.resources.starts import BatchCreateResult, BatchItemResult, Dispatch, Start, StartPage
from punctual.resources.tenant import (
    Definition,
    DefinitionPage,
    EngineHealth,
    Finding,
    Health,
    HealthStarts,
    IssuedToken,
    Liveness,
    LoadedVersion,
    Member,
    Readiness,
    ScheduleHealth,
    Token,
    TokenPage,
    WorkerHealth,
)

__all__ = [
    "PAGES",
    "AuditEntry",
    "AuditPage",
    "BackfillResult",
    "BatchCreateResult",
    "BatchItemResult",
    "CronSpec",
    "Definition",
    "DefinitionPage",
    "DefinitionState",
    "Delivery",
    "DeliveryPage",
    "Dispatch",
    "DstAdjustment",
    "EngineHealth",
    "Error",
    "ErrorDetail",
    "Finding",
    "Fire",
    "FollowThrough",
    "FollowThroughStatus",
    "Health",
    "HealthStarts",
    "Hold",
    "HoldKind",
    "HoldPage",
    "InProgress",
    "IntervalSpec",
    "IssuedToken",
    "LastError",
    "Liveness",
    "LoadedVersion",
    "Member",
    "Missed",
    "MissedRange",
    "Notification",
    "NotificationPage",
    "Occurrence",
    "OccurrenceOrigin",
    "OccurrencePage",
    "Overlap",
    "Queued",
    "Readiness",
    "Regression",
    "RegressionMetric",
    "RegressionPolicy",
    "Resource",
    "Role",
    "Run",
    "RunError",
    "RunOrigin",
    "RunPage",
    "RunState",
    "Schedule",
    "ScheduleHealth",
    "SchedulePage",
    "SchedulePreview",
    "ScheduleState",
    "ScheduleSync",
    "ScheduleUpsert",
    "Start",
    "StartPage",
    "StartState",
    "Token",
    "TokenPage",
    "UpsertPlan",
    "VersionPolicy",
    "Webhook",
    "WebhookPage",
    "WorkerHealth",
]

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
