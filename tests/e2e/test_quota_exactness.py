"""Exact quota admission across real API processes on PostgreSQL (SPEC QA-1, QA-3, §2;
API.md "Host configuration file").

Four ``punctual serve --components api`` processes in the production profile share one
fresh PostgreSQL database and the exact ``postgres`` quota controller with a limit of 50
pending starts. 200 creates sent at once, round-robin over the four servers, must end as
exactly 50 ``201`` and 150 ``429 quota_exceeded`` (limit 50, count 50), with exactly 50
pending starts in the table. Production without a controller answers ``503
quota_unavailable`` and stores nothing; production with the best-effort ``local``
controller refuses to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.crypto import generate_key_file
from punctual.domain.permissions import Role
from punctual.settings import Settings, load_settings
from punctual.usecases.tenancy import identity
from tests.conftest import IN_CI, PG_SERVER
from tests.e2e.harness import migrate
from tests.support.api import register_demo

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

PUNCTUAL = Path(sys.executable).parent / "punctual"
LIMIT = 50
SERVERS = 4
CREATES = 200
STARTUP_SECONDS = 40.0
STOP_SECONDS = 15.0
CLI_SECONDS = 60.0
REQUEST_SECONDS = 60.0
DECIDE_SECONDS = 90.0
CREATE_PATH = "/v1/tenants/acme/scheduled-starts"


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Cluster:
    """A fresh, migrated database and the production environment every process shares."""

    directory: Path
    database_url: str
    key_file: Path

    def env(self, **overrides: str | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PUNCTUAL_")}
        env.update(
            PUNCTUAL_PROFILE="production",
            PUNCTUAL_DATABASE_URL=self.database_url,
            PUNCTUAL_QUOTA__CONTROLLER="postgres",
            PUNCTUAL_TENANT_DEFAULTS__MAX_PENDING_STARTS=str(LIMIT),
            PUNCTUAL_CODEC__KEY_FILE=str(self.key_file),
            PYTHONUNBUFFERED="1",
        )
        for key, value in overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def cli(self, *args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(PUNCTUAL), *args],
            cwd=self.directory,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=CLI_SECONDS,
            check=False,
        )

    def settings(self) -> Settings:
        return load_settings(
            None,
            profile="production",
            database_url=self.database_url,
            quota={"controller": "postgres"},
            codec={"key_file": str(self.key_file)},
        )

    def token(self, tenant: str, subject: str = "loader") -> str:
        """A member token, made by the use case ``punctual tokens create`` runs, in this
        process (a CLI process would only add its interpreter start)."""
        system = bootstrap.build(self.settings())
        try:
            issued = identity.ensure_member_token(system.services, tenant, subject, Role.MEMBER)
        finally:
            system.close()
        return issued.token

    def scalar(self, sql: str, **params: Any) -> Any:
        engine = sa.create_engine(
            self.database_url.replace("postgresql://", "postgresql+psycopg://")
        )
        try:
            with engine.connect() as conn:
                return conn.execute(sa.text(sql), params).scalar_one()
        finally:
            engine.dispose()


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_healthy(self, deadline: float) -> None:
        while True:
            assert self.process.poll() is None, (
                f"{self.name} exited ({self.process.poll()}):\n{self.output()[-4000:]}"
            )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200:
                    return
            assert time.monotonic() < deadline, f"{self.name} never became ready:\n{self.output()}"
            time.sleep(0.1)

    def terminate(self) -> None:
        """SIGTERM, without waiting: ``stop`` waits."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        self.terminate()
        try:
            self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_SECONDS)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


def start_api(cluster: Cluster, name: str, **env: str | None) -> Server:
    port = free_port()
    log = cluster.directory / f"{name}-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(PUNCTUAL), "serve", "--components", "api", "--port", str(port)],
            cwd=cluster.directory,
            env=cluster.env(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, so cleanup reaches everything
        )
    return Server(name, process, port, log)


@contextlib.contextmanager
def api_servers(cluster: Cluster, count: int, **env: str | None) -> Iterator[list[Server]]:
    servers: list[Server] = []
    try:
        for number in range(count):
            servers.append(start_api(cluster, f"api{number + 1}", **env))
        deadline = time.monotonic() + STARTUP_SECONDS
        for server in servers:
            server.wait_healthy(deadline)
        yield servers
    except BaseException:
        for server in servers:
            print(f"\n===== {server.name} (exit {server.process.poll()}) =====\n{server.output()}")
        raise
    finally:
        for server in servers:  # every shutdown under way before any is waited for
            server.terminate()
        for server in servers:
            server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    try:
        with psycopg.connect(PG_SERVER, connect_timeout=3, autocommit=True):
            pass
    except psycopg.Error as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required in CI but unreachable at {PG_SERVER}: {exc}")
        pytest.skip(f"PostgreSQL unreachable at {PG_SERVER}: {exc}")
    directory = tmp_path_factory.mktemp("quota-exactness")
    name = f"punctual_quota_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = sa.engine.make_url(PG_SERVER).set(database=name).render_as_string(False)
        key_file = directory / "shared.keys"
        generate_key_file(key_file)
        found = Cluster(directory, url, key_file)
        migrate(url)
        # No worker runs here: register the demo definitions as a worker would have.
        system = bootstrap.build(found.settings())
        try:
            register_demo(system)
        finally:
            system.close()
        yield found
    finally:
        with psycopg.connect(PG_SERVER, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_body(number: int) -> dict[str, Any]:
    start_at = datetime.now(UTC) + timedelta(hours=1)
    return {
        "workflow": "echo",
        "input": {"message": f"exact-{number}"},
        "business_request_id": f"exact-{number}",
        "start_at": start_at.isoformat().replace("+00:00", "Z"),
        "workload_class": "standard",
    }


# --------------------------------------------------------------------------- 200 at once


@dataclass
class Answer:
    number: int
    server: int
    status: int
    body: dict[str, Any]
    seconds: float
    in_progress: int
    """How many ``202 in_progress`` answers preceded the decided one (retried, same key)."""


async def _create(
    client: httpx.AsyncClient, server: int, token: str, number: int, gate: asyncio.Event
) -> Answer:
    body = start_body(number)
    headers = {
        "Authorization": f"Bearer {token}",
        "Idempotency-Key": f"exact-{number}-{secrets.token_hex(4)}",
    }
    await gate.wait()
    began = time.monotonic()
    deadline = began + DECIDE_SECONDS
    in_progress = 0
    while True:
        response = await client.post(
            "/v1/tenants/acme/scheduled-starts", json=body, headers=headers
        )
        if response.status_code != 202:
            return Answer(
                number, server, response.status_code, response.json(), time.monotonic() - began,
                in_progress,
            )  # fmt: skip
        # Not decided within the bounded wait: the same request with the same key learns it.
        in_progress += 1
        assert time.monotonic() < deadline, f"create {number} still in progress"
        await asyncio.sleep(0.05)


async def _fire(servers: list[Server], token: str) -> tuple[list[Answer], float]:
    limits = httpx.Limits(max_connections=CREATES, max_keepalive_connections=CREATES)
    clients = [
        httpx.AsyncClient(base_url=s.base_url, timeout=REQUEST_SECONDS, limits=limits)
        for s in servers
    ]
    try:
        # Warm one connection per server, so the burst measures admission, not TCP setup.
        for client in clients:
            assert (await client.get("/healthz")).status_code == 200
        gate = asyncio.Event()
        tasks = [
            asyncio.create_task(
                _create(clients[n % len(clients)], n % len(clients), token, n, gate)
            )
            for n in range(CREATES)
        ]
        await asyncio.sleep(0.1)  # every task is parked at the gate
        began = time.monotonic()
        gate.set()
        answers = await asyncio.wait_for(asyncio.gather(*tasks), DECIDE_SECONDS + 30)
        return list(answers), time.monotonic() - began
    finally:
        for client in clients:
            await client.aclose()


def test_200_concurrent_creates_over_4_api_processes_admit_exactly_the_limit(
    cluster: Cluster,
) -> None:
    token = cluster.token("acme")
    with api_servers(cluster, SERVERS) as servers:
        answers, wall = asyncio.run(_fire(servers, token))
        outputs = {server.name: server.output() for server in servers}

    statuses = Counter(a.status for a in answers)
    accepted = [a for a in answers if a.status == 201]
    refused = [a for a in answers if a.status == 429]
    latencies = sorted(a.seconds for a in answers)
    per_server = Counter((a.server, a.status) for a in answers)
    print(
        f"\nquota exactness: {CREATES} creates over {SERVERS} API processes, limit {LIMIT}: "
        f"{len(accepted)} x 201, {len(refused)} x 429 (all statuses {dict(statuses)}); "
        f"wall {wall:.2f} s; latency p50 {statistics.median(latencies) * 1000:.0f} ms, "
        f"p95 {latencies[int(len(latencies) * 0.95) - 1] * 1000:.0f} ms, "
        f"max {latencies[-1] * 1000:.0f} ms; "
        f"202 retries {sum(a.in_progress for a in answers)}; "
        f"per server (index, status): {dict(sorted(per_server.items()))}"
    )

    assert set(statuses) <= {201, 429}, (statuses, [a for a in answers if a.status >= 500])
    assert len(accepted) == LIMIT, statuses
    assert len(refused) == CREATES - LIMIT, statuses
    for answer in refused:
        error = answer.body["error"]
        assert error["code"] == "quota_exceeded", error
        assert error["details"]["limit"] == LIMIT, error
        assert error["details"]["count"] == LIMIT, error
        assert error["details"]["scope"] == "tenant", error
    assert len({a.body["id"] for a in accepted}) == LIMIT
    assert {a.body["state"] for a in accepted} == {"scheduled"}
    # Every server took part in the burst.
    assert {a.server for a in answers} == set(range(SERVERS))

    pending = cluster.scalar(
        "SELECT count(*) FROM starts WHERE tenant = 'acme' AND state IN ('scheduled', "
        "'dispatching') AND schedule_id IS NULL"
    )
    assert pending == LIMIT
    assert cluster.scalar("SELECT count(*) FROM starts WHERE tenant = 'acme'") == LIMIT
    # Refusals are not recorded (a retry may still succeed once quota frees up, OS-4).
    recorded = cluster.scalar(
        "SELECT count(*) FROM idempotency_keys WHERE tenant = 'acme' AND state = 'done'"
    )
    assert recorded == LIMIT
    for name, output in outputs.items():
        assert "Traceback" not in output, f"{name} logged an error:\n{output}"


# --------------------------------------------------------------------------- no or local controller


def test_production_without_a_controller_answers_503_and_stores_nothing(cluster: Cluster) -> None:
    token = cluster.token("acme-uncontrolled")
    with api_servers(cluster, 1, PUNCTUAL_QUOTA__CONTROLLER=None) as (server,):
        url = f"{server.base_url}/v1/tenants/acme-uncontrolled/scheduled-starts"
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "no-controller-1"}
        for _ in range(2):  # not recorded: the same request is decided again
            response = httpx.post(url, json=start_body(1), headers=headers, timeout=30)
            assert response.status_code == 503, response.text
            error = response.json()["error"]
            assert error["code"] == "quota_unavailable", error
            assert "quota.controller" in error["message"], error
        listed = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert listed.status_code == 200, listed.text
        assert listed.json()["items"] == []
    tenant = {"tenant": "acme-uncontrolled"}
    assert cluster.scalar("SELECT count(*) FROM starts WHERE tenant = :tenant", **tenant) == 0
    assert (
        cluster.scalar("SELECT count(*) FROM idempotency_keys WHERE tenant = :tenant", **tenant)
        == 0
    )


def test_production_refuses_to_start_with_the_local_controller(cluster: Cluster) -> None:
    refused = cluster.cli(
        "serve", "--components", "api", "--port", str(free_port()),
        PUNCTUAL_QUOTA__CONTROLLER="local",
    )  # fmt: skip
    assert refused.returncode == 2, (refused.returncode, refused.stdout, refused.stderr)
    assert "quota.controller" in refused.stderr, refused.stderr
    assert "punctual is serving" not in refused.stdout
