"""The client's errors: typed by status, carrying the envelope's ``code``, ``message`` and
``details`` and the request's idempotency key."""

from __future__ import annotations

from typing import Any

import httpx


class ClientError(Exception):
    """Base of what the client raises on purpose."""

    def __init__(self, message: str, *, idempotency_key: str | None = None) -> None:
        super().__init__(message)
        self.idempotency_key = idempotency_key
        """The key of the mutation that failed, to retry it later; ``None`` for reads."""


class ApiError(ClientError):
    """An error answer from punctual, with its stable ``code``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any],
        *,
        idempotency_key: str | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}", idempotency_key=idempotency_key)
        self.status = status
        self.code = code
        self.message = message
        self.details = details

    @property
    def envelope(self) -> dict[str, Any]:
        """The answer as the server sent it: ``{"error": {"code", "message", "details"}}``."""
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


class InvalidRequestError(ApiError):
    """400, 413, 422: the request itself is refused; the same request will be again."""


class AuthenticationError(ApiError):
    """401: no token, or a bad, revoked or expired one."""


class PermissionDeniedError(ApiError):
    """403: the role (or the tenant's host settings) do not allow this."""


class NotFoundError(ApiError):
    """404: no such tenant or resource for this principal."""


class ConflictError(ApiError):
    """409: a version conflict, a state that forbids it, or a key used for another request."""


class UnavailableError(ApiError):
    """429 or 5xx: nothing was decided; retry the same request (same key) later."""


class InProgress(ClientError):
    """``202 in_progress`` after the client's own retries: the mutation carries on; send
    it again with ``error.idempotency_key`` to learn its outcome."""


class ServerUnreachable(ClientError):
    """No answer (connection refused or dropped, timeout) after the client's retries.
    A mutation may or may not have happened: retry it with ``error.idempotency_key``."""


_ERRORS: dict[int, type[ApiError]] = {
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    429: UnavailableError,
}


def api_error(response: httpx.Response, idempotency_key: str | None = None) -> ApiError:
    """The typed error of an error answer (one that is not the envelope is ``http_error``)."""
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
        details = error.get("details") or {}
    except (ValueError, KeyError, TypeError):
        code, message, details = "http_error", response.text, {}
    status = response.status_code
    kind = _ERRORS.get(status, UnavailableError if status >= 500 else InvalidRequestError)
    return kind(status, code, message, details, idempotency_key=idempotency_key)
