"""Notifications, webhooks and deliveries as the API answers them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from punctual.resources.base import LastError, Resource

# --------------------------------------------------------------------------- notifications


class Notification(Resource):
    id: str
    kind: str
    """``regression``, ``schedule_auto_disabled``, ``finalize_timed_out``, ``start_failed``."""
    schedule_id: str | None
    occurrence_id: str | None
    run_id: str | None
    title: str
    text: str
    details: dict[str, Any]
    created_at: datetime
    read_at: datetime | None


class NotificationPage(Resource):
    items: list[Notification]
    next_cursor: str | None


class Webhook(Resource):
    id: str
    url: str
    """Cut after the host: the path and query (often a credential) are never shown."""
    events: list[str]
    """Empty: every kind."""
    created_at: datetime


class WebhookPage(Resource):
    items: list[Webhook]
    next_cursor: str | None


class Delivery(Resource):
    id: str
    event_id: str
    """The same on every attempt and every redelivery of one event."""
    kind: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status_code: int | None
    last_error: LastError | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None


class DeliveryPage(Resource):
    items: list[Delivery]
    next_cursor: str | None


class Queued(Resource):
    """``202`` of a webhook test or redelivery: the event is in the outbox."""

    status: Literal["queued"]
    event_id: str
    delivery_id: str | None
