"""Dispatch throughput: starts dispatched per second out of a backlog of due starts.

A fresh PostgreSQL database gets ``--backlog`` (100,000) starts, all due in the past,
bulk-inserted with ``COPY`` (each input encrypted with the codec of a built punctual, as
``starts.create`` would store it). Then 1, and separately 2, runner processes
(``punctual serve --components runner``) dispatch them. Dispatch needs a live worker
that has the workflow loaded, so a ``punctual worker`` serving only a task queue that no
start uses (``bench-idle``) is kept running: it makes ``echo`` loaded but never claims a
run, so no run executes. A run ends when every start is ``dispatched`` or after
``--max-seconds``; the rate is taken from the starts' ``dispatched_at`` stamps (first to
last), so process start-up is not counted, and is also given from spawn to done.

    .venv/bin/python -m bench.dispatch_throughput
    .venv/bin/python -m bench.dispatch_throughput --backlog 20000 --runners 1
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    DEMO_APP,
    IDLE_QUEUE,
    PUNCTUAL,
    TENANT,
    CpuWindow,
    Proc,
    Spread,
    Target,
    build_system,
    database_of,
    fresh_target,
    parse_list,
    print_machine,
    print_table,
    psycopg_url,
    running,
    serve_argv,
    spawn,
    wait_until,
    workflow_loaded,
)

TARGET_PER_S = 2000.0
COLUMNS = (
    "id, tenant, workflow, business_request_id, start_at, workload_class, attributes, "
    "input, input_key_id, state, version, attempts, due_at, created_by, created_at, "
    "updated_at, run_id"
)


@dataclass
class RunResult:
    dispatched: int
    rate: float
    wall_rate: float
    seconds: float
    finished: bool
    cpu: dict[str, float]
    retried: int
    runner_ms: float
    """Runner CPU per dispatch (all runner processes), in ms: robust to others' load."""
    postgres_ms: float


def insert_backlog(target: Target, codec: Any, count: int) -> float:
    """COPY ``count`` due starts (due one minute ago); returns the seconds it took."""
    from punctual.domain.ids import new_id

    began = time.monotonic()
    now = datetime.now(UTC)
    due = now - timedelta(minutes=1)
    with psycopg.connect(psycopg_url(target.url)) as conn:
        with conn.cursor() as cur, cur.copy(f"COPY starts ({COLUMNS}) FROM STDIN") as copy:
            for i in range(count):
                sealed = codec.encrypt({"message": f"backlog {i}"}, TENANT)
                copy.write_row(
                    (
                        new_id("st"),
                        TENANT,
                        "echo",
                        f"backlog-{i}",
                        due,
                        "standard",
                        "{}",
                        sealed.ciphertext,
                        sealed.key_id,
                        "scheduled",
                        1,
                        0,
                        due,
                        "admin",
                        now,
                        now,
                        new_id("run"),
                    )
                )
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE starts")
    return time.monotonic() - began


def reset(target: Target) -> None:
    with psycopg.connect(psycopg_url(target.url), autocommit=True) as conn:
        conn.execute("TRUNCATE starts, runs")


def scalar(target: Target, sql: str) -> Any:
    with psycopg.connect(psycopg_url(target.url), autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
        return row[0] if row else None


def one_run(
    target: Target, runners: int, backlog: int, max_seconds: float, log_dir: Path
) -> RunResult:
    procs: list[Proc] = []
    began = time.monotonic()
    try:
        for n in range(runners):
            argv = serve_argv(target, "runner")
            procs.append(spawn(f"runner{n + 1}", argv, target, log_dir))
        window = CpuWindow({p.name: p.pid for p in procs}, database_of(target.url))
        window.start()
        dispatched = 0
        last_change = time.monotonic()
        while time.monotonic() - began < max_seconds:
            for proc in procs:
                proc.check_alive()
            time.sleep(0.5)
            count = int(scalar(target, "SELECT count(*) FROM starts WHERE state = 'dispatched'"))
            if count != dispatched:
                dispatched, last_change = count, time.monotonic()
            if dispatched >= backlog or time.monotonic() - last_change > 30:
                break
        done = time.monotonic()
        window.stop()
    finally:
        for proc in procs:
            proc.stop()
    first, last = (
        scalar(target, "SELECT min(dispatched_at) FROM starts"),
        scalar(target, "SELECT max(dispatched_at) FROM starts"),
    )
    span = (last - first).total_seconds() if first is not None and last is not None else 0.0
    retried = int(scalar(target, "SELECT count(*) FROM starts WHERE last_error IS NOT NULL"))
    used = window.used or {}
    runner_seconds = sum(used.get(p.name, 0.0) for p in procs)
    return RunResult(
        dispatched=dispatched,
        rate=dispatched / span if span > 0 else float("nan"),
        wall_rate=dispatched / (done - began),
        seconds=done - began,
        finished=dispatched >= backlog,
        cpu={
            name: window.percent(name) for name in [*(p.name for p in procs), "postgres", "others"]
        },
        retried=retried,
        runner_ms=1000 * runner_seconds / dispatched if dispatched else float("nan"),
        postgres_ms=1000 * used.get("postgres", 0.0) / dispatched if dispatched else float("nan"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--runners", default="1,2", help="Runner process counts, e.g. 1,2.")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--max-seconds", type=float, default=60.0, help="Stop a run after this long."
    )
    args = parser.parse_args()

    print_machine("dispatch_throughput: dispatches/s from a due backlog (PostgreSQL)")
    print(
        f"   backlog {args.backlog:,} due starts; runner = `punctual serve --components runner`"
        f" (page size from config: 500); idle worker on queue {IDLE_QUEUE!r} keeps echo loaded"
    )
    rows: list[list[str]] = []
    with (
        tempfile.TemporaryDirectory(prefix="punctual-bench-logs-") as logs,
        fresh_target("postgres", "dispatch") as target,
    ):
        log_dir = Path(logs)
        system = build_system(target)
        try:
            argv = [str(PUNCTUAL), "worker", "--app", DEMO_APP, "--database-url", target.url]
            argv += ["--task-queue", IDLE_QUEUE, "--slots", "1"]
            worker = spawn("idle-worker", argv, target, log_dir)
            with running(worker):
                wait_until("the idle worker", lambda: workflow_loaded(system), 60, procs=[worker])
                for runners in (int(n) for n in parse_list(args.runners)):
                    results: list[RunResult] = []
                    for run in range(1, args.runs + 1):
                        reset(target)
                        took = insert_backlog(target, system.services.codec, args.backlog)
                        result = one_run(target, runners, args.backlog, args.max_seconds, log_dir)
                        results.append(result)
                        cpu = ", ".join(f"{k} {v:.0f}" for k, v in result.cpu.items())
                        print(
                            f"   runners={runners} run {run}: {result.rate:,.0f} dispatches/s "
                            f"({result.dispatched:,} in {result.seconds:.1f} s incl. start-up "
                            f"= {result.wall_rate:,.0f}/s{'' if result.finished else ', cut off'}"
                            f"; retried {result.retried}); backlog inserted in {took:.1f} s; "
                            f"CPU per dispatch: runners {result.runner_ms:.2f} ms, "
                            f"postgres {result.postgres_ms:.2f} ms; "
                            f"CPU % of a core: {cpu}",
                            flush=True,
                        )
                    rows.append(
                        [
                            str(runners),
                            Spread.of([r.rate for r in results]).fmt(),
                            Spread.of([r.wall_rate for r in results]).fmt(),
                            f"{sum(r.finished for r in results)}/{len(results)}",
                            Spread.of(
                                [
                                    sum(v for k, v in r.cpu.items() if k.startswith("runner"))
                                    for r in results
                                ]
                            ).fmt(),
                            Spread.of([r.runner_ms for r in results]).fmt(2),
                            Spread.of([r.cpu["postgres"] for r in results]).fmt(),
                            Spread.of([r.postgres_ms for r in results]).fmt(2),
                            Spread.of([r.cpu["others"] for r in results]).fmt(),
                        ]
                    )
        finally:
            system.close()
    print(f"\ndispatches/s: median of {args.runs} runs [min-max]; CPU in % of one core")
    print_table(
        [
            "runners",
            "dispatches/s (stamps)",
            "incl. start-up",
            "finished",
            "runners' CPU",
            "runner CPU ms/dispatch (incl. start-up)",
            "postgres CPU",
            "postgres CPU ms/dispatch",
            "others' CPU",
        ],
        rows,
    )
    print(f"target: >= {TARGET_PER_S:,.0f} dispatches/s")


if __name__ == "__main__":
    main()
