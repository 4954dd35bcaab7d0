"""Notifications and webhook deliveries: the transactional outbox of CR-4.

Whatever decides an event (a regression, a follow-through deadline, an auto-disable, a
start that failed for good) calls ``notify`` inside its own transaction: the feed rows and
the outbox rows commit with the decision or not at all, and the deliverer sends them later
(at least once, the same ``event_id`` on every attempt).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from punctual.domain.ids import new_id
from punctual.domain.permissions import Role
from punctual.domain.schedules import Schedule
from punctual.ports.events import Event
from punctual.ports.records import NewDelivery, NewNotification, WebhookRecord
from punctual.ports.store import Tx
from punctual.usecases.kernel.context import Services

log = logging.getLogger("punctual.notify")

KINDS = ("regression", "schedule_auto_disabled", "finalize_timed_out", "start_failed")
"""The kinds a notification can have; webhooks also receive ``test`` events."""
TEST_KIND = "test"


@dataclass(frozen=True)
class NotificationEvent:
    tenant: str
    kind: str
    title: str
    text: str
    """One line a person can read: the webhook's ``text`` (Slack/Mattermost show it)."""
    schedule_id: str | None = None
    occurrence_id: str | None = None
    run_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def recipients(tx: Tx, tenant: str, owner: str | None) -> list[str]:
    """The owner while still a member, otherwise the tenant's admins (CR-4)."""
    if owner is not None and tx.identity.member_role(tenant, owner) is not None:
        return [owner]
    return tx.identity.subjects_with_role(tenant, Role.ADMIN)


def notify(
    services: Services, tx: Tx, event: NotificationEvent, owner: str | None, now: datetime
) -> str:
    """Record the event for its recipients' feeds and every subscribed webhook, in
    ``tx``; returns the event id. ``notification.created`` is emitted at once: should the
    caller's transaction roll back, a log line and a counter overstate by one, nothing
    is sent (the outbox rows went with the rollback)."""
    event_id = new_id("evt")
    people = recipients(tx, event.tenant, owner)
    # A feed row is the event as it is (its fields are named alike), once per recipient.
    told = {f.name: getattr(event, f.name) for f in fields(event)}
    rows = [
        NewNotification(id=new_id("ntf"), recipient=person, event_id=event_id, **told)
        for person in people
    ]
    tx.notifications.insert(rows, now)
    enqueue_deliveries(tx, tx.webhooks.subscribed(event.tenant, event.kind), event, event_id, now)
    services.events.emit(
        Event(
            "notification.created",
            event.tenant,
            event_id,
            {"kind": event.kind, "recipients": len(people), "schedule_id": event.schedule_id},
        )
    )
    return event_id


def notify_auto_disabled(
    services: Services, tx: Tx, schedule: Schedule, status: str, now: datetime
) -> str:
    """CR-3's auto-disable, told to the schedule's owner (the admins once it left)."""
    return notify(
        services,
        tx,
        NotificationEvent(
            tenant=schedule.tenant,
            kind="schedule_auto_disabled",
            title=f"{schedule.name} was disabled",
            text=f"Schedule {schedule.name} stopped firing. {status}",
            schedule_id=schedule.id,
            details={"schedule_name": schedule.name, "last_status": status},
        ),
        schedule.created_by,
        now,
    )


def enqueue_deliveries(
    tx: Tx,
    webhooks: Sequence[WebhookRecord],
    event: NotificationEvent,
    event_id: str,
    now: datetime,
) -> None:
    """One outbox row per webhook; the payload is fixed now, so every retry and every
    redelivery sends the same bytes' meaning under the same ``event_id``."""
    if not webhooks:
        return
    payload = delivery_payload(event, event_id)
    tx.webhooks.enqueue(
        [
            NewDelivery(
                id=new_id("dlv"),
                tenant=event.tenant,
                webhook_id=hook.id,
                event_id=event_id,
                kind=event.kind,
                payload=payload,
                schedule_id=event.schedule_id,
                occurrence_id=event.occurrence_id,
                run_id=event.run_id,
            )
            for hook in webhooks
        ],
        now,
    )


def delivery_payload(event: NotificationEvent, event_id: str) -> dict[str, Any]:
    """The body API.md fixes: ``text`` first (a valid Slack or Mattermost incoming-webhook
    message), then what a program needs."""
    return {
        "text": event.text,
        "event": event.kind,
        "event_id": event_id,
        "tenant": event.tenant,
        "data": {
            "title": event.title,
            "schedule_id": event.schedule_id,
            "occurrence_id": event.occurrence_id,
            "run_id": event.run_id,
            **event.details,
        },
    }
