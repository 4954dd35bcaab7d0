"""Sustained recurring load: 1,000 one-second interval schedules on PostgreSQL.

Each run gets a fresh database and fresh processes. ``--schedules`` (1,000) interval
schedules of ``--interval-ms`` (1,000) run the demo ``echo`` workflow (overlap
``allow_all``, missed ``catch_up``); their first fires are spread evenly over one interval
(``--phase spread``, i.e. one fire per millisecond) or all on the same instant
(``--phase aligned``, a burst of 1,000 every second). They are bulk-inserted (see
``bench/schedules_common.py``) ``--lead`` seconds before their first fire, while punctual
runs as real processes:

* ``single`` (default): one ``punctual serve --components runner,worker`` process;
* ``split``: ``punctual serve --components runner`` plus ``punctual worker``;

with ``PUNCTUAL_WORKER__SLOTS=--slots`` (32) and ``PUNCTUAL_RUNNER__PAGE_SIZE`` (500).

The measured window is the ``--seconds`` (60) after ``--warmup`` (5) seconds of firing.
Afterwards the schedules keep firing (the same load) for up to ``--drain`` (30) seconds
while the window's runs finish; then, from the database:

* rates per second in the window, from the rows' own stamps: occurrences generated
  (``starts.created_at``), dispatched (``dispatched_at``), runs started and ended;
* lag of every occurrence due in the window: ``dispatched_at - occurrence_at`` and the
  run's ``started_at - occurrence_at`` (p50/p99/max); an occurrence not yet dispatched
  (started) at the end counts with the time until then, so when the system falls behind
  the lags are lower bounds (and the counts of those are printed);
* backlog, sampled every second from another connection: occurrences ``scheduled`` with
  ``due_at <= now()``; fires whose time has come but that were not generated yet
  ("ungenerated": generation behind); ``pending`` runs that wait for a worker slot; and
  connections of the database waiting for a lock. "Keeps up" = the total backlog
  (ungenerated + due) grows by less than half a second's worth over the window (mean of
  its last sixth minus its first), the dispatch rate is within 2 % of the schedules'
  rate and every occurrence due in the window was dispatched by the end; "runs keep up"
  asks the same of the pending runs and the runs started.

    .venv/bin/python -m bench.schedules_sustained
    .venv/bin/python -m bench.schedules_sustained --topology single,split --runs 3
    .venv/bin/python -m bench.schedules_sustained --schedules 500 --seconds 30 --runs 1
"""

from __future__ import annotations

import argparse
import math
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    DEMO_APP,
    PUNCTUAL,
    BenchError,
    CpuWindow,
    Proc,
    Spread,
    Target,
    build_system,
    database_of,
    fresh_target,
    parse_list,
    percentile,
    print_machine,
    print_table,
    psycopg_url,
    rss_mib,
    run_variants,
    serve_argv,
    spawn,
    wait_until,
    workflow_loaded,
)
from bench.schedules_common import (
    IntervalSchedules,
    insert_schedules,
    rows,
    verify_schedules,
    wait_for_quiet,
)

TARGET_P99_MS = 250.0
KEEPS_UP_RATE = 0.98
GROWTH_LIMIT_S = 0.5
"""A backlog that grows by less than half a second's worth over the window is noise (the
loop works in passes of up to a second); falling behind by 1 % grows it by as much."""


@dataclass
class Sample:
    at: float
    backlog: int
    """Occurrences ``scheduled`` with ``due_at <= now()``: generated, not yet dispatched."""
    ungenerated: int
    """Fires whose time has come that no occurrence exists for yet (generation behind)."""
    dispatching: int
    pending_runs: int
    lock_waits: int
    """Connections of this database waiting for a lock (``pg_stat_activity``)."""
    rss: dict[str, float]


WAITING = """
    SELECT query FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock'
"""


@dataclass
class Sampler:
    """Every second, from its own connection: backlog, in-flight claims, pending runs, RSS."""

    url: str
    procs: list[Proc]
    samples: list[Sample] = field(default_factory=list)
    waiting: Counter[str] = field(default_factory=Counter)
    """The statements seen waiting for a lock, by their first words."""
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        query = """
            SELECT
              (SELECT count(*) FROM starts WHERE state = 'scheduled' AND due_at <= now()
                 AND schedule_id IS NOT NULL),
              (SELECT count(*) FROM starts WHERE state = 'dispatching'
                 AND schedule_id IS NOT NULL),
              (SELECT count(*) FROM runs WHERE state = 'pending'),
              (SELECT coalesce(sum(floor(extract(epoch FROM now() - next_fire_at) * 1000
                                         / (spec->>'interval_ms')::int) + 1), 0)
                 FROM schedules WHERE enabled AND next_fire_at <= now()),
              (SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock')
        """
        with psycopg.connect(self.url, autocommit=True) as conn:
            next_at = time.time()
            while not self._stop.is_set():
                try:
                    row = conn.execute(query).fetchone()
                    assert row is not None
                    rss = {}
                    for proc in self.procs:
                        try:
                            rss[proc.name] = rss_mib(proc.pid)
                        except OSError:
                            rss[proc.name] = float("nan")
                    backlog, dispatching, pending, ungenerated, waits = (int(v) for v in row)
                    if waits:
                        for (text,) in conn.execute(WAITING).fetchall():
                            self.waiting[" ".join(str(text).split())[:70]] += 1
                    self.samples.append(
                        Sample(time.time(), backlog, ungenerated, dispatching, pending, waits, rss)
                    )
                except psycopg.Error:
                    self.errors += 1
                next_at += 1.0
                self._stop.wait(max(0.0, next_at - time.time()))

    def between(self, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples if start <= s.at < end]


@dataclass
class RunResult:
    generated_per_s: float
    dispatched_per_s: float
    started_per_s: float
    ended_per_s: float
    min_second_dispatched: int
    dispatch_ms: list[float]
    """Per occurrence due in the window; one not dispatched by the end counts as the time
    from its occurrence to the end of the run (a lower bound)."""
    run_start_ms: list[float]
    expected: int
    not_generated: int
    not_dispatched: int
    not_started: int
    backlog: list[int]
    ungenerated: list[int]
    pending_runs: list[int]
    lock_waits: list[int]
    waiting: Counter[str]
    growth: float
    """Mean total backlog (ungenerated + generated and due) of the window's last sixth
    minus that of its first sixth."""
    rss_max: dict[str, float]
    keeps_up: bool
    """Generation and dispatch keep up (the backlog criterion)."""
    runs_keep_up: bool
    """And the runs start as fast: pending runs do not grow, all started by the end."""
    pending_growth: float
    cpu: dict[str, float]
    create_seconds: float


@dataclass
class Collected:
    rates: dict[str, float]
    min_second_dispatched: int
    dispatch_ms: list[float]
    run_start_ms: list[float]
    generated: int
    not_dispatched: int
    not_started: int


def start_punctual(
    target: Target, topology: str, slots: int, page_size: int, log_dir: Path
) -> list[Proc]:
    env = {"PUNCTUAL_WORKER__SLOTS": str(slots), "PUNCTUAL_RUNNER__PAGE_SIZE": str(page_size)}
    procs: list[Proc] = []
    try:
        if topology == "single":
            procs.append(
                spawn("serve", serve_argv(target, "runner,worker"), target, log_dir, **env)
            )
        elif topology == "split":
            procs.append(spawn("runner", serve_argv(target, "runner"), target, log_dir, **env))
            argv = [str(PUNCTUAL), "worker", "--app", DEMO_APP, "--database-url", target.url]
            argv += ["--slots", str(slots)]
            procs.append(spawn("worker", argv, target, log_dir, **env))
        else:
            raise ValueError(f"unknown topology {topology!r} (single or split)")
        return procs
    except BaseException:
        for proc in procs:
            proc.stop()
        raise


WINDOW_OCCURRENCES = """
    FROM starts s LEFT JOIN runs r ON r.id = s.run_id
    WHERE s.schedule_id IS NOT NULL AND s.state <> 'skipped'
      AND s.occurrence_at >= %(s)s AND s.occurrence_at < %(e)s
"""


def collect(target: Target, start: datetime, end: datetime, seconds: float) -> Collected:
    """Rates in the window from the stamps, and the lags of occurrences due in it."""
    rates: dict[str, float] = {}
    dispatched_by_second: dict[int, int] = {}
    stamps = {
        "generated": ("starts", "created_at", "schedule_id IS NOT NULL AND state <> 'skipped'"),
        "dispatched": ("starts", "dispatched_at", "schedule_id IS NOT NULL"),
        "started": ("runs", "started_at", "schedule_id IS NOT NULL"),
        "ended": ("runs", "ended_at", "schedule_id IS NOT NULL"),
    }
    params = {"s": start, "e": end}
    for name, (table, column, where) in stamps.items():
        sql = (
            f"SELECT floor(extract(epoch FROM {column})), count(*) FROM {table} "
            f"WHERE {where} AND {column} >= %(s)s AND {column} < %(e)s GROUP BY 1"
        )
        counts = {int(second): int(count) for second, count in rows(target, sql, params)}
        rates[name] = sum(counts.values()) / seconds
        if name == "dispatched":
            dispatched_by_second = counts
    # Whole seconds inside the window only (the first and last may be partial).
    inner = range(math.ceil(start.timestamp()), math.floor(end.timestamp()))
    lags = rows(
        target,
        "SELECT extract(epoch FROM coalesce(s.dispatched_at, now()) - s.occurrence_at) * 1000,"
        " extract(epoch FROM coalesce(r.started_at, now()) - s.occurrence_at) * 1000,"
        " s.dispatched_at IS NULL, r.started_at IS NULL" + WINDOW_OCCURRENCES,
        params,
    )
    return Collected(
        rates=rates,
        min_second_dispatched=min((dispatched_by_second.get(s, 0) for s in inner), default=0),
        dispatch_ms=[float(row[0]) for row in lags],
        run_start_ms=[float(row[1]) for row in lags],
        generated=len(lags),
        not_dispatched=sum(1 for row in lags if row[2]),
        not_started=sum(1 for row in lags if row[3]),
    )


def started_punctual(
    args: argparse.Namespace, target: Target, topology: str, log_dir: Path
) -> tuple[list[Proc], Any]:
    """Processes up, the worker's definitions registered; start-up is retried, because a
    worker's slots must all import the app within 60 s, and 32 of them can take longer
    on a busy 2-core machine."""
    system = build_system(target)
    for attempt in range(1, args.start_attempts + 1):
        began = time.monotonic()
        procs = start_punctual(target, topology, args.slots, args.page_size, log_dir)
        try:
            wait_until(
                "the worker's definitions", lambda: workflow_loaded(system), 180, procs=procs
            )
            print(f"     processes ready in {time.monotonic() - began:.0f} s", flush=True)
            return procs, system
        except BenchError as exc:
            for proc in procs:
                proc.stop()
            if attempt == args.start_attempts:
                system.close()
                raise
            print(f"     start-up attempt {attempt} failed ({str(exc).splitlines()[-1]})")
    raise AssertionError("unreachable")


def one_run(args: argparse.Namespace, topology: str, run: int, log_dir: Path) -> RunResult:
    wait_for_quiet(args.quiet_load, args.quiet_timeout)
    expected: int = round(args.schedules * args.seconds * 1000 / args.interval_ms)
    with fresh_target("postgres", "sched") as target:
        procs, system = started_punctual(args, target, topology, log_dir)
        sampler = Sampler(psycopg_url(target.url), procs)
        try:
            time.sleep(1.0)  # the runner settles into its idle loop
            first_epoch = math.ceil(time.time() + args.lead)
            plan = IntervalSchedules(
                count=args.schedules,
                interval_ms=args.interval_ms,
                first_fire=datetime.fromtimestamp(first_epoch, UTC),
                cursor=system.services.clock.now(),
                spread=args.phase == "spread",
                overlap="allow_all",
                missed="catch_up",
                name_prefix=f"sustained-{run}",
            )
            create_seconds = insert_schedules(system, plan)
            verify_schedules(system, plan)
            lead_left = first_epoch - time.time()
            print(
                f"     run {run}: {args.schedules:,} schedules inserted in {create_seconds:.2f} s"
                f" ({lead_left:.1f} s before the first fire)",
                flush=True,
            )
            if lead_left < 1.0:
                print("     warning: schedules inserted less than 1 s before firing (--lead)")
            sampler.start()
            window_start = first_epoch + args.warmup
            window_end = window_start + args.seconds
            window = CpuWindow({p.name: p.pid for p in procs}, database_of(target.url))
            wait_until("the window", lambda: time.time() >= window_start, args.lead + 60, step=0.05)
            window.start()
            wait_until(
                "the end of the window",
                lambda: time.time() >= window_end,
                args.seconds + 60,
                step=0.2,
                procs=procs,
            )
            window.stop()
            params = {
                "s": datetime.fromtimestamp(window_start, UTC),
                "e": datetime.fromtimestamp(window_end, UTC),
            }

            # The schedules keep firing (the same load) while the window's runs finish.
            def drained() -> bool:
                sql = "SELECT count(*)" + WINDOW_OCCURRENCES + " AND r.ended_at IS NOT NULL"
                ended = int(rows(target, sql, params)[0][0])
                return ended >= expected

            try:
                wait_until("the window's runs to end", drained, args.drain, step=0.5, procs=procs)
            except BenchError as exc:  # it fell behind: report what it did (lower bounds)
                print(f"     warning: {str(exc).splitlines()[0]}", flush=True)
            sampler.stop()
            collected = collect(target, params["s"], params["e"], float(args.seconds))
        finally:
            sampler.stop()
            system.close()
            for proc in procs:
                proc.stop()
    in_window = sampler.between(window_start, window_end)
    backlog = [s.backlog for s in in_window]
    ungenerated = [s.ungenerated for s in in_window]
    total = [s.backlog + s.ungenerated for s in in_window]
    pending = [s.pending_runs for s in in_window]
    sixth = max(1, len(total) // 6)
    growth = statistics.mean(total[-sixth:]) - statistics.mean(total[:sixth]) if total else 0
    target_rate = args.schedules * 1000.0 / args.interval_ms
    keeps_up = (
        collected.rates["dispatched"] >= KEEPS_UP_RATE * target_rate
        and growth <= GROWTH_LIMIT_S * target_rate
        and collected.not_dispatched == 0
        and collected.generated == expected
    )
    pending_growth = (
        statistics.mean(pending[-sixth:]) - statistics.mean(pending[:sixth]) if pending else 0
    )
    runs_keep_up = (
        keeps_up
        and pending_growth <= GROWTH_LIMIT_S * target_rate
        and collected.not_started == 0
        and collected.rates["started"] >= KEEPS_UP_RATE * target_rate
    )
    rss_max = {
        name: max((s.rss.get(name, float("nan")) for s in sampler.samples), default=float("nan"))
        for name in (p.name for p in procs)
    }
    if args.timeline:
        every = max(1, args.timeline)
        print(f"     backlog every {every} s: " + " ".join(str(v) for v in backlog[::every]))
        print(
            f"     ungenerated due fires every {every} s: "
            + " ".join(str(v) for v in ungenerated[::every])
        )
        print(f"     pending runs every {every} s: " + " ".join(str(v) for v in pending[::every]))
    return RunResult(
        generated_per_s=collected.rates["generated"],
        dispatched_per_s=collected.rates["dispatched"],
        started_per_s=collected.rates["started"],
        ended_per_s=collected.rates["ended"],
        min_second_dispatched=collected.min_second_dispatched,
        dispatch_ms=collected.dispatch_ms,
        run_start_ms=collected.run_start_ms,
        expected=expected,
        not_generated=expected - collected.generated,
        not_dispatched=collected.not_dispatched,
        not_started=collected.not_started,
        backlog=backlog,
        ungenerated=ungenerated,
        pending_runs=pending,
        lock_waits=[s.lock_waits for s in in_window],
        waiting=sampler.waiting,
        growth=growth,
        rss_max=rss_max,
        keeps_up=keeps_up,
        runs_keep_up=runs_keep_up,
        pending_growth=pending_growth,
        cpu={
            name: window.percent(name) for name in [*(p.name for p in procs), "postgres", "others"]
        },
        create_seconds=create_seconds,
    )


def _lag(values: list[float], q: float | None) -> float:
    if not values:
        return float("nan")
    return max(values) if q is None else percentile(values, q)


def describe(topology: str, run: int, r: RunResult) -> str:
    cpu = ", ".join(f"{k} {v:.0f}" for k, v in r.cpu.items())
    rss = ", ".join(f"{k} {v:.0f}" for k, v in r.rss_max.items())
    waits = "; ".join(f"{n}x {text}" for text, n in r.waiting.most_common(4))
    return (
        f"   {topology} run {run}: generated {r.generated_per_s:,.0f}/s, dispatched "
        f"{r.dispatched_per_s:,.0f}/s (slowest second {r.min_second_dispatched:,}), runs "
        f"started {r.started_per_s:,.0f}/s, ended {r.ended_per_s:,.0f}/s; dispatch lag "
        f"p50/p99/max {_lag(r.dispatch_ms, 50):.0f}/{_lag(r.dispatch_ms, 99):.0f}/"
        f"{_lag(r.dispatch_ms, None):.0f} ms; run start "
        f"{_lag(r.run_start_ms, 50):.0f}/{_lag(r.run_start_ms, 99):.0f}/"
        f"{_lag(r.run_start_ms, None):.0f} ms; backlog p50/max "
        f"{percentile(r.backlog, 50):.0f}/{max(r.backlog, default=0)}; ungenerated due fires "
        f"p50/max {percentile(r.ungenerated, 50):.0f}/{max(r.ungenerated, default=0)}; "
        f"samples with lock waits {sum(1 for w in r.lock_waits if w)}/{len(r.lock_waits)}; "
        "pending runs p50/max "
        f"{percentile(r.pending_runs, 50):.0f}/{max(r.pending_runs, default=0)}; "
        f"total backlog growth {r.growth:+,.0f}; occurrences due in the window "
        f"{r.expected:,} (not generated {r.not_generated:,}, not dispatched "
        f"{r.not_dispatched:,}, not started {r.not_started:,} by the end: their lags are "
        f"lower bounds); generation+dispatch keep up: {'yes' if r.keeps_up else 'NO'}; runs "
        f"keep up: {'yes' if r.runs_keep_up else 'NO'} (pending runs growth "
        f"{r.pending_growth:+,.0f})\n"
        f"     CPU % of a core in the window: {cpu}; max RSS MiB: {rss}\n"
        f"     statements seen waiting for a lock (samples): {waits or 'none'}"
    )


def summary_rows(topology: str, results: list[RunResult]) -> list[list[str]]:
    def spread(pick: Any, digits: int = 0) -> str:
        return Spread.of([float(pick(r)) for r in results]).fmt(digits)

    return [
        [f"{topology}: generated/s", spread(lambda r: r.generated_per_s)],
        [f"{topology}: dispatched/s", spread(lambda r: r.dispatched_per_s)],
        [f"{topology}: slowest second, dispatched", spread(lambda r: r.min_second_dispatched)],
        [f"{topology}: runs started/s", spread(lambda r: r.started_per_s)],
        [f"{topology}: runs ended/s", spread(lambda r: r.ended_per_s)],
        [f"{topology}: dispatch lag p50 ms", spread(lambda r: _lag(r.dispatch_ms, 50))],
        [f"{topology}: dispatch lag p99 ms", spread(lambda r: _lag(r.dispatch_ms, 99))],
        [f"{topology}: dispatch lag max ms", spread(lambda r: _lag(r.dispatch_ms, None))],
        [f"{topology}: run start lag p50 ms", spread(lambda r: _lag(r.run_start_ms, 50))],
        [f"{topology}: run start lag p99 ms", spread(lambda r: _lag(r.run_start_ms, 99))],
        [f"{topology}: run start lag max ms", spread(lambda r: _lag(r.run_start_ms, None))],
        [f"{topology}: backlog p50 (due, scheduled)", spread(lambda r: percentile(r.backlog, 50))],
        [f"{topology}: backlog max", spread(lambda r: max(r.backlog, default=0))],
        [
            f"{topology}: ungenerated due fires p50",
            spread(lambda r: percentile(r.ungenerated, 50)),
        ],
        [f"{topology}: ungenerated due fires max", spread(lambda r: max(r.ungenerated, default=0))],
        [
            f"{topology}: % of samples with a lock wait",
            spread(lambda r: 100 * sum(1 for w in r.lock_waits if w) / max(1, len(r.lock_waits))),
        ],
        [f"{topology}: pending runs p50", spread(lambda r: percentile(r.pending_runs, 50))],
        [f"{topology}: pending runs max", spread(lambda r: max(r.pending_runs, default=0))],
        [f"{topology}: total backlog growth (last - first 6th)", spread(lambda r: r.growth)],
        [
            f"{topology}: not dispatched by the end",
            spread(lambda r: r.not_dispatched + r.not_generated),
        ],
        [f"{topology}: pending runs growth", spread(lambda r: r.pending_growth)],
        [
            f"{topology}: generation+dispatch keep up (runs)",
            f"{sum(r.keeps_up for r in results)}/{len(results)}",
        ],
        [
            f"{topology}: runs keep up too (runs)",
            f"{sum(r.runs_keep_up for r in results)}/{len(results)}",
        ],
        *[
            [f"{topology}: CPU % of a core, {name}", spread(lambda r, n=name: r.cpu[n])]
            for name in results[0].cpu
        ],
        *[
            [f"{topology}: max RSS MiB, {name}", spread(lambda r, n=name: r.rss_max[n])]
            for name in results[0].rss_max
        ],
    ]


def build_parser() -> argparse.ArgumentParser:
    """The command line, also used by ``bench.targets`` so its rows keep these defaults."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--phase", choices=["spread", "aligned"], default="spread")
    parser.add_argument("--seconds", type=int, default=60, help="The measured window.")
    parser.add_argument("--warmup", type=float, default=5.0, help="Firing before the window.")
    parser.add_argument("--lead", type=float, default=5.0, help="Seconds from insert to firing.")
    parser.add_argument("--drain", type=float, default=30.0, help="Longest wait afterwards.")
    parser.add_argument("--topology", default="single", help="single, split or single,split")
    parser.add_argument("--slots", type=int, default=32, help="PUNCTUAL_WORKER__SLOTS")
    parser.add_argument("--page-size", type=int, default=500, help="PUNCTUAL_RUNNER__PAGE_SIZE")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--quiet-load",
        type=float,
        default=3.0,
        help="Before each run wait until the 1-min load average is at most this (0: don't).",
    )
    parser.add_argument("--quiet-timeout", type=float, default=300.0)
    parser.add_argument("--start-attempts", type=int, default=3)
    parser.add_argument(
        "--timeline", type=int, default=5, help="Print the backlog every N s (0: not)."
    )
    return parser


def main() -> None:
    args = build_parser().parse_args()

    rate = args.schedules * 1000 / args.interval_ms
    print_machine("schedules_sustained: recurring schedules under sustained load (PostgreSQL)")
    print(
        f"   {args.schedules:,} interval schedules of {args.interval_ms} ms ({rate:,.0f}"
        f" occurrences/s, phase {args.phase}), demo `echo`, overlap allow_all, missed catch_up;"
        f" window {args.seconds} s after {args.warmup:.0f} s warm-up; worker slots "
        f"{args.slots}; runner page size {args.page_size}; {args.runs} run(s), each on a fresh "
        "database with fresh processes",
        flush=True,
    )
    table = run_variants(
        parse_list(args.topology),
        args.runs,
        lambda topology, run, logs: one_run(args, topology, run, logs),
        describe,
        summary_rows,
    )
    print(f"\nmedian of {args.runs} run(s) [min-max]; lag = stamp - occurrence_at")
    print_table(["metric", "value"], table)
    print(
        f"target: sustained {rate:,.0f} occurrences/s with p99 lag < {TARGET_P99_MS:.0f} ms "
        "(dispatch and run start)"
    )


if __name__ == "__main__":
    main()
