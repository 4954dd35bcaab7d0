"""The local worker never loses an outcome it should record: a fenced attempt's stop
never swallows the next attempt's outcome, and a transient store error is retried, never
taken for a refusal (FT-2, FT-3)."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.executor import Outcome
from punctual.domain.runs import RunState
from punctual.ports.doorbell import Doorbell
from punctual.ports.records import ClaimedRun, EncryptedInput
from punctual.usecases.running import execution
from punctual.worker.local import LocalWorker, WorkerOptions
from punctual.workflows import load_app
from tests.integration.test_worker_faults import (
    APP_REF,
    get_run,
    insert_run,
    start_worker,
    system,
    wait_finished,
)

__all__ = ["system"]  # the fixture, shared with the worker fault tests


class _PoolStub:
    """Stands for the slot pool: a body of ``run_r`` is executing, and terminate queues its
    outcome for later delivery, as the real monitor does."""

    def __init__(self) -> None:
        self.executing = {"run_r"}

    def running(self) -> set[str]:
        return set(self.executing)

    def terminate(self, run_id: str) -> None:
        self.executing.discard(run_id)


def _claimed(attempt: int) -> ClaimedRun:
    return ClaimedRun(
        id="run_r",
        tenant="acme",
        workflow="counted",
        definition_version="1",
        origin={},
        attempt=attempt,
        input=EncryptedInput("k1", b""),
        timeout_seconds=5,
        claim_token=f"wrk_test/{attempt}",
    )


def test_a_fenced_attempt_never_swallows_the_next_attempts_outcome(
    system: bootstrap.Punctual,
) -> None:
    """The run came back to this worker as attempt 2 while attempt 1's body still ran: the
    new attempt's outcome may arrive before the old body's stop, and must be recorded."""
    worker = LocalWorker(
        system.services, load_app(APP_REF), WorkerOptions(APP_REF, ["standard"]), Doorbell()
    )
    worker._pool = _PoolStub()  # type: ignore[assignment]
    old, new = _claimed(1), _claimed(2)
    worker._running["run_r"] = old
    worker._fence(old.claim, "claimed_again")  # what a claim of attempt 2 does first
    worker._running["run_r"] = new

    worker._finished(Outcome("run_r", "completed", {"ok": 2}, None, 2))
    worker._finished(Outcome("run_r", "terminated", None, None, 1))

    assert [(run.attempt, outcome.state) for run, outcome in worker._outcomes] == [(2, "completed")]


def test_a_transient_store_error_keeps_the_outcome_until_it_is_recorded(
    system: bootstrap.Punctual, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deadlock or statement timeout while recording is no refusal: the real result is
    recorded once the store answers (it used to become ``result_not_storable``)."""
    real = execution.finish_runs
    failures = threading.Semaphore(3)

    def deadlocking(services: Any, worker_id: str, finished: Any) -> list[bool]:
        if any(f.state is RunState.COMPLETED for f in finished) and failures.acquire(
            blocking=False
        ):
            with services.store.transaction() as tx:
                del tx
                raise sa.exc.OperationalError("UPDATE runs", {}, Exception("deadlock detected"))
        return real(services, worker_id, finished)

    monkeypatch.setattr(execution, "finish_runs", deadlocking)
    start_worker(system)
    marker = tmp_path / "ran.txt"
    run = wait_finished(system, insert_run(system, "counted", {"file": str(marker)}))
    assert (run.state, run.attempts, run.error) == (RunState.COMPLETED, 1, None)
    assert marker.read_text().count("\n") == 1, "the body ran once"


def test_an_outcome_carries_its_body_start_or_keeps_the_one_recorded(
    system: bootstrap.Punctual,
) -> None:
    """A short body's start is recorded with its outcome, in the same statement; an
    outcome without one keeps the start recorded on its own while the body ran."""
    services = system.services
    folded, alone = insert_run(system, "echo"), insert_run(system, "echo")
    work = execution.claim_runs(services, "wrk_test", ["standard"], [("echo", "1")], 10)
    claimed = {item.run.id: item.run for item in work}
    assert set(claimed) == {folded, alone}
    now = services.clock.now()
    began_alone, began_folded = now - timedelta(seconds=3), now - timedelta(seconds=1)
    execution.mark_started(services, [(claimed[alone].claim, began_alone)])
    recorded = execution.finish_runs(
        services,
        "wrk_test",
        [
            execution.Finished(claimed[folded], RunState.COMPLETED, {}, None, began_folded),
            execution.Finished(claimed[alone], RunState.COMPLETED, {}, None),
        ],
    )
    assert recorded == [True, True]
    assert get_run(system, folded).started_at == began_folded
    assert get_run(system, alone).started_at == began_alone
