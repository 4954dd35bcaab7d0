"""Holds and the audit log as the API answers them."""

from __future__ import annotations

from datetime import datetime

from pydantic import ConfigDict

from punctual.resources.base import HoldKind, Resource

# --------------------------------------------------------------------------- holds, audit


class Hold(Resource):
    """Keeps records from retention while active (RT-1): a start, a schedule (its
    occurrences and their runs), a run (its start or occurrence) or the whole tenant."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "hld_5f0c2a9e41b7d3c8a6e1f402",
                    "subject_kind": "schedule",
                    "subject_id": "sch_3b1d9c0e7a5f2e8d4c6b0a19",
                    "reason": "incident 2026-118: keep the nightly runs",
                    "created_by": "admin",
                    "created_at": "2026-11-29T08:15:00Z",
                    "released_at": None,
                    "released_by": None,
                    "placed_by_host": False,
                }
            ]
        }
    )

    id: str
    subject_kind: HoldKind
    subject_id: str
    """The held record's id; a tenant hold names its tenant."""
    reason: str
    created_by: str
    """The admin who placed it, or ``host`` for a hold placed through ``/internal/holds``."""
    created_at: datetime
    released_at: datetime | None
    """``null`` while the hold is active."""
    released_by: str | None
    placed_by_host: bool
    """Only the host can release it (``POST /internal/holds/{id}/release``)."""


class HoldPage(Resource):
    items: list[Hold]
    next_cursor: str | None


class AuditEntry(Resource):
    """One decided user mutation (CR-8): who, with which token, what, when and how it was
    answered; never a body or input."""

    id: str
    at: datetime
    actor: str
    """The caller's subject; ``host`` for the host's own holds."""
    token_id: str | None
    action: str
    """The operation's name (``create_start``, ``pause_schedule``, ``place_hold``, ...)."""
    method: str
    path: str
    """The request path, without its query."""
    subject_kind: str | None
    subject_id: str | None
    status: int
    """The HTTP status answered."""


class AuditPage(Resource):
    items: list[AuditEntry]
    next_cursor: str | None
