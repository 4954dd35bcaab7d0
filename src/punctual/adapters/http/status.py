"""The one place that maps punctual's errors to HTTP status codes and the error envelope.

Free of FastAPI, so that what records an answer without serving HTTP (the idempotent
mutation runner, the host commands) does not import the web stack.
"""

from __future__ import annotations

from typing import Any

from punctual import errors as e

_STATUS: list[tuple[type[e.PunctualError], int]] = [
    (e.Unauthenticated, 401),
    (e.Forbidden, 403),
    (e.NotFound, 404),
    (e.BadRequest, 400),
    (e.InvalidRequest, 422),
    (e.PayloadTooLarge, 413),
    (e.Conflict, 409),
    (e.QuotaExceeded, 429),
    (e.Unavailable, 503),
]


# Errors whose message is for the operator (a database URL, a host, a driver's text): the
# client gets the generic message below and the log gets the detail (SPEC SEC-4).
GENERIC_MESSAGES = {
    "store_unavailable": "the database is unavailable; retry the same request later",
    "engine_unavailable": "the workflow engine is unavailable; retry the same request later",
}


def status_for(error: e.PunctualError) -> int:
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 500


def status_of(code: str) -> int:
    """The status an answer with ``code`` carries, from the registry's class for it."""
    kind = e.registered(code).kind
    for cls, status in _STATUS:
        if issubclass(kind, cls):
            return status
    return 500


def envelope(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def body_for(error: e.PunctualError) -> dict[str, Any]:
    details = dict(error.details)
    if error.code == "validation_error" and "errors" not in details:
        # Every validation_error lists its problems, however it was raised.
        details["errors"] = [{"loc": [], "msg": error.message, "type": "value_error"}]
    return envelope(error.code, GENERIC_MESSAGES.get(error.code, error.message), details)
