"""Temporal's own skips become skipped occurrences (RS-4 under the Temporal Schedules driver).

On a real ``temporal server start-dev`` and PostgreSQL: a 1 s schedule whose run lasts
longer than the interval, under ``overlap: skip``, makes Temporal skip the fire times that
come while the previous fire workflow lives. The sweep (``record_driver_skips``, which the
reconciliation sweep runs) records each of them once as ``skipped`` with reason
``overlap``, never ahead of a fire that has not inserted its occurrence yet; the fired
ones are one run each; a second sweep over the same fire times adds nothing; and the fire
times of a paused interval are not recorded at all.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from punctual import bootstrap
from punctual.ports.driver import SkipMark
from punctual.usecases.firing.driver_skips import MARGIN, DriverSkipsReport, record_driver_skips
from punctual.usecases.firing.reconcile import reconcile
from tests.api.test_starts_on_temporal import temporal_settings
from tests.support.api import Api, in_process, member_api, register_demo
from tests.support.drivers import poll
from tests.support.drivers import temporal_driver_of as driver_of
from tests.support.temporal import NAMESPACE

pytestmark = [pytest.mark.temporal, pytest.mark.postgres]

APP_REF = "punctual.demo:app"
WAIT_SECONDS = 30.0


@pytest.fixture
def system(pg_url: str, tmp_path: Path, temporal_address: str) -> Iterator[bootstrap.Punctual]:
    settings = temporal_settings(pg_url, tmp_path, temporal_address, f"skp-{uuid.uuid4().hex[:8]}")
    built = bootstrap.build(settings.model_copy(update={"driver": "temporal_schedules"}))
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def api(system: bootstrap.Punctual) -> Iterator[Api]:
    register_demo(system)
    with in_process(system) as client:
        yield member_api(system, client)


class FrozenClock:
    """The sweep's own clock, so that two sweeps look at the same fire times; the runner
    keeps the real one."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


def sweep(system: bootstrap.Punctual, at: datetime) -> DriverSkipsReport:
    return record_driver_skips(replace(system.services, clock=FrozenClock(at)))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def every_second(api: Api, name: str, workflow: str, payload: dict[str, Any]) -> dict[str, Any]:
    body = {
        "name": name,
        "workflow": workflow,
        "input": payload,
        "spec": {"interval_ms": 1000},
        "overlap": "skip",
        "missed": "skip",
        "misfire_grace_ms": 10_000,
        "enabled": True,
        "version_policy": "active_at_fire",
        "workload_class": "standard",
    }
    response = api.post("/schedules", body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def occurrences(api: Api, schedule_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get(
        f"/schedules/{schedule_id}/occurrences", limit=100
    ).json()["items"]
    return items


def followed_through(api: Api, schedule_id: str, count: int) -> list[dict[str, Any]]:
    items = occurrences(api, schedule_id)
    return items if sum(o["follow_through"] is not None for o in items) >= count else []


def dispatched(api: Api, schedule_id: str, count: int) -> list[dict[str, Any]]:
    items = occurrences(api, schedule_id)
    return items if sum(o["state"] == "dispatched" for o in items) >= count else []


def mark_of(system: bootstrap.Punctual, schedule_id: str) -> SkipMark:
    with system.store.transaction(readonly=True) as tx:
        return tx.schedule_sync.skip_marks([schedule_id])[schedule_id]


def temporal_times(
    system: bootstrap.Punctual, schedule_id: str, after: datetime, through: datetime
) -> list[datetime]:
    """What Temporal's own spec yields in ``(after, through]``."""
    found = driver_of(system).matching_times(schedule_id, after, through)
    return [t for t in found if after < t <= through]


def overlap_skips_counted(address: str, schedule_id: str) -> int:
    """Temporal's own count of the fire times it skipped for overlap."""

    async def described() -> int:
        client = await Client.connect(address, namespace=NAMESPACE)
        description = await client.get_schedule_handle(schedule_id).describe()
        return description.info.num_actions_skipped_overlap

    return asyncio.run(described())


def test_overlap_skips_are_recorded_once_each_never_ahead_of_a_fire_in_flight(
    system: bootstrap.Punctual, api: Api, temporal_address: str
) -> None:
    created = every_second(api, f"long-{uuid.uuid4().hex[:6]}", "sleep", {"seconds": 1.5})
    schedule_id = created["id"]
    driver = driver_of(system)

    # No fire worker yet: Temporal's first fire waits for one, and Temporal skips the
    # times that come meanwhile. Nothing is decided while that fire has no occurrence.
    def running_action() -> bool:
        view = driver.describe_many([schedule_id])[schedule_id]
        return any(action.running for action in view.actions)

    poll("Temporal's first action", running_action)
    # Long enough for the sweep's margin to reach past two of Temporal's skips.
    time.sleep(2.0 + MARGIN.total_seconds())
    assert overlap_skips_counted(temporal_address, schedule_id) >= 2
    [first] = [a.scheduled_at for a in driver.describe_many([schedule_id])[schedule_id].actions]
    early = sweep(system, datetime.now(UTC))
    assert (early.overlap, early.missed) == (0, 0)
    assert occurrences(api, schedule_id) == []
    assert mark_of(system, schedule_id).checked_through < first

    system.start_worker(APP_REF)
    system.start_runner()
    poll("a second fire dispatched", lambda: dispatched(api, schedule_id, 2))
    # The first fire lived at least 7 s: the sweep's margin must reach past 6 of them.
    reach = first + timedelta(seconds=6) + MARGIN
    time.sleep(max(0.0, (reach - datetime.now(UTC)).total_seconds()))
    now = datetime.now(UTC)
    reconcile(replace(system.services, clock=FrozenClock(now)))  # the sweep records them
    mark = mark_of(system, schedule_id)
    assert first + timedelta(seconds=6) <= mark.checked_through <= now - MARGIN

    items = occurrences(api, schedule_id)
    instants = [at(o["occurrence_at"]) for o in items]
    assert len(instants) == len(set(instants)), "each fire time once"
    decided = sorted(i for i in instants if i <= mark.checked_through)
    # Temporal's decisions begin when its copy was created (just after the record).
    born = driver.describe_many([schedule_id])[schedule_id].created_at
    assert born is not None
    expected = temporal_times(system, schedule_id, born, mark.checked_through)
    assert decided == expected, "every fire time up to the mark is fired or recorded, once"
    skipped = [o for o in items if o["state"] == "skipped"]
    # The first fire waited 7 s or more for its worker, then ran 1.5 s: at least 6 skips.
    assert len(skipped) >= 6
    assert {o["reason"] for o in skipped} == {"overlap"}
    for occurrence in skipped:
        assert api.get(f"/runs/{occurrence['run_id']}").status_code == 404, "a skip has no run"
    ran = [o for o in items if o["state"] == "dispatched"]
    run_ids = [o["run_id"] for o in ran]
    assert len(run_ids) == len(set(run_ids)) >= 2, "one run per fired occurrence"
    for occurrence in ran:
        run = api.get(f"/runs/{occurrence['run_id']}").json()
        assert run["origin"]["id"] == occurrence["id"]

    # A second sweep over the same fire times (its mark set back, as if it had never seen
    # the first one) finds every row and adds nothing.
    with system.store.transaction() as tx:
        tx.schedule_sync.record_skip_mark(
            SkipMark(schedule_id, at(created["created_at"]), mark.schedule_version)
        )
    again = sweep(system, now)
    assert (again.overlap, again.missed, again.dst_skipped) == (0, 0, 0)
    still = [o for o in occurrences(api, schedule_id) if o["state"] == "skipped"]
    assert {o["id"] for o in still} == {o["id"] for o in skipped}

    deleted = api.delete(f"/schedules/{schedule_id}", version=created["version"])
    assert deleted.status_code == 204, deleted.text


def test_the_fire_times_of_a_paused_interval_are_not_recorded(
    system: bootstrap.Punctual, api: Api
) -> None:
    system.start_worker(APP_REF)
    system.start_runner()
    created = every_second(api, f"paused-{uuid.uuid4().hex[:6]}", "echo", {"message": "hi"})
    schedule_id = created["id"]
    poll("a fire followed through", lambda: followed_through(api, schedule_id, 1))
    sweep(system, datetime.now(UTC))

    paused = api.post(f"/schedules/{schedule_id}/pause", {"version": created["version"]})
    assert paused.status_code == 200, paused.text
    paused_at = at(paused.json()["updated_at"])
    time.sleep(2.5)
    during = sweep(system, datetime.now(UTC))
    assert (during.overlap, during.missed) == (0, 0)
    resumed = api.post(f"/schedules/{schedule_id}/resume", {"version": paused.json()["version"]})
    assert resumed.status_code == 200, resumed.text
    resumed_at = at(resumed.json()["updated_at"])
    poll(
        "a fire after the resume",
        lambda: any(at(o["occurrence_at"]) > resumed_at for o in occurrences(api, schedule_id)),
    )
    time.sleep(max(0.0, (resumed_at + MARGIN - datetime.now(UTC)).total_seconds()) + 1.0)
    sweep(system, datetime.now(UTC))
    assert mark_of(system, schedule_id).checked_through > resumed_at

    silent = temporal_times(system, schedule_id, paused_at, resumed_at)
    assert len(silent) >= 2, "the paused interval had fire times"
    inside = [
        o for o in occurrences(api, schedule_id) if paused_at < at(o["occurrence_at"]) < resumed_at
    ]
    assert inside == [], "nothing fired and nothing was recorded while paused"

    deleted = api.delete(f"/schedules/{schedule_id}", version=resumed.json()["version"])
    assert deleted.status_code == 204, deleted.text
