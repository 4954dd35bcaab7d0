"""A tenant's webhooks and their deliveries (API.md "Notifications and webhooks"); admins only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Security
from fastapi.responses import Response

from punctual.adapters.http.edge import Edge, load_json, mutate, parse_body, parse_limit
from punctual.adapters.http.openapi import ADMIN, LIST, MUTATION, READ, answers
from punctual.adapters.http.routes.common import (
    BEARER,
    IDEMPOTENCY_DOC,
    PageCursor,
    PageLimit,
    get_edge,
    mutation_doc,
    raw_body,
)
from punctual.adapters.http.schemas import CreateWebhookBody, PatchWebhookBody
from punctual.errors import PunctualError
from punctual.resources import DeliveryPage, Queued, Webhook, WebhookPage
from punctual.usecases.kernel import mutations
from punctual.usecases.outbound import webhooks

router = APIRouter(
    prefix="/v1/tenants/{tenant}", tags=["webhooks"], dependencies=[Security(BEARER)]
)
EdgeDep = Annotated[Edge, Depends(get_edge)]
BodyDep = Annotated[bytes, Depends(raw_body)]
# Kinds and destinations a webhook may not have (API.md "Notifications and webhooks").
_SUBSCRIPTION_REFUSALS = ("webhook_url_not_allowed", "unknown_event_kind")


def _screening(edge: Edge, request: Request, tenant: str, raw: bytes) -> webhooks.Screening:
    """Resolve the URL an admin sends before the transaction opens. Whatever is wrong
    with the request is answered later by the mutation, in the contract's order."""
    try:
        principal = edge.principal(request, tenant)
        data = load_json(raw)
    except PunctualError:
        return webhooks.Screening()
    url = data.get("url") if isinstance(data, dict) else None
    return webhooks.screen(edge.services, principal, [url])


@router.post(
    "/webhooks",
    status_code=201,
    response_model=None,
    responses=answers(
        201,
        Webhook,
        MUTATION,
        ADMIN,
        _SUBSCRIPTION_REFUSALS,
        mutation=True,
        description="The webhook, its URL cut after the host",
    ),
    openapi_extra=mutation_doc(CreateWebhookBody),
    description="Admin. The URL and the secret are stored encrypted; the secret is never "
    "returned. " + IDEMPOTENCY_DOC,
)
def create_webhook(tenant: str, request: Request, edge: EdgeDep, raw: BodyDep) -> Response:
    screening = _screening(edge, request, tenant, raw)

    return mutate(
        edge,
        request,
        raw,
        tenant,
        lambda principal: webhooks.create(
            edge.services, principal, parse_body(raw, CreateWebhookBody).command(), screening
        ),
    )


@router.get(
    "/webhooks",
    response_model=None,
    responses=answers(200, WebhookPage, LIST, ADMIN),
    description="Admin. URLs are shown cut after their host.",
)
def list_webhooks(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    limit: PageLimit = None,
    cursor: PageCursor = None,
) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    return webhooks.list_webhooks(edge.services, principal, parse_limit(limit), cursor)


@router.get(
    "/webhooks/{webhook_id}",
    response_model=None,
    responses=answers(200, Webhook, READ, ADMIN),
    description="Admin.",
)
def get_webhook(tenant: str, webhook_id: str, request: Request, edge: EdgeDep) -> dict[str, Any]:
    return webhooks.get(edge.services, edge.principal(request, tenant), webhook_id)


@router.patch(
    "/webhooks/{webhook_id}",
    response_model=None,
    responses=answers(
        200,
        Webhook,
        MUTATION,
        ADMIN,
        _SUBSCRIPTION_REFUSALS,
        mutation=True,
        description="The webhook",
    ),
    openapi_extra=mutation_doc(PatchWebhookBody),
    description="Admin. Only the fields sent change; a new `secret` rotates it and "
    '`"secret": null` removes it. ' + IDEMPOTENCY_DOC,
)
def patch_webhook(
    tenant: str, webhook_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    screening = _screening(edge, request, tenant, raw)

    return mutate(
        edge,
        request,
        raw,
        tenant,
        lambda principal: webhooks.update(
            edge.services,
            principal,
            parse_body(raw, PatchWebhookBody).command(webhook_id),
            screening,
        ),
        mutations.webhook(webhook_id),
    )


@router.delete(
    "/webhooks/{webhook_id}",
    status_code=204,
    response_model=None,
    responses=answers(204, None, MUTATION, ADMIN, mutation=True, description="Deleted"),
    openapi_extra=mutation_doc(),
    description="Admin. Its pending deliveries end `failed`. " + IDEMPOTENCY_DOC,
)
def delete_webhook(
    tenant: str, webhook_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    return mutate(
        edge, request, raw, tenant, lambda p: webhooks.delete(edge.services, p, webhook_id)
    )


@router.post(
    "/webhooks/{webhook_id}/test",
    status_code=202,
    response_model=None,
    responses=answers(202, Queued, MUTATION, ADMIN, mutation=True, description="Queued"),
    openapi_extra=mutation_doc(),
    description="Admin. Queues a `test` event to this webhook only. " + IDEMPOTENCY_DOC,
)
def test_webhook(
    tenant: str, webhook_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    return mutate(
        edge, request, raw, tenant, lambda p: webhooks.send_test(edge.services, p, webhook_id)
    )


@router.get(
    "/webhooks/{webhook_id}/deliveries",
    response_model=None,
    responses=answers(200, DeliveryPage, LIST, ADMIN),
    description="Admin. Newest first.",
)
def list_deliveries(
    tenant: str,
    webhook_id: str,
    request: Request,
    edge: EdgeDep,
    limit: PageLimit = None,
    cursor: PageCursor = None,
) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    return webhooks.list_deliveries(
        edge.services, principal, webhook_id, parse_limit(limit), cursor
    )


@router.post(
    "/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    response_model=None,
    responses=answers(202, Queued, MUTATION, ADMIN, mutation=True, description="Queued"),
    openapi_extra=mutation_doc(),
    description="Admin. A new delivery of the same event, with the same `event_id`. "
    + IDEMPOTENCY_DOC,
)
def redeliver(
    tenant: str,
    webhook_id: str,
    delivery_id: str,
    request: Request,
    edge: EdgeDep,
    raw: BodyDep,
) -> Response:
    return mutate(
        edge,
        request,
        raw,
        tenant,
        lambda p: webhooks.redeliver(edge.services, p, webhook_id, delivery_id),
    )
