"""The public shapes of punctual's resources (API.md), shared by HTTP, CLI and Python API.

Projections never carry workflow input (OS-9), and reveal definition version,
artifact and run id of a start only after dispatch.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from punctual.domain.runs import Definition, Run
from punctual.domain.starts import LastError, ScheduledStart
from punctual.domain.timeutil import to_rfc3339
from punctual.ports.records import Finding, TokenRecord


def ts(value: datetime | None) -> str | None:
    return to_rfc3339(value) if value is not None else None


def last_error_view(error: LastError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {"code": error.code, "message": error.message, "at": ts(error.at)}


def start_view(start: ScheduledStart) -> dict[str, Any]:
    dispatch = None
    if start.dispatch is not None:
        dispatch = {
            "run_id": start.dispatch.run_id,
            "definition_version": start.dispatch.definition_version,
            "artifact": start.dispatch.artifact,
            "dispatched_at": ts(start.dispatch.dispatched_at),
        }
    return {
        "id": start.id,
        "tenant": start.tenant,
        "workflow": start.workflow,
        "business_request_id": start.business_request_id,
        "start_at": ts(start.start_at),
        "time_zone": start.time_zone,
        "workload_class": start.workload_class,
        "attributes": dict(start.attributes),
        "traceparent": start.traceparent,
        "state": start.state.value,
        "version": start.version,
        "attempts": start.attempts,
        "next_attempt_at": ts(start.next_attempt_at),
        "last_error": last_error_view(start.last_error),
        "reason": start.reason,
        "created_by": start.created_by,
        "created_at": ts(start.created_at),
        "updated_at": ts(start.updated_at),
        "dispatch": dispatch,
    }


def run_view(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "workflow": run.workflow,
        "definition_version": run.definition_version,
        "artifact": run.artifact,
        "state": run.state.value,
        "origin": dict(run.origin),
        "started_by": run.started_by,
        "attempts": run.attempts,
        "result": run.result,
        "error": run.error,
        "cancel_requested": run.cancel_requested,
        "created_at": ts(run.created_at),
        "started_at": ts(run.started_at),
        "ended_at": ts(run.ended_at),
    }


def definition_view(definition: Definition, loaded: bool) -> dict[str, Any]:
    return {
        "name": definition.name,
        "version": definition.version,
        "state": definition.state,
        "artifact": definition.artifact,
        "input_schema": definition.input_schema,
        "execution_timeout_seconds": definition.execution_timeout_seconds,
        "loaded": loaded,
        "created_at": ts(definition.created_at),
    }


def token_view(token: TokenRecord) -> dict[str, Any]:
    return {
        "id": token.id,
        "subject": token.subject,
        "created_at": ts(token.created_at),
        "expires_at": ts(token.expires_at),
        "revoked": token.revoked_at is not None,
        "revoked_at": ts(token.revoked_at),
    }


def finding_view(finding: Finding) -> dict[str, Any]:
    return {
        "id": finding.id,
        "kind": finding.kind,
        "subject_id": finding.subject_id,
        "severity": finding.severity,
        "message": finding.message,
        "created_at": ts(finding.created_at),
        "acknowledged": finding.acknowledged_at is not None,
        "acknowledged_at": ts(finding.acknowledged_at),
        "acknowledged_by": finding.acknowledged_by,
    }
