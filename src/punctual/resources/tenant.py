"""Definitions, members, tokens, health and the probes as the API answers them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from punctual.resources.base import DefinitionState, Resource, Role
from punctual.resources.starts import Start

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
    created_at: datetime | None = None
    """When the member joined (a role change keeps it); in the members list, not in the
    answer of an add."""


class MemberPage(Resource):
    items: list[Member]
    next_cursor: str | None


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
    holidays_version: str
    """The ``holidays`` package whose data decides business calendars' closed days."""


# --------------------------------------------------------------------------- probes


class Liveness(Resource):
    status: Literal["ok"]


class Readiness(Resource):
    status: Literal["ready"]
