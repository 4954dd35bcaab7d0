"""Run cancel and terminate under faults, on both stores (FT-5, FT-6).

* FT-6: the store change comes first. With the engine down, cancel and terminate are
  still recorded and answered at once; the engine call follows after the commit and its
  failure changes nothing recorded (the runner sends it again).
* FT-5: a run id that a start still being dispatched has allocated (no run row yet)
  answers ``202 in_progress``, which is never recorded under the idempotency key, so the
  same request retried once the run exists takes effect.

The engine is the real local engine behind a switch that answers cancel and terminate as
an unreachable engine does.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from punctual import bootstrap
from punctual.adapters.engines.local.engine import LocalEngine
from punctual.domain.permissions import Principal, Role
from punctual.domain.starts import StartState
from punctual.ports.engine import EngineUnavailable
from punctual.usecases.kernel.idempotency import IdempotentRequest
from punctual.usecases.running import runs
from punctual.usecases.scheduled import starts
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.conftest import make_settings
from tests.support.api import enroll, live_worker

ALICE = Principal("acme", "alice", Role.MEMBER)
BOB = Principal("acme", "bob", Role.MEMBER)


class DownForSignals:
    """The local engine, except that cancel and terminate fail like a lost engine."""

    def __init__(self, inner: LocalEngine) -> None:
        self.inner = inner
        self.name = inner.name
        self.start = inner.start
        self.on_recorded = inner.on_recorded
        self.available = inner.available
        self.loaded = inner.loaded
        self.calls: list[str] = []
        self.called = threading.Event()

    def _down(self, what: str, run_id: str) -> None:
        self.calls.append(f"{what} {run_id}")
        self.called.set()
        raise EngineUnavailable("connection refused (switched off by the test)")

    def cancel(self, tenant: str, run_id: str) -> None:
        self._down("cancel", run_id)

    def terminate(self, tenant: str, run_id: str) -> None:
        self._down("terminate", run_id)


@pytest.fixture
def system(database_url: str, tmp_path: Path) -> Iterator[bootstrap.Punctual]:
    built = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        live_worker(built)
        yield built
    finally:
        built.close()


def create_due(system: bootstrap.Punctual, n: int = 0) -> str:
    enroll(system, ALICE, BOB)
    command = starts.CreateStart(
        workflow="echo",
        input={"message": f"m{n}"},
        business_request_id=f"run-ops-{n}",
        start_at=datetime.now(UTC) - timedelta(seconds=1),
        workload_class="standard",
    )
    start_id: str = system.mutations.run(None, starts.create(system.services, ALICE, command)).body[
        "id"
    ]
    return start_id


def run_id_of(system: bootstrap.Punctual, start_id: str) -> str:
    with system.store.transaction(readonly=True) as tx:
        start = tx.starts.get("acme", start_id)
    assert start is not None
    return start.run_id


def dispatched_run(system: bootstrap.Punctual) -> str:
    start_id = create_due(system)
    assert dispatch_due(system.services, "test-runner", 10).dispatched == [start_id]
    return run_id_of(system, start_id)


@pytest.mark.parametrize("operation", ["cancel", "terminate"])
def test_run_operations_are_recorded_while_the_engine_is_down(
    system: bootstrap.Punctual, operation: str
) -> None:
    run_id = dispatched_run(system)
    engine = DownForSignals(system.engine)  # type: ignore[arg-type]
    system.services.engine = engine  # type: ignore[assignment]
    mutation = getattr(runs, operation)(system.services, ALICE, run_id)

    outcome = system.mutations.run(None, mutation)

    assert outcome.status == 200
    expected = "terminated" if operation == "terminate" else "canceled"
    assert outcome.body["state"] == expected  # a pending, unclaimed run ends at once
    assert runs.get(system.services, ALICE, run_id)["state"] == expected
    # The engine was told after the commit, and its failure changed nothing recorded.
    assert engine.called.wait(5), "the engine was never told"
    assert engine.calls == [f"{operation} {run_id}"]
    assert runs.get(system.services, ALICE, run_id)["state"] == expected


@pytest.mark.parametrize("operation", ["cancel", "terminate"])
def test_a_run_id_of_a_dispatching_start_answers_in_progress_and_is_not_recorded(
    system: bootstrap.Punctual, operation: str
) -> None:
    start_id = create_due(system)
    run_id = run_id_of(system, start_id)
    now = datetime.now(UTC)
    with system.store.transaction() as tx:  # a runner claimed it and is dispatching it
        claimed = tx.starts.claim_due(now, 10, "slow-runner", 1)
    assert [c.id for c in claimed] == [start_id]
    with system.store.transaction(readonly=True) as tx:
        start = tx.starts.get("acme", start_id)
    assert start is not None
    assert start.state is StartState.DISPATCHING

    request = IdempotentRequest("acme", ALICE.subject, f"{operation}-1", f"{operation}:{run_id}")
    first = system.mutations.run(request, getattr(runs, operation)(system.services, ALICE, run_id))
    assert (first.status, first.body) == (202, {"status": "in_progress"})
    with system.store.transaction(readonly=True) as tx:
        record = tx.idempotency.get("acme", ALICE.subject, f"{operation}-1")
    assert record is None or record.state != "done", "202 in_progress was recorded"

    # Another member may not act on Alice's start's run, dispatched or not.
    with pytest.raises(Exception) as refused:
        system.mutations.run(None, getattr(runs, operation)(system.services, BOB, run_id))
    assert getattr(refused.value, "code", None) == "forbidden"

    # The slow runner's claim runs out; a runner dispatches the start; the same request
    # retried with the same key now acts on the run.
    deadline = datetime.now(UTC) + timedelta(seconds=10)
    while not dispatch_due(system.services, "test-runner", 10).dispatched:
        assert datetime.now(UTC) < deadline, "the start was never dispatched again"
    again = system.mutations.run(request, getattr(runs, operation)(system.services, ALICE, run_id))
    assert again.status == 200
    assert not again.replayed
    expected = "terminated" if operation == "terminate" else "canceled"
    assert again.body["state"] == expected
