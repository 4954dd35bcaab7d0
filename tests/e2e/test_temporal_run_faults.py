"""Run faults on the Temporal engine, against a real dev server and a real Temporal worker.

* FT-6: run cancel and terminate are recorded while Temporal is down; the sync pass sends
  them again once Temporal answers (cancel of a running body; terminate of an execution
  still open although the store already ended its run);
* FT-3: an outcome the store refuses ends the run ``failed`` (``result_not_storable``) in
  the store and in Temporal, and the body never runs again; the sync pass handles such a
  record alone and syncs the others;
* FT-1: a run whose input fails authentication fails alone (``input_undecryptable``) at
  once; one whose key id no worker holds is retried by Temporal and then fails
  (``input_key_unknown``); both raise a health finding; the other runs complete. The sync
  pass ends a run whose closed execution's outcome it cannot decode (``engine_execution_lost``)
  and leaves one whose handling raises for the next pass, logging neither's text, and syncs
  the rest of the page;
* API.md "Runs": ``claimed_at`` and ``started_at`` are the current attempt's, so a retried
  attempt moves both.

The harness is the engine contract's (``tests.contract.test_engine_contract``), on the
``temporal`` engine only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from punctual.adapters.engines.temporal.engine import TemporalEngine
from punctual.adapters.engines.temporal.ledger import StoreRunLedger
from punctual.adapters.stores.sql.tables import runs as runs_table
from punctual.domain.runs import RunState
from punctual.ports.records import WorkerRecord
from punctual.usecases.running import runs
from punctual.usecases.running.definitions import register_worker
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.usecases.tenancy import health
from punctual.worker.temporal.sync import sync_runs
from punctual.worker.temporal.worker import TemporalWorker
from punctual.workflows import load_app
from tests.contract.test_engine_contract import (
    ADMIN,
    APP_REF,
    TENANT,
    Harness,
    finished,
    forget_outcome,
    harness,
    temporal_engine,
    wait_temporal_status,
)
from tests.integration.test_temporal_ledger import RefusingLedger
from tests.support.temporal import free_port

__all__ = ["harness"]  # the contract's fixture, used here on the temporal engine only

pytestmark = [
    pytest.mark.temporal,
    pytest.mark.parametrize("harness", ["temporal"], indirect=True),
]


class Unreachable:
    """A Temporal engine at an address nothing listens on; tells when a call has ended."""

    def __init__(self, h: Harness) -> None:
        self.engine: TemporalEngine = temporal_engine(
            h.system, f"127.0.0.1:{free_port()}", rpc_timeout_seconds=1, connect_timeout_seconds=1
        )
        self.ended = threading.Event()
        self.errors: list[BaseException] = []
        self.name = self.engine.name

    def _call(self, call: Callable[[str, str], None], tenant: str, run_id: str) -> None:
        try:
            call(tenant, run_id)
        except BaseException as exc:
            self.errors.append(exc)
            raise
        finally:
            self.ended.set()

    def cancel(self, tenant: str, run_id: str) -> None:
        self._call(self.engine.cancel, tenant, run_id)

    def terminate(self, tenant: str, run_id: str) -> None:
        self._call(self.engine.terminate, tenant, run_id)

    def close(self) -> None:
        assert self.ended.wait(15), "the engine call after the commit never ended"
        self.engine.close()


def during_outage(h: Harness, operation: str, run_id: str) -> dict[str, Any]:
    """Cancel or terminate through the run use case while Temporal is unreachable."""
    dead = Unreachable(h)
    try:
        outage = dataclasses.replace(h.services, engine=dead)  # type: ignore[arg-type]
        mutation = getattr(runs, operation)(outage, ADMIN, run_id)
        body: dict[str, Any] = h.system.mutations.run(None, mutation).body
    finally:
        dead.close()
    assert [type(e).__name__ for e in dead.errors] == ["EngineUnavailable"]
    return body


def pretend_loaded(h: Harness) -> None:
    """A live Temporal worker record with the app's versions, but no poller in Temporal:
    dispatch starts executions that no worker takes."""
    app = load_app(APP_REF)
    now = h.services.clock.now()
    record = WorkerRecord(
        id="wrk_no_poller",
        engine="temporal",
        host="test",
        task_queues=[h.task_queue],
        loaded=[(d.name, d.version, d.artifact) for d in app.definitions],
        slots=1,
        started_at=now,
        heartbeat_at=now,
        stopped_at=None,
    )
    register_worker(h.services, record, [])


def run_id_of(h: Harness, start_id: str) -> str:
    with h.system.store.transaction(readonly=True) as tx:
        start = tx.starts.get(TENANT, start_id)
    assert start is not None
    return start.run_id


def sync_until(h: Harness, done: Callable[[], object], timeout: float = 15) -> None:
    """Sync passes (as the runner's loop makes them) until ``done()`` holds."""
    assert isinstance(h.engine, TemporalEngine)
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the sync never got there"
        sync_runs(h.services, h.engine)
        time.sleep(0.2)


def test_cancel_while_temporal_is_down_is_recorded_and_sent_again_by_the_sync(
    harness: Harness,
) -> None:
    h = harness
    run_id = h.dispatch("nap", {"seconds": 60})
    h.wait_for_mark(f"{run_id}.ran")
    view = during_outage(h, "cancel", run_id)
    assert view["cancel_requested"] is True  # recorded although Temporal was unreachable
    assert h.run(run_id).cancel_requested

    time.sleep(1.0)
    assert not (h.marks / f"{run_id}.cleaned").exists(), "the cancel reached the body anyway"
    sync_until(h, lambda: finished(h.run(run_id)))
    assert h.run(run_id).state is RunState.CANCELED
    assert (h.marks / f"{run_id}.cleaned").exists(), "the body saw the cancel and cleaned up"
    assert h.temporal_address is not None
    assert wait_temporal_status(h.temporal_address, run_id, "CANCELED") == "CANCELED"


def test_terminate_while_temporal_is_down_is_recorded_and_sent_again_by_the_sync(
    harness: Harness,
) -> None:
    h = harness
    h.stop_worker()  # the execution stays open: no worker takes (and closes) it
    pretend_loaded(h)
    run_id = h.dispatch("count", {})
    view = during_outage(h, "terminate", run_id)
    assert view["state"] == "terminated"  # recorded at once, Temporal unreachable
    assert h.temporal_address is not None
    address = h.temporal_address
    sync_until(h, lambda: wait_temporal_status(address, run_id, "TERMINATED", 0.2) == "TERMINATED")
    assert h.run(run_id).state is RunState.TERMINATED
    assert h.body_runs(run_id) == 0


def test_a_refused_outcome_fails_the_run_and_never_runs_the_body_again(
    harness: Harness,
) -> None:
    h = harness
    h.stop_worker()
    refused, accepted = h.create_start("count", {}), h.create_start("count", {})
    refused_run, accepted_run = run_id_of(h, refused), run_id_of(h, accepted)
    ledger = RefusingLedger(h.system.store, {refused_run})
    worker = TemporalWorker(
        h.services,
        APP_REF,
        [h.task_queue],
        h.temporal_address or "",
        "default",
        slots=2,
        heartbeat_seconds=0.5,
        shutdown_grace_seconds=0,
        ledger=ledger,
    )
    worker.start()
    try:
        assert set(dispatch_due(h.services, "contract-runner", 10).dispatched) == {
            refused,
            accepted,
        }
        failed = h.wait(refused_run, finished)
        assert h.wait(accepted_run, finished).state is RunState.COMPLETED
        assert failed.state is RunState.FAILED
        assert failed.result is None
        assert failed.error is not None
        assert failed.error["code"] == "result_not_storable"
        assert h.temporal_address is not None
        assert wait_temporal_status(h.temporal_address, refused_run, "FAILED") == "FAILED"
        time.sleep(2.5)  # a retried attempt would have begun by now (1 s backoff)
        assert h.body_runs(refused_run) == 1
    finally:
        worker.stop()


def test_the_sync_handles_a_refused_record_alone_and_syncs_the_others(
    harness: Harness,
) -> None:
    h = harness
    refused, accepted = h.dispatch("count", {}), h.dispatch("count", {})
    assert h.temporal_address is not None
    for run_id in (refused, accepted):
        h.wait(run_id, finished)
        assert wait_temporal_status(h.temporal_address, run_id, "COMPLETED") == "COMPLETED"
        forget_outcome(h, run_id)  # as if the worker's own write had failed

    assert isinstance(h.engine, TemporalEngine)
    ledger = RefusingLedger(h.system.store, {refused})
    report = sync_runs(h.services, h.engine, ledger=ledger, page_size=1)

    assert report.unstorable == [refused]
    assert set(report.finished) == {refused, accepted}
    assert h.run(accepted).state is RunState.COMPLETED
    failed = h.run(refused)
    assert failed.state is RunState.FAILED
    assert failed.error is not None
    assert failed.error["code"] == "result_not_storable"


def test_unreadable_input_fails_its_run_alone(harness: Harness) -> None:
    h = harness
    h.stop_worker()  # the runs are recorded before any worker reads their input
    pretend_loaded(h)
    damaged, unknown, fine = (h.dispatch("count", {}) for _ in range(3))
    with h.system.store.engine.begin() as conn:
        (ciphertext,) = conn.execute(
            runs_table.select()
            .with_only_columns(runs_table.c.input)
            .where(runs_table.c.id == damaged)
        ).one()
        flipped = bytes(ciphertext[:-1]) + bytes([ciphertext[-1] ^ 0x01])
        conn.execute(runs_table.update().where(runs_table.c.id == damaged).values(input=flipped))
        conn.execute(
            runs_table.update().where(runs_table.c.id == unknown).values(input_key_id="k-gone")
        )
    h.worker_up()

    assert h.wait(fine, finished).state is RunState.COMPLETED
    undecryptable = h.wait(damaged, finished, timeout=10)
    assert undecryptable.state is RunState.FAILED
    assert undecryptable.error is not None
    assert undecryptable.error["code"] == "input_undecryptable"
    # Retried by Temporal (another worker may hold the key), then failed: 3 attempts.
    key_unknown = h.wait(unknown, finished, timeout=30)
    assert key_unknown.state is RunState.FAILED
    assert key_unknown.error is not None
    assert key_unknown.error["code"] == "input_key_unknown"
    assert h.body_runs(damaged) == h.body_runs(unknown) == 0
    assert h.body_runs(fine) == 1
    # Both are failures no body can fix: the tenant's health shows them until acknowledged.
    report = health.report(h.services, ADMIN)
    assert report["status"] == "degraded"
    findings = {f["subject_id"]: f for f in report["findings"] if f["kind"] == "run_failed"}
    assert set(findings) == {damaged, unknown}
    assert findings[damaged]["severity"] == "error"
    assert findings[damaged]["message"].startswith(f"run {damaged} failed: ")
    assert "failed authentication" in findings[damaged]["message"]


_SEALED = b"binary/test-sealed"


class SealingCodec(PayloadCodec):
    """Wraps every payload in an encoding punctual's converter does not know."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": _SEALED}, data=p.SerializeToString()) for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload.FromString(p.data) for p in payloads]


@workflow.defn(name="test.sealed_result")
class SealedResult:
    @workflow.run
    async def run(self) -> dict[str, str]:
        return {"said": "a result sealed with a codec punctual does not have"}


def replace_with_sealed_execution(address: str, run_id: str) -> None:
    """A new execution under the run's id whose result punctual's converter cannot decode
    (as if a worker with its own payload codec had taken the id)."""

    async def run() -> None:
        converter = dataclasses.replace(DataConverter.default, payload_codec=SealingCodec())
        client = await Client.connect(address, namespace="default", data_converter=converter)
        queue = f"sealed-{uuid.uuid4().hex[:8]}"
        async with Worker(
            client,
            task_queue=queue,
            workflows=[SealedResult],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            await client.execute_workflow(
                SealedResult.run,
                id=run_id,
                task_queue=queue,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            )

    asyncio.run(run())


def completed_then_forgotten(h: Harness, count: int) -> list[str]:
    """Runs that completed in Temporal whose outcome the store lost (the sync must bring it)."""
    assert h.temporal_address is not None
    run_ids = [h.dispatch("count", {}) for _ in range(count)]
    for run_id in run_ids:
        h.wait(run_id, finished)
        assert wait_temporal_status(h.temporal_address, run_id, "COMPLETED") == "COMPLETED"
        forget_outcome(h, run_id)
    return run_ids


def test_the_sync_ends_an_undecodable_outcome_alone_and_syncs_the_rest_of_the_page(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    before, sealed, after = completed_then_forgotten(h, 3)
    assert h.temporal_address is not None
    replace_with_sealed_execution(h.temporal_address, sealed)
    assert isinstance(h.engine, TemporalEngine)

    with caplog.at_level(logging.DEBUG):
        report = sync_runs(h.services, h.engine)  # one page holds all three

    assert report.undecodable == [sealed]
    assert set(report.finished) == {before, sealed, after}
    assert h.run(before).state is h.run(after).state is RunState.COMPLETED
    lost = h.run(sealed)
    assert lost.state is RunState.FAILED
    assert lost.result is None
    assert lost.error is not None
    assert lost.error["code"] == "engine_execution_lost"
    assert "cannot be decoded" in lost.error["message"]
    assert "test-sealed" not in lost.error["message"]  # the exception's text is not kept
    assert "test-sealed" not in caplog.text
    assert f"run={sealed}" in caplog.text
    # Recorded once: the next pass has nothing left to do for it.
    assert sync_runs(h.services, h.engine).finished == []


class RaisingLedger(StoreRunLedger):
    """Recording the outcome of some runs raises an exception whose text quotes a value."""

    def __init__(self, store: Any, failing: set[str]) -> None:
        super().__init__(store)
        self.failing = failing

    def finish(self, run_id: str, *rest: Any) -> bool:
        if run_id in self.failing:
            raise ValueError("unexpected value 's3cret-of-the-input'")
        return super().finish(run_id, *rest)


def test_the_sync_leaves_a_record_whose_handling_raises_and_syncs_the_others(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    before, raising, after = completed_then_forgotten(h, 3)
    assert isinstance(h.engine, TemporalEngine)
    ledger = RaisingLedger(h.system.store, {raising})

    with caplog.at_level(logging.DEBUG):
        report = sync_runs(h.services, h.engine, ledger=ledger)

    assert report.skipped == [raising]
    assert set(report.finished) == {before, after}
    assert h.run(before).state is h.run(after).state is RunState.COMPLETED
    assert h.run(raising).state is RunState.RUNNING  # left for the next pass
    assert "s3cret" not in caplog.text
    assert f"run={raising} error_type=ValueError" in caplog.text
    assert sync_runs(h.services, h.engine).finished == [raising]  # the next pass, healed
    assert h.run(raising).state is RunState.COMPLETED


def test_the_sync_leaves_a_run_it_cannot_observe_and_syncs_the_others(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    before, unobservable, after = completed_then_forgotten(h, 3)
    engine = h.engine
    assert isinstance(engine, TemporalEngine)
    observe_one = engine._observe_one

    async def failing_for_one(client: Client, run_id: str) -> Any:
        if run_id == unobservable:  # a defect, not an outage: no reach error
            raise LookupError("no 's3cret-of-the-result' here")
        return await observe_one(client, run_id)

    monkeypatch.setattr(engine, "_observe_one", failing_for_one)
    with caplog.at_level(logging.DEBUG):
        report = sync_runs(h.services, engine)

    assert report.skipped == [unobservable]
    assert set(report.finished) == {before, after}
    assert h.run(unobservable).state is RunState.RUNNING  # left for the next pass
    assert "s3cret" not in caplog.text
    assert f"run={unobservable} error_type=LookupError" in caplog.text
    monkeypatch.undo()
    assert sync_runs(h.services, engine).finished == [unobservable]


def attempt_times(h: Harness, run_id: str) -> tuple[datetime | None, datetime | None]:
    run = h.run(run_id)
    return run.claimed_at, run.started_at


def test_a_retried_attempt_moves_claimed_at_and_started_at(harness: Harness) -> None:
    h = harness
    run_id = h.dispatch("stubborn", {"seconds": 1.5})
    h.wait_for_mark(f"{run_id}.tick")
    deadline = time.monotonic() + 5
    while attempt_times(h, run_id)[1] is None:  # recorded just after the body began
        assert time.monotonic() < deadline, "started_at of attempt 1 was never recorded"
        time.sleep(0.05)
    first_claimed, first_started = attempt_times(h, run_id)
    assert first_claimed is not None and first_started is not None
    assert first_claimed <= first_started
    h.stop_worker()  # no grace: the body is killed mid-way
    h.worker_up()

    run = h.wait(run_id, finished, timeout=30)

    assert run.state is RunState.COMPLETED, run
    assert run.attempts == 2
    assert run.claimed_at is not None and run.started_at is not None
    assert run.claimed_at > first_started  # attempt 2 was taken after attempt 1 began
    assert run.claimed_at <= run.started_at
    assert run.started_at > first_started
    assert run.ended_at is not None and run.started_at <= run.ended_at
