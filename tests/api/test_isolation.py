"""Tenant isolation on every route (SEC-2, IF-1) and bad input that changes nothing (SEC-4).

The isolation test walks the application's own route table, so a route added later is
covered the day it is added: if it takes a path parameter this file does not know, the
test fails and asks for a real tenant-A value for it.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.domain.permissions import Role
from punctual.ports.records import WorkerRecord
from punctual.usecases.outbound.outbox import NotificationEvent, notify
from punctual.usecases.running.definitions import register_worker
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.worker.definitions import declared_definitions
from punctual.workflows import load_app
from tests.conftest import FakeClock, make_settings
from tests.support.api import Api, echo_start, in_process, member_api

Response = httpx.Response | httpx2.Response
"""What the in-process TestClient (httpx2) or a real httpx client returns."""

A = "acme"
B = "beta"
GHOST = "ghost"
UNAUTHENTICATED_PATHS = {
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
}
SECRET_MARKER = "acme-confidential-7f3c"
PLACEHOLDER_PARAMS = {"occurrence_id"}
GET_QUERIES: dict[str, dict[str, Any]] = {
    # Read routes that need query parameters to answer 200 for their own tenant.
    "schedule-preview": {"cron": "0 9 * * *", "time_zone": "Europe/Berlin", "count": 3},
    # A schedule's audit (the tenant's audit log ignores them).
    "audit": {"from": "2026-11-29T00:00:00Z", "to": "2026-11-30T00:00:00Z"},
}


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def register_live_worker(system: bootstrap.Punctual) -> None:
    """Register the demo app's definitions with a worker that counts as live (no thread)."""
    app = load_app("punctual.demo:app")
    now = system.services.clock.now()
    record = WorkerRecord(
        id="wrk_isolation",
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


# --- route discovery ------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str


def _flatten(routes: Iterable[Any]) -> Iterator[Any]:
    """Routes of the app, with included routers expanded (FastAPI may include them lazily)."""
    for route in routes:
        expand = getattr(route, "effective_route_contexts", None)
        if callable(expand):
            yield from _flatten(expand())
        else:
            yield route


def endpoints(app: FastAPI) -> list[Endpoint]:
    found: set[Endpoint] = set()
    for route in _flatten(app.routes):
        path = getattr(route, "path", None)
        methods = getattr(route, "methods", None)
        assert isinstance(path, str), f"a route without a path: {route!r}"
        if methods is None:  # a mount (static files): must not hide API routes
            assert not path.startswith("/v1"), f"mounted app under the API: {path}"
            continue
        if path in UNAUTHENTICATED_PATHS:
            continue
        if path.startswith("/ui"):
            continue  # the operator page: a session cookie, not a bearer (test_ui_page.py)
        documented = re.sub(r"{(\w+):\w+}", r"{\1}", path)  # {name:path} is {name}
        found |= {Endpoint(m, documented) for m in methods if m != "HEAD"}
    # Cross-check against the published schema: nothing documented escapes the walk.
    for path, operations in app.openapi()["paths"].items():
        if path in UNAUTHENTICATED_PATHS:
            continue
        for method in operations:
            assert Endpoint(method.upper(), path) in found, f"{method} {path} not walked"
    return sorted(found, key=lambda e: (e.path, e.method))


def test_route_walk_finds_the_tenant_routes(system: bootstrap.Punctual) -> None:
    walked = endpoints(system.http_app())
    paths = {(e.method, e.path) for e in walked}
    for expected in [
        ("POST", "/v1/tenants/{tenant}/scheduled-starts"),
        ("GET", "/v1/tenants/{tenant}/scheduled-starts/{start_id}"),
        ("GET", "/v1/tenants/{tenant}/runs/{run_id}"),
        ("DELETE", "/v1/tenants/{tenant}/tokens/{token_id}"),
        ("POST", "/v1/tenants/{tenant}/health/findings/{finding_id}/acknowledge"),
    ]:
        assert expected in paths
    assert not any(e.path in UNAUTHENTICATED_PATHS for e in walked)


# --- tenant A's world -----------------------------------------------------------------------

SCHEDULE_BODY: dict[str, Any] = {
    "name": "acme-nightly",
    "workflow": "score",
    "input": {"score": 0.9},
    "spec": {"cron": "30 2 * * 1-5", "time_zone": "America/New_York"},
    "overlap": "skip",
    "missed": "catch_up",
    "max_catch_up": 10,
    "catch_up_window": 86400,
    "misfire_grace_ms": 60000,
    "enabled": True,
    "version_policy": "active_at_fire",
    "workload_class": "standard",
}


@dataclass
class World:
    system: bootstrap.Punctual
    clock: FakeClock
    client: TestClient
    a_admin: Api
    a_member: Api
    params: dict[str, str] = field(default_factory=dict)
    sensitive: set[str] = field(default_factory=set)


def _has_route(app: FastAPI, method: str, path: str) -> bool:
    return Endpoint(method, path) in set(endpoints(app))


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[World]:
    clock = FakeClock()
    system = bootstrap.build(make_settings(database_url, tmp_path), clock=clock)
    register_live_worker(system)
    try:
        with in_process(system) as client:
            a_admin = member_api(system, client, A, "root", Role.ADMIN)
            a_member = member_api(system, client, A, "alice", Role.MEMBER)
            w = World(system, clock, client, a_admin, a_member)
            now = clock.now()
            waiting = a_member.post(
                "/scheduled-starts",
                echo_start(
                    iso(now + timedelta(days=2)),
                    business_request_id=f"{SECRET_MARKER}-waiting",
                    attributes={"customer": SECRET_MARKER},
                    input={"message": SECRET_MARKER},
                ),
            )
            assert waiting.status_code == 201, waiting.text
            due = a_member.post(
                "/scheduled-starts",
                echo_start(iso(now + timedelta(seconds=60)), business_request_id="acme-due"),
            )
            assert due.status_code == 201, due.text
            clock.advance(120)
            register_live_worker(system)  # heartbeat now, so the worker still counts as live
            report = dispatch_due(system.services, "runner-test", 100)
            assert report.claimed == 1
            dispatched = a_member.get(f"/scheduled-starts/{due.json()['id']}").json()
            assert dispatched["state"] == "dispatched", dispatched
            run_id = dispatched["dispatch"]["run_id"]
            with system.store.transaction() as tx:
                tx.findings.raise_finding(
                    A, "test_finding", waiting.json()["id"], "error", SECRET_MARKER, clock.now()
                )
                (finding,) = tx.findings.find(A)
            tokens = a_admin.get("/tokens").json()["items"]
            member_token = next(i for i in tokens if i["subject"] == "alice")
            w.params = {
                "tenant": A,
                "start_id": waiting.json()["id"],
                "run_id": run_id,
                "subject": "alice",
                "token_id": member_token["id"],
                "finding_id": finding.id,
                "occurrence_id": "occ_placeholder",
            }
            made = a_member.post("/schedules", SCHEDULE_BODY)
            assert made.status_code == 201, made.text
            w.params["schedule_id"] = made.json()["id"]
            w.params["name"] = made.json()["name"]
            listed = a_member.get(f"/schedules/{made.json()['id']}/occurrences")
            if listed.status_code == 200 and listed.json()["items"]:
                w.params["occurrence_id"] = listed.json()["items"][0]["id"]
            with system.store.transaction() as tx:
                event = NotificationEvent(A, "regression", SECRET_MARKER, SECRET_MARKER)
                notify(system.services, tx, event, "alice", clock.now())
            (note,) = a_member.get("/notifications").json()["items"]
            hook = a_admin.post("/webhooks", {"url": "http://127.0.0.1:9/acme", "secret": "s"})
            assert hook.status_code == 201, hook.text
            tested = a_admin.post(f"/webhooks/{hook.json()['id']}/test")
            assert tested.status_code == 202, tested.text
            held = a_admin.post(
                "/holds",
                {"subject_kind": "start", "subject_id": waiting.json()["id"], "reason": "audit"},
            )
            assert held.status_code == 201, held.text
            w.params.update(
                notification_id=note["id"],
                webhook_id=hook.json()["id"],
                delivery_id=tested.json()["delivery_id"],
                hold_id=held.json()["id"],
            )
            w.sensitive = {
                SECRET_MARKER,
                waiting.json()["id"],
                due.json()["id"],
                run_id,
                finding.id,
                "acme-due",
                "root",
                "alice",
                a_admin.token,
                a_member.token,
                *(i["id"] for i in tokens),
                *(v for k, v in w.params.items() if k != "tenant" and k not in PLACEHOLDER_PARAMS),
            }
            yield w
    finally:
        system.close()


def _body_for(endpoint: Endpoint, world: World) -> Any:
    later = iso(world.clock.now() + timedelta(days=3))
    last = [part for part in endpoint.path.split("/") if part and not part.startswith("{")][-1]
    bodies: dict[str, Any] = {
        "scheduled-starts": echo_start(later, business_request_id="b-try"),
        "reschedule": {"version": 1, "start_at": later},
        "cancel": {"version": 1, "reason": "tenant B tries"},
        "members": {"subject": "alice", "role": "viewer"},
        "tokens": {"subject": "alice"},
        "schedules": {**SCHEDULE_BODY, "version": 1, "enabled": False},
    }
    return bodies.get(last, {"version": 1})


TIMER_WRITES = {"processes": {"heartbeat_at"}}
"""Columns the process itself refreshes on a timer, whatever a request does: the key watch
beats every ``codec.refresh_seconds``, so a walk slower than that (a loaded machine) sees
its own process's heartbeat move. Every other column of those tables is still compared."""


def _without_timer_writes(table: str, row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in TIMER_WRITES.get(table, set())}


def _snapshot(system: bootstrap.Punctual, *, skip_tenant: str) -> dict[str, list[str]]:
    """Every row of every table, except the rows the caller's own tenant owns."""
    out: dict[str, list[str]] = {}
    for name, rows in _rows(system).items():
        out[name] = _canonical([r for r in rows if r.get("tenant") != skip_tenant])
    return out


def _changes(before: dict[str, list[str]], after: dict[str, list[str]]) -> dict[str, Any]:
    """Per changed table, the rows that went and the rows that came: what to read first."""
    return {
        name: {
            "gone": sorted(set(before.get(name, [])) - set(rows)),
            "new": sorted(set(rows) - set(before.get(name, []))),
        }
        for name, rows in after.items()
        if rows != before.get(name)
    }


def _call(
    client: TestClient, token: str, endpoint: Endpoint, params: dict[str, str], body: Any
) -> tuple[Response, str]:
    path = endpoint.path
    for name in re.findall(r"{(\w+)(?::\w+)?}", path):
        path = re.sub(r"{" + name + r"(?::\w+)?}", params[name], path)
    headers = {"Authorization": f"Bearer {token}"}
    query: dict[str, Any] = dict(GET_QUERIES.get(endpoint.path.rsplit("/", 1)[-1], {}))
    content: bytes | None = None
    if endpoint.method in {"POST", "PATCH", "PUT", "DELETE"}:
        headers["Idempotency-Key"] = secrets.token_hex(12)
        if endpoint.method == "DELETE":
            query = {"version": 1}
        else:
            query = {}
            content = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
    response = client.request(endpoint.method, path, headers=headers, params=query, content=content)
    return response, path


@pytest.mark.parametrize("b_role", [Role.ADMIN, Role.VIEWER])
def test_other_tenant_gets_404_on_every_route(world: World, b_role: Role) -> None:
    system, client = world.system, world.client
    b = member_api(system, client, B, "bertha", b_role)
    walked = endpoints(system.http_app())
    assert len(walked) >= 12

    # Every known path parameter names a real resource of tenant A, and A can read it.
    for endpoint in walked:
        names = re.findall(r"{(\w+)(?::\w+)?}", endpoint.path)
        unknown = [n for n in names if n not in world.params]
        assert not unknown, (
            f"{endpoint.method} {endpoint.path}: give the isolation test a real tenant-A value "
            f"for {unknown}"
        )
        if endpoint.method == "GET" and not set(names) & PLACEHOLDER_PARAMS:
            own, _ = _call(client, world.a_admin.token, endpoint, world.params, None)
            assert own.status_code == 200, f"A cannot GET {endpoint.path}: {own.text}"

    before = _snapshot(system, skip_tenant=B)
    for endpoint in walked:
        body = _body_for(endpoint, world)
        response, path = _call(client, b.token, endpoint, world.params, body)
        where = f"{endpoint.method} {path}"
        if "{tenant}" in endpoint.path:
            assert response.status_code == 404, f"{where}: {response.status_code} {response.text}"
            assert response.json()["error"]["code"] == "not_found", where
            # A tenant that does not exist at all answers the same: no existence oracle.
            ghost_params = {**world.params, "tenant": GHOST}
            ghost, _ = _call(client, b.token, endpoint, ghost_params, body)
            assert ghost.status_code == 404, where
            assert ghost.json() == json.loads(response.text.replace(A, GHOST)), where
        else:
            assert response.status_code in (401, 403, 404), f"{where}: {response.text}"
        sent = path + json.dumps(body)
        leaked = [s for s in world.sensitive if s not in sent and s in response.text]
        assert not leaked, f"{where} leaked tenant A data {leaked}: {response.text}"
    after = _snapshot(system, skip_tenant=B)
    assert after == before, (
        f"a request of tenant B changed tenant A's (or global) data: {_changes(before, after)}"
    )

    # A is untouched and still works.
    start = world.a_member.get(f"/scheduled-starts/{world.params['start_id']}").json()
    assert (start["state"], start["version"]) == ("scheduled", 1)
    run = world.a_member.get(f"/runs/{world.params['run_id']}").json()
    assert run["state"] == "pending"
    assert world.a_member.get("/definitions").status_code == 200


def test_other_tenant_list_endpoints_show_nothing_of_a(world: World) -> None:
    """B's own lists are empty of A's resources (lists are scoped by the caller's tenant)."""
    b = member_api(world.system, world.client, B, "bertha", Role.ADMIN)
    for suffix in ("/scheduled-starts", "/runs", "/tokens", "/health", "/holds", "/audit"):
        response = b.get(suffix)
        assert response.status_code == 200, response.text
        leaked = [s for s in world.sensitive if s in response.text]
        assert not leaked, f"{suffix}: {leaked}"
    assert b.get("/scheduled-starts").json()["items"] == []
    assert b.get("/runs").json()["items"] == []
    assert b.get("/health").json()["findings"] == []


def test_other_tenant_cannot_replay_a_key_of_tenant_a(world: World) -> None:
    """Idempotency keys belong to (tenant, principal, key): B reusing A's key replays nothing."""
    key = "shared-key-1"
    later = iso(world.clock.now() + timedelta(days=1))
    made = world.a_member.post("/scheduled-starts", echo_start(later), key=key)
    assert made.status_code == 201
    b = member_api(world.system, world.client, B, "bertha", Role.MEMBER)
    direct = b.client.post(
        f"/v1/tenants/{A}/scheduled-starts",
        headers=b.headers(key),
        json=echo_start(later),
    )
    assert direct.status_code == 404, direct.text
    assert made.json()["id"] not in direct.text
    # In B's own tenant the same key is simply a new key: a new start, not A's.
    bruno = member_api(world.system, world.client, B, "bruno", Role.MEMBER)
    own = bruno.post("/scheduled-starts", echo_start(later), key=key)
    assert own.status_code == 201, own.text
    assert own.json()["id"] != made.json()["id"]
    assert own.json()["tenant"] == B


# --- SEC-4: bad input changes nothing -------------------------------------------------------

SMALL_BODY = 2048
SMALL_INPUT = 300


@pytest.fixture
def strict(database_url: str, tmp_path: Path) -> Iterator[bootstrap.Punctual]:
    settings = make_settings(
        database_url,
        tmp_path,
        max_body_bytes=SMALL_BODY,
        tenant_defaults={"max_input_bytes": SMALL_INPUT, "allowed_workload_classes": ["standard"]},
    )
    system = bootstrap.build(settings)
    register_live_worker(system)
    yield system
    system.close()


@pytest.fixture
def strict_client(strict: bootstrap.Punctual) -> Iterator[TestClient]:
    with in_process(strict) as client:
        yield client


@pytest.fixture
def alice(strict: bootstrap.Punctual, strict_client: TestClient) -> Api:
    return member_api(strict, strict_client, A, "alice", Role.MEMBER)


@pytest.fixture
def root(strict: bootstrap.Punctual, strict_client: TestClient) -> Api:
    return member_api(strict, strict_client, A, "root", Role.ADMIN)


def _rows(system: bootstrap.Punctual) -> dict[str, list[dict[str, Any]]]:
    with system.store.engine.connect() as conn:
        return {
            table.name: [
                _without_timer_writes(table.name, dict(r))
                for r in conn.execute(sa.select(table)).mappings()
            ]
            for table in t.metadata.sorted_tables
        }


def _canonical(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(row, default=str, sort_keys=True) for row in rows)


def _key_row(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["tenant"], row["principal"], row["key"])


def assert_refused_without_change(
    system: bootstrap.Punctual, before: dict[str, list[dict[str, Any]]], response: Response
) -> None:
    """Nothing changed, except that a deterministic 4xx may be recorded against its key
    (API.md: decided outcomes, deterministic 4xx included, are replayed)."""
    assert 400 <= response.status_code < 500, response.text
    body = response.json()
    assert body["error"]["code"] and body["error"]["message"], body
    after = _rows(system)
    for name, rows in after.items():
        if name != "idempotency_keys":
            then, now = _canonical(before[name]), _canonical(rows)
            assert now == then, f"{name} changed: {_changes({name: then}, {name: now})}"
    old = {_key_row(r): r for r in before["idempotency_keys"]}
    for row in after["idempotency_keys"]:
        if _key_row(row) in old:
            assert row == old[_key_row(row)]
            continue
        assert row["state"] == "done", row
        assert row["status_code"] == response.status_code, row
        assert row["resource_id"] is None, row
    for name in ("starts", "members", "tokens", "runs"):
        assert name in after


def _post_raw(
    api: Api, suffix: str, content: bytes | Iterator[bytes], key: str | None = None
) -> Response:
    headers = {**api.headers(key or secrets.token_hex(8)), "Content-Type": "application/json"}
    return api.client.post(api.path(suffix), headers=headers, content=content)


def _future(system: bootstrap.Punctual, seconds: float = 3600) -> str:
    return iso(system.services.clock.now() + timedelta(seconds=seconds))


def _nested(depth: int) -> bytes:
    return b'{"workflow": "echo", "input": ' + b"[" * depth + b"]" * depth + b"}"


MALFORMED: dict[str, bytes] = {
    "truncated": b'{"workflow": "echo",',
    "trailing comma": b'{"workflow": "echo",}',
    "single quotes": b"{'workflow': 'echo'}",
    "not json": b"workflow=echo",
    "array": b"[1, 2]",
    "null": b"null",
    "string": b'"hello"',
    "number": b"42",
    "empty": b"",
    "whitespace": b"   ",
    "invalid utf-8": b'{"workflow": "\xff\xfe"}',
    "NaN": b'{"workflow": "echo", "input": {"message": NaN}}',
    "deeply nested": _nested(1000),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_bodies_get_4xx_and_change_nothing(
    strict: bootstrap.Punctual, alice: Api, name: str
) -> None:
    content = MALFORMED[name]
    assert len(content) <= SMALL_BODY
    before = _rows(strict)
    response = _post_raw(alice, "/scheduled-starts", content)
    assert response.status_code in (400, 422), f"{name}: {response.status_code} {response.text}"
    assert_refused_without_change(strict, before, response)


def _start(system: bootstrap.Punctual, **overrides: Any) -> dict[str, Any]:
    body = echo_start(_future(system))
    body.update(overrides)
    return body


def _without(body: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != key}


BAD_STARTS: dict[str, tuple[Any, int, str | None]] = {
    # name: (overrides or a callable marker, status, code)
    "workflow is a number": ({"workflow": 5}, 422, "validation_error"),
    "workflow empty": ({"workflow": ""}, 422, "validation_error"),
    "business_request_id is a list": ({"business_request_id": ["x"]}, 422, "validation_error"),
    "start_at is words": ({"start_at": "tomorrow morning"}, 422, "validation_error"),
    "start_at is an object": ({"start_at": {"at": 1}}, 422, "validation_error"),
    "start_at is null": ({"start_at": None}, 422, "validation_error"),
    "attributes is a string": ({"attributes": "customer"}, 422, "validation_error"),
    "attribute value is a number": ({"attributes": {"c": {"n": 1}}}, 422, "validation_error"),
    "workload_class is null": ({"workload_class": None}, 422, "validation_error"),
    "time_zone is a number": ({"time_zone": 1}, 422, "validation_error"),
    "unknown field": ({"colour": "red"}, 422, "validation_error"),
    "bad traceparent": ({"traceparent": "not-a-traceparent"}, 422, "validation_error"),
    "naive start_at": ({"start_at": "2030-06-01T09:00:00"}, 422, "start_at_not_timezone_aware"),
    "unknown time zone": ({"time_zone": "Mars/Olympus_Mons"}, 422, "unknown_time_zone"),
    "start_at in the past": ({"start_at": "2001-01-01T00:00:00Z"}, 422, "start_at_in_past"),
    "zone mismatch": (
        {"start_at": "2030-06-01T09:00:00+01:00", "time_zone": "America/New_York"},
        422,
        "start_at_zone_mismatch",
    ),
    "host-owned task_queue": ({"task_queue": "fast"}, 422, "host_owned_field"),
    "host-owned priority": ({"priority": 1}, 422, "host_owned_field"),
    "host-owned run_id": ({"run_id": "run_mine"}, 422, "host_owned_field"),
    "unknown workflow": ({"workflow": "no-such-workflow"}, 422, "unknown_workflow"),
    "input of wrong shape": ({"input": {"msg": 1}}, 422, "input_invalid"),
    "input of wrong type": ({"input": "hello"}, 422, "input_invalid"),
    "input too large": ({"input": {"message": "x" * 400}}, 413, "input_too_large"),
    "class not allowed": ({"workload_class": "batch"}, 403, "workload_class_not_allowed"),
    "class unknown": ({"workload_class": "nope"}, 403, "workload_class_not_allowed"),
}
MISSING_FIELDS = ["workflow", "input", "business_request_id", "start_at", "workload_class"]


@pytest.mark.parametrize("name", sorted(BAD_STARTS))
def test_bad_start_fields_are_refused_and_change_nothing(
    strict: bootstrap.Punctual, alice: Api, name: str
) -> None:
    overrides, status, code = BAD_STARTS[name]
    body = _start(strict, **overrides)
    before = _rows(strict)
    response = alice.post("/scheduled-starts", body)
    assert response.status_code == status, f"{name}: {response.text}"
    if code is not None:
        assert response.json()["error"]["code"] == code, response.text
    if code == "validation_error":
        errors = response.json()["error"]["details"]["errors"]
        assert errors and all({"loc", "msg", "type"} <= set(e) for e in errors), errors
    assert_refused_without_change(strict, before, response)


@pytest.mark.parametrize("missing", MISSING_FIELDS)
def test_missing_required_start_fields_are_422(
    strict: bootstrap.Punctual, alice: Api, missing: str
) -> None:
    before = _rows(strict)
    response = alice.post("/scheduled-starts", _without(_start(strict), missing))
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"
    locs = [e["loc"] for e in response.json()["error"]["details"]["errors"]]
    assert any(missing in loc for loc in locs), locs
    assert_refused_without_change(strict, before, response)


def test_refused_request_replays_the_same_answer(strict: bootstrap.Punctual, alice: Api) -> None:
    body = _start(strict, start_at="2030-06-01T09:00:00")
    first = alice.post("/scheduled-starts", body, key="naive-1")
    before = _rows(strict)
    second = alice.post("/scheduled-starts", body, key="naive-1")
    assert (second.status_code, second.json()) == (first.status_code, first.json())
    assert {k: _canonical(v) for k, v in _rows(strict).items()} == {
        k: _canonical(v) for k, v in before.items()
    }


def test_body_over_the_limit_is_413_with_content_length(
    strict: bootstrap.Punctual, alice: Api, root: Api
) -> None:
    padding = "x" * (SMALL_BODY + 10)
    cases = [
        ("/scheduled-starts", _start(strict, attributes={"pad": padding})),
        ("/members", {"subject": padding, "role": "viewer"}),
        ("/tokens", {"subject": "alice", "pad": padding}),
    ]
    for suffix, body in cases:
        for api in (alice, root):
            before = _rows(strict)
            response = api.post(suffix, body)
            assert response.status_code == 413, response.text
            assert response.json()["error"]["code"] == "body_too_large"
            assert response.json()["error"]["details"]["limit"] == SMALL_BODY
            assert_refused_without_change(strict, before, response)
            assert _canonical(_rows(strict)["idempotency_keys"]) == _canonical(
                before["idempotency_keys"]
            )


def test_body_over_the_limit_is_413_when_streamed_without_length(
    strict: bootstrap.Punctual, alice: Api
) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"workflow": "echo", "input": {"message": "'
        for _ in range(10):
            yield b"y" * 512
        yield b'"}}'

    before = _rows(strict)
    response = _post_raw(alice, "/scheduled-starts", chunks())
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "body_too_large"
    assert_refused_without_change(strict, before, response)
    assert _canonical(_rows(strict)["idempotency_keys"]) == _canonical(before["idempotency_keys"])


def test_body_just_under_the_limit_is_accepted(strict: bootstrap.Punctual, alice: Api) -> None:
    body = _start(strict)
    body["attributes"] = {"note": "z" * 400}
    size = len(json.dumps(body).encode())
    assert size < SMALL_BODY
    response = alice.post("/scheduled-starts", body)
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    "key",
    ["", "has space", "naïve", "x" * 256, "tab\tkey"],
    ids=["empty", "space", "nonascii", "long", "tab"],
)
def test_bad_or_missing_idempotency_key_is_400_and_changes_nothing(
    strict: bootstrap.Punctual, alice: Api, key: str
) -> None:
    before = _rows(strict)
    headers = [(b"authorization", f"Bearer {alice.token}".encode())]
    if key:
        headers.append((b"idempotency-key", key.encode("utf-8")))
    response = alice.client.post(
        alice.path("/scheduled-starts"),
        headers=headers,
        content=json.dumps(_start(strict)).encode("utf-8"),
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "idempotency_key_required"
    assert_refused_without_change(strict, before, response)
    assert _canonical(_rows(strict)["idempotency_keys"]) == _canonical(before["idempotency_keys"])


def test_missing_idempotency_key_header(strict: bootstrap.Punctual, alice: Api) -> None:
    before = _rows(strict)
    response = alice.client.post(
        alice.path("/scheduled-starts"),
        headers={"Authorization": f"Bearer {alice.token}"},
        json=_start(strict),
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "idempotency_key_required"
    assert_refused_without_change(strict, before, response)


def test_bad_reschedule_and_cancel_bodies_change_nothing(
    strict: bootstrap.Punctual, alice: Api
) -> None:
    made = alice.post("/scheduled-starts", _start(strict))
    assert made.status_code == 201, made.text
    start = made.json()
    later = _future(strict, 7200)
    bad: list[tuple[str, Any, int]] = [
        ("reschedule", {"version": "one", "start_at": later}, 422),
        ("reschedule", {"version": 0, "start_at": later}, 422),
        ("reschedule", {"start_at": later}, 422),
        ("reschedule", {"version": 1}, 422),
        ("reschedule", {"version": 1, "start_at": "2030-01-01T10:00:00"}, 422),
        ("reschedule", {"version": 1, "start_at": "2001-01-01T10:00:00Z"}, 422),
        ("reschedule", {"version": 1, "start_at": later, "time_zone": "Nowhere/City"}, 422),
        ("reschedule", {"version": 1, "start_at": later, "extra": True}, 422),
        ("reschedule", [1], 422),
        ("reschedule", {"version": 2, "start_at": later}, 409),
        ("cancel", {"version": "1.5"}, 422),
        ("cancel", {}, 422),
        ("cancel", {"version": 1, "reason": "r" * 301}, 422),
        ("cancel", {"version": 7}, 409),
    ]
    for action, body, status in bad:
        before = _rows(strict)
        response = alice.post(f"/scheduled-starts/{start['id']}/{action}", body)
        assert response.status_code == status, f"{action} {body}: {response.text}"
        assert_refused_without_change(strict, before, response)
    after = alice.get(f"/scheduled-starts/{start['id']}").json()
    assert after == start


def test_bad_member_and_token_bodies_change_nothing(strict: bootstrap.Punctual, root: Api) -> None:
    bad: list[tuple[str, Any, int]] = [
        ("/members", {"subject": "bob"}, 422),
        ("/members", {"subject": "bob", "role": "owner"}, 422),
        ("/members", {"subject": 7, "role": "viewer"}, 422),
        ("/members", {"subject": "", "role": "viewer"}, 422),
        ("/members", {"subject": "s" * 201, "role": "viewer"}, 422),
        ("/members", {"subject": "bob", "role": "viewer", "admin": True}, 422),
        ("/tokens", {}, 422),
        ("/tokens", {"subject": "root", "expires_at": "soon"}, 422),
        ("/tokens", {"subject": "root", "expires_at": 3.5e20}, 422),
        ("/tokens", {"subject": "root", "expires_at": "2001-01-01T00:00:00Z"}, 422),
        ("/tokens", {"subject": "root", "scope": "all"}, 422),
        ("/tokens", {"subject": "nobody"}, 404),
    ]
    for suffix, body, status in bad:
        before = _rows(strict)
        response = root.post(suffix, body)
        assert response.status_code == status, f"{suffix} {body}: {response.text}"
        assert_refused_without_change(strict, before, response)


@pytest.mark.parametrize(
    ("suffix", "params", "code"),
    [
        ("/scheduled-starts", {"limit": 0}, "validation_error"),
        ("/scheduled-starts", {"limit": 101}, "validation_error"),
        ("/scheduled-starts", {"limit": "ten"}, "validation_error"),
        ("/scheduled-starts", {"cursor": "garbage!"}, "invalid_cursor"),
        ("/runs", {"state": "exploded"}, "validation_error"),
        ("/runs", {"cursor": "c2VxOm5vdC1hLW51bWJlcg"}, "invalid_cursor"),
        ("/tokens", {"limit": -1}, "validation_error"),
    ],
)
def test_bad_query_parameters_are_422(
    strict: bootstrap.Punctual, root: Api, suffix: str, params: dict[str, Any], code: str
) -> None:
    before = _rows(strict)
    response = root.get(suffix, **params)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == code, response.text
    assert_refused_without_change(strict, before, response)


def test_bad_schedule_input_changes_nothing(strict: bootstrap.Punctual, alice: Api) -> None:
    assert _has_route(strict.http_app(), "POST", "/v1/tenants/{tenant}/schedules")
    base = {**SCHEDULE_BODY, "workload_class": "standard"}
    bad: list[tuple[dict[str, Any], int, str]] = [
        ({"spec": {"cron": "61 * * * *", "time_zone": "UTC"}}, 422, "invalid_cron"),
        ({"spec": {"cron": "not a cron", "time_zone": "UTC"}}, 422, "invalid_cron"),
        ({"spec": {"cron": "0 9 * * *", "time_zone": "Mars/Base"}}, 422, "unknown_time_zone"),
        ({"spec": {"interval_ms": 1}}, 422, "interval_too_short"),
        ({"overlap": None}, 422, "policy_required"),
    ]
    for overrides, status, code in bad:
        body = {k: v for k, v in {**base, **overrides}.items() if v is not None}
        before = _rows(strict)
        response = alice.post("/schedules", body)
        assert response.status_code == status, f"{overrides}: {response.text}"
        assert response.json()["error"]["code"] == code, response.text
        assert_refused_without_change(strict, before, response)
