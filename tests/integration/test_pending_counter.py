"""The pending-start counter the exact quota reads stays equal to a count of the rows
through every path that moves a start into or out of pending (SPEC QA-1; migration 0008):
create (single and batch), dispatch, cancel, reschedule, dispatch failure, claims whose
lease expires, claims given back, deletes; occurrences of schedules never count.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.pending_counts import FOLD_AFTER_ROWS
from punctual.domain.runs import DefinitionState
from punctual.usecases.running.definitions import set_lifecycle
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.conftest import make_settings
from tests.support.api import Api, echo_start, in_process, live_worker, member_api, register_demo

TENANT = "acme"


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[tuple[bootstrap.Punctual, Api]]:
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        register_demo(system)
        live_worker(system)
        with in_process(system) as client:
            yield system, member_api(system, client)
    finally:
        system.close()


def counted(system: bootstrap.Punctual) -> dict[str, int]:
    """The truth: pending one-off starts of the tenant per class, counted row by row."""
    s = t.starts.c
    query = (
        sa.select(s.workload_class, sa.func.count())
        .where(
            s.tenant == TENANT,
            s.schedule_id.is_(None),
            s.state.in_(["scheduled", "dispatching"]),
        )
        .group_by(s.workload_class)
    )
    with system.store.engine.connect() as conn:
        return {str(cls): int(n) for cls, n in conn.execute(query)}


def kept(system: bootstrap.Punctual) -> dict[str, int]:
    with system.store.transaction() as tx:
        return tx.starts.pending_by_class(TENANT)


def assert_exact(system: bootstrap.Punctual, expected_total: int) -> None:
    truth = counted(system)
    assert sum(truth.values()) == expected_total, truth
    assert kept(system) == truth


def now_iso(seconds: float = 0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def create(api: Api, **overrides: Any) -> dict[str, Any]:
    response = api.post("/scheduled-starts", echo_start(**overrides))
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def create_due(api: Api) -> dict[str, Any]:
    """A start due at once, sent again with a new now if a loaded machine delayed it past
    the allowed skew (``Api.create_due``)."""
    response = api.create_due(echo_start())
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def test_create_dispatch_cancel_reschedule(world: tuple[bootstrap.Punctual, Api]) -> None:
    system, api = world
    later = [create(api) for _ in range(3)]
    create(api, workload_class="batch")
    due = [create_due(api) for _ in range(2)]
    assert_exact(system, 6)
    items = [
        {"idempotency_key": f"b-{n}", **echo_start(workload_class="interactive")} for n in range(4)
    ]
    answers = api.client.post(
        api.path("/scheduled-starts/batch"), headers=api.headers(), json={"items": items}
    ).json()["items"]
    assert [a["status"] for a in answers] == [201] * 4
    assert_exact(system, 10)
    report = dispatch_due(system.services, "runner-counter", 10)
    assert sorted(report.dispatched) == sorted(s["id"] for s in due), report
    assert_exact(system, 8)
    first = later[0]
    canceled = api.post(f"/scheduled-starts/{first['id']}/cancel", {"version": first["version"]})
    assert canceled.status_code == 200, canceled.text
    assert_exact(system, 7)
    second = later[1]
    moved = api.post(
        f"/scheduled-starts/{second['id']}/reschedule",
        {"version": second["version"], "start_at": now_iso(7200)},
    )
    assert moved.status_code == 200, moved.text
    assert_exact(system, 7)
    assert kept(system) == {"standard": 2, "batch": 1, "interactive": 4}


def test_a_failed_dispatch_leaves_pending(world: tuple[bootstrap.Punctual, Api]) -> None:
    system, api = world
    doomed = create_due(api)
    create(api)
    assert_exact(system, 2)
    set_lifecycle(system.services, "echo", "1", DefinitionState.DEPRECATED)
    report = dispatch_due(system.services, "runner-counter", 10)
    assert report.failed == [doomed["id"]], report
    assert_exact(system, 1)


def test_claims_expired_and_given_back_stay_pending(world: tuple[bootstrap.Punctual, Api]) -> None:
    system, api = world
    for _ in range(3):
        create_due(api)
    now = system.services.clock.now()
    with system.store.transaction() as tx:
        claims = tx.starts.claim_due(now, 10, "runner-a", 0.001)
    assert len(claims) == 3
    assert_exact(system, 3)  # dispatching is pending
    later = now + timedelta(seconds=5)
    with system.store.transaction() as tx:  # the leases ran out: another runner takes them
        taken = tx.starts.claim_due(later, 10, "runner-b", 30)
    assert len(taken) == 3
    assert_exact(system, 3)
    with system.store.transaction() as tx:
        tx.starts.release_claims([c.token for c in taken[:2]], later)
    assert_exact(system, 3)


def test_deleting_starts_and_schedules_occurrences(world: tuple[bootstrap.Punctual, Api]) -> None:
    system, api = world
    gone = create(api)
    create(api)
    schedule = api.post(
        "/schedules",
        {
            "name": "every-minute",
            "workflow": "echo",
            "input": {"message": "tick"},
            "spec": {"interval_ms": 60_000},
            "overlap": "skip",
            "missed": "catch_up",
        },
    )
    assert schedule.status_code == 201, schedule.text
    with system.store.engine.begin() as conn:
        conn.execute(t.starts.delete().where(t.starts.c.id == gone["id"]))
        conn.execute(
            t.starts.update()
            .where(t.starts.c.schedule_id.is_not(None))
            .values(state="scheduled", version=t.starts.c.version + 1)
        )
    assert_exact(system, 1)


def test_a_tenants_deltas_are_folded_and_stay_exact(
    world: tuple[bootstrap.Punctual, Api],
) -> None:
    system, api = world
    started = [create(api) for _ in range(FOLD_AFTER_ROWS + 5)]
    for start in started[:10]:
        response = api.post(f"/scheduled-starts/{start['id']}/cancel", {"version": 1})
        assert response.status_code == 200
    assert_exact(system, FOLD_AFTER_ROWS - 5)
    with system.store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(sa.func.count()).where(t.pending_start_counts.c.tenant == TENANT)
        ).scalar_one()
    # 79 deltas were written; the creates' quota reads folded them along the way.
    assert rows <= FOLD_AFTER_ROWS
    create(api)
    assert_exact(system, FOLD_AFTER_ROWS - 4)


def test_the_migration_counts_what_was_pending_before(database_url: str, tmp_path: Path) -> None:
    """Upgrading a database that already has pending starts initialises the counter."""
    from alembic import command

    from punctual.adapters.stores.sql import migrate

    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        register_demo(system)
        with in_process(system) as client:
            api = member_api(system, client)
            for _ in range(3):
                create(api)
            create(api, workload_class="batch")
        with system.store.engine.begin() as conn:
            command.downgrade(migrate._config(conn), "0007")
        with system.store.engine.begin() as conn:
            command.upgrade(migrate._config(conn), "head")
        assert_exact(system, 4)
        assert kept(system) == {"standard": 3, "batch": 1}
    finally:
        system.close()


def test_counter_rows_are_per_tenant(world: tuple[bootstrap.Punctual, Api]) -> None:
    system, api = world
    create(api)
    other = member_api(system, api.client, tenant="other")
    assert isinstance(other.client, TestClient)
    other.post("/scheduled-starts", echo_start())
    assert_exact(system, 1)
    with system.store.transaction() as tx:
        assert tx.starts.pending_by_class("other") == {"standard": 1}
