"""The store's repositories of what is kept and for how long: retention, holds and the
audit log (RT-1, CR-8)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from punctual.domain.retention import RecordKind, RetentionWindow
from punctual.ports.records import (
    AuditEntry,
    Hold,
    NewAuditEntry,
    NewHold,
    Seek,
)


class Retention(Protocol):
    """What a sweep may remove (RT-1), one tenant and one kind at a time, in bounded
    batches. A record is removable once terminal for longer than the window and covered
    by no active hold (``domain.retention.HoldKind`` says what each kind covers); never
    anything non-terminal, a run awaiting its follow-through, the latest completed run of
    a live schedule or the run its ``last_run_id`` names, nor an idempotency record of a
    start, occurrence or run that still exists."""

    def tenants(self) -> list[str]: ...

    def remove(
        self, kind: RecordKind, window: RetentionWindow, limit: int
    ) -> dict[RecordKind, int]:
        """Remove at most ``limit`` removable records of ``kind`` (oldest first, skipping
        rows another transaction holds locked) and what goes with them: a run takes its
        dispatched start or occurrence, an occurrence its follow-through, a schedule its
        status. Returns how many of each kind went. Must first take the lock of
        ``Holds.lock_against_sweeps`` and remove nothing of a tenant under a hold."""

    def count(self, kind: RecordKind, window: RetentionWindow) -> dict[RecordKind, int]:
        """What ``remove`` would take now without a limit (the dry run), per kind."""


class Holds(Protocol):
    def lock_against_sweeps(self) -> None:
        """Until commit, no sweep batch runs (and this waits for one under way): a hold
        placed after its subject was checked to exist is in force before any sweep
        looks again."""

    def insert(self, new: NewHold, now: datetime) -> Hold: ...

    def get(self, hold_id: str, tenant: str | None = None) -> Hold | None:
        """The hold, in ``tenant`` when given (another tenant's is absent)."""

    def find(self, tenant: str, *, active_only: bool, at: Seek[int]) -> list[Hold]:
        """The page ``at`` selects, by ``seq``."""

    def release(self, hold_id: str, released_by: str, now: datetime) -> Hold | None:
        """Set ``released_at`` once (idempotent: a second release keeps the first)."""


class Audit(Protocol):
    def record(self, entries: Sequence[NewAuditEntry], now: datetime) -> None:
        """Append entries at ``now``, in the caller's transaction (an entry commits with
        the mutation it describes, or not at all)."""

    def find(
        self,
        tenant: str,
        *,
        subject_id: str | None,
        actor: str | None,
        at: Seek[int],
    ) -> list[AuditEntry]:
        """The page ``at`` selects, by ``seq``."""
