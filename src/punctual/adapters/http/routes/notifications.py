"""The caller's own notification feed (API.md "Notifications and webhooks")."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Security
from fastapi.responses import Response

from punctual.adapters.http.edge import Edge, mutate, parse_limit
from punctual.adapters.http.openapi import LIST, MUTATION, answers
from punctual.adapters.http.routes.common import (
    BEARER,
    IDEMPOTENCY_DOC,
    PageCursor,
    PageLimit,
    documented_as,
    get_edge,
    mutation_doc,
    raw_body,
)
from punctual.resources import Notification, NotificationPage
from punctual.usecases.outbound import feed

router = APIRouter(
    prefix="/v1/tenants/{tenant}", tags=["notifications"], dependencies=[Security(BEARER)]
)
EdgeDep = Annotated[Edge, Depends(get_edge)]
BodyDep = Annotated[bytes, Depends(raw_body)]
_Unread = Annotated[
    str | None,
    Query(
        description="`true`: only the notifications not yet read.",
        json_schema_extra=documented_as({"type": "boolean"}),
    ),
]


@router.get(
    "/notifications",
    response_model=None,
    responses=answers(200, NotificationPage, LIST),
    description="The caller's own notifications, newest first; `unread=true` lists only "
    "those not yet read.",
)
def list_notifications(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    unread: _Unread = None,
    limit: PageLimit = None,
    cursor: PageCursor = None,
) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    query = feed.ListNotifications(unread, parse_limit(limit), cursor)
    return feed.list_notifications(edge.services, principal, query)


@router.post(
    "/notifications/{notification_id}/read",
    response_model=None,
    responses=answers(
        200, Notification, MUTATION, mutation=True, description="The notification, read"
    ),
    openapi_extra=mutation_doc(),
    description="Sets `read_at` once (idempotent); another principal's notification is "
    "404. " + IDEMPOTENCY_DOC,
)
def mark_notification_read(
    tenant: str, notification_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    return mutate(
        edge,
        request,
        raw,
        tenant,
        lambda principal: feed.mark_read(edge.services, principal, notification_id),
    )
