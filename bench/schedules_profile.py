"""Where the runner's time goes under recurring load: an in-process runner under cProfile.

The same load as ``schedules_sustained`` (``--schedules`` one-second interval schedules,
demo ``echo``, overlap ``allow_all``, missed ``catch_up``) on a fresh PostgreSQL database,
with a real ``punctual worker`` process (``--slots``) executing the runs. The runner is
this process: it builds punctual (``bootstrap.build``, the default tenant as ``serve``
does) and runs the runner loop of ``punctual.runner.loop.Runner._loop`` written out with
the public use cases, so that each phase can be timed on its own:

    generation.generate -> release_buffered -> dispatch.dispatch_due -> (reap every 5 s)
    -> unless a page was full: earliest due / earliest generation -> doorbell wait

Printed: per phase wall and CPU time per second of load and per occurrence, the SQL
statements each phase sends (per pass and per occurrence), what the loop achieved, and
the cProfile (``--timer cpu``: this thread's CPU time, the default; ``wall`` shows waits
on PostgreSQL too) top functions by own and cumulative time.

    .venv/bin/python -m bench.schedules_profile
    .venv/bin/python -m bench.schedules_profile --timer wall --seconds 20
"""

from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.common import (
    DEMO_APP,
    DEV_TOKEN,
    PUNCTUAL,
    CpuWindow,
    build_system,
    database_of,
    fresh_target,
    print_machine,
    print_table,
    running,
    spawn,
    wait_until,
    workflow_loaded,
)
from bench.schedules_common import IntervalSchedules, insert_schedules, rows, wait_for_quiet

PHASES = ("generate", "release_buffered", "dispatch", "reap", "sleep_calc", "idle_wait")


def summary(sql: str) -> str:
    """``UPDATE starts``, ``SELECT schedules``: enough to tell the statements apart."""
    flat = " ".join(sql.split())
    update = re.search(r"UPDATE (\w+) SET", flat)
    if update:
        return f"{'WITH .. ' if flat.startswith('WITH') else ''}UPDATE {update.group(1)}"
    table = re.search(r"(?:FROM|INTO) (\w+)", flat)
    return f"{flat.split()[0].upper()} {table.group(1) if table else ''}".strip()


class Phases:
    """Wall and CPU time per phase, and the statements each phase sends."""

    def __init__(self) -> None:
        self.current = "other"
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.statements: dict[str, Counter[str]] = defaultdict(Counter)

    def listener(
        self, _conn: Any, _cursor: Any, statement: str, _params: Any, _ctx: Any, many: bool
    ) -> None:
        self.statements[self.current][summary(statement) + (" (many)" if many else "")] += 1

    def run(self, name: str, action: Any) -> Any:
        self.current = name
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return action()
        finally:
            self.wall[name] += time.perf_counter() - wall
            self.cpu[name] += time.thread_time() - cpu
            self.current = "other"


def runner_loop(system: Any, page_size: int, seconds: float, phases: Phases) -> dict[str, int]:
    """``Runner._loop`` of punctual.runner.loop with every phase timed (no outage handling:
    an error ends the benchmark)."""
    from punctual.domain.ids import new_id
    from punctual.usecases.recurring.generation import LOOKAHEAD, generate
    from punctual.usecases.running import execution
    from punctual.usecases.scheduled.dispatch import dispatch_due

    services = system.services
    runner_id = new_id("wrk")
    totals: Counter[str] = Counter()
    next_reap = 0.0
    end = time.monotonic() + seconds

    def release() -> int:
        with services.store.transaction() as tx:
            released: int = tx.starts.release_buffered(services.clock.now())
            return released

    def sleep_seconds() -> float:
        with services.store.transaction(readonly=True) as tx:
            due = tx.starts.earliest_due()
            generation = tx.schedules.earliest_generation()
        candidates = [due] if due is not None else []
        if generation is not None:
            candidates.append(generation - LOOKAHEAD)
        if not candidates:
            return 1.0
        wait: float = (min(candidates) - services.clock.now()).total_seconds()
        return max(0.0, min(1.0, wait))

    while time.monotonic() < end:
        generated = phases.run("generate", lambda: generate(services, page_size)).generated
        released = phases.run("release_buffered", release)
        report = phases.run("dispatch", lambda: dispatch_due(services, runner_id, page_size))
        totals["passes"] += 1
        totals["generated"] += generated
        totals["claimed"] += report.claimed
        totals["dispatched"] += len(report.dispatched)
        totals["retried"] += len(report.retried)
        if time.monotonic() >= next_reap:
            phases.run("reap", lambda: execution.reap(services))
            next_reap = time.monotonic() + 5.0
        if max(report.claimed, generated, released) >= page_size:
            totals["full_pages"] += 1
            continue
        pause = phases.run("sleep_calc", sleep_seconds)
        totals["waits"] += 1
        phases.run("idle_wait", lambda p=pause: system.due_doorbell.wait(p))
    return dict(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0, help="Profiled runner time.")
    parser.add_argument("--lead", type=float, default=5.0)
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--timer", choices=["cpu", "wall"], default="cpu")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--out", default="", help="Also write the pstats here.")
    parser.add_argument("--quiet-load", type=float, default=3.0)
    parser.add_argument("--quiet-timeout", type=float, default=300.0)
    args = parser.parse_args()

    from punctual.usecases.tenancy import identity

    print_machine("schedules_profile: an in-process runner under recurring load (PostgreSQL)")
    print(
        f"   {args.schedules:,} interval schedules of {args.interval_ms} ms, demo `echo`; "
        f"worker process with {args.slots} slots; runner in this process, page size "
        f"{args.page_size}; profiled for {args.seconds:.0f} s with the {args.timer} timer",
        flush=True,
    )
    wait_for_quiet(args.quiet_load, args.quiet_timeout)
    phases = Phases()
    with (
        tempfile.TemporaryDirectory(prefix="punctual-bench-logs-") as logs,
        fresh_target("postgres", "schedprof") as target,
    ):
        system = build_system(target)
        try:
            identity.bootstrap_default_tenant(system.services, DEV_TOKEN)
            argv = [str(PUNCTUAL), "worker", "--app", DEMO_APP, "--database-url", target.url]
            argv += ["--slots", str(args.slots)]
            worker = spawn("worker", argv, target, Path(logs))
            with running(worker):
                wait_until("the worker", lambda: workflow_loaded(system), 120, procs=[worker])
                first_epoch = math.ceil(time.time() + args.lead)
                plan = IntervalSchedules(
                    count=args.schedules,
                    interval_ms=args.interval_ms,
                    first_fire=datetime.fromtimestamp(first_epoch, UTC),
                    cursor=system.services.clock.now(),
                    name_prefix="profile",
                )
                insert_schedules(system, plan)
                wait_until("the first fire", lambda: time.time() >= first_epoch - 2.5, 60)
                engine: sa.Engine = system.store.engine
                sa.event.listen(engine, "before_cursor_execute", phases.listener)
                window = CpuWindow({"worker": worker.pid}, database_of(target.url))
                profile = (
                    cProfile.Profile(time.thread_time)
                    if args.timer == "cpu"
                    else cProfile.Profile()
                )
                window.start()
                cpu_began = time.process_time()
                profile.enable()
                try:
                    totals = runner_loop(system, args.page_size, args.seconds, phases)
                finally:
                    profile.disable()
                    window.stop()
                    sa.event.remove(engine, "before_cursor_execute", phases.listener)
                runner_cpu = time.process_time() - cpu_began
                lags = rows(
                    target,
                    "SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY "
                    "extract(epoch FROM dispatched_at - occurrence_at) * 1000) FROM starts "
                    "WHERE dispatched_at IS NOT NULL AND schedule_id IS NOT NULL",
                )[0][0]
        finally:
            system.close()
    report(args, phases, totals, window, runner_cpu, lags, profile)


def report(
    args: argparse.Namespace,
    phases: Phases,
    totals: dict[str, int],
    window: CpuWindow,
    runner_cpu: float,
    lags: list[float] | None,
    profile: cProfile.Profile,
) -> None:
    seconds = args.seconds
    dispatched = max(1, totals.get("dispatched", 0))
    passes = max(1, totals.get("passes", 0))
    p50, p99 = (lags or [float("nan"), float("nan")])[:2]
    # This process (the runner) is in no group of the window, so it is in "others".
    others = max(0.0, window.percent("others") - 100 * runner_cpu / max(window.elapsed, 1e-9))
    print(
        f"\nloop: {totals.get('passes', 0):,} passes in {seconds:.0f} s "
        f"({totals.get('full_pages', 0)} with a full page), generated "
        f"{totals.get('generated', 0) / seconds:,.0f}/s, dispatched "
        f"{totals.get('dispatched', 0) / seconds:,.0f}/s (retried {totals.get('retried', 0)}); "
        f"dispatch lag p50/p99 {p50:,.0f}/{p99:,.0f} ms (under the profiler); runner process "
        f"CPU {100 * runner_cpu / seconds:.0f} % of a core, worker "
        f"{window.percent('worker'):.0f} %, postgres {window.percent('postgres'):.0f} %, "
        f"others {others:.0f} %"
    )
    table = []
    for name in PHASES:
        statements = phases.statements.get(name, Counter())
        table.append(
            [
                name,
                f"{1000 * phases.wall[name] / seconds:,.0f}",
                f"{1000 * phases.cpu[name] / seconds:,.0f}",
                f"{1e6 * phases.wall[name] / dispatched:,.0f}",
                f"{sum(statements.values()) / passes:,.1f}",
                f"{sum(statements.values()) / dispatched:,.2f}",
            ]
        )
    print("\nper phase (per occurrence = per dispatched occurrence; CPU = this thread's)")
    print_table(
        [
            "phase",
            "wall ms/s",
            "CPU ms/s",
            "wall µs/occurrence",
            "statements/pass",
            "statements/occurrence",
        ],
        table,
    )
    print("statements by phase (count per dispatched occurrence)")
    statement_rows = [
        [name, kind, f"{count:,}", f"{count / dispatched:.2f}"]
        for name in PHASES
        for kind, count in phases.statements.get(name, Counter()).most_common()
    ]
    print_table(["phase", "statement", "count", "per occurrence"], statement_rows)
    stats = pstats.Stats(profile, stream=sys.stdout)
    if args.out:
        stats.dump_stats(args.out)
    stats.strip_dirs()
    print(f"cProfile ({args.timer} timer) of the runner loop, top {args.top} by own time:")
    stats.sort_stats("tottime").print_stats(args.top)
    print(f"top {args.top} by cumulative time:")
    stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
