"""A small HTTP test client over the in-process ASGI app, with tokens per principal."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.domain.permissions import Principal, Role
from punctual.usecases.tenancy import identity

UNDECIDED = {"status": "in_progress"}
DECIDED_WITHIN_SECONDS = 60.0


class Api:
    """Requests as one principal. A mutation without ``key`` gets a fresh random key, and
    one answered ``202 in_progress`` is resent with its key until it is decided (bounded),
    as API.md tells clients to: a loaded machine can outlast the bounded wait. A test of
    the bounded wait itself sends with ``once=True``."""

    def __init__(self, client: TestClient | httpx.Client, token: str, tenant: str) -> None:
        self.client = client
        self.token = token
        self.tenant = tenant

    def path(self, suffix: str) -> str:
        return f"/v1/tenants/{self.tenant}{suffix}"

    def headers(self, key: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.token}"}
        if key is not None:
            headers["Idempotency-Key"] = key
        return headers

    def get(self, suffix: str, **params: Any) -> httpx.Response:
        return self.client.get(self.path(suffix), headers=self.headers(), params=params)

    def post(
        self,
        suffix: str,
        body: Any = None,
        *,
        key: str | None = None,
        once: bool = False,
        **params: Any,
    ) -> httpx.Response:
        return self.send("POST", suffix, body, key=key, once=once, params=params)

    def put(
        self, suffix: str, body: Any, *, key: str | None = None, **params: Any
    ) -> httpx.Response:
        return self.send("PUT", suffix, body, key=key, params=params)

    def patch(
        self, suffix: str, body: Any, *, key: str | None = None, **params: Any
    ) -> httpx.Response:
        return self.send("PATCH", suffix, body, key=key, params=params)

    def delete(self, suffix: str, *, key: str | None = None, **params: Any) -> httpx.Response:
        return self.send("DELETE", suffix, None, key=key, params=params)

    def create_due(self, body: dict[str, Any]) -> httpx.Response:
        """Create a start due at once: ``start_at`` is the test's now. A loaded machine can
        delay the request past the allowed clock skew; the server then refuses it with
        ``start_at_in_past`` and stores nothing, so it is sent again with a new now and a
        new key (bounded), as a client scheduling "now" would."""
        deadline = time.monotonic() + DECIDED_WITHIN_SECONDS
        while True:
            now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
            response = self.post("/scheduled-starts", {**body, "start_at": now})
            if not _refused_as_past(response) or time.monotonic() >= deadline:
                return response

    def send(
        self,
        method: str,
        suffix: str,
        body: Any,
        *,
        key: str | None = None,
        once: bool = False,
        params: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """One mutation, resent with the same key while it is undecided (unless ``once``)."""
        headers = self.headers(key or secrets.token_hex(8))
        path = self.path(suffix)
        deadline = time.monotonic() + DECIDED_WITHIN_SECONDS
        while True:
            response = self.client.request(method, path, headers=headers, json=body, params=params)
            if once or not undecided(response) or time.monotonic() >= deadline:
                return response
            time.sleep(0.2)


def _refused_as_past(response: httpx.Response) -> bool:
    if response.status_code != 422:
        return False
    error = response.json().get("error", {})
    return bool(error.get("code") == "start_at_in_past")


def undecided(response: httpx.Response) -> bool:
    """``202 in_progress``: the mutation carries on and its key will say how it ended."""
    if response.status_code != 202:
        return False
    try:
        return bool(response.json() == UNDECIDED)
    except ValueError:
        return False


def member_api(
    system: bootstrap.Punctual,
    client: TestClient | httpx.Client,
    tenant: str = "acme",
    subject: str = "alice",
    role: Role = Role.MEMBER,
) -> Api:
    issued = identity.ensure_member_token(system.services, tenant, subject, role)
    return Api(client, issued.token, tenant)


@contextmanager
def in_process(system: bootstrap.Punctual) -> Iterator[TestClient]:
    with TestClient(system.http_app(), raise_server_exceptions=False) as client:
        yield client


def future(seconds: float = 3600) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def echo_start(start_at: str | None = None, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workflow": "echo",
        "input": {"message": "hello"},
        "business_request_id": "req-1",
        "start_at": start_at or future(),
        "workload_class": "standard",
    }
    body.update(overrides)
    return body


def register_demo(system: bootstrap.Punctual) -> None:
    """Register the demo app's definitions as a worker would, without starting one."""
    from punctual.ports.records import WorkerRecord
    from punctual.usecases.running.definitions import register_worker
    from punctual.worker.definitions import declared_definitions
    from punctual.workflows import load_app

    app = load_app("punctual.demo:app")
    now = system.services.clock.now()
    record = WorkerRecord(
        id="wrk_registration",
        engine="local",
        host="test",
        task_queues=["standard"],
        loaded=[(d.name, d.version, d.artifact) for d in app.definitions],
        slots=1,
        started_at=now,
        heartbeat_at=now,
        stopped_at=datetime(2000, 1, 1, tzinfo=UTC),
    )
    register_worker(system.services, record, declared_definitions(app))


def live_worker(system: bootstrap.Punctual) -> None:
    """Record a live worker with the demo versions loaded, so that dispatch can pin them
    without starting worker processes."""
    from punctual.ports.records import WorkerRecord
    from punctual.usecases.running.definitions import register_worker
    from punctual.worker.definitions import declared_definitions
    from punctual.workflows import load_app

    app = load_app("punctual.demo:app")
    now = system.services.clock.now()
    record = WorkerRecord(
        id="wrk_live_support",
        engine="local",
        host="test",
        task_queues=["interactive", "standard", "batch"],
        loaded=[(d.name, d.version, d.artifact) for d in app.definitions],
        slots=1,
        started_at=now,
        heartbeat_at=now,
        stopped_at=None,
    )
    register_worker(system.services, record, declared_definitions(app))


def enroll(system: bootstrap.Punctual, *principals: Principal) -> None:
    """Make principals that tests build by hand real members of their tenants: dispatch
    checks that a start's creator may still create runs (CR-3)."""
    now = system.services.clock.now()
    with system.store.transaction() as tx:
        for principal in principals:
            tx.identity.ensure_tenant(principal.tenant, now)
            tx.identity.upsert_member(principal.tenant, principal.subject, principal.role, now)
