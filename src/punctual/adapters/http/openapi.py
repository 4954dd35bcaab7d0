"""The OpenAPI document (API.md "OpenAPI"): each route's answers (its success, the
``202 in_progress`` of a mutation, and the error envelope per status with the codes the
route refuses with) and the document FastAPI generates, completed with the request bodies
the routes parse themselves.

The answers' models are the resources of ``punctual.resources``, which the typed client
parses with; the routes build their bodies from the use cases' views and only *declare*
these models (``response_model=None``), so documenting never filters an answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from punctual import resources
from punctual.adapters.http.schemas import REQUEST_BODIES, request_body_ref
from punctual.adapters.http.status import status_of
from punctual.resources import Error, InProgress

# --------------------------------------------------------------------------- answers

Refusals = Sequence[str]
"""The stable codes a route may refuse with; each one's status is the registry's
(``punctual.errors.REGISTRY``), so a route lists codes and never a status."""

_MEANING = {
    400: "The `Idempotency-Key` header is missing or malformed",
    401: "No token, or a bad, revoked or expired one",
    403: "The role, or the tenant's host settings, do not allow this",
    404: "No such tenant or resource for this principal (another tenant's ids do not exist)",
    409: "The request conflicts with the resource's state, or its key with an earlier request",
    413: "The body or the workflow input is too large",
    422: "The request's content is not acceptable; `details.errors` lists the problems of a "
    "`validation_error`",
    429: "A quota is full; nothing was recorded, so a later retry may succeed",
    503: "Something punctual depends on is unavailable; retry the same request later",
}

READ: Refusals = ("unauthenticated", "not_found", "validation_error", "store_unavailable")
"""What every read may answer."""
LIST: Refusals = (*READ, "validation_error", "invalid_cursor")
"""What every paged list may answer."""
ADMIN: Refusals = ("forbidden",)
"""Routes for admins only, or whose role rule refuses some principals."""
MUTATION: Refusals = (
    "idempotency_key_required",
    "unauthenticated",
    "not_found",
    "idempotency_key_reused",
    "body_too_large",
    "validation_error",
    "store_unavailable",
)
"""What every mutation may answer (API.md "Conventions")."""
VERSIONED: Refusals = ("version_conflict",)
"""Mutations of a resource that takes its current ``version``."""

_UNDECIDED = (
    "Not decided within the bounded wait; it carries on. Send the same request with the "
    "same `Idempotency-Key` again to learn the outcome."
)


def refusals(*groups: Refusals) -> dict[int, tuple[str, ...]]:
    """The union of ``groups`` by status: per status, every code once, in first-seen
    order."""
    merged: dict[int, list[str]] = {}
    for group in groups:
        for code in group:
            known = merged.setdefault(status_of(code), [])
            if code not in known:
                known.append(code)
    return {status: tuple(merged[status]) for status in sorted(merged)}


def answers(
    status: int,
    model: Any,
    *groups: Refusals,
    mutation: bool = False,
    description: str = "Success",
) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` of a route (API.md "OpenAPI"): its success, the
    ``202 in_progress`` of a mutation, and each error status with the error envelope,
    the codes the route answers it with, and an example of the first."""
    documented: dict[int | str, dict[str, Any]] = {status: {"description": description}}
    if model is not None:
        documented[status]["model"] = model
    if mutation and status == 202:
        documented[202] = {
            "model": model | InProgress,
            "description": f"{description}; or `in_progress`: {_UNDECIDED}",
        }
    elif mutation:
        documented[202] = {"model": InProgress, "description": _UNDECIDED}
    for code, codes in refusals(*groups).items():
        listed = ", ".join(f"`{name}`" for name in codes)
        documented[code] = {
            "model": Error,
            "description": f"{_MEANING[code]}. Codes: {listed}.",
            "content": {"application/json": {"example": _example(codes[0])}},
        }
    return documented


def _example(code: str) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if code == "validation_error":
        details = {
            "errors": [{"loc": ["body", "start_at"], "msg": "Field required", "type": "missing"}]
        }
    elif code == "version_conflict":
        details = {"current_version": 2}
    return {
        "error": {"code": code, "message": _EXAMPLE_MESSAGES.get(code, code), "details": details}
    }


_EXAMPLE_MESSAGES = {
    "idempotency_key_required": "this request changes state and needs an 'Idempotency-Key' "
    "header: a unique value you persist with the request and reuse when you retry it",
    "unauthenticated": "a valid bearer token is required",
    "forbidden": "this role may not do this",
    "not_found": "start sst_1 does not exist in this tenant",
    "idempotency_key_reused": "this Idempotency-Key was used for a different request",
    "version_conflict": "start sst_1 is at version 2; read it again and retry with the current "
    "version",
    "body_too_large": "the request body is larger than 1048576 bytes",
    "input_too_large": "input is 70000 bytes; this tenant accepts at most 65536",
    "validation_error": "invalid request body: start_at: Field required",
    "quota_exceeded": "tenant default has 10000 pending starts, its limit is 10000",
    "store_unavailable": "the database is unavailable; retry the same request later",
}


# --------------------------------------------------------------------------- declarations

IDEMPOTENCY_KEY_PARAMETER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": True,
    "description": "1-255 visible ASCII characters, unique per logical request; "
    "the same key and request replay the recorded answer.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
}

IDEMPOTENCY_DOC = (
    "Needs an `Idempotency-Key` header; the same key and request replay the recorded answer."
)


def mutation_doc(model: type[BaseModel] | None = None) -> dict[str, Any]:
    """OpenAPI of a mutation: its ``Idempotency-Key`` header and the body the route parses
    itself (so that replay and authentication come before validation)."""
    doc: dict[str, Any] = {"parameters": [IDEMPOTENCY_KEY_PARAMETER]}
    if model is not None:
        doc["requestBody"] = request_body_ref(model)
    return doc


def answering(status: int, model: Any, *refusals: Refusals) -> dict[str, Any]:
    """A route's declaration of its answers: ``model`` is documented but never applied
    (``response_model=None``), so that documenting never filters an answer."""
    return {
        "status_code": status,
        "response_model": None,
        "responses": answers(status, model, *refusals),
    }


def mutating(
    status: int,
    model: Any,
    *refusals: Refusals,
    answer: str,
    body: type[BaseModel] | None = None,
) -> dict[str, Any]:
    """A mutation's declaration: its answers (every mutation's refusals among them, and the
    ``202 in_progress`` of the bounded wait) and its ``mutation_doc``."""
    return {
        "status_code": status,
        "response_model": None,
        "responses": answers(status, model, MUTATION, *refusals, mutation=True, description=answer),
        "openapi_extra": mutation_doc(body),
    }


# --------------------------------------------------------------------------- the document


def operation_id(route: APIRoute) -> str:
    """Operation ids are the route functions' names (``create_start``, ``get_run``), so a
    generated client's functions read like the contract."""
    return route.name


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, completed: the request bodies the routes parse themselves become
    component schemas, and FastAPI's default 422 body (``HTTPValidationError``), which this
    API never answers, becomes the error envelope it does answer."""
    if app.openapi_schema:
        return app.openapi_schema
    document = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        openapi_version=app.openapi_version,
        separate_input_output_schemas=app.separate_input_output_schemas,
    )
    components: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    _, definitions = models_json_schema(
        [(model, "validation") for model in REQUEST_BODIES],
        ref_template="#/components/schemas/{model}",
    )
    for name, schema in definitions.get("$defs", {}).items():
        if components.get(name, schema) != schema:
            raise ValueError(f"two different schemas are named {name}")
        components[name] = schema
    # FastAPI drops every null from the document, the ``null`` fields of examples too.
    for name, schema in components.items():
        model = getattr(resources, name, None)
        if "examples" in schema and isinstance(model, type) and issubclass(model, BaseModel):
            schema["examples"] = model.model_json_schema()["examples"]
    _envelope_for_default_validation_errors(document)
    app.openapi_schema = document
    return document


def _envelope_for_default_validation_errors(document: dict[str, Any]) -> None:
    default = "#/components/schemas/HTTPValidationError"
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            answer = operation.get("responses", {}).get("422")
            schema = answer and answer.get("content", {}).get("application/json", {}).get("schema")
            if schema == {"$ref": default}:
                operation["responses"]["422"] = {
                    "description": f"{_MEANING[422]}. Codes: `validation_error`.",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                }
    schemas = document.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
