"""Switching the firing driver on an existing database, both ways (SPEC CR-6, CR-7).

On PostgreSQL with the Temporal engine and a real ``temporal server start-dev``: a store
fired by one driver is opened again under the other. To ``temporal_schedules`` the
startup sweep ensures every existing schedule (paused exactly when disabled); back to
``sql`` the runner's one-shot sweep removes the Temporal Schedules this installation
marked (never an unmarked one), terminates the fire workflows they left open (never
another's) and forgets the sync records, and the generation pass fires again from each
schedule's cursor. Across either switch no occurrence_at fires
twice and every occurrence is one run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleSpec,
    ScheduleState,
)

from punctual import bootstrap
from punctual.adapters.drivers.temporal_schedules.driver import TemporalSchedulesDriver
from punctual.adapters.drivers.temporal_schedules.messages import (
    FIRE_WORKFLOW,
    WORKFLOW_ID_PREFIX,
)
from punctual.ports.driver import SyncRecord, SyncState
from punctual.ports.engine import EngineUnavailable
from punctual.usecases.firing import driver_switch
from punctual.usecases.kernel.context import SqlDriver
from punctual.usecases.recurring.generation import LOOKAHEAD
from tests.support.api import Api
from tests.support.drivers import (
    SQL,
    TEMPORAL_SCHEDULES,
    Firing,
    assert_each_instant_fired_once,
    create_schedule,
    every_second,
    fired,
    firing,
    new_prefix,
    occurrences,
    poll,
    runs,
    temporal_driver_of,
    temporal_settings,
)
from tests.support.temporal import NAMESPACE

pytestmark = [pytest.mark.temporal, pytest.mark.postgres]

YEARLY = {"cron": "0 0 1 1 *", "time_zone": "UTC"}
TOKYO = {"cron": "0 9,17 * * 1-5", "time_zone": "Asia/Tokyo"}


def at(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp)


def followed_fires(fires: Firing, schedule_id: str, after: datetime | None = None) -> int:
    """Fires of the spec (after ``after``) whose follow-through is recorded."""
    return sum(
        1
        for o in fired(occurrences(fires.api, schedule_id))
        if o["follow_through"] is not None and (after is None or at(o["occurrence_at"]) > after)
    )


def stop_and_settle(fires: Firing, schedule: dict[str, Any]) -> list[dict[str, Any]]:
    """Pause the schedule, then wait until each of its occurrences has come to an end."""
    api = fires.api
    current = api.get(f"/schedules/{schedule['id']}").json()
    paused = api.post(f"/schedules/{schedule['id']}/pause", {"version": current["version"]})
    assert paused.status_code == 200, paused.text

    def ended() -> list[dict[str, Any]] | None:
        items = occurrences(api, schedule["id"])
        done = all(
            o["follow_through"] is not None or o["state"] in ("skipped", "canceled") for o in items
        )
        return items if done else None

    return poll("every occurrence followed through", ended)


def assert_one_run_per_occurrence(api: Api, schedule_id: str, items: list[dict[str, Any]]) -> None:
    """Each occurrence that ran is one completed run, and no instant has two runs."""
    spec_fires = fired(items)
    assert all(o["state"] == "dispatched" for o in spec_fires), spec_fires
    of_schedule = [r for r in runs(api) if r["origin"].get("schedule_id") == schedule_id]
    assert sorted(r["id"] for r in of_schedule) == sorted(o["run_id"] for o in spec_fires)
    instants = [r["origin"]["occurrence_at"] for r in of_schedule]
    assert len(instants) == len(set(instants))
    assert all(r["state"] == "completed" for r in of_schedule)


def as_if_its_create_never_finished(system: bootstrap.Punctual, schedule_id: str) -> None:
    """What a create saga leaves when its process dies between its two steps: the record
    stored, its sync still ``creating`` with the request's token."""
    now = system.services.clock.now()
    with system.store.transaction() as tx:
        tx.schedule_sync.record(
            SyncRecord(schedule_id, SyncState.CREATING, now, [], None, "a-request-that-died")
        )


def synced_ids(system: bootstrap.Punctual) -> list[str]:
    with system.store.transaction(readonly=True) as tx:
        return tx.schedule_sync.recorded("", 100)


def test_sql_to_temporal_schedules_ensures_every_schedule_and_fires_no_instant_twice(
    pg_url: str, tmp_path: Path, temporal_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="punctual.driver")
    prefix = new_prefix()
    with firing(temporal_settings(pg_url, tmp_path, temporal_address, SQL, prefix)) as before:
        assert isinstance(before.system.services.driver, SqlDriver)
        ticking = create_schedule(before.api, every_second(f"ticking-{prefix}"))
        paused = create_schedule(
            before.api, every_second(f"paused-{prefix}", spec=YEARLY, enabled=False)
        )
        tokyo = create_schedule(before.api, every_second(f"tokyo-{prefix}", spec=TOKYO))
        poll("two fires of the SQL pass", lambda: followed_fires(before, ticking["id"]) >= 2)
        generated = occurrences(before.api, ticking["id"])
        assert synced_ids(before.system) == []
    # The SQL pass generates at most LOOKAHEAD ahead: later instants are Temporal's.
    sql_horizon = datetime.now(UTC) + LOOKAHEAD
    ids = [ticking["id"], paused["id"], tokyo["id"]]
    # A plain sql store: no switch back to make, and no Temporal Schedule was made.
    assert "event=driver_switched" not in caplog.text
    nobody = TemporalSchedulesDriver(temporal_address, NAMESPACE, "no-installation")
    try:
        assert not any(v.present for v in nobody.describe_many(ids).values())
    finally:
        nobody.close()

    with firing(
        temporal_settings(pg_url, tmp_path, temporal_address, TEMPORAL_SCHEDULES, prefix)
    ) as after:
        api = after.api
        driver = temporal_driver_of(after.system)

        def all_ensured() -> dict[str, Any] | None:
            views = driver.describe_many(ids)
            return views if all(v.present and v.marked for v in views.values()) else None

        views = poll("the startup sweep ensuring every schedule", all_ensured)
        assert {i: v.paused for i, v in views.items()} == {
            ticking["id"]: False,
            paused["id"]: True,
            tokyo["id"]: False,
        }

        # The sweep records each one in_sync just after ensuring it.
        def recorded_in_sync() -> bool:
            states = [api.get(f"/schedules/{i}").json()["sync"]["state"] for i in ids]
            return states == ["in_sync"] * len(ids)

        poll("the startup sweep recording every schedule in_sync", recorded_in_sync)
        poll(
            "two Temporal fires past the SQL pass's horizon",
            lambda: followed_fires(after, ticking["id"], sql_horizon) >= 2,
        )
        items = stop_and_settle(after, ticking)
        assert_each_instant_fired_once(items)
        assert_one_run_per_occurrence(api, ticking["id"], items)
        # What the SQL pass generated before the switch kept its rows (unstarted ones
        # included, generated ahead) and ran once: no Temporal fire made a second row.
        kept = {o["id"]: o for o in items}
        for occurrence in generated:
            assert kept[occurrence["id"]]["occurrence_at"] == occurrence["occurrence_at"]
            if occurrence["run_id"] is not None:
                assert kept[occurrence["id"]]["run_id"] == occurrence["run_id"]
        assert occurrences(api, paused["id"]) == []


async def _create_unmarked(address: str, schedule_id: str) -> None:
    client = await Client.connect(address, namespace=NAMESPACE)
    await client.create_schedule(
        schedule_id,
        Schedule(
            action=ScheduleActionStartWorkflow(
                "someone.elses", id=f"wf-{schedule_id}", task_queue="elsewhere"
            ),
            spec=ScheduleSpec(cron_expressions=["0 4 * * *"]),
            state=ScheduleState(paused=True),
        ),
    )


async def _start_foreign_fire(address: str, workflow_id: str) -> None:
    """A fire workflow of a schedule this installation never had, on a queue nobody polls."""
    client = await Client.connect(address, namespace=NAMESPACE)
    await client.start_workflow(
        FIRE_WORKFLOW, {"schedule_id": "not-ours"}, id=workflow_id, task_queue="elsewhere"
    )


async def _open_fires(address: str) -> list[str]:
    client = await Client.connect(address, namespace=NAMESPACE)
    query = f'WorkflowType = "{FIRE_WORKFLOW}" AND ExecutionStatus = "Running"'
    return [execution.id async for execution in client.list_workflows(query)]


async def _terminate(address: str, workflow_id: str) -> None:
    client = await Client.connect(address, namespace=NAMESPACE)
    await client.get_workflow_handle(workflow_id).terminate(reason="test over")


def test_temporal_schedules_to_sql_removes_the_marked_schedules_and_fires_from_the_cursor(
    pg_url: str, tmp_path: Path, temporal_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="punctual.driver")
    prefix = new_prefix()
    foreign = f"someone-else-{uuid.uuid4().hex[:8]}"
    asyncio.run(_create_unmarked(temporal_address, foreign))
    foreign_fire = f"{WORKFLOW_ID_PREFIX}sch_{uuid.uuid4().hex[:24]}-2026-12-01T00:00:00Z"
    asyncio.run(_start_foreign_fire(temporal_address, foreign_fire))
    driven = temporal_settings(pg_url, tmp_path, temporal_address, TEMPORAL_SCHEDULES, prefix)
    with firing(driven) as before:
        installation = temporal_driver_of(before.system).installation_id
        ticking = create_schedule(before.api, every_second(f"ticking-{prefix}"))
        paused = create_schedule(
            before.api, every_second(f"paused-{prefix}", spec=YEARLY, enabled=False)
        )
        unfinished = create_schedule(before.api, every_second(f"unfinished-{prefix}", spec=YEARLY))
        as_if_its_create_never_finished(before.system, unfinished["id"])
        poll("two Temporal fires", lambda: followed_fires(before, ticking["id"]) >= 2)
    # No process takes Temporal's fires from here on: later instants are the SQL pass's.
    temporal_stopped = datetime.now(UTC) + timedelta(seconds=1)
    ids = [ticking["id"], paused["id"], unfinished["id"]]
    ticking_fires = f"{WORKFLOW_ID_PREFIX}{ticking['id']}-"

    def left_open() -> bool:
        return any(i.startswith(ticking_fires) for i in asyncio.run(_open_fires(temporal_address)))

    poll("a fire workflow that nobody takes", left_open)
    inspect = TemporalSchedulesDriver(temporal_address, NAMESPACE, installation)
    try:
        assert all(v.present for v in inspect.describe_many(ids).values())
        sql = temporal_settings(pg_url, tmp_path, temporal_address, SQL, prefix)

        # Cut short: Temporal unreachable. The store's steps are done (the unfinished
        # create is removed, the schedules have their next fire back); the sync records
        # stay, so the next start sweeps again.
        unstarted = bootstrap.build(sql)
        unreachable = TemporalSchedulesDriver(
            "127.0.0.1:1", NAMESPACE, installation, rpc_timeout_seconds=1
        )
        try:
            with pytest.raises(EngineUnavailable):
                driver_switch.switch_to_sql(unstarted.services, unreachable)
            assert driver_switch.was_driven(unstarted.services)
            assert sorted(synced_ids(unstarted)) == sorted(ids)
            with unstarted.store.transaction(readonly=True) as tx:
                stored = tx.schedules.get_many(ids)
            assert stored[unfinished["id"]].deleted_at is not None
            assert stored[ticking["id"]].next_fire_at is not None
        finally:
            unreachable.close()
            unstarted.close()
        assert all(v.present for v in inspect.describe_many(ids).values())

        caplog.clear()
        with firing(sql) as after:
            api = after.api
            assert isinstance(after.system.services.driver, SqlDriver)
            [line] = [m for m in caplog.messages if "event=driver_switched" in m]
            assert "removed=3 " in line and " forgotten=3" in line
            ended = re.search(r" ended=(\d+) ", line)
            assert ended is not None and int(ended.group(1)) >= 1, line

            # Its open fire workflows are gone; another installation's is left running.
            # (Temporal's list lags: a terminated workflow may be listed running a moment.)
            def none_left() -> list[str] | None:
                still_open = asyncio.run(_open_fires(temporal_address))
                ours = [i for i in still_open if i.startswith(ticking_fires)]
                return None if ours else still_open

            assert foreign_fire in poll("no open fire of the switched schedule", none_left)
            views = inspect.describe_many([*ids, foreign])
            assert not any(views[i].present for i in ids)
            assert views[foreign].present and not views[foreign].marked
            assert synced_ids(after.system) == []
            assert not driver_switch.was_driven(after.system.services)

            # The generation pass picks the schedule up where Temporal's fires left it.
            poll(
                "two fires of the SQL pass after Temporal stopped",
                lambda: followed_fires(after, ticking["id"], temporal_stopped) >= 2,
            )
            items = stop_and_settle(after, ticking)
            assert_each_instant_fired_once(items)
            assert_one_run_per_occurrence(api, ticking["id"], items)
            assert occurrences(api, paused["id"]) == []
            assert api.get(f"/schedules/{paused['id']}").json()["enabled"] is False
            # A create that never answered 201 does not start firing under the SQL pass.
            assert api.get(f"/schedules/{unfinished['id']}").status_code == 404
            assert occurrences(api, unfinished["id"]) == []
    finally:
        inspect.close()
        with contextlib.suppress(Exception):  # never hide the test's own failure
            asyncio.run(_terminate(temporal_address, foreign_fire))
