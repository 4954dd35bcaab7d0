"""Dispatch against a real Temporal dev server: no ghost execution wins (FT-5, issue 11).

* Temporal accepted a start but the engine call failed, so dispatch released the claim: the
  execution left behind stops waiting as soon as it reads its start back in ``scheduled``,
  and the next dispatch replaces it, so the body really runs, once.
* A cancel that wins while dispatch is inside the Temporal start makes the dispatch
  withdraw the execution it started.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from punctual.ports.engine import EngineUnavailable, RunOrder
from punctual.usecases.scheduled import starts
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.contract.test_engine_contract import (
    ADMIN,
    TENANT,
    Harness,
    finished,
    harness,
    settle_executions,
    temporal_executions,
)

__all__ = ["harness"]

pytestmark = pytest.mark.temporal


class AcceptedThenFailed:
    """Temporal accepts the starts, then the call fails as a lost connection would."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.loaded = inner.loaded
        self.on_recorded = inner.on_recorded

    def start(self, orders: Sequence[RunOrder]) -> None:
        self.inner.start(orders)
        raise EngineUnavailable("the connection dropped after Temporal accepted the batch")


def _run_id(h: Harness, start_id: str) -> str:
    with h.system.store.transaction(readonly=True) as tx:
        start = tx.starts.get(TENANT, start_id)
    assert start is not None
    return start.run_id


def _closed(address: str, run_id: str, count: int, timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = temporal_executions(address, run_id)
        if len(found) >= count and all(e.status.name != "RUNNING" for e in found):
            return found
        assert time.monotonic() < deadline, f"executions of {run_id} still waiting: {found}"
        time.sleep(0.2)


@pytest.mark.parametrize("harness", ["temporal"], indirect=True)
def test_after_a_release_the_next_dispatch_really_runs_the_body(harness: Harness) -> None:
    h = harness
    assert h.temporal_address is not None
    start_id = h.create_start("count", {})
    run_id = _run_id(h, start_id)
    failing = dataclasses.replace(h.services, engine=AcceptedThenFailed(h.engine))
    with pytest.raises(EngineUnavailable):
        dispatch_due(failing, "runner-a", 10)
    with h.system.store.transaction(readonly=True) as tx:
        released = tx.starts.get(TENANT, start_id)
    assert released is not None and released.version == 1

    # The leftover execution reads its start back in "scheduled" and stops waiting.
    [ghost] = _closed(h.temporal_address, run_id, 1, timeout=20)
    assert ghost.status.name == "FAILED"

    report = dispatch_due(h.services, "runner-a", 10)
    assert report.dispatched == [start_id]
    run = h.wait(run_id, finished, timeout=30)
    assert run.state.value == "completed", run
    assert h.body_runs(run_id) == 1
    executions = settle_executions(h.temporal_address, run_id)
    assert sorted(e.status.name for e in executions) == ["COMPLETED", "FAILED"]


class CancelDuringStart:
    """Starts in Temporal, then lets a cancel of the start win before dispatch records."""

    def __init__(self, h: Harness, start_id: str) -> None:
        self.inner = h.engine
        self.name = h.engine.name
        self.loaded = h.engine.loaded
        self.on_recorded = h.engine.on_recorded
        self.terminate = h.engine.terminate
        self._h = h
        self._start_id = start_id
        self.answers: list[Any] = []

    def start(self, orders: Sequence[RunOrder]) -> None:
        self.inner.start(orders)
        h = self._h
        cancel = starts.cancel(h.services, ADMIN, starts.CancelStart(self._start_id, 1))
        thread = threading.Thread(
            target=lambda: self.answers.append(h.system.mutations.run(None, cancel))
        )
        thread.start()
        thread.join(10)


@pytest.mark.parametrize("harness", ["temporal"], indirect=True)
def test_a_cancel_that_wins_during_the_temporal_start_ends_that_execution(
    harness: Harness,
) -> None:
    h = harness
    assert h.temporal_address is not None
    start_id = h.create_start("count", {"seconds": 5.0})
    run_id = _run_id(h, start_id)
    engine = CancelDuringStart(h, start_id)

    report = dispatch_due(dataclasses.replace(h.services, engine=engine), "runner-a", 10)

    [answer] = engine.answers
    assert (answer.status, answer.body["state"]) == (200, "canceled")
    assert report.dispatched == [] and report.lost == 1
    [execution] = _closed(h.temporal_address, run_id, 1, timeout=10)
    assert execution.status.name in ("TERMINATED", "FAILED")
    with h.system.store.transaction(readonly=True) as tx:
        assert tx.runs.get(TENANT, run_id) is None
    assert h.body_runs(run_id) == 0


class ConvergedOnTheLeftover:
    """A re-dispatch whose start met the leftover execution (still open, about to give up)
    and so started nothing new: what ``USE_EXISTING`` does in that window."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.loaded = inner.loaded
        self.on_recorded = inner.on_recorded

    def start(self, orders: Sequence[RunOrder]) -> None:
        del orders


@pytest.mark.parametrize("harness", ["temporal"], indirect=True)
def test_a_run_recorded_just_after_its_leftover_gave_up_is_started_anew(
    harness: Harness,
) -> None:
    """The narrow window of a ghost: the leftover execution decided to give up, the next
    dispatch converged on it and recorded the run, then the leftover failed. The body
    never ran, so the sync starts the run anew instead of ending it as lost."""
    from punctual.worker.temporal.sync import sync_runs

    h = harness
    assert h.temporal_address is not None
    start_id = h.create_start("count", {})
    run_id = _run_id(h, start_id)
    failing = dataclasses.replace(h.services, engine=AcceptedThenFailed(h.engine))
    with pytest.raises(EngineUnavailable):
        dispatch_due(failing, "runner-a", 10)
    [ghost] = _closed(h.temporal_address, run_id, 1, timeout=20)
    assert ghost.status.name == "FAILED"
    converged = dataclasses.replace(h.services, engine=ConvergedOnTheLeftover(h.engine))
    assert dispatch_due(converged, "runner-b", 10).dispatched == [start_id]

    sync_runs(h.services, h.engine)

    run = h.wait(run_id, finished, timeout=30)
    assert run.state.value == "completed", run
    assert h.body_runs(run_id) == 1
