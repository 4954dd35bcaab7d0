"""A tenant's holds and its audit log (API.md "Retention and holds"); admins only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Security
from fastapi.responses import Response

from punctual.adapters.http.edge import Edge, mutate, parse_body, parse_limit
from punctual.adapters.http.openapi import ADMIN, LIST, MUTATION, answers
from punctual.adapters.http.routes.common import (
    BEARER,
    IDEMPOTENCY_DOC,
    PageCursor,
    PageLimit,
    get_edge,
    mutation_doc,
    one_of,
    raw_body,
)
from punctual.adapters.http.schemas import PlaceHoldBody, documented_as
from punctual.resources import AuditPage, Hold, HoldPage
from punctual.usecases.kernel import audit
from punctual.usecases.tenancy import holds

router = APIRouter(prefix="/v1/tenants/{tenant}", dependencies=[Security(BEARER)])
EdgeDep = Annotated[Edge, Depends(get_edge)]
BodyDep = Annotated[bytes, Depends(raw_body)]

ActiveOnly = Annotated[
    str | None,
    Query(
        description="`true`: only holds not yet released; `false` or omitted: every hold.",
        json_schema_extra=documented_as(one_of(["true", "false"])),
    ),
]


@router.post(
    "/holds",
    tags=["holds"],
    status_code=201,
    response_model=None,
    responses=answers(201, Hold, MUTATION, ADMIN, mutation=True, description="The hold"),
    openapi_extra=mutation_doc(PlaceHoldBody),
    description="Admin. While the hold is active, retention removes nothing it covers. "
    "The subject must exist in the tenant; `subject_id` is required for every kind but "
    "`tenant`. " + IDEMPOTENCY_DOC,
)
def place_hold(tenant: str, request: Request, edge: EdgeDep, raw: BodyDep) -> Response:
    return mutate(
        edge,
        request,
        raw,
        tenant,
        lambda principal: holds.place(
            edge.services, principal, parse_body(raw, PlaceHoldBody).command()
        ),
    )


@router.get(
    "/holds",
    tags=["holds"],
    response_model=None,
    responses=answers(200, HoldPage, LIST, ADMIN),
    description="Admin. Newest first; released holds show `released_at` (they are kept one "
    "retention window after release).",
)
def list_holds(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    active: ActiveOnly = None,
    limit: PageLimit = None,
    cursor: PageCursor = None,
) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    query = holds.ListHolds(active=active, limit=parse_limit(limit), cursor=cursor)
    return holds.list_holds(edge.services, principal, query)


@router.post(
    "/holds/{hold_id}/release",
    tags=["holds"],
    response_model=None,
    responses=answers(
        200, Hold, MUTATION, ADMIN, mutation=True, description="The hold, with `released_at`"
    ),
    openapi_extra=mutation_doc(),
    description="Admin. Idempotent: a second release answers the first `released_at`. A "
    "hold the host placed (`placed_by_host`) is `403 forbidden`: only the host releases "
    "it. " + IDEMPOTENCY_DOC,
)
def release_hold(
    tenant: str, hold_id: str, request: Request, edge: EdgeDep, raw: BodyDep
) -> Response:
    return mutate(edge, request, raw, tenant, lambda p: holds.release(edge.services, p, hold_id))


@router.get(
    "/audit",
    tags=["audit"],
    response_model=None,
    responses=answers(200, AuditPage, LIST, ADMIN),
    description="Admin. One entry per decided mutation of the tenant, newest first; never "
    "a body or input. `subject_id` and `actor` filter by exact match.",
)
def list_audit_entries(
    tenant: str,
    request: Request,
    edge: EdgeDep,
    subject_id: Annotated[
        str | None, Query(description="Only entries about this resource id.")
    ] = None,
    actor: Annotated[str | None, Query(description="Only entries of this subject.")] = None,
    limit: PageLimit = None,
    cursor: PageCursor = None,
) -> dict[str, Any]:
    principal = edge.principal(request, tenant)
    query = audit.ListAudit(
        subject_id=subject_id, actor=actor, limit=parse_limit(limit), cursor=cursor
    )
    return audit.list_entries(edge.services, principal, query)
