"""Runs as the API answers them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from punctual.resources.base import Resource, RunState

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
    scheduled_at: datetime | None = None
    """An occurrence's: when it was due (jitter and a catch-up's lateness included)."""
    previous_completed_run_id: str | None = None
    """An occurrence's: the schedule's latest run that had completed, among earlier
    occurrences, when this one was dispatched (what its body's ``ctx.occurrence`` says)."""
    start_deadline_at: datetime | None = None
    """An occurrence's, under ``start_deadline_ms``: its body never begins after it."""


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
