"""Dependencies and helpers shared by the route modules."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.security import HTTPBearer
from pydantic import BaseModel

from punctual.adapters.http.edge import Edge


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
        doc["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    return doc


IDEMPOTENCY_DOC = (
    "Needs an `Idempotency-Key` header; the same key and request replay the recorded answer."
)
