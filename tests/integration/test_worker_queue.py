"""The local worker with queued slots (docs/decisions/0005), on both stores: runs queued
behind a body that hangs and is then terminated go back uncharged and each run once;
a worker claims many runs in one claim and records them in batches."""

from __future__ import annotations

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
