"""A schedule's history for the missed-run audit (SPEC RS-10): what changed when it fires
and whether it runs, written in the transaction of the change itself.

Every path that creates, edits, pauses, resumes, deletes or auto-disables a schedule tells
``created`` or ``changed`` here, with who did it; the audit reads the history back.
"""

from __future__ import annotations

from datetime import datetime

from punctual.domain.schedule_audit import EventKind, ScheduleEvent
from punctual.domain.schedules import Schedule
from punctual.ports.store import Tx

PUNCTUAL = "punctual"
"""The actor of punctual's own decisions (auto-disable)."""


def created(tx: Tx, schedule: Schedule, by: str) -> None:
    """Its beginning, and its pause when it was made paused (or paused until a time)."""
    at = schedule.cursor
    events = [ScheduleEvent(EventKind.CREATED, at, by, timing=schedule.timing)]
    if not schedule.enabled:
        events.append(ScheduleEvent(EventKind.PAUSED, at, by))
    elif schedule.paused_at(at):
        events.append(ScheduleEvent(EventKind.PAUSED, at, by, until=schedule.pause_until))
    for event in events:
        tx.schedules.record_event(schedule.tenant, schedule.id, event)


def changed(tx: Tx, before: Schedule, after: Schedule, now: datetime, by: str) -> None:
    """The events between two states of one schedule: a new timing (from the cursor on,
    where generation continues), a pause or resume (a timed pause with its end), a
    deletion."""
    events: list[ScheduleEvent] = []
    if after.timing != before.timing:
        events.append(
            ScheduleEvent(
                EventKind.TIMING, after.cursor, by, timing=after.timing, previous=before.timing
            )
        )
    if after.deleted_at is not None and before.deleted_at is None:
        events.append(ScheduleEvent(EventKind.DELETED, now, by))
    elif before.enabled != after.enabled:
        kind = EventKind.RESUMED if after.enabled else EventKind.PAUSED
        events.append(ScheduleEvent(kind, now, by))
    elif after.pause_until != before.pause_until:
        if after.paused_at(now):
            events.append(ScheduleEvent(EventKind.PAUSED, now, by, until=after.pause_until))
        elif before.paused_at(now):
            events.append(ScheduleEvent(EventKind.RESUMED, now, by))
    for event in events:
        tx.schedules.record_event(after.tenant, after.id, event)


def discarded(tx: Tx, schedule: Schedule, now: datetime) -> None:
    """Punctual removed the record of a create that never answered (CR-6): a deletion."""
    tx.schedules.record_event(
        schedule.tenant, schedule.id, ScheduleEvent(EventKind.DELETED, now, PUNCTUAL)
    )


def auto_disabled(tx: Tx, schedule: Schedule, now: datetime) -> None:
    """Punctual paused it (CR-3): a pause like a member's, by punctual."""
    tx.schedules.record_event(
        schedule.tenant, schedule.id, ScheduleEvent(EventKind.PAUSED, now, PUNCTUAL)
    )
