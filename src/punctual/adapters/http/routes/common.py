"""Dependencies and helpers shared by the route modules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.security import HTTPBearer
from pydantic import BaseModel

from punctual.adapters.http.edge import Edge
from punctual.adapters.http.schemas import documented_as, request_body_ref
from punctual.usecases.kernel.paging import MAX_LIMIT


def get_edge(request: Request) -> Edge:
    edge: Edge = request.app.state.edge
    return edge


async def raw_body(request: Request) -> bytes:
    return await request.body()


# Declares the bearer scheme on every /v1 route (API.md "OpenAPI"); it checks nothing:
# ``Edge.principal`` authenticates, in the contract's order.
BEARER = HTTPBearer(
    scheme_name="bearer",
    description="A tenant token: `Authorization: Bearer <token>`.",
    auto_error=False,
)

IDEMPOTENCY_KEY_PARAMETER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": True,
    "description": "1-255 visible ASCII characters, unique per logical request; "
    "the same key and request replay the recorded answer.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
}


def mutation_doc(model: type[BaseModel] | None = None) -> dict[str, Any]:
    """OpenAPI of a mutation: its ``Idempotency-Key`` header and the body the route parses
    itself (so that replay and authentication come before validation)."""
    doc: dict[str, Any] = {"parameters": [IDEMPOTENCY_KEY_PARAMETER]}
    if model is not None:
        doc["requestBody"] = request_body_ref(model)
    return doc


__all__ = [
    "BEARER",
    "IDEMPOTENCY_DOC",
    "INSTANT",
    "PageCursor",
    "PageLimit",
    "documented_as",
    "get_edge",
    "mutation_doc",
    "one_of",
    "raw_body",
    "whole_number",
]

IDEMPOTENCY_DOC = (
    "Needs an `Idempotency-Key` header; the same key and request replay the recorded answer."
)


# Query parameters arrive as strings and are parsed by the route after authentication
# (a bad value never answers before a 401); the document states what they must hold.


def whole_number(minimum: int, maximum: int | None = None) -> dict[str, Any]:
    bounds = {"minimum": minimum} | ({"maximum": maximum} if maximum is not None else {})
    return {"type": "integer", **bounds}


def one_of(values: Sequence[str]) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


INSTANT: dict[str, Any] = {"type": "string", "format": "date-time"}

PageLimit = Annotated[
    str | None,
    Query(
        description=f"Items per page, 1-{MAX_LIMIT} (default 50).",
        json_schema_extra=documented_as(whole_number(1, MAX_LIMIT)),
    ),
]
PageCursor = Annotated[
    str | None, Query(description="The `next_cursor` of the previous page; omit for the first.")
]
