"""The claim query at scale: 1,000,000 pending future starts in PostgreSQL.

1. Bulk-insert ``--rows`` scheduled starts due in the future (``INSERT ... SELECT
   generate_series``; one input encrypted with the codec of a built punctual), then
   ``VACUUM ANALYZE``.
2. Capture the SQL the store really issues (a SQLAlchemy ``before_cursor_execute``
   listener) for ``SqlStarts.claim_due`` and for everything an idle runner does (one
   ``Runner.run_once`` pass, ``earliest_due``, the reaper), and run
   ``EXPLAIN (ANALYZE, BUFFERS)`` on each, inside
   a transaction that is rolled back: median of ``--repeats`` executions [min-max], after
   one warm-up. Once with nothing due, once with ``--due`` (500) starts due.
3. Run a runner process (``punctual serve --components runner``) for ``--seconds`` (60)
   against the table with nothing due and sample its RSS every second.

    .venv/bin/python -m bench.claim_scale
    .venv/bin/python -m bench.claim_scale --rows 200000 --seconds 20
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa

from bench.common import (
    TENANT,
    CpuWindow,
    Spread,
    Target,
    build_system,
    database_of,
    fresh_target,
    print_machine,
    print_table,
    psycopg_url,
    rss_mib,
    running,
    serve_argv,
    spawn,
)

TARGET_MS = 5.0


@dataclass
class Statement:
    label: str
    sql: str
    params: Any


class _Rollback(Exception):
    pass


def insert_rows(target: Target, codec: Any, rows: int) -> float:
    sealed = codec.encrypt({"message": "scale"}, TENANT)
    began = time.monotonic()
    with psycopg.connect(psycopg_url(target.url), autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO starts (id, tenant, workflow, business_request_id, start_at,
                workload_class, attributes, input, input_key_id, state, version, attempts,
                due_at, created_by, created_at, updated_at, run_id)
            SELECT 'st_' || substr(md5(i::text), 1, 24), %(tenant)s, 'echo', 'scale-' || i,
                   now() + interval '1 day' + i * interval '1 second',
                   'standard', '{}'::jsonb, %(input)s, %(key)s, 'scheduled', 1, 0,
                   now() + interval '1 day' + i * interval '1 second',
                   'admin', now(), now(), 'run_' || substr(md5('run' || i::text), 1, 24)
            FROM generate_series(1, %(rows)s) AS i
            """,
            {"tenant": TENANT, "input": sealed.ciphertext, "key": sealed.key_id, "rows": rows},
        )
        conn.execute("VACUUM ANALYZE starts")
    return time.monotonic() - began


def capture(system: Any, label: str, action: Callable[[], object]) -> list[Statement]:
    """The statements ``action`` sends through the store's engine, in order."""
    captured: list[Statement] = []

    def listener(
        _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, many: bool
    ) -> None:
        if not many and statement.strip().split()[0].upper() in (
            "SELECT",
            "UPDATE",
            "WITH",
            "DELETE",
        ):
            captured.append(Statement(label, statement, parameters))

    engine: sa.Engine = system.store.engine
    sa.event.listen(engine, "before_cursor_execute", listener)
    try:
        action()
    finally:
        sa.event.remove(engine, "before_cursor_execute", listener)
    for n, statement in enumerate(captured, 1):
        number = f" #{n}" if len(captured) > 1 else ""
        statement.label = f"{label}{number}: {summary(statement.sql)}"
    return captured


def summary(sql: str) -> str:
    """``UPDATE starts``, ``SELECT starts``: enough to tell the statements apart."""
    flat = " ".join(sql.split())
    update = re.search(r"UPDATE (\w+) SET", flat)
    if update:
        return f"{'WITH .. ' if flat.startswith('WITH') else ''}UPDATE {update.group(1)}"
    table = re.search(r"(?:FROM|INTO) (\w+)", flat)
    return f"{flat.split()[0].upper()} {table.group(1) if table else ''}".strip()


def claim_statement(system: Any, page_size: int) -> list[Statement]:
    """``SqlStarts.claim_due`` as the runner calls it, in a transaction rolled back."""
    services = system.services

    def claim() -> None:
        try:
            with services.store.transaction() as tx:
                now = services.clock.now()
                tx.starts.claim_due(now, page_size, "bench-explain", 30.0)
                raise _Rollback
        except _Rollback:
            pass

    return capture(system, "claim_due", claim)


def idle_pass_statements(system: Any, page_size: int) -> list[Statement]:
    """What an idle runner issues: one ``Runner.run_once`` pass (whatever it includes in
    this version: the claim, schedule generation, ...), ``earliest_due`` (how long to
    sleep) and the reaper (every 5 s)."""
    from punctual.ports.doorbell import Doorbell
    from punctual.runner.loop import Runner, RunnerOptions
    from punctual.usecases.running import execution

    services = system.services
    runner = Runner(services, RunnerOptions(page_size=page_size), Doorbell())

    def earliest() -> None:
        with services.store.transaction(readonly=True) as tx:
            tx.starts.earliest_due(services.clock.now())

    return [
        *capture(system, "runner pass", runner.run_once),
        *capture(system, "earliest_due", earliest),
        *capture(system, "reap (every 5 s)", lambda: execution.reap(services)),
    ]


_TIME = re.compile(r"(Planning|Execution) Time: ([0-9.]+) ms")


def explain(
    target: Target, statement: Statement, repeats: int
) -> tuple[list[float], list[float], str]:
    """Per run after a warm-up: EXPLAIN ANALYZE execution time (ms), the plain statement's
    round trip as a client sees it (ms, no EXPLAIN overhead), and the last plan. Every
    run is rolled back."""
    times: list[float] = []
    plain: list[float] = []
    plan = ""
    with psycopg.connect(psycopg_url(target.url)) as conn:
        for n in range(repeats + 1):
            began = time.perf_counter()
            cursor = conn.execute(statement.sql, statement.params)
            if cursor.description is not None:
                cursor.fetchall()
            elapsed = 1000 * (time.perf_counter() - began)
            conn.rollback()
            if n > 0:
                plain.append(elapsed)
            rows = conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS) " + statement.sql, statement.params
            ).fetchall()
            conn.rollback()
            plan = "\n".join(str(row[0]) for row in rows)
            found = dict(_TIME.findall(plan))
            if n > 0:
                times.append(float(found.get("Execution", "nan")))
    return times, plain, plan


def report_explains(
    target: Target, statements: list[Statement], repeats: int, title: str, plans: set[str]
) -> list[list[str]]:
    rows = []
    for statement in statements:
        times, plain, plan = explain(target, statement, repeats)
        rows.append(
            [f"{title}: {statement.label}", Spread.of(times).fmt(3), Spread.of(plain).fmt(3)]
        )
        if statement.label in plans or statistics.median(times) > 0.5:
            print(f"\n-- {title}: {statement.label}\n{statement.sql.strip()}\n")
            print("\n".join("   " + line for line in plan.splitlines()), flush=True)
    return rows


@contextlib.contextmanager
def made_due(target: Target, due: int) -> Iterator[None]:
    """The ``due`` earliest starts made due for the block, then put back in the future."""
    with psycopg.connect(psycopg_url(target.url), autocommit=True) as conn:
        conn.execute(
            "UPDATE starts SET due_at = now() - interval '1 minute' "
            "WHERE seq IN (SELECT seq FROM starts ORDER BY due_at LIMIT %s)",
            (due,),
        )
    yield
    with psycopg.connect(psycopg_url(target.url), autocommit=True) as conn:
        conn.execute("UPDATE starts SET due_at = start_at WHERE due_at < now()")


@dataclass
class ClaimTimes:
    """The claim of one page, per measured repeat (rolled back each time)."""

    explain_ms: list[float]
    plain_ms: list[float]


def claim_page(rows: int, due: int, repeats: int) -> ClaimTimes:
    """The runner's claim with ``due`` starts due among ``rows`` pending, on a fresh
    database and without the runner's RSS phase: the scale target compares this figure
    across sizes (``bench.targets``)."""
    with fresh_target("postgres", "claim") as target:
        system = build_system(target)
        try:
            page_size = system.settings.runner.page_size
            insert_rows(target, system.services.codec, rows)
            with made_due(target, due):
                statement = next(
                    s
                    for s in claim_statement(system, page_size)
                    if s.label.endswith("UPDATE starts")
                )
                times, plain, _plan = explain(target, statement, repeats)
        finally:
            system.close()
    return ClaimTimes(times, plain)


def rss_run(target: Target, seconds: int, log_dir: Path) -> None:
    runner = spawn("runner", serve_argv(target, "runner"), target, log_dir)
    samples: list[tuple[float, float]] = []
    with running(runner):
        window = CpuWindow({"runner": runner.pid}, database_of(target.url))
        time.sleep(3.0)  # past imports and start-up
        window.start()
        began = time.monotonic()
        for second in range(seconds + 1):
            runner.check_alive()
            samples.append((time.monotonic() - began, rss_mib(runner.pid)))
            time.sleep(max(0.0, began + second + 1 - time.monotonic()))
        window.stop()
    values = [rss for _, rss in samples]
    half = [rss for t, rss in samples if t >= seconds / 2]
    drift = (half[-1] - half[0]) / ((samples[-1][0] - seconds / 2) / 60) if len(half) > 1 else 0
    print(f"\nrunner RSS over {seconds} s (MiB, one sample per second; every 5th shown):")
    print("   " + " ".join(f"{rss:.1f}" for _, rss in samples[::5]))
    print(
        f"   first {values[0]:.1f}  min {min(values):.1f}  max {max(values):.1f}  "
        f"last {values[-1]:.1f}  drift over the second half {drift:+.2f} MiB/min"
    )
    print(
        f"   CPU while idle against {target.backend}: runner {window.percent('runner'):.1f}% "
        f"of a core, its PostgreSQL backends {window.percent('postgres'):.1f}%, "
        f"others {window.percent('others'):.0f}%",
        flush=True,
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line, also used by ``bench.targets`` so its rows keep these defaults."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--due", type=int, default=500, help="Starts made due for the 2nd case.")
    parser.add_argument("--repeats", type=int, default=3, help="Measured EXPLAIN runs.")
    parser.add_argument("--seconds", type=int, default=60, help="Runner RSS sampling time.")
    return parser


def main() -> None:
    args = build_parser().parse_args()

    print_machine("claim_scale: the claim query over a big pending table (PostgreSQL)")
    with (
        tempfile.TemporaryDirectory(prefix="punctual-bench-logs-") as logs,
        fresh_target("postgres", "claim") as target,
    ):
        system = build_system(target)
        try:
            page_size = system.settings.runner.page_size
            took = insert_rows(target, system.services.codec, args.rows)
            print(f"   inserted {args.rows:,} future starts + VACUUM ANALYZE in {took:.1f} s")
            rows = report_explains(
                target,
                [*claim_statement(system, page_size), *idle_pass_statements(system, page_size)],
                args.repeats,
                "nothing due",
                {"claim_due: WITH .. UPDATE starts"},
            )
            with made_due(target, args.due):
                rows += report_explains(
                    target,
                    claim_statement(system, page_size),
                    args.repeats,
                    f"{args.due} due",
                    {"claim_due: WITH .. UPDATE starts"},
                )
            print(
                f"\nexecution time, ms: median of {args.repeats} [min-max] (rolled back), "
                f"{args.rows:,} pending starts, page size {page_size}"
            )
            print_table(["statement", "EXPLAIN ANALYZE ms", "plain round trip ms"], rows)
            print(f"target: claim query < {TARGET_MS:g} ms")
            rss_run(target, args.seconds, Path(logs))
        finally:
            system.close()


if __name__ == "__main__":
    main()
