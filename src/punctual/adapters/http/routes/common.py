"""Dependencies and helpers shared by the route modules."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Security
from fastapi.responses import Response
from fastapi.security import HTTPBearer

from punctual.adapters.http.edge import Edge, M, mutate, parse_body, parse_limit
from punctual.adapters.http.schemas import documented_as
from punctual.domain.permissions import Principal
from punctual.domain.starts import StartState
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import Mutation
from punctual.usecases.kernel.mutations import Subject
from punctual.usecases.kernel.paging import MAX_LIMIT, ORDERS


def get_edge(request: Request) -> Edge:
    edge: Edge = request.app.state.edge
    return edge


async def raw_body(request: Request) -> bytes:
    return await request.body()


EdgeDep = Annotated[Edge, Depends(get_edge)]
BodyDep = Annotated[bytes, Depends(raw_body)]

# Declares the bearer scheme on every /v1 route (API.md "OpenAPI"); it checks nothing:
# ``Edge.principal`` authenticates, in the contract's order.
BEARER = HTTPBearer(
    scheme_name="bearer",
    description="A tenant token: `Authorization: Bearer <token>`.",
    auto_error=False,
)

TENANT_PREFIX = "/v1/tenants/{tenant}"


def tenant_router(*tags: str, collection: str = "") -> APIRouter:
    """The router of a tenant's routes under ``/v1/tenants/{tenant}``, each declaring the
    bearer scheme."""
    return APIRouter(
        prefix=TENANT_PREFIX + collection, tags=list(tags), dependencies=[Security(BEARER)]
    )


@dataclass(frozen=True)
class Call:
    """A ``/v1`` request, as a route hands it to the edge and the use cases."""

    request: Request

    @property
    def edge(self) -> Edge:
        return get_edge(self.request)

    @property
    def services(self) -> Services:
        return self.edge.services

    def principal(self, tenant: str | None = None) -> Principal:
        """Authenticate, then check ``tenant`` when given (``Edge.principal``)."""
        return self.edge.principal(self.request, tenant)


@dataclass(frozen=True)
class MutationCall(Call):
    """A mutation request with its raw body, which is parsed only inside the mutation, after
    replay and authentication (API.md "Conventions")."""

    raw: bytes

    def body(self, model: type[M], *, host_owned_check: bool = False) -> M:
        return parse_body(self.raw, model, host_owned_check=host_owned_check)

    def mutate(
        self,
        tenant: str,
        decide: Callable[[Principal], Mutation],
        subject: Subject | None = None,
    ) -> Response:
        return mutate(self.edge, self.request, self.raw, tenant, decide, subject)


async def _call(request: Request) -> Call:
    return Call(request)


async def _mutation_call(request: Request) -> MutationCall:
    return MutationCall(request, await request.body())


CallDep = Annotated[Call, Depends(_call)]
MutationDep = Annotated[MutationCall, Depends(_mutation_call)]

__all__ = [
    "BEARER",
    "INSTANT",
    "TENANT_PREFIX",
    "BodyDep",
    "Call",
    "CallDep",
    "EdgeDep",
    "MutationCall",
    "MutationDep",
    "PageCursor",
    "PageDep",
    "PageLimit",
    "PageOrder",
    "Paging",
    "StartStateFilter",
    "choice_query",
    "documented_as",
    "documented_query",
    "get_edge",
    "one_of",
    "raw_body",
    "tenant_router",
    "whole_number",
]


# Query parameters arrive as strings and are parsed by the route after authentication
# (a bad value never answers before a 401); the document states what they must hold.


def whole_number(minimum: int, maximum: int | None = None) -> dict[str, Any]:
    bounds = {"minimum": minimum} | ({"maximum": maximum} if maximum is not None else {})
    return {"type": "integer", **bounds}


def one_of(values: Sequence[str]) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


INSTANT: dict[str, Any] = {"type": "string", "format": "date-time"}


def choice_query(values: Sequence[str], description: str | None = None) -> Any:
    """A query parameter that holds one of ``values``."""
    return documented_query(one_of(values), description)


def documented_query(schema: dict[str, Any], description: str | None = None, **query: Any) -> Any:
    """A query parameter taken as a string, documented as holding ``schema``."""
    return Query(description=description, json_schema_extra=documented_as(schema), **query)


PageLimit = Annotated[
    str | None,
    documented_query(whole_number(1, MAX_LIMIT), f"Items per page, 1-{MAX_LIMIT} (default 50)."),
]
PageCursor = Annotated[
    str | None, Query(description="The `next_cursor` of the previous page; omit for the first.")
]
PageOrder = Annotated[
    str | None,
    choice_query(
        ORDERS,
        "`newest` first (the default) or `oldest` first. A cursor keeps the order of the "
        "page it came from: without `order` the next page follows it, and an `order` that "
        "contradicts it is `422 invalid_cursor`.",
    ),
]


@dataclass(frozen=True)
class Paging:
    """A list's ``limit``, ``cursor`` and ``order`` as sent."""

    limit: str | None
    cursor: str | None
    order: str | None

    def size(self) -> int:
        """The parsed limit: asked for after authentication, never before a 401."""
        return parse_limit(self.limit)


async def _paging(
    limit: PageLimit = None, cursor: PageCursor = None, order: PageOrder = None
) -> Paging:
    return Paging(limit, cursor, order)


# Its parameters come after the route's own in the document, whatever their place.
PageDep = Annotated[Paging, Depends(_paging)]

StartStateFilter = Annotated[str | None, choice_query([s.value for s in StartState])]
"""The ``state`` filter of the lists of starts and of a schedule's occurrences."""
