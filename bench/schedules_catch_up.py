"""Catch-up at scale: 10,000 schedules an hour behind, generation passes of 500.

A fresh PostgreSQL database gets ``--schedules`` (10,000) interval schedules of
``--interval-s`` (60) whose cursor is ``--behind-s`` (3,600) in the past (first fires
spread evenly over one interval right after the cursor), bulk-inserted as in
``bench/schedules_common.py``: about 60 missed fires each, 600,000 in all.

The generation passes are driven **in-process**, in a child process of this benchmark
(``--drive``) that builds punctual from the same settings a runner would and calls
``punctual.usecases.recurring.generation.generate(system.services, page_size)`` in a loop, one pass
right after the other, with nothing else (no dispatch, no worker: the occurrences stay
``scheduled``, so only generation is measured). The parent samples the child's RSS
every 0.1 s. Per pass the child records its wall time, the occurrences it generated (what
the page size caps), the rows it inserted (occurrences + skipped ranges), the schedules
it planned and how many schedules are still behind (next fire older than now - the
misfire grace). Reported per run:

* passes and seconds until **caught up** (no schedule is behind any more) and until
  **drained** (the first pass that generated less than a page: nothing due is left);
* max occurrences and max rows per pass (the occurrences must never exceed the page size);
* pass time p50/max, occurrences/s while catching up;
* RSS of the child: before the first pass, peak, at the end;
* a correctness check: every fire between the initial cursor and each schedule's final
  cursor is accounted for exactly once (an occurrence, or inside a skipped range).

``--missed catch_up`` (``max_catch_up`` ``--max-catch-up`` = 10, no window) and
``--missed skip`` (one skipped range per schedule) are measured in turn.

    .venv/bin/python -m bench.schedules_catch_up
    .venv/bin/python -m bench.schedules_catch_up --missed skip --runs 1
    .venv/bin/python -m bench.schedules_catch_up --schedules 2000 --profile
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.common import (
    PYTHON,
    Spread,
    Target,
    build_system,
    fresh_target,
    parse_list,
    percentile,
    print_machine,
    print_table,
    rss_mib,
    run_variants,
    spawn,
)
from bench.schedules_common import (
    IntervalSchedules,
    insert_schedules,
    rows,
    verify_schedules,
    wait_for_quiet,
)

# --- the driver (child process) --------------------------------------------------------------


def drive(args: argparse.Namespace) -> None:
    """Generation passes back to back until caught up and drained; one JSON line each."""
    import cProfile

    import sqlalchemy as sa

    from punctual import bootstrap
    from punctual.settings import load_settings
    from punctual.usecases.recurring.generation import generate

    system = bootstrap.build(load_settings(None))  # PUNCTUAL_* from the environment
    services = system.services
    engine: sa.Engine = system.store.engine
    grace = timedelta(milliseconds=args.grace_ms)
    behind_sql = sa.text(
        "SELECT count(*) FROM schedules WHERE enabled AND deleted_at IS NULL "
        "AND next_fire_at < :before"
    )
    new_rows_sql = sa.text(
        "SELECT count(*), coalesce(max(seq), :after) FROM starts WHERE seq > :after"
    )
    profile = cProfile.Profile() if args.profile else None
    began = time.monotonic()
    last_seq = 0
    caught_up_at: int | None = None
    drained_at: int | None = None
    emit({"event": "ready", "rss": rss_mib(os.getpid())})
    for number in range(1, args.max_passes + 1):
        started = time.monotonic()
        if profile is not None:
            profile.enable()
        report = generate(services, args.page_size)
        if profile is not None:
            profile.disable()
        seconds = time.monotonic() - started
        with engine.connect() as conn:
            behind = int(
                conn.execute(behind_sql, {"before": services.clock.now() - grace}).scalar_one()
            )
            inserted, last_seq = conn.execute(new_rows_sql, {"after": last_seq}).one()
        emit(
            {
                "event": "pass",
                "pass": number,
                "t": time.monotonic() - began,
                "seconds": seconds,
                "generated": report.generated,
                "rows": int(inserted),
                "schedules": report.schedules,
                "missed": report.missed,
                "behind": behind,
                "rss": rss_mib(os.getpid()),
            }
        )
        if caught_up_at is None and behind == 0:
            caught_up_at = number
        if drained_at is None and report.generated < args.page_size:
            drained_at = number
        if caught_up_at is not None and drained_at is not None:
            break
    if profile is not None:
        out = Path(args.profile_out)
        profile.dump_stats(out)
    system.close()
    emit({"event": "done", "rss": rss_mib(os.getpid())})


def emit(data: dict[str, Any]) -> None:
    print(json.dumps(data), flush=True)


# --- the benchmark (parent) ------------------------------------------------------------------


@dataclass
class RunResult:
    passes_caught_up: int | None
    seconds_caught_up: float | None
    passes_drained: int | None
    seconds_drained: float | None
    passes: int
    max_generated: int
    max_rows: int
    over_page: int
    pass_ms: list[float]
    generated: int
    generated_until_drained: int
    rows: int
    rss_ready: float
    rss_peak: float
    rss_end: float
    accounted: int
    expected: int
    mismatched: int
    insert_seconds: float


def check_accounting(target: Target, interval_ms: int) -> tuple[int, int, int]:
    """(fires accounted for, fires expected, schedules whose counts differ).

    Expected per schedule: the fires of its spec in (initial cursor, final cursor]. Each
    is either an occurrence (any state but a skipped range) or counted in a skipped
    range's ``range_count``; the unique (schedule_id, occurrence_at) rules out doubles.
    """
    found = rows(
        target,
        """
        SELECT s.id,
               floor(extract(epoch FROM s.cursor - (s.spec->>'starts_at')::timestamptz)
                     * 1000 / %(ms)s)::bigint + 1,
               coalesce((SELECT sum(coalesce(o.range_count, 1)) FROM starts o
                         WHERE o.schedule_id = s.id), 0)::bigint
        FROM schedules s
        """,
        {"ms": interval_ms},
    )
    expected = sum(max(0, int(e)) for _, e, _ in found)
    accounted = sum(int(a) for _, _, a in found)
    mismatched = sum(1 for _, e, a in found if max(0, int(e)) != int(a))
    return accounted, expected, mismatched


def one_run(args: argparse.Namespace, missed: str, run: int, log_dir: Path) -> RunResult:
    wait_for_quiet(args.quiet_load, args.quiet_timeout)
    with fresh_target("postgres", "catchup") as target:
        system = build_system(target)
        try:
            now = system.services.clock.now()
            cursor = now - timedelta(seconds=args.behind_s)
            plan = IntervalSchedules(
                count=args.schedules,
                interval_ms=args.interval_s * 1000,
                first_fire=cursor + timedelta(milliseconds=1),
                cursor=cursor,
                overlap="allow_all",
                missed=missed,
                max_catch_up=args.max_catch_up,
                name_prefix=f"catchup-{run}",
            )
            insert_seconds = insert_schedules(system, plan)
            verify_schedules(system, plan)
        finally:
            system.close()
        argv = [str(PYTHON), "-m", "bench.schedules_catch_up", "--drive"]
        argv += ["--page-size", str(args.page_size), "--max-passes", str(args.max_passes)]
        argv += ["--grace-ms", "60000"]
        profile_out = log_dir / f"catch_up-{missed}-{run}.pstats"
        if args.profile:
            argv += ["--profile", "--profile-out", str(profile_out)]
        child = spawn(f"driver-{missed}", argv, target, log_dir)
        samples: list[float] = []
        try:
            deadline = time.monotonic() + args.timeout
            while child.alive():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the driver did not finish in {args.timeout:.0f} s")
                with contextlib.suppress(OSError):
                    samples.append(rss_mib(child.pid))
                time.sleep(0.1)
        finally:
            child.stop()
        if child.popen.returncode != 0:
            raise RuntimeError(f"the driver failed:\n{child.tail()}")
        events = [
            json.loads(line)
            for line in child.log.read_text().splitlines()
            if line.startswith("{") and '"event"' in line
        ]
        accounted, expected, mismatched = check_accounting(target, plan.interval_ms)
    if args.profile:
        print_profile(profile_out, args.profile_top)
    passes = [e for e in events if e["event"] == "pass"]
    ready = next(e for e in events if e["event"] == "ready")
    done = next((e for e in events if e["event"] == "done"), passes[-1] if passes else ready)

    def first(key: str, test: Any) -> dict[str, Any] | None:
        return next((p for p in passes if test(p[key])), None)

    caught = first("behind", lambda v: v == 0)
    drained = first("generated", lambda v: v < args.page_size)
    return RunResult(
        passes_caught_up=caught["pass"] if caught else None,
        seconds_caught_up=caught["t"] if caught else None,
        passes_drained=drained["pass"] if drained else None,
        seconds_drained=drained["t"] if drained else None,
        passes=len(passes),
        max_generated=max((p["generated"] for p in passes), default=0),
        max_rows=max((p["rows"] for p in passes), default=0),
        over_page=sum(1 for p in passes if p["generated"] > args.page_size),
        pass_ms=[p["seconds"] * 1000 for p in passes],
        generated=sum(p["generated"] for p in passes),
        generated_until_drained=sum(
            p["generated"] for p in passes if drained is None or p["pass"] <= drained["pass"]
        ),
        rows=sum(p["rows"] for p in passes),
        rss_ready=float(ready["rss"]),
        rss_peak=max([*samples, *(float(p["rss"]) for p in passes)], default=float("nan")),
        rss_end=float(done["rss"]),
        accounted=accounted,
        expected=expected,
        mismatched=mismatched,
        insert_seconds=insert_seconds,
    )


def print_profile(path: Path, top: int) -> None:
    import pstats

    print(f"     cProfile of the generation passes (wall clock), top {top} by cumulative time:")
    stats = pstats.Stats(str(path), stream=sys.stdout)
    stats.strip_dirs().sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def describe(missed: str, run: int, r: RunResult) -> str:
    def fmt(value: float | None, unit: str = "") -> str:
        return "never" if value is None else f"{value:,.1f}{unit}"

    return (
        f"   {missed} run {run}: caught up after {r.passes_caught_up or 'never'} passes / "
        f"{fmt(r.seconds_caught_up, ' s')}, drained after {r.passes_drained or 'never'} passes / "
        f"{fmt(r.seconds_drained, ' s')}; {r.passes} passes, {r.generated:,} occurrences, "
        f"{r.rows:,} rows; per pass max {r.max_generated} occurrences ({r.over_page} passes "
        f"over the page size), max {r.max_rows} rows; pass p50/max "
        f"{percentile(r.pass_ms, 50):.0f}/{max(r.pass_ms, default=0):.0f} ms; RSS MiB "
        f"ready/peak/end {r.rss_ready:.0f}/{r.rss_peak:.0f}/{r.rss_end:.0f}; fires accounted "
        f"{r.accounted:,} of {r.expected:,} ({r.mismatched} schedules off); schedules "
        f"inserted in {r.insert_seconds:.1f} s"
    )


def summary_rows(missed: str, results: list[RunResult]) -> list[list[str]]:
    def spread(pick: Any, digits: int = 0) -> str:
        values = [pick(r) for r in results]
        if any(v is None for v in values):
            return f"not reached in {sum(v is None for v in values)} run(s)"
        return Spread.of([float(v) for v in values]).fmt(digits)

    def rate(r: RunResult) -> float | None:
        if r.seconds_drained is None or r.passes_drained is None:
            return None
        return r.generated_until_drained / r.seconds_drained

    return [
        [missed, "passes until caught up", spread(lambda r: r.passes_caught_up)],
        [missed, "seconds until caught up", spread(lambda r: r.seconds_caught_up, 1)],
        [missed, "passes until drained", spread(lambda r: r.passes_drained)],
        [missed, "seconds until drained", spread(lambda r: r.seconds_drained, 1)],
        [missed, "occurrences generated", spread(lambda r: r.generated)],
        [missed, "rows inserted (incl. skipped ranges)", spread(lambda r: r.rows)],
        [missed, "occurrences/s until drained", spread(rate)],
        [missed, "max occurrences in a pass", spread(lambda r: r.max_generated)],
        [missed, "max rows in a pass", spread(lambda r: r.max_rows)],
        [missed, "passes over the page size", spread(lambda r: r.over_page)],
        [missed, "pass ms p50", spread(lambda r: percentile(r.pass_ms, 50))],
        [missed, "pass ms p99", spread(lambda r: percentile(r.pass_ms, 99))],
        [missed, "pass ms max", spread(lambda r: max(r.pass_ms, default=0))],
        [missed, "RSS MiB before the first pass", spread(lambda r: r.rss_ready)],
        [missed, "RSS MiB peak", spread(lambda r: r.rss_peak)],
        [missed, "RSS MiB at the end", spread(lambda r: r.rss_end)],
        [missed, "schedules with fires unaccounted", spread(lambda r: r.mismatched)],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--interval-s", type=int, default=60)
    parser.add_argument("--behind-s", type=int, default=3600, help="Cursor this far back.")
    parser.add_argument("--max-catch-up", type=int, default=10)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--missed", default="catch_up,skip")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-passes", type=int, default=20_000)
    parser.add_argument("--timeout", type=float, default=1800.0, help="Per run, seconds.")
    parser.add_argument("--profile", action="store_true", help="cProfile the passes.")
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument("--quiet-load", type=float, default=3.0)
    parser.add_argument("--quiet-timeout", type=float, default=300.0)
    # The driver's own options (the child process).
    parser.add_argument("--drive", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--grace-ms", type=int, default=60_000, help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        drive(args)
        return

    print_machine("schedules_catch_up: generation passes for schedules far behind (PostgreSQL)")
    fires = args.behind_s // args.interval_s
    print(
        f"   {args.schedules:,} interval schedules of {args.interval_s} s, cursor "
        f"{args.behind_s:,} s back (~{fires} missed fires each, ~{fires * args.schedules:,} in "
        f"all); generation page size {args.page_size}; max_catch_up {args.max_catch_up}; "
        "driven in-process: a child process calls generation.generate() back to back "
        f"(no dispatch); {args.runs} run(s), each on a fresh database",
        flush=True,
    )
    table = run_variants(
        parse_list(args.missed),
        args.runs,
        lambda missed, run, logs: one_run(args, missed, run, logs),
        describe,
        summary_rows,
    )
    print(f"\nmedian of {args.runs} run(s) [min-max]")
    print_table(["missed", "metric", "value"], table)
    print(f"must hold: max occurrences in a pass <= page size ({args.page_size})")


if __name__ == "__main__":
    main()
