"""The benchmarks' shared harness: fresh databases, punctual processes, CPU/RSS, statistics.

Everything here talks to punctual through its public surfaces (the ``punctual`` CLI, the
HTTP API, ``bootstrap.build`` and the use cases), so the benchmarks keep working while
the internals change. Every database and process a benchmark creates is removed again,
also when it fails.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import sqlalchemy as sa

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PUNCTUAL = BIN / "punctual"
PYTHON = Path(sys.executable)
PG_SERVER = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
DEV_TOKEN = "bench-dev-token-" + "0123456789abcdef" * 2
TENANT = "default"
DEMO_APP = "punctual.demo:app"
IDLE_QUEUE = "bench-idle"
"""A task queue no start uses: a worker serving only it is live but never claims a run."""
NO_QUOTA_LIMIT = 1_000_000_000
CLK_TCK = os.sysconf("SC_CLK_TCK")

T = TypeVar("T")


class BenchError(RuntimeError):
    """A benchmark could not be carried out (a process died, a wait timed out)."""


# --- machine ---------------------------------------------------------------------------------


def git_commit() -> str:
    result = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    commit = result.stdout.strip() or "unknown"
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "src"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{commit}{' (+ uncommitted changes in src/)' if dirty else ''}"


def measured_source() -> str:
    """Which punctual is measured: this working tree, or an export of a commit.

    To measure a commit while others edit ``src/``, export it (``python -m bench export``)
    and put its ``src`` first on ``PYTHONPATH``; every process the benchmarks start inherits it.
    """
    import punctual

    root = Path(punctual.__file__).resolve().parent.parent.parent
    if root == REPO:
        return f"commit {git_commit()} (working tree)"
    marker = root / "COMMIT"
    commit = marker.read_text().strip() if marker.exists() else "unknown commit"
    return f"commit {commit} (export at {root})"


def _meminfo_total_gib() -> float:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    return float("nan")


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def postgres_version() -> str:
    try:
        with psycopg.connect(PG_SERVER, connect_timeout=3) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            return str(row[0]) if row else "unknown"
    except psycopg.Error as exc:
        return f"unreachable ({exc.__class__.__name__})"


def print_machine(title: str) -> None:
    print(f"== {title}")
    print(
        f"   {measured_source()} | {os.cpu_count()} CPUs ({_cpu_model()}) | "
        f"{_meminfo_total_gib():.1f} GiB RAM | PostgreSQL {postgres_version()} | "
        f"Python {platform.python_version()}",
        flush=True,
    )
    print(f"   load average now: {load_average()} (others' work on this machine is noise)")


# --- databases -------------------------------------------------------------------------------


@contextlib.contextmanager
def postgres_database(name: str) -> Iterator[str]:
    """A new, empty PostgreSQL database ``bench_<name>_<random>``, dropped afterwards."""
    database = f"bench_{name}_{secrets.token_hex(4)}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    url = sa.engine.make_url(PG_SERVER).set(database=database)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with psycopg.connect(PG_SERVER, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def database_of(url: str) -> str | None:
    parsed = sa.engine.make_url(url)
    return parsed.database if parsed.get_backend_name() == "postgresql" else None


def psycopg_url(url: str) -> str:
    """A ``postgresql://`` URL that psycopg itself accepts (no SQLAlchemy driver suffix)."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@dataclass
class Target:
    """Where one benchmark's punctual keeps its data: a fresh database and a key ring."""

    backend: str  # "postgres" | "sqlite"
    url: str
    workdir: Path

    @property
    def key_file(self) -> Path:
        return self.workdir / "punctual.keys"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a punctual process: no inherited PUNCTUAL_*, then ours."""
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PUNCTUAL_")}
        env["PUNCTUAL_DATABASE_URL"] = self.url
        env["PUNCTUAL_CODEC__KEY_FILE"] = str(self.key_file)
        env["PUNCTUAL_TENANT_DEFAULTS__MAX_PENDING_STARTS"] = str(NO_QUOTA_LIMIT)
        # The bench package itself must be importable from the process's working directory.
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join([*paths, str(REPO)])
        env.update(extra)
        return env


@contextlib.contextmanager
def fresh_target(backend: str, name: str) -> Iterator[Target]:
    """A fresh database (PostgreSQL or a SQLite temp file), migrated, with a key ring."""
    from punctual.adapters.crypto import generate_key_file

    with tempfile.TemporaryDirectory(prefix=f"punctual-bench-{name}-") as tmp:
        workdir = Path(tmp)
        if backend == "postgres":
            with postgres_database(name) as url:
                target = Target(backend, url, workdir)
                generate_key_file(target.key_file)
                run_cli(target, "db", "upgrade", "--database-url", url)
                yield target
        elif backend == "sqlite":
            target = Target(backend, f"sqlite:///{workdir / 'punctual.db'}", workdir)
            generate_key_file(target.key_file)
            run_cli(target, "db", "upgrade", "--database-url", target.url)
            yield target
        else:
            raise ValueError(f"unknown backend {backend!r} (postgres or sqlite)")


def run_cli(target: Target, *args: str, timeout: float = 120.0) -> str:
    result = subprocess.run(
        [str(PUNCTUAL), *args],
        cwd=target.workdir,
        env=target.env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise BenchError(f"punctual {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def build_system(target: Target, **settings: Any) -> Any:
    """An in-process punctual on the target's database (no runner, no worker started)."""
    from punctual import bootstrap
    from punctual.settings import load_settings

    loaded = load_settings(
        None,
        database_url=target.url,
        codec={"key_file": str(target.key_file)},
        tenant_defaults={"max_pending_starts": NO_QUOTA_LIMIT},
        **settings,
    )
    return bootstrap.build(loaded)


def register_demo_definitions(system: Any) -> None:
    """Make the demo workflows active the way a worker does, without keeping a worker."""
    from punctual.domain.ids import new_id
    from punctual.ports.records import WorkerRecord
    from punctual.usecases.running import execution
    from punctual.worker.definitions import declared_definitions
    from punctual.workflows import load_app

    app = load_app(DEMO_APP)
    now = system.services.clock.now()
    record = WorkerRecord(
        id=new_id("wrk"),
        engine="local",
        host=socket.gethostname(),
        task_queues=[IDLE_QUEUE],
        loaded=[(d.name, d.version, d.artifact) for d in app.definitions],
        slots=1,
        started_at=now,
        heartbeat_at=now,
        stopped_at=None,
    )
    execution.start_worker(system.services, record, declared_definitions(app))
    execution.stop_worker(system.services, record.id)


def workflow_loaded(system: Any, workflow: str = "echo") -> bool:
    """Whether a live worker has the active version of ``workflow`` loaded."""
    from punctual.usecases.running import definitions

    return any(
        d["name"] == workflow and d["state"] == "active" and d["loaded"]
        for d in definitions.list_definitions(system.services)
    )


# --- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Proc:
    """A process this benchmark started, in its own process group (children included)."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise BenchError(f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM and wait; then SIGKILL whatever is left of this process's own group."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        if self.popen.poll() is None:
            self.popen.wait(10)


def spawn(name: str, argv: Sequence[str], target: Target, log_dir: Path, **env: str) -> Proc:
    log = log_dir / f"{name}-{secrets.token_hex(3)}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [str(a) for a in argv],
            cwd=target.workdir,
            env=target.env(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own group, so cleanup reaches its children
        )
    return Proc(name, popen, log)


@contextlib.contextmanager
def running(proc: Proc) -> Iterator[Proc]:
    try:
        yield proc
    finally:
        proc.stop()


def serve_argv(target: Target, components: str, port: int | None = None) -> list[str]:
    argv = [str(PUNCTUAL), "serve", "--components", components, "--database-url", target.url]
    argv += ["--dev-token", DEV_TOKEN]
    if port is not None:
        argv += ["--port", str(port)]
    return argv


def wait_until(
    what: str,
    check: Callable[[], T | None],
    timeout: float,
    *,
    step: float = 0.1,
    procs: Iterable[Proc] = (),
) -> T:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    watched = list(procs)
    while time.monotonic() < deadline:
        for proc in watched:
            proc.check_alive()
        try:
            value = check()
        except Exception as exc:
            last = exc
            value = None
        if value is not None and value is not False:
            return value
        time.sleep(step)
    tails = "".join(f"\n--- {p.name} log (tail):\n{p.tail(1500)}" for p in watched)
    raise BenchError(
        f"timed out after {timeout:.0f}s waiting for {what} (last error: {last}){tails}"
    )


def http_ready(port: int) -> bool:
    """``GET /readyz`` answers 200 (the API is up and reaches its store)."""
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


# --- /proc accounting ------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces.
    opening, closing = data.index("("), data.rindex(")")
    return [data[: data.index(" ")], data[opening + 1 : closing], *data[closing + 2 :].split()]


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU of every live process in process group ``pgid``."""
    total = 0
    for pid in _all_pids():
        fields = _stat_fields(pid)
        # fields: pid, comm, state(2), ppid(3), pgrp(4), ..., utime(13), stime(14)
        if fields is not None and int(fields[4]) == pgid:
            total += int(fields[13]) + int(fields[14])
    return total / CLK_TCK


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def machine_busy_seconds() -> float:
    """CPU time the whole machine spent busy (all cores, everything but idle and iowait)."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / CLK_TCK


def database_backend_pids(database: str) -> set[int]:
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchall()
    return {int(row[0]) for row in rows}


def pid_cpu_seconds(pid: int) -> float:
    fields = _stat_fields(pid)
    return (int(fields[13]) + int(fields[14])) / CLK_TCK if fields else 0.0


def load_average() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


@dataclass
class CpuWindow:
    """CPU used between ``start`` and ``stop``: by our process groups, by the PostgreSQL
    backends of our database, and by everything else on the machine (other people's
    work is noise for a benchmark; it is reported so a reader can judge the figures)."""

    groups: dict[str, int]
    database: str | None = None
    started: float = 0.0
    elapsed: float = 0.0
    before: dict[str, float] | None = None
    used: dict[str, float] | None = None
    _backends: dict[int, float] | None = None

    def _sample(self) -> dict[str, float]:
        sample = {name: group_cpu_seconds(pgid) for name, pgid in self.groups.items()}
        sample["machine"] = machine_busy_seconds()
        return sample

    def start(self) -> None:
        if self.database is not None:
            self._backends = {
                pid: pid_cpu_seconds(pid) for pid in database_backend_pids(self.database)
            }
        self.before = self._sample()
        self.started = time.monotonic()

    def stop(self) -> None:
        after = self._sample()
        self.elapsed = time.monotonic() - self.started
        assert self.before is not None
        self.used = {k: after[k] - self.before.get(k, 0.0) for k in after}
        postgres = 0.0
        if self.database is not None and self._backends is not None:
            pids = database_backend_pids(self.database) | set(self._backends)
            postgres = sum(pid_cpu_seconds(p) - self._backends.get(p, 0.0) for p in pids)
        self.used["postgres"] = max(0.0, postgres)
        ours = sum(self.used[name] for name in self.groups) + self.used["postgres"]
        self.used["others"] = max(0.0, self.used["machine"] - ours)

    def percent(self, name: str) -> float:
        """Percent of one core (200 % = both cores of a 2-core machine)."""
        if not self.used or self.elapsed <= 0:
            return float("nan")
        return 100.0 * self.used.get(name, 0.0) / self.elapsed


# --- statistics and tables -------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True)
class Spread:
    """The median of repeated runs, with their min and max (the machine's noise)."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            return cls(float("nan"), float("nan"), float("nan"))
        return cls(statistics.median(values), min(values), max(values))

    def fmt(self, digits: int = 0) -> str:
        if math.isnan(self.median):
            return "n/a"
        return f"{self.median:,.{digits}f} [{self.low:,.{digits}f}-{self.high:,.{digits}f}]"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    print(line(headers))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    print(flush=True)


def parse_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def run_variants(
    variants: Sequence[str],
    runs: int,
    one_run: Callable[[str, int, Path], T],
    describe: Callable[[str, int, T], str],
    summary_rows: Callable[[str, list[T]], list[list[str]]],
) -> list[list[str]]:
    """Every variant ``runs`` times (each run printed as it ends, logs in a temporary
    directory); the summary rows of all variants."""
    table: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="punctual-bench-logs-") as logs:
        for variant in variants:
            results: list[T] = []
            for run in range(1, runs + 1):
                result = one_run(variant, run, Path(logs))
                results.append(result)
                print(describe(variant, run, result), flush=True)
            table += summary_rows(variant, results)
    return table
