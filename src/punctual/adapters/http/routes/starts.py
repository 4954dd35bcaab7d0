"""Scheduled starts (API.md, "Scheduled starts")."""

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
from punctual.adapters.http.schemas import CancelBody, CreateStartBody, RescheduleBody
from punctual.domain.permissions import Principal
from punctual.errors import not_found
from punctual.ports.store import Tx
from punctual.usecases import starts
from punctual.usecases.idempotency import Mutation, Outcome

router = APIRouter(
    prefix="/v1/tenants/{tenant}/scheduled-starts",
    tags=["scheduled starts"],
    dependencies=[Security(BEARER)],
)
EdgeDep = Annotated[Edge, Depends(get_edge)]
BodyDep = Annotated[bytes, Depends(raw_body)]


@router.post(
    "", status_code=201, openapi_extra=mutation_doc(CreateStartBody), description=IDEMPOTENCY_DOC
)
def create_start(tenant: str, request: Request, edge: EdgeDep, raw: BodyDep) -> Response:
    def build(principal: Principal) -> Mutation:
        def mutation(tx: Tx, now: Any) -> Outcome:
            body = parse_body(raw, CreateStartBody, host_owned_check=True)
            return starts.create(edge.services, principal, body.command())(tx, now)

        return mutation

    return run_mutation(edge, request, raw, tenant, build)


def _existing(tx: Tx, principal: Principal, start_id: str) -> None:
    if tx.starts.get(principal.tenant, start_id) is None:
        raise not_found("start", start_id)


@router.post(
    "/{start_id}/reschedule",
    openapi_extra=mutation_doc(RescheduleBody),
    description=IDEMPOTENCY_DOC,
)
def reschedule_start(
    tenant: str, start_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    def build(principal: Principal) -> Mutation:
        def mutation(tx: Tx, now: Any) -> Outcome:
            _existing(tx, principal, start_id)
            body = parse_body(raw, RescheduleBody)
            return starts.reschedule(edge.services, principal, body.command(start_id))(tx, now)

        return mutation

    return run_mutation(edge, request, raw, tenant, build)


@router.post(
    "/{start_id}/cancel", openapi_extra=mutation_doc(CancelBody), description=IDEMPOTENCY_DOC
)
def cancel_start(
    tenant: str, start_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    def build(principal: Principal) -> Mutation:
        def mutation(tx: Tx, now: Any) -> Outcome:
            _existing(tx, principal, start_id)
            body = parse_body(raw, CancelBody)
            return starts.cancel(edge.services, principal, body.command(start_id))(tx, now)

        return mutation

    return run_mutation(edge, request, raw, tenant, build)


@router.get("/{start_id}")
def get_start(tenant: str, start_id: str, request: Request, edge: EdgeDep) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    return starts.get(edge.services, principal, start_id)


@router.get("")
def list_starts(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    state: str | None = None,
    workflow: str | None = None,
    business_request_id: str | None = None,
    limit: str | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    query = starts.ListStarts(state, workflow, business_request_id, parse_limit(limit), cursor)
    return starts.list_starts(edge.services, principal, query)
