"""Quota admission of new starts on both stores (SPEC QA-1, QA-2, QA-3; API.md ``[quota]``).

* The local (best-effort) controller admits up to ``max_pending_starts`` and answers
  ``429 quota_exceeded`` with ``limit``, ``count`` and ``scope`` after that; per-class
  limits answer with scope ``workload_class``; canceled and dispatched starts free quota;
  occurrences of schedules never count against the start quota.
* Why the local controller is only best-effort across processes, shown deterministically:
  two systems on one PostgreSQL database (= two API processes, each with its own
  ``LocalQuota``) both count before either inserts, through a ``threading.Barrier``
  injected at ``LocalQuota``'s ``after_count`` seam, so both are admitted over a limit
  of 1. The same interleaving attempted with ``PostgresQuota`` cannot happen: the second
  create waits on the tenant's advisory lock until the first commits, then sees count 1.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.quota import LocalQuota, PostgresQuota
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.store import SqlTx
from punctual.domain.permissions import Principal, Role
from punctual.errors import PunctualError, QuotaExceeded
from punctual.ports.records import WorkerRecord
from punctual.ports.store import Tx
from punctual.usecases.recurring.generation import generate
from punctual.usecases.running.definitions import register_worker
from punctual.usecases.scheduled import starts as start_cases
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.usecases.tenancy import identity
from tests.conftest import make_settings
from tests.support.api import Api, echo_start, in_process, member_api, register_demo

BARRIER_SECONDS = 10.0
LOCK_WAIT_SECONDS = 10.0


# --------------------------------------------------------------------------- helpers


def build(database_url: str, tmp_path: Path, **overrides: Any) -> bootstrap.Punctual:
    return bootstrap.build(make_settings(database_url, tmp_path, **overrides))


@pytest.fixture
def limited(database_url: str, tmp_path: Path) -> Iterator[Callable[..., bootstrap.Punctual]]:
    """Systems with the given tenant defaults (the local profile's controller)."""
    built: list[bootstrap.Punctual] = []

    def make(**tenant_defaults: Any) -> bootstrap.Punctual:
        system = build(database_url, tmp_path, tenant_defaults=tenant_defaults)
        built.append(system)
        register_demo(system)
        return system

    yield make
    for system in built:
        system.close()


def create(api: Api, **overrides: Any) -> Any:
    body = echo_start(business_request_id=f"quota-{secrets.token_hex(3)}", **overrides)
    return api.post("/scheduled-starts", body)


def assert_quota_exceeded(
    response: Any, limit: int, count: int, scope: str = "tenant"
) -> dict[str, Any]:
    assert response.status_code == 429, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == "quota_exceeded", error
    assert error["details"]["limit"] == limit, error
    assert error["details"]["count"] == count, error
    assert error["details"]["scope"] == scope, error
    return error


def pending_rows(system: bootstrap.Punctual, tenant: str) -> int:
    query = sa.select(sa.func.count()).where(
        t.starts.c.tenant == tenant,
        t.starts.c.state.in_(["scheduled", "dispatching"]),
        t.starts.c.schedule_id.is_(None),
    )
    with system.store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def live_worker(system: bootstrap.Punctual) -> None:
    """The demo definitions loaded by a live (just heartbeated) worker, without running one."""
    from punctual.worker.definitions import declared_definitions
    from punctual.workflows import load_app

    app = load_app("punctual.demo:app")
    now = system.services.clock.now()
    record = WorkerRecord(
        id=f"wrk_live_{secrets.token_hex(3)}",
        engine="local",
        host="test",
        task_queues=["standard"],
        loaded=[(d.name, d.version, d.artifact) for d in app.definitions],
        slots=1,
        started_at=now,
        heartbeat_at=now,
        stopped_at=None,
    )
    register_worker(system.services, record, declared_definitions(app))


# --------------------------------------------------------------------------- tenant limit


def test_local_profile_installs_the_best_effort_controller(
    limited: Callable[..., bootstrap.Punctual],
) -> None:
    system = limited()
    assert isinstance(system.services.quota, LocalQuota)
    assert system.services.quota.exact is False


def test_local_controller_admits_up_to_the_limit_then_answers_429(
    limited: Callable[..., bootstrap.Punctual],
) -> None:
    system = limited(max_pending_starts=3)
    with in_process(system) as client:
        api = member_api(system, client)
        for number in range(3):
            response = create(api)
            assert response.status_code == 201, (number, response.text)
        refused = create(api)
        error = assert_quota_exceeded(refused, limit=3, count=3)
        assert "3" in error["message"]
        # Refusals are not recorded and nothing was inserted.
        assert pending_rows(system, "acme") == 3
        listed = api.get("/scheduled-starts", limit=100).json()["items"]
        assert len(listed) == 3
        # Another tenant has its own count.
        other = member_api(system, client, tenant="globex", subject="bob")
        assert create(other).status_code == 201


def test_a_refused_create_retried_with_the_same_key_is_decided_again(
    limited: Callable[..., bootstrap.Punctual],
) -> None:
    """429 is not recorded (OS-4): the same request succeeds once quota is free."""
    system = limited(max_pending_starts=1)
    with in_process(system) as client:
        api = member_api(system, client)
        first = create(api)
        assert first.status_code == 201, first.text
        body = echo_start(business_request_id="retry-me")
        refused = api.post("/scheduled-starts", body, key="quota-retry-key")
        assert_quota_exceeded(refused, limit=1, count=1)
        start = first.json()
        canceled = api.post(
            f"/scheduled-starts/{start['id']}/cancel", {"version": start["version"]}
        )
        assert canceled.status_code == 200, canceled.text
        again = api.post("/scheduled-starts", body, key="quota-retry-key")
        assert again.status_code == 201, again.text
        replay = api.post("/scheduled-starts", body, key="quota-retry-key")
        assert replay.status_code == 201
        assert replay.json()["id"] == again.json()["id"]


def test_per_class_limit_answers_with_scope_workload_class(
    limited: Callable[..., bootstrap.Punctual],
) -> None:
    system = limited(max_pending_by_class={"batch": 2})
    with in_process(system) as client:
        api = member_api(system, client)
        for _ in range(2):
            assert create(api, workload_class="batch").status_code == 201
        error = assert_quota_exceeded(
            create(api, workload_class="batch"), limit=2, count=2, scope="workload_class"
        )
        assert error["details"]["workload_class"] == "batch"
        # Other classes are limited only by the tenant's overall limit.
        for _ in range(3):
            assert create(api, workload_class="standard").status_code == 201
        assert create(api, workload_class="interactive").status_code == 201
        assert pending_rows(system, "acme") == 6


def test_the_tenant_limit_counts_every_class(
    limited: Callable[..., bootstrap.Punctual],
) -> None:
    system = limited(max_pending_starts=3, max_pending_by_class={"batch": 5})
    with in_process(system) as client:
        api = member_api(system, client)
        assert create(api, workload_class="standard").status_code == 201
        assert create(api, workload_class="interactive").status_code == 201
        assert create(api, workload_class="batch").status_code == 201
        # The class has room (1 of 5), the tenant does not (3 of 3): the tenant scope answers.
        assert_quota_exceeded(create(api, workload_class="batch"), limit=3, count=3)


def test_canceled_and_dispatched_starts_free_quota(
    limited: Callable[..., bootstrap.Punctual],
) -> None:
    system = limited(max_pending_starts=2)
    live_worker(system)
    with in_process(system) as client:
        api = member_api(system, client)
        later = create(api)
        assert later.status_code == 201, later.text
        soon = api.create_due(echo_start(business_request_id="quota-soon"))
        assert soon.status_code == 201, soon.text
        assert_quota_exceeded(create(api), limit=2, count=2)

        # Canceling frees one slot.
        start = later.json()
        canceled = api.post(
            f"/scheduled-starts/{start['id']}/cancel", {"version": start["version"]}
        )
        assert canceled.status_code == 200, canceled.text
        replacement = create(api)
        assert replacement.status_code == 201, replacement.text
        assert_quota_exceeded(create(api), limit=2, count=2)

        # Dispatching frees one slot too.
        report = dispatch_due(system.services, "runner-quota", 10)
        assert report.dispatched == [soon.json()["id"]], report
        got = api.get(f"/scheduled-starts/{soon.json()['id']}").json()
        assert got["state"] == "dispatched", got
        assert create(api).status_code == 201
        assert_quota_exceeded(create(api), limit=2, count=2)
        assert pending_rows(system, "acme") == 2


def test_failed_starts_free_quota(limited: Callable[..., bootstrap.Punctual]) -> None:
    """A terminal ``failed`` start is not pending (QA-1 counts scheduled and dispatching)."""
    from punctual.domain.runs import DefinitionState
    from punctual.usecases.running.definitions import set_lifecycle

    system = limited(max_pending_starts=1)
    live_worker(system)
    with in_process(system) as client:
        api = member_api(system, client)
        doomed = api.create_due(echo_start(business_request_id="quota-doomed"))
        assert doomed.status_code == 201
        assert_quota_exceeded(create(api), limit=1, count=1)
        set_lifecycle(system.services, "echo", "1", DefinitionState.DEPRECATED)
        report = dispatch_due(system.services, "runner-quota", 10)
        assert report.failed == [doomed.json()["id"]], report
        set_lifecycle(system.services, "echo", "1", DefinitionState.ACTIVE)
        assert create(api).status_code == 201


def test_occurrences_of_schedules_do_not_count_against_the_start_quota(
    limited: Callable[..., bootstrap.Punctual],
) -> None:
    system = limited(max_pending_starts=1)
    with in_process(system) as client:
        api = member_api(system, client)
        schedule = api.post(
            "/schedules",
            {
                "name": "every-second",
                "workflow": "echo",
                "input": {"message": "tick"},
                "spec": {"interval_ms": 1000},
                "overlap": "allow_all",
                "missed": "skip",
                "workload_class": "standard",
            },
        )
        assert schedule.status_code == 201, schedule.text
        generated = generate(system.services, 10)
        assert generated.generated >= 1, generated
        occurrences = api.get(f"/schedules/{schedule.json()['id']}/occurrences").json()["items"]
        pending = [o for o in occurrences if o["state"] == "scheduled"]
        assert pending, occurrences

        # The pending occurrences take no start quota: one start is admitted, the next is
        # refused with a count of 1 (the start), not 1 + occurrences.
        assert create(api).status_code == 201
        assert_quota_exceeded(create(api), limit=1, count=1)
        assert pending_rows(system, "acme") == 1


def test_max_schedules_is_a_separate_limit(limited: Callable[..., bootstrap.Punctual]) -> None:
    system = limited(max_pending_starts=1, max_schedules=1)
    with in_process(system) as client:
        api = member_api(system, client)
        assert create(api).status_code == 201
        body = {
            "workflow": "echo",
            "input": {"message": "tick"},
            "spec": {"interval_ms": 60_000},
            "overlap": "skip",
            "missed": "skip",
            "workload_class": "standard",
        }
        # A full start quota does not stop a schedule ...
        first = api.post("/schedules", {"name": "one", **body})
        assert first.status_code == 201, first.text
        # ... and the schedule limit answers with its own scope.
        assert_quota_exceeded(
            api.post("/schedules", {"name": "two", **body}), limit=1, count=1, scope="schedules"
        )


# --------------------------------------------------------------------------- across processes


def _principal(system: bootstrap.Punctual, tenant: str) -> Principal:
    identity.ensure_member_token(system.services, tenant, "alice", Role.MEMBER)
    return Principal(tenant=tenant, subject="alice", role=Role.MEMBER)


def _command(number: int) -> start_cases.CreateStart:
    return start_cases.CreateStart(
        workflow="echo",
        input={"message": f"race-{number}"},
        business_request_id=f"race-{number}",
        start_at=datetime.now(UTC) + timedelta(hours=1),
        workload_class="standard",
    )


def _create_directly(
    system: bootstrap.Punctual, principal: Principal, number: int
) -> tuple[str, str | dict[str, Any]]:
    """The create use case, as one API request runs it: ('admitted', id) or ('refused', details)."""
    mutation = start_cases.create(system.services, principal, _command(number))
    try:
        outcome = system.mutations.run(None, mutation)
    except QuotaExceeded as exc:
        return "refused", dict(exc.details)
    return "admitted", str(outcome.body["id"])


@pytest.fixture
def two_processes(pg_url: str, tmp_path: Path) -> Iterator[tuple[bootstrap.Punctual, ...]]:
    """Two assembled systems on one PostgreSQL database: two API processes' worth of state."""
    settings = make_settings(pg_url, tmp_path, tenant_defaults={"max_pending_starts": 1})
    first = bootstrap.build(settings)
    second = bootstrap.build(settings)
    try:
        register_demo(first)
        yield first, second
    finally:
        first.close()
        second.close()


def _both(
    systems: tuple[bootstrap.Punctual, ...], principal: Principal, numbers: tuple[int, int]
) -> list[tuple[str, str | dict[str, Any]]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures: list[Future[tuple[str, str | dict[str, Any]]]] = [
            pool.submit(_create_directly, system, principal, number)
            for system, number in zip(systems, numbers, strict=True)
        ]
        return [f.result(timeout=BARRIER_SECONDS * 3) for f in futures]


def _race(
    systems: tuple[bootstrap.Punctual, ...], principal: Principal
) -> list[tuple[str, str | dict[str, Any]]]:
    """Both systems create at the same moment (released together by a barrier)."""
    gate = threading.Barrier(len(systems), timeout=BARRIER_SECONDS)

    def gated(system: bootstrap.Punctual, number: int) -> tuple[str, str | dict[str, Any]]:
        gate.wait()
        return _create_directly(system, principal, number)

    with ThreadPoolExecutor(max_workers=len(systems)) as pool:
        futures = [pool.submit(gated, system, n) for n, system in enumerate(systems, 1)]
        return [f.result(timeout=BARRIER_SECONDS * 3) for f in futures]


@pytest.mark.postgres
def test_local_quota_over_admits_across_two_processes_on_postgres(
    two_processes: tuple[bootstrap.Punctual, bootstrap.Punctual],
) -> None:
    """QA-2: documented as not exact across processes. Both count 0 before either inserts."""
    first, second = two_processes
    barrier = threading.Barrier(2, timeout=BARRIER_SECONDS)

    def both_counted() -> None:
        """Between count and insert: wait until the other process has counted too."""
        barrier.wait()

    first.services.quota = LocalQuota(after_count=both_counted)
    second.services.quota = LocalQuota(after_count=both_counted)
    principal = _principal(first, "acme")

    outcomes = _both((first, second), principal, (1, 2))

    assert not barrier.broken
    assert [kind for kind, _ in outcomes] == ["admitted", "admitted"], outcomes
    # The limitation, made visible: 2 pending starts against a limit of 1.
    assert pending_rows(first, "acme") == 2
    # Once both are in, each process refuses the next one with the true count.
    first.services.quota = LocalQuota()
    assert _create_directly(first, principal, 3) == (
        "refused",
        {"limit": 1, "count": 2, "scope": "tenant"},
    )


def test_local_quota_is_exact_within_one_sqlite_database(sqlite_url: str, tmp_path: Path) -> None:
    """On SQLite writers are serialized (BEGIN IMMEDIATE), so even two systems on one file
    cannot both count before either inserts: exactly one of two racing creates wins."""
    settings = make_settings(sqlite_url, tmp_path, tenant_defaults={"max_pending_starts": 1})
    first = bootstrap.build(settings)
    second = bootstrap.build(settings)
    try:
        register_demo(first)
        for round_number in range(10):
            principal = _principal(first, f"tenant-{round_number}")
            outcomes = _race((first, second), principal)
            kinds = sorted(kind for kind, _ in outcomes)
            assert kinds == ["admitted", "refused"], (round_number, outcomes)
            refused = next(details for kind, details in outcomes if kind == "refused")
            assert refused == {"limit": 1, "count": 1, "scope": "tenant"}
            assert pending_rows(first, f"tenant-{round_number}") == 1
    finally:
        first.close()
        second.close()


class _PausingQuota:
    """``PostgresQuota`` with a hook at the same place as ``LocalQuota.after_count``: after
    the lock and the count, before the insert, inside the inserting transaction."""

    one_trip = None
    """The hook sits between count and insert, which only the transaction path has."""

    def __init__(self, inner: PostgresQuota, after_count: Callable[[], None]) -> None:
        self.exact = inner.exact
        self._inner = inner
        self._after_count = after_count

    def admit_starts(
        self,
        tx: Tx,
        tenant: str,
        workload_classes: Sequence[str],
        max_pending: int,
        max_pending_by_class: Mapping[str, int],
    ) -> list[PunctualError | None]:
        answers = self._inner.admit_starts(
            tx, tenant, workload_classes, max_pending, max_pending_by_class
        )
        self._after_count()
        return answers


def _postgres_quota() -> PostgresQuota:
    def connection_of(tx: Tx) -> sa.Connection:
        assert isinstance(tx, SqlTx)
        return tx.conn

    return PostgresQuota(connection_of)


def _advisory_waiters(system: bootstrap.Punctual) -> int:
    query = sa.text(
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
        "WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()"
    )
    with system.store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


@pytest.mark.postgres
def test_postgres_quota_makes_the_second_process_wait_then_refuses_it(
    two_processes: tuple[bootstrap.Punctual, bootstrap.Punctual],
) -> None:
    """The interleaving that over-admits with LocalQuota, attempted with PostgresQuota: the
    first create has counted (and holds the tenant's advisory lock); the second cannot count
    until the first has inserted and committed, and then sees count 1."""
    first, second = two_processes
    counted = threading.Event()
    release = threading.Event()

    def hold() -> None:
        counted.set()
        assert release.wait(BARRIER_SECONDS), "the test never released the first create"

    first.services.quota = _PausingQuota(_postgres_quota(), hold)
    second.services.quota = _postgres_quota()
    principal = _principal(first, "acme")

    with ThreadPoolExecutor(max_workers=2) as pool:
        a = pool.submit(_create_directly, first, principal, 1)
        assert counted.wait(BARRIER_SECONDS), "the first create never counted"
        b = pool.submit(_create_directly, second, principal, 2)
        # The second is parked on the advisory lock (not merely slow): PostgreSQL says so.
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while _advisory_waiters(first) < 1:
            assert not b.done(), f"the second create did not wait for the lock: {b.result()}"
            assert time.monotonic() < deadline, "the second create never waited on the lock"
            time.sleep(0.02)
        release.set()
        outcome_a = a.result(timeout=BARRIER_SECONDS)
        outcome_b = b.result(timeout=BARRIER_SECONDS)

    assert outcome_a[0] == "admitted", outcome_a
    assert outcome_b == ("refused", {"limit": 1, "count": 1, "scope": "tenant"})
    assert pending_rows(first, "acme") == 1


@pytest.mark.postgres
def test_postgres_quota_admits_exactly_one_of_two_racing_processes_every_round(
    two_processes: tuple[bootstrap.Punctual, bootstrap.Punctual],
) -> None:
    first, second = two_processes
    for system in (first, second):
        system.services.quota = _postgres_quota()
    for round_number in range(20):
        tenant = f"race-{round_number}"
        outcomes = _race((first, second), _principal(first, tenant))
        assert sorted(kind for kind, _ in outcomes) == ["admitted", "refused"], outcomes
        assert pending_rows(first, tenant) == 1


@pytest.mark.postgres
def test_postgres_controller_is_built_for_a_postgres_store_only(
    pg_url: str, sqlite_url: str, tmp_path: Path
) -> None:
    system = build(pg_url, tmp_path, quota={"controller": "postgres"})
    try:
        assert isinstance(system.services.quota, PostgresQuota)
        assert system.services.quota.exact is True
    finally:
        system.close()
    with pytest.raises(PunctualError, match=r"quota\.controller"):
        build(sqlite_url, tmp_path, quota={"controller": "postgres"})
