"""Scheduled starts created per second through the real HTTP server, single and batch.

For each backend (SQLite, PostgreSQL) it deploys every variant at once, each on a fresh
database with its own ``punctual serve --components api`` process(es): single creates with
1 and 16 clients, the batch route (``--batch-size`` items per request, ``--batch-clients``
clients), two API processes, the 16-client case with ``--preload`` pending starts inserted
first, and ``GET /healthz`` (the HTTP stack's floor). It then runs the load generator
(``bench.loadgen``, its own process) against the variants in turn, ``--runs`` rounds, so the
variants are measured side by side and share the machine's noise. It reports the median
creates/s of the runs with min and max, request latency, the CPU each process used
(100 % = one core) and the ratios the targets are stated in (creates/s over the floor of
the same run, with the backlog over without).

``--profile`` then runs the same load once more against an in-process copy of the
server under cProfile (``bench.profile_server``) and prints where the time goes.

    .venv/bin/python -m bench.create_throughput
    .venv/bin/python -m bench.create_throughput --backends postgres --clients 16 \
        --api-processes 2 --preload 100000 --routes create,batch
    .venv/bin/python -m bench.create_throughput --backends postgres --clients 16 --profile
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pstats
import shutil
import signal
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from bench.common import (
    DEV_TOKEN,
    PYTHON,
    BenchError,
    CpuWindow,
    Proc,
    Spread,
    Target,
    build_system,
    database_of,
    free_port,
    fresh_target,
    http_ready,
    parse_list,
    print_machine,
    print_table,
    register_demo_definitions,
    running,
    serve_argv,
    spawn,
    wait_until,
)

STARTUP_SECONDS = 60.0
TARGET_PER_S = 1000.0


@dataclass
class RunResult:
    rate: float
    p50_ms: float
    p99_ms: float
    errors: int
    sample_error: str | None
    server_cpu: float
    postgres_cpu: float
    client_cpu: float
    others_cpu: float
    server_ms_per_request: float


def prepare(target: Target, preload: int = 0) -> None:
    """Activate the demo workflows (an API-only server has no worker to register them),
    and insert ``preload`` pending starts of the same tenant first."""
    from bench.dispatch_throughput import insert_backlog

    system = build_system(target)
    try:
        register_demo_definitions(system)
        if preload and target.backend == "postgres":
            insert_backlog(target, system.services.codec, preload)
    finally:
        system.close()


def load(
    ports: list[int],
    clients: int,
    count: int,
    warmup: int,
    tag: str,
    servers: list[Proc],
    database_url: str,
    around: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
    route: str = "create",
    batch_size: int = 500,
) -> RunResult:
    """One run of the load generator; ``around`` wraps just the timed phase (a profiler).
    For the batch route ``count`` and ``warmup`` are requests of ``batch_size`` items."""
    port_list = ",".join(str(p) for p in ports)
    argv = [str(PYTHON), "-m", "bench.loadgen", "--port", port_list, "--token", DEV_TOKEN]
    argv += ["--clients", str(clients), "--count", str(count), "--warmup", str(warmup)]
    argv += ["--tag", tag, "--handshake", "--route", route, "--batch-size", str(batch_size)]
    generator = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        start_new_session=True,
    )
    groups = {f"server{n}": server.pid for n, server in enumerate(servers)}
    groups["client"] = generator.pid
    window = CpuWindow(groups, database_of(database_url))
    try:
        assert generator.stdin is not None and generator.stdout is not None
        if generator.stdout.readline().strip() != "warm":
            raise BenchError(f"the load generator failed during warm-up\n{servers[0].tail()}")
        with around():
            window.start()
            generator.stdin.write("go\n")
            generator.stdin.flush()
            line = generator.stdout.readline()
            window.stop()
        if generator.wait(60) != 0 or not line:
            raise BenchError(f"the load generator failed\n{servers[0].tail()}")
    finally:
        if generator.poll() is None:
            generator.kill()
            generator.wait()
    result: dict[str, Any] = json.loads(line)
    errors = result["count"] - result["created"]
    assert window.used is not None
    server_seconds = sum(window.used[f"server{n}"] for n in range(len(servers)))
    return RunResult(
        rate=result["rate_per_s"],
        p50_ms=result["latency_ms"]["p50"],
        p99_ms=result["latency_ms"]["p99"],
        errors=errors,
        sample_error=result["sample_error"],
        server_cpu=100.0 * server_seconds / window.elapsed,
        postgres_cpu=window.percent("postgres"),
        client_cpu=window.percent("client"),
        others_cpu=window.percent("others"),
        server_ms_per_request=(
            1000 * server_seconds / result["created"] if result["created"] else float("nan")
        ),
    )


@dataclass(frozen=True)
class Variant:
    backend: str
    route: str
    """create (POST scheduled-starts), batch (POST scheduled-starts/batch) or healthz."""
    clients: int
    processes: int = 1
    preload: int = 0

    @property
    def label(self) -> str:
        what = {"create": "create", "batch": "batch", "healthz": "GET /healthz"}[self.route]
        label = f"{self.backend} {what}"
        if self.processes > 1:
            label += f" x{self.processes} processes"
        if self.preload:
            label += f" +{self.preload:,} pending"
        return label


@dataclass
class Deployment:
    variant: Variant
    target: Target
    ports: list[int]
    servers: list[Proc]
    results: list[RunResult]


@contextlib.contextmanager
def deployed(variant: Variant, log_dir: Path) -> Iterator[Deployment]:
    """Fresh database, ``variant.processes`` API servers (the load generator alternates
    between them, as a balancer would between uvicorn workers)."""
    with fresh_target(variant.backend, "create") as target, contextlib.ExitStack() as stack:
        prepare(target, variant.preload)
        ports: list[int] = []
        servers: list[Proc] = []
        for n in range(variant.processes):
            port = free_port()
            server = spawn(f"serve-api{n}", serve_argv(target, "api", port), target, log_dir)
            stack.enter_context(running(server))
            ports.append(port)
            servers.append(server)
            # One at a time: each start ensures tenant ``default`` and its dev token.
            wait_until("the API", partial(http_ready, port), STARTUP_SECONDS, procs=servers)
        yield Deployment(variant, target, ports, servers, [])


def run_once(deployment: Deployment, run: int, args: argparse.Namespace) -> RunResult:
    v = deployment.variant
    batch = v.route == "batch"
    count = max(1, args.batch_count // args.batch_size) if batch else args.count
    warmup = 1 if batch else args.warmup
    tag = f"ct-{v.backend}-{v.route}-{v.clients}-{v.processes}-{v.preload}-{run}"
    result = load(
        deployment.ports,
        v.clients,
        count,
        warmup,
        tag,
        deployment.servers,
        deployment.target.url,
        route=v.route,
        batch_size=args.batch_size,
    )
    unit = "creates/s" if v.route != "healthz" else "req/s"
    print(
        f"   {v.label:<40} clients={v.clients:<3} run {run}: {result.rate:,.0f} {unit}"
        f"  server CPU {result.server_ms_per_request:.3f} ms/item"
        f"  p50 {result.p50_ms:.1f} ms  p99 {result.p99_ms:.1f} ms  errors {result.errors}"
        f"  cpu server {result.server_cpu:.0f}% postgres {result.postgres_cpu:.0f}%"
        f" client {result.client_cpu:.0f}% others {result.others_cpu:.0f}%",
        flush=True,
    )
    if result.sample_error:
        print(f"     first error: {result.sample_error}", flush=True)
    return result


def variants_of(backend: str, args: argparse.Namespace) -> list[Variant]:
    clients = [int(c) for c in parse_list(args.clients)]
    most = max(clients)
    processes = [int(n) for n in parse_list(args.api_processes)]
    routes = parse_list(args.routes)
    found: list[Variant] = []
    if "create" in routes:
        found += [Variant(backend, "create", c) for c in clients]
        found += [Variant(backend, "create", most, p) for p in processes if p > 1]
        if args.preload and backend == "postgres":
            found.append(Variant(backend, "create", most, max(processes), args.preload))
    if "batch" in routes:
        found += [Variant(backend, "batch", args.batch_clients, p) for p in processes]
    if not args.no_floor:
        found += [Variant(backend, "healthz", most, p) for p in processes]
    return found


def floor_of(v: Variant, variants: Iterable[Variant]) -> Variant | None:
    """The ``/healthz`` variant a rate is stated against: same processes, and for single
    creates the same clients too (a batch's clients differ from the floor's)."""
    for w in variants:
        if w.route != "healthz" or w.processes != v.processes:
            continue
        if v.route == "batch" or w == Variant(v.backend, "healthz", v.clients, v.processes):
            return w
    return None


def ratios(deployments: list[Deployment]) -> list[str]:
    """The targets' ratios, of medians measured in the same invocation."""
    median = {d.variant: Spread.of([r.rate for r in d.results]).median for d in deployments}
    lines = []
    for v, rate in median.items():
        if v.route == "healthz":
            continue
        floor_variant = floor_of(v, median)
        floor = median[floor_variant] if floor_variant is not None else None
        if floor and not v.preload:
            lines.append(f"{v.label}: {rate:,.0f}/s = {rate / floor:.2f} x the /healthz floor")
        if v.preload:
            base = median.get(Variant(v.backend, v.route, v.clients, v.processes))
            if base:
                lines.append(f"{v.label}: {rate:,.0f}/s = {rate / base:.2f} x without the backlog")
    return lines


# --- profile -----------------------------------------------------------------------------------

STAGES: list[tuple[str, str, str]] = [
    # (label, file suffix, function name): what a create spends its time on, inclusive.
    ("HTTP edge: authenticate (token lookup tx)", "usecases/tenancy/identity.py", "authenticate"),
    (
        "create transaction: keys, decision, insert, record",
        "usecases/kernel/idempotency.py",
        "_batch_in",
    ),
    ("  claim keys (INSERT .. ON CONFLICT)", "stores/sql/idempotency.py", "claim_many"),
    ("  quota: pending counter read", "stores/sql/pending_counts.py", "pending_by_class"),
    ("  INSERT starts .. RETURNING", "stores/sql/start_inserts.py", "insert_starts"),
    ("  record outcomes (UPDATE keys)", "stores/sql/idempotency.py", "complete_many"),
    ("  parse + validate body (pydantic)", "adapters/http/edge.py", "parse_body"),
    ("  require_active (definition read)", "usecases/running/definitions.py", "require_active"),
    ("  input_problems (JSON Schema)", "usecases/running/definitions.py", "input_problems"),
    ("  quota admit_starts (lock + counter)", "adapters/quota.py", "admit_starts"),
    ("  codec encrypt (AES-GCM)", "adapters/crypto.py", "encrypt"),
    ("fingerprint (canonical JSON + sha256)", "adapters/http/edge.py", "fingerprint"),
    ("SQLAlchemy Connection.execute (all)", "sqlalchemy/engine/base.py", "execute"),
    ("  statement compile / cache key (all)", "sqlalchemy/sql/elements.py", "_compile_w_cache"),
    ("  psycopg cursor.execute (all)", "psycopg/cursor.py", "execute"),
    ("transaction commit (all)", "sqlalchemy/engine/base.py", "commit"),
    ("pool checkout incl. pre-ping (all)", "sqlalchemy/pool/base.py", "_checkout"),
    ("FastAPI/Starlette request handling", "fastapi/routing.py", "app"),
    ("uvicorn httptools protocol", "protocols/http/httptools_impl.py", "run_asgi"),
]

PACKAGES = [
    "punctual",
    "sqlalchemy",
    "psycopg",
    "fastapi",
    "starlette",
    "pydantic",
    "uvicorn",
    "anyio",
    "jsonschema",
    "cryptography",
    "asyncio",
    "concurrent",
    "threading",
    "json",
]


def _package_of(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    for name in PACKAGES:
        if name in parts:
            return name
    return "other (stdlib, C)"


def _cumulative(stats: pstats.Stats, suffix: str, name: str) -> tuple[float, int]:
    """Cumulative time and primitive calls of the functions that match (summed)."""
    total, calls = 0.0, 0
    for (filename, _line, function), entry in stats.stats.items():  # type: ignore[attr-defined]
        if function == name and filename.replace("\\", "/").endswith(suffix):
            total += entry[3]
            calls += entry[0]
    return total, calls


def report_cprofile(path: Path, requests: int, timer: str, top: int) -> None:
    stats = pstats.Stats(str(path))
    total = stats.total_tt  # type: ignore[attr-defined]
    what = "CPU" if timer == "cpu" else "wall"
    print(
        f"\ncProfile ({what} time, every thread): {total:.2f} s for {requests} requests "
        f"= {1e6 * total / requests:,.0f} us per request (cProfile's own overhead included)"
    )
    rows = []
    for label, suffix, name in STAGES:
        cumulative, calls = _cumulative(stats, suffix, name)
        if calls:
            rows.append(
                [label, f"{1e6 * cumulative / requests:,.0f}", f"{100 * cumulative / total:.0f}%"]
            )
    print_table(["stage (inclusive)", "us/request", f"share of {what}"], rows)
    by_package: Counter[str] = Counter()
    for (filename, _line, _function), entry in stats.stats.items():  # type: ignore[attr-defined]
        by_package[_package_of(filename)] += entry[2]
    print(f"Own {what} time by package:")
    print_table(
        ["package", "share"],
        [[name, f"{100 * t / total:.1f}%"] for name, t in by_package.most_common()],
    )
    entries = sorted(
        stats.stats.items(),  # type: ignore[attr-defined]
        key=lambda item: item[1][2],
        reverse=True,
    )[:top]
    rows = [
        [
            f"{Path(filename).parent.name}/{Path(filename).name}:{line} {function}"
            if filename != "~"
            else function,
            f"{1e6 * entry[2] / requests:,.1f}",
            f"{100 * entry[2] / total:.1f}%",
        ]
        for (filename, line, function), entry in entries
    ]
    print(f"Top {top} functions by own {what} time:")
    print_table(["function", "us/request", "share"], rows)


def _frames(stack: str) -> list[tuple[str, str]]:
    """``func (path:line);...`` -> [(func, path)], outermost first (py-spy's raw format)."""
    frames = []
    for frame in stack.split(";"):
        func, _, rest = frame.partition(" (")
        frames.append((func, rest.rsplit(":", 1)[0]))
    return frames


def _matches(func: str, path: str, name: str, suffix: str) -> bool:
    """py-spy names methods ``Class.method``; cProfile names them ``method``."""
    return (func == name or func.endswith("." + name)) and path.endswith(suffix)


def report_pyspy(path: Path, requests: int, seconds: float, top: int) -> None:
    stacks: list[tuple[list[tuple[str, str]], int]] = []
    for line in path.read_text().splitlines():
        stack, _, number = line.rpartition(" ")
        if stack and number.isdigit():
            stacks.append((_frames(stack), int(number)))
    total = sum(count for _, count in stacks)
    if not total:
        print("py-spy recorded no samples")
        return
    print(
        f"\npy-spy (sampling, non-idle threads of `punctual serve`): {total} samples in "
        f"{seconds:.1f} s; shares are of all non-idle samples"
    )
    roots: Counter[str] = Counter()
    stages: Counter[str] = Counter()
    own: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    for frames, count in stacks:
        files = {p for _, p in frames}
        if any(p.endswith("concurrent/futures/thread.py") for p in files):
            roots["idempotency runner pool threads (the mutations)"] += count
        elif any(_matches(f, p, "run", "anyio/_backends/_asyncio.py") for f, p in frames):
            roots["AnyIO worker threads (sync routes and dependencies)"] += count
        else:
            roots["event loop thread (uvicorn, Starlette/FastAPI async)"] += count
        for label, suffix, name in STAGES:
            if any(_matches(f, p, name, suffix) for f, p in frames):
                stages[label] += count
        func, file = frames[-1]
        own[f"{Path(file).parent.name}/{Path(file).name} {func}"] += count
        packages[_package_of(file)] += count
    print_table(
        ["thread", "share"], [[k, f"{100 * v / total:.0f}%"] for k, v in roots.most_common()]
    )
    print_table(
        ["stage (inclusive)", "share of samples"],
        [[label, f"{100 * stages[label] / total:.0f}%"] for label, _, _ in STAGES if stages[label]],
    )
    print("Own (leaf) samples by package:")
    print_table(
        ["package", "share"], [[k, f"{100 * v / total:.1f}%"] for k, v in packages.most_common()]
    )
    print(f"Top {top} functions by own samples:")
    print_table(
        ["function", "share"],
        [[k, f"{100 * v / total:.1f}%"] for k, v in own.most_common(top)],
    )


def find_py_spy() -> str | None:
    return os.environ.get("PY_SPY") or shutil.which("py-spy")


def profile(args: argparse.Namespace, log_dir: Path) -> None:
    clients = int(parse_list(args.clients)[-1])
    py_spy = find_py_spy()
    use_py_spy = args.profiler == "py-spy"
    if use_py_spy and py_spy is None:
        raise BenchError("py-spy not found: put it on PATH or set PY_SPY=/path/to/py-spy")
    how = "py-spy" if use_py_spy else f"cProfile (timer={args.timer})"
    print(f"\nProfiling with {how}: postgres, {clients} clients, {args.count} creates")
    with fresh_target("postgres", "createprof") as target:
        prepare(target)
        port = free_port()
        if use_py_spy:
            server = spawn("serve-api", serve_argv(target, "api", port), target, log_dir)
            out = log_dir / "create.pyspy.txt"
        else:
            out = log_dir / "create.pstats"
            argv = [str(PYTHON), "-m", "bench.profile_server", "--database-url", target.url]
            argv += ["--port", str(port), "--dev-token", DEV_TOKEN, "--out", str(out)]
            argv += ["--timer", args.timer]
            server = spawn("profile-server", argv, target, log_dir)

        @contextlib.contextmanager
        def sampling() -> Iterator[None]:
            assert py_spy is not None
            argv = [py_spy, "record", "--pid", str(server.pid), "--rate", "250"]
            argv += ["--format", "raw", "--gil", "--output", str(out)]
            spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                yield
            finally:
                spy.send_signal(signal.SIGINT)
                try:
                    spy.wait(60)
                except subprocess.TimeoutExpired:
                    spy.kill()
                    spy.wait()

        with running(server):
            wait_until("the API", lambda: http_ready(port), STARTUP_SECONDS, procs=[server])
            around = sampling if use_py_spy else contextlib.nullcontext
            result = load(
                [port], clients, args.count, args.warmup, "prof", [server], target.url, around
            )
            print(
                f"   while profiled: {result.rate:,.0f} creates/s, errors {result.errors}",
                flush=True,
            )
            server.stop(timeout=60)
        if not out.exists():
            raise BenchError(f"the profiler wrote nothing\n{server.tail()}")
        if args.save_profile:
            shutil.copyfile(out, args.save_profile)
            print(f"   profile saved to {args.save_profile}")
        if use_py_spy:
            report_pyspy(out, args.count, args.count / result.rate, args.top)
        else:
            report_cprofile(out, args.count + args.warmup, args.timer, args.top)


def row_of(label: str, clients: int, results: list[RunResult]) -> list[str]:
    return [
        label,
        str(clients),
        Spread.of([r.rate for r in results]).fmt(),
        Spread.of([r.p50_ms for r in results]).fmt(1),
        Spread.of([r.p99_ms for r in results]).fmt(1),
        str(sum(r.errors for r in results)),
        Spread.of([r.server_ms_per_request for r in results]).fmt(2),
        Spread.of([r.server_cpu for r in results]).fmt(),
        Spread.of([r.postgres_cpu for r in results]).fmt(),
        Spread.of([r.client_cpu for r in results]).fmt(),
        Spread.of([r.others_cpu for r in results]).fmt(),
    ]


HEADERS = [
    "backend",
    "clients",
    "req/s",
    "p50 ms",
    "p99 ms",
    "errors",
    "server CPU ms/req",
    "server CPU",
    "postgres CPU",
    "client CPU",
    "others' CPU",
]


def build_parser() -> argparse.ArgumentParser:
    """The command line, also used by ``bench.targets`` so its rows keep these defaults."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite,postgres")
    parser.add_argument("--clients", default="1,16", help="Concurrent clients, e.g. 1,16.")
    parser.add_argument(
        "--count", type=int, default=2000, help="Timed creates per run (batch: items)."
    )
    parser.add_argument("--warmup", type=int, default=100, help="Untimed creates per run.")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--api-processes",
        default="1",
        help="API server processes, e.g. 1,2: with 2, the 16-client PostgreSQL case is also "
        "run against two `serve --components api` processes (what uvicorn --workers 2 would "
        "give; `serve` has no such option).",
    )
    parser.add_argument(
        "--preload",
        type=int,
        default=0,
        help="Also run the most-clients create case (with the most API processes) with this "
        "many pending starts of the tenant inserted first, e.g. 100000 (PostgreSQL only).",
    )
    parser.add_argument("--routes", default="create,batch", help="create,batch")
    parser.add_argument("--batch-size", type=int, default=500, help="Items per batch request.")
    parser.add_argument("--batch-count", type=int, default=10000, help="Timed batch items per run.")
    parser.add_argument("--batch-clients", type=int, default=4, help="Clients of the batch route.")
    parser.add_argument(
        "--no-floor",
        action="store_true",
        help="Skip GET /healthz with the most clients (what the HTTP stack alone costs).",
    )
    parser.add_argument("--profile", action="store_true", help="Also profile the server.")
    parser.add_argument("--profile-only", action="store_true", help="Only profile.")
    parser.add_argument(
        "--profiler",
        choices=["cprofile", "py-spy"],
        default="cprofile",
        help="cprofile: in-process harness, every thread, CPU timer (default). py-spy: "
        "sampling, attached to the real server (on PATH or $PY_SPY); in containers its "
        "idle detection can be unreliable.",
    )
    parser.add_argument("--timer", choices=["cpu", "wall"], default="cpu", help="cProfile timer.")
    parser.add_argument("--top", type=int, default=25, help="Functions listed by the profile.")
    parser.add_argument("--save-profile", default=None, help="Keep the profile file here.")
    return parser


def measure_backend(backend: str, args: argparse.Namespace, log_dir: Path) -> list[Deployment]:
    """Every variant of ``backend`` deployed at once and measured in turn, ``--runs``
    rounds (each run printed as it ends); the deployments with their results, torn down."""
    with contextlib.ExitStack() as stack:
        deployments = [
            stack.enter_context(deployed(v, log_dir)) for v in variants_of(backend, args)
        ]
        for run in range(1, args.runs + 1):
            for deployment in deployments:  # alternating: the same noise for all
                deployment.results.append(run_once(deployment, run, args))
    return deployments


def main() -> None:
    args = build_parser().parse_args()

    print_machine("create_throughput: creates/s through POST /scheduled-starts (single, batch)")
    print("   server: `punctual serve --components api`, 1 process = 1 uvicorn worker")
    with tempfile.TemporaryDirectory(prefix="punctual-bench-logs-") as logs:
        log_dir = Path(logs)
        if not args.profile_only:
            rows = []
            notes = []
            for backend in parse_list(args.backends):
                deployments = measure_backend(backend, args, log_dir)
                rows += [row_of(d.variant.label, d.variant.clients, d.results) for d in deployments]
                notes += ratios(deployments)
            print(
                f"\ncreates/s (items/s for batch, req/s for /healthz): median of {args.runs} runs "
                f"of {args.count} [min-max]; CPU in % of one core over the timed phase"
            )
            print_table(HEADERS, rows)
            for line in notes:
                print(f"   {line}")
            print(
                f"targets: >= {TARGET_PER_S:,.0f} creates/s with two API processes and >= 0.25 x "
                "the floor; >= 10,000 items/s through batch (PostgreSQL, 4 clients); "
                ">= 0.9 x with the backlog"
            )
        if args.profile or args.profile_only:
            profile(args, log_dir)


if __name__ == "__main__":
    main()
