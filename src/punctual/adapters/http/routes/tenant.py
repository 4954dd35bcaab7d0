"""Definitions, members, tokens and health of a tenant."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Security
from fastapi.responses import Response

from punctual.adapters.http.edge import Edge, mutate, parse_body, parse_limit
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
from punctual.adapters.http.schemas import MemberBody, TokenBody
from punctual.domain.permissions import Principal
from punctual.resources import DefinitionPage, Finding, Health, IssuedToken, Member, TokenPage
from punctual.usecases.kernel.idempotency import Mutation
from punctual.usecases.running import definitions
from punctual.usecases.tenancy import health, identity

router = APIRouter(prefix="/v1/tenants/{tenant}", tags=["tenant"], dependencies=[Security(BEARER)])
EdgeDep = Annotated[Edge, Depends(get_edge)]
BodyDep = Annotated[bytes, Depends(raw_body)]


@router.get(
    "/definitions",
    response_model=None,
    responses=answers(200, DefinitionPage, READ),
    description="The host's workflow definitions (host-global), all in one page.",
)
def list_definitions(tenant: str, request: Request, edge: EdgeDep) -> dict[str, Any]:
    edge.principal(request, tenant)
    return {"items": definitions.list_definitions(edge.services), "next_cursor": None}


@router.post(
    "/members",
    status_code=201,
    response_model=None,
    responses=answers(201, Member, MUTATION, ADMIN, mutation=True, description="The member"),
    openapi_extra=mutation_doc(MemberBody),
    description="Admin. Adds the member, or changes its role. " + IDEMPOTENCY_DOC,
)
def add_member(tenant: str, request: Request, edge: EdgeDep, raw: BodyDep) -> Response:
    def decide(principal: Principal) -> Mutation:
        body = parse_body(raw, MemberBody)
        return identity.add_member(edge.services, principal, body.subject, body.role)

    return mutate(edge, request, raw, tenant, decide)


@router.delete(
    "/members/{subject}",
    status_code=204,
    response_model=None,
    responses=answers(204, None, MUTATION, ADMIN, mutation=True, description="Removed"),
    openapi_extra=mutation_doc(),
    description="Admin. Revokes the member's tokens and auto-disables the schedules it "
    "created. " + IDEMPOTENCY_DOC,
)
def remove_member(
    tenant: str, subject: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    return mutate(
        edge, request, raw, tenant, lambda p: identity.remove_member(edge.services, p, subject)
    )


@router.post(
    "/tokens",
    status_code=201,
    response_model=None,
    responses=answers(
        201,
        IssuedToken,
        MUTATION,
        ADMIN,
        mutation=True,
        description="The token; its secret is shown in this answer only (a replay shows null)",
    ),
    openapi_extra=mutation_doc(TokenBody),
    description="Admin. A token for a member of the tenant. " + IDEMPOTENCY_DOC,
)
def create_token(tenant: str, request: Request, edge: EdgeDep, raw: BodyDep) -> Response:
    def decide(principal: Principal) -> Mutation:
        body = parse_body(raw, TokenBody)
        return identity.create_token(edge.services, principal, body.subject, body.expires_at)

    return mutate(edge, request, raw, tenant, decide)


@router.get(
    "/tokens",
    response_model=None,
    responses=answers(200, TokenPage, LIST, ADMIN),
    description="Admin. The tenant's tokens, without their secrets.",
)
def list_tokens(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    limit: PageLimit = None,
    cursor: PageCursor = None,
) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    return identity.list_tokens(edge.services, principal, parse_limit(limit), cursor)


@router.delete(
    "/tokens/{token_id}",
    status_code=204,
    response_model=None,
    responses=answers(204, None, MUTATION, ADMIN, mutation=True, description="Revoked"),
    openapi_extra=mutation_doc(),
    description="Admin. " + IDEMPOTENCY_DOC,
)
def revoke_token(
    tenant: str, token_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    return mutate(
        edge, request, raw, tenant, lambda p: identity.revoke_token(edge.services, p, token_id)
    )


@router.get(
    "/health",
    response_model=None,
    responses=answers(200, Health, READ),
    description="What is failed, stuck or down in this tenant (DP-4).",
)
def tenant_health(tenant: str, request: Request, edge: EdgeDep) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    return health.report(edge.services, principal)


@router.post(
    "/health/findings/{finding_id}/acknowledge",
    response_model=None,
    responses=answers(
        200, Finding, MUTATION, ADMIN, mutation=True, description="The acknowledged finding"
    ),
    openapi_extra=mutation_doc(),
    description="Any member or admin. An acknowledged failure no longer keeps the report "
    "`degraded`. " + IDEMPOTENCY_DOC,
)
def acknowledge_finding(
    tenant: str, finding_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    return mutate(
        edge, request, raw, tenant, lambda p: health.acknowledge(edge.services, p, finding_id)
    )
