"""Runs (API.md, "Runs")."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Security
from fastapi.responses import Response

from punctual.adapters.http.edge import Edge, parse_limit, run_mutation
from punctual.adapters.http.routes.common import (
    BEARER,
    IDEMPOTENCY_DOC,
    get_edge,
    mutation_doc,
    raw_body,
)
from punctual.domain.permissions import Principal
from punctual.usecases import runs
from punctual.usecases.idempotency import Mutation

router = APIRouter(
    prefix="/v1/tenants/{tenant}/runs", tags=["runs"], dependencies=[Security(BEARER)]
)
EdgeDep = Annotated[Edge, Depends(get_edge)]
BodyDep = Annotated[bytes, Depends(raw_body)]


@router.get("/{run_id}")
def get_run(tenant: str, run_id: str, request: Request, edge: EdgeDep) -> dict[str, Any]:
    return runs.get(edge.services, edge.principal(request, tenant), run_id)


@router.get("")
def list_runs(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    workflow: str | None = None,
    state: str | None = None,
    origin_id: str | None = None,
    limit: str | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    query = runs.ListRuns(workflow, state, origin_id, parse_limit(limit), cursor)
    return runs.list_runs(edge.services, principal, query)


@router.post(
    "/{run_id}/cancel",
    openapi_extra=mutation_doc(),
    description="Cooperative cancel. " + IDEMPOTENCY_DOC,
)
def cancel_run(tenant: str, run_id: str, request: Request, edge: EdgeDep, raw: BodyDep) -> Response:
    def build(principal: Principal) -> Mutation:
        return runs.cancel(edge.services, principal, run_id)

    return run_mutation(edge, request, raw, tenant, build)


@router.post(
    "/{run_id}/terminate",
    openapi_extra=mutation_doc(),
    description="Immediate termination. " + IDEMPOTENCY_DOC,
)
def terminate_run(
    tenant: str, run_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    def build(principal: Principal) -> Mutation:
        return runs.terminate(edge.services, principal, run_id)

    return run_mutation(edge, request, raw, tenant, build)
