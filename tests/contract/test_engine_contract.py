"""The Engine port's promises (``punctual.ports.engine``), one suite over every engine.

Each test runs on the ``local`` engine (runs claimed from the store by a local worker)
and on the ``temporal`` engine (a real ``temporal server start-dev``, a real Temporal
worker). Both drive a real system: a SQLite store, the start and run use cases, and
``dispatch_due`` as the runner calls it; bodies run in child processes and leave marks
on disk, so "one execution" means the body really ran once.

* ``start`` is idempotent per run id: repeated and concurrent starts converge (WF-6, DP-2);
* ``cancel`` reaches a cooperative body, which ends ``canceled`` (WF-5);
* ``terminate`` ends a body that ignores cancel at once, and no later result is accepted;
* ``loaded`` reports what live workers loaded and forgets stopped and expired ones (WF-2);
* an unreachable engine raises ``EngineUnavailable``, never a start-specific error (DP-3).

The last section pins what only the Temporal adapter does: syncing Temporal's view back
into the store (WF-8), priority and task queue, and input kept out of Temporal history.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.engines.local.engine import LocalEngine
from punctual.adapters.engines.temporal.engine import OCCURRENCE_ATTRIBUTES
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.store import SqlStore
from punctual.domain.permissions import Principal, Role
from punctual.domain.runs import Run, RunState
from punctual.domain.starts import StartState
from punctual.domain.timeutil import to_rfc3339
from punctual.errors import Unavailable
from punctual.ports.engine import Engine, EngineUnavailable, RunOrder
from punctual.ports.records import WorkerRecord
from punctual.usecases.kernel.context import Services
from punctual.usecases.recurring import schedules
from punctual.usecases.recurring.generation import generate
from punctual.usecases.recurring.schedule_fields import decode_create
from punctual.usecases.running import runs
from punctual.usecases.running.definitions import register_worker
from punctual.usecases.scheduled import starts
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.usecases.tenancy import identity
from punctual.workflows import load_app
from tests.conftest import make_settings
from tests.support.temporal import free_port

APP_REF = "tests.integration.temporal_app:app"
TENANT = "acme"
ADMIN = Principal(tenant=TENANT, subject="alice", role=Role.ADMIN)
LIVENESS_SECONDS = 15.0
"""Generous: ``LocalWorker.start`` records a first heartbeat taken before its slot processes
started, which can be seconds old on a loaded machine."""
ACTIVE = (RunState.PENDING, RunState.RUNNING)


def finished(run: Run) -> bool:
    return run.state not in ACTIVE


@dataclasses.dataclass
class Harness:
    """One engine behind a real system, with its worker; the test's view of both."""

    kind: str
    system: bootstrap.Punctual
    engine: Engine
    marks: Path
    task_queue: str
    start_worker: Callable[[], Callable[[], None]]
    temporal_address: str | None = None
    _stop_worker: Callable[[], None] | None = None

    @property
    def services(self) -> Services:
        return self.system.services

    def worker_up(self) -> None:
        self._stop_worker = self.start_worker()

    def stop_worker(self) -> None:
        if self._stop_worker is not None:
            stop, self._stop_worker = self._stop_worker, None
            stop()

    def create_start(self, workflow: str, payload: dict[str, Any]) -> str:
        command = starts.CreateStart(
            workflow=workflow,
            input={"marks": str(self.marks), **payload},
            business_request_id=f"contract-{workflow}",
            start_at=datetime.now(UTC) - timedelta(seconds=1),
            workload_class="standard",
        )
        outcome = self.system.mutations.run(None, starts.create(self.services, ADMIN, command))
        start_id: str = outcome.body["id"]
        return start_id

    def dispatch(self, workflow: str, payload: dict[str, Any]) -> str:
        """Create a start due now and dispatch it as the runner would; its run id."""
        start_id = self.create_start(workflow, payload)
        report = dispatch_due(self.services, "contract-runner", 10)
        assert report.dispatched == [start_id], report
        with self.system.store.transaction(readonly=True) as tx:
            start = tx.starts.get(TENANT, start_id)
        assert start is not None
        return start.run_id

    def run(self, run_id: str) -> Run:
        with self.system.store.transaction(readonly=True) as tx:
            run = tx.runs.get(TENANT, run_id)
        assert run is not None, run_id
        return run

    def wait(self, run_id: str, done: Callable[[Run], bool], timeout: float = 15) -> Run:
        deadline = time.monotonic() + timeout
        run = self.run(run_id)
        while not done(run):
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} did not get there in {timeout} s: {run}")
            time.sleep(0.05)
            run = self.run(run_id)
        return run

    def wait_for_mark(self, name: str, timeout: float = 15) -> Path:
        path = self.marks / name
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"no mark {name} after {timeout} s")
            time.sleep(0.02)
        return path

    def body_runs(self, run_id: str) -> int:
        path = self.marks / f"{run_id}.ran"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def order(self, run_id: str) -> RunOrder:
        run = self.run(run_id)
        return RunOrder(
            run_id=run.id,
            tenant=run.tenant,
            workflow=run.workflow,
            definition_version=run.definition_version,
            task_queue=run.task_queue,
            priority=run.priority,
            timeout_seconds=60,
            origin=run.origin,
        )

    def cancel(self, run_id: str) -> dict[str, Any]:
        body: dict[str, Any] = self.system.mutations.run(
            None, runs.cancel(self.services, ADMIN, run_id)
        ).body
        return body

    def terminate(self, run_id: str) -> dict[str, Any]:
        body: dict[str, Any] = self.system.mutations.run(
            None, runs.terminate(self.services, ADMIN, run_id)
        ).body
        return body


def _settings(sqlite_url: str, tmp_path: Path, queue: str) -> Any:
    return make_settings(
        sqlite_url,
        tmp_path,
        worker={
            "heartbeat_seconds": 0.5,
            "liveness_seconds": LIVENESS_SECONDS,
            "pending_timeout_seconds": 60,
        },
        runner={"lease_seconds": 5},
        # A queue of its own: the Temporal server is shared by the whole session.
        workload_classes={
            name: {"task_queue": f"{queue}-{name}", "priority": priority}
            for name, priority in (("interactive", 1), ("standard", 2), ("batch", 5))
        },
    )


def _local(system: bootstrap.Punctual, queue: str) -> Callable[[], Callable[[], None]]:
    def start() -> Callable[[], None]:
        worker = system.start_worker(APP_REF, task_queues=[queue], slots=2)

        def stop() -> None:
            worker.stop(grace_seconds=0)
            system.workers.remove(worker)

        return stop

    return start


def _temporal(
    system: bootstrap.Punctual, queue: str, address: str
) -> Callable[[], Callable[[], None]]:
    from punctual.worker.temporal.worker import TemporalWorker

    def start() -> Callable[[], None]:
        worker = TemporalWorker(
            system.services,
            APP_REF,
            [queue],
            address,
            "default",
            slots=2,
            heartbeat_seconds=0.5,
            shutdown_grace_seconds=0,
        )
        worker.start()
        return worker.stop

    return start


def temporal_engine(system: bootstrap.Punctual, address: str, **options: Any) -> Any:
    from punctual.adapters.engines.temporal.engine import TemporalEngine, TemporalOptions

    return TemporalEngine(
        system.store,
        system.services.clock,
        liveness_seconds=LIVENESS_SECONDS,
        pending_timeout_seconds=60,
        max_attempts=3,
        options=TemporalOptions(address=address, heartbeat_timeout_seconds=5, **options),
    )


@pytest.fixture(params=["local", pytest.param("temporal", marks=pytest.mark.temporal)])
def harness(request: pytest.FixtureRequest, sqlite_url: str, tmp_path: Path) -> Iterator[Harness]:
    kind: str = request.param
    address: str | None = (
        request.getfixturevalue("temporal_address") if kind == "temporal" else None
    )
    prefix = f"contract-{uuid.uuid4().hex[:8]}"
    settings = _settings(sqlite_url, tmp_path, prefix)
    queue = f"{prefix}-standard"
    system = bootstrap.build(settings)
    marks = tmp_path / "marks"
    marks.mkdir()
    identity.ensure_member_token(system.services, TENANT, ADMIN.subject, Role.ADMIN)
    engine: Engine
    if address is not None:
        engine = temporal_engine(system, address)
        system.services.engine = engine
        start_worker = _temporal(system, queue, address)
    else:
        engine = system.engine
        start_worker = _local(system, queue)
    h = Harness(kind, system, engine, marks, queue, start_worker, address)
    try:
        h.worker_up()
        yield h
    finally:
        h.stop_worker()
        system.close()
        close = getattr(engine, "close", None)
        if close is not None:
            close()


# ---- Temporal-side observations (the client, not the engine under test) ---------------


def temporal_call(address: str, action: Callable[[Any], Any]) -> Any:
    from temporalio.client import Client

    async def run() -> Any:
        client = await Client.connect(address, namespace="default")
        return await action(client)

    return asyncio.run(run())


def temporal_executions(address: str, run_id: str) -> list[Any]:
    """Every execution Temporal's visibility knows for the workflow id ``run_id``."""

    async def listing(client: Any) -> list[Any]:
        return [e async for e in client.list_workflows(f'WorkflowId = "{run_id}"')]

    result: list[Any] = temporal_call(address, listing)
    return result


def temporal_status(address: str, run_id: str) -> str:
    async def describe(client: Any) -> str:
        description = await client.get_workflow_handle(run_id).describe()
        return str(description.status.name)

    status: str = temporal_call(address, describe)
    return status


def wait_temporal_status(address: str, run_id: str, expected: str, timeout: float = 5) -> str:
    deadline = time.monotonic() + timeout
    status = temporal_status(address, run_id)
    while status != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        status = temporal_status(address, run_id)
    return status


def settle_executions(address: str, run_id: str, timeout: float = 5) -> list[Any]:
    """Visibility lags a little: wait until no execution of ``run_id`` shows running."""
    deadline = time.monotonic() + timeout
    while True:
        found = temporal_executions(address, run_id)
        if found and all(e.status.name != "RUNNING" for e in found):
            return found
        if time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def body_stops(tick: Path, since: float, quiet: float = 0.5, bound: float = 5) -> float:
    """Seconds from ``since`` until ``tick`` stopped changing (it must stay still ``quiet`` s)."""
    last, still_since = tick.stat().st_mtime_ns, time.monotonic()
    while time.monotonic() - still_since < quiet:
        assert time.monotonic() - since < bound, "the body kept running"
        time.sleep(0.05)
        now = tick.stat().st_mtime_ns
        if now != last:
            last, still_since = now, time.monotonic()
    return still_since - since


# ---- the contract ---------------------------------------------------------------------


def test_start_is_idempotent_per_run_id(harness: Harness) -> None:
    h = harness
    run_id = h.dispatch("count", {"seconds": 1.0})
    order = h.order(run_id)
    errors: list[BaseException] = []

    def start_again() -> None:
        try:
            h.engine.start([order])
            h.engine.on_recorded([order])
        except BaseException as exc:
            errors.append(exc)

    def twice_at_once() -> None:
        threads = [threading.Thread(target=start_again) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    # While the run is in flight: the same order again, then from two threads at once.
    start_again()
    twice_at_once()
    run = h.wait(run_id, finished)
    # After it ended: a late retry of the dispatch must not run it again either.
    start_again()
    twice_at_once()
    time.sleep(1.0)  # a second execution would have begun by now

    assert errors == []
    run = h.run(run_id)
    assert run.state is RunState.COMPLETED, run
    assert run.attempts == 1
    assert h.body_runs(run_id) == 1
    if h.temporal_address is not None:
        executions = settle_executions(h.temporal_address, run_id)
        assert len(executions) == 1
        assert executions[0].status.name == "COMPLETED"


def test_cancel_reaches_a_cooperative_workflow(harness: Harness) -> None:
    h = harness
    run_id = h.dispatch("nap", {"seconds": 60})
    h.wait_for_mark(f"{run_id}.ran")
    began = time.monotonic()
    view = h.cancel(run_id)
    assert view["cancel_requested"] is True
    run = h.wait(run_id, finished, timeout=10)
    assert run.state is RunState.CANCELED, run
    assert time.monotonic() - began < 5
    assert (h.marks / f"{run_id}.cleaned").exists(), "the body saw the cancel and cleaned up"
    assert h.cancel(run_id)["state"] == "canceled"  # idempotent
    if h.temporal_address is not None:
        assert wait_temporal_status(h.temporal_address, run_id, "CANCELED") == "CANCELED"


def test_terminate_ends_a_hung_body_at_once_and_no_later_result_is_accepted(
    harness: Harness,
) -> None:
    h = harness
    run_id = h.dispatch("stubborn", {"seconds": 4})
    tick = h.wait_for_mark(f"{run_id}.tick")
    began = time.monotonic()
    view = h.terminate(run_id)
    assert view["state"] == "terminated"  # recorded at once, not when the body stops
    assert h.run(run_id).state is RunState.TERMINATED

    # The body is killed: its tick file stops changing.
    stopped_after = body_stops(tick, began)
    assert stopped_after < 3, f"the body ran on for {stopped_after:.2f} s"

    time.sleep(max(0.0, 4.5 - (time.monotonic() - began)))  # past its natural end
    assert not (h.marks / f"{run_id}.returned").exists()
    run = h.run(run_id)
    assert run.state is RunState.TERMINATED
    assert run.result is None
    assert h.terminate(run_id)["state"] == "terminated"  # idempotent
    if h.temporal_address is not None:
        assert wait_temporal_status(h.temporal_address, run_id, "TERMINATED") == "TERMINATED"


def test_loaded_reports_live_workers_and_forgets_stopped_and_expired_ones(
    harness: Harness,
) -> None:
    h = harness
    app = load_app(APP_REF)
    expected = {(d.name, d.version, d.artifact) for d in app.definitions}
    assert expected <= h.engine.loaded()

    # A worker of this engine whose last heartbeat is older than the liveness window.
    stale = h.services.clock.now() - timedelta(seconds=3 * LIVENESS_SECONDS)
    ghost = ("ghost", "9", "sha256:ghost")
    register_worker(
        h.services,
        WorkerRecord(
            id=f"wrk_ghost_{h.kind}",
            engine=h.engine.name,
            host="gone",
            task_queues=[h.task_queue],
            loaded=[ghost],
            slots=1,
            started_at=stale,
            heartbeat_at=stale,
            stopped_at=None,
        ),
        [],
    )
    assert ghost not in h.engine.loaded()

    h.stop_worker()
    assert not (expected & h.engine.loaded())


def test_an_unreachable_engine_raises_engine_unavailable(harness: Harness, tmp_path: Path) -> None:
    h = harness
    if h.kind == "local":
        # The local engine *is* the store: its work items are run records, so it cannot be
        # unreachable on its own. Its only outage is the store's, which surfaces as
        # ``Unavailable`` (store_unavailable); the runner treats both the same way.
        dead_store = SqlStore(f"sqlite:///{tmp_path}/no/such/dir/punctual.db")
        engine = LocalEngine(dead_store, h.services.clock, LIVENESS_SECONDS)
        with pytest.raises(Unavailable) as raised:
            engine.loaded()
        assert raised.value.code == "store_unavailable"
        dead_store.dispose()
        return

    assert h.temporal_address is not None
    dead = temporal_engine(
        h.system,
        f"127.0.0.1:{free_port()}",  # nothing listens there
        rpc_timeout_seconds=2,
        connect_timeout_seconds=1,
    )
    try:
        start_id = h.create_start("count", {})
        began = time.monotonic()
        with pytest.raises(EngineUnavailable):
            dispatch_due(dataclasses.replace(h.services, engine=dead), "contract-runner", 10)
        # DP-3: the outage is not charged to the start; it is due again, uncharged.
        with h.system.store.transaction(readonly=True) as tx:
            start = tx.starts.get(TENANT, start_id)
        assert start is not None
        assert start.state is StartState.SCHEDULED
        assert (start.attempts, start.last_error) == (0, None)

        order = RunOrder(
            run_id=start.run_id,
            tenant=TENANT,
            workflow="count",
            definition_version="1",
            task_queue=h.task_queue,
            priority=2,
            timeout_seconds=60,
            origin={"source": "scheduled_start", "id": start_id},
        )
        calls: list[Callable[[], object]] = [
            lambda: dead.start([order]),
            lambda: dead.cancel(TENANT, order.run_id),
            lambda: dead.terminate(TENANT, order.run_id),
        ]
        for call in calls:
            with pytest.raises(EngineUnavailable):
                call()
        assert dead.available() is False
        assert time.monotonic() - began < 20
        # loaded() reads the workers' heartbeats in the store: it still answers.
        assert dead.loaded() == h.engine.loaded()
    finally:
        dead.close()

    # Once the engine answers, the same start dispatches to the same run and runs once.
    assert dispatch_due(h.services, "contract-runner", 10).dispatched == [start_id]
    run = h.wait(order.run_id, finished)
    assert run.state is RunState.COMPLETED
    assert h.body_runs(order.run_id) == 1


# ---- what only the Temporal adapter does ------------------------------------------------


def forget_outcome(h: Harness, run_id: str) -> None:
    """Make the store lose what the worker wrote, as if its write had failed."""
    from punctual.adapters.stores.sql.tables import runs as runs_table

    with h.system.store.engine.begin() as conn:
        conn.execute(
            runs_table.update()
            .where(runs_table.c.id == run_id)
            .values(state="running", result=None, error=None, ended_at=None)
        )


@pytest.mark.temporal
@pytest.mark.parametrize("harness", ["temporal"], indirect=True)
def test_sync_records_what_only_temporal_saw(harness: Harness) -> None:
    """WF-8: outcomes reach the store from Temporal's history, and reads never need Temporal."""
    from punctual.adapters.engines.temporal.engine import TemporalEngine
    from punctual.worker.temporal.sync import sync_runs

    h = harness
    assert h.temporal_address is not None
    ok = h.dispatch("count", {})
    boom = h.dispatch("explode", {})
    slow = h.dispatch("hang", {})
    hung = h.dispatch("stubborn", {"seconds": 30})
    for run_id, closed in ((ok, "COMPLETED"), (boom, "FAILED"), (slow, "FAILED")):
        h.wait(run_id, finished)  # the worker's own write; Temporal closes just after
        assert wait_temporal_status(h.temporal_address, run_id, closed) == closed
    tick = h.wait_for_mark(f"{hung}.tick")

    # An operator terminates in Temporal directly, bypassing punctual.
    async def terminate(client: Any) -> None:
        await client.get_workflow_handle(hung).terminate(reason="operator in the Temporal UI")

    temporal_call(h.temporal_address, terminate)
    terminated_at = time.monotonic()
    for run_id in (ok, boom, slow):
        forget_outcome(h, run_id)

    # With Temporal unreachable, reads still answer from the store; a sync pass fails
    # cleanly and changes nothing.
    dead = temporal_engine(h.system, f"127.0.0.1:{free_port()}", connect_timeout_seconds=1)
    try:
        assert runs.get(dataclasses.replace(h.services, engine=dead), ADMIN, ok)["state"] == (
            "running"
        )
        with pytest.raises(EngineUnavailable):
            sync_runs(h.services, dead)
    finally:
        dead.close()
    assert h.run(ok).state is RunState.RUNNING

    assert isinstance(h.engine, TemporalEngine)
    report = sync_runs(h.services, h.engine)
    assert set(report.finished) == {ok, boom, slow, hung}
    completed = h.run(ok)
    assert completed.state is RunState.COMPLETED
    assert completed.attempts == 1
    assert completed.result["attempt"] == 1
    failed = h.run(boom)
    assert failed.state is RunState.FAILED
    assert failed.error is not None
    assert failed.error["code"] == "workflow_error"
    assert failed.error["type"] == "RuntimeError"
    assert "exploded on purpose" in failed.error["message"]
    timed_out = h.run(slow)
    assert timed_out.state is RunState.TIMED_OUT
    assert timed_out.error == {"code": "timed_out", "message": "execution timeout of 1 s exceeded"}
    terminated = h.run(hung)
    assert terminated.state is RunState.TERMINATED
    assert terminated.error == {"code": "terminated", "message": "operator in the Temporal UI"}

    # Temporal's terminate also reached the body: it stopped ticking.
    assert body_stops(tick, terminated_at) < 3
    # Idempotent: a second pass finds nothing left to do.
    assert isinstance(h.engine, TemporalEngine)
    again = sync_runs(h.services, h.engine)
    assert (again.observed, again.finished) == (0, [])


@pytest.mark.temporal
@pytest.mark.parametrize("harness", ["temporal"], indirect=True)
def test_a_run_temporal_has_no_execution_for_is_started_by_the_sync(harness: Harness) -> None:
    """DP-6: after Temporal lost its state, a recorded run that never ran is started again."""
    from punctual.adapters.engines.temporal.engine import TemporalEngine
    from punctual.worker.temporal.sync import sync_runs

    h = harness
    start_id = h.create_start("count", {})
    # Dispatch records the run, but its start never reaches Temporal.
    recording_only = LocalEngine(h.system.store, h.services.clock, LIVENESS_SECONDS)
    report = dispatch_due(dataclasses.replace(h.services, engine=recording_only), "r", 10)
    assert report.dispatched == [start_id]
    with h.system.store.transaction(readonly=True) as tx:
        start = tx.starts.get(TENANT, start_id)
    assert start is not None
    run_id = start.run_id
    assert h.temporal_address is not None
    assert temporal_executions(h.temporal_address, run_id) == []

    assert isinstance(h.engine, TemporalEngine)
    synced = sync_runs(h.services, h.engine)
    assert synced.restarted == [run_id]
    run = h.wait(run_id, finished)
    assert run.state is RunState.COMPLETED
    assert h.body_runs(run_id) == 1


@pytest.mark.temporal
@pytest.mark.parametrize("harness", ["temporal"], indirect=True)
def test_executions_carry_queue_and_priority_and_never_the_input(harness: Harness) -> None:
    h = harness
    assert h.temporal_address is not None
    secret = f"s3cret-{uuid.uuid4().hex}"
    run_id = h.dispatch("count", {"secret": secret})
    assert h.wait(run_id, finished).state is RunState.COMPLETED

    async def inspect(client: Any) -> tuple[Any, bytes]:
        handle = client.get_workflow_handle(run_id)
        description = await handle.describe()
        history = await handle.fetch_history()
        return description, b"".join(event.SerializeToString() for event in history.events)

    description, history = temporal_call(h.temporal_address, inspect)
    raw = description.raw_description
    assert raw.execution_config.task_queue.name == h.task_queue
    assert raw.workflow_execution_info.priority.priority_key == 2  # class "standard"
    assert b"began_at" in history  # the result travels through Temporal ...
    assert secret.encode() not in history  # ... the input never does, not even encrypted
    assert b"marks" not in history


@pytest.mark.temporal
@pytest.mark.parametrize("harness", ["temporal"], indirect=True)
def test_a_run_whose_worker_is_lost_is_retried_as_a_new_attempt(harness: Harness) -> None:
    """WF-4, DP-2: the body may run again, as attempt 2 of the same run, never a second run."""
    h = harness
    run_id = h.dispatch("stubborn", {"seconds": 1.5})
    h.wait_for_mark(f"{run_id}.tick")
    h.stop_worker()  # no grace: the body is killed mid-way
    assert not (h.marks / f"{run_id}.returned").exists()
    h.worker_up()
    run = h.wait(run_id, finished, timeout=30)
    assert run.state is RunState.COMPLETED, run
    assert run.attempts == 2
    assert (h.marks / f"{run_id}.returned").read_text().count("\n") == 1
    assert h.temporal_address is not None
    assert len(settle_executions(h.temporal_address, run_id)) == 1


def _next_occurrence_run(h: Harness, schedule_id: str, taken: list[str]) -> tuple[str, str]:
    """Generate and dispatch, one start at a time as a runner would, until an occurrence of
    the schedule other than ``taken`` has its run dispatched: (occurrence id, run id)."""
    deadline = time.monotonic() + 20
    while True:
        generate(h.services, 10)
        dispatch_due(h.services, "contract-runner", 1)
        query = (
            sa.select(t.starts.c.id, t.starts.c.run_id)
            .where(t.starts.c.schedule_id == schedule_id, t.starts.c.dispatched_at.is_not(None))
            .order_by(t.starts.c.occurrence_at)
        )
        with h.system.store.engine.connect() as conn:
            dispatched = [(row.id, row.run_id) for row in conn.execute(query)]
        fresh = [pair for pair in dispatched if pair[1] not in taken]
        if fresh:
            return fresh[0]
        assert time.monotonic() < deadline, "no occurrence of the schedule was dispatched"
        time.sleep(0.05)


def test_a_run_knows_the_occurrence_it_is(harness: Harness) -> None:
    """RS-10: ``ctx.occurrence`` is None for a one-off start; a schedule's run is told its
    occurrence and the schedule's run that had completed before it (none for the first)."""
    h = harness
    one_off = h.wait(h.dispatch("whence", {}), finished)
    assert one_off.state is RunState.COMPLETED, one_off
    assert one_off.result == {"occurrence": None}

    body = {
        "name": "whence",
        "workflow": "whence",
        "input": {"marks": str(h.marks)},
        "spec": {"interval_ms": 1000},
        "overlap": "allow_all",
        "missed": "skip",
    }
    decoded = decode_create(body)
    schedule_id = h.system.mutations.run(None, schedules.create(h.services, ADMIN, decoded)).body[
        "id"
    ]
    first_occurrence, first_run = _next_occurrence_run(h, schedule_id, [])
    assert h.wait(first_run, finished).state is RunState.COMPLETED
    second_occurrence, second_run = _next_occurrence_run(h, schedule_id, [first_run])
    ended = [h.wait(first_run, finished), h.wait(second_run, finished)]
    with h.system.store.transaction(readonly=True) as tx:
        occurrences = [
            tx.starts.get_occurrence(TENANT, schedule_id, o)
            for o in (first_occurrence, second_occurrence)
        ]
    for run, occurrence, previous in zip(ended, occurrences, [None, first_run], strict=True):
        assert run.state is RunState.COMPLETED, run
        assert occurrence is not None
        assert run.result == {
            "occurrence": {
                "schedule_id": schedule_id,
                "occurrence_id": occurrence.id,
                "occurrence_at": to_rfc3339(occurrence.occurrence_at),
                "scheduled_at": to_rfc3339(occurrence.start_at),
                "origin": "schedule",
                "previous_completed_run_id": previous,
            }
        }, run.result


@pytest.mark.temporal
@pytest.mark.parametrize("harness", ["temporal"], indirect=True)
def test_a_schedules_run_carries_its_occurrence_as_search_attributes(harness: Harness) -> None:
    """RS-10: in a namespace with punctual's search attributes registered, Temporal's own
    queries find a schedule's runs by schedule, occurrence and instant; a one-off start
    carries none."""
    h = harness
    assert h.temporal_address is not None
    address = h.temporal_address

    async def register(client: Any) -> None:
        from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest

        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace="default", search_attributes=dict(OCCURRENCE_ATTRIBUTES)
            )
        )

    with contextlib.suppress(Exception):  # registered already by an earlier run of this test
        temporal_call(address, register)
    one_off = h.wait(h.dispatch("whence", {}), finished)
    body = {
        "name": f"found-{uuid.uuid4().hex[:6]}",
        "workflow": "whence",
        "input": {"marks": str(h.marks)},
        "spec": {"interval_ms": 1000},
        "overlap": "allow_all",
        "missed": "skip",
    }
    created = h.system.mutations.run(
        None, schedules.create(h.services, ADMIN, decode_create(body))
    ).body
    occurrence_id, run_id = _next_occurrence_run(h, created["id"], [])
    assert h.wait(run_id, finished).state is RunState.COMPLETED

    async def found(client: Any) -> list[tuple[str, Any]]:
        query = f"PunctualScheduleId = '{created['id']}'"
        return [(e.id, e.typed_search_attributes) async for e in client.list_workflows(query)]

    deadline = time.monotonic() + 20
    while not (listed := temporal_call(address, found)):  # visibility lags a little
        assert time.monotonic() < deadline, "the run is not found by its schedule"
        time.sleep(0.2)
    [(execution_id, attributes)] = listed
    assert execution_id == run_id
    values = {pair.key.name: pair.value for pair in attributes}
    assert values["PunctualOccurrenceId"] == occurrence_id
    assert values["PunctualOccurrenceAt"].tzinfo is not None

    async def described(client: Any) -> Any:
        return (await client.get_workflow_handle(one_off.id).describe()).typed_search_attributes

    one_off_values = {pair.key.name for pair in temporal_call(address, described)}
    assert not one_off_values & set(OCCURRENCE_ATTRIBUTES)
