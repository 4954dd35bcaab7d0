"""Store contract: start claims are fenced by a claim token, not by ``version`` (FT-5, FT-2).

Every test runs on SQLite and PostgreSQL (the ``store`` fixture of the store contract),
except those that show leases timed by the database's clock on PostgreSQL: there the
claimers' own clocks are minutes off the database's, as a skewed runner host's would be.
Leases run on the store's clock, which a test cannot move, so a lease that has run out is
one taken with a negative length (``EXPIRED``) or moved into the past in the database.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.store import SqlStore
from punctual.domain.starts import StartState
from punctual.ports.records import ClaimedStart, DispatchedStart
from tests.contract.test_store_contract import (
    EXPIRED,
    TENANT,
    at,
    insert_starts,
    new_start,
)

SKEW = timedelta(minutes=10)
"""How far off the database's clock a skewed claimer's clock is."""


def _claim(store: SqlStore, now_s: float, runner: str, lease_s: float = 30) -> list[ClaimedStart]:
    with store.transaction() as tx:
        return tx.starts.claim_due(at(now_s), 10, runner, lease_s)


def _state(store: SqlStore, start_id: str) -> tuple[StartState, int]:
    with store.transaction(readonly=True) as tx:
        start = tx.starts.get(TENANT, start_id)
    assert start is not None
    return start.state, start.version


def test_each_claim_takes_the_next_claim_sequence_and_keeps_the_version(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    [first] = _claim(store, 0, "runner-a", lease_s=EXPIRED)
    [second] = _claim(store, 31, "runner-b")  # a's lease expired
    assert (first.claimed_by, first.claim_seq, first.version) == ("runner-a", 1, 1)
    assert (second.claimed_by, second.claim_seq, second.version) == ("runner-b", 2, 1)
    assert _state(store, start_id) == (StartState.DISPATCHING, 1)


def test_a_runner_whose_claim_was_taken_over_cannot_record(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    [stale] = _claim(store, 0, "runner-a", lease_s=EXPIRED)
    [fresh] = _claim(store, 31, "runner-b")
    with store.transaction() as tx:
        row = DispatchedStart(stale.token, 1, "v1", "sha256:aa")
        assert tx.starts.mark_dispatched_many([row], at(32)) == set()
        assert not tx.starts.settle_claim(stale.token, at(32), state=StartState.FAILED.value)
        assert tx.starts.renew_claims([stale.token], 30, at(32)) == set()
        assert tx.starts.release_claims([stale.token], at(32)) == set()
        assert tx.starts.mark_dispatched_many(
            [DispatchedStart(fresh.token, 1, "v1", "sha256:aa")], at(33)
        ) == {start_id}
    assert _state(store, start_id) == (StartState.DISPATCHED, 2)


def test_a_claim_whose_lease_ran_out_cannot_record_even_if_nobody_took_it(
    store: SqlStore,
) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    [claim] = _claim(store, 0, "runner-a", lease_s=EXPIRED)
    with store.transaction() as tx:
        row = DispatchedStart(claim.token, 1, "v1", "sha256:aa")
        assert tx.starts.mark_dispatched_many([row], at(31)) == set()
        assert not tx.starts.settle_claim(claim.token, at(31), state=StartState.FAILED.value)
        assert tx.starts.renew_claims([claim.token], 30, at(31)) == set()
    assert _state(store, start_id) == (StartState.DISPATCHING, 1)


def test_renewing_a_claim_extends_its_lease_without_a_version_bump(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    [claim] = _claim(store, 0, "runner-a", lease_s=30)
    with store.transaction() as tx:
        assert tx.starts.renew_claims([claim.token], 30, at(20)) == {start_id}
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


def test_a_renewal_times_the_lease_from_the_stores_clock(store: SqlStore) -> None:
    [start_id] = insert_starts(store, new_start(start_at=at(-1)))
    [claim] = _claim(store, 0, "runner-a", lease_s=30)
    with store.transaction() as tx:
        # Renewed to a lease that is over at once: the new expiry replaces the old one.
        assert tx.starts.renew_claims([claim.token], EXPIRED, at(20)) == {start_id}
    [taken] = _claim(store, 21, "runner-b")
    assert (taken.claimed_by, taken.claim_seq) == ("runner-b", 2)


# ---- PostgreSQL: leases are timed by the database's clock (FT-2) -------------------------


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[SqlStore]:
    built = SqlStore(pg_url)
    yield built
    built.dispose()


def _honest_now() -> datetime:
    """The database server's time (it runs on this machine, so the two clocks agree)."""
    return datetime.now(UTC)


def _claim_at(store: SqlStore, now: datetime, runner: str, lease_s: float = 30) -> list[str]:
    with store.transaction() as tx:
        return [claim.id for claim in tx.starts.claim_due(now, 10, runner, lease_s)]


def _expire_in_the_database(store: SqlStore, start_id: str, seconds_ago: float) -> None:
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(t.starts)
            .where(t.starts.c.id == start_id)
            .values(lease_until=sa.func.now() - timedelta(seconds=seconds_ago))
        )


def _lease_until(store: SqlStore, start_id: str) -> datetime:
    with store.engine.connect() as conn:
        lease: datetime = conn.execute(
            sa.select(t.starts.c.lease_until).where(t.starts.c.id == start_id)
        ).scalar_one()
    return lease


@pytest.mark.postgres
def test_on_postgresql_a_claimer_whose_clock_runs_ahead_cannot_take_a_live_claim(
    pg_store: SqlStore,
) -> None:
    [start_id] = insert_starts(pg_store, new_start(start_at=_honest_now() - timedelta(seconds=1)))
    assert _claim_at(pg_store, _honest_now(), "runner-a") == [start_id]
    assert _claim_at(pg_store, _honest_now() + SKEW, "runner-ahead") == []
    with pg_store.transaction(readonly=True) as tx:
        assert tx.starts.stalled(TENANT, 60, _honest_now() + SKEW, 10) == []


@pytest.mark.postgres
def test_on_postgresql_a_claim_taken_with_a_clock_behind_runs_its_full_lease(
    pg_store: SqlStore,
) -> None:
    behind = _honest_now() - SKEW
    [start_id] = insert_starts(pg_store, new_start(start_at=behind - timedelta(seconds=1)))
    assert _claim_at(pg_store, behind, "runner-behind", lease_s=30) == [start_id]
    lease = _lease_until(pg_store, start_id)
    assert abs(lease - (_honest_now() + timedelta(seconds=30))) < timedelta(seconds=10)
    assert _claim_at(pg_store, _honest_now(), "runner-b") == []


@pytest.mark.postgres
def test_on_postgresql_a_claimer_whose_clock_runs_behind_cannot_use_an_expired_claim(
    pg_store: SqlStore,
) -> None:
    behind = _honest_now() - SKEW
    [start_id] = insert_starts(pg_store, new_start(start_at=behind - timedelta(seconds=1)))
    with pg_store.transaction() as tx:
        [claim] = tx.starts.claim_due(behind, 10, "runner-behind", 30)
    _expire_in_the_database(pg_store, start_id, seconds_ago=1)
    with pg_store.transaction() as tx:
        # By its own clock the lease runs for ten more minutes; by the database's it is over.
        row = DispatchedStart(claim.token, 1, "v1", "sha256:aa")
        assert tx.starts.mark_dispatched_many([row], behind) == set()
        assert not tx.starts.settle_claim(claim.token, behind, state=StartState.FAILED.value)
        assert tx.starts.renew_claims([claim.token], 30, behind) == set()
    # And a claimer whose clock is behind sees the expired claim as claimable.
    assert _claim_at(pg_store, behind, "runner-behind-too") == [start_id]


@pytest.mark.postgres
def test_on_postgresql_the_stalled_check_reads_the_database_clock(pg_store: SqlStore) -> None:
    behind = _honest_now() - SKEW
    [start_id] = insert_starts(pg_store, new_start(start_at=behind - timedelta(seconds=1)))
    assert _claim_at(pg_store, behind, "runner-that-died") == [start_id]
    _expire_in_the_database(pg_store, start_id, seconds_ago=120)
    with pg_store.transaction(readonly=True) as tx:
        assert tx.starts.stalled(TENANT, 60, behind, 10) == [start_id]
        assert tx.starts.stalled(TENANT, 180, _honest_now() + SKEW, 10) == []


@pytest.mark.postgres
def test_on_postgresql_earliest_due_tells_a_lease_expiry_on_the_callers_clock(
    pg_store: SqlStore,
) -> None:
    ahead = _honest_now() + SKEW
    [start_id] = insert_starts(pg_store, new_start(start_at=ahead - timedelta(seconds=1)))
    assert _claim_at(pg_store, ahead, "runner-ahead", lease_s=30) == [start_id]
    with pg_store.transaction(readonly=True) as tx:
        expiry = tx.starts.earliest_due(ahead)
    # Thirty seconds from the caller's present, not ten minutes in its past.
    assert expiry is not None
    assert ahead + timedelta(seconds=20) < expiry <= ahead + timedelta(seconds=30)
