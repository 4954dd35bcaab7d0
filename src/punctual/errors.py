"""punctual's one error tree.

Every error a caller can see has a stable ``code`` (the API contract) and a message
that names the thing concerned and says what to do. Exactly one module maps these
classes to HTTP status codes: ``punctual.adapters.http.errors``.

    PunctualError
    ├── Unauthenticated                      unauthenticated
    ├── Forbidden                            forbidden, workload_class_not_allowed,
    │                                        csrf_token_invalid
    ├── NotFound                             not_found
    ├── BadRequest                           idempotency_key_required, malformed_json
    ├── InvalidRequest (422)                 validation_error, start_at_*, host_owned_field,
    │                                        unknown_workflow, input_invalid, invalid_cron,
    │                                        webhook_url_not_allowed, unknown_event_kind,
    │                                        transfer_target_invalid, end_at_in_past,
    │                                        jitter_too_large (details.max_jitter_ms),
    │                                        backfill_range_invalid, backfill_too_large,
    │                                        ...
    ├── PayloadTooLarge                      input_too_large, body_too_large
    ├── Conflict                             idempotency_key_reused, version_conflict,
    │   │                                    already_dispatched, invalid_state, in_use,
    │   │                                    key_not_held, key_active, key_exists,
    │   │                                    no_active_key
    │   └── RaceLost                         name_taken (a concurrent write won; the
    │                                        mutation runs again, never recorded)
    ├── QuotaExceeded                        quota_exceeded
    ├── Unavailable                          quota_unavailable, engine_unavailable,
    │   │                                    store_unavailable, codec_key_unavailable
    │   └── HostUnavailable                  database_unavailable, database_url_unsupported,
    │                                        file_unavailable, extra_missing,
    │                                        engine_unavailable, address_unavailable
    │                                        (startup; never reaches HTTP)
    ├── AddressInUse                         address_in_use (startup; never reaches HTTP)
    └── ConfigurationError                   configuration_error (startup; never reaches HTTP)

Dispatch-time failures are classified separately, in ``punctual.domain.failures``.
"""

from __future__ import annotations

from typing import Any


class PunctualError(Exception):
    """Base of every error punctual raises on purpose."""

    code: str = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details: dict[str, Any] = details

    def __str__(self) -> str:
        return self.message


class Unauthenticated(PunctualError):
    code = "unauthenticated"


class Forbidden(PunctualError):
    code = "forbidden"


class NotFound(PunctualError):
    code = "not_found"


class BadRequest(PunctualError):
    code = "bad_request"


class InvalidRequest(PunctualError):
    """The request is well-formed but its content is not acceptable (HTTP 422)."""

    code = "validation_error"


class PayloadTooLarge(PunctualError):
    code = "input_too_large"


class Conflict(PunctualError):
    code = "conflict"


class RaceLost(Conflict):
    """A write lost to a concurrent one after its checks had passed (a unique index had the
    last word). The answer depends on timing, not on the request: the mutation runner runs
    the mutation again, which then decides on what won, and never records this answer
    under an idempotency key (OS-4)."""


class QuotaExceeded(PunctualError):
    code = "quota_exceeded"


class Unavailable(PunctualError):
    """Something punctual depends on cannot answer now; retrying later may succeed."""

    code = "unavailable"


class ConfigurationError(PunctualError):
    """The host configuration is invalid; raised at startup, naming the key."""

    code = "configuration_error"


class HostUnavailable(Unavailable):
    """A host command cannot start: what its configuration names is not there to use (a
    database it cannot reach or open, a database URL it has no driver for, a file it
    cannot read, the optional extra an engine needs, an engine server that does not
    answer). The message names the thing to fix and never a password."""

    code = "host_unavailable"


class AddressInUse(PunctualError):
    """The address a host command must listen on is taken by another process."""

    code = "address_in_use"


def version_conflict(resource: str, resource_id: str, current_version: int) -> Conflict:
    return Conflict(
        f"{resource} {resource_id} is at version {current_version}; "
        "read it again and retry with the current version",
        code="version_conflict",
        current_version=current_version,
    )


def not_found(resource: str, resource_id: str) -> NotFound:
    return NotFound(f"{resource} {resource_id} does not exist in this tenant")


def webhook_url_not_allowed(reason: str) -> InvalidRequest:
    """``reason`` names what is wrong with the destination, never the URL's path or query
    (a Slack URL's path is its credential)."""
    return InvalidRequest(
        f"the webhook URL is not allowed: {reason}; use an http or https URL whose host "
        "resolves to a public address, or ask the host to allow the range "
        "([webhooks] allowed_cidrs)",
        code="webhook_url_not_allowed",
    )
