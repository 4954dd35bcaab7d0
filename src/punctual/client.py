"""A typed HTTP client for punctual's API (IF-2), for Python programs in other processes.

Every mutation takes an ``idempotency_key``: persist it with the request before sending
and reuse it when retrying, so an ambiguous failure (timeout, dropped connection,
``202 in_progress``) can be retried blindly and still acts once. ``retry_until_decided``
does that loop for you.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import Enum
from types import TracebackType
from typing import Any, Literal

import httpx


class ApiError(Exception):
    """An error answer from punctual, with its stable code."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any]) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details


class InProgress(Exception):
    """``202 in_progress``: retry the same request with the same key to learn the outcome."""


class _Keep(Enum):
    KEEP = "keep"


KEEP = _Keep.KEEP
"""``update_webhook``'s default for a field left as it is (``None`` means something)."""


class PunctualClient:
    def __init__(
        self, base_url: str, token: str, tenant: str = "default", *, timeout: float = 30.0
    ) -> None:
        self.tenant = tenant
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
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

    def _url(self, suffix: str) -> str:
        return f"/v1/tenants/{self.tenant}{suffix}"

    def _answer(self, response: httpx.Response) -> Any:
        if response.status_code == 202:
            raise InProgress(response.text)
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
            except (ValueError, KeyError, TypeError):
                error = {"code": "http_error", "message": response.text, "details": {}}
            raise ApiError(
                response.status_code, error["code"], error["message"], error.get("details", {})
            )
        return None if response.status_code == 204 else response.json()

    def _get(self, suffix: str, **params: Any) -> Any:
        query = {k: v for k, v in params.items() if v is not None}
        return self._answer(self._http.get(self._url(suffix), params=query))

    def _mutate(self, method: str, suffix: str, key: str, body: Any = None, **params: Any) -> Any:
        response = self._http.request(
            method,
            self._url(suffix),
            json=body,
            params={k: v for k, v in params.items() if v is not None},
            headers={"Idempotency-Key": key},
        )
        return self._answer(response)

    def create_start(
        self,
        *,
        idempotency_key: str,
        workflow: str,
        input: Any,
        business_request_id: str,
        start_at: datetime | str,
        workload_class: str = "standard",
        time_zone: str | None = None,
        attributes: dict[str, str] | None = None,
        traceparent: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "workflow": workflow,
            "input": input,
            "business_request_id": business_request_id,
            "start_at": start_at.isoformat() if isinstance(start_at, datetime) else start_at,
            "workload_class": workload_class,
        }
        optional = {"time_zone": time_zone, "attributes": attributes, "traceparent": traceparent}
        body.update({k: v for k, v in optional.items() if v is not None})
        result: dict[str, Any] = self._mutate("POST", "/scheduled-starts", idempotency_key, body)
        return result

    def create_starts_batch(self, items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Up to 500 creates in one request (OS-11); each item is a ``create_start`` call's
        keyword arguments (``idempotency_key`` included). Returns per item, in order,
        ``{"status", "body"}``: 201 and the start, an error envelope, or 202 in progress.
        Retrying the same items (same keys and bodies) is always safe: decided items
        replay. Whole-request errors raise ``ApiError``."""
        body = {"items": [_batch_item(item) for item in items]}
        response = self._http.post(self._url("/scheduled-starts/batch"), json=body)
        result: dict[str, Any] = self._answer(response)
        answers: list[dict[str, Any]] = result["items"]
        return answers

    def get_start(self, start_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._get(f"/scheduled-starts/{start_id}")
        return result

    def list_starts(
        self,
        *,
        state: str | None = None,
        workflow: str | None = None,
        business_request_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._get(
            "/scheduled-starts",
            state=state,
            workflow=workflow,
            business_request_id=business_request_id,
            limit=limit,
            cursor=cursor,
        )
        return result

    def reschedule_start(
        self,
        start_id: str,
        *,
        idempotency_key: str,
        version: int,
        start_at: datetime | str,
        time_zone: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "version": version,
            "start_at": start_at.isoformat() if isinstance(start_at, datetime) else start_at,
        }
        if time_zone is not None:
            body["time_zone"] = time_zone
        result: dict[str, Any] = self._mutate(
            "POST", f"/scheduled-starts/{start_id}/reschedule", idempotency_key, body
        )
        return result

    def cancel_start(
        self, start_id: str, *, idempotency_key: str, version: int, reason: str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"version": version}
        if reason is not None:
            body["reason"] = reason
        result: dict[str, Any] = self._mutate(
            "POST", f"/scheduled-starts/{start_id}/cancel", idempotency_key, body
        )
        return result

    def get_run(self, run_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._get(f"/runs/{run_id}")
        return result

    def list_runs(self, **filters: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._get("/runs", **filters)
        return result

    def cancel_run(self, run_id: str, *, idempotency_key: str) -> dict[str, Any]:
        result: dict[str, Any] = self._mutate("POST", f"/runs/{run_id}/cancel", idempotency_key)
        return result

    def terminate_run(self, run_id: str, *, idempotency_key: str) -> dict[str, Any]:
        result: dict[str, Any] = self._mutate("POST", f"/runs/{run_id}/terminate", idempotency_key)
        return result

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._get("/health")
        return result

    def transfer_schedule(
        self, schedule_id: str, *, idempotency_key: str, version: int, to: str
    ) -> dict[str, Any]:
        """Admin: ``to`` (a member or admin) becomes the schedule's creator (CR-8)."""
        result: dict[str, Any] = self._mutate(
            "POST",
            f"/schedules/{schedule_id}/transfer",
            idempotency_key,
            {"version": version, "to": to},
        )
        return result

    def list_notifications(
        self, *, unread: bool = False, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """The caller's own notifications, newest first."""
        result: dict[str, Any] = self._get(
            "/notifications", unread="true" if unread else None, limit=limit, cursor=cursor
        )
        return result

    def mark_notification_read(
        self, notification_id: str, *, idempotency_key: str
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._mutate(
            "POST", f"/notifications/{notification_id}/read", idempotency_key
        )
        return result

    def create_webhook(
        self,
        *,
        idempotency_key: str,
        url: str,
        events: Sequence[str] | None = None,
        secret: str | None = None,
    ) -> dict[str, Any]:
        """Admin. ``events=None`` subscribes to every kind; the secret is never returned."""
        body: dict[str, Any] = {"url": url}
        if events is not None:
            body["events"] = list(events)
        if secret is not None:
            body["secret"] = secret
        result: dict[str, Any] = self._mutate("POST", "/webhooks", idempotency_key, body)
        return result

    def list_webhooks(self, *, limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._get("/webhooks", limit=limit, cursor=cursor)
        return result

    def delete_webhook(self, webhook_id: str, *, idempotency_key: str) -> None:
        self._mutate("DELETE", f"/webhooks/{webhook_id}", idempotency_key)

    def update_webhook(
        self,
        webhook_id: str,
        *,
        idempotency_key: str,
        url: str | Literal[_Keep.KEEP] = KEEP,
        events: Sequence[str] | Literal[_Keep.KEEP] | None = KEEP,
        secret: str | Literal[_Keep.KEEP] | None = KEEP,
    ) -> dict[str, Any]:
        """Change what is given: a new ``secret`` rotates it, ``secret=None`` removes it;
        ``events=None`` subscribes to every kind."""
        body: dict[str, Any] = {}
        if url is not KEEP:
            body["url"] = url
        if events is not KEEP:
            body["events"] = list(events) if events is not None else None
        if secret is not KEEP:
            body["secret"] = secret
        result: dict[str, Any] = self._mutate(
            "PATCH", f"/webhooks/{webhook_id}", idempotency_key, body
        )
        return result

    def test_webhook(self, webhook_id: str, *, idempotency_key: str) -> dict[str, Any]:
        """Queue a ``test`` event to this webhook: ``{"status": "queued", "event_id", ...}``."""
        response = self._http.post(
            self._url(f"/webhooks/{webhook_id}/test"), headers={"Idempotency-Key": idempotency_key}
        )
        return self._queued(response)

    def list_deliveries(
        self, webhook_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """Newest first."""
        result: dict[str, Any] = self._get(
            f"/webhooks/{webhook_id}/deliveries", limit=limit, cursor=cursor
        )
        return result

    def redeliver(
        self, webhook_id: str, delivery_id: str, *, idempotency_key: str
    ) -> dict[str, Any]:
        """A new delivery of the same event (same ``event_id``)."""
        response = self._http.post(
            self._url(f"/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver"),
            headers={"Idempotency-Key": idempotency_key},
        )
        return self._queued(response)

    def _queued(self, response: httpx.Response) -> dict[str, Any]:
        """A ``202`` that queued something is the answer; an undecided one raises."""
        if response.status_code == 202:
            try:
                body = response.json()
            except ValueError:
                body = None
            if isinstance(body, dict) and body.get("status") == "queued":
                return body
        result: dict[str, Any] = self._answer(response)
        return result


def _batch_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """A batch item in the wire form ``create_start`` sends (defaults, ISO instants)."""
    body: dict[str, Any] = {"workload_class": "standard"}
    for name, value in item.items():
        if value is None and name in ("time_zone", "attributes", "traceparent"):
            continue
        body[name] = value.isoformat() if isinstance(value, datetime) else value
    return body


def retry_until_decided(call: Any, *, attempts: int = 10, delay: float = 0.5, **kwargs: Any) -> Any:
    """Repeat the *same* call (same key, same body) while the outcome is undecided:
    ``202 in_progress``, ``429``, ``503`` or a network error. Decided answers return or raise.
    """
    for attempt in range(attempts):
        try:
            return call(**kwargs)
        except (InProgress, httpx.TransportError):
            pass
        except ApiError as error:
            if error.status not in (429, 503):
                raise
        time.sleep(delay * (attempt + 1))
    return call(**kwargs)
