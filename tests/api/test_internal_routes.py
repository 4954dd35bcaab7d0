"""The host's internal routes (SPEC SEC-3, API.md "Internal and operator routes"), on both
stores: every route refuses a request without the internal token, with a wrong one and with
a tenant's bearer token, and answers with the right one; without a configured token the
whole tree is absent (404); ``internal_listen`` serves it on its own address only, in
process and in a real ``punctual serve``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import holidays
import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from punctual import bootstrap, resources
from punctual.adapters.http.routes import internal
from punctual.adapters.stores.sql import tables as t
from punctual.domain.permissions import Role
from punctual.errors import ConfigurationError
from punctual.settings import load_settings
from tests.api.test_holds_api import (
    HOST,
    INTERNAL_TOKEN,
    OTHER,
    TENANT,
    World,
    created,
    exactly,
    start_of,
    subjects,
    world,
)
from tests.conftest import make_settings
from tests.support.api import echo_start, in_process, live_worker, member_api
from tests.support.server import free_port

__all__ = ["world"]


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    body: Any = None


def routes(hold_id: str) -> list[Route]:
    """Every internal route, each with a request its right token makes succeed."""
    hold = {"tenant": TENANT, "subject_kind": "tenant", "reason": "legal"}
    return [
        Route("GET", "/internal/definitions"),
        Route("POST", "/internal/definitions/echo/1/deprecate"),
        Route("POST", "/internal/definitions/echo/1/activate"),
        Route("POST", "/internal/definitions/fail/1/retire"),
        Route("GET", "/internal/health"),
        Route("POST", "/internal/reconcile"),
        Route("POST", "/internal/holds", hold),
        Route("POST", f"/internal/holds/{hold_id}/release"),
        Route("GET", "/internal/openapi.json"),
    ]


def send(client: TestClient, route: Route, headers: dict[str, str] | None = None) -> Any:
    content = json.dumps(route.body).encode() if route.body is not None else None
    sent = {**(headers or {}), **({"Content-Type": "application/json"} if content else {})}
    return client.request(route.method, route.path, headers=sent, content=content)


LIVENESS = {"processes": {"heartbeat_at"}}
"""Stamps that move with time whatever requests do: a process heartbeats on its own (a
loaded machine stretched a test past a heartbeat), so comparing them says nothing."""


def rows(system: bootstrap.Punctual) -> dict[str, list[str]]:
    with system.store.engine.connect() as conn:
        return {
            table.name: sorted(
                json.dumps(
                    {k: v for k, v in row.items() if k not in LIVENESS.get(table.name, set())},
                    default=str,
                    sort_keys=True,
                )
                for row in conn.execute(sa.select(table)).mappings()
            )
            for table in t.metadata.sorted_tables
        }


def a_hold(world: World) -> str:
    body = {"tenant": TENANT, "subject_kind": "tenant", "reason": "r"}
    return str(created(world.client.post("/internal/holds", headers=HOST, json=body))["id"])


def test_the_route_list_is_every_internal_route(world: World) -> None:
    document = created(world.client.get("/internal/openapi.json", headers=HOST), 200)
    documented = {
        (method.upper(), internal.PREFIX + path)
        for path, operations in document["paths"].items()
        for method in operations
    }
    assert documented == {
        ("GET", "/internal/definitions"),
        ("POST", "/internal/definitions/{name}/{version}/activate"),
        ("POST", "/internal/definitions/{name}/{version}/deprecate"),
        ("POST", "/internal/definitions/{name}/{version}/retire"),
        ("GET", "/internal/health"),
        ("POST", "/internal/reconcile"),
        ("POST", "/internal/holds"),
        ("POST", "/internal/holds/{hold_id}/release"),
    }
    assert len(routes("h")) == len(documented) + 1  # and the document itself


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Internal-Token": ""},
        {"X-Internal-Token": "wrong"},
        {"X-Internal-Token": INTERNAL_TOKEN[:-1]},
        {"X-Internal-Token": INTERNAL_TOKEN + "x"},
        {"X-Internal-Token": INTERNAL_TOKEN.upper()},
        {"X-Internal-Token": f" {INTERNAL_TOKEN}"},
        {"Authorization": f"Bearer {INTERNAL_TOKEN}"},
    ],
    ids=["none", "empty", "wrong", "prefix", "longer", "case", "padded", "as-bearer"],
)
def test_every_route_refuses_without_the_right_token(world: World, headers: dict[str, str]) -> None:
    every = routes(a_hold(world))
    before = rows(world.system)
    for route in every:
        response = send(world.client, route, headers)
        assert response.status_code == 401, (route, response.text)
        assert response.json() == {
            "error": {
                "code": "unauthenticated",
                "message": "the internal routes need the host's internal token in the "
                "X-Internal-Token header",
                "details": {},
            }
        }
    assert rows(world.system) == before, "a refused internal request changed something"


def test_a_tenant_bearer_token_never_reaches_them(world: World) -> None:
    every = routes(a_hold(world))
    before = rows(world.system)
    for api in (world.admin, world.member):
        for headers in (
            {"Authorization": f"Bearer {api.token}"},
            {"X-Internal-Token": api.token},
            {"Authorization": f"Bearer {api.token}", "X-Internal-Token": "wrong"},
        ):
            for route in every:
                response = send(world.client, route, headers)
                assert response.status_code == 401, (route, headers, response.text)
    assert rows(world.system) == before


def test_two_token_headers_are_refused(world: World) -> None:
    headers = [("X-Internal-Token", INTERNAL_TOKEN), ("X-Internal-Token", "other")]
    response = world.client.get("/internal/health", headers=headers)
    assert response.status_code == 401


def test_every_route_answers_the_right_token(world: World) -> None:
    for route in routes(a_hold(world)):
        response = send(world.client, route, HOST)
        assert response.status_code in (200, 201), (route, response.text)
        assert response.headers["content-type"] == "application/json"


def test_unknown_internal_paths_are_behind_the_guard_too(world: World) -> None:
    assert world.client.get("/internal/nothing-here").status_code == 401
    found = world.client.get("/internal/nothing-here", headers=HOST)
    assert found.status_code == 404 and found.json()["error"]["code"] == "not_found"


def test_the_tree_is_absent_without_an_internal_token(database_url: str, tmp_path: Path) -> None:
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        with in_process(system) as client:
            admin = member_api(system, client, TENANT, "root", Role.ADMIN)
            for route in routes("hld_1"):
                for headers in ({}, HOST, {"Authorization": f"Bearer {admin.token}"}):
                    response = send(client, route, headers)
                    assert response.status_code == 404, (route, response.text)
                    assert response.json()["error"]["code"] == "not_found"
    finally:
        system.close()


def test_the_tenant_document_has_no_internal_route(world: World) -> None:
    document = created(world.client.get("/openapi.json"), 200)
    assert not [path for path in document["paths"] if path.startswith("/internal")]
    internal_doc = created(world.client.get("/internal/openapi.json", headers=HOST), 200)
    assert internal_doc["servers"] == [{"url": "/internal"}]
    schemes = internal_doc["components"]["securitySchemes"]
    assert schemes["internal_token"] == {
        "type": "apiKey",
        "in": "header",
        "name": "X-Internal-Token",
        "description": "The host's `internal_token` (host configuration).",
    }


def test_an_internal_token_is_at_least_32_characters() -> None:
    with pytest.raises(ConfigurationError, match="at least 32 characters"):
        load_settings(None, internal_token="x" * 31)
    with pytest.raises(ConfigurationError, match="internal_token is not"):
        load_settings(None, internal_listen="127.0.0.1:8081")
    with pytest.raises(ConfigurationError, match="host:port"):
        load_settings(None, internal_token="x" * 32, internal_listen="8081")
    assert load_settings(None, internal_token="x" * 32, internal_listen="[::1]:8081")


# --------------------------------------------------------------------------- definitions


def test_definitions_are_listed_with_what_needs_them(world: World) -> None:
    start_of(world.member)
    page = created(world.client.get("/internal/definitions", headers=HOST), 200)
    parsed = exactly(internal.DefinitionInUsePage, page)
    by_name = {(d.name, d.version): d for d in parsed.items}
    assert set(by_name) >= {("echo", "1"), ("sleep", "1"), ("fail", "1"), ("score", "1")}
    echo = by_name[("echo", "1")]
    assert (echo.state, echo.loaded) == ("active", True)
    assert echo.needed_by == ["1 pending start(s) of echo"]
    assert by_name[("fail", "1")].needed_by == []
    assert parsed.next_cursor is None
    [key] = parsed.codec_keys
    assert (key.active, key.in_key_ring) == (True, True)
    assert key.needed_by  # the pending start's sealed input


def test_the_definition_lifecycle(world: World) -> None:
    start_of(world.member)

    def post(path: str) -> Any:
        return world.client.post(f"/internal/definitions/{path}", headers=HOST)

    refused = post("echo/1/retire")
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "in_use"
    assert error["details"]["users"] == ["1 pending start(s) of echo"]
    assert "1 pending start(s) of echo" in error["message"]

    deprecated = exactly(resources.Definition, created(post("echo/1/deprecate"), 200))
    assert (deprecated.name, deprecated.version, deprecated.state) == ("echo", "1", "deprecated")
    assert created(post("echo/1/activate"), 200)["state"] == "active"
    assert created(post("fail/1/retire"), 200)["state"] == "retired"
    listed = {
        (d["name"], d["state"])
        for d in created(world.client.get("/internal/definitions", headers=HOST), 200)["items"]
    }
    assert {("echo", "active"), ("fail", "retired")} <= listed

    for path in ("echo/9/activate", "nothing/1/deprecate", "nothing/1/retire"):
        missing = post(path)
        assert missing.status_code == 404, (path, missing.text)
        assert missing.json()["error"]["code"] == "not_found"


# --------------------------------------------------------------------------- health, reconcile


def test_host_health_shows_every_tenant_the_workers_the_engine_and_orphans(
    world: World,
) -> None:
    now = world.system.services.clock.now()
    with world.system.store.transaction() as tx:
        tx.findings.raise_finding(TENANT, "start_failed", "sst_1", "error", "failed", now)
        tx.findings.raise_finding(TENANT, "orphaned_schedule", "sch_1", "error", "orphan", now)
        tx.findings.raise_finding(OTHER, "orphaned_schedule", "sch_2", "error", "healed", now)
        seen = next(f for f in tx.findings.find(OTHER) if f.subject_id == "sch_2")
        tx.findings.acknowledge(OTHER, seen.id, "bertha", now)
    report = created(world.client.get("/internal/health", headers=HOST), 200)
    parsed = exactly(internal.HostHealth, report)
    assert parsed.status == "degraded"
    tenants = {item.tenant: item for item in parsed.tenants}
    assert set(tenants) == {TENANT, OTHER}
    assert (tenants[TENANT].status, tenants[TENANT].open_findings_count) == ("degraded", 2)
    assert (tenants[OTHER].status, tenants[OTHER].open_findings_count) == ("ok", 0)
    assert (parsed.engine.name, parsed.engine.available) == ("local", True)
    assert [w.id for w in parsed.workers] == ["wrk_live_support"]
    assert [(o.tenant, o.subject_id) for o in parsed.orphans] == [(TENANT, "sch_1")]
    assert parsed.tzdata_version
    assert parsed.holidays_version == holidays.__version__


def test_host_health_is_ok_when_every_tenant_is(world: World) -> None:
    report = created(world.client.get("/internal/health", headers=HOST), 200)
    assert report["status"] == "ok"
    assert {item["status"] for item in report["tenants"]} == {"ok"}
    assert report["orphans"] == []


def test_reconcile_on_the_sql_driver_reports_zeros(world: World) -> None:
    report = world.client.post("/internal/reconcile", headers=HOST)
    assert report.status_code == 200
    assert report.json() == {"checked": 0, "ensured": 0, "removed": 0, "orphans": 0}


# --------------------------------------------------------------------------- host holds


def test_the_host_holds_each_subject_kind_of_any_tenant(world: World) -> None:
    for tenant, api in ((TENANT, world.member), (OTHER, world.other_admin)):
        for kind, subject_id in subjects(world, api).items():
            body = {"tenant": tenant, "subject_kind": kind, "subject_id": subject_id}
            placed = world.client.post(
                "/internal/holds", headers=HOST, json={**body, "reason": "r"}
            )
            hold = exactly(resources.Hold, created(placed))
            assert (hold.subject_kind, hold.subject_id) == (kind, subject_id or tenant)
            assert (hold.placed_by_host, hold.created_by) == (True, "host")
    mine = world.admin.get("/holds").json()["items"]
    assert len(mine) == 4 and all(h["placed_by_host"] for h in mine)


def test_host_hold_placements_are_checked(world: World) -> None:
    theirs = start_of(world.other_admin)

    def place(body: Any) -> Any:
        return world.client.post("/internal/holds", headers=HOST, json=body)

    unknown: list[dict[str, str]] = [
        {"tenant": "ghost", "subject_kind": "tenant", "reason": "r"},
        {"tenant": TENANT, "subject_kind": "start", "subject_id": theirs, "reason": "r"},
        {"tenant": TENANT, "subject_kind": "run", "subject_id": "run_none", "reason": "r"},
    ]
    for body in unknown:
        refused = place(body)
        assert refused.status_code == 404, (body, refused.text)
        assert refused.json()["error"]["code"] == "not_found"
    invalid: list[Any] = [
        {"tenant": TENANT, "subject_kind": "start", "reason": "r"},
        {"tenant": TENANT, "subject_kind": "tenant"},
        {"subject_kind": "tenant", "reason": "r"},
        {"tenant": TENANT, "subject_kind": "tenant", "reason": "r", "placed_by_host": False},
        {"tenant": TENANT, "subject_kind": "planet", "reason": "r"},
        ["not", "an", "object"],
    ]
    for body in invalid:
        refused = place(body)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["error"]["code"] == "validation_error"
    malformed = world.client.post(
        "/internal/holds",
        headers={**HOST, "Content-Type": "application/json"},
        content=b"{not json",
    )
    assert malformed.status_code == 422
    assert world.admin.get("/holds").json()["items"] == []


def test_the_host_releases_its_holds_and_the_tenants(world: World) -> None:
    host_hold = a_hold(world)
    tenant_hold = created(world.admin.post("/holds", {"subject_kind": "tenant", "reason": "r"}))
    assert world.admin.post(f"/holds/{host_hold}/release").status_code == 403
    for hold_id in (host_hold, tenant_hold["id"]):
        released = world.client.post(f"/internal/holds/{hold_id}/release", headers=HOST)
        hold = exactly(resources.Hold, created(released, 200))
        assert hold.released_at is not None and hold.released_by == "host"
        again = world.client.post(f"/internal/holds/{hold_id}/release", headers=HOST)
        assert created(again, 200)["released_at"] == hold.raw["released_at"]
    assert world.admin.get("/holds", active="true").json()["items"] == []
    missing = world.client.post("/internal/holds/hld_none/release", headers=HOST)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    nul = world.client.post("/internal/holds/hld%00/release", headers=HOST)
    assert nul.status_code == 422 and nul.json()["error"]["code"] == "validation_error"


def test_an_internal_body_over_the_limit_is_413(world: World) -> None:
    huge = {"tenant": TENANT, "subject_kind": "tenant", "reason": "r" * 2_000_000}
    refused = world.client.post("/internal/holds", headers=HOST, json=huge)
    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "body_too_large"


# --------------------------------------------------------------------------- internal_listen


def test_internal_listen_moves_the_tree_off_the_api(database_url: str, tmp_path: Path) -> None:
    settings = make_settings(
        database_url, tmp_path, internal_token=INTERNAL_TOKEN, internal_listen="127.0.0.1:1"
    )
    system = bootstrap.build(settings)
    try:
        live_worker(system)
        internal_app = system.internal_app()
        assert internal_app is not None
        with TestClient(system.http_app()) as api, TestClient(internal_app) as host:
            admin = member_api(system, api, TENANT, "root", Role.ADMIN)
            assert api.get("/internal/health", headers=HOST).status_code == 404
            assert api.get("/healthz").status_code == 200
            assert host.get("/internal/health", headers=HOST).status_code == 200
            assert host.get("/internal/health").status_code == 401
            for path in ("/healthz", "/openapi.json", f"/v1/tenants/{TENANT}/health", "/ui/"):
                answered = host.get(path, headers={"Authorization": f"Bearer {admin.token}"})
                assert answered.status_code == 404, (path, answered.text)
            start = admin.post("/scheduled-starts", echo_start())
            assert start.status_code == 201, start.text
    finally:
        system.close()


PUNCTUAL = Path(sys.executable).parent / "punctual"


@pytest.fixture(params=[1, 2], ids=["one-process", "two-api-processes"])
def served(
    request: pytest.FixtureRequest, database_url: str, tmp_path: Path
) -> Iterator[tuple[str, str, Callable[[], str]]]:
    """A real ``punctual serve`` with ``internal_listen``, its API in one process or two
    (``--workers``: the supervising process serves the internal address): (API URL,
    internal URL, output)."""
    api_port, internal_port = free_port(), free_port()
    config = tmp_path / "punctual.toml"
    config.write_text(
        f'database_url = "{database_url}"\n'
        f'internal_token = "{INTERNAL_TOKEN}"\n'
        f'internal_listen = "127.0.0.1:{internal_port}"\n'
        f'[codec]\nkey_file = "{tmp_path / "serve.keys"}"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PUNCTUAL_")}
    output = tmp_path / "serve.out"
    command: list[str | Path] = [PUNCTUAL, "serve", "--config", config, "--components", "api"]
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [*command, "--port", f"{api_port}", "--workers", f"{request.param}"],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def printed() -> str:
        return output.read_text(errors="replace")

    try:
        yield f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{internal_port}", printed
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)


def _answering(url: str, printed: Callable[[], str], timeout: float = 40) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within {timeout}s:\n{printed()}")


@pytest.mark.e2e
def test_punctual_serve_serves_internal_routes_only_on_internal_listen(
    served: tuple[str, str, Callable[[], str]],
) -> None:
    api, host, printed = served
    _answering(f"{api}/healthz", printed)
    _answering(f"{host}/internal/health", printed)
    assert f"internal routes on {host}/internal/" in printed()
    health = httpx.get(f"{host}/internal/health", headers=HOST, timeout=5)
    assert health.status_code == 200, health.text
    assert health.json()["tenants"][0]["tenant"] == "default"
    assert httpx.get(f"{host}/internal/health", timeout=5).status_code == 401
    assert httpx.get(f"{api}/internal/health", headers=HOST, timeout=5).status_code == 404
    assert httpx.get(f"{api}/healthz", timeout=5).status_code == 200
    for path in ("/healthz", "/openapi.json", "/v1/tenants/default/health"):
        assert httpx.get(f"{host}{path}", headers=HOST, timeout=5).status_code == 404, path
    reconciled = httpx.post(f"{host}/internal/reconcile", headers=HOST, timeout=5)
    assert reconciled.json() == {"checked": 0, "ensured": 0, "removed": 0, "orphans": 0}
