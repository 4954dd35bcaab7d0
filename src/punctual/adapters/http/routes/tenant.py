"""Definitions, members, tokens and health of a tenant."""

from __future__ import annotations

from typing import Any

from fastapi.responses import Response

from punctual.adapters.http.openapi import ADMIN, IDEMPOTENCY_DOC, LIST, READ, answering, mutating
from punctual.adapters.http.routes.common import CallDep, MutationDep, PageDep, tenant_router
from punctual.adapters.http.schemas import MemberBody, TokenBody
from punctual.domain.permissions import Principal
from punctual.resources import (
    DefinitionPage,
    Finding,
    Health,
    IssuedToken,
    Member,
    MemberPage,
    TokenPage,
)
from punctual.usecases.kernel.idempotency import Mutation
from punctual.usecases.running import definitions
from punctual.usecases.tenancy import health, identity

router = tenant_router("tenant")


@router.get(
    "/definitions",
    **answering(200, DefinitionPage, READ),
    description="The host's workflow definitions (host-global), all in one page.",
)
def list_definitions(tenant: str, call: CallDep) -> dict[str, Any]:
    call.principal(tenant)
    return {"items": definitions.list_definitions(call.services), "next_cursor": None}


@router.post(
    "/members",
    **mutating(201, Member, ADMIN, answer="The member", body=MemberBody),
    description="Admin. Adds the member, or changes its role. " + IDEMPOTENCY_DOC,
)
def add_member(tenant: str, call: MutationDep) -> Response:
    def decide(principal: Principal) -> Mutation:
        body = call.body(MemberBody)
        return identity.add_member(call.services, principal, body.subject, body.role)

    return call.mutate(tenant, decide)


@router.get(
    "/members",
    **answering(200, MemberPage, LIST, ADMIN),
    description="Admin. The tenant's members and their roles, the latest to join first "
    "unless `order=oldest` (a role change keeps a member's place).",
)
def list_members(tenant: str, call: CallDep, page: PageDep) -> dict[str, Any]:
    principal = call.principal(tenant)
    return identity.list_members(call.services, principal, page.size(), page.cursor, page.order)


@router.delete(
    "/members/{subject}",
    **mutating(204, None, ADMIN, answer="Removed"),
    description="Admin. Revokes the member's tokens and auto-disables the schedules it "
    "created. " + IDEMPOTENCY_DOC,
)
def remove_member(tenant: str, subject: str, call: MutationDep) -> Response:
    return call.mutate(tenant, lambda p: identity.remove_member(call.services, p, subject))


@router.post(
    "/tokens",
    **mutating(
        201,
        IssuedToken,
        ADMIN,
        answer="The token; its secret is shown in this answer only (a replay shows null)",
        body=TokenBody,
    ),
    description="Admin. A token for a member of the tenant. " + IDEMPOTENCY_DOC,
)
def create_token(tenant: str, call: MutationDep) -> Response:
    def decide(principal: Principal) -> Mutation:
        body = call.body(TokenBody)
        return identity.create_token(call.services, principal, body.subject, body.expires_at)

    return call.mutate(tenant, decide)


@router.get(
    "/tokens",
    **answering(200, TokenPage, LIST, ADMIN),
    description="Admin. The tenant's tokens, without their secrets, newest first unless "
    "`order=oldest`.",
)
def list_tokens(tenant: str, call: CallDep, page: PageDep) -> dict[str, Any]:
    principal = call.principal(tenant)
    return identity.list_tokens(call.services, principal, page.size(), page.cursor, page.order)


@router.delete(
    "/tokens/{token_id}",
    **mutating(204, None, ADMIN, answer="Revoked"),
    description="Admin. " + IDEMPOTENCY_DOC,
)
def revoke_token(tenant: str, token_id: str, call: MutationDep) -> Response:
    return call.mutate(tenant, lambda p: identity.revoke_token(call.services, p, token_id))


@router.get(
    "/health",
    **answering(200, Health, READ),
    description="What is failed, stuck or down in this tenant (DP-4).",
)
def tenant_health(tenant: str, call: CallDep) -> dict[str, Any]:
    principal = call.principal(tenant)
    return health.report(call.services, principal)


@router.post(
    "/health/findings/{finding_id}/acknowledge",
    **mutating(200, Finding, ADMIN, answer="The acknowledged finding"),
    description="Any member or admin. An acknowledged failure no longer keeps the report "
    "`degraded`. " + IDEMPOTENCY_DOC,
)
def acknowledge_finding(tenant: str, finding_id: str, call: MutationDep) -> Response:
    return call.mutate(tenant, lambda p: health.acknowledge(call.services, p, finding_id))
