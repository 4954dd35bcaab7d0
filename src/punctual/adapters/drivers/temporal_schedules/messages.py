"""The typed contract between a Temporal Schedule's fire workflow and punctual's fire use
case: pydantic models, validated where they are sent and where they are received."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

FIRE_WORKFLOW = "punctual.fire"
FIRE_ACTIVITY = "punctual.fire_occurrence"
SETTLE_ACTIVITY = "punctual.await_follow_through"
FIRE_TASK_QUEUE = "punctual-schedules"
MARK_KEY = "punctual_installation"
"""The memo key that carries the id of the installation that owns a Temporal Schedule."""
WORKFLOW_ID_PREFIX = "fire-"


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FireArgs(_Message):
    """The fire workflow's argument, fixed in the Temporal Schedule's action."""

    schedule_id: str = Field(min_length=1)
    tenant: str = Field(min_length=1)


class FireRequest(_Message):
    schedule_id: str = Field(min_length=1)
    tenant: str = Field(min_length=1)
    scheduled_at: datetime
    """Temporal's scheduled time of this action: the occurrence's ``occurrence_at``."""


class FireAnswer(_Message):
    occurrence_id: str | None
    """None when nothing was fired (no record, or the record is paused)."""
    state: str
    """The occurrence's state, or ``no_schedule`` / ``paused``."""


class SettleRequest(_Message):
    occurrence_id: str = Field(min_length=1)
    schedule_id: str = Field(min_length=1)
    tenant: str = Field(min_length=1)


class SettleAnswer(_Message):
    follow_through: str | None
    """The follow-through status, or None when the occurrence ended without a run."""
    state: str
