"""A real punctual deployment for a chaos run, built from the e2e harness's pieces.

Three variants:

* ``postgres``: a PostgreSQL cluster of the run's own (``ThrowawayPostgres``: initdb and
  pg_ctl on a free port, so it may be restarted; the shared server is never touched), the
  production profile with the exact quota controller, several ``punctual serve
  --components api`` processes, two runners and two local workers;
* ``temporal``: the same with ``engine = "temporal"``, a real dev server
  (``RestartableTemporal``) and two Temporal workers;
* ``sqlite``: the embedded default, one ``punctual serve`` process (API, runner and worker)
  on a SQLite file.

Every process runs the chaos app (``tests.chaos.app:app``), whose bodies write their own
record into the run's directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.settings import Settings, load_settings
from punctual.usecases.tenancy import identity
from tests.chaos.app import RECORD_DIR_VARIABLE
from tests.e2e.harness import (
    RUNNER_READY,
    WORKER_READY,
    Managed,
    Processes,
    ThrowawayPostgres,
    free_port,
    migrate,
    wait_for,
)
from tests.e2e.temporal_harness import TEMPORAL_WORKER_READY, RestartableTemporal
from tests.support.temporal import NAMESPACE

REPOSITORY = Path(__file__).resolve().parents[2]
CHAOS_APP = "tests.chaos.app:app"
VARIANTS = ("postgres", "temporal", "sqlite")
TENANT = "chaos"
QUOTA_TENANT = "quota"
QUOTA_LIMIT = 20
LEASE_SECONDS = 4.0
"""Runner and worker leases: short enough that a pause longer than a lease is a few
seconds, long enough that a loaded machine's heartbeats (every 0.5 s) keep them."""
READY_SECONDS = 90.0
API_READY = re.compile(r"punctual is serving on (\S+)")

CHAOS_SETTINGS = {
    "PUNCTUAL_RUNNER__LEASE_SECONDS": str(LEASE_SECONDS),
    "PUNCTUAL_RUNNER__MAX_IDLE_SECONDS": "0.2",
    "PUNCTUAL_WORKER__HEARTBEAT_SECONDS": "0.5",
    "PUNCTUAL_WORKER__LIVENESS_SECONDS": "10",
    "PUNCTUAL_API_WAIT_SECONDS": "2",
    "PUNCTUAL_WEBHOOKS__ALLOWED_CIDRS": json.dumps(["127.0.0.0/8"]),
    "PUNCTUAL_TENANTS": json.dumps({QUOTA_TENANT: {"max_pending_starts": QUOTA_LIMIT}}),
}


@dataclass(frozen=True)
class Layout:
    """How many processes of each kind a variant runs."""

    apis: int
    runners: int
    workers: int
    slots: int


LAYOUTS = {
    "postgres": Layout(apis=3, runners=2, workers=2, slots=3),
    "temporal": Layout(apis=2, runners=2, workers=2, slots=3),
    "sqlite": Layout(apis=1, runners=0, workers=0, slots=4),
}
SHORT_LAYOUTS = {
    "postgres": Layout(apis=2, runners=2, workers=2, slots=3),
    "temporal": Layout(apis=2, runners=2, workers=2, slots=3),
    "sqlite": Layout(apis=1, runners=0, workers=0, slots=4),
}


class ChaosProcesses(Processes):
    """``Processes`` with the chaos app importable, the chaos settings and the record
    directory in every process's environment."""

    def __init__(self, directory: Path, database_url: str, extra_env: dict[str, str]) -> None:
        super().__init__(directory, database_url)
        self.extra_env = extra_env

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = super().env(crash_at)
        env.update(CHAOS_SETTINGS)
        env.update(self.extra_env)
        env[RECORD_DIR_VARIABLE] = str(self.directory)
        paths = [str(REPOSITORY), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        return env


@dataclass
class Member:
    """One managed process and what it is to the harness."""

    managed: Managed
    kind: str
    """``api``, ``runner``, ``worker`` or ``serve`` (the embedded all-in-one)."""
    url: str | None = None
    """The API's base URL, for processes that serve it."""


@dataclass
class Deployment:
    variant: str
    directory: Path
    layout: Layout
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    pg: ThrowawayPostgres | None = None
    temporal: RestartableTemporal | None = None
    database_url: str = ""
    processes: ChaosProcesses | None = None
    members: list[Member] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)

    # --- building ---------------------------------------------------------------------

    def start(self) -> None:
        """Database, engine, tokens, then every process; returns once all are ready."""
        if self.variant == "sqlite":
            self.database_url = f"sqlite:///{self.directory / 'punctual.db'}"
        else:
            self.pg = self.stack.enter_context(ThrowawayPostgres())
            self.pg.init()
            self.pg.start()
            self.database_url = self.pg.create_database("punctual")
        migrate(self.database_url)
        extra: dict[str, str] = {}
        extra["PUNCTUAL_WORKER__SLOTS"] = str(self.layout.slots)
        if self.variant != "sqlite":
            extra.update(PUNCTUAL_PROFILE="production", PUNCTUAL_QUOTA__CONTROLLER="postgres")
        if self.variant == "temporal":
            self.temporal = self.stack.enter_context(
                RestartableTemporal(self.directory / "temporal")
            )
            extra.update(
                PUNCTUAL_ENGINE="temporal",
                PUNCTUAL_TEMPORAL__ADDRESS=self.temporal.address,
                PUNCTUAL_TEMPORAL__NAMESPACE=NAMESPACE,
            )
        self.processes = ChaosProcesses(self.directory, self.database_url, extra)
        self.stack.callback(self.processes.stop_all)
        self._issue_tokens(extra)
        self._start_processes()

    def settings(self, extra: dict[str, str]) -> Settings:
        assert self.processes is not None
        values: dict[str, object] = {
            "database_url": self.database_url,
            "codec": {"key_file": str(self.processes.key_file)},
            "tenants": {QUOTA_TENANT: {"max_pending_starts": QUOTA_LIMIT}},
        }
        if "PUNCTUAL_PROFILE" in extra:
            values.update(profile="production", quota={"controller": "postgres"})
        return load_settings(None, **values)

    def _issue_tokens(self, extra: dict[str, str]) -> None:
        """An admin token of each tenant, made with the use case ``punctual tokens
        create`` runs, in this process."""
        with _without_punctual_environment():
            system = bootstrap.build(self.settings(extra))
        try:
            for tenant in (TENANT, QUOTA_TENANT):
                issued = identity.ensure_member_token(
                    system.services, tenant, "chaos-admin", Role.ADMIN
                )
                self.tokens[tenant] = issued.token
        finally:
            system.close()

    def _start_processes(self) -> None:
        assert self.processes is not None
        procs = self.processes
        app = ["--app", CHAOS_APP]
        if self.variant == "sqlite":
            port = free_port()
            args = ["serve", "--port", str(port), *app]
            self._add("serve", "serve", args, RUNNER_READY, port)
        else:
            for number in range(1, self.layout.apis + 1):
                port = free_port()
                args = ["serve", "--components", "api", "--port", str(port), *app]
                self._add(f"api-{number}", "api", args, API_READY, port)
            for number in range(1, self.layout.runners + 1):
                args = ["serve", "--components", "runner", *app]
                self._add(f"runner-{number}", "runner", args, RUNNER_READY)
            for number in range(1, self.layout.workers + 1):
                args = ["worker", *app, "--slots", str(self.layout.slots)]
                ready = WORKER_READY
                if self.variant == "temporal":
                    args = ["worker", "--engine", "temporal", *app]
                    args += ["--slots", str(self.layout.slots)]
                    ready = TEMPORAL_WORKER_READY
                self._add(f"worker-{number}", "worker", args, ready)
        for member in self.members:
            procs.start(member.managed)
        for member in self.members:
            self.wait_ready(member)

    def _add(
        self, name: str, kind: str, args: list[str], ready: re.Pattern[str], port: int | None = None
    ) -> None:
        url = f"http://127.0.0.1:{port}" if port is not None else None
        self.members.append(Member(Managed(name, args, ready), kind, url))

    # --- running ----------------------------------------------------------------------

    def api_urls(self) -> list[str]:
        return [m.url for m in self.members if m.url is not None]

    def of_kind(self, *kinds: str) -> list[Member]:
        return [m for m in self.members if m.kind in kinds]

    def wait_ready(self, member: Member, timeout: float = READY_SECONDS) -> None:
        assert self.processes is not None
        self.processes.wait_ready(member.managed, timeout)
        if member.url is not None:
            wait_for(f"{member.managed.name} to answer", lambda: _ready(member.url), timeout)

    def restart(self, member: Member) -> None:
        """Start a dead process again (the same arguments, port included)."""
        assert self.processes is not None
        managed = member.managed
        code = managed.current.process.wait(timeout=30)
        managed.current.exit_code = code
        self.processes.start(managed)

    def env_settings(self) -> dict[str, str]:
        assert self.processes is not None
        return self.processes.env()

    def pending_of(self, tenant: str) -> int | None:
        """The tenant's pending one-off starts, as the quota counts them (None when the
        store does not answer)."""
        query = (
            "SELECT count(*) FROM starts WHERE tenant = %s AND schedule_id IS NULL "
            "AND state IN ('scheduled', 'dispatching')"
        )
        try:
            if self.variant == "sqlite":
                import sqlite3

                path = self.database_url.removeprefix("sqlite:///")
                with contextlib.closing(sqlite3.connect(path, timeout=1)) as conn:
                    row = conn.execute(query.replace("%s", "?"), (tenant,)).fetchone()
            else:
                with psycopg.connect(self.database_url, connect_timeout=2) as conn:
                    row = conn.execute(query, (tenant,)).fetchone()
        except Exception:
            return None
        return int(row[0]) if row else None

    def describe(self) -> str:
        assert self.processes is not None
        return self.processes.describe()

    def close(self) -> None:
        self.stack.close()


def _ready(url: str | None) -> bool | None:
    assert url is not None
    with contextlib.suppress(httpx.HTTPError):
        if httpx.get(f"{url}/readyz", timeout=3).status_code == 200:
            return True
    return None


@contextlib.contextmanager
def _without_punctual_environment() -> Iterator[None]:
    """Build in-process settings from explicit values only: a ``PUNCTUAL_*`` variable of
    the caller's shell must not change the harness's own store access."""
    saved = {k: v for k, v in os.environ.items() if k.upper().startswith("PUNCTUAL_")}
    for key in saved:
        del os.environ[key]
    try:
        yield
    finally:
        os.environ.update(saved)


def descendants(pid: int) -> list[int]:
    """Every living descendant of ``pid``, read from /proc (children before grandchildren)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # ``pid (comm) state ppid ...``: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            parents[int(entry.name)] = int(fields[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def signal_all(pids: list[int], sig: signal.Signals) -> list[int]:
    """Send ``sig`` to each pid that still exists; the pids it reached."""
    reached = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            reached.append(pid)
    return reached


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False
