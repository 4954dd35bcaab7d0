"""What every resource shares: the base model that keeps unknown fields and the raw JSON,
the enumerations as literals, and the error envelope."""

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

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True, defer_build=True)

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
