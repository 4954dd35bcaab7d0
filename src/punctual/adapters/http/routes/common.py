"""Dependencies and helpers shared by the route modules."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from pydantic import BaseModel

from punctual.adapters.http.edge import Edge


def get_edge(request: Request) -> Edge:
    edge: Edge = request.app.state.edge
    return edge


async def raw_body(request: Request) -> bytes:
    return await request.body()


def body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a body the route parses itself (so replay can come before validation)."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


IDEMPOTENCY_DOC = (
    "Needs an `Idempotency-Key` header; the same key and request replay the recorded answer."
)
