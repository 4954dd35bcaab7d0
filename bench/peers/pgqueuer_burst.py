"""Bursts side by side: punctual vs pgqueuer, same PostgreSQL, alternating in one run.

Scenarios (as in ``bench.dispatch_lag``): 500 and 2,000 jobs all due at the same
second. Each run creates the burst ahead of its due instant, then measures when each
body *began*, by the body's own ``time.time()`` (punctual: the ``entry`` workflow of
``bench.peers.app`` returns it as its result; pgqueuer: the job appends it to a file), so
no stamp either system writes is trusted. Figures per run: for 2,000, the last body's
start after due (s); for 500, the p99 body start after due (s). Each round runs punctual
then pgqueuer on each scenario; the summary is the median of ``--runs`` rounds
[min-max] and the median of the per-round ratios punctual / pgqueuer.

pgqueuer is installed from the package index into its own virtual environment under the
user's cache directory (``--venv``; created once, reused), with its asyncpg driver, and
runs there as one ``PgQueuer`` worker (``pgqueuer_side.py``) on a database of its own.
punctual runs as ``punctual serve --components api,runner,worker`` (``--topology split``:
runner and worker apart) on another database, both on ``BENCH_PG``'s server.

    .venv/bin/python -m bench.peers.pgqueuer_burst
    .venv/bin/python -m bench.peers.pgqueuer_burst --runs 1 --scenarios burst500
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.common import (
    TENANT,
    CpuWindow,
    Proc,
    Spread,
    build_system,
    database_of,
    fresh_target,
    parse_list,
    percentile,
    postgres_database,
    print_machine,
    print_table,
    wait_until,
    workflow_loaded,
)
from bench.dispatch_lag import create_starts, start_punctual, wait_finished

SCENARIOS = {"burst500": 500, "burst2000": 2000}
FIGURES = {"burst500": "p99 body start after due (s)", "burst2000": "last body start after due (s)"}
PEER_APP = "bench.peers.app:app"
SIDE = Path(__file__).with_name("pgqueuer_side.py")


@dataclass
class Burst:
    lags_s: list[float]
    cpu_others: float

    def figure(self, scenario: str) -> float:
        return max(self.lags_s) if scenario == "burst2000" else percentile(self.lags_s, 99)


def default_venv() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "punctual-bench" / "pgqueuer-venv"


def ensure_peer_venv(venv: Path, spec: str) -> Path:
    """The venv's python, with ``spec`` installed from the package index (once)."""
    python = venv / "bin" / "python"
    marker = venv / "installed.txt"
    if not python.exists() or not marker.exists() or marker.read_text() != spec:
        print(f"   installing {spec} into {venv} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", spec],
            check=False,
            capture_output=True,
            text=True,
        )
        if pip.returncode != 0:
            raise SystemExit(f"pip install {spec} failed:\n{pip.stdout}\n{pip.stderr}")
        marker.write_text(spec)
    version = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('pgqueuer'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"   pgqueuer {version} in {venv}", flush=True)
    return python


def pg_env(url: str) -> dict[str, str]:
    parsed = sa.engine.make_url(url)
    env = dict(os.environ)
    env.update(
        PGHOST=parsed.host or "127.0.0.1",
        PGPORT=str(parsed.port or 5432),
        PGUSER=parsed.username or "postgres",
        PGDATABASE=parsed.database or "",
    )
    if parsed.password:
        env["PGPASSWORD"] = parsed.password
    return env


def plain_dsn(url: str) -> str:
    return sa.engine.make_url(url).set(drivername="postgresql").render_as_string(False)


def spawn_consumer(python: Path, dsn: str, out: Path, batch: int, log_dir: Path) -> Proc:
    log = log_dir / f"pgqueuer-{secrets.token_hex(3)}.log"
    with log.open("wb") as sink:
        popen = subprocess.Popen(
            [str(python), str(SIDE), "consume", dsn, str(out), str(batch)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return Proc("pgqueuer", popen, log)


def due_in(lead: float) -> int:
    return math.ceil(time.time() + lead)


def peer_burst(python: Path, dsn: str, out: Path, consumer: Proc, count: int, lead: float) -> Burst:
    tag = f"b{secrets.token_hex(4)}"
    due = due_in(lead)
    subprocess.run(
        [str(python), str(SIDE), "enqueue", dsn, tag, str(count), str(due)],
        check=True,
        timeout=60,
    )
    window = CpuWindow({"pgqueuer": consumer.pid}, database_of(dsn))
    wait_until("the due time", lambda: time.time() >= due - 0.5, lead + 5, step=0.05)
    window.start()

    def entries() -> list[float]:
        lines = out.read_text().splitlines() if out.exists() else []
        return [float(x.split()[2]) for x in lines if x.startswith(tag + " ")]

    wait_until(
        f"{count} pgqueuer jobs", lambda: len(entries()) >= count, 120, step=0.1, procs=[consumer]
    )
    window.stop()
    return Burst([t - due for t in entries()], window.percent("others"))


def punctual_burst(
    system: Any, engine: sa.Engine, procs: list[Proc], count: int, lead: float
) -> Burst:
    from punctual.domain.permissions import Principal, Role
    from punctual.usecases.running import runs

    tag = f"peer-{secrets.token_hex(4)}"
    due = due_in(lead)
    create_starts(system, tag, datetime.fromtimestamp(due, UTC), count, 0.0, workflow="entry")
    window = CpuWindow({p.name: p.pid for p in procs}, database_of(engine.url.render_as_string()))
    wait_until("the due time", lambda: time.time() >= due - 0.5, lead + 5, step=0.05)
    window.start()
    wait_finished(engine, tag, count, 120, procs)
    window.stop()
    with engine.connect() as conn:
        run_ids = conn.execute(
            sa.text(
                "SELECT run_id FROM starts WHERE tenant = :tenant AND business_request_id = :tag"
            ),
            {"tenant": TENANT, "tag": tag},
        ).scalars()
        ids = list(run_ids)
    principal = Principal(tenant=TENANT, subject="admin", role=Role.ADMIN)
    lags = []
    for run_id in ids:
        result = runs.get(system.services, principal, run_id)["result"] or {}
        if "entered" in result:
            lags.append(float(result["entered"]) - due)
    if len(lags) < count:
        print(f"     warning: {count - len(lags)} punctual runs returned no entry time")
    return Burst(lags, window.percent("others"))


def describe(system: str, scenario: str, run: int, burst: Burst) -> str:
    lags = burst.lags_s
    return (
        f"   run {run} {scenario} {system:9}: p50/p99/max body start after due "
        f"{percentile(lags, 50):.3f}/{percentile(lags, 99):.3f}/{max(lags):.3f} s "
        f"({len(lags)} bodies; others' CPU {burst.cpu_others:.0f} % of a core)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line, also used by ``bench.targets`` so its rows keep these defaults."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="burst500,burst2000")
    parser.add_argument("--runs", type=int, default=3, help="Alternating rounds.")
    parser.add_argument("--topology", default="single", help="punctual: single or split")
    parser.add_argument("--slots", type=int, default=32, help="punctual worker slots.")
    parser.add_argument("--lead", type=float, default=10.0, help="Seconds from create to due.")
    parser.add_argument("--peer-batch-size", type=int, default=10, help="pgqueuer's default.")
    parser.add_argument("--pgqueuer-spec", default="pgqueuer[asyncpg]")
    parser.add_argument("--venv", type=Path, default=default_venv())
    return parser


def measure(args: argparse.Namespace, python: Path) -> dict[tuple[str, str], list[Burst]]:
    """The alternating rounds, each burst printed as it ends; the bursts by
    (scenario, "punctual" or "pgqueuer"), in round order."""
    scenarios = parse_list(args.scenarios)
    results: dict[tuple[str, str], list[Burst]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="punctual-bench-logs-") as logs,
        fresh_target("postgres", "peers") as target,
        postgres_database("pgq") as peer_url,
    ):
        log_dir = Path(logs)
        subprocess.run(
            [str(python), "-m", "pgqueuer", "install"],
            env=pg_env(peer_url),
            check=True,
            capture_output=True,
        )
        dsn = plain_dsn(peer_url)
        out = log_dir / "pgqueuer-entries.txt"
        consumer = spawn_consumer(python, dsn, out, args.peer_batch_size, log_dir)
        procs = start_punctual(target, args.topology, args.slots, log_dir, app=PEER_APP)
        system = build_system(target)
        engine = sa.create_engine(target.url.replace("postgresql://", "postgresql+psycopg://", 1))
        try:
            wait_until(
                "the entry workflow", lambda: workflow_loaded(system, "entry"), 60, procs=procs
            )
            time.sleep(2.0)  # both idle before the first burst
            consumer.check_alive()
            for run in range(1, args.runs + 1):
                for scenario in scenarios:
                    count = SCENARIOS[scenario]
                    ours = punctual_burst(system, engine, procs, count, args.lead)
                    print(describe("punctual", scenario, run, ours), flush=True)
                    time.sleep(1.0)
                    peer = peer_burst(python, dsn, out, consumer, count, args.lead)
                    print(describe("pgqueuer", scenario, run, peer), flush=True)
                    time.sleep(1.0)
                    results.setdefault((scenario, "punctual"), []).append(ours)
                    results.setdefault((scenario, "pgqueuer"), []).append(peer)
        finally:
            engine.dispose()
            system.close()
            for proc in [*procs, consumer]:
                proc.stop()
    return results


@dataclass
class Figures:
    """One scenario's figure per round (s) for each system, and the per-round ratios."""

    punctual: list[float]
    pgqueuer: list[float]
    ratios: list[float]
    others_cpu: list[float]


def figures(results: dict[tuple[str, str], list[Burst]], scenario: str) -> Figures:
    """Ratios within a round, where both systems shared the machine's noise."""
    ours = [b.figure(scenario) for b in results[(scenario, "punctual")]]
    peer = [b.figure(scenario) for b in results[(scenario, "pgqueuer")]]
    return Figures(
        punctual=ours,
        pgqueuer=peer,
        ratios=[a / b for a, b in zip(ours, peer, strict=True) if b > 0],
        others_cpu=[b.cpu_others for key, v in results.items() if key[0] == scenario for b in v],
    )


def main() -> None:
    args = build_parser().parse_args()

    print_machine("peers.pgqueuer_burst: body start after due, punctual vs pgqueuer")
    python = ensure_peer_venv(args.venv, args.pgqueuer_spec)
    results = measure(args, python)
    rows = []
    for scenario in parse_list(args.scenarios):
        found = figures(results, scenario)
        rows.append(
            [
                f"{scenario}: {FIGURES[scenario]}",
                Spread.of(found.pgqueuer).fmt(3),
                Spread.of(found.punctual).fmt(3),
                Spread.of(found.ratios).fmt(2),
                f"{statistics.median(found.others_cpu):.0f}",
            ]
        )
    print(f"\nmedian of {args.runs} alternating rounds [min-max]; topology {args.topology}")
    print_table(
        ["figure", "pgqueuer", "punctual", "ratio punctual/pgqueuer", "others' CPU %"], rows
    )


if __name__ == "__main__":
    main()
