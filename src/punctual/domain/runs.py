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
    ended_at: datetime | None
    cancel_requested: bool
    task_queue: str
    priority: int

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
