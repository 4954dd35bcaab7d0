"""Helpers for fault-injection e2e tests: real punctual processes on real PostgreSQL.

* ``Processes`` starts ``punctual serve --components ...`` and ``punctual worker --app ...``
  as subprocesses, each in its own process group, with one shared environment (database
  URL, the *same* codec key file for every process, small leases), captures each
  process's output to a log file per incarnation, waits for readiness with deadlines,
  restarts a process with a new crash spec, and stops everything (SIGTERM, then SIGKILL)
  on exit. When the ``with`` block fails it prints the tail of every log.
* ``fresh_database`` creates (and finally drops) a database on a PostgreSQL server and
  migrates it with the code ``punctual db upgrade`` runs; ``ThrowawayPostgres`` is a whole
  cluster of the test's own (initdb + pg_ctl) that the test may stop and start at will.
* ``Creator`` schedules many starts quickly through the use cases (``embedded.Scheduler``);
  ``read_facts`` reads back, per start, its state and run id and the runs that exist.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import psycopg
import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.crypto import generate_key_file
from punctual.adapters.stores.sql import migrate as schema
from punctual.adapters.stores.sql.store import SqlStore
from punctual.domain.permissions import Role
from punctual.embedded import Scheduler
from punctual.settings import load_settings
from tests.conftest import IN_CI, PG_SERVER

PUNCTUAL = Path(sys.executable).parent / "punctual"
DEMO_APP = "punctual.demo:app"
STARTUP_SECONDS = 40.0
STOP_SECONDS = 15.0
CLI_SECONDS = 60.0
LOG_TAIL_CHARS = 5000

RUNNER_READY = re.compile(r"event=runner_started runner=(\S+)")
WORKER_READY = re.compile(r"event=worker_started worker=(\S+)")

SMALL_LEASES = {
    "PUNCTUAL_RUNNER__LEASE_SECONDS": "2",
    "PUNCTUAL_RUNNER__MAX_IDLE_SECONDS": "0.2",
    "PUNCTUAL_WORKER__HEARTBEAT_SECONDS": "0.5",
    "PUNCTUAL_WORKER__LIVENESS_SECONDS": "5",
}

T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], timeout: float, step: float = 0.1) -> T:
    """Poll ``check`` until it returns something other than None, or fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def utc_in(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def skip_or_fail(reason: str) -> None:
    """Locally a missing prerequisite skips the test; with ``CI=true`` it fails."""
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


# --- databases --------------------------------------------------------------------------------


def require_server(server_url: str = PG_SERVER) -> None:
    try:
        with psycopg.connect(server_url, connect_timeout=3, autocommit=True):
            pass
    except psycopg.Error as exc:
        skip_or_fail(f"PostgreSQL unreachable at {server_url}: {exc}")


def run_cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PUNCTUAL), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_SECONDS,
        check=False,
    )


def migrate(database_url: str) -> None:
    """Bring ``database_url`` to this version's schema with what ``punctual db upgrade``
    runs, in this process: a ``punctual`` process would cost a whole interpreter start
    for a step no test here looks at (``test_cli_and_serve`` runs the command itself)."""
    store = SqlStore(database_url)
    try:
        schema.upgrade(store)
    finally:
        store.dispose()


@contextlib.contextmanager
def fresh_database(directory: Path | None = None, server_url: str = PG_SERVER) -> Iterator[str]:
    """A new, migrated database on ``server_url`` for one test; dropped afterwards.

    ``directory`` is accepted and unused (migrating needs no working directory)."""
    require_server(server_url)
    name = f"punctual_e2e_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = sa.engine.make_url(server_url).set(database=name).render_as_string(False)
        migrate(url)
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class ThrowawayPostgres:
    """A PostgreSQL cluster of the test's own, in a temporary directory, on a free port.

    As root, ``initdb`` and ``pg_ctl`` refuse to run, so they run as the ``postgres`` OS
    user (``runuser``) in a directory that user owns. The shared server is never touched.
    """

    def __init__(self) -> None:
        self.bindir = self._find_bindir()
        self.root = Path(tempfile.mkdtemp(prefix="punctual-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            try:
                import pwd

                owner = pwd.getpwnam("postgres")
            except KeyError:
                owner = None
            if runuser is None or owner is None:
                shutil.rmtree(self.root, ignore_errors=True)
                skip_or_fail("running as root without a 'postgres' OS user and runuser")
            assert owner is not None and runuser is not None
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as = [runuser, "-u", "postgres", "--"]

    @staticmethod
    def _find_bindir() -> Path:
        candidates = [os.environ.get("PUNCTUAL_TEST_PG_BINDIR", "")]
        candidates += sorted(
            (str(p) for p in Path("/usr/lib/postgresql").glob("*/bin")), reverse=True
        )
        found = shutil.which("initdb")
        if found:
            candidates.append(str(Path(found).parent))
        for candidate in candidates:
            if candidate and (Path(candidate) / "initdb").is_file():
                return Path(candidate)
        skip_or_fail("the PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        raise AssertionError("unreachable")

    @property
    def server_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url_of(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*self._as, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.root,
        )
        assert result.returncode == 0, (
            f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            f"\n{self.log_tail()}"
        )
        return result

    def init(self) -> None:
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "start",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            options,
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bindir / "pg_ctl"), "stop", "-D", str(self.data), "-m", mode, "-w")

    def running(self) -> bool:
        result = subprocess.run(
            [*self._as, str(self.bindir / "pg_ctl"), "status", "-D", str(self.data)],
            capture_output=True,
            check=False,
            cwd=self.root,
        )
        return result.returncode == 0

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.server_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_of(name)

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return "(no postgres log)"

    def close(self) -> None:
        try:
            if self.data.exists() and self.running():
                with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                    self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            print(f"\n===== postgres log (tail) {self.log} =====\n{self.log_tail()}")
        self.close()


# --- processes --------------------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("PUNCTUAL_")}


def punctual_env(database_url: str, key_file: Path, **extra: str) -> dict[str, str]:
    env = clean_env()
    env.update(SMALL_LEASES)
    env.update(
        PUNCTUAL_DATABASE_URL=database_url,
        PUNCTUAL_CODEC__KEY_FILE=str(key_file),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@dataclass
class Incarnation:
    """One run of a managed process: its Popen, its crash spec, its log and its exit code."""

    process: subprocess.Popen[bytes]
    crash_at: str | None
    log: Path
    exit_code: int | None = None


@dataclass
class Managed:
    """A named punctual process that may be restarted, keeping every incarnation."""

    name: str
    args: list[str]
    ready: re.Pattern[str]
    incarnations: list[Incarnation] = field(default_factory=list)

    @property
    def current(self) -> Incarnation:
        return self.incarnations[-1]

    def alive(self) -> bool:
        return bool(self.incarnations) and self.current.process.poll() is None

    def log_text(self) -> str:
        return self.current.log.read_text(errors="replace")

    def exit_codes(self) -> list[int | None]:
        return [i.process.poll() for i in self.incarnations]

    def killed_count(self) -> int:
        return sum(1 for code in self.exit_codes() if code == -signal.SIGKILL)

    def ready_id(self) -> str | None:
        match = self.ready.search(self.log_text())
        return match.group(1) if match else None


class Processes:
    """Start, restart and stop punctual processes sharing one database and one key file."""

    def __init__(self, directory: Path, database_url: str) -> None:
        self.directory = directory
        self.database_url = database_url
        self.key_file = directory / "shared.keys"
        if not self.key_file.exists():
            # One key ring for every process: created once here, never by a racing process.
            generate_key_file(self.key_file)
        self.managed: dict[str, Managed] = {}
        self.extras: list[Callable[[], str]] = []
        """More diagnostics to print on failure (for example a PostgreSQL log)."""

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = punctual_env(self.database_url, self.key_file)
        if crash_at:
            env["PUNCTUAL_CRASH_AT"] = crash_at
        return env

    def serve(self, name: str, components: str, crash_at: str | None = None) -> Managed:
        ready = RUNNER_READY if "runner" in components else WORKER_READY
        args = ["serve", "--components", components, "--app", DEMO_APP]
        if "api" in components:
            args += ["--port", str(free_port())]
        return self.start(Managed(name, args, ready), crash_at)

    def worker(self, name: str, crash_at: str | None = None, slots: int | None = None) -> Managed:
        args = ["worker", "--app", DEMO_APP]
        if slots is not None:
            args += ["--slots", str(slots)]
        return self.start(Managed(name, args, WORKER_READY), crash_at)

    def start(self, managed: Managed, crash_at: str | None = None) -> Managed:
        assert not managed.alive(), f"{managed.name} is still running"
        self.managed[managed.name] = managed
        log = self.directory / f"{managed.name}.{len(managed.incarnations) + 1}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(PUNCTUAL), *managed.args],
                cwd=self.directory,
                env=self.env(crash_at),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group, so cleanup reaches children
            )
        managed.incarnations.append(Incarnation(process, crash_at, log))
        return managed

    def restart(self, managed: Managed, crash_at: str | None = None) -> Managed:
        code = managed.current.process.wait(timeout=STOP_SECONDS)
        managed.current.exit_code = code
        return self.start(managed, crash_at)

    def wait_ready(self, managed: Managed, timeout: float = STARTUP_SECONDS) -> str:
        """Wait for the readiness line of the current incarnation; its runner or worker id."""

        def ready() -> str | None:
            found = managed.ready_id()
            if found is None and not managed.alive():
                raise AssertionError(
                    f"{managed.name} exited ({managed.current.process.poll()}) before it was "
                    f"ready:\n{managed.log_text()[-LOG_TAIL_CHARS:]}"
                )
            return found

        return wait_for(f"{managed.name} to be ready", ready, timeout)

    def wait_exit(self, managed: Managed, timeout: float) -> int:
        try:
            code = managed.current.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{managed.name} (crash spec {managed.current.crash_at!r}) did not exit within "
                f"{timeout:g} s"
            ) from None
        managed.current.exit_code = code
        return code

    def stop(self, managed: Managed) -> None:
        """SIGTERM, a grace period, then SIGKILL of the process group."""
        self.stop_many([managed])

    def stop_many(self, managed: list[Managed]) -> None:
        """``stop`` for several at once: SIGTERM to each in the order given, then wait for
        each, so that their graceful shutdowns overlap instead of queueing."""
        incarnations = [incarnation for m in managed for incarnation in m.incarnations]
        signalled: list[Incarnation] = []
        for incarnation in incarnations:
            if incarnation.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    incarnation.process.send_signal(signal.SIGTERM)
                signalled.append(incarnation)
        for incarnation in signalled:
            process = incarnation.process
            try:
                process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_SECONDS)
        for incarnation in incarnations:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(incarnation.process.pid, signal.SIGKILL)
            incarnation.exit_code = incarnation.process.poll()

    def stop_all(self) -> None:
        """Stop everything, signalled in the reverse order of first start (runners before
        the workers they need)."""
        self.stop_many(list(reversed(list(self.managed.values()))))

    def describe(self) -> str:
        parts = []
        for managed in self.managed.values():
            for number, incarnation in enumerate(managed.incarnations, 1):
                try:
                    text = incarnation.log.read_text(errors="replace")
                except OSError:
                    text = "(no log)"
                parts.append(
                    f"===== {managed.name} #{number} crash_at={incarnation.crash_at!r} "
                    f"exit={incarnation.process.poll()} log={incarnation.log} =====\n"
                    f"{text[-LOG_TAIL_CHARS:]}"
                )
        parts += [extra() for extra in self.extras]
        return "\n".join(parts)

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.stop_all()
        finally:
            if exc_type is not None:
                print("\n" + self.describe())


class Supervisor:
    """Restarts processes that die, following a plan of crash specs (in a background thread).

    ``plan[name]`` lists the crash specs of the *next* incarnations, in order; when a
    managed process exits, the next spec is used (``None`` = no crash point). A process
    that exits after its plan is used up is left dead (the test sees it).
    """

    def __init__(self, processes: Processes, plan: dict[str, list[str | None]]) -> None:
        self.processes = processes
        self.plan = {name: list(specs) for name, specs in plan.items()}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def __enter__(self) -> Supervisor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def done(self) -> bool:
        return all(not specs for specs in self.plan.values())

    def _loop(self) -> None:
        try:
            while not self._stop.wait(0.05):
                for name, specs in self.plan.items():
                    managed = self.processes.managed[name]
                    if not specs or managed.alive():
                        continue
                    code = managed.current.process.poll()
                    if code != -signal.SIGKILL:
                        raise AssertionError(
                            f"{name} (crash spec {managed.current.crash_at!r}) exited with "
                            f"{code}, not by its crash point:\n"
                            f"{managed.log_text()[-LOG_TAIL_CHARS:]}"
                        )
                    self.processes.restart(managed, specs.pop(0))
        except BaseException as exc:
            self.errors.append(exc)

    def check(self) -> None:
        if self.errors:
            raise AssertionError(f"the supervisor failed: {self.errors[0]!r}") from self.errors[0]


# --- creating starts and reading back what happened --------------------------------------------


class Creator:
    """Schedules echo starts through the use cases (``embedded.Scheduler``), in-process."""

    def __init__(self, database_url: str, key_file: Path, tenant: str = "default") -> None:
        settings = load_settings(None, database_url=database_url, codec={"key_file": str(key_file)})
        self.scheduler = Scheduler(bootstrap.build(settings), tenant, "e2e", Role.ADMIN)

    def echo_at(self, at: datetime, number: int) -> dict[str, Any]:
        return self.scheduler.schedule_at(
            "echo",
            {"message": f"e2e-{number}"},
            at,
            business_request_id=f"e2e-{number}",
            idempotency_key=f"e2e-create-{number}",
        )

    def spread(
        self, count: int, first_at: datetime, over_seconds: float, *, numbered_from: int = 0
    ) -> list[dict[str, Any]]:
        """``count`` starts due evenly from ``first_at`` over ``over_seconds``, numbered
        (business request id, idempotency key) from ``numbered_from``.

        A start whose planned time has passed by the time it is created (a loaded machine
        creates slower than the spread) is due at its creation instead: the API refuses a
        ``start_at`` more than 5 s in the past, and a start due now is as much a part of the
        burst as one due later."""
        step = over_seconds / max(1, count - 1)
        return [
            self.echo_at(
                max(first_at + timedelta(seconds=i * step), datetime.now(UTC)), numbered_from + i
            )
            for i in range(count)
        ]

    def close(self) -> None:
        self.scheduler.close()

    def __enter__(self) -> Creator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class StartRow:
    id: str
    state: str
    run_id: str
    attempts: int
    last_error: Any
    version: int
    dispatched_at: datetime | None
    claim_seq: int = 0
    """How many times the start was claimed (claims do not change ``version``, FT-5)."""


@dataclass(frozen=True)
class RunRow:
    id: str
    origin_id: str
    state: str
    attempts: int
    claimed_by: str | None


@dataclass(frozen=True)
class Facts:
    """Every start and every run of the database, read in one snapshot."""

    starts: dict[str, StartRow]
    runs: dict[str, RunRow]

    def runs_of(self, start_id: str) -> list[RunRow]:
        return [run for run in self.runs.values() if run.origin_id == start_id]

    def count_states(self) -> tuple[Counter[str], Counter[str]]:
        return (
            Counter(s.state for s in self.starts.values()),
            Counter(r.state for r in self.runs.values()),
        )

    def all_done(self) -> bool:
        starts, runs = self.count_states()
        return (
            bool(self.starts)
            and starts["dispatched"] == len(self.starts)
            and runs["completed"] == len(self.runs)
        )

    def exactly_once_problems(self, expected_starts: int) -> list[str]:
        """Every violation of "each start dispatched exactly once, its run completed"."""
        problems: list[str] = []
        if len(self.starts) != expected_starts:
            problems.append(f"{len(self.starts)} starts exist, expected {expected_starts}")
        by_origin: dict[str, list[RunRow]] = {}
        for run in self.runs.values():
            by_origin.setdefault(run.origin_id, []).append(run)
        for start in self.starts.values():
            runs = by_origin.get(start.id, [])
            if start.state != "dispatched":
                problems.append(f"start {start.id} is {start.state}, not dispatched: {start}")
            if len(runs) != 1:
                problems.append(f"start {start.id} has {len(runs)} runs: {runs}")
            elif runs[0].id != start.run_id:
                problems.append(
                    f"start {start.id}: its run is {runs[0].id}, not the preallocated "
                    f"{start.run_id}"
                )
        for origin, runs in by_origin.items():
            if origin not in self.starts:
                problems.append(f"runs without a start (origin {origin!r}): {runs}")
        for run in self.runs.values():
            if run.state != "completed":
                problems.append(f"run {run.id} is {run.state}, not completed: {run}")
        return problems


def read_facts(database_url: str) -> Facts:
    with psycopg.connect(database_url, connect_timeout=5) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # one snapshot for both
        starts = {
            row[0]: StartRow(*row)
            for row in conn.execute(
                "SELECT id, state, run_id, attempts, last_error, version, dispatched_at, "
                "claim_seq FROM starts"
            )
        }
        runs = {
            row[0]: RunRow(*row)
            for row in conn.execute("SELECT id, origin_id, state, attempts, claimed_by FROM runs")
        }
    return Facts(starts, runs)


def count_starts(database_url: str, state: str) -> int:
    with psycopg.connect(database_url, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(*) FROM starts WHERE state = %s", (state,)).fetchone()
    assert row is not None
    return int(row[0])


def wait_until_done(
    database_url: str, timeout: float, *, check: Callable[[], None] = lambda: None
) -> Facts:
    """Poll until every start is dispatched and every run completed (or the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        check()
        facts = read_facts(database_url)
        if facts.all_done() or time.monotonic() >= deadline:
            return facts
        time.sleep(0.2)
