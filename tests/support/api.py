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
from punctual.usecases import identity


class Api:
    """Requests as one principal; ``key=None`` on a mutation sends a fresh random key."""

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
        self, suffix: str, body: Any = None, *, key: str | None = None, **params: Any
    ) -> httpx.Response:
        return self.client.post(
            self.path(suffix),
            headers=self.headers(key or secrets.token_hex(8)),
            json=body,
            params=params,
        )

    def post_decided(
        self, suffix: str, body: Any, *, key: str | None = None, timeout: float = 40.0
    ) -> httpx.Response:
        """A mutation resent with its key while it answers ``202 in_progress`` (a loaded
        machine can outlast the bounded wait), as API.md tells clients to; bounded."""
        key = key or secrets.token_hex(8)
        deadline = time.monotonic() + timeout
        response = self.post(suffix, body, key=key)
        while response.status_code == 202 and time.monotonic() < deadline:
            time.sleep(0.2)
            response = self.post(suffix, body, key=key)
        return response

    def delete(self, suffix: str, *, key: str | None = None, **params: Any) -> httpx.Response:
        return self.client.delete(
            self.path(suffix), headers=self.headers(key or secrets.token_hex(8)), params=params
        )


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
    from punctual.usecases.definitions import register_worker
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
    from punctual.usecases.definitions import register_worker
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
