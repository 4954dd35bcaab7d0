"""OS-7: dispatch, reschedule and cancel of one start race through one arbiter.

Each round creates a start that is due now, then releases a dispatch pass, a cancel and
a reschedule at the same instant from separate threads (separate connections). Exactly
one of them may own version 1; a canceled start never gets a run.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from punctual import bootstrap
from punctual.domain.permissions import Principal, Role
from punctual.errors import Conflict
from punctual.usecases.kernel.idempotency import Outcome
from punctual.usecases.scheduled import starts
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.support.api import enroll, register_demo

ROUNDS = 40
ALICE = Principal("acme", "alice", Role.MEMBER)


def _create_due(system: bootstrap.Punctual) -> dict[str, Any]:
    command = starts.CreateStart(
        workflow="echo",
        input={"message": "race"},
        business_request_id="race",
        start_at=datetime.now(UTC) - timedelta(seconds=1),
        workload_class="standard",
    )
    outcome = system.mutations.run(None, starts.create(system.services, ALICE, command))
    body: dict[str, Any] = outcome.body
    return body


def _race(actions: list[Callable[[], Any]]) -> list[Any]:
    barrier = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = actions[index]()
        except Exception as exc:  # collected and asserted on below
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


@pytest.mark.slow
def test_exactly_one_outcome_owns_each_version(system: bootstrap.Punctual) -> None:
    register_demo(system)
    enroll(system, ALICE)
    # Pretend a worker has everything loaded, so a claim turns into a run.
    system.services.engine.loaded = lambda: {("echo", "1", "x")}  # type: ignore[method-assign]
    winners: dict[str, int] = {"dispatch": 0, "cancel": 0, "reschedule": 0}
    rng = random.Random(7)
    for _ in range(ROUNDS):
        start = _create_due(system)
        later = datetime.now(UTC) + timedelta(hours=1)
        cancel = starts.cancel(system.services, ALICE, starts.CancelStart(start["id"], 1))
        move = starts.reschedule(
            system.services, ALICE, starts.RescheduleStart(start["id"], 1, later)
        )
        actions: dict[str, Callable[[], Any]] = {
            "dispatch": lambda: dispatch_due(system.services, "racer", 10),
            "cancel": lambda cancel=cancel: system.mutations.run(None, cancel),
            "reschedule": lambda move=move: system.mutations.run(None, move),
        }
        # Start the threads in a different order each round so no contender is favoured.
        order = rng.sample(list(actions), k=len(actions))
        results = dict(zip(order, _race([actions[name] for name in order]), strict=True))
        dispatched, canceled, moved = results["dispatch"], results["cancel"], results["reschedule"]
        assert not isinstance(dispatched, Exception), dispatched
        for outcome in (canceled, moved):
            assert isinstance(outcome, (Outcome, Conflict)), outcome
        owners = [
            name
            for name, won in (
                ("dispatch", start["id"] in dispatched.dispatched),
                ("cancel", isinstance(canceled, Outcome)),
                ("reschedule", isinstance(moved, Outcome)),
            )
            if won
        ]
        assert len(owners) == 1, f"version 1 of {start['id']} had owners {owners}"
        winners[owners[0]] += 1
        with system.store.transaction(readonly=True) as tx:
            latest = tx.starts.get("acme", start["id"])
            assert latest is not None
            run = tx.runs.get("acme", latest.run_id)
        if owners == ["dispatch"]:
            assert latest.state.value == "dispatched" and run is not None
        else:
            assert run is None, f"{owners[0]} won but a run exists for {start['id']}"
            assert latest.state.value == ("canceled" if owners == ["cancel"] else "scheduled")
    # Every kind of winner showed up at least once, or the race never really happened.
    assert sum(winners.values()) == ROUNDS
    assert sum(1 for count in winners.values() if count) >= 2, winners
