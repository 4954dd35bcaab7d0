"""The Store contract of ``RunLedgerStore``: runs by id for an engine without leases.

Every promise of ``punctual.ports.store.RunLedgerStore`` as a named test, over a real
SQLite file and a fresh PostgreSQL database (``database_url``). Runs are created and
claimed through the store's own paths (``Runs.insert_new``, a local worker's claim, a
terminate), never by hand.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from punctual.adapters.stores.sql.store import SqlStore
from punctual.domain.ids import new_id
from punctual.domain.runs import Run, RunState
from punctual.domain.starts import StartState
from punctual.ports.records import EncryptedInput, NewRun, NewStart
from punctual.ports.store import OutcomeRefused

T0 = datetime(2027, 2, 1, 9, 0, tzinfo=UTC)
TENANT = "acme"
ENGINE = "temporal"
"""``claimed_by`` of the engine's runs in these tests."""
INPUT = EncryptedInput("k1", b"\x00sealed\xff")
QUEUE = "default"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def insert_run(store: SqlStore, *, tenant: str = TENANT, version: str | None = None) -> str:
    """A pending run; its own definition version, so a local claim can take exactly it."""
    run_id = new_id("run")
    new = NewRun(
        id=run_id,
        tenant=tenant,
        workflow="report",
        definition_version=version or f"v-{run_id}",
        artifact="artifact-1",
        origin={"source": "start", "id": new_id("st")},
        started_by="alice",
        input=INPUT,
        task_queue=QUEUE,
        priority=4,
        traceparent=None,
        timeout_seconds=90.0,
    )
    with store.transaction() as tx:
        assert tx.runs.insert_new([new], T0) == 1
    return run_id


def run_of(store: SqlStore, run_id: str, tenant: str = TENANT) -> Run:
    with store.transaction(readonly=True) as tx:
        run = tx.runs.get(tenant, run_id)
    assert run is not None
    return run


def times(store: SqlStore, run_id: str) -> tuple[datetime | None, datetime | None]:
    run = run_of(store, run_id)
    return run.claimed_at, run.started_at


def mark_running(store: SqlStore, run_id: str, attempts: int, now: datetime = T0) -> bool:
    with store.transaction() as tx:
        return tx.run_ledger.mark_running(run_id, attempts, ENGINE, now)


def mark_started(store: SqlStore, run_id: str, attempts: int, now: datetime = T0) -> bool:
    with store.transaction() as tx:
        return tx.run_ledger.mark_started(run_id, attempts, now)


def finish(
    store: SqlStore,
    run_id: str,
    attempts: int,
    result: Any = None,
    *,
    state: RunState = RunState.COMPLETED,
    error: dict[str, Any] | None = None,
    now: datetime = T0,
) -> str | None:
    with store.transaction() as tx:
        return tx.run_ledger.finish(run_id, state, attempts, result, error, ENGINE, now)


def terminate(store: SqlStore, run_id: str) -> None:
    with store.transaction() as tx:
        tx.runs.terminate(TENANT, run_id, T0, "terminated by alice")


# --- reads ----------------------------------------------------------------------------------


def test_load_returns_the_run_with_its_input_still_encrypted(store: SqlStore) -> None:
    run_id = insert_run(store)
    with store.transaction(readonly=True) as tx:
        record = tx.run_ledger.load(run_id)
        missing = tx.run_ledger.load("run_unknown")

    assert missing is None
    assert record is not None
    assert (record.id, record.tenant, record.workflow) == (run_id, TENANT, "report")
    assert record.definition_version == f"v-{run_id}"
    assert (record.state, record.attempts, record.active) == (RunState.PENDING, 0, True)
    assert record.input == INPUT
    assert (record.task_queue, record.priority, record.timeout_seconds) == (QUEUE, 4, 90.0)
    assert record.origin["source"] == "start"
    assert (record.cancel_requested, record.created_at) == (False, T0)
    assert (record.result, record.error) == (None, None)
    assert record.seq > 0


def test_start_state_is_that_of_the_start_that_allocated_the_run(store: SqlStore) -> None:
    start_id, run_id = new_id("st"), new_id("run")
    new = NewStart(
        id=start_id,
        tenant=TENANT,
        workflow="report",
        business_request_id=f"req-{start_id}",
        start_at=at(60),
        time_zone=None,
        workload_class=QUEUE,
        attributes={},
        traceparent=None,
        input=INPUT,
        created_by="alice",
        run_id=run_id,
    )
    with store.transaction() as tx:
        tx.starts.insert(new, T0)
    with store.transaction(readonly=True) as tx:
        assert tx.run_ledger.start_state(run_id) is StartState.SCHEDULED  # no run yet
        assert tx.run_ledger.start_state("run_of_no_start") is None
    with store.transaction() as tx:
        assert tx.starts.compare_and_set(start_id, 1, T0, state=StartState.CANCELED.value)
    with store.transaction(readonly=True) as tx:
        assert tx.run_ledger.start_state(run_id) is StartState.CANCELED


def test_active_lists_unclaimed_and_own_runs_in_row_order(store: SqlStore) -> None:
    pending, own, local, ended, elsewhere = (insert_run(store) for _ in range(5))
    assert mark_running(store, own, 1)
    with store.transaction() as tx:  # a local worker's claim: not the engine's run
        [claimed] = tx.runs.claim_pending("wrk-a", [QUEUE], [("report", f"v-{local}")], 1, 60, T0)
        assert claimed.id == local
        assert tx.run_ledger.mark_running(elsewhere, 1, "another-engine", T0)
    terminate(store, ended)

    with store.transaction(readonly=True) as tx:
        listed = tx.run_ledger.active(ENGINE, 0, 10)
        first = tx.run_ledger.active(ENGINE, 0, 1)
        after_first = tx.run_ledger.active(ENGINE, first[0].seq, 10)

    assert [r.id for r in listed] == [pending, own]
    assert [r.state for r in listed] == [RunState.PENDING, RunState.RUNNING]
    assert [r.id for r in first] == [pending]
    assert [r.id for r in after_first] == [own]


def test_flags_are_the_state_and_cancel_request(store: SqlStore) -> None:
    quiet, asked = insert_run(store), insert_run(store)
    assert mark_running(store, asked, 1)
    with store.transaction() as tx:
        tx.runs.request_cancel(TENANT, asked, T0)  # running: flagged, not ended
    with store.transaction(readonly=True) as tx:
        assert tx.run_ledger.flags(quiet) == (RunState.PENDING, False)
        assert tx.run_ledger.flags(asked) == (RunState.RUNNING, True)
        assert tx.run_ledger.flags("run_unknown") is None


def test_signals_answer_for_every_known_run_however_many_ids(store: SqlStore) -> None:
    quiet, asked, ended = insert_run(store), insert_run(store, tenant="globex"), insert_run(store)
    assert mark_running(store, asked, 1)
    with store.transaction() as tx:
        tx.runs.request_cancel("globex", asked, T0)
    terminate(store, ended)
    # More ids than one statement may carry on SQLite; the known ones spread among them.
    unknown = [f"run_unknown_{i}" for i in range(1_500)]
    ids = [quiet, *unknown[:700], asked, *unknown[700:], ended]

    with store.transaction(readonly=True) as tx:
        signals = tx.run_ledger.signals(ids)

    assert set(signals) == {quiet, asked, ended}
    assert (signals[quiet].tenant, signals[quiet].state) == (TENANT, RunState.PENDING)
    assert not signals[quiet].cancel_requested
    assert (signals[asked].tenant, signals[asked].state) == ("globex", RunState.RUNNING)
    assert signals[asked].cancel_requested
    assert signals[ended].state is RunState.TERMINATED


# --- running --------------------------------------------------------------------------------


def test_mark_running_takes_a_newer_attempt_and_keeps_the_times_of_the_same_one(
    store: SqlStore,
) -> None:
    run_id = insert_run(store)
    assert mark_running(store, run_id, 1, at(0))
    assert times(store, run_id) == (at(0), None)  # taken; the body has not begun
    assert mark_started(store, run_id, 1, at(1))
    assert mark_running(store, run_id, 1, at(5))  # the same attempt again (the sync)
    assert times(store, run_id) == (at(0), at(1))

    assert mark_running(store, run_id, 3, at(10))  # the engine retried, twice
    assert times(store, run_id) == (at(10), None)
    run = run_of(store, run_id)
    assert (run.state, run.attempts) == (RunState.RUNNING, 3)


def test_mark_running_ignores_an_older_attempt_and_a_terminal_run(store: SqlStore) -> None:
    superseded, ended = insert_run(store), insert_run(store)
    assert mark_running(store, superseded, 2, at(0))
    assert not mark_running(store, superseded, 1, at(5)), "attempt 1 came back to life"
    assert (run_of(store, superseded).attempts, times(store, superseded)) == (2, (at(0), None))

    terminate(store, ended)
    assert not mark_running(store, ended, 1)
    assert run_of(store, ended).state is RunState.TERMINATED


def test_runs_of_the_engine_hold_no_lease_that_lease_recovery_could_take(
    store: SqlStore,
) -> None:
    run_id = insert_run(store)
    assert mark_running(store, run_id, 1)
    with store.transaction() as tx:
        assert tx.runs.release_lost(at(86_400), max_attempts=1) == (0, [])
    with store.transaction(readonly=True) as tx:
        assert tx.run_ledger.flags(run_id) == (RunState.RUNNING, False)


def test_mark_started_only_at_exactly_the_current_attempt(store: SqlStore) -> None:
    run_id = insert_run(store)
    assert not mark_started(store, run_id, 1, at(1)), "no attempt is recorded yet"
    assert mark_running(store, run_id, 2, at(0))
    assert not mark_started(store, run_id, 1, at(2)), "a superseded attempt"
    assert not mark_started(store, run_id, 3, at(3)), "an attempt not recorded yet"
    assert times(store, run_id) == (at(0), None)
    assert mark_started(store, run_id, 2, at(4))
    assert times(store, run_id) == (at(0), at(4))
    assert finish(store, run_id, 2, {"ok": True}) == TENANT
    assert not mark_started(store, run_id, 2, at(5)), "the run has ended"
    assert times(store, run_id) == (at(0), at(4))


# --- outcomes -------------------------------------------------------------------------------


def test_finish_records_the_outcome_and_returns_the_tenant(store: SqlStore) -> None:
    done, failed = insert_run(store), insert_run(store, tenant="globex")
    assert mark_running(store, done, 1, at(0))
    assert mark_started(store, done, 1, at(1))
    error = {"code": "workflow_error", "message": "it broke"}

    assert finish(store, done, 1, {"rows": 3}, now=at(9)) == TENANT
    assert finish(store, failed, 1, state=RunState.FAILED, error=error, now=at(7)) == "globex"

    run = run_of(store, done)
    assert (run.state, run.attempts, run.result, run.error) == (
        RunState.COMPLETED,
        1,
        {"rows": 3},
        None,
    )
    assert (run.claimed_at, run.started_at, run.ended_at) == (at(0), at(1), at(9))
    other = run_of(store, failed, "globex")
    assert (other.state, other.attempts, other.error, other.ended_at) == (
        RunState.FAILED,
        1,
        error,
        at(7),
    )
    with store.transaction(readonly=True) as tx:
        assert tx.run_ledger.active(ENGINE, 0, 10) == []


def test_finish_ignores_an_older_attempt_and_a_terminal_run(store: SqlStore) -> None:
    superseded, ended = insert_run(store), insert_run(store)
    assert mark_running(store, superseded, 2)
    assert finish(store, superseded, 1, {"from": 1}) is None
    run = run_of(store, superseded)
    assert (run.state, run.attempts, run.result, run.ended_at) == (RunState.RUNNING, 2, None, None)

    terminate(store, ended)
    assert finish(store, ended, 5, {"late": True}) is None
    assert finish(store, ended, 5, state=RunState.FAILED, error={"code": "x"}) is None
    run = run_of(store, ended)
    assert (run.state, run.result) == (RunState.TERMINATED, None)


def test_an_outcome_of_a_newer_attempt_clears_the_older_attempts_times(
    store: SqlStore,
) -> None:
    run_id = insert_run(store)
    assert mark_running(store, run_id, 1, at(0))
    assert mark_started(store, run_id, 1, at(1))
    assert finish(store, run_id, 2, {"ok": True}, now=at(9)) == TENANT
    run = run_of(store, run_id)
    assert (run.attempts, run.claimed_at, run.started_at, run.ended_at) == (2, None, None, at(9))


def test_results_and_errors_are_stored_losslessly_nul_included(store: SqlStore) -> None:
    completed, failed = insert_run(store), insert_run(store)
    result = {"text": "a\x00b", "nested": ["\x00", {"$punctual_escaped": 1}]}
    error = {"code": "workflow_error", "message": "bad byte \x00 here"}
    assert finish(store, completed, 1, result) == TENANT
    assert finish(store, failed, 1, state=RunState.FAILED, error=error) == TENANT
    with store.transaction(readonly=True) as tx:
        loaded, loaded_error = tx.run_ledger.load(completed), tx.run_ledger.load(failed)
    assert loaded is not None
    assert loaded_error is not None
    assert loaded.result == result
    assert loaded_error.error == error


def test_a_value_the_store_cannot_hold_raises_outcome_refused_and_changes_nothing(
    store: SqlStore,
) -> None:
    run_id = insert_run(store)
    assert mark_running(store, run_id, 1)
    with pytest.raises(OutcomeRefused) as refused:
        finish(store, run_id, 1, {"not json": {1, 2}})
    assert refused.value.run_id == run_id
    assert "not json" not in str(refused.value)  # the values are not repeated
    run = run_of(store, run_id)
    assert (run.state, run.result, run.ended_at) == (RunState.RUNNING, None, None)
    assert finish(store, run_id, 1, {"json": [1, 2]}) == TENANT  # the store goes on
