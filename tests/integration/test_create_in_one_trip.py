"""A create in one round trip on PostgreSQL (SPEC OP-5, OS-4, OS-5, QA-3, CR-8).

``POST …/scheduled-starts`` decides in the process what it can (checks, role, limits,
against the active definition it remembers) and sends one statement that records the key
already answered, checks the definition and the quota, and inserts the start and the audit
entry. Every rule of the transaction path holds: a replay answers the recorded body, a key
used with another body is a 409, a definition changed elsewhere is never used, the quota is
exact across processes with the exact controller, a concurrent request with the same key is
waited for within the bounded wait, and nothing is stored on a refusal.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import PG_BURST_CONNECTIONS
from punctual.domain.permissions import Role
from punctual.domain.runs import DefinitionState
from punctual.errors import Unavailable
from punctual.ports.store import OneTripAnswer, OneTripCreate, OneTripOutcome
from tests.conftest import make_settings
from tests.support.api import Api, echo_start, member_api, register_demo
from tests.support.cost import counting

pytestmark = pytest.mark.postgres


@pytest.fixture
def systems(pg_url: str, tmp_path: Path) -> Iterator[Callable[..., bootstrap.Punctual]]:
    """Punctual processes on one PostgreSQL database, with the given settings."""
    built: list[bootstrap.Punctual] = []

    def make(**overrides: Any) -> bootstrap.Punctual:
        system = bootstrap.build(make_settings(pg_url, tmp_path, **overrides))
        built.append(system)
        register_demo(system)
        return system

    yield make
    for system in built:
        system.close()


def warmed(system: bootstrap.Punctual, client: TestClient) -> Api:
    """A member's API whose first create has taught the process the active definition."""
    api = member_api(system, client)
    assert api.post("/scheduled-starts", echo_start(business_request_id="warm")).status_code == 201
    assert system.services.definitions.recall("echo") is not None
    return api


def starts_of(system: bootstrap.Punctual, tenant: str = "acme") -> int:
    query = sa.select(sa.func.count()).select_from(t.starts).where(t.starts.c.tenant == tenant)
    with system.store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def key_row(system: bootstrap.Punctual, key: str) -> Any:
    query = sa.select(t.idempotency_keys).where(t.idempotency_keys.c.key == key)
    with system.store.engine.connect() as conn:
        return conn.execute(query).mappings().first()


def counted_one_trips(system: bootstrap.Punctual, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the one trips of ``system`` that created (1) or answered otherwise (0)."""
    seen: list[int] = []
    original = system.store.create_in_one_trip

    def counting(request: OneTripCreate) -> OneTripAnswer | None:
        answer = original(request)
        seen.append(int(answer is not None and answer.outcome is OneTripOutcome.CREATED))
        return answer

    monkeypatch.setattr(system.store, "create_in_one_trip", counting)
    return seen


def test_a_create_is_one_statement_and_answers_as_the_transaction_path(
    systems: Callable[..., bootstrap.Punctual],
) -> None:
    system = systems()
    with TestClient(system.http_app()) as client:
        api = warmed(system, client)
        body = echo_start(business_request_id="one-trip", attributes={"b": "2", "a": "1"})
        with counting(system.store.engine) as cost:
            created = api.post("/scheduled-starts", body, key="k-one")
        assert created.status_code == 201, created.text
        assert (cost.statements, cost.round_trips) == (1, 1), cost.log
        assert cost.log[0].startswith("SELECT outcome, status_code"), cost.log
        start = created.json()
        assert api.get(f"/scheduled-starts/{start['id']}").json() == start
        assert start["state"] == "scheduled" and start["version"] == 1

        with counting(system.store.engine) as replay_cost:
            replayed = api.post("/scheduled-starts", body, key="k-one")
        assert (replayed.status_code, replayed.json()) == (201, start)
        assert replay_cost.round_trips == 1, replay_cost.log
        assert starts_of(system) == 2  # the warm-up's and this one

        recorded = key_row(system, "k-one")
        assert (recorded["state"], recorded["status_code"], recorded["resource_id"]) == (
            "done",
            201,
            start["id"],
        )
        admin = member_api(system, client, subject="root", role=Role.ADMIN)
        entries = admin.get("/audit", subject_id=start["id"]).json()["items"]
        assert len(entries) == 1, entries
        assert entries[0]["status"] == 201 and entries[0]["actor"] == "alice"
        assert entries[0]["token_id"] is not None


def test_the_same_key_with_another_body_is_409_and_changes_nothing(
    systems: Callable[..., bootstrap.Punctual],
) -> None:
    system = systems()
    with TestClient(system.http_app()) as client:
        api = warmed(system, client)
        first = api.post("/scheduled-starts", echo_start(business_request_id="a"), key="k-2")
        assert first.status_code == 201
        other = api.post("/scheduled-starts", echo_start(business_request_id="b"), key="k-2")
        assert other.status_code == 409, other.text
        assert other.json()["error"]["code"] == "idempotency_key_reused"
        assert starts_of(system) == 2


def test_a_definition_deprecated_by_another_process_is_never_used(
    systems: Callable[..., bootstrap.Punctual],
) -> None:
    system, elsewhere = systems(), systems()
    with TestClient(system.http_app()) as client:
        api = warmed(system, client)
        remembered = system.services.definitions.recall("echo")
        assert remembered is not None
        with elsewhere.store.transaction() as tx:
            tx.definitions.set_state("echo", remembered.version, DefinitionState.DEPRECATED)

        refused = api.post("/scheduled-starts", echo_start(business_request_id="stale"), key="k-s")
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "workflow_inactive"
        assert starts_of(system) == 1
        assert key_row(system, "k-s")["status_code"] == 422  # decided by the transaction path
        assert system.services.definitions.recall("echo") is None

        with elsewhere.store.transaction() as tx:
            tx.definitions.set_state("echo", remembered.version, DefinitionState.ACTIVE)
        again = api.post("/scheduled-starts", echo_start(business_request_id="fresh"))
        assert again.status_code == 201, again.text
        assert system.services.definitions.recall("echo") == remembered


def test_over_quota_is_429_with_the_counts_and_records_nothing(
    systems: Callable[..., bootstrap.Punctual],
) -> None:
    system = systems(tenant_defaults={"max_pending_starts": 2})
    with TestClient(system.http_app()) as client:
        api = warmed(system, client)
        assert api.post("/scheduled-starts", echo_start(business_request_id="2")).status_code == 201
        body = echo_start(business_request_id="3")
        refused = api.post("/scheduled-starts", body, key="k-q")
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == "quota_exceeded"
        assert error["details"] == {"limit": 2, "count": 2, "scope": "tenant"}
        assert key_row(system, "k-q") is None
        assert starts_of(system) == 2

        first = api.get("/scheduled-starts").json()["items"][0]
        cancel = api.post(f"/scheduled-starts/{first['id']}/cancel", {"version": first["version"]})
        assert cancel.status_code == 200, cancel.text
        retried = api.post("/scheduled-starts", body, key="k-q")
        assert retried.status_code == 201, retried.text


def test_the_exact_quota_admits_exactly_the_limit_across_two_processes(
    systems: Callable[..., bootstrap.Punctual], monkeypatch: pytest.MonkeyPatch
) -> None:
    limit, attempts = 3, 24
    settings = {"tenant_defaults": {"max_pending_starts": limit + 1}}
    first = systems(quota={"controller": "postgres"}, **settings)
    second = systems(quota={"controller": "postgres"}, **settings)
    assert first.services.quota.one_trip == "lock_and_count"
    with TestClient(first.http_app()) as a, TestClient(second.http_app()) as b:
        apis = [warmed(first, a), warmed(second, b)]  # two pending: room for `limit - 1`
        created_in_one_trip = [
            counted_one_trips(first, monkeypatch),
            counted_one_trips(second, monkeypatch),
        ]
        gate = threading.Barrier(attempts, timeout=30)

        def create(number: int) -> int:
            gate.wait()
            body = echo_start(business_request_id=f"race-{number}")
            return apis[number % 2].post("/scheduled-starts", body).status_code

        with ThreadPoolExecutor(max_workers=attempts) as pool:
            statuses = list(pool.map(create, range(attempts)))
    assert sorted(statuses) == [201] * (limit - 1) + [429] * (attempts - limit + 1), statuses
    assert starts_of(first) == limit + 1
    # The one trip decided (it did not leave everything to the transaction path).
    assert sum(created_in_one_trip[0]) + sum(created_in_one_trip[1]) >= 1


def test_racing_requests_with_one_key_make_one_start(
    systems: Callable[..., bootstrap.Punctual], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = systems(), systems()
    with TestClient(first.http_app()) as a, TestClient(second.http_app()) as b:
        apis = [warmed(first, a), warmed(second, b)]
        trips = [counted_one_trips(first, monkeypatch), counted_one_trips(second, monkeypatch)]
        body = echo_start(business_request_id="same")
        gate = threading.Barrier(8, timeout=30)

        def create(number: int) -> tuple[int, Any]:
            gate.wait()
            response = apis[number % 2].post("/scheduled-starts", body, key="k-race")
            return response.status_code, response.json()

        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(create, range(8)))
    assert {status for status, _ in answers} == {201}, answers
    assert len({answer["id"] for _, answer in answers}) == 1
    assert starts_of(first) == 3  # two warm-ups and the one
    assert sum(trips[0]) + sum(trips[1]) <= 1  # at most one trip created it
    assert len(trips[0]) + len(trips[1]) >= 1  # and the one trip was tried


def test_a_key_held_by_an_open_transaction_is_waited_for_within_the_bounded_wait(
    systems: Callable[..., bootstrap.Punctual], pg_url: str
) -> None:
    """The one trip waits for the key, then the transaction path does: together within
    the one bounded wait (4 s), not one after the other (6 s)."""
    system = systems(api_wait_seconds=4)
    with TestClient(system.http_app()) as client:
        api = warmed(system, client)
        holder = psycopg.connect(pg_url)
        try:
            now = datetime.now(UTC)
            holder.execute(
                "INSERT INTO idempotency_keys (tenant, principal, key, fingerprint, state, "
                "owner, lease_until, created_at) VALUES ('acme', 'alice', 'k-held', 'x', "
                "'in_flight', 'elsewhere', %s, %s)",
                (now + timedelta(minutes=5), now),
            )
            body = echo_start()
            began = datetime.now(UTC)
            waiting = api.post("/scheduled-starts", body, key="k-held", once=True)
            waited = (datetime.now(UTC) - began).total_seconds()
            assert waiting.status_code == 202, waiting.text
            assert waiting.json() == {"status": "in_progress"}
            assert 3.9 <= waited < 5.5, waited
        finally:
            holder.rollback()  # the key is free again; the waiting request carries on
            holder.close()
        created = api.post("/scheduled-starts", body, key="k-held")
        assert created.status_code == 201, created.text
        assert starts_of(system) == 2


def test_the_pending_count_stays_exact_and_small_over_many_creates(
    systems: Callable[..., bootstrap.Punctual],
) -> None:
    system = systems()
    with TestClient(system.http_app()) as client:
        api = warmed(system, client)
        for number in range(80):
            body = echo_start(business_request_id=f"n-{number}")
            assert api.post("/scheduled-starts", body).status_code == 201
    counts = t.pending_start_counts.c
    query = sa.select(sa.func.count(), sa.func.sum(counts.delta)).where(counts.tenant == "acme")
    with system.store.engine.connect() as conn:
        rows, total = conn.execute(query).one()
    assert total == 81 == starts_of(system)
    assert rows <= 66, rows  # folded past 64 rows, as the transaction path folds


def test_a_create_due_soon_wakes_the_runners_of_every_process(
    systems: Callable[..., bootstrap.Punctual], pg_url: str
) -> None:
    system = systems(runner={"max_idle_seconds": 30})  # runners look again within 30 s
    with TestClient(system.http_app()) as client:
        api = warmed(system, client)
        with psycopg.connect(pg_url, autocommit=True) as listener:
            listener.execute("LISTEN punctual_due")
            soon = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
            assert api.post("/scheduled-starts", echo_start(start_at=soon)).status_code == 201
            heard = next(listener.notifies(timeout=10, stop_after=1), None)
    assert heard is not None and heard.channel == "punctual_due"


def test_a_create_due_later_wakes_nobody(
    systems: Callable[..., bootstrap.Punctual], pg_url: str
) -> None:
    system = systems(runner={"max_idle_seconds": 1})
    with TestClient(system.http_app()) as client:
        api = warmed(system, client)
        with psycopg.connect(pg_url, autocommit=True) as listener:
            listener.execute("LISTEN punctual_due")
            later = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
            assert api.post("/scheduled-starts", echo_start(start_at=later)).status_code == 201
            heard = next(listener.notifies(timeout=1, stop_after=1), None)
    assert heard is None


def test_no_connection_in_time_is_the_bounded_wait_not_a_500(
    systems: Callable[..., bootstrap.Punctual],
) -> None:
    """Every connection of the pool held: the create answers 202 within the bounded wait,
    as the transaction path does, never a server error."""
    system = systems(api_wait_seconds=1)
    with TestClient(system.http_app()) as client:
        api = warmed(system, client)
        engine = system.store.engine
        pool = engine.pool
        assert isinstance(pool, sa.QueuePool)
        held = [engine.connect() for _ in range(pool.size() + PG_BURST_CONNECTIONS)]
        try:
            began = datetime.now(UTC)
            waiting = api.post("/scheduled-starts", echo_start(), once=True)
            waited = (datetime.now(UTC) - began).total_seconds()
        finally:
            for conn in held:
                conn.close()
        assert waiting.status_code == 202, waiting.text
        assert waited < 3, waited


def test_a_seal_that_fails_is_answered_after_the_quota_and_sealed_once(
    systems: Callable[..., bootstrap.Punctual], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one trip seals first; when that fails the transaction path answers the failure
    at its own seal step: a full quota is still 429, not the codec's 503."""
    system = systems(tenant_defaults={"max_pending_starts": 1})
    with TestClient(system.http_app()) as client:
        api = warmed(system, client)  # the tenant's one pending start
        codec = system.services.codec
        calls: list[int] = []

        def unavailable(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            raise Unavailable("the key store is briefly unreachable", code="store_unavailable")

        monkeypatch.setattr(codec, "encrypt", unavailable)
        refused = api.post("/scheduled-starts", echo_start(business_request_id="full"))
        assert refused.status_code == 429, refused.text
        assert len(calls) == 1
