"""punctual's one error tree.

Every error a caller can see has a stable ``code`` (the API contract) and a message
that names the thing concerned and says what to do. Exactly one module maps these
classes to HTTP status codes: ``punctual.adapters.http.errors``.

    PunctualError
    ├── Unauthenticated                      401
    ├── Forbidden                            403
    ├── NotFound                             404
    ├── BadRequest                           400
    ├── InvalidRequest                       422
    ├── PayloadTooLarge                      413
    ├── Conflict                             409
    │   └── RaceLost                         (a concurrent write won; the mutation runs
    │                                        again, never recorded)
    ├── QuotaExceeded                        429
    ├── Unavailable                          503
    │   └── HostUnavailable                  (startup; never reaches HTTP)
    ├── AddressInUse                         (startup; never reaches HTTP)
    └── ConfigurationError                   (startup; never reaches HTTP)

Which codes each class carries, and what each means: ``REGISTRY`` at the end of this
module, the one list of codes.

Dispatch-time failures are classified separately, in ``punctual.domain.failures``.
"""

from __future__ import annotations

from dataclasses import dataclass
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


# --------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class ErrorCode:
    """One stable code of the contract: the class that carries it (whose status the HTTP
    edge knows) and what it means to the caller, in one line."""

    code: str
    kind: type[PunctualError]
    meaning: str


REGISTRY: tuple[ErrorCode, ...] = (
    ErrorCode("internal_error", PunctualError, "an unexpected error; nothing to fix on your side"),
    ErrorCode("bad_request", BadRequest, "the request cannot be read as sent"),
    ErrorCode(
        "idempotency_key_required",
        BadRequest,
        "send an Idempotency-Key header (1-255 visible ASCII)",
    ),
    ErrorCode("unauthenticated", Unauthenticated, "missing, unknown, revoked or expired token"),
    ErrorCode("forbidden", Forbidden, "your role may not do this"),
    ErrorCode(
        "workload_class_not_allowed",
        Forbidden,
        "the class is not configured or not allowed for your tenant",
    ),
    ErrorCode("csrf_token_invalid", Forbidden, "the page's form is stale: reload the page"),
    ErrorCode("not_found", NotFound, "no such resource in your tenant"),
    ErrorCode("conflict", Conflict, "the request conflicts with the resource's state"),
    ErrorCode(
        "idempotency_key_reused",
        Conflict,
        "the key was used for a different request: use a new key",
    ),
    ErrorCode("version_conflict", Conflict, "read the resource again; details.current_version"),
    ErrorCode(
        "already_dispatched",
        Conflict,
        "the start has a run (details.run_id): cancel or terminate the run",
    ),
    ErrorCode("invalid_state", Conflict, "the resource's state does not allow this change"),
    ErrorCode("in_use", Conflict, "something still refers to it: remove that first"),
    ErrorCode("name_taken", Conflict, "a live schedule of the tenant already has that name"),
    ErrorCode("key_not_held", Conflict, "no process holds that key: add it to the key ring"),
    ErrorCode("key_active", Conflict, "the key is the active one: activate another first"),
    ErrorCode("key_exists", Conflict, "a key with that id is already recorded"),
    ErrorCode("no_active_key", Conflict, "no key is active: activate one first"),
    ErrorCode("input_too_large", PayloadTooLarge, "the input exceeds the tenant's limit"),
    ErrorCode("body_too_large", PayloadTooLarge, "the body exceeds the server's limit"),
    ErrorCode(
        "validation_error",
        InvalidRequest,
        "malformed JSON or fields; details.errors lists each problem",
    ),
    ErrorCode("start_at_not_timezone_aware", InvalidRequest, "start_at has no offset"),
    ErrorCode("start_at_in_past", InvalidRequest, "start_at is more than 5 s in the past"),
    ErrorCode(
        "start_at_zone_mismatch",
        InvalidRequest,
        "the offset is not time_zone's offset at that instant",
    ),
    ErrorCode("unknown_time_zone", InvalidRequest, "not an IANA zone name"),
    ErrorCode("unknown_workflow", InvalidRequest, "no such workflow"),
    ErrorCode("workflow_inactive", InvalidRequest, "the workflow has no active version"),
    ErrorCode(
        "input_invalid",
        InvalidRequest,
        "the input does not match the active definition's schema",
    ),
    ErrorCode("host_owned_field", InvalidRequest, "the request sets a field the host owns"),
    ErrorCode("policy_required", InvalidRequest, "a schedule needs overlap and missed"),
    ErrorCode("invalid_schedule_spec", InvalidRequest, "the schedule's spec cannot be accepted"),
    ErrorCode("invalid_cron", InvalidRequest, "outside the supported cron grammar"),
    ErrorCode("interval_too_short", InvalidRequest, "interval_ms below the minimum"),
    ErrorCode(
        "unknown_holiday_region",
        InvalidRequest,
        "a calendar names a country or subdivision the holidays package does not know",
    ),
    ErrorCode("calendar_never_open", InvalidRequest, "the calendar leaves a year with no open day"),
    ErrorCode("end_at_in_past", InvalidRequest, "end_at is not in the future"),
    ErrorCode("jitter_too_large", InvalidRequest, "jitter_ms exceeds details.max_jitter_ms"),
    ErrorCode("backfill_range_invalid", InvalidRequest, "the backfill's range is reversed"),
    ErrorCode("backfill_too_large", InvalidRequest, "the backfill yields too many occurrences"),
    ErrorCode("invalid_cursor", InvalidRequest, "the cursor is not one this API returned"),
    ErrorCode(
        "webhook_url_not_allowed",
        InvalidRequest,
        "not an http(s) URL with a host, or its host resolves to a refused address",
    ),
    ErrorCode("unknown_event_kind", InvalidRequest, "events names an unknown notification kind"),
    ErrorCode(
        "transfer_target_invalid",
        InvalidRequest,
        "to is not a member who may create runs",
    ),
    ErrorCode(
        "unsupported_by_driver",
        InvalidRequest,
        "the Temporal Schedules driver cannot honour the field in details.field",
    ),
    ErrorCode(
        "dst_policy_unsupported",
        InvalidRequest,
        "the Temporal Schedules driver cannot honour the DST policy at a coming transition",
    ),
    ErrorCode("quota_exceeded", QuotaExceeded, "a quota is full; details: limit, count, scope"),
    ErrorCode("unavailable", Unavailable, "something punctual depends on is unavailable"),
    ErrorCode("quota_unavailable", Unavailable, "the host configured no quota controller"),
    ErrorCode("store_unavailable", Unavailable, "the database is unavailable: retry later"),
    ErrorCode("store_busy", Unavailable, "the database is busy: retry the same request"),
    ErrorCode("engine_unavailable", Unavailable, "the workflow engine did not answer"),
    ErrorCode(
        "codec_key_unavailable",
        Unavailable,
        "this process does not hold the store's active key",
    ),
    ErrorCode(
        "in_progress",
        Unavailable,
        "the key was taken over while the request ran: retry it",
    ),
    ErrorCode("configuration_error", ConfigurationError, "the host configuration is invalid"),
    ErrorCode("input_key_unknown", ConfigurationError, "the input's key is not in the key ring"),
    ErrorCode(
        "input_undecryptable",
        ConfigurationError,
        "the input fails authentication with its key",
    ),
    ErrorCode("host_unavailable", HostUnavailable, "a host command cannot start"),
    ErrorCode("database_unavailable", HostUnavailable, "the database cannot be reached or opened"),
    ErrorCode(
        "database_url_unsupported",
        HostUnavailable,
        "database_url names neither SQLite nor PostgreSQL",
    ),
    ErrorCode("file_unavailable", HostUnavailable, "a file the configuration names is unreadable"),
    ErrorCode("extra_missing", HostUnavailable, "the engine needs an extra that is not installed"),
    ErrorCode("address_unavailable", HostUnavailable, "the address to listen on cannot be used"),
    ErrorCode("address_in_use", AddressInUse, "the address to listen on is taken"),
)
"""Every code punctual answers or prints, once; ``docs/api.md``'s table of codes, the
routes' refusal tables in the OpenAPI document and the raise sites are checked against it
(tests/unit/test_error_codes.py)."""

CODES: dict[str, ErrorCode] = {entry.code: entry for entry in REGISTRY}


def registered(code: str) -> ErrorCode:
    """The registry's entry for ``code``; a code missing from it is a defect."""
    try:
        return CODES[code]
    except KeyError:
        raise LookupError(f"error code {code} is not in punctual.errors.REGISTRY") from None
