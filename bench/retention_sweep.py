"""Retention sweeps (RT-1): dispatch during a sweep of 1,000,000 rows, and a bounded database.

``dispatch`` (PostgreSQL): 1,000,000 terminal rows older than the window are seeded with
SQL (half of them one-off starts, canceled or dispatched with a completed run, the rest the
runs and the idempotency records of those starts); then bursts of 500 starts all due at the
same instant are dispatched by ``punctual serve --components api,runner,worker``, round
after round alternating *without* and *with* a sweep of those rows under way. The sweep
runs in a process of its own (``sweeper``: the sweeper's loop, ``usecases.retention.sweep``
with its pause between full batches), paused between bursts by a control file, so both
bursts of a round meet the same machine. Printed per burst: dispatch lag p99
(``dispatched_at - start_at``) and the rows the sweep removed while the burst ran; then
the median ratio *with / without* (target: <= 1.2).

``size`` (SQLite and PostgreSQL): ``--schedules`` schedules every second of the demo
``echo`` under ``serve``, a sweeper process with a window of ``--window`` seconds sweeping
every second; the size of the database (SQLite: the file and its WAL; PostgreSQL: every
punctual table with its indexes and TOAST) after one window and after three (target:
after three <= 1.2 x after one).

    .venv/bin/python -m bench.retention_sweep dispatch --rows 1000000 --rounds 3
    .venv/bin/python -m bench.retention_sweep size --backends sqlite,postgres --window 60
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    PYTHON,
    REPO,
    TENANT,
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
    spawn,
    wait_until,
    workflow_loaded,
)
from bench.dispatch_lag import collect, create_starts, start_punctual, wait_finished

SEED_TAG = "retention-seed"
OLD = "now() - interval '2 days'"
"""When the seeded rows became terminal: far outside the dispatch benchmark's window."""
DISPATCH_KEEP_SECONDS = 3600.0

# Half the rows are starts: every other one canceled, the others dispatched with a
# completed run; a canceled start has its create's idempotency record.
SEED_SQL = [
    f"""
    INSERT INTO starts (id, tenant, workflow, business_request_id, start_at, workload_class,
        attributes, input, input_key_id, state, version, attempts, due_at, created_by,
        created_at, updated_at, run_id, claim_seq, definition_version, artifact, dispatched_at)
    SELECT 'st_seed_' || g, '{TENANT}', 'echo', '{SEED_TAG}', {OLD}, 'standard', '{{}}'::jsonb,
        '\\x00'::bytea, 'k1', CASE WHEN mod(g, 2) = 0 THEN 'dispatched' ELSE 'canceled' END, 2, 1,
        {OLD}, 'admin', {OLD}, {OLD}, 'run_seed_' || g, 0,
        CASE WHEN mod(g, 2) = 0 THEN '1' END, CASE WHEN mod(g, 2) = 0 THEN 'seed' END,
        CASE WHEN mod(g, 2) = 0 THEN {OLD} END
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
    """,
    f"""
    INSERT INTO runs (id, tenant, workflow, definition_version, artifact, state, origin,
        origin_id, started_by, attempts, result, input, input_key_id, task_queue, priority,
        timeout_seconds, cancel_requested, created_at, started_at, ended_at, follow_up)
    SELECT 'run_seed_' || g, '{TENANT}', 'echo', '1', 'seed', 'completed',
        jsonb_build_object('source', 'scheduled_start', 'id', 'st_seed_' || g),
        'st_seed_' || g, 'admin', 1, '{{}}'::jsonb, '\\x00'::bytea, 'k1', 'standard', 3,
        60, false, {OLD}, {OLD}, {OLD}, 2
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g WHERE mod(g, 2) = 0
    """,
    f"""
    INSERT INTO idempotency_keys (tenant, principal, key, fingerprint, state, owner,
        lease_until, status_code, response, resource_id, created_at, decided_at)
    SELECT '{TENANT}', 'admin', 'seed-' || g, 'f', 'done', 'o', {OLD}, 201, '{{}}'::jsonb,
        'st_seed_' || g, {OLD}, {OLD}
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g WHERE mod(g, 2) = 1
    """,
]
PUNCTUAL_TABLES = (
    "starts",
    "runs",
    "idempotency_keys",
    "follow_throughs",
    "schedule_status",
    "schedules",
    "notifications",
    "webhook_deliveries",
    "audit_log",
    "findings",
    "pending_start_counts",
)


# --------------------------------------------------------------------------- the sweeper


def sweeper_main(argv: list[str]) -> None:
    """The sweeper process: sweep while the control file exists (pause otherwise), every
    ``--interval`` seconds, until SIGTERM."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--keep", type=float, required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--control", default="")
    parser.add_argument("--vacuum", action="store_true")
    args = parser.parse_args(argv)

    from punctual import bootstrap
    from punctual.adapters.stores.sql.retention import tables_swept
    from punctual.runner.sweeper import Sweeper
    from punctual.settings import load_settings
    from punctual.usecases.tenancy.retention import RetentionPolicy

    settings = load_settings(None, database_url=args.url, codec={"key_file": args.key_file})
    system = bootstrap.build(settings)
    policy = RetentionPolicy(keep_seconds=args.keep, batch_size=args.batch)
    control = Path(args.control) if args.control else None

    class Controlled(Sweeper):
        """The runner's sweeper, held between batches while the control file is absent."""

        def between_batches(self) -> bool:
            resting = super().between_batches()
            while control is not None and not control.exists():
                time.sleep(0.01)
            self._batch_began = time.monotonic()  # time held is not time worked
            return resting

    sweeper = Controlled(system.services, policy)
    while True:
        while control is not None and not control.exists():
            time.sleep(0.01)
        began = time.monotonic()
        report = sweeper.sweep_once()
        removed = sum(report.removed.values())
        if args.vacuum and removed and args.url.startswith("postgresql"):
            vacuum(args.url, tables_swept(report.removed))
        print(
            f"swept {removed} in {report.batches} batches, {time.monotonic() - began:.1f} s",
            flush=True,
        )
        time.sleep(args.interval)


def vacuum(url: str, tables: list[str]) -> None:
    """The sweeper's ``after_pass`` on PostgreSQL, as the composition root wires it: a plain
    VACUUM of the tables the pass deleted from (it blocks no reads or writes; a table
    being vacuumed or altered is skipped)."""
    with psycopg.connect(psycopg_url(url), autocommit=True) as conn:
        conn.execute("VACUUM (SKIP_LOCKED) " + ", ".join(tables))


def spawn_sweeper(
    target: Target, log_dir: Path, keep: float, control: Path | None, *, vacuum: bool = False
) -> Proc:
    argv = [str(PYTHON), "-m", "bench.retention_sweep", "sweeper", "--url", target.url]
    argv += ["--key-file", str(target.key_file), "--keep", str(keep)]
    if control is not None:
        argv += ["--control", str(control)]
    if vacuum:
        argv.append("--vacuum")
    return spawn("sweeper", argv, target, log_dir)


# --------------------------------------------------------------------------- dispatch


def seed(target: Target, rows: int) -> float:
    """``rows`` terminal rows, 100,000 per transaction; returns the seconds it took."""
    began = time.monotonic()
    starts = rows // 2
    with psycopg.connect(psycopg_url(target.url), autocommit=True) as conn:
        for first in range(1, starts + 1, 100_000):
            bounds = {"first": first, "last": min(starts, first + 99_999)}
            with conn.transaction():
                for sql in SEED_SQL:
                    conn.execute(sql, bounds)
        conn.execute("VACUUM ANALYZE starts, runs, idempotency_keys")
    return time.monotonic() - began


def explain_batches(target: Target, keep: float) -> None:
    """EXPLAIN ANALYZE of one batch's candidate query per kind the seed fills (read-only:
    the statement's own locks are dropped with its rollback)."""
    import sqlalchemy as sa
    from sqlalchemy.dialects import postgresql

    from punctual.adapters.stores.sql import retention, tables
    from punctual.domain.retention import window_for

    window = window_for(TENANT, datetime.now(UTC), keep, keep)
    candidates = {
        "runs": (tables.runs, retention._removable_runs(window), tables.runs.c.ended_at),
        "starts": (tables.starts, retention._removable_starts(window), tables.starts.c.updated_at),
        "idempotency_records": (
            tables.idempotency_keys,
            [*retention._removable_keys(window), *retention._decided(window)],
            tables.idempotency_keys.c.decided_at,
        ),
    }
    with psycopg.connect(psycopg_url(target.url)) as conn:
        for kind, (table, where, order) in candidates.items():
            query = (
                sa.select(*table.primary_key.columns)
                .where(*where)
                .order_by(order)
                .limit(500)
                .with_for_update(of=table, skip_locked=True)
            )
            sql = str(
                query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
            )
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " + sql).fetchall()
            conn.rollback()
            lines = [row[0] for row in plan]
            scan = next((line.strip() for line in lines if "Index" in line or "Scan" in line), "")
            total = next((line.strip() for line in lines if "Execution Time" in line), "")
            print(f"   {kind} batch of 500: {scan[:110]} | {total}", flush=True)


def seeded_left(target: Target) -> int:
    with psycopg.connect(psycopg_url(target.url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM starts WHERE business_request_id = %s)"
            " + (SELECT count(*) FROM runs WHERE id LIKE 'run_seed_%%')"
            " + (SELECT count(*) FROM idempotency_keys WHERE key LIKE 'seed-%%')",
            (SEED_TAG,),
        ).fetchone()
    return int(row[0]) if row else 0


def burst(system: Any, target: Target, procs: list[Proc], lead: float) -> tuple[float, float]:
    """A burst of 500 starts due together; (dispatch p99 ms, max ms)."""
    import sqlalchemy as sa

    tag = f"burst-{secrets.token_hex(3)}"
    due_epoch = math.ceil(time.time() + lead)
    create_starts(system, tag, datetime.fromtimestamp(due_epoch, UTC), 500, 0.0)
    engine = sa.create_engine(target.url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        wait_until("the due time", lambda: time.time() >= due_epoch, lead + 5, step=0.05)
        wait_finished(engine, tag, 500, 120, procs)
    finally:
        engine.dispose()
    dispatch_ms, _, missing = collect(system, tag)
    if missing:
        print(f"     warning: {missing} starts not dispatched", flush=True)
    return percentile(dispatch_ms, 99), max(dispatch_ms, default=float("nan"))


def dispatch_benchmark(args: argparse.Namespace, log_dir: Path) -> None:
    with fresh_target("postgres", "retention") as target:
        took = seed(target, args.rows)
        print(f"   seeded {seeded_left(target):,} terminal rows in {took:.0f} s", flush=True)
        explain_batches(target, DISPATCH_KEEP_SECONDS)
        procs = start_punctual(target, "single", args.slots, log_dir)
        control = log_dir / "sweep.on"
        sweeper = spawn_sweeper(target, log_dir, DISPATCH_KEEP_SECONDS, control)
        system = build_system(target)
        rows: list[list[str]] = []
        ratios: list[float] = []
        try:
            wait_until("the worker's definitions", lambda: workflow_loaded(system), 60, procs=procs)
            time.sleep(1.0)
            burst(system, target, procs, args.lead)  # warm-up, not counted
            for round_ in range(1, args.rounds + 1):
                figures: dict[str, tuple[float, float, int]] = {}
                for mode in ("without", "with"):
                    left = seeded_left(target)
                    if mode == "with":
                        control.touch()
                        time.sleep(1.0)  # the sweep is under way before the starts are due
                    window = CpuWindow(
                        {p.name: p.pid for p in [*procs, sweeper]}, database_of(target.url)
                    )
                    window.start()
                    p99, worst = burst(system, target, procs, args.lead)
                    window.stop()
                    control.unlink(missing_ok=True)
                    swept = left - seeded_left(target)
                    figures[mode] = (p99, worst, swept)
                    print(
                        f"   round {round_} {mode:<7} sweep: dispatch p99 {p99:.0f} ms, max "
                        f"{worst:.0f} ms; rows swept meanwhile {swept:,}; CPU % of a core: "
                        + ", ".join(
                            f"{k} {window.percent(k):.0f}"
                            for k in ["serve", "sweeper", "postgres", "others"]
                        ),
                        flush=True,
                    )
                ratio = figures["with"][0] / figures["without"][0]
                ratios.append(ratio)
                rows.append(
                    [
                        str(round_),
                        f"{figures['without'][0]:.0f}",
                        f"{figures['with'][0]:.0f}",
                        f"{figures['with'][2]:,}",
                        f"{ratio:.2f}",
                    ]
                )
            print(f"   left to sweep at the end: {seeded_left(target):,}")
        finally:
            system.close()
            sweeper.stop()
            for proc in procs:
                proc.stop()
    print("\nburst of 500: dispatch lag p99 (ms) without and with a sweep under way")
    print_table(["round", "without", "with", "rows swept during", "with / without"], rows)
    print(f"median ratio {Spread.of(ratios).fmt(2)} (target <= 1.2)")


# --------------------------------------------------------------------------- size


def database_bytes(target: Target) -> tuple[int, str]:
    if target.backend == "sqlite":
        db = target.workdir / "punctual.db"
        wal = target.workdir / "punctual.db-wal"
        main, log = db.stat().st_size, wal.stat().st_size if wal.exists() else 0
        return main, f"file {main / 1e6:.2f} MB + WAL {log / 1e6:.2f} MB"
    with psycopg.connect(psycopg_url(target.url), autocommit=True) as conn:
        sizes = {
            name: int(conn.execute("SELECT pg_total_relation_size(%s)", (name,)).fetchone()[0])
            for name in PUNCTUAL_TABLES
        }
    total = sum(sizes.values())
    biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
    return total, ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in biggest)


def row_counts(target: Target) -> str:
    import sqlalchemy as sa

    engine = sa.create_engine(target.url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            counts = {
                name: conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one()
                for name in ("starts", "runs", "idempotency_keys")
            }
    finally:
        engine.dispose()
    return ", ".join(f"{k} {v:,}" for k, v in counts.items())


def size_run(backend: str, args: argparse.Namespace, log_dir: Path) -> list[str]:
    from punctual.domain.permissions import Role
    from punctual.embedded import Scheduler

    with fresh_target(backend, "retention-size") as target:
        procs = start_punctual(target, "single", args.slots, log_dir)
        system = build_system(target)
        sweeper: Proc | None = None
        try:
            wait_until("the worker's definitions", lambda: workflow_loaded(system), 60, procs=procs)
            admin = Scheduler(system, TENANT, "admin", Role.ADMIN)
            for n in range(args.schedules):
                admin.schedule_every(
                    "echo",
                    {"message": f"steady {n}"},
                    timedelta(seconds=1),
                    name=f"steady-{n}",
                    overlap="allow_all",
                    missed="skip",
                )
            sweeper = spawn_sweeper(target, log_dir, args.window, None, vacuum=args.vacuum)
            began = time.monotonic()
            sizes: list[int] = []
            for windows in (1, 2, 3):
                wait_until(
                    f"{windows} window(s)",
                    lambda w=windows: time.monotonic() - began >= w * args.window,
                    args.window * 4,
                    step=0.5,
                    procs=[*procs, sweeper],
                )
                size, detail = database_bytes(target)
                sizes.append(size)
                print(
                    f"   {backend} after {windows} window(s) of {args.window:.0f} s: "
                    f"{size / 1e6:.2f} MB ({detail}); rows: {row_counts(target)}",
                    flush=True,
                )
        finally:
            system.close()
            if sweeper is not None:
                sweeper.stop()
            for proc in procs:
                proc.stop()
    ratio = sizes[2] / sizes[0]
    return [backend, f"{sizes[0] / 1e6:.2f}", f"{sizes[2] / 1e6:.2f}", f"{ratio:.2f}"]


def size_benchmark(args: argparse.Namespace, log_dir: Path) -> None:
    rows = [size_run(backend, args, log_dir) for backend in parse_list(args.backends)]
    print(f"\n{args.schedules} one-second schedules, window {args.window:.0f} s, sweep every 1 s")
    print_table(["backend", "MB after 1 window", "MB after 3", "3 / 1 (target <= 1.2)"], rows)


def main() -> None:
    if sys.argv[1:2] == ["sweeper"]:
        sweeper_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", default="dispatch,size", help="dispatch and/or size")
    parser.add_argument("--rows", type=int, default=1_000_000, help="Terminal rows seeded.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--slots", type=int, default=32, help="Worker slots.")
    parser.add_argument("--lead", type=float, default=5.0, help="Seconds from create to due.")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--window", type=float, default=60.0, help="Retention window, s.")
    parser.add_argument("--schedules", type=int, default=20)
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="size: the sweeper process VACUUMs the swept tables after each pass (PostgreSQL)",
    )
    args = parser.parse_args()
    print_machine("retention_sweep: dispatch during a sweep, and a bounded database")
    os.environ.setdefault("PYTHONPATH", str(REPO))
    with tempfile.TemporaryDirectory(prefix="punctual-bench-logs-") as logs:
        wanted = parse_list(args.what)
        if "dispatch" in wanted:
            dispatch_benchmark(args, Path(logs))
        if "size" in wanted:
            size_benchmark(args, Path(logs))


if __name__ == "__main__":
    main()
