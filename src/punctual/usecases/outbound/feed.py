"""A principal's own notification feed: list it and mark notifications read (CR-4).

The feed is personal: every query is scoped to (tenant, caller), so another principal's
notification reads as absent (``404 not_found``), never as forbidden. Any role may read
and mark its own feed; ``usecases/outbound/outbox.py`` is what writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from punctual.domain.permissions import Principal
from punctual.errors import not_found
from punctual.ports.records import Notification, Order
from punctual.ports.store import Tx
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import Answer, Mutation, Outcome
from punctual.usecases.kernel.paging import check_choice, page, seek
from punctual.usecases.kernel.projections import record_view


@dataclass(frozen=True)
class ListNotifications:
    unread: str | None = None
    """``"true"`` lists only unread notifications; ``"false"`` or absent lists all."""
    limit: int = 50
    cursor: str | None = None
    order: str | None = None
    """``newest`` (the default) or ``oldest``; absent with a cursor, the cursor's order."""


def notification_view(note: Notification) -> dict[str, Any]:
    return record_view(note, hidden=("tenant", "recipient", "event_id", "seq"))


def list_notifications(
    services: Services, principal: Principal, query: ListNotifications
) -> dict[str, Any]:
    """Newest first unless ``order`` is ``oldest``; the cursor is the last item's position,
    so a page never repeats or skips an item when newer ones arrive meanwhile."""
    at = seek(query.limit, query.cursor, query.order, legacy=Order.NEWEST)
    check_choice("unread", query.unread, ["true", "false"])
    with services.store.transaction(readonly=True) as tx:
        rows = tx.notifications.find(
            principal.tenant,
            principal.subject,
            unread_only=query.unread == "true",
            at=at,
        )
    return page([(note.seq, note) for note in rows], at, notification_view)


def mark_read(services: Services, principal: Principal, notification_id: str) -> Mutation:
    """Idempotent: a second call answers the same ``read_at`` as the first."""
    del services

    def mutation(tx: Tx, now: datetime) -> Outcome:
        note = tx.notifications.mark_read(principal.tenant, principal.subject, notification_id, now)
        if note is None:
            raise not_found("notification", notification_id)
        return Outcome(Answer.DONE, notification_view(note), resource_id=note.id)

    return mutation
