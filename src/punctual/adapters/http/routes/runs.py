"""Runs (API.md, "Runs")."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Security
from fastapi.responses import Response

from punctual.adapters.http.edge import Edge, mutate, parse_limit
from punctual.adapters.http.openapi import ADMIN, LIST, MUTATION, READ, answers
from punctual.adapters.http.routes.common import (
    BEARER,
    IDEMPOTENCY_DOC,
    PageCursor,
    PageLimit,
    documented_as,
    get_edge,
    mutation_doc,
    one_of,
    raw_body,
)
from punctual.domain.runs import RunState
from punctual.resources import Run, RunPage
from punctual.usecases.running import runs

router = APIRouter(
    prefix="/v1/tenants/{tenant}/runs", tags=["runs"], dependencies=[Security(BEARER)]
)
EdgeDep = Annotated[Edge, Depends(get_edge)]
BodyDep = Annotated[bytes, Depends(raw_body)]
_StateFilter = Annotated[
    str | None, Query(json_schema_extra=documented_as(one_of([s.value for s in RunState])))
]
_OriginFilter = Annotated[
    str | None, Query(description="The id of the start or occurrence that started the run.")
]


@router.get("/{run_id}", response_model=None, responses=answers(200, Run, READ))
def get_run(tenant: str, run_id: str, request: Request, edge: EdgeDep) -> dict[str, Any]:
    return runs.get(edge.services, edge.principal(request, tenant), run_id)


@router.get("", response_model=None, responses=answers(200, RunPage, LIST))
def list_runs(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    workflow: str | None = None,
    state: _StateFilter = None,
    origin_id: _OriginFilter = None,
    limit: PageLimit = None,
    cursor: PageCursor = None,
) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    query = runs.ListRuns(workflow, state, origin_id, parse_limit(limit), cursor)
    return runs.list_runs(edge.services, principal, query)


@router.post(
    "/{run_id}/cancel",
    response_model=None,
    responses=answers(200, Run, MUTATION, ADMIN, mutation=True, description="The run"),
    openapi_extra=mutation_doc(),
    description="Cooperative cancel: the workflow sees `cancel_requested` and may clean up. "
    "Idempotent, also once the run has ended; owner or admin. " + IDEMPOTENCY_DOC,
)
def cancel_run(tenant: str, run_id: str, request: Request, edge: EdgeDep, raw: BodyDep) -> Response:
    return mutate(edge, request, raw, tenant, lambda p: runs.cancel(edge.services, p, run_id))


@router.post(
    "/{run_id}/terminate",
    response_model=None,
    responses=answers(200, Run, MUTATION, ADMIN, mutation=True, description="The run"),
    openapi_extra=mutation_doc(),
    description="Immediate: the run is recorded `terminated` at once and its body stopped. "
    "Idempotent; owner or admin. " + IDEMPOTENCY_DOC,
)
def terminate_run(
    tenant: str, run_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    return mutate(edge, request, raw, tenant, lambda p: runs.terminate(edge.services, p, run_id))
