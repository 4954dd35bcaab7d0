"""Retention rules (RT-1): which records expire when, and what a hold covers.

Pure: the sweep (``usecases/tenancy/retention.py``) asks these rules for its windows, and the
store applies them in SQL. Time is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

UNREAD_NOTIFICATION_FACTOR = 4
"""Unread notifications are kept this many times longer than read ones: nobody saw them."""


class RecordKind(StrEnum):
    """What a sweep removes, each once terminal for longer than its window."""

    RUNS = "runs"
    """Terminal runs, by ``ended_at``; a dispatched start or occurrence goes with its run."""
    STARTS = "starts"
    """One-off starts: failed or canceled ones by their last change, dispatched ones with
    their run."""
    OCCURRENCES = "occurrences"
    """Occurrences and skipped ranges (with their follow-through), like starts."""
    IDEMPOTENCY_RECORDS = "idempotency_records"
    """Decided keys, by ``decided_at``, once no start, occurrence or run they name exists."""
    FINDINGS = "findings"
    """Acknowledged health findings, by ``acknowledged_at``."""
    NOTIFICATIONS = "notifications"
    """Read ones by ``read_at``; unread ones by ``created_at`` after four windows."""
    WEBHOOK_DELIVERIES = "webhook_deliveries"
    """Delivered or failed deliveries, by their last attempt."""
    WEBHOOKS = "webhooks"
    """Deleted webhooks (their encrypted URL and secret), once no delivery of them is left."""
    SCHEDULES = "schedules"
    """Deleted schedules and their status, once none of their occurrences or runs is left."""
    TOKENS = "tokens"
    """Revoked tokens, by ``revoked_at``."""
    HOLDS = "holds"
    """Released holds, by ``released_at``."""
    AUDIT_ENTRIES = "audit_entries"
    """Audit entries, by ``at``, after the audit window (not the tenant's window)."""


SWEEP_ORDER: tuple[RecordKind, ...] = (
    RecordKind.RUNS,
    RecordKind.STARTS,
    RecordKind.IDEMPOTENCY_RECORDS,
    RecordKind.FINDINGS,
    RecordKind.NOTIFICATIONS,
    RecordKind.WEBHOOK_DELIVERIES,
    RecordKind.WEBHOOKS,
    RecordKind.SCHEDULES,
    RecordKind.TOKENS,
    RecordKind.HOLDS,
    RecordKind.AUDIT_ENTRIES,
)
"""The order of a sweep: what a later kind waits for is gone by then (keys of the starts
just removed, deleted schedules whose last occurrences just went). Occurrences are swept
with starts (one table, one pass)."""


@dataclass(frozen=True)
class RetentionWindow:
    """One tenant's cut-off instants: a record terminal before its cut-off may go."""

    tenant: str
    removable_before: datetime
    unread_before: datetime
    audit_before: datetime


def window_for(
    tenant: str, now: datetime, keep_seconds: float, audit_keep_seconds: float
) -> RetentionWindow:
    keep = timedelta(seconds=keep_seconds)
    return RetentionWindow(
        tenant=tenant,
        removable_before=now - keep,
        unread_before=now - UNREAD_NOTIFICATION_FACTOR * keep,
        audit_before=now - timedelta(seconds=audit_keep_seconds),
    )


class HoldKind(StrEnum):
    """What a hold covers while it is active (nothing it covers is removed)."""

    START = "start"
    """A one-off start, its run and the idempotency records naming either."""
    SCHEDULE = "schedule"
    """A schedule (deleted or not), its occurrences, their runs and follow-through, and
    the idempotency records naming any of them."""
    RUN = "run"
    """A run, its start or occurrence, and the idempotency records naming either."""
    TENANT = "tenant"
    """Every record of the tenant, of every kind."""


def needs_subject_id(kind: HoldKind) -> bool:
    """A tenant hold names its tenant; every other kind names the record it holds."""
    return kind is not HoldKind.TENANT


def may_release(placed_by_host: bool, *, by_host: bool) -> bool:
    """The host releases every hold; a tenant admin only the tenant's own."""
    return by_host or not placed_by_host
