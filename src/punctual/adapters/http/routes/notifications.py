"""The caller's own notification feed (API.md "Notifications and webhooks")."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi.responses import Response

from punctual.adapters.http.openapi import IDEMPOTENCY_DOC, LIST, answering, mutating
from punctual.adapters.http.routes.common import (
    CallDep,
    MutationDep,
    PageDep,
    documented_query,
    tenant_router,
)
from punctual.resources import Notification, NotificationPage
from punctual.usecases.outbound import feed

router = tenant_router("notifications")
_Unread = Annotated[
    str | None,
    documented_query({"type": "boolean"}, "`true`: only the notifications not yet read."),
]


@router.get(
    "/notifications",
    **answering(200, NotificationPage, LIST),
    description="The caller's own notifications, newest first unless `order=oldest`; "
    "`unread=true` lists only those not yet read.",
)
def list_notifications(
    tenant: str, call: CallDep, page: PageDep, unread: _Unread = None
) -> dict[str, Any]:
    principal = call.principal(tenant)
    query = feed.ListNotifications(unread, page.size(), page.cursor, page.order)
    return feed.list_notifications(call.services, principal, query)


@router.post(
    "/notifications/{notification_id}/read",
    **mutating(200, Notification, answer="The notification, read"),
    description="Sets `read_at` once (idempotent); another principal's notification is "
    "404. " + IDEMPOTENCY_DOC,
)
def mark_notification_read(tenant: str, notification_id: str, call: MutationDep) -> Response:
    return call.mutate(
        tenant, lambda principal: feed.mark_read(call.services, principal, notification_id)
    )
