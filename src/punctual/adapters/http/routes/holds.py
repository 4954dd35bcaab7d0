"""A tenant's holds and its audit log (API.md "Retention and holds"); admins only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query
from fastapi.responses import Response

from punctual.adapters.http.openapi import ADMIN, IDEMPOTENCY_DOC, LIST, answering, mutating
from punctual.adapters.http.routes.common import (
    CallDep,
    MutationDep,
    PageDep,
    choice_query,
    tenant_router,
)
from punctual.adapters.http.schemas import PlaceHoldBody
from punctual.resources import AuditPage, Hold, HoldPage
from punctual.usecases.kernel import audit
from punctual.usecases.tenancy import holds

router = tenant_router()

ActiveOnly = Annotated[
    str | None,
    choice_query(
        ["true", "false"],
        "`true`: only holds not yet released; `false` or omitted: every hold.",
    ),
]


@router.post(
    "/holds",
    tags=["holds"],
    **mutating(201, Hold, ADMIN, answer="The hold", body=PlaceHoldBody),
    description="Admin. While the hold is active, retention removes nothing it covers. "
    "The subject must exist in the tenant; `subject_id` is required for every kind but "
    "`tenant`. " + IDEMPOTENCY_DOC,
)
def place_hold(tenant: str, call: MutationDep) -> Response:
    return call.mutate(
        tenant,
        lambda principal: holds.place(call.services, principal, call.body(PlaceHoldBody).command()),
    )


@router.get(
    "/holds",
    tags=["holds"],
    **answering(200, HoldPage, LIST, ADMIN),
    description="Admin. Newest first unless `order=oldest`; released holds show "
    "`released_at` (they are kept one retention window after release).",
)
def list_holds(
    tenant: str, call: CallDep, page: PageDep, active: ActiveOnly = None
) -> dict[str, Any]:
    principal = call.principal(tenant)
    query = holds.ListHolds(active=active, limit=page.size(), cursor=page.cursor, order=page.order)
    return holds.list_holds(call.services, principal, query)


@router.post(
    "/holds/{hold_id}/release",
    tags=["holds"],
    **mutating(200, Hold, ADMIN, answer="The hold, with `released_at`"),
    description="Admin. Idempotent: a second release answers the first `released_at`. A "
    "hold the host placed (`placed_by_host`) is `403 forbidden`: only the host releases "
    "it. " + IDEMPOTENCY_DOC,
)
def release_hold(tenant: str, hold_id: str, call: MutationDep) -> Response:
    return call.mutate(tenant, lambda p: holds.release(call.services, p, hold_id))


@router.get(
    "/audit",
    tags=["audit"],
    **answering(200, AuditPage, LIST, ADMIN),
    description="Admin. One entry per decided mutation of the tenant, newest first unless "
    "`order=oldest`; never a body or input. `subject_id` and `actor` filter by exact match.",
)
def list_audit_entries(
    tenant: str,
    call: CallDep,
    page: PageDep,
    subject_id: Annotated[
        str | None, Query(description="Only entries about this resource id.")
    ] = None,
    actor: Annotated[str | None, Query(description="Only entries of this subject.")] = None,
) -> dict[str, Any]:
    principal = call.principal(tenant)
    query = audit.ListAudit(
        subject_id=subject_id,
        actor=actor,
        limit=page.size(),
        cursor=page.cursor,
        order=page.order,
    )
    return audit.list_entries(call.services, principal, query)
