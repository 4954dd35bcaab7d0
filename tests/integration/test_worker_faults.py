"""Faults on the local worker, on both stores: one bad run never stops the others (FT-1),
a claim that is no longer the worker's stops its body (FT-2), outcomes the store refuses
never re-execute a body (FT-3), a failed hand-off never leaves a run ``running`` (WF-7).

Runs are written straight into the store (as dispatch would) and executed by a real
worker with child processes; leases are 2 s and heartbeats 0.5 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.domain.ids import new_id
from punctual.domain.runs import Run, RunState
from punctual.errors import Unavailable
from punctual.ports.records import EncryptedInput, NewRun, RunClaim
from punctual.usecases.running import execution
from punctual.worker.local import LocalWorker
from tests.conftest import make_settings
from tests.integration.worker_app import NUL_RESULT

APP_REF = "tests.integration.worker_app:app"
TENANT = "acme"
LEASE_SECONDS = 2.0


def _system(database_url: str, tmp_path: Path, lease_seconds: float) -> bootstrap.Punctual:
    return bootstrap.build(
        make_settings(
            database_url,
            tmp_path,
            worker={"heartbeat_seconds": 0.5, "liveness_seconds": 10},
            runner={"lease_seconds": lease_seconds, "max_idle_seconds": 0.2},
        )
    )


@pytest.fixture
def system(database_url: str, tmp_path: Path) -> Iterator[bootstrap.Punctual]:
    built = _system(database_url, tmp_path, LEASE_SECONDS)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def steady(database_url: str, tmp_path: Path) -> Iterator[bootstrap.Punctual]:
    """For tests about something else than leases: a lease a loaded machine cannot let run
    out between two renewals (with 2 s, a late heartbeat fences a body, and no runner here
    gives its run back)."""
    built = _system(database_url, tmp_path, 30.0)
    try:
        yield built
    finally:
        built.close()


def start_worker(system: bootstrap.Punctual) -> LocalWorker:
    worker = system.start_worker(APP_REF, slots=2)
    assert isinstance(worker, LocalWorker)
    return worker


def insert_run(
    system: bootstrap.Punctual,
    workflow: str,
    payload: Any = None,
    *,
    timeout_seconds: float = 60.0,
    sealed: EncryptedInput | None = None,
) -> str:
    run = NewRun(
        id=new_id("run"),
        tenant=TENANT,
        workflow=workflow,
        definition_version="1",
        artifact="test",
        origin={"source": "scheduled_start", "id": new_id("st")},
        started_by="alice",
        input=sealed or system.services.codec.encrypt(payload or {}, TENANT),
        task_queue="standard",
        priority=3,
        traceparent=None,
        timeout_seconds=timeout_seconds,
    )
    with system.store.transaction() as tx:
        tx.runs.insert_new([run], system.services.clock.now())
    return run.id


def get_run(system: bootstrap.Punctual, run_id: str) -> Run:
    with system.store.transaction(readonly=True) as tx:
        run = tx.runs.get(TENANT, run_id)
    assert run is not None
    return run


def wait_until(check: Callable[[], bool], timeout: float = 15, what: str = "") -> float:
    """Seconds it took for ``check`` to hold; fails after ``timeout``."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)
    return time.monotonic() - began


def wait_finished(system: bootstrap.Punctual, run_id: str, timeout: float = 15) -> Run:
    wait_until(lambda: get_run(system, run_id).finished, timeout, f"run {run_id} ends")
    return get_run(system, run_id)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


# ---------------------------------------------------------------------------- FT-1


def test_an_undecryptable_input_fails_its_run_alone(system: bootstrap.Punctual) -> None:
    """Scenario 2: the claim used to decrypt the whole batch after committing it, so one
    damaged ciphertext orphaned every run of the batch."""
    first = insert_run(system, "echo", {"message": "one"})
    good = system.services.codec.encrypt({"message": "two"}, TENANT)
    damaged = replace(good, ciphertext=good.ciphertext[:-1] + bytes([good.ciphertext[-1] ^ 1]))
    bad = insert_run(system, "echo", sealed=damaged)
    last = insert_run(system, "echo", {"message": "three"})
    foreign = insert_run(system, "echo", sealed=EncryptedInput("k-elsewhere", b"\x00" * 40))

    work = execution.claim_runs(system.services, "wrk-test", ["standard"], [("echo", "1")], 10)

    assert [(w.run.id, w.payload) for w in work] == [
        (first, {"message": "one"}),
        (last, {"message": "three"}),
    ]
    failed = get_run(system, bad)
    assert (failed.state, failed.attempts) == (RunState.FAILED, 1)
    assert failed.error is not None and failed.error["code"] == "input_undecryptable"
    with system.store.transaction(readonly=True) as tx:
        findings = tx.findings.find(TENANT)
    assert [(f.kind, f.subject_id) for f in findings] == [("run_failed", bad)]
    # A key this worker does not hold: left for a worker that holds it, nothing charged.
    waiting = get_run(system, foreign)
    assert (waiting.state, waiting.attempts) == (RunState.PENDING, 0)


# ---------------------------------------------------------------------------- FT-2


def _body_started(path: Path) -> Callable[[], bool]:
    return lambda: lines(path) == 1


def test_a_body_stops_when_another_worker_claimed_its_run(
    system: bootstrap.Punctual, tmp_path: Path
) -> None:
    """Scenario 4: after a re-queue and a re-claim elsewhere the old body ran on."""
    worker = start_worker(system)
    marker = tmp_path / "ran.txt"
    run_id = insert_run(system, "counted", {"file": str(marker), "seconds": 60})
    wait_until(_body_started(marker), what="the body starts")
    # The body's start is recorded by the recorder thread, a moment after the body began.
    wait_until(lambda: get_run(system, run_id).started_at is not None, 5, "started_at")
    assert get_run(system, run_id).claimed_at is not None
    with system.store.engine.begin() as conn:  # another worker took the run over
        conn.execute(
            sa.update(t.runs)
            .where(t.runs.c.id == run_id)
            .values(claimed_by="wrk_other", claim_token="wrk_other/2", attempts=2)
        )
    took = wait_until(lambda: run_id not in worker.executing(), 5, "the old body stops")
    assert took < 2
    time.sleep(0.6)  # a heartbeat: nothing of the old claim is recorded
    with system.store.transaction(readonly=True) as tx:
        [flags] = tx.runs.flags([run_id])
    assert (flags.state, flags.claim_token) == ("running", "wrk_other/2")


def test_a_worker_that_cannot_renew_stops_the_body_before_the_lease_ends(
    system: bootstrap.Punctual, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = start_worker(system)
    marker = tmp_path / "ran.txt"
    run_id = insert_run(system, "counted", {"file": str(marker), "seconds": 60})
    wait_until(_body_started(marker), what="the body starts")
    token = get_run(system, run_id).attempts

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise Unavailable("the test's partition", code="store_unavailable")

    monkeypatch.setattr(execution, "heartbeat", unreachable)
    monkeypatch.setattr(execution, "run_flags", unreachable)
    took = wait_until(lambda: run_id not in worker.executing(), 5, "the body stops itself")
    assert took < LEASE_SECONDS  # the last renewal was before the partition began
    monkeypatch.undo()
    time.sleep(0.6)
    run = get_run(system, run_id)  # no outcome recorded: the reaper requeues it (WF-4)
    assert (run.state, run.attempts) == (RunState.RUNNING, token)


# ---------------------------------------------------------------------------- FT-3


def test_results_and_errors_with_nul_are_stored_losslessly(system: bootstrap.Punctual) -> None:
    """Scenario 6: JSONB refused them, the outcome was dropped and the body ran again."""
    start_worker(system)
    completed = wait_finished(system, insert_run(system, "nul"))
    failed = wait_finished(system, insert_run(system, "nul_error"))
    assert (completed.state, completed.attempts, completed.result) == (
        RunState.COMPLETED,
        1,
        NUL_RESULT,
    )
    assert (failed.state, failed.attempts) == (RunState.FAILED, 1)
    assert failed.error is not None
    assert (failed.error["code"], failed.error["type"]) == ("workflow_error", "ValueError")
    assert failed.error["message"] == "a message with a \x00 in it"


def test_an_outcome_the_store_refuses_ends_the_run_and_never_reruns_it(
    system: bootstrap.Punctual, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = execution.finish_runs

    def refusing(services: Any, worker_id: str, finished: Any) -> list[bool]:
        if any(f.state is RunState.COMPLETED for f in finished):
            raise ValueError("the store refuses this value")  # deterministic, not Unavailable
        return real(services, worker_id, finished)

    monkeypatch.setattr(execution, "finish_runs", refusing)
    start_worker(system)
    system.start_runner()  # its reaper would requeue a run whose outcome was dropped
    marker = tmp_path / "ran.txt"
    run = wait_finished(system, insert_run(system, "counted", {"file": str(marker)}))
    assert (run.state, run.attempts) == (RunState.FAILED, 1)
    assert run.error is not None
    assert (run.error["code"], run.error["outcome"]) == ("result_not_storable", "completed")
    time.sleep(LEASE_SECONDS + 1.5)  # past the lease: nothing takes it back
    assert lines(marker) == 1
    assert get_run(system, run.id).state is RunState.FAILED


# ---------------------------------------------------------------------------- hand-off


def test_a_run_that_cannot_be_handed_to_a_slot_fails_alone(steady: bootstrap.Punctual) -> None:
    """Scenario 7: a timeout of 0 (registered before it was refused) made submit raise;
    the run stayed ``running`` for ever and the rest of the batch was dropped."""
    bad = insert_run(steady, "echo", {"message": "never"}, timeout_seconds=0)
    good = insert_run(steady, "echo", {"message": "fine"})
    start_worker(steady)
    failed = wait_finished(steady, bad)
    completed = wait_finished(steady, good)
    assert failed.state is RunState.FAILED
    assert failed.error is not None and failed.error["code"] == "handoff_failed"
    assert (completed.state, completed.attempts) == (RunState.COMPLETED, 1)


def test_a_run_without_a_slot_after_all_goes_back_uncharged(
    system: bootstrap.Punctual, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = start_worker(system)
    pool = worker._pool
    real_submit = pool.submit
    refused: list[str] = []

    def slot_died(assignment: Any) -> None:
        if not refused:
            refused.append(assignment.run_id)
            raise RuntimeError("no free slot: wait for one (free_slots()) before submit")
        real_submit(assignment)

    monkeypatch.setattr(pool, "submit", slot_died)
    run = wait_finished(system, insert_run(system, "echo", {"message": "later"}))
    assert refused == [run.id]
    assert (run.state, run.attempts, run.result) == (
        RunState.COMPLETED,
        1,
        {"message": "later"},
    )


def test_claimed_and_started_times_of_an_attempt(system: bootstrap.Punctual) -> None:
    start_worker(system)
    run = wait_finished(system, insert_run(system, "echo", {"message": "t"}))
    assert run.claimed_at is not None and run.started_at is not None and run.ended_at
    assert run.created_at <= run.claimed_at <= run.started_at <= run.ended_at


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_claim_records_when_it_claimed_not_when_its_transaction_began(
    system: bootstrap.Punctual,
) -> None:
    """PostgreSQL's now() is the transaction's start: a claim whose transaction began
    before the run was created (and then saw it, under read committed) recorded the run
    as claimed before it was created (seen once in a loaded suite)."""
    with system.store.transaction() as tx:
        assert tx.runs.get(TENANT, "run_none") is None  # the transaction has begun
        time.sleep(0.05)
        run_id = insert_run(system, "echo", {"message": "late"})
        claimed = tx.runs.claim_pending(
            "wrk-a", ["standard"], [("echo", "1")], 1, 30, datetime.now(UTC)
        )
    assert [c.id for c in claimed] == [run_id]
    run = get_run(system, run_id)
    assert run.claimed_at is not None
    assert run.created_at <= run.claimed_at


# ---------------------------------------------------------------------------- store side


def _claim(system: bootstrap.Punctual, now: datetime, lease_seconds: float = 30) -> None:
    with system.store.transaction() as tx:
        assert tx.runs.claim_pending("wrk-a", ["standard"], [("echo", "1")], 1, lease_seconds, now)


def _claimed_ago(system: bootstrap.Punctual, run_id: str, seconds: float) -> None:
    """Move a claim ``seconds`` into the past, on the store's own clock."""
    with system.store.engine.begin() as conn:
        conn.execute(
            sa.update(t.runs)
            .where(t.runs.c.id == run_id)
            .values(claimed_at=datetime.now(UTC) - timedelta(seconds=seconds))
        )


def test_the_reaper_ends_runs_past_their_execution_timeout_whoever_renews_them(
    system: bootstrap.Punctual,
) -> None:
    run_id = insert_run(system, "echo", {"message": "x"}, timeout_seconds=60)
    _claim(system, datetime.now(UTC))
    with system.store.transaction() as tx:
        claim = RunClaim(run_id, "wrk-a/1")
        assert tx.runs.renew_leases([claim], 3600, datetime.now(UTC)) == {run_id}
    _claimed_ago(system, run_id, 89)
    with system.store.transaction() as tx:
        assert tx.runs.time_out_running(datetime.now(UTC), 30) == []
    assert get_run(system, run_id).state is RunState.RUNNING
    _claimed_ago(system, run_id, 91)
    with system.store.transaction() as tx:
        assert len(tx.runs.time_out_running(datetime.now(UTC), 30)) == 1
    run = get_run(system, run_id)
    assert run.state is RunState.TIMED_OUT
    assert run.error is not None and run.error["code"] == "timed_out"


@pytest.mark.postgres
def test_a_reaper_whose_clock_runs_ahead_ends_nothing_early_on_postgresql(
    pg_url: str, tmp_path: Path
) -> None:
    """The backstop counts on the database's clock: a reaper host ten minutes ahead, and a
    worker host ten minutes behind, leave a run claimed a second ago alone."""
    built = bootstrap.build(make_settings(pg_url, tmp_path))
    try:
        run_id = insert_run(built, "echo", {"message": "x"}, timeout_seconds=60)
        _claim(built, datetime.now(UTC) - timedelta(minutes=10))
        with built.store.transaction() as tx:
            assert tx.runs.time_out_running(datetime.now(UTC) + timedelta(minutes=10), 30) == []
        assert get_run(built, run_id).state is RunState.RUNNING
    finally:
        built.close()


def test_leases_are_timed_by_the_database_clock_on_postgresql(
    system: bootstrap.Punctual,
) -> None:
    """Scenario 4: a host whose clock is a year behind must not hold leases for a year."""
    run_id = insert_run(system, "echo", {"message": "x"})
    skewed = datetime.now(UTC) - timedelta(days=365)
    _claim(system, skewed, lease_seconds=30)
    with system.store.engine.connect() as conn:
        lease_until = conn.execute(
            sa.select(t.runs.c.lease_until).where(t.runs.c.id == run_id)
        ).scalar_one()
    with system.store.transaction() as tx:
        released = tx.runs.release_lost(skewed + timedelta(days=1), max_attempts=5)
    if system.store.dialect == "postgresql":
        assert abs(lease_until - (datetime.now(UTC) + timedelta(seconds=30))) < timedelta(
            seconds=10
        )
        assert released == (0, [])  # the database says the lease still runs
    else:  # one machine, one clock: the process's
        assert lease_until == skewed + timedelta(seconds=30)
        assert released == (1, [])
