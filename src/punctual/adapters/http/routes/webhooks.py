"""A tenant's webhooks and their deliveries (API.md "Notifications and webhooks"); admins only."""

from __future__ import annotations

from typing import Any

from fastapi.responses import Response

from punctual.adapters.http.edge import load_json
from punctual.adapters.http.openapi import ADMIN, IDEMPOTENCY_DOC, LIST, READ, answering, mutating
from punctual.adapters.http.routes.common import (
    CallDep,
    MutationCall,
    MutationDep,
    PageDep,
    tenant_router,
)
from punctual.adapters.http.schemas import CreateWebhookBody, PatchWebhookBody
from punctual.errors import PunctualError
from punctual.resources import DeliveryPage, Queued, Webhook, WebhookPage
from punctual.usecases.kernel import mutations
from punctual.usecases.outbound import webhooks

router = tenant_router("webhooks")
# Kinds and destinations a webhook may not have (API.md "Notifications and webhooks").
_SUBSCRIPTION_REFUSALS = ("webhook_url_not_allowed", "unknown_event_kind")


def _screening(call: MutationCall, tenant: str) -> webhooks.Screening:
    """Resolve the URL an admin sends before the transaction opens. Whatever is wrong
    with the request is answered later by the mutation, in the contract's order."""
    try:
        principal = call.principal(tenant)
        data = load_json(call.raw)
    except PunctualError:
        return webhooks.Screening()
    url = data.get("url") if isinstance(data, dict) else None
    return webhooks.screen(call.services, principal, [url])


@router.post(
    "/webhooks",
    **mutating(
        201,
        Webhook,
        ADMIN,
        _SUBSCRIPTION_REFUSALS,
        answer="The webhook, its URL cut after the host",
        body=CreateWebhookBody,
    ),
    description="Admin. The URL and the secret are stored encrypted; the secret is never "
    "returned. " + IDEMPOTENCY_DOC,
)
def create_webhook(tenant: str, call: MutationDep) -> Response:
    screening = _screening(call, tenant)

    return call.mutate(
        tenant,
        lambda principal: webhooks.create(
            call.services, principal, call.body(CreateWebhookBody).command(), screening
        ),
    )


@router.get(
    "/webhooks",
    **answering(200, WebhookPage, LIST, ADMIN),
    description="Admin. Newest first unless `order=oldest`; URLs are shown cut after their host.",
)
def list_webhooks(tenant: str, call: CallDep, page: PageDep) -> dict[str, Any]:
    principal = call.principal(tenant)
    return webhooks.list_webhooks(call.services, principal, page.size(), page.cursor, page.order)


@router.get("/webhooks/{webhook_id}", **answering(200, Webhook, READ, ADMIN), description="Admin.")
def get_webhook(tenant: str, webhook_id: str, call: CallDep) -> dict[str, Any]:
    return webhooks.get(call.services, call.principal(tenant), webhook_id)


@router.patch(
    "/webhooks/{webhook_id}",
    **mutating(
        200, Webhook, ADMIN, _SUBSCRIPTION_REFUSALS, answer="The webhook", body=PatchWebhookBody
    ),
    description="Admin. Only the fields sent change; a new `secret` rotates it and "
    '`"secret": null` removes it. ' + IDEMPOTENCY_DOC,
)
def patch_webhook(tenant: str, webhook_id: str, call: MutationDep) -> Response:
    screening = _screening(call, tenant)

    return call.mutate(
        tenant,
        lambda principal: webhooks.update(
            call.services,
            principal,
            call.body(PatchWebhookBody).command(webhook_id),
            screening,
        ),
        mutations.webhook(webhook_id),
    )


@router.delete(
    "/webhooks/{webhook_id}",
    **mutating(204, None, ADMIN, answer="Deleted"),
    description="Admin. Its pending deliveries end `failed`. " + IDEMPOTENCY_DOC,
)
def delete_webhook(tenant: str, webhook_id: str, call: MutationDep) -> Response:
    return call.mutate(tenant, lambda p: webhooks.delete(call.services, p, webhook_id))


@router.post(
    "/webhooks/{webhook_id}/test",
    **mutating(202, Queued, ADMIN, answer="Queued"),
    description="Admin. Queues a `test` event to this webhook only. " + IDEMPOTENCY_DOC,
)
def test_webhook(tenant: str, webhook_id: str, call: MutationDep) -> Response:
    return call.mutate(tenant, lambda p: webhooks.send_test(call.services, p, webhook_id))


@router.get(
    "/webhooks/{webhook_id}/deliveries",
    **answering(200, DeliveryPage, LIST, ADMIN),
    description="Admin. Newest first unless `order=oldest`.",
)
def list_deliveries(tenant: str, webhook_id: str, call: CallDep, page: PageDep) -> dict[str, Any]:
    principal = call.principal(tenant)
    return webhooks.list_deliveries(
        call.services, principal, webhook_id, page.size(), page.cursor, page.order
    )


@router.post(
    "/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver",
    **mutating(202, Queued, ADMIN, answer="Queued"),
    description="Admin. A new delivery of the same event, with the same `event_id`. "
    + IDEMPOTENCY_DOC,
)
def redeliver(tenant: str, webhook_id: str, delivery_id: str, call: MutationDep) -> Response:
    return call.mutate(
        tenant, lambda p: webhooks.redeliver(call.services, p, webhook_id, delivery_id)
    )
