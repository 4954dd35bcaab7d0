"""The host's internal routes (SPEC SEC-3, API.md "Internal and operator routes").

Definition lifecycle and preflight, host-wide health, reconciliation and host holds. They
are their own application, mounted at ``/internal`` (or served alone on
``internal_listen``) behind one guard, ``InternalGuard``: an ASGI wrapper that every
request of the tree passes, whatever its path or method, before any route, dependency or
body parser sees it. It accepts the host's internal token in ``X-Internal-Token`` only,
compared in constant time; a tenant's bearer token means nothing here. Without a
configured token the tree is not mounted at all, so ``/internal/…`` is ``404``.

The tree is not in the tenant document (``/openapi.json``), whose clients cannot call it;
it has its own, ``GET /internal/openapi.json``, behind the same guard.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, ConfigDict, Field, StrictStr
from starlette.types import ASGIApp, Receive, Scope, Send

import punctual
from punctual.adapters.http import errors, status
from punctual.adapters.http.edge import Edge, parse_body, refuse_unstorable_parameters
from punctual.adapters.http.openapi import Refusals, answering, operation_id
from punctual.adapters.http.routes.common import BodyDep, EdgeDep
from punctual.domain.runs import DefinitionState
from punctual.errors import NotFound
from punctual.resources import (
    Definition,
    EngineHealth,
    Finding,
    Hold,
    Resource,
    WorkerHealth,
)
from punctual.usecases.firing import reconcile
from punctual.usecases.running import definitions
from punctual.usecases.tenancy import health, holds
from punctual.usecases.tenancy.holds import MAX_REASON_LENGTH, PlaceHold, RequestLine

PREFIX = "/internal"
TOKEN_HEADER = "X-Internal-Token"
_TOKEN_HEADER_KEY = TOKEN_HEADER.lower().encode()
_UNAUTHENTICATED = (
    f"the internal routes need the host's internal token in the {TOKEN_HEADER} header"
)


class InternalGuard:
    """The one guard of the ``/internal`` tree: ``401 unauthenticated`` unless the request
    carries exactly one ``X-Internal-Token`` header equal to the host's token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._admits(scope):
            refusal = JSONResponse(
                status.envelope("unauthenticated", _UNAUTHENTICATED), status_code=401
            )
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _admits(self, scope: Scope) -> bool:
        given = [value for name, value in scope["headers"] if name == _TOKEN_HEADER_KEY]
        # Constant time whatever the value, so timing tells nothing of the token's prefix.
        return len(given) == 1 and hmac.compare_digest(given[0], self._token)


# --------------------------------------------------------------------------- answers


class DefinitionInUse(Definition):
    """A definition version with what still needs it (``punctual definitions check``)."""

    needed_by: list[str]
    """Unfinished runs, pinned schedules and, for the active version, pending starts and
    ``active_at_fire`` schedules; empty when nothing does (it may be retired)."""


class CodecKeyUse(Resource):
    key_id: str
    in_key_ring: bool
    active: bool
    needed_by: list[str]


class DefinitionInUsePage(Resource):
    items: list[DefinitionInUse]
    next_cursor: str | None
    codec_keys: list[CodecKeyUse]
    """Every codec key in this process's ring or needed by stored values."""


class TenantHealth(Resource):
    tenant: str
    status: str
    """``ok`` or ``degraded``, by the rule of the tenant's own ``GET …/health``."""
    open_findings_count: int
    failed_starts_count: int
    stalled_count: int


class Orphan(Finding):
    """An open ``orphaned_schedule`` finding (Temporal Schedules driver)."""

    tenant: str


class HostHealth(Resource):
    status: str
    """``degraded`` when any tenant is, the engine is down, or an orphan is open."""
    tenants: list[TenantHealth]
    engine: EngineHealth
    workers: list[WorkerHealth]
    orphans: list[Orphan]
    tzdata_version: str
    holidays_version: str


class ReconcileReport(Resource):
    checked: int
    ensured: int
    removed: int
    orphans: int


class HostHoldBody(BaseModel):
    """``POST /internal/holds``: a hold on a record of ``tenant`` that only the host releases."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "tenant": "acme",
                    "subject_kind": "tenant",
                    "reason": "legal hold, case 2026-17",
                }
            ]
        },
    )

    tenant: StrictStr = Field(min_length=1, max_length=200)
    subject_kind: StrictStr = Field(
        max_length=20, json_schema_extra={"enum": ["start", "schedule", "run", "tenant"]}
    )
    subject_id: StrictStr | None = Field(default=None, min_length=1, max_length=200)
    """Required for every kind but ``tenant``."""
    reason: StrictStr = Field(min_length=1, max_length=MAX_REASON_LENGTH)


# --------------------------------------------------------------------------- routes

_GUARDED: Refusals = ("unauthenticated", "store_unavailable")
_PATH: Refusals = ("not_found", "validation_error")
_BODY: Refusals = ("body_too_large", "validation_error")
_IN_USE: Refusals = ("in_use",)
_DRIVER_DOWN: Refusals = ("engine_unavailable",)


# Declares the header in the tree's document; it checks nothing: ``InternalGuard`` has
# already admitted every request that reaches a route.
INTERNAL_TOKEN = APIKeyHeader(
    name=TOKEN_HEADER,
    scheme_name="internal_token",
    description="The host's `internal_token` (host configuration).",
    auto_error=False,
)


def _storable_parameters(request: Request) -> None:
    refuse_unstorable_parameters(request)


router = APIRouter(
    tags=["internal"],
    dependencies=[Security(INTERNAL_TOKEN), Depends(_storable_parameters)],
)


@router.get(
    "/definitions",
    **answering(200, DefinitionInUsePage, _GUARDED),
    description="Every workflow definition version with what still needs it, and the "
    "codec keys: what `punctual definitions check` prints. All in one page.",
)
def check_definitions(edge: EdgeDep) -> dict[str, Any]:
    needed = {(d["name"], d["version"]): d["needed_by"] for d in definitions.check(edge.services)}
    items = [
        {**view, "needed_by": needed.get((view["name"], view["version"]), [])}
        for view in definitions.list_definitions(edge.services)
    ]
    keys = definitions.key_report(edge.services)
    return {"items": items, "next_cursor": None, "codec_keys": keys}


def _lifecycle(edge: Edge, name: str, version: str, state: DefinitionState) -> dict[str, Any]:
    definitions.set_lifecycle(edge.services, name, version, state)
    for view in definitions.list_definitions(edge.services):
        if (view["name"], view["version"]) == (name, version):
            return view
    raise NotFound(f"workflow {name} has no version {version}")


@router.post(
    "/definitions/{name}/{version}/activate",
    **answering(200, Definition, _GUARDED, _PATH),
    description="Make this the workflow's active version (the previous one is deprecated).",
)
def activate_definition(name: str, version: str, edge: EdgeDep) -> dict[str, Any]:
    return _lifecycle(edge, name, version, DefinitionState.ACTIVE)


@router.post(
    "/definitions/{name}/{version}/deprecate",
    **answering(200, Definition, _GUARDED, _PATH),
    description="New dispatches stop using this version; what still needs it keeps it.",
)
def deprecate_definition(name: str, version: str, edge: EdgeDep) -> dict[str, Any]:
    return _lifecycle(edge, name, version, DefinitionState.DEPRECATED)


@router.post(
    "/definitions/{name}/{version}/retire",
    **answering(200, Definition, _GUARDED, _PATH, _IN_USE),
    description="Retire this version; `409 in_use`, with `details.users`, while anything "
    "still needs it.",
)
def retire_definition(name: str, version: str, edge: EdgeDep) -> dict[str, Any]:
    return _lifecycle(edge, name, version, DefinitionState.RETIRED)


@router.get(
    "/health",
    **answering(200, HostHealth, _GUARDED),
    description="Host-wide health: every tenant's status, the live workers, the engine and "
    "the open orphaned-schedule findings.",
)
def host_health(edge: EdgeDep) -> dict[str, Any]:
    return health.host_report(edge.services)


@router.post(
    "/reconcile",
    **answering(200, ReconcileReport, _GUARDED, _DRIVER_DOWN),
    description="One reconciliation sweep of schedules with the firing driver; all zeros "
    "on the SQL driver, where the store is what fires.",
)
def reconcile_schedules(edge: EdgeDep) -> dict[str, Any]:
    return reconcile.reconcile(edge.services).as_dict()


@router.post(
    "/holds",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": HostHoldBody.model_json_schema()}},
        }
    },
    **answering(201, Hold, _GUARDED, _BODY, ("not_found",)),
    description="A hold placed by the host (`placed_by_host: true`, `created_by: host`) on a "
    "record of any tenant; a tenant admin cannot release it. Audited in the tenant's log.",
)
def place_host_hold(request: Request, edge: EdgeDep, raw: BodyDep) -> JSONResponse:
    body = parse_body(raw, HostHoldBody)
    command = PlaceHold(body.subject_kind, body.subject_id, body.reason)
    line = RequestLine(request.method, request.url.path)
    hold = holds.place_by_host(edge.services, body.tenant, command, line)
    return JSONResponse(hold, status_code=201)


@router.post(
    "/holds/{hold_id}/release",
    **answering(200, Hold, _GUARDED, _PATH),
    description="Release any hold of any tenant (idempotent). Audited in the tenant's log.",
)
def release_host_hold(hold_id: str, request: Request, edge: EdgeDep) -> dict[str, Any]:
    line = RequestLine(request.method, request.url.path)
    return holds.release_by_host(edge.services, hold_id, line)


# --------------------------------------------------------------------------- the tree


def internal_tree(edge: Edge, token: str) -> ASGIApp:
    """The ``/internal`` tree behind its guard, to mount at ``PREFIX``."""
    app = FastAPI(
        title="punctual internal routes",
        version=punctual.__version__,
        description=f"The host's routes. Every request needs `{TOKEN_HEADER}`.",
        generate_unique_id_function=operation_id,
        docs_url=None,
        redoc_url=None,
    )
    app.state.edge = edge
    errors.install(app)
    app.include_router(router)
    return InternalGuard(app, token)
