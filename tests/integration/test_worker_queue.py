"""The local worker with queued slots (docs/decisions/0005), on both stores: runs queued
behind a body that hangs and is then terminated go back uncharged and each run once;
a worker claims many runs in one claim and records them in batches."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from punctual import bootstrap
from punctual.domain.runs import RunState
from punctual.ports.records import RunClaim
from punctual.usecases.kernel.context import Services
from punctual.usecases.running import execution
from punctual.worker.local import LocalWorker
from tests.integration.test_worker_faults import (
    APP_REF,
    TENANT,
    get_run,
    insert_run,
    lines,
    start_worker,
    system,
    wait_finished,
    wait_until,
)

__all__ = ["system"]  # the fixture, shared with the worker fault tests


def test_runs_queued_behind_a_terminated_body_each_run_once_uncharged(
    system: bootstrap.Punctual, tmp_path: Path
) -> None:
    hung = insert_run(system, "hang", {})
    files = [tmp_path / f"{i}.txt" for i in range(5)]
    counted = [insert_run(system, "counted", {"file": str(file)}) for file in files]
    worker = system.start_worker(APP_REF, slots=1)
    assert isinstance(worker, LocalWorker)
    wait_until(lambda: hung in worker.executing(), what="the hung body runs")
    wait_until(lambda: get_run(system, hung).started_at is not None, what="its start recorded")
    with system.store.transaction() as tx:
        tx.runs.terminate(TENANT, hung, system.services.clock.now(), "terminated by a test")
    assert wait_finished(system, hung).state is RunState.TERMINATED
    for i, run_id in enumerate(counted):
        run = wait_finished(system, run_id)
        assert (run.state, run.attempts) == (RunState.COMPLETED, 1), run
        assert lines(files[i]) == 1, "each body ran once"


def test_a_burst_is_claimed_many_runs_a_claim_and_each_run_once(
    system: bootstrap.Punctual, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs a slot takes back before their body began (queued behind a body that began
    late, as on a loaded machine) are given back and claimed again: what holds however
    many that are is that every run is claimed once more than it is given back."""
    runs = [insert_run(system, "echo", {"message": f"m{i}"}) for i in range(200)]
    claim_sizes: list[int] = []
    claimed: Counter[str] = Counter()
    given_back: Counter[str] = Counter()
    real_claim = execution.claim_runs
    real_give_back = execution.give_back

    def counting(*args: Any) -> list[execution.ClaimedWork]:
        work = real_claim(*args)
        if work:
            claim_sizes.append(len(work))
            claimed.update(item.run.id for item in work)
        return work

    def counting_give_back(services: Services, claims: Sequence[RunClaim]) -> None:
        real_give_back(services, claims)
        given_back.update(claim.run_id for claim in claims)

    monkeypatch.setattr(execution, "claim_runs", counting)
    monkeypatch.setattr(execution, "give_back", counting_give_back)
    start_worker(system)  # two slots
    for i, run_id in enumerate(runs):
        run = wait_finished(system, run_id)
        assert (run.state, run.result, run.attempts) == (
            RunState.COMPLETED,
            {"message": f"m{i}"},
            1,
        )
        assert run.claimed_at is not None and run.started_at is not None
    assert set(claimed) == set(runs)
    kept = {run_id: claimed[run_id] - given_back[run_id] for run_id in runs}
    assert kept == dict.fromkeys(runs, 1), "each run is claimed once beyond its give-backs"
    assert max(claim_sizes) > 2, f"a claim takes more runs than there are slots: {claim_sizes}"


def test_while_slots_drain_fast_a_claim_takes_more_than_they_hold(
    system: bootstrap.Punctual, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim asks for what the slots have room for and what they finished just before:
    the runs they cannot take yet wait in the worker's ready queue, so a burst takes
    fewer, larger claims. Each run still runs once, on its first attempt."""
    runs = [insert_run(system, "echo", {"message": f"m{i}"}) for i in range(400)]
    claim_sizes: list[int] = []
    real_claim = execution.claim_runs

    def counting(*args: Any) -> list[execution.ClaimedWork]:
        work = real_claim(*args)
        if work:
            claim_sizes.append(len(work))
        return work

    monkeypatch.setattr(execution, "claim_runs", counting)
    worker = start_worker(system)  # two slots
    capacity = 2 * 16  # slots x the local worker's queue depth
    for i, run_id in enumerate(runs):
        run = wait_finished(system, run_id, timeout=60)
        assert (run.state, run.result, run.attempts) == (
            RunState.COMPLETED,
            {"message": f"m{i}"},
            1,
        )
    assert max(claim_sizes) > capacity, f"no claim beyond the slots' room: {claim_sizes}"
    worker.stop()


def test_a_run_ended_while_it_waits_to_be_handed_to_a_slot_never_begins(
    system: bootstrap.Punctual, tmp_path: Path
) -> None:
    """Fast bodies, then one that hangs and holds the only slot, then runs that wait
    behind it: one of those is terminated in the store while it waits (in the worker's
    ready queue or back in the table). Its body never runs; the others run once."""
    for i in range(60):
        insert_run(system, "echo", {"message": f"warm {i}"})
    hung = insert_run(system, "hang", {})
    files = [tmp_path / f"{i}.txt" for i in range(4)]
    waiting = [insert_run(system, "counted", {"file": str(file)}) for file in files]
    worker = system.start_worker(APP_REF, slots=1)
    assert isinstance(worker, LocalWorker)
    wait_until(lambda: hung in worker.executing(), what="the hung body runs")
    with system.store.transaction() as tx:
        tx.runs.terminate(TENANT, waiting[0], system.services.clock.now(), "by a test")
    time.sleep(0.6)  # past a flag check and a ready run's longest wait
    with system.store.transaction() as tx:
        tx.runs.terminate(TENANT, hung, system.services.clock.now(), "by a test")
    assert wait_finished(system, hung).state is RunState.TERMINATED
    for run_id, file in zip(waiting[1:], files[1:], strict=True):
        run = wait_finished(system, run_id)
        assert (run.state, run.attempts) == (RunState.COMPLETED, 1), run
        assert lines(file) == 1, "each body ran once"
    assert get_run(system, waiting[0]).state is RunState.TERMINATED
    assert lines(files[0]) == 0, "the run ended while it waited never began"
    worker.stop()


def test_runs_of_a_slow_claim_still_run_once(
    system: bootstrap.Punctual, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim that takes longer than a ready run may wait (a slow store): its runs are
    handed to the slots that have room, not given back as stale the moment they arrive."""
    runs = [insert_run(system, "echo", {"message": f"m{i}"}) for i in range(10)]
    real_claim = execution.claim_runs

    def slow(*args: Any) -> list[execution.ClaimedWork]:
        work = real_claim(*args)
        time.sleep(0.6)
        return work

    monkeypatch.setattr(execution, "claim_runs", slow)
    worker = start_worker(system)
    for run_id in runs:
        run = wait_finished(system, run_id, timeout=30)
        assert (run.state, run.attempts) == (RunState.COMPLETED, 1), run
    worker.stop()
