"""Dispatch lag on PostgreSQL with the local engine: how late after ``start_at`` things happen.

Scenarios: a burst of 500 starts all due at the same instant, a burst of 2,000, and
2,000 spread evenly over 30 s. The starts are created ahead of time (seconds before they
are due) through the store port in the benchmark's own process (what ``starts.create``
writes, without its admission checks), then
``punctual serve`` (a separate process) dispatches and runs them. Reported per start:

* dispatch lag  = ``dispatch.dispatched_at - start_at`` from the start projection;
* run-start lag = the run's ``started_at - start_at`` (``started_at`` is when the body
  began in its slot, as the worker recorded it; the claim is ``claimed_at``);
* for bursts, "all committed": when the last start of the burst was visibly
  ``dispatched`` to another connection (polled every 10 ms), minus the due instant.

Topologies: ``single`` = one ``punctual serve --components api,runner,worker`` process
(the default); ``split`` = ``serve --components api,runner`` plus ``punctual worker``.

    .venv/bin/python -m bench.dispatch_lag
    .venv/bin/python -m bench.dispatch_lag --topology split --slots 32
"""

from __future__ import annotations

import argparse
import math
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.common import (
    DEMO_APP,
    PUNCTUAL,
    TENANT,
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
    percentile,
    print_machine,
    print_table,
    serve_argv,
    spawn,
    wait_until,
    workflow_loaded,
)

SCENARIOS: dict[str, tuple[int, float]] = {
    # name: (starts, spread over seconds; 0 = all due at the same instant)
    "burst500": (500, 0.0),
    "burst2000": (2000, 0.0),
    "spread2000": (2000, 30.0),
}
TARGETS = {
    "burst500": "p99 dispatch lag <= 100 ms",
    "burst2000": "all started <= 300 ms after due",
    "spread2000": "p99 dispatch lag <= 50 ms",
}
POLL_SECONDS = 0.010


@dataclass
class RunLags:
    dispatch_ms: list[float]
    run_start_ms: list[float]
    all_committed_ms: float | None
    not_dispatched: int
    created_early_s: float
    cpu: dict[str, float]


@dataclass
class Observer:
    """Polls how many starts of a tag are ``dispatched``, from its own connection."""

    engine: sa.Engine
    tag: str
    expected: int
    samples: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        query = sa.text(
            "SELECT count(*) FROM starts WHERE tenant = :tenant "
            "AND business_request_id = :tag AND state = 'dispatched'"
        )
        with self.engine.connect() as conn:
            while not self._stop.is_set():
                count = conn.execute(query, {"tenant": TENANT, "tag": self.tag}).scalar_one()
                conn.rollback()
                self.samples.append((time.time(), int(count)))
                if count >= self.expected:
                    return
                time.sleep(POLL_SECONDS)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def all_done_at(self) -> float | None:
        return next((t for t, n in self.samples if n >= self.expected), None)


def create_starts(
    system: Any, tag: str, due: datetime, count: int, spread: float, workflow: str = "echo"
) -> None:
    """Insert the starts of ``workflow`` through the store port, 500 per transaction.

    This is what the ``starts.create`` use case writes, without its admission checks:
    those include a count of the tenant's pending starts per create, which makes
    creating thousands of starts take tens of seconds (see create_throughput).
    """
    from punctual.domain.ids import new_id
    from punctual.domain.permissions import Role
    from punctual.ports.records import NewStart

    services = system.services
    with services.store.transaction() as tx:  # dispatch checks the creator is a member (CR-3)
        tx.identity.ensure_tenant(TENANT, services.clock.now())
        tx.identity.upsert_member(TENANT, "admin", Role.ADMIN, services.clock.now())
    for first in range(0, count, 500):
        with services.store.transaction() as tx:
            now = services.clock.now()
            for i in range(first, min(count, first + 500)):
                start = NewStart(
                    id=new_id("st"),
                    tenant=TENANT,
                    workflow=workflow,
                    business_request_id=tag,
                    start_at=due + timedelta(seconds=spread * i / count),
                    time_zone=None,
                    workload_class="standard",
                    attributes={},
                    traceparent=None,
                    input=services.codec.encrypt({"message": f"lag {i}"}, TENANT),
                    created_by="admin",
                    run_id=new_id("run"),
                )
                tx.starts.insert(start, now)


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def collect(system: Any, tag: str) -> tuple[list[float], list[float], int]:
    """Lags in ms from the start projections and their runs' projections."""
    from punctual.domain.permissions import Principal, Role
    from punctual.usecases.running import runs
    from punctual.usecases.scheduled import starts

    principal = Principal(tenant=TENANT, subject="admin", role=Role.ADMIN)
    dispatch_ms: list[float] = []
    run_start_ms: list[float] = []
    missing = 0
    cursor: str | None = None
    while True:
        page = starts.list_starts(
            system.services,
            principal,
            starts.ListStarts(business_request_id=tag, limit=100, cursor=cursor),
        )
        for item in page["items"]:
            start_at = _parse(item["start_at"])
            assert start_at is not None
            dispatch = item["dispatch"]
            dispatched_at = _parse(dispatch["dispatched_at"]) if dispatch else None
            if dispatched_at is None:
                missing += 1
                continue
            dispatch_ms.append((dispatched_at - start_at).total_seconds() * 1000)
            run = runs.get(system.services, principal, dispatch["run_id"])
            started_at = _parse(run["started_at"])
            if started_at is not None:
                run_start_ms.append((started_at - start_at).total_seconds() * 1000)
        cursor = page["next_cursor"]
        if cursor is None:
            return dispatch_ms, run_start_ms, missing


def _count(engine: sa.Engine, sql: str, tag: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(sql), {"tenant": TENANT, "tag": tag}).scalar_one())


def wait_finished(
    engine: sa.Engine, tag: str, count: int, timeout: float, procs: list[Proc]
) -> None:
    """Until every start of ``tag`` is dispatched and every one of its runs has ended."""
    finished_sql = (
        "SELECT count(*) FROM runs r JOIN starts s ON s.run_id = r.id "
        "WHERE s.tenant = :tenant AND s.business_request_id = :tag "
        "AND r.state NOT IN ('pending', 'running')"
    )
    settled_sql = (
        "SELECT count(*) FROM starts WHERE tenant = :tenant AND business_request_id = :tag "
        "AND state NOT IN ('scheduled', 'dispatching', 'dispatched')"
    )

    def done() -> bool:
        return _count(engine, finished_sql, tag) + _count(engine, settled_sql, tag) >= count

    wait_until(f"the {count} runs of {tag} to finish", done, timeout, step=0.25, procs=procs)


def one_run(
    system: Any,
    engine: sa.Engine,
    scenario: str,
    run: int,
    lead: float,
    procs: list[Proc],
) -> RunLags:
    count, spread = SCENARIOS[scenario]
    tag = f"lag-{scenario}-{run}-{secrets.token_hex(3)}"
    due_epoch = math.ceil(time.time() + lead)
    due = datetime.fromtimestamp(due_epoch, UTC)
    began = time.time()
    create_starts(system, tag, due, count, spread)
    early = due_epoch - time.time()
    print(f"     created {count} starts in {time.time() - began:.2f} s", flush=True)
    if early < 1.0:
        print(f"     warning: starts created only {early:.2f} s before due (raise --lead)")
    observer = Observer(engine, tag, count)
    window = CpuWindow({p.name: p.pid for p in procs}, database_of(engine.url.render_as_string()))
    wait_until("the due time", lambda: time.time() >= due_epoch - 0.5, lead + 5, step=0.05)
    observer.start()
    window.start()
    try:
        wait_finished(engine, tag, count, spread + 120, procs)
    finally:
        window.stop()
        observer.stop()
    dispatch_ms, run_start_ms, missing = collect(system, tag)
    done_at = observer.all_done_at() if spread == 0 else None
    return RunLags(
        dispatch_ms=dispatch_ms,
        run_start_ms=run_start_ms,
        all_committed_ms=(done_at - due_epoch) * 1000 if done_at is not None else None,
        not_dispatched=missing,
        created_early_s=early,
        cpu={
            name: window.percent(name) for name in [*(p.name for p in procs), "postgres", "others"]
        },
    )


def start_punctual(
    target: Target, topology: str, slots: int, log_dir: Path, app: str = DEMO_APP
) -> list[Proc]:
    env = {"PUNCTUAL_WORKER__SLOTS": str(slots)}
    port = free_port()
    procs: list[Proc] = []
    try:
        if topology == "single":
            argv = [*serve_argv(target, "api,runner,worker", port), "--app", app]
            procs.append(spawn("serve", argv, target, log_dir, **env))
        elif topology == "split":
            argv = serve_argv(target, "api,runner", port)
            procs.append(spawn("serve", argv, target, log_dir, **env))
            argv = [str(PUNCTUAL), "worker", "--app", app, "--database-url", target.url]
            argv += ["--slots", str(slots)]
            procs.append(spawn("worker", argv, target, log_dir, **env))
        else:
            raise ValueError(f"unknown topology {topology!r} (single or split)")
        # A worker pre-spawns one child per slot before the API listens: give it time.
        wait_until("the API", lambda: http_ready(port), 240, procs=procs)
        return procs
    except BaseException:
        for proc in procs:
            proc.stop()
        raise


def fmt_metric(runs: list[RunLags], pick: str, q: float | None) -> str:
    values = []
    for lags in runs:
        data = lags.dispatch_ms if pick == "dispatch" else lags.run_start_ms
        if data:
            values.append(max(data) if q is None else percentile(data, q))
    return Spread.of(values).fmt(0)


def measure(
    target: Target, args: argparse.Namespace, topology: str, log_dir: Path
) -> list[list[str]]:
    procs = start_punctual(target, topology, args.slots, log_dir)
    system = build_system(target)
    engine = sa.create_engine(target.url.replace("postgresql://", "postgresql+psycopg://", 1))
    rows: list[list[str]] = []
    try:
        wait_until("the worker's definitions", lambda: workflow_loaded(system), 60, procs=procs)
        time.sleep(1.0)  # let the runner settle into its idle loop
        for scenario in parse_list(args.scenarios):
            results: list[RunLags] = []
            for run in range(1, args.runs + 1):
                lags = one_run(system, engine, scenario, run, args.lead, procs)
                results.append(lags)
                committed = (
                    f"  all committed {lags.all_committed_ms:.0f} ms"
                    if lags.all_committed_ms is not None
                    else ""
                )
                print(
                    f"   {topology} {scenario} run {run}: dispatch p50/p99/max "
                    f"{percentile(lags.dispatch_ms, 50):.0f}/{percentile(lags.dispatch_ms, 99):.0f}"
                    f"/{max(lags.dispatch_ms, default=float('nan')):.0f} ms; run start "
                    f"{percentile(lags.run_start_ms, 50):.0f}/"
                    f"{percentile(lags.run_start_ms, 99):.0f}/"
                    f"{max(lags.run_start_ms, default=float('nan')):.0f} ms{committed}"
                    f"  (not dispatched: {lags.not_dispatched}; CPU % of a core until the runs"
                    " ended: " + ", ".join(f"{k} {v:.0f}" for k, v in lags.cpu.items()) + ")",
                    flush=True,
                )
                time.sleep(1.0)
            committed_values = [
                r.all_committed_ms for r in results if r.all_committed_ms is not None
            ]
            rows.append(
                [
                    f"{topology}/{scenario}",
                    fmt_metric(results, "dispatch", 50),
                    fmt_metric(results, "dispatch", 99),
                    fmt_metric(results, "dispatch", None),
                    Spread.of(committed_values).fmt(0) if committed_values else "-",
                    fmt_metric(results, "run", 50),
                    fmt_metric(results, "run", 99),
                    fmt_metric(results, "run", None),
                    TARGETS.get(scenario, ""),
                ]
            )
    finally:
        engine.dispose()
        system.close()
        for proc in procs:
            proc.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="burst500,burst2000,spread2000")
    parser.add_argument("--topology", default="single", help="single, split or single,split")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slots", type=int, default=32, help="Worker slots (child processes).")
    parser.add_argument("--lead", type=float, default=15.0, help="Seconds from create to due.")
    args = parser.parse_args()

    print_machine("dispatch_lag: lateness after start_at (PostgreSQL, local engine)")
    print(f"   worker slots: {args.slots} (PUNCTUAL_WORKER__SLOTS); workflow: demo `echo`")
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="punctual-bench-logs-") as logs:
        for topology in parse_list(args.topology):
            with fresh_target("postgres", "lag") as target:
                rows += measure(target, args, topology, Path(logs))
    print(f"\nlag in ms after start_at: median of {args.runs} runs [min-max]")
    print_table(
        [
            "topology/scenario",
            "dispatch p50",
            "dispatch p99",
            "dispatch max",
            "all committed",
            "run start p50",
            "run start p99",
            "run start max",
            "target",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
