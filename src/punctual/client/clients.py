"""The two clients: one sends a call and blocks, the other awaits it. Both retry an
ambiguous failure with the same key; every method is bound from ``calls``, so the two
offer the same calls with the same signatures."""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from punctual.client import calls
from punctual.client.errors import (
    ApiError,
    ClientError,
    InProgress,
    ServerUnreachable,
    api_error,
)
from punctual.client.wire import Call, escaped
from punctual.resources import BatchItemResult, Resource, Run, Start

P = ParamSpec("P")
T = TypeVar("T")
RETRIED_STATUSES = frozenset({500, 502, 503, 504})
"""5xx answers the client retries with the same key; 429 is decided (not recorded) and
raised at once, for the caller to retry later."""


class _Retry(Exception):
    """An ambiguous outcome the client may retry with the same key."""

    def __init__(self, final: ClientError) -> None:
        super().__init__(str(final))
        self.final = final


def _judge(call: Call[T], response: httpx.Response) -> T:
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


def _unreachable(call: Call[Any], error: httpx.TransportError) -> _Retry:
    message = f"no answer from punctual for {call.method} {call.path}: {error}"
    return _Retry(ServerUnreachable(message, idempotency_key=call.idempotency_key))


RUN_ENDED = frozenset({"completed", "failed", "canceled", "terminated", "timed_out"})
START_SETTLED = frozenset({"dispatched", "failed", "canceled", "skipped"})


def _until(deadline: float, poll: float, waiting: str) -> float:
    """How long to sleep before asking again; ``TimeoutError`` once the deadline passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"{waiting}: the wait timed out (it goes on; ask again later)")
    return min(poll, left)


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

    def _url(self, call: Call[Any]) -> str:
        return f"/v1/tenants/{escaped(self.tenant)}{call.path}"

    def _headers(self, call: Call[Any]) -> dict[str, str]:
        return {"Idempotency-Key": call.idempotency_key} if call.idempotency_key else {}

    def _request(self, call: Call[Any]) -> dict[str, Any]:
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


def _as_method(method: Callable[..., Any], build: Callable[..., Any]) -> None:
    """Give a bound call the builder's name, docstring and signature (with ``self``), for
    ``help()`` and editors."""
    functools.update_wrapper(method, build)
    signature = inspect.signature(build)
    receiver = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[receiver, *signature.parameters.values()]
    )


def _blocking(build: Callable[P, Call[T]]) -> Callable[Concatenate[PunctualClient, P], T]:
    def method(self: PunctualClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._send(build(*args, **kwargs))

    _as_method(method, build)
    return method


def _awaited(
    build: Callable[P, Call[T]],
) -> Callable[Concatenate[AsyncPunctualClient, P], Awaitable[T]]:
    async def method(self: AsyncPunctualClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._send(build(*args, **kwargs))

    _as_method(method, build)
    return method


class PunctualClient(_Base, AbstractContextManager["PunctualClient"]):
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

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call[T]) -> T:
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
    def create_starts_batch(self, items: Sequence[Mapping[str, Any]]) -> list[BatchItemResult]:
        call = calls.create_starts_batch(items)
        for attempt in range(self.retries):
            results = self._send(call)
            if all(result.status != 202 for result in results):
                return results
            time.sleep(_delay(self.backoff, attempt))
        return self._send(call)

    create_starts_batch.__doc__ = calls.create_starts_batch.__doc__

    create_start = _blocking(calls.create_start)
    get_start = _blocking(calls.get_start)
    list_starts = _blocking(calls.list_starts)
    reschedule_start = _blocking(calls.reschedule_start)
    cancel_start = _blocking(calls.cancel_start)

    def wait_for_start(self, start_id: str, *, timeout: float = 60.0, poll: float = 0.5) -> Start:
        """The start once it is settled (dispatched, failed, canceled or skipped);
        ``TimeoutError`` after ``timeout`` seconds (the start goes on regardless)."""
        deadline = time.monotonic() + timeout
        while (start := self.get_start(start_id)).state not in START_SETTLED:
            time.sleep(_until(deadline, poll, f"start {start_id} is still {start.state}"))
        return start

    def wait_for_run(self, run_id: str, *, timeout: float = 60.0, poll: float = 0.5) -> Run:
        """The run once it has ended (completed, failed, canceled, terminated, timed out);
        ``TimeoutError`` after ``timeout`` seconds (the run goes on regardless)."""
        deadline = time.monotonic() + timeout
        while (run := self.get_run(run_id)).state not in RUN_ENDED:
            time.sleep(_until(deadline, poll, f"run {run_id} is still {run.state}"))
        return run

    # ----------------------------------------------------------------------- runs
    get_run = _blocking(calls.get_run)
    list_runs = _blocking(calls.list_runs)
    cancel_run = _blocking(calls.cancel_run)
    terminate_run = _blocking(calls.terminate_run)

    # ----------------------------------------------------------------------- schedules
    create_schedule = _blocking(calls.create_schedule)
    get_schedule = _blocking(calls.get_schedule)
    list_schedules = _blocking(calls.list_schedules)
    update_schedule = _blocking(calls.update_schedule)
    pause_schedule = _blocking(calls.pause_schedule)
    resume_schedule = _blocking(calls.resume_schedule)
    delete_schedule = _blocking(calls.delete_schedule)
    transfer_schedule = _blocking(calls.transfer_schedule)
    list_occurrences = _blocking(calls.list_occurrences)
    audit_schedule = _blocking(calls.audit_schedule)
    cancel_occurrence = _blocking(calls.cancel_occurrence)
    preview_schedule = _blocking(calls.preview_schedule)
    trigger_schedule = _blocking(calls.trigger_schedule)
    backfill_schedule = _blocking(calls.backfill_schedule)
    get_schedule_by_name = _blocking(calls.get_schedule_by_name)
    put_schedule_by_name = _blocking(calls.put_schedule_by_name)
    plan_schedule_by_name = _blocking(calls.plan_schedule_by_name)

    # ----------------------------------------------------------------------- tenant
    list_definitions = _blocking(calls.list_definitions)
    add_member = _blocking(calls.add_member)
    list_members = _blocking(calls.list_members)
    remove_member = _blocking(calls.remove_member)
    create_token = _blocking(calls.create_token)
    list_tokens = _blocking(calls.list_tokens)
    revoke_token = _blocking(calls.revoke_token)
    health = _blocking(calls.health)
    acknowledge_finding = _blocking(calls.acknowledge_finding)

    # ----------------------------------------------------------------------- notifications
    list_notifications = _blocking(calls.list_notifications)
    mark_notification_read = _blocking(calls.mark_notification_read)

    # ----------------------------------------------------------------------- webhooks
    create_webhook = _blocking(calls.create_webhook)
    list_webhooks = _blocking(calls.list_webhooks)
    get_webhook = _blocking(calls.get_webhook)
    update_webhook = _blocking(calls.update_webhook)
    delete_webhook = _blocking(calls.delete_webhook)
    test_webhook = _blocking(calls.test_webhook)
    list_deliveries = _blocking(calls.list_deliveries)
    redeliver = _blocking(calls.redeliver)

    # ----------------------------------------------------------------------- holds, audit
    place_hold = _blocking(calls.place_hold)
    list_holds = _blocking(calls.list_holds)
    release_hold = _blocking(calls.release_hold)
    list_audit_entries = _blocking(calls.list_audit_entries)


class AsyncPunctualClient(_Base, AbstractAsyncContextManager["AsyncPunctualClient"]):
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

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call[T]) -> T:
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
    async def create_starts_batch(
        self, items: Sequence[Mapping[str, Any]]
    ) -> list[BatchItemResult]:
        call = calls.create_starts_batch(items)
        for attempt in range(self.retries):
            results = await self._send(call)
            if all(result.status != 202 for result in results):
                return results
            await asyncio.sleep(_delay(self.backoff, attempt))
        return await self._send(call)

    create_starts_batch.__doc__ = calls.create_starts_batch.__doc__

    create_start = _awaited(calls.create_start)
    get_start = _awaited(calls.get_start)
    list_starts = _awaited(calls.list_starts)
    reschedule_start = _awaited(calls.reschedule_start)
    cancel_start = _awaited(calls.cancel_start)

    # ----------------------------------------------------------------------- runs
    get_run = _awaited(calls.get_run)
    list_runs = _awaited(calls.list_runs)

    async def wait_for_start(
        self, start_id: str, *, timeout: float = 60.0, poll: float = 0.5
    ) -> Start:
        """As ``PunctualClient.wait_for_start``, awaiting."""
        deadline = time.monotonic() + timeout
        while (start := await self.get_start(start_id)).state not in START_SETTLED:
            await asyncio.sleep(_until(deadline, poll, f"start {start_id} is still {start.state}"))
        return start

    async def wait_for_run(self, run_id: str, *, timeout: float = 60.0, poll: float = 0.5) -> Run:
        """As ``PunctualClient.wait_for_run``, awaiting."""
        deadline = time.monotonic() + timeout
        while (run := await self.get_run(run_id)).state not in RUN_ENDED:
            await asyncio.sleep(_until(deadline, poll, f"run {run_id} is still {run.state}"))
        return run

    cancel_run = _awaited(calls.cancel_run)
    terminate_run = _awaited(calls.terminate_run)

    # ----------------------------------------------------------------------- schedules
    create_schedule = _awaited(calls.create_schedule)
    get_schedule = _awaited(calls.get_schedule)
    list_schedules = _awaited(calls.list_schedules)
    update_schedule = _awaited(calls.update_schedule)
    pause_schedule = _awaited(calls.pause_schedule)
    resume_schedule = _awaited(calls.resume_schedule)
    delete_schedule = _awaited(calls.delete_schedule)
    transfer_schedule = _awaited(calls.transfer_schedule)
    list_occurrences = _awaited(calls.list_occurrences)
    audit_schedule = _awaited(calls.audit_schedule)
    cancel_occurrence = _awaited(calls.cancel_occurrence)
    preview_schedule = _awaited(calls.preview_schedule)
    trigger_schedule = _awaited(calls.trigger_schedule)
    backfill_schedule = _awaited(calls.backfill_schedule)
    get_schedule_by_name = _awaited(calls.get_schedule_by_name)
    put_schedule_by_name = _awaited(calls.put_schedule_by_name)
    plan_schedule_by_name = _awaited(calls.plan_schedule_by_name)

    # ----------------------------------------------------------------------- tenant
    list_definitions = _awaited(calls.list_definitions)
    add_member = _awaited(calls.add_member)
    list_members = _awaited(calls.list_members)
    remove_member = _awaited(calls.remove_member)
    create_token = _awaited(calls.create_token)
    list_tokens = _awaited(calls.list_tokens)
    revoke_token = _awaited(calls.revoke_token)
    health = _awaited(calls.health)
    acknowledge_finding = _awaited(calls.acknowledge_finding)

    # ----------------------------------------------------------------------- notifications
    list_notifications = _awaited(calls.list_notifications)
    mark_notification_read = _awaited(calls.mark_notification_read)

    # ----------------------------------------------------------------------- webhooks
    create_webhook = _awaited(calls.create_webhook)
    list_webhooks = _awaited(calls.list_webhooks)
    get_webhook = _awaited(calls.get_webhook)
    update_webhook = _awaited(calls.update_webhook)
    delete_webhook = _awaited(calls.delete_webhook)
    test_webhook = _awaited(calls.test_webhook)
    list_deliveries = _awaited(calls.list_deliveries)
    redeliver = _awaited(calls.redeliver)

    # ----------------------------------------------------------------------- holds, audit
    place_hold = _awaited(calls.place_hold)
    list_holds = _awaited(calls.list_holds)
    release_hold = _awaited(calls.release_hold)
    list_audit_entries = _awaited(calls.list_audit_entries)


def iterate(list_page: Callable[..., Any], **filters: Any) -> Iterator[Any]:
    """Every item of a list, page after page (``next_cursor`` followed):
    ``iterate(client.list_runs, state="failed")``."""
    cursor = None
    while True:
        page = list_page(**filters, cursor=cursor)
        yield from page.items
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


async def aiterate(list_page: Callable[..., Awaitable[Any]], **filters: Any) -> AsyncIterator[Any]:
    """As ``iterate``, for ``AsyncPunctualClient``: ``async for run in aiterate(...)``."""
    cursor = None
    while True:
        page = await list_page(**filters, cursor=cursor)
        for item in page.items:
            yield item
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


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
