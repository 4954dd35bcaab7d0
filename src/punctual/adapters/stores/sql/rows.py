"""Row <-> domain conversions shared by the repositories."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.engine import RowMapping

from punctual.domain.runs import Definition, Run, RunState
from punctual.domain.starts import DispatchRecord, LastError, ScheduledStart, StartState
from punctual.domain.timeutil import parse_rfc3339, to_rfc3339


def last_error_to_json(error: LastError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {"code": error.code, "message": error.message, "at": to_rfc3339(error.at)}


def last_error_from_json(data: dict[str, Any] | None) -> LastError | None:
    if not data:
        return None
    return LastError(code=data["code"], message=data["message"], at=parse_rfc3339(data["at"]))


def start_from_row(row: RowMapping) -> ScheduledStart:
    dispatched_at: datetime | None = row["dispatched_at"]
    dispatch = None
    if dispatched_at is not None:
        dispatch = DispatchRecord(
            run_id=row["run_id"],
            definition_version=row["definition_version"],
            artifact=row["artifact"],
            dispatched_at=dispatched_at,
        )
    return ScheduledStart(
        id=row["id"],
        tenant=row["tenant"],
        workflow=row["workflow"],
        business_request_id=row["business_request_id"],
        start_at=row["start_at"],
        time_zone=row["time_zone"],
        workload_class=row["workload_class"],
        attributes=dict(row["attributes"] or {}),
        traceparent=row["traceparent"],
        state=StartState(row["state"]),
        version=row["version"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        last_error=last_error_from_json(row["last_error"]),
        created_by=row["created_by"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        run_id=row["run_id"],
        dispatch=dispatch,
        reason=row["reason"],
        schedule_id=row["schedule_id"],
        occurrence_at=row["occurrence_at"],
        nominal=row["nominal"],
        dst_adjustment=row["dst_adjustment"],
        revision=row["revision"],
        range_last=row["range_last"],
        range_count=row["range_count"],
    )


def run_from_row(row: RowMapping) -> Run:
    return Run(
        id=row["id"],
        tenant=row["tenant"],
        workflow=row["workflow"],
        definition_version=row["definition_version"],
        artifact=row["artifact"],
        state=RunState(row["state"]),
        origin=dict(row["origin"] or {}),
        started_by=row["started_by"],
        attempts=row["attempts"],
        result=row["result"],
        error=row["error"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        cancel_requested=bool(row["cancel_requested"]),
        task_queue=row["task_queue"],
        priority=row["priority"],
        claimed_at=row["claimed_at"],
        traceparent=row["traceparent"],
    )


def definition_from_row(row: RowMapping) -> Definition:
    return Definition(
        name=row["name"],
        version=row["version"],
        state=row["state"],
        artifact=row["artifact"],
        input_schema=dict(row["input_schema"]),
        execution_timeout_seconds=row["execution_timeout_seconds"],
        created_at=row["created_at"],
    )
