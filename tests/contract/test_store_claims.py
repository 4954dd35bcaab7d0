"""Store contract: start claims are fenced by a claim token, not by ``version`` (FT-5, FT-2).

Every test runs on SQLite and PostgreSQL (the ``store`` fixture of the store contract).
"""

from __future__ import annotations

from datetime import timedelta

from punctual.adapters.stores.sql.store import SqlStore
from punctual.domain.starts import StartState
from punctual.ports.records import ClaimedStart, DispatchedStart
from tests.contract.test_store_contract import (
    TENANT,
    at,
    insert_starts,
    new_start,
    store,
)

__all__ = ["store"]  # the fixture, over both stores


def _claim(store: SqlStore, now_s: float, runner: str, lease_s: float = 30) -> list[ClaimedStart]:
    now = at(now_s)
    with store.transaction() as tx:
        return tx.starts.claim_due(now, 10, runner, now + timedelta(seconds=lease_s))


def _state(store: SqlStore, start_id: str) -> tuple[StartState, int]:
    with store.transaction(readonly=True) as tx:
        start = tx.starts.get(TENANT, start_id)
    assert start is not None
    return start.state, start.version


def test_each_claim_takes_the_next_claim_sequence_and_keeps_the_version(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    [first] = _claim(store, 0, "runner-a")
    [second] = _claim(store, 31, "runner-b")  # a's lease expired
    assert (first.claimed_by, first.claim_seq, first.version) == ("runner-a", 1, 1)
    assert (second.claimed_by, second.claim_seq, second.version) == ("runner-b", 2, 1)
    assert _state(store, start_id) == (StartState.DISPATCHING, 1)


def test_a_runner_whose_claim_was_taken_over_cannot_record(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    [stale] = _claim(store, 0, "runner-a")
    [fresh] = _claim(store, 31, "runner-b")
    with store.transaction() as tx:
        row = DispatchedStart(stale.token, 1, "v1", "sha256:aa")
        assert tx.starts.mark_dispatched_many([row], at(32)) == set()
        assert not tx.starts.settle_claim(stale.token, at(32), state=StartState.FAILED.value)
        assert tx.starts.renew_claims([stale.token], at(32), at(62)) == set()
        assert tx.starts.release_claims([stale.token], at(32)) == set()
        assert tx.starts.mark_dispatched_many(
            [DispatchedStart(fresh.token, 1, "v1", "sha256:aa")], at(33)
        ) == {start_id}
    assert _state(store, start_id) == (StartState.DISPATCHED, 2)


def test_a_claim_whose_lease_ran_out_cannot_record_even_if_nobody_took_it(
    store: SqlStore,
) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    [claim] = _claim(store, 0, "runner-a", lease_s=30)
    with store.transaction() as tx:
        row = DispatchedStart(claim.token, 1, "v1", "sha256:aa")
        assert tx.starts.mark_dispatched_many([row], at(31)) == set()
        assert not tx.starts.settle_claim(claim.token, at(31), state=StartState.FAILED.value)
        assert tx.starts.renew_claims([claim.token], at(31), at(61)) == set()
    assert _state(store, start_id) == (StartState.DISPATCHING, 1)


def test_renewing_a_claim_extends_its_lease_without_a_version_bump(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    [claim] = _claim(store, 0, "runner-a", lease_s=30)
    with store.transaction() as tx:
        assert tx.starts.renew_claims([claim.token], at(20), at(50)) == {start_id}
    assert _claim(store, 40, "runner-b") == []  # still held: the renewed lease runs to 50
    with store.transaction() as tx:
        row = DispatchedStart(claim.token, 1, "v1", "sha256:aa")
        assert tx.starts.mark_dispatched_many([row], at(45)) == {start_id}
    assert _state(store, start_id) == (StartState.DISPATCHED, 2)


def test_a_release_gives_the_start_back_with_its_version(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    [claim] = _claim(store, 0, "runner-a")
    with store.transaction() as tx:
        assert tx.starts.release_claims([claim.token], at(1)) == {start_id}
        start = tx.starts.get(TENANT, start_id)
    assert start is not None
    assert (start.state, start.version, start.attempts, start.due_at) == (
        StartState.SCHEDULED,
        1,
        0,
        at(-1),
    )
    [again] = _claim(store, 2, "runner-a")
    assert again.claim_seq == 2


def test_a_cancel_of_a_claimed_start_wins_over_its_dispatch(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    [claim] = _claim(store, 0, "runner-a")
    with store.transaction() as tx:
        # The version a client read before the claim is still the current one.
        assert tx.starts.compare_and_set(
            start_id, 1, at(1), state=StartState.CANCELED.value, claimed_by=None
        )
        row = DispatchedStart(claim.token, 1, "v1", "sha256:aa")
        assert tx.starts.mark_dispatched_many([row], at(2)) == set()
    assert _state(store, start_id) == (StartState.CANCELED, 2)


def test_states_of_reads_many_starts_at_once(store: SqlStore) -> None:
    first, second = insert_starts(
        store, new_start(start_at=at(-1)), new_start(start_at=at(100), business_request_id="b")
    )
    _claim(store, 0, "runner-a")
    with store.transaction(readonly=True) as tx:
        assert tx.starts.states_of([first, second, "st_missing"]) == {
            first: StartState.DISPATCHING,
            second: StartState.SCHEDULED,
        }
        assert tx.starts.states_of([]) == {}
