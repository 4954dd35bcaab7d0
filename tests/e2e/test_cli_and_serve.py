"""Real processes: ``punctual serve`` over real HTTP, and the CLI commands beside it
(API.md "Starting it", SPEC §2 and IF-3)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg
import pytest
import sqlalchemy as sa

from punctual.adapters.stores.sql import migrate
from tests.conftest import IN_CI, PG_SERVER
from tests.e2e.harness import free_port

pytestmark = pytest.mark.e2e

PUNCTUAL = Path(sys.executable).parent / "punctual"
DEV_TOKEN = "e2e-dev-token-" + "0123456789abcdef" * 2
DEMO_WORKFLOWS = {"echo", "sleep", "fail", "score"}
STARTUP_SECONDS = 40.0
STOP_SECONDS = 15.0
CLI_SECONDS = 60.0

T = TypeVar("T")


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PUNCTUAL_")}
    env.pop("PYTHONUNBUFFERED", None)  # the token line must be flushed by punctual itself
    return env


def wait_for(what: str, check: Callable[[], T | None], timeout: float, step: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except (httpx.HTTPError, OSError) as exc:
            last_error = exc
            value = None
        if value is not None:
            return value
        time.sleep(step)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what} (last error: {last_error})"
    )


def together(*commands: Callable[[], Any]) -> list[Any]:
    """Independent commands side by side, each still a ``punctual`` process of its own:
    most of a command's time is its interpreter starting, and the machine has more than
    one core. The answers come in the order given."""
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        running = [pool.submit(command) for command in commands]
        return [future.result() for future in running]


def run_cli(
    *args: str, cwd: Path, timeout: float = CLI_SECONDS
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PUNCTUAL), *args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    directory: Path
    port: int
    stdout_path: Path
    stderr_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def describe(self) -> str:
        tail = self.stderr()[-4000:]
        return f"exit={self.process.poll()}\nstdout:\n{self.stdout()}\nstderr:\n{tail}"

    def admin_token(self, timeout: float = STARTUP_SECONDS) -> str:
        def found() -> str | None:
            self.assert_alive()
            match = re.search(r"^admin token: (\S+)\s*$", self.stdout(), re.MULTILINE)
            return match.group(1) if match else None

        return wait_for("the 'admin token:' line", found, timeout)

    def assert_alive(self) -> None:
        assert self.process.poll() is None, f"punctual serve exited early\n{self.describe()}"

    def wait_healthy(self, timeout: float = STARTUP_SECONDS) -> None:
        def healthy() -> bool | None:
            self.assert_alive()
            response = httpx.get(f"{self.base_url}/healthz", timeout=2)
            return True if response.status_code == 200 else None

        wait_for("/healthz", healthy, timeout)

    def terminate(self) -> int:
        """SIGTERM, and wait for a clean exit (a hard kill follows in ``kill``)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"punctual serve did not stop within {STOP_SECONDS}s of SIGTERM\n{self.describe()}"
            ) from None

    def kill(self) -> None:
        """Last-resort cleanup of this server's own process group."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=STOP_SECONDS)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


ADDRESS_IN_USE_EXIT = 7
"""API.md: ``serve`` exits 7 when its port is taken."""


def start_server(directory: Path, *args: str) -> Server:
    """``punctual serve`` on a free port; started again on another port when a process of
    a test running beside this one took the port between its choice and the bind."""
    for _ in range(3):
        server = _launch(directory, *args)
        if not _lost_its_port(server):
            break
    return server


def _lost_its_port(server: Server) -> bool:
    """Whether ``serve`` exited 7; its "serving on" line, printed once it holds the port,
    says it did not (a probe of the port could reach whoever took it)."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        code = server.process.poll()
        if code is not None:
            return code == ADDRESS_IN_USE_EXIT
        if "punctual is serving on" in server.stdout():
            return False
        time.sleep(0.05)
    return False  # the test's own waits report a server that never came up


def _launch(directory: Path, *args: str) -> Server:
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    stdout_path = directory.parent / f"{directory.name}-{port}.out"
    stderr_path = directory.parent / f"{directory.name}-{port}.err"
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        process = subprocess.Popen(
            [str(PUNCTUAL), "serve", "--port", str(port), *args],
            cwd=directory,
            env=clean_env(),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, so cleanup can reach children
        )
    return Server(process, directory, port, stdout_path, stderr_path)


def group_gone(pgid: int) -> bool | None:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return None


def bearer(token: str, key: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


def sqlite_url_of(directory: Path) -> str:
    return f"sqlite:///{directory / 'punctual.db'}"


# --- one server for most tests --------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    directory = tmp_path_factory.mktemp("serve") / "empty"
    directory.mkdir()
    assert list(directory.iterdir()) == []
    server = start_server(directory, "--dev-token", DEV_TOKEN)
    try:
        token = server.admin_token()
        server.wait_healthy()
        yield server, token
    finally:
        try:
            server.terminate()
        finally:
            server.kill()


def test_help_lists_the_commands(tmp_path: Path) -> None:
    result = run_cli("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    host = ("serve", "worker", "db", "keys", "retention", "tokens", "definitions")
    tenant = ("starts", "schedules", "runs", "health", "members")
    for command in host + tenant:
        assert re.search(rf"^\W*{command}\b", result.stdout, re.MULTILINE), (command, result.stdout)


def test_serve_in_an_empty_directory_creates_database_and_key_file(
    served: tuple[Server, str],
) -> None:
    server, token = served
    assert token == DEV_TOKEN
    assert (server.directory / "punctual.db").is_file()
    assert (server.directory / "punctual.keys").is_file()
    assert (server.directory / "punctual.keys").stat().st_size > 0
    assert httpx.get(f"{server.base_url}/healthz", timeout=5).status_code == 200
    assert httpx.get(f"{server.base_url}/readyz", timeout=5).status_code == 200
    assert httpx.get(f"{server.base_url}/openapi.json", timeout=5).status_code == 200


def test_definitions_need_the_token_and_list_the_demo_app(served: tuple[Server, str]) -> None:
    server, token = served
    url = f"{server.base_url}/v1/tenants/default/definitions"
    anonymous = httpx.get(url, timeout=5)
    assert anonymous.status_code == 401, anonymous.text
    assert anonymous.json()["error"]["code"] == "unauthenticated"
    assert httpx.get(url, headers=bearer("wrong-" + token), timeout=5).status_code == 401

    def all_listed() -> list[dict[str, Any]] | None:
        response = httpx.get(url, headers=bearer(token), timeout=5)
        assert response.status_code == 200, response.text
        items: list[dict[str, Any]] = response.json()["items"]
        names = {item["name"] for item in items}
        return items if names >= DEMO_WORKFLOWS and all(i["loaded"] for i in items) else None

    items = wait_for("the demo definitions", all_listed, 20)
    for item in items:
        assert {"name", "version", "state", "artifact", "input_schema", "loaded"} <= set(item)
        assert item["state"] == "active"


def test_a_start_created_over_http_runs_on_time(served: tuple[Server, str]) -> None:
    server, token = served
    base = f"{server.base_url}/v1/tenants/default"
    start_at = datetime.now(UTC) + timedelta(seconds=2)
    message = f"hello from e2e {secrets.token_hex(4)}"
    body = {
        "workflow": "echo",
        "input": {"message": message},
        "business_request_id": "e2e-1",
        "start_at": start_at.isoformat().replace("+00:00", "Z"),
        "workload_class": "standard",
    }
    with httpx.Client(timeout=10) as client:
        created = client.post(
            f"{base}/scheduled-starts", headers=bearer(token, "e2e-create-1"), json=body
        )
        assert created.status_code == 201, created.text
        start = created.json()
        assert start["state"] == "scheduled"
        assert start["created_by"] == "admin"
        assert "input" not in start

        def dispatched() -> dict[str, Any] | None:
            got = client.get(f"{base}/scheduled-starts/{start['id']}", headers=bearer(token))
            assert got.status_code == 200, got.text
            current: dict[str, Any] = got.json()
            assert current["state"] in {"scheduled", "dispatching", "dispatched"}, current
            return current if current["dispatch"] is not None else None

        after = wait_for("dispatch", dispatched, 20)
        assert after["state"] == "dispatched"
        dispatched_at = datetime.fromisoformat(after["dispatch"]["dispatched_at"])
        assert dispatched_at >= start_at - timedelta(milliseconds=5), "dispatched early"
        run_id = after["dispatch"]["run_id"]

        def finished() -> dict[str, Any] | None:
            got = client.get(f"{base}/runs/{run_id}", headers=bearer(token))
            assert got.status_code == 200, got.text
            run: dict[str, Any] = got.json()
            assert run["state"] in {"pending", "running", "completed"}, run
            return run if run["state"] == "completed" else None

        run = wait_for("the run to complete", finished, 30)
        assert run["result"] == {"message": message}
        assert run["workflow"] == "echo"
        assert run["origin"]["source"] == "scheduled_start"
        assert run["origin"]["id"] == start["id"]

        replay = client.post(
            f"{base}/scheduled-starts", headers=bearer(token, "e2e-create-1"), json=body
        )
        assert replay.status_code == 201
        assert replay.json()["id"] == start["id"]


def test_tokens_create_prints_a_token_that_the_server_accepts(
    served: tuple[Server, str], tmp_path: Path
) -> None:
    server, _ = served
    result = run_cli(
        "tokens",
        "create",
        "--tenant",
        "acme",
        "--subject",
        "alice",
        "--role",
        "member",
        "--json",
        "--database-url",
        sqlite_url_of(server.directory),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    token = json.loads(result.stdout)["token"]
    assert isinstance(token, str)
    assert len(token) >= 43
    acme = f"{server.base_url}/v1/tenants/acme"
    listed = httpx.get(f"{acme}/definitions", headers=bearer(token), timeout=5)
    assert listed.status_code == 200, listed.text
    # A member of acme: another tenant does not exist for it, and tokens are for admins.
    other = httpx.get(f"{server.base_url}/v1/tenants/default/definitions", headers=bearer(token))
    assert other.status_code == 404
    assert httpx.get(f"{acme}/tokens", headers=bearer(token), timeout=5).status_code == 403
    assert not (tmp_path / "punctual.db").exists(), "--database-url must be used, not the cwd"


def test_definitions_list_on_the_served_database_and_health_over_http(
    served: tuple[Server, str], tmp_path: Path
) -> None:
    server, token = served
    db = sqlite_url_of(server.directory)
    listed, health, human = together(
        lambda: run_cli("definitions", "list", "--json", "--database-url", db, cwd=tmp_path),
        lambda: run_cli(
            "health", "--json", "--url", server.base_url, "--token", token, cwd=tmp_path
        ),
        lambda: run_cli("definitions", "list", "--database-url", db, cwd=tmp_path),
    )
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)
    assert {item["name"] for item in items} >= DEMO_WORKFLOWS
    assert all(item["loaded"] for item in items if item["name"] in DEMO_WORKFLOWS)

    report = json.loads(health.stdout)
    shown = {"status", "findings", "starts", "schedules", "engine", "workers", "tzdata_version"}
    assert shown | {"holidays_version"} <= set(report)
    assert report["status"] == "ok", report
    assert health.returncode == 0, health.stderr
    assert report["engine"]["available"] is True
    assert len(report["workers"]) >= 1

    assert human.returncode == 0
    assert "echo" in human.stdout


def test_sigterm_stops_the_server_and_a_restart_keeps_its_data(tmp_path: Path) -> None:
    directory = tmp_path / "fresh"
    first = start_server(directory)
    try:
        token = first.admin_token()
        assert token != DEV_TOKEN
        assert len(token) >= 43
        first.wait_healthy()
        url = f"{first.base_url}/v1/tenants/default/definitions"
        assert httpx.get(url, headers=bearer(token), timeout=5).status_code == 200
        code = first.terminate()
        assert code in (0, -signal.SIGTERM), first.describe()
        wait_for("the server's child processes to exit", lambda: group_gone(first.process.pid), 10)
    finally:
        first.kill()
    second = start_server(directory)
    try:
        second.wait_healthy()
        # Only the first start creates and prints a token; the first token still works.
        assert "admin token:" not in second.stdout()
        url = f"{second.base_url}/v1/tenants/default/definitions"
        assert httpx.get(url, headers=bearer(token), timeout=5).status_code == 200

        # A clean stop shut the first worker down and recorded it: the only live worker is
        # the second server's, though the first one's last heartbeat is still recent.
        def second_worker() -> str | None:
            found = re.search(r"event=worker_started worker=(\S+)", second.stderr())
            return found.group(1) if found else None

        worker_id = wait_for("the second server's worker", second_worker, STARTUP_SECONDS)
        health = run_cli(
            "health", "--json", "--url", second.base_url, "--token", token, cwd=tmp_path
        )
        assert health.returncode == 0, health.stdout + health.stderr
        workers = [worker["id"] for worker in json.loads(health.stdout)["workers"]]
        assert workers == [worker_id], (
            "SIGTERM did not run the server's shutdown (the worker was never marked stopped)\n"
            + first.describe()
        )
        assert second.terminate() in (0, -signal.SIGTERM), second.describe()
    finally:
        second.kill()


# --- PostgreSQL -----------------------------------------------------------------------------


@pytest.fixture
def fresh_pg_databases() -> Iterator[Callable[[], str]]:
    try:
        with psycopg.connect(PG_SERVER, connect_timeout=3, autocommit=True):
            pass
    except psycopg.Error as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required in CI but unreachable at {PG_SERVER}: {exc}")
        pytest.skip(f"PostgreSQL unreachable at {PG_SERVER}: {exc}")
    made: list[str] = []

    def make() -> str:
        name = f"punctual_e2e_{os.getpid()}_{secrets.token_hex(3)}"
        with psycopg.connect(PG_SERVER, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return sa.engine.make_url(PG_SERVER).set(database=name).render_as_string(False)

    yield make
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        for name in made:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_serve_refuses_an_unmigrated_postgres_and_db_upgrade_migrates_it(
    fresh_pg_databases: Callable[[], str], tmp_path: Path
) -> None:
    url = fresh_pg_databases()
    server = start_server(tmp_path / "pg", "--database-url", url)
    try:
        code = server.process.wait(timeout=STARTUP_SECONDS)
    except subprocess.TimeoutExpired:
        message = f"serve kept running on an un-migrated database\n{server.describe()}"
        raise AssertionError(message) from None
    finally:
        server.kill()
    assert code != 0, server.describe()
    assert "punctual db upgrade" in server.stdout() + server.stderr(), server.describe()
    assert not (tmp_path / "pg" / "punctual.db").exists()

    upgraded = run_cli("db", "upgrade", "--database-url", url, cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    head = migrate.head_revision()
    assert head in upgraded.stdout, upgraded.stdout
    assert "empty" in upgraded.stdout, upgraded.stdout

    # A second fresh database, never upgraded: serve still refuses it (asked while the
    # first is upgraded once more, which changes nothing).
    other = fresh_pg_databases()
    again, refused = together(
        lambda: run_cli("db", "upgrade", "--database-url", url, cwd=tmp_path),
        lambda: run_cli("serve", "--port", str(free_port()), "--database-url", other, cwd=tmp_path),
    )
    assert again.returncode == 0, again.stderr
    assert head in again.stdout
    assert refused.returncode != 0
    assert "punctual db upgrade" in refused.stdout + refused.stderr

    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
            tables = set(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()
    assert version == head
    assert {"tenants", "members", "tokens", "starts", "runs", "idempotency_keys"} <= tables


def test_serve_with_several_api_processes_honours_the_dev_token(tmp_path: Path) -> None:
    """``--workers N`` creates tenant ``default`` with the ``--dev-token`` admin token too
    (it used to ignore the flag and create no token at all)."""
    server = start_server(
        tmp_path / "multi", "--components", "api", "--workers", "2", "--dev-token", DEV_TOKEN
    )
    try:
        assert server.admin_token() == DEV_TOKEN
        server.wait_healthy()
        answer = httpx.get(
            f"{server.base_url}/v1/tenants/default/definitions",
            headers=bearer(DEV_TOKEN),
            timeout=5,
        )
        assert answer.status_code == 200, answer.text
    finally:
        try:
            server.terminate()
        finally:
            server.kill()
