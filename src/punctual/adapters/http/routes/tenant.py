"""Definitions, members, tokens and health of a tenant."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Security
from fastapi.responses import Response

from punctual.adapters.http.edge import Edge, parse_body, parse_limit, run_mutation
from punctual.adapters.http.routes.common import (
    BEARER,
    IDEMPOTENCY_DOC,
    get_edge,
    mutation_doc,
    raw_body,
)
from punctual.adapters.http.schemas import MemberBody, TokenBody
from punctual.domain.permissions import Principal
from punctual.ports.store import Tx
from punctual.usecases import definitions, health, identity
from punctual.usecases.idempotency import Mutation, Outcome

router = APIRouter(prefix="/v1/tenants/{tenant}", tags=["tenant"], dependencies=[Security(BEARER)])
EdgeDep = Annotated[Edge, Depends(get_edge)]
BodyDep = Annotated[bytes, Depends(raw_body)]


@router.get("/definitions")
def list_definitions(tenant: str, request: Request, edge: EdgeDep) -> dict[str, Any]:
    edge.principal(request, tenant)
    return {"items": definitions.list_definitions(edge.services), "next_cursor": None}


@router.post(
    "/members", status_code=201, openapi_extra=mutation_doc(MemberBody), description=IDEMPOTENCY_DOC
)
def add_member(tenant: str, request: Request, edge: EdgeDep, raw: BodyDep) -> Response:
    def build(principal: Principal) -> Mutation:
        def mutation(tx: Tx, now: Any) -> Outcome:
            body = parse_body(raw, MemberBody)
            return identity.add_member(edge.services, principal, body.subject, body.role)(tx, now)

        return mutation

    return run_mutation(edge, request, raw, tenant, build)


@router.delete(
    "/members/{subject}",
    status_code=204,
    openapi_extra=mutation_doc(),
    description=IDEMPOTENCY_DOC,
)
def remove_member(
    tenant: str, subject: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    def build(principal: Principal) -> Mutation:
        return identity.remove_member(edge.services, principal, subject)

    return run_mutation(edge, request, raw, tenant, build)


@router.post(
    "/tokens", status_code=201, openapi_extra=mutation_doc(TokenBody), description=IDEMPOTENCY_DOC
)
def create_token(tenant: str, request: Request, edge: EdgeDep, raw: BodyDep) -> Response:
    def build(principal: Principal) -> Mutation:
        def mutation(tx: Tx, now: Any) -> Outcome:
            body = parse_body(raw, TokenBody)
            return identity.create_token(edge.services, principal, body.subject, body.expires_at)(
                tx, now
            )

        return mutation

    return run_mutation(edge, request, raw, tenant, build)


@router.get("/tokens")
def list_tokens(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    limit: str | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    return identity.list_tokens(edge.services, principal, parse_limit(limit), cursor)


@router.delete(
    "/tokens/{token_id}",
    status_code=204,
    openapi_extra=mutation_doc(),
    description=IDEMPOTENCY_DOC,
)
def revoke_token(
    tenant: str, token_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    def build(principal: Principal) -> Mutation:
        return identity.revoke_token(edge.services, principal, token_id)

    return run_mutation(edge, request, raw, tenant, build)


@router.get("/health")
def tenant_health(tenant: str, request: Request, edge: EdgeDep) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    return health.report(edge.services, principal)


@router.post(
    "/health/findings/{finding_id}/acknowledge",
    openapi_extra=mutation_doc(),
    description=IDEMPOTENCY_DOC,
)
def acknowledge_finding(
    tenant: str, finding_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    def build(principal: Principal) -> Mutation:
        return health.acknowledge(edge.services, principal, finding_id)

    return run_mutation(edge, request, raw, tenant, build)
