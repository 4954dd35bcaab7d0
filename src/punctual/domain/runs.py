"""Runs: one execution of a workflow definition version (WF-4).

A run's id is allocated before it starts; every engine treats that id as the
idempotency key of the start, so a retried dispatch always finds the same run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class RunState(StrEnum):
    PENDING = "pending"
    """Created; no worker has picked it up yet (bounded by the pending timeout)."""
    RUNNING = "running"
    """A worker executes its body (bounded by the execution timeout)."""
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    TERMINATED = "terminated"
    TIMED_OUT = "timed_out"


TERMINAL_RUN_STATES = frozenset(
    {
        RunState.COMPLETED,
        RunState.FAILED,
        RunState.CANCELED,
        RunState.TERMINATED,
        RunState.TIMED_OUT,
    }
)


@dataclass(frozen=True)
class Run:
    id: str
    tenant: str
    workflow: str
    definition_version: str
    artifact: str
    state: RunState
    origin: dict[str, Any]
    started_by: str
    attempts: int
    result: Any
    error: dict[str, Any] | None
    created_at: datetime
    started_at: datetime | None
    """When the current attempt's body began executing."""
    ended_at: datetime | None
    cancel_requested: bool
    task_queue: str
    priority: int
    claimed_at: datetime | None = None
    """When a worker took the current attempt (``None`` on engines without claims)."""
    traceparent: str | None = None
    """The W3C trace context its start carried (OS-1), propagated to the run."""

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_RUN_STATES


@dataclass(frozen=True)
class Definition:
    """A host-global workflow definition version (WF-3)."""

    name: str
    version: str
    state: str
    artifact: str
    input_schema: dict[str, Any]
    execution_timeout_seconds: float
    created_at: datetime


class DefinitionState(StrEnum):
    ACTIVE = "active"
    """New dispatches of the workflow use this version (at most one per name)."""
    DEPRECATED = "deprecated"
    """Kept for what still needs it; not used for new dispatches."""
    RETIRED = "retired"
    """No longer usable."""


class RunErrorCode(StrEnum):
    """Stable codes of a run's ``error`` (API.md "Runs"): ``{"code", "message", ...}``."""

    WORKFLOW_ERROR = "workflow_error"
    """The body raised; the message is the body's own exception text (its author's)."""
    TIMED_OUT = "timed_out"
    """The execution timeout or the pending timeout passed."""
    CANCELED = "canceled"
    """Canceled on request before or while it ran."""
    TERMINATED = "terminated"
    """Terminated on request; no later result is accepted."""
    WORKER_LOST = "worker_lost"
    """Every attempt's worker was lost; the attempts are exhausted."""
    INPUT_REJECTED = "input_rejected"
    """The input does not validate against the pinned definition."""
    INPUT_UNDECRYPTABLE = "input_undecryptable"
    """The stored input failed authentication: it cannot be read with any key (FT-1)."""
    INPUT_KEY_UNKNOWN = "input_key_unknown"
    """No process that could run it holds the input's key (FT-1)."""
    RESULT_NOT_STORABLE = "result_not_storable"
    """The store refused the outcome deterministically; never executed again (FT-3)."""
    TOO_LATE = "too_late"
    """Its occurrence's start deadline passed before the body began; it never began."""
    HANDOFF_FAILED = "handoff_failed"
    """The worker could not hand the run to an execution slot."""
    ENGINE_EXECUTION_LOST = "engine_execution_lost"
    """The engine no longer knows the execution."""


def run_error(code: RunErrorCode, message: str, **extra: Any) -> dict[str, Any]:
    """The one shape of a stored run error; ``extra`` adds e.g. ``type`` or ``traceback``."""
    return {"code": code.value, "message": message, **extra}


def claim_token(worker_id: str, attempt: int) -> str:
    """The token of a worker's claim of one attempt of a run (FT-2)."""
    return f"{worker_id}/{attempt}"
