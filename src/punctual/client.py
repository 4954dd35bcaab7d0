"""A typed HTTP client for punctual's API (IF-2): ``PunctualClient`` (sync) and
``AsyncPunctualClient`` (asyncio), over every tenant route, answering with the models of
``punctual.resources``.

Idempotency (API.md "Conventions"): every mutation sends an ``Idempotency-Key``. Pass
``idempotency_key=`` to choose it (persist it with your request first, then a retry after
a crash acts once), or let the client make one. Either way the client keeps the key across
its own retries of an ambiguous failure (a connection error or timeout, a 5xx, a
``202 in_progress``) and exposes it: on the answer (``answer.idempotency_key``) and on
every exception a mutation raises (``error.idempotency_key``), so the caller can retry the
same request later and learn its outcome.

Errors are typed by status and carry the envelope's ``code``, ``message`` and ``details``::

    ClientError                    idempotency_key
    ├── ApiError                   status, code, message, details, envelope
    │   ├── InvalidRequestError    400, 413, 422 (and any other 4xx)
    │   ├── AuthenticationError    401
    │   ├── PermissionDeniedError  403
    │   ├── NotFoundError          404
    │   ├── ConflictError          409
    │   └── UnavailableError       429 and 5xx: retry later
    ├── InProgress                 still 202 after the client's retries
    └── ServerUnreachable          no answer after the client's retries

Every answer keeps the JSON the server sent in ``.raw`` (for ``--json`` printing).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx

from punctual.resources import (
    AuditPage,
    BackfillResult,
    BatchCreateResult,
    BatchItemResult,
    DefinitionPage,
    DeliveryPage,
    Finding,
    Health,
    Hold,
    HoldPage,
    IssuedToken,
    Member,
    Notification,
    NotificationPage,
    Occurrence,
    OccurrencePage,
    Queued,
    Resource,
    Run,
    RunPage,
    Schedule,
    SchedulePage,
    SchedulePreview,
    ScheduleUpsert,
    Start,
    StartPage,
    TokenPage,
    UpsertPlan,
    Webhook,
    WebhookPage,
)

__all__ = [
    "KEEP",
    "ApiError",
    "AsyncPunctualClient",
    "AuthenticationError",
    "ClientError",
    "ConflictError",
    "InProgress",
    "InvalidRequestError",
    "NotFoundError",
    "PermissionDeniedError",
    "PunctualClient",
    "ServerUnreachable",
    "UnavailableError",
    "new_idempotency_key",
    "retry_until_decided",
]

T = TypeVar("T")
R = TypeVar("R", bound=Resource)
RETRIED_STATUSES = frozenset({500, 502, 503, 504})
"""5xx answers the client retries with the same key; 429 is decided (not recorded) and
raised at once, for the caller to retry later."""


# --------------------------------------------------------------------------- errors


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


def new_idempotency_key() -> str:
    """A fresh key (1-255 visible ASCII characters, as the API requires)."""
    return str(uuid.uuid4())


# --------------------------------------------------------------------------- calls


class _Keep(Enum):
    KEEP = "keep"


KEEP = _Keep.KEEP
"""``update_webhook``'s default for a field left as it is (``None`` means something)."""


@dataclass(frozen=True)
class _Call(Generic[T]):
    """One request and how to read its answer; both clients send the same calls."""

    method: str
    path: str
    """Under ``/v1/tenants/{tenant}``, its segments already percent-encoded."""
    read: Callable[[Any], T]
    body: Any = None
    params: Mapping[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None
    """Set on mutations (every ``POST``, ``PUT``, ``PATCH``, ``DELETE`` but the batch)."""


class _Retry(Exception):
    """An ambiguous outcome the client may retry with the same key."""

    def __init__(self, final: ClientError) -> None:
        super().__init__(str(final))
        self.final = final


def _segment(value: str) -> str:
    return quote(value, safe="")


def _instant(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def _given(**values: Any) -> dict[str, Any]:
    """The fields the caller gave (``None`` leaves the server's default)."""
    return {name: value for name, value in values.items() if value is not None}


def _model(kind: type[R]) -> Callable[[Any], R]:
    return kind.model_validate


def _nothing(_: Any) -> None:
    return None


def _mutation(
    method: str,
    path: str,
    read: Callable[[Any], T],
    key: str | None,
    body: Any = None,
    params: Mapping[str, Any] | None = None,
) -> _Call[T]:
    return _Call(method, path, read, body, params or {}, key or new_idempotency_key())


def _read(path: str, read: Callable[[Any], T], **params: Any) -> _Call[T]:
    return _Call("GET", path, read, params=_given(**params))


def _judge(call: _Call[T], response: httpx.Response) -> T:
    """The answer read, or the error raised; ``_Retry`` for an ambiguous one."""
    key = call.idempotency_key
    status = response.status_code
    if status == 202 and key is not None and _in_progress(response):
        raise _Retry(InProgress("202 in_progress: not decided yet", idempotency_key=key))
    if status >= 400:
        error = api_error(response, key)
        raise _Retry(error) if status in RETRIED_STATUSES else error
    data = None if status == 204 or not response.content else response.json()
    answer = call.read(data)
    if isinstance(answer, Resource) and key is not None:
        answer._idempotency_key = key
    return answer


def _in_progress(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("status") == "in_progress"


def _unreachable(call: _Call[Any], error: httpx.TransportError) -> _Retry:
    message = f"no answer from punctual for {call.method} {call.path}: {error}"
    return _Retry(ServerUnreachable(message, idempotency_key=call.idempotency_key))


def _start_body(
    workflow: str,
    input: Any,
    business_request_id: str,
    start_at: datetime | str,
    workload_class: str,
    time_zone: str | None,
    attributes: Mapping[str, str] | None,
    traceparent: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workflow": workflow,
        "input": input,
        "business_request_id": business_request_id,
        "start_at": _instant(start_at),
        "workload_class": workload_class,
    }
    optional = {"time_zone": time_zone, "attributes": attributes, "traceparent": traceparent}
    body.update({k: dict(v) if k == "attributes" else v for k, v in _given(**optional).items()})
    return body


def _batch_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """A batch item in the wire form ``create_start`` sends (defaults, ISO instants), with
    its own key (a new one when the item has none)."""
    body: dict[str, Any] = {"workload_class": "standard"}
    for name, value in item.items():
        if value is None and name in ("time_zone", "attributes", "traceparent", "idempotency_key"):
            continue
        body[name] = value.isoformat() if isinstance(value, datetime) else value
    body.setdefault("idempotency_key", new_idempotency_key())
    return body


def _batch_results(sent: list[dict[str, Any]]) -> Callable[[Any], list[BatchItemResult]]:
    def read(data: Any) -> list[BatchItemResult]:
        results = BatchCreateResult.model_validate(data).items
        for item, result in zip(sent, results, strict=True):
            result._idempotency_key = item["idempotency_key"]
            if isinstance(result.body, Resource):
                result.body._idempotency_key = item["idempotency_key"]
        return results

    return read


def _jsonable(value: Any) -> Any:
    """``value`` with its instants (nested ones too) as RFC 3339 text."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {name: _jsonable(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


def _schedule_body(**fields: Any) -> dict[str, Any]:
    jsonable: dict[str, Any] = _jsonable(fields)
    return jsonable


def _webhook_changes(url: Any, events: Any, secret: Any) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if url is not KEEP:
        body["url"] = url
    if events is not KEEP:
        body["events"] = list(events) if events is not None else None
    if secret is not KEEP:
        body["secret"] = secret
    return body


def _preview_params(
    cron: str | None,
    time_zone: str | None,
    dst_gap: str | None,
    dst_overlap: str | None,
    interval_ms: int | None,
    starts_at: datetime | str | None,
    after: datetime | str | None,
    count: int | None,
) -> dict[str, Any]:
    return _given(
        cron=cron,
        time_zone=time_zone,
        dst_gap=dst_gap,
        dst_overlap=dst_overlap,
        interval_ms=interval_ms,
        starts_at=_instant(starts_at),
        count=count,
        **{"from": _instant(after)},
    )


def _trigger(schedule_id: str, overlap: str | None, key: str | None) -> _Call[Occurrence]:
    path = f"/schedules/{_segment(schedule_id)}/trigger"
    return _mutation("POST", path, _model(Occurrence), key, _given(overlap=overlap))


def _backfill(
    schedule_id: str,
    after: datetime | str,
    to: datetime | str,
    overlap: str | None,
    key: str | None,
) -> _Call[BackfillResult]:
    path = f"/schedules/{_segment(schedule_id)}/backfill"
    body = {"from": _instant(after), "to": _instant(to), **_given(overlap=overlap)}
    return _mutation("POST", path, _model(BackfillResult), key, body)


def _by_name(name: str) -> str:
    return f"/schedules/by-name/{_segment(name)}"


def _put_by_name(
    name: str, schedule: Mapping[str, Any], version: int | None, key: str | None
) -> _Call[ScheduleUpsert]:
    body = {**_schedule_body(**schedule), **_given(version=version)}
    return _mutation("PUT", _by_name(name), _model(ScheduleUpsert), key, body)


def _plan_by_name(name: str, schedule: Mapping[str, Any]) -> _Call[UpsertPlan]:
    """The dry run stores nothing, so it needs no key."""
    params = {"dry_run": "true"}
    return _Call("PUT", _by_name(name), _model(UpsertPlan), _schedule_body(**schedule), params)


def _place_hold(
    subject_kind: str, reason: str, subject_id: str | None, key: str | None
) -> _Call[Hold]:
    body = _given(subject_kind=subject_kind, subject_id=subject_id, reason=reason)
    return _mutation("POST", "/holds", _model(Hold), key, body)


def _list_holds(active: bool, limit: int | None, cursor: str | None) -> _Call[HoldPage]:
    flag = "true" if active else None
    return _read("/holds", _model(HoldPage), active=flag, limit=limit, cursor=cursor)


def _delay(backoff: float, attempt: int) -> float:
    return float(min(backoff * 2**attempt, 5.0))


class _Base:
    def __init__(self, tenant: str, retries: int, backoff: float) -> None:
        if retries < 0:
            raise ValueError("retries must be 0 or more")
        self.tenant = tenant
        self.retries = retries
        """How many times an ambiguous failure is retried (same key) before it is raised."""
        self.backoff = backoff

    def _url(self, call: _Call[Any]) -> str:
        return f"/v1/tenants/{_segment(self.tenant)}{call.path}"

    def _headers(self, call: _Call[Any]) -> dict[str, str]:
        return {"Idempotency-Key": call.idempotency_key} if call.idempotency_key else {}

    def _request(self, call: _Call[Any]) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "method": call.method,
            "url": self._url(call),
            "params": call.params,
            "headers": self._headers(call),
        }
        if call.body is not None:
            arguments["json"] = call.body
        return arguments


def _client_headers(token: str, headers: Mapping[str, str] | None) -> dict[str, str]:
    return {**(headers or {}), "Authorization": f"Bearer {token}"}


class PunctualClient(_Base):
    """punctual's tenant API over HTTP, for programs and the command line.

    ``retries`` ambiguous failures (connection error, timeout, 5xx, ``202 in_progress``)
    are retried with the same key, waiting ``backoff`` seconds, doubled each time.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        tenant: str = "default",
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.2,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(tenant, retries, backoff)
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=_client_headers(token, headers),
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> PunctualClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call[T]) -> T:
        for attempt in range(self.retries + 1):
            try:
                try:
                    response = self._http.request(**self._request(call))
                except httpx.TransportError as error:
                    raise _unreachable(call, error) from error
                return _judge(call, response)
            except _Retry as retry:
                if attempt == self.retries:
                    raise retry.final from retry.__cause__
            time.sleep(_delay(self.backoff, attempt))
        raise AssertionError("the retry loop always returns or raises")

    # ----------------------------------------------------------------------- starts

    def create_start(
        self,
        *,
        workflow: str,
        input: Any,
        business_request_id: str,
        start_at: datetime | str,
        workload_class: str = "standard",
        time_zone: str | None = None,
        attributes: Mapping[str, str] | None = None,
        traceparent: str | None = None,
        idempotency_key: str | None = None,
    ) -> Start:
        """Schedule one run of ``workflow`` at ``start_at`` (with a UTC offset)."""
        body = _start_body(
            workflow,
            input,
            business_request_id,
            start_at,
            workload_class,
            time_zone,
            attributes,
            traceparent,
        )
        return self._send(
            _mutation("POST", "/scheduled-starts", _model(Start), idempotency_key, body)
        )

    def create_starts_batch(self, items: Sequence[Mapping[str, Any]]) -> list[BatchItemResult]:
        """Up to 500 creates in one request (OS-11); each item is a ``create_start`` call's
        keyword arguments (an item without ``idempotency_key`` gets a new one). Per item, in
        order: ``status`` and ``body`` (the start, an ``Error``, or ``InProgress``) and its
        ``idempotency_key``. Items still in progress are retried (decided ones replay);
        whole-request errors raise."""
        sent = [_batch_item(item) for item in items]
        call = _Call("POST", "/scheduled-starts/batch", _batch_results(sent), {"items": sent})
        for attempt in range(self.retries):
            results = self._send(call)
            if all(result.status != 202 for result in results):
                return results
            time.sleep(_delay(self.backoff, attempt))
        return self._send(call)

    def get_start(self, start_id: str) -> Start:
        return self._send(_read(f"/scheduled-starts/{_segment(start_id)}", _model(Start)))

    def list_starts(
        self,
        *,
        state: str | None = None,
        workflow: str | None = None,
        business_request_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> StartPage:
        return self._send(
            _read(
                "/scheduled-starts",
                _model(StartPage),
                state=state,
                workflow=workflow,
                business_request_id=business_request_id,
                limit=limit,
                cursor=cursor,
            )
        )

    def reschedule_start(
        self,
        start_id: str,
        *,
        version: int,
        start_at: datetime | str,
        time_zone: str | None = None,
        idempotency_key: str | None = None,
    ) -> Start:
        body = _given(version=version, start_at=_instant(start_at), time_zone=time_zone)
        path = f"/scheduled-starts/{_segment(start_id)}/reschedule"
        return self._send(_mutation("POST", path, _model(Start), idempotency_key, body))

    def cancel_start(
        self,
        start_id: str,
        *,
        version: int,
        reason: str | None = None,
        idempotency_key: str | None = None,
    ) -> Start:
        body = _given(version=version, reason=reason)
        path = f"/scheduled-starts/{_segment(start_id)}/cancel"
        return self._send(_mutation("POST", path, _model(Start), idempotency_key, body))

    # ----------------------------------------------------------------------- runs

    def get_run(self, run_id: str) -> Run:
        return self._send(_read(f"/runs/{_segment(run_id)}", _model(Run)))

    def list_runs(
        self,
        *,
        workflow: str | None = None,
        state: str | None = None,
        origin_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RunPage:
        return self._send(
            _read(
                "/runs",
                _model(RunPage),
                workflow=workflow,
                state=state,
                origin_id=origin_id,
                limit=limit,
                cursor=cursor,
            )
        )

    def cancel_run(self, run_id: str, *, idempotency_key: str | None = None) -> Run:
        """Cooperative: the workflow sees ``cancel_requested``."""
        path = f"/runs/{_segment(run_id)}/cancel"
        return self._send(_mutation("POST", path, _model(Run), idempotency_key))

    def terminate_run(self, run_id: str, *, idempotency_key: str | None = None) -> Run:
        """Immediate: recorded ``terminated`` at once."""
        path = f"/runs/{_segment(run_id)}/terminate"
        return self._send(_mutation("POST", path, _model(Run), idempotency_key))

    # ----------------------------------------------------------------------- schedules

    def create_schedule(
        self,
        *,
        name: str,
        workflow: str,
        input: Any,
        spec: Mapping[str, Any],
        overlap: str,
        missed: str,
        max_catch_up: int | None = None,
        catch_up_window: float | None = None,
        misfire_grace_ms: int | None = None,
        enabled: bool | None = None,
        version_policy: str | None = None,
        workload_class: str | None = None,
        regression: Mapping[str, Any] | None = None,
        end_at: datetime | str | None = None,
        max_occurrences: int | None = None,
        jitter_ms: int | None = None,
        source: str | None = None,
        idempotency_key: str | None = None,
    ) -> Schedule:
        """``spec`` is ``{"cron", "time_zone"?, "dst_gap"?, "dst_overlap"?}`` or
        ``{"interval_ms", "starts_at"?}``; options left ``None`` take the server's defaults."""
        body = _schedule_body(
            name=name,
            workflow=workflow,
            input=input,
            spec=spec,
            overlap=overlap,
            missed=missed,
            **_given(
                max_catch_up=max_catch_up,
                catch_up_window=catch_up_window,
                misfire_grace_ms=misfire_grace_ms,
                enabled=enabled,
                version_policy=version_policy,
                workload_class=workload_class,
                regression=regression,
                end_at=end_at,
                max_occurrences=max_occurrences,
                jitter_ms=jitter_ms,
                source=source,
            ),
        )
        return self._send(_mutation("POST", "/schedules", _model(Schedule), idempotency_key, body))

    def get_schedule(self, schedule_id: str) -> Schedule:
        return self._send(_read(f"/schedules/{_segment(schedule_id)}", _model(Schedule)))

    def list_schedules(
        self, *, limit: int | None = None, cursor: str | None = None, source: str | None = None
    ) -> SchedulePage:
        """``source``: only the schedules last applied from that file (RS-9e)."""
        read = _read("/schedules", _model(SchedulePage), limit=limit, cursor=cursor, source=source)
        return self._send(read)

    def update_schedule(
        self,
        schedule_id: str,
        *,
        version: int,
        idempotency_key: str | None = None,
        **changes: Any,
    ) -> Schedule:
        """Change the given fields (``PATCH``): content edits need the creator or an admin,
        ``enabled`` alone any member."""
        body = {"version": version, **_schedule_body(**changes)}
        path = f"/schedules/{_segment(schedule_id)}"
        return self._send(_mutation("PATCH", path, _model(Schedule), idempotency_key, body))

    def pause_schedule(
        self, schedule_id: str, *, version: int, idempotency_key: str | None = None
    ) -> Schedule:
        path = f"/schedules/{_segment(schedule_id)}/pause"
        body = {"version": version}
        return self._send(_mutation("POST", path, _model(Schedule), idempotency_key, body))

    def resume_schedule(
        self, schedule_id: str, *, version: int, idempotency_key: str | None = None
    ) -> Schedule:
        path = f"/schedules/{_segment(schedule_id)}/resume"
        body = {"version": version}
        return self._send(_mutation("POST", path, _model(Schedule), idempotency_key, body))

    def delete_schedule(
        self, schedule_id: str, *, version: int, idempotency_key: str | None = None
    ) -> None:
        """Cancels its unstarted occurrences; runs are left alone."""
        path = f"/schedules/{_segment(schedule_id)}"
        params = {"version": version}
        self._send(_mutation("DELETE", path, _nothing, idempotency_key, params=params))

    def transfer_schedule(
        self, schedule_id: str, *, version: int, to: str, idempotency_key: str | None = None
    ) -> Schedule:
        """Admin: ``to`` (a member or admin) becomes the schedule's creator (CR-8)."""
        path = f"/schedules/{_segment(schedule_id)}/transfer"
        body = {"version": version, "to": to}
        return self._send(_mutation("POST", path, _model(Schedule), idempotency_key, body))

    def list_occurrences(
        self,
        schedule_id: str,
        *,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> OccurrencePage:
        path = f"/schedules/{_segment(schedule_id)}/occurrences"
        return self._send(
            _read(path, _model(OccurrencePage), state=state, limit=limit, cursor=cursor)
        )

    def cancel_occurrence(
        self,
        schedule_id: str,
        occurrence_id: str,
        *,
        version: int,
        idempotency_key: str | None = None,
    ) -> Occurrence:
        path = f"/schedules/{_segment(schedule_id)}/occurrences/{_segment(occurrence_id)}/cancel"
        body = {"version": version}
        return self._send(_mutation("POST", path, _model(Occurrence), idempotency_key, body))

    def preview_schedule(
        self,
        *,
        cron: str | None = None,
        time_zone: str | None = None,
        dst_gap: str | None = None,
        dst_overlap: str | None = None,
        interval_ms: int | None = None,
        starts_at: datetime | str | None = None,
        after: datetime | str | None = None,
        count: int | None = None,
    ) -> SchedulePreview:
        """The fire times strictly after ``after`` (the API's ``from``; default now)."""
        params = _preview_params(
            cron, time_zone, dst_gap, dst_overlap, interval_ms, starts_at, after, count
        )
        return self._send(_read("/schedule-preview", _model(SchedulePreview), **params))

    def trigger_schedule(
        self, schedule_id: str, *, overlap: str | None = None, idempotency_key: str | None = None
    ) -> Occurrence:
        """One occurrence now (RS-9a), under ``overlap`` or the schedule's policy."""
        return self._send(_trigger(schedule_id, overlap, idempotency_key))

    def backfill_schedule(
        self,
        schedule_id: str,
        *,
        after: datetime | str,
        to: datetime | str,
        overlap: str | None = None,
        idempotency_key: str | None = None,
    ) -> BackfillResult:
        """The fire times in ``(after, to]`` (the API's ``from`` and ``to``, RS-9b)."""
        return self._send(_backfill(schedule_id, after, to, overlap, idempotency_key))

    def get_schedule_by_name(self, name: str) -> Schedule:
        return self._send(_read(_by_name(name), _model(Schedule)))

    def put_schedule_by_name(
        self,
        name: str,
        schedule: Mapping[str, Any],
        *,
        version: int | None = None,
        idempotency_key: str | None = None,
    ) -> ScheduleUpsert:
        """Create, update or leave alone the schedule ``name`` (RS-9e); ``schedule`` is the
        create body (an omitted ``enabled`` keeps the schedule's own)."""
        return self._send(_put_by_name(name, schedule, version, idempotency_key))

    def plan_schedule_by_name(self, name: str, schedule: Mapping[str, Any]) -> UpsertPlan:
        """What ``put_schedule_by_name`` would do, storing nothing (``?dry_run=true``)."""
        return self._send(_plan_by_name(name, schedule))

    # ----------------------------------------------------------------------- tenant

    def list_definitions(self) -> DefinitionPage:
        return self._send(_read("/definitions", _model(DefinitionPage)))

    def add_member(self, *, subject: str, role: str, idempotency_key: str | None = None) -> Member:
        """Admin: add a member, or change its role (``admin``, ``member``, ``viewer``)."""
        body = {"subject": subject, "role": role}
        return self._send(_mutation("POST", "/members", _model(Member), idempotency_key, body))

    def remove_member(self, subject: str, *, idempotency_key: str | None = None) -> None:
        """Admin: revokes its tokens and auto-disables the schedules it created."""
        path = f"/members/{_segment(subject)}"
        self._send(_mutation("DELETE", path, _nothing, idempotency_key))

    def create_token(
        self,
        *,
        subject: str,
        expires_at: datetime | str | None = None,
        idempotency_key: str | None = None,
    ) -> IssuedToken:
        """Admin: a token for a member; its secret is in this answer only."""
        body = _given(subject=subject, expires_at=_instant(expires_at))
        return self._send(_mutation("POST", "/tokens", _model(IssuedToken), idempotency_key, body))

    def list_tokens(self, *, limit: int | None = None, cursor: str | None = None) -> TokenPage:
        return self._send(_read("/tokens", _model(TokenPage), limit=limit, cursor=cursor))

    def revoke_token(self, token_id: str, *, idempotency_key: str | None = None) -> None:
        path = f"/tokens/{_segment(token_id)}"
        self._send(_mutation("DELETE", path, _nothing, idempotency_key))

    def health(self) -> Health:
        return self._send(_read("/health", _model(Health)))

    def acknowledge_finding(
        self, finding_id: str, *, idempotency_key: str | None = None
    ) -> Finding:
        path = f"/health/findings/{_segment(finding_id)}/acknowledge"
        return self._send(_mutation("POST", path, _model(Finding), idempotency_key))

    # ----------------------------------------------------------------------- notifications

    def list_notifications(
        self, *, unread: bool = False, limit: int | None = None, cursor: str | None = None
    ) -> NotificationPage:
        """The caller's own notifications, newest first."""
        return self._send(
            _read(
                "/notifications",
                _model(NotificationPage),
                unread="true" if unread else None,
                limit=limit,
                cursor=cursor,
            )
        )

    def mark_notification_read(
        self, notification_id: str, *, idempotency_key: str | None = None
    ) -> Notification:
        path = f"/notifications/{_segment(notification_id)}/read"
        return self._send(_mutation("POST", path, _model(Notification), idempotency_key))

    # ----------------------------------------------------------------------- webhooks

    def create_webhook(
        self,
        *,
        url: str,
        events: Sequence[str] | None = None,
        secret: str | None = None,
        idempotency_key: str | None = None,
    ) -> Webhook:
        """Admin. ``events=None`` subscribes to every kind; the secret is never returned."""
        body = _given(url=url, events=list(events) if events is not None else None, secret=secret)
        return self._send(_mutation("POST", "/webhooks", _model(Webhook), idempotency_key, body))

    def list_webhooks(self, *, limit: int | None = None, cursor: str | None = None) -> WebhookPage:
        return self._send(_read("/webhooks", _model(WebhookPage), limit=limit, cursor=cursor))

    def get_webhook(self, webhook_id: str) -> Webhook:
        return self._send(_read(f"/webhooks/{_segment(webhook_id)}", _model(Webhook)))

    def update_webhook(
        self,
        webhook_id: str,
        *,
        url: str | Literal[_Keep.KEEP] = KEEP,
        events: Sequence[str] | Literal[_Keep.KEEP] | None = KEEP,
        secret: str | Literal[_Keep.KEEP] | None = KEEP,
        idempotency_key: str | None = None,
    ) -> Webhook:
        """Change what is given: a new ``secret`` rotates it, ``secret=None`` removes it;
        ``events=None`` subscribes to every kind."""
        body = _webhook_changes(url, events, secret)
        path = f"/webhooks/{_segment(webhook_id)}"
        return self._send(_mutation("PATCH", path, _model(Webhook), idempotency_key, body))

    def delete_webhook(self, webhook_id: str, *, idempotency_key: str | None = None) -> None:
        path = f"/webhooks/{_segment(webhook_id)}"
        self._send(_mutation("DELETE", path, _nothing, idempotency_key))

    def test_webhook(self, webhook_id: str, *, idempotency_key: str | None = None) -> Queued:
        """Queue a ``test`` event to this webhook."""
        path = f"/webhooks/{_segment(webhook_id)}/test"
        return self._send(_mutation("POST", path, _model(Queued), idempotency_key))

    def list_deliveries(
        self, webhook_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> DeliveryPage:
        """Newest first."""
        path = f"/webhooks/{_segment(webhook_id)}/deliveries"
        return self._send(_read(path, _model(DeliveryPage), limit=limit, cursor=cursor))

    def redeliver(
        self, webhook_id: str, delivery_id: str, *, idempotency_key: str | None = None
    ) -> Queued:
        """A new delivery of the same event (same ``event_id``)."""
        path = f"/webhooks/{_segment(webhook_id)}/deliveries/{_segment(delivery_id)}/redeliver"
        return self._send(_mutation("POST", path, _model(Queued), idempotency_key))

    # ----------------------------------------------------------------------- holds, audit

    def place_hold(
        self,
        *,
        subject_kind: str,
        reason: str,
        subject_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Hold:
        """Admin: keep a ``start``, ``schedule``, ``run`` or the whole ``tenant`` (no
        ``subject_id``) from retention until released."""
        return self._send(_place_hold(subject_kind, reason, subject_id, idempotency_key))

    def list_holds(
        self, *, active: bool = False, limit: int | None = None, cursor: str | None = None
    ) -> HoldPage:
        """Admin, newest first; ``active=True`` lists only holds not yet released."""
        return self._send(_list_holds(active, limit, cursor))

    def release_hold(self, hold_id: str, *, idempotency_key: str | None = None) -> Hold:
        """Admin (idempotent); a hold the host placed is ``PermissionDeniedError``."""
        path = f"/holds/{_segment(hold_id)}/release"
        return self._send(_mutation("POST", path, _model(Hold), idempotency_key))

    def list_audit_entries(
        self,
        *,
        subject_id: str | None = None,
        actor: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> AuditPage:
        """Admin: the tenant's audit log, newest first, filtered by exact matches."""
        return self._send(
            _read(
                "/audit",
                _model(AuditPage),
                subject_id=subject_id,
                actor=actor,
                limit=limit,
                cursor=cursor,
            )
        )


class AsyncPunctualClient(_Base):
    """``PunctualClient`` for asyncio: the same methods, awaited.

    ``retries`` ambiguous failures (connection error, timeout, 5xx, ``202 in_progress``)
    are retried with the same key, waiting ``backoff`` seconds, doubled each time.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        tenant: str = "default",
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.2,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(tenant, retries, backoff)
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=_client_headers(token, headers),
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncPunctualClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call[T]) -> T:
        for attempt in range(self.retries + 1):
            try:
                try:
                    response = await self._http.request(**self._request(call))
                except httpx.TransportError as error:
                    raise _unreachable(call, error) from error
                return _judge(call, response)
            except _Retry as retry:
                if attempt == self.retries:
                    raise retry.final from retry.__cause__
            await asyncio.sleep(_delay(self.backoff, attempt))
        raise AssertionError("the retry loop always returns or raises")

    # ----------------------------------------------------------------------- starts

    async def create_start(
        self,
        *,
        workflow: str,
        input: Any,
        business_request_id: str,
        start_at: datetime | str,
        workload_class: str = "standard",
        time_zone: str | None = None,
        attributes: Mapping[str, str] | None = None,
        traceparent: str | None = None,
        idempotency_key: str | None = None,
    ) -> Start:
        """Schedule one run of ``workflow`` at ``start_at`` (with a UTC offset)."""
        body = _start_body(
            workflow,
            input,
            business_request_id,
            start_at,
            workload_class,
            time_zone,
            attributes,
            traceparent,
        )
        return await self._send(
            _mutation("POST", "/scheduled-starts", _model(Start), idempotency_key, body)
        )

    async def create_starts_batch(
        self, items: Sequence[Mapping[str, Any]]
    ) -> list[BatchItemResult]:
        """Up to 500 creates in one request (OS-11); each item is a ``create_start`` call's
        keyword arguments (an item without ``idempotency_key`` gets a new one). Per item, in
        order: ``status`` and ``body`` (the start, an ``Error``, or ``InProgress``) and its
        ``idempotency_key``. Items still in progress are retried (decided ones replay);
        whole-request errors raise."""
        sent = [_batch_item(item) for item in items]
        call = _Call("POST", "/scheduled-starts/batch", _batch_results(sent), {"items": sent})
        for attempt in range(self.retries):
            results = await self._send(call)
            if all(result.status != 202 for result in results):
                return results
            await asyncio.sleep(_delay(self.backoff, attempt))
        return await self._send(call)

    async def get_start(self, start_id: str) -> Start:
        return await self._send(_read(f"/scheduled-starts/{_segment(start_id)}", _model(Start)))

    async def list_starts(
        self,
        *,
        state: str | None = None,
        workflow: str | None = None,
        business_request_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> StartPage:
        return await self._send(
            _read(
                "/scheduled-starts",
                _model(StartPage),
                state=state,
                workflow=workflow,
                business_request_id=business_request_id,
                limit=limit,
                cursor=cursor,
            )
        )

    async def reschedule_start(
        self,
        start_id: str,
        *,
        version: int,
        start_at: datetime | str,
        time_zone: str | None = None,
        idempotency_key: str | None = None,
    ) -> Start:
        body = _given(version=version, start_at=_instant(start_at), time_zone=time_zone)
        path = f"/scheduled-starts/{_segment(start_id)}/reschedule"
        return await self._send(_mutation("POST", path, _model(Start), idempotency_key, body))

    async def cancel_start(
        self,
        start_id: str,
        *,
        version: int,
        reason: str | None = None,
        idempotency_key: str | None = None,
    ) -> Start:
        body = _given(version=version, reason=reason)
        path = f"/scheduled-starts/{_segment(start_id)}/cancel"
        return await self._send(_mutation("POST", path, _model(Start), idempotency_key, body))

    # ----------------------------------------------------------------------- runs

    async def get_run(self, run_id: str) -> Run:
        return await self._send(_read(f"/runs/{_segment(run_id)}", _model(Run)))

    async def list_runs(
        self,
        *,
        workflow: str | None = None,
        state: str | None = None,
        origin_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RunPage:
        return await self._send(
            _read(
                "/runs",
                _model(RunPage),
                workflow=workflow,
                state=state,
                origin_id=origin_id,
                limit=limit,
                cursor=cursor,
            )
        )

    async def cancel_run(self, run_id: str, *, idempotency_key: str | None = None) -> Run:
        """Cooperative: the workflow sees ``cancel_requested``."""
        path = f"/runs/{_segment(run_id)}/cancel"
        return await self._send(_mutation("POST", path, _model(Run), idempotency_key))

    async def terminate_run(self, run_id: str, *, idempotency_key: str | None = None) -> Run:
        """Immediate: recorded ``terminated`` at once."""
        path = f"/runs/{_segment(run_id)}/terminate"
        return await self._send(_mutation("POST", path, _model(Run), idempotency_key))

    # ----------------------------------------------------------------------- schedules

    async def create_schedule(
        self,
        *,
        name: str,
        workflow: str,
        input: Any,
        spec: Mapping[str, Any],
        overlap: str,
        missed: str,
        max_catch_up: int | None = None,
        catch_up_window: float | None = None,
        misfire_grace_ms: int | None = None,
        enabled: bool | None = None,
        version_policy: str | None = None,
        workload_class: str | None = None,
        regression: Mapping[str, Any] | None = None,
        end_at: datetime | str | None = None,
        max_occurrences: int | None = None,
        jitter_ms: int | None = None,
        source: str | None = None,
        idempotency_key: str | None = None,
    ) -> Schedule:
        """``spec`` is ``{"cron", "time_zone"?, "dst_gap"?, "dst_overlap"?}`` or
        ``{"interval_ms", "starts_at"?}``; options left ``None`` take the server's defaults."""
        body = _schedule_body(
            name=name,
            workflow=workflow,
            input=input,
            spec=spec,
            overlap=overlap,
            missed=missed,
            **_given(
                max_catch_up=max_catch_up,
                catch_up_window=catch_up_window,
                misfire_grace_ms=misfire_grace_ms,
                enabled=enabled,
                version_policy=version_policy,
                workload_class=workload_class,
                regression=regression,
                end_at=end_at,
                max_occurrences=max_occurrences,
                jitter_ms=jitter_ms,
                source=source,
            ),
        )
        return await self._send(
            _mutation("POST", "/schedules", _model(Schedule), idempotency_key, body)
        )

    async def get_schedule(self, schedule_id: str) -> Schedule:
        return await self._send(_read(f"/schedules/{_segment(schedule_id)}", _model(Schedule)))

    async def list_schedules(
        self, *, limit: int | None = None, cursor: str | None = None, source: str | None = None
    ) -> SchedulePage:
        """``source``: only the schedules last applied from that file (RS-9e)."""
        read = _read("/schedules", _model(SchedulePage), limit=limit, cursor=cursor, source=source)
        return await self._send(read)

    async def update_schedule(
        self,
        schedule_id: str,
        *,
        version: int,
        idempotency_key: str | None = None,
        **changes: Any,
    ) -> Schedule:
        """Change the given fields (``PATCH``): content edits need the creator or an admin,
        ``enabled`` alone any member."""
        body = {"version": version, **_schedule_body(**changes)}
        path = f"/schedules/{_segment(schedule_id)}"
        return await self._send(_mutation("PATCH", path, _model(Schedule), idempotency_key, body))

    async def pause_schedule(
        self, schedule_id: str, *, version: int, idempotency_key: str | None = None
    ) -> Schedule:
        path = f"/schedules/{_segment(schedule_id)}/pause"
        body = {"version": version}
        return await self._send(_mutation("POST", path, _model(Schedule), idempotency_key, body))

    async def resume_schedule(
        self, schedule_id: str, *, version: int, idempotency_key: str | None = None
    ) -> Schedule:
        path = f"/schedules/{_segment(schedule_id)}/resume"
        body = {"version": version}
        return await self._send(_mutation("POST", path, _model(Schedule), idempotency_key, body))

    async def delete_schedule(
        self, schedule_id: str, *, version: int, idempotency_key: str | None = None
    ) -> None:
        """Cancels its unstarted occurrences; runs are left alone."""
        path = f"/schedules/{_segment(schedule_id)}"
        params = {"version": version}
        await self._send(_mutation("DELETE", path, _nothing, idempotency_key, params=params))

    async def transfer_schedule(
        self, schedule_id: str, *, version: int, to: str, idempotency_key: str | None = None
    ) -> Schedule:
        """Admin: ``to`` (a member or admin) becomes the schedule's creator (CR-8)."""
        path = f"/schedules/{_segment(schedule_id)}/transfer"
        body = {"version": version, "to": to}
        return await self._send(_mutation("POST", path, _model(Schedule), idempotency_key, body))

    async def list_occurrences(
        self,
        schedule_id: str,
        *,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> OccurrencePage:
        path = f"/schedules/{_segment(schedule_id)}/occurrences"
        return await self._send(
            _read(path, _model(OccurrencePage), state=state, limit=limit, cursor=cursor)
        )

    async def cancel_occurrence(
        self,
        schedule_id: str,
        occurrence_id: str,
        *,
        version: int,
        idempotency_key: str | None = None,
    ) -> Occurrence:
        path = f"/schedules/{_segment(schedule_id)}/occurrences/{_segment(occurrence_id)}/cancel"
        body = {"version": version}
        return await self._send(_mutation("POST", path, _model(Occurrence), idempotency_key, body))

    async def preview_schedule(
        self,
        *,
        cron: str | None = None,
        time_zone: str | None = None,
        dst_gap: str | None = None,
        dst_overlap: str | None = None,
        interval_ms: int | None = None,
        starts_at: datetime | str | None = None,
        after: datetime | str | None = None,
        count: int | None = None,
    ) -> SchedulePreview:
        """The fire times strictly after ``after`` (the API's ``from``; default now)."""
        params = _preview_params(
            cron, time_zone, dst_gap, dst_overlap, interval_ms, starts_at, after, count
        )
        return await self._send(_read("/schedule-preview", _model(SchedulePreview), **params))

    async def trigger_schedule(
        self, schedule_id: str, *, overlap: str | None = None, idempotency_key: str | None = None
    ) -> Occurrence:
        """One occurrence now (RS-9a), under ``overlap`` or the schedule's policy."""
        return await self._send(_trigger(schedule_id, overlap, idempotency_key))

    async def backfill_schedule(
        self,
        schedule_id: str,
        *,
        after: datetime | str,
        to: datetime | str,
        overlap: str | None = None,
        idempotency_key: str | None = None,
    ) -> BackfillResult:
        """The fire times in ``(after, to]`` (the API's ``from`` and ``to``, RS-9b)."""
        return await self._send(_backfill(schedule_id, after, to, overlap, idempotency_key))

    async def get_schedule_by_name(self, name: str) -> Schedule:
        return await self._send(_read(_by_name(name), _model(Schedule)))

    async def put_schedule_by_name(
        self,
        name: str,
        schedule: Mapping[str, Any],
        *,
        version: int | None = None,
        idempotency_key: str | None = None,
    ) -> ScheduleUpsert:
        """Create, update or leave alone the schedule ``name`` (RS-9e); ``schedule`` is the
        create body (an omitted ``enabled`` keeps the schedule's own)."""
        return await self._send(_put_by_name(name, schedule, version, idempotency_key))

    async def plan_schedule_by_name(self, name: str, schedule: Mapping[str, Any]) -> UpsertPlan:
        """What ``put_schedule_by_name`` would do, storing nothing (``?dry_run=true``)."""
        return await self._send(_plan_by_name(name, schedule))

    # ----------------------------------------------------------------------- tenant

    async def list_definitions(self) -> DefinitionPage:
        return await self._send(_read("/definitions", _model(DefinitionPage)))

    async def add_member(
        self, *, subject: str, role: str, idempotency_key: str | None = None
    ) -> Member:
        """Admin: add a member, or change its role (``admin``, ``member``, ``viewer``)."""
        body = {"subject": subject, "role": role}
        return await self._send(
            _mutation("POST", "/members", _model(Member), idempotency_key, body)
        )

    async def remove_member(self, subject: str, *, idempotency_key: str | None = None) -> None:
        """Admin: revokes its tokens and auto-disables the schedules it created."""
        path = f"/members/{_segment(subject)}"
        await self._send(_mutation("DELETE", path, _nothing, idempotency_key))

    async def create_token(
        self,
        *,
        subject: str,
        expires_at: datetime | str | None = None,
        idempotency_key: str | None = None,
    ) -> IssuedToken:
        """Admin: a token for a member; its secret is in this answer only."""
        body = _given(subject=subject, expires_at=_instant(expires_at))
        return await self._send(
            _mutation("POST", "/tokens", _model(IssuedToken), idempotency_key, body)
        )

    async def list_tokens(
        self, *, limit: int | None = None, cursor: str | None = None
    ) -> TokenPage:
        return await self._send(_read("/tokens", _model(TokenPage), limit=limit, cursor=cursor))

    async def revoke_token(self, token_id: str, *, idempotency_key: str | None = None) -> None:
        path = f"/tokens/{_segment(token_id)}"
        await self._send(_mutation("DELETE", path, _nothing, idempotency_key))

    async def health(self) -> Health:
        return await self._send(_read("/health", _model(Health)))

    async def acknowledge_finding(
        self, finding_id: str, *, idempotency_key: str | None = None
    ) -> Finding:
        path = f"/health/findings/{_segment(finding_id)}/acknowledge"
        return await self._send(_mutation("POST", path, _model(Finding), idempotency_key))

    # ----------------------------------------------------------------------- notifications

    async def list_notifications(
        self, *, unread: bool = False, limit: int | None = None, cursor: str | None = None
    ) -> NotificationPage:
        """The caller's own notifications, newest first."""
        return await self._send(
            _read(
                "/notifications",
                _model(NotificationPage),
                unread="true" if unread else None,
                limit=limit,
                cursor=cursor,
            )
        )

    async def mark_notification_read(
        self, notification_id: str, *, idempotency_key: str | None = None
    ) -> Notification:
        path = f"/notifications/{_segment(notification_id)}/read"
        return await self._send(_mutation("POST", path, _model(Notification), idempotency_key))

    # ----------------------------------------------------------------------- webhooks

    async def create_webhook(
        self,
        *,
        url: str,
        events: Sequence[str] | None = None,
        secret: str | None = None,
        idempotency_key: str | None = None,
    ) -> Webhook:
        """Admin. ``events=None`` subscribes to every kind; the secret is never returned."""
        body = _given(url=url, events=list(events) if events is not None else None, secret=secret)
        return await self._send(
            _mutation("POST", "/webhooks", _model(Webhook), idempotency_key, body)
        )

    async def list_webhooks(
        self, *, limit: int | None = None, cursor: str | None = None
    ) -> WebhookPage:
        return await self._send(_read("/webhooks", _model(WebhookPage), limit=limit, cursor=cursor))

    async def get_webhook(self, webhook_id: str) -> Webhook:
        return await self._send(_read(f"/webhooks/{_segment(webhook_id)}", _model(Webhook)))

    async def update_webhook(
        self,
        webhook_id: str,
        *,
        url: str | Literal[_Keep.KEEP] = KEEP,
        events: Sequence[str] | Literal[_Keep.KEEP] | None = KEEP,
        secret: str | Literal[_Keep.KEEP] | None = KEEP,
        idempotency_key: str | None = None,
    ) -> Webhook:
        """Change what is given: a new ``secret`` rotates it, ``secret=None`` removes it;
        ``events=None`` subscribes to every kind."""
        body = _webhook_changes(url, events, secret)
        path = f"/webhooks/{_segment(webhook_id)}"
        return await self._send(_mutation("PATCH", path, _model(Webhook), idempotency_key, body))

    async def delete_webhook(self, webhook_id: str, *, idempotency_key: str | None = None) -> None:
        path = f"/webhooks/{_segment(webhook_id)}"
        await self._send(_mutation("DELETE", path, _nothing, idempotency_key))

    async def test_webhook(self, webhook_id: str, *, idempotency_key: str | None = None) -> Queued:
        """Queue a ``test`` event to this webhook."""
        path = f"/webhooks/{_segment(webhook_id)}/test"
        return await self._send(_mutation("POST", path, _model(Queued), idempotency_key))

    async def list_deliveries(
        self, webhook_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> DeliveryPage:
        """Newest first."""
        path = f"/webhooks/{_segment(webhook_id)}/deliveries"
        return await self._send(_read(path, _model(DeliveryPage), limit=limit, cursor=cursor))

    async def redeliver(
        self, webhook_id: str, delivery_id: str, *, idempotency_key: str | None = None
    ) -> Queued:
        """A new delivery of the same event (same ``event_id``)."""
        path = f"/webhooks/{_segment(webhook_id)}/deliveries/{_segment(delivery_id)}/redeliver"
        return await self._send(_mutation("POST", path, _model(Queued), idempotency_key))

    # ----------------------------------------------------------------------- holds, audit

    async def place_hold(
        self,
        *,
        subject_kind: str,
        reason: str,
        subject_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Hold:
        """Admin: keep a ``start``, ``schedule``, ``run`` or the whole ``tenant`` (no
        ``subject_id``) from retention until released."""
        return await self._send(_place_hold(subject_kind, reason, subject_id, idempotency_key))

    async def list_holds(
        self, *, active: bool = False, limit: int | None = None, cursor: str | None = None
    ) -> HoldPage:
        """Admin, newest first; ``active=True`` lists only holds not yet released."""
        return await self._send(_list_holds(active, limit, cursor))

    async def release_hold(self, hold_id: str, *, idempotency_key: str | None = None) -> Hold:
        """Admin (idempotent); a hold the host placed is ``PermissionDeniedError``."""
        path = f"/holds/{_segment(hold_id)}/release"
        return await self._send(_mutation("POST", path, _model(Hold), idempotency_key))

    async def list_audit_entries(
        self,
        *,
        subject_id: str | None = None,
        actor: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> AuditPage:
        """Admin: the tenant's audit log, newest first, filtered by exact matches."""
        return await self._send(
            _read(
                "/audit",
                _model(AuditPage),
                subject_id=subject_id,
                actor=actor,
                limit=limit,
                cursor=cursor,
            )
        )


def retry_until_decided(call: Any, *, attempts: int = 10, delay: float = 0.5, **kwargs: Any) -> Any:
    """Repeat the *same* call (same key, same body) while the outcome is undecided:
    ``InProgress``, ``ServerUnreachable``, ``429`` or ``503``. Decided answers return or
    raise. (The client already retries the first of these itself; this keeps trying longer,
    e.g. while a quota drains.)"""
    for attempt in range(attempts):
        try:
            return call(**kwargs)
        except (InProgress, ServerUnreachable, httpx.TransportError):
            pass
        except ApiError as error:
            if error.status not in (429, 503):
                raise
        time.sleep(delay * (attempt + 1))
    return call(**kwargs)
