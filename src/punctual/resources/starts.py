"""Scheduled starts as the API answers them, single and batched."""

from __future__ import annotations

from datetime import datetime

from pydantic import ConfigDict

from punctual.resources.base import Error, InProgress, LastError, Resource, StartState

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
