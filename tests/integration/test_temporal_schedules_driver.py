"""The Temporal Schedules driver on a real ``temporal server start-dev`` and PostgreSQL (CR-6).

Each schedule is a Temporal Schedule named by its id, paused exactly when it is disabled,
marked with this installation's id; its fires become one run each, followed through once;
faults of Temporal during create and delete leave the store consistent; reconciliation
re-ensures what Temporal lost and removes marked ghosts, never unmarked Schedules.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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
from punctual.cli.schedules import schedule_block
from punctual.domain.recurrence import CronSpec, DstGap, DstOverlap, fires_between
from punctual.domain.schedules import OverlapPolicy
from punctual.errors import Unavailable
from punctual.ports.driver import DriverSchedule
from punctual.ports.engine import EngineUnavailable
from punctual.resources import Schedule as ScheduleResource
from punctual.usecases.firing import schedule_driver
from punctual.usecases.firing.reconcile import reconcile
from punctual.usecases.tenancy.health import host_report
from tests.api.test_starts_on_temporal import temporal_settings
from tests.support.api import Api, future, in_process, member_api, register_demo
from tests.support.drivers import poll
from tests.support.drivers import temporal_driver_of as driver_of
from tests.support.temporal import NAMESPACE

pytestmark = [pytest.mark.temporal, pytest.mark.postgres]

APP_REF = "punctual.demo:app"
WAIT_SECONDS = 40.0
EXAMPLE = {
    "name": "nightly-scores",
    "workflow": "score",
    "input": {"score": 0.9},
    "spec": {"cron": "30 2 * * 1-5", "time_zone": "America/New_York"},
    "overlap": "skip",
    "missed": "catch_up",
    "max_catch_up": 10,
    "catch_up_window": 86400,
    "misfire_grace_ms": 60000,
    "enabled": True,
    "version_policy": "active_at_fire",
    "workload_class": "standard",
    "regression": {"metrics": [{"path": "metrics.score", "better": "higher", "tolerance": 0.0}]},
}


def driver_settings(pg_url: str, tmp_path: Path, address: str) -> Any:
    settings = temporal_settings(pg_url, tmp_path, address, f"drv-{uuid.uuid4().hex[:8]}")
    return settings.model_copy(update={"driver": "temporal_schedules"})


@pytest.fixture
def system(pg_url: str, tmp_path: Path, temporal_address: str) -> Iterator[bootstrap.Punctual]:
    built = bootstrap.build(driver_settings(pg_url, tmp_path, temporal_address))
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def api(system: bootstrap.Punctual) -> Iterator[Api]:
    register_demo(system)
    with in_process(system) as client:
        yield member_api(system, client)


def send(api: Api, body: dict[str, Any], key: str) -> Any:
    """A create, resent with its key while it answers 202: the saga's two steps can outlast
    the bounded wait on a loaded machine."""
    return api.post("/schedules", body, key=key)


def create(api: Api, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    response = send(api, body, key or f"create-{uuid.uuid4().hex}")
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def named(name: str, **changes: Any) -> dict[str, Any]:
    return EXAMPLE | {"name": name} | changes


def test_the_api_example_is_a_temporal_schedule_paused_exactly_when_disabled(
    system: bootstrap.Punctual, api: Api
) -> None:
    created = create(api, named(f"example-{uuid.uuid4().hex[:6]}"))
    assert created["sync"]["state"] == "in_sync"
    assert len(created["next_fire_times"]) == 5
    view = driver_of(system).describe_many([created["id"]])[created["id"]]
    assert (view.present, view.marked, view.paused) == (True, True, False)
    # Temporal's next fire times are those punctual previews for the same spec.
    preview = api.get(
        "/schedule-preview", cron="30 2 * * 1-5", time_zone="America/New_York", count=5
    ).json()
    assert created["next_fire_times"] == [item["fire_at"] for item in preview["items"]]

    # The CLI shows the sync; without a driver there is none to show.
    shown = schedule_block(ScheduleResource.model_validate(created))
    checked = created["sync"]["checked_at"]
    assert ["temporal", "sync:", "in_sync", "(checked", f"{checked})"] in [
        line.split() for line in shown
    ]
    plain = ScheduleResource.model_validate(created | {"sync": None})
    assert not any("sync" in line for line in schedule_block(plain))

    paused = api.post(f"/schedules/{created['id']}/pause", {"version": created["version"]})
    assert paused.status_code == 200, paused.text
    assert paused.json()["next_fire_times"] == []
    assert driver_of(system).describe_many([created["id"]])[created["id"]].paused is True
    resumed = api.post(f"/schedules/{created['id']}/resume", {"version": paused.json()["version"]})
    assert resumed.status_code == 200, resumed.text
    assert driver_of(system).describe_many([created["id"]])[created["id"]].paused is False

    gone = api.delete(f"/schedules/{created['id']}", version=resumed.json()["version"])
    assert gone.status_code == 204, gone.text
    assert driver_of(system).describe_many([created["id"]])[created["id"]].present is False


def test_refusals_name_the_field_and_the_driver(api: Api) -> None:
    jitter = api.post("/schedules", named("jittery", jitter_ms=1000))
    assert jitter.status_code == 422
    assert jitter.json()["error"]["code"] == "unsupported_by_driver"
    assert jitter.json()["error"]["details"] == {
        "field": "jitter_ms",
        "driver": "temporal_schedules",
    }
    window = [{"from": "2027-12-24T00:00:00Z", "to": "2027-12-27T00:00:00Z"}]
    resting = api.post("/schedules", named("resting", pause_until="2099-01-01T00:00:00Z"))
    assert resting.status_code == 422, resting.text
    assert resting.json()["error"]["details"] == {
        "field": "pause_until",
        "driver": "temporal_schedules",
    }
    frozen = api.post("/schedules", named("frozen", blackouts=window))
    assert frozen.status_code == 422, frozen.text
    assert frozen.json()["error"]["code"] == "unsupported_by_driver"
    assert frozen.json()["error"]["details"] == {
        "field": "blackouts",
        "driver": "temporal_schedules",
    }
    # Several specs, a calendar and a business day are punctual's own (RS-10).
    mornings = {"cron": "0 9 * * *", "time_zone": "Europe/Berlin"}
    payroll = {"business_day": -1, "at": "17:30", "time_zone": "Europe/Berlin"}
    for field, fields in (
        ("specs", {"specs": [mornings, {**mornings, "cron": "0 18 * * *"}]}),
        ("calendar", {"spec": mornings, "calendar": {"weekend": ["sun"]}}),
        ("spec.business_day", {"specs": [payroll], "calendar": {}}),
    ):
        sent = named(f"refused-{field}", **fields)
        if "specs" in fields:
            del sent["spec"]  # a body sends spec or specs
        refusal = api.post("/schedules", sent)
        assert refusal.status_code == 422, refusal.text
        assert refusal.json()["error"]["code"] == "unsupported_by_driver", refusal.text
        assert refusal.json()["error"]["details"] == {
            "field": field,
            "driver": "temporal_schedules",
        }
    berlin = api.post(
        "/schedules", named("berlin", spec={"cron": "30 2 * * *", "time_zone": "Europe/Berlin"})
    )
    assert berlin.status_code == 422
    assert berlin.json()["error"]["code"] == "dst_policy_unsupported"
    assert berlin.json()["error"]["details"]["field"] == "spec.dst_gap"
    overlap = api.post(
        "/schedules",
        named(
            "berlin-overlap",
            spec={"cron": "30 2 * * *", "time_zone": "Europe/Berlin", "dst_gap": "skip"},
        ),
    )
    assert overlap.json()["error"]["details"]["field"] == "spec.dst_overlap"
    literal = {"dst_gap": "skip", "dst_overlap": "both"}
    repeated = api.post(
        "/schedules",
        named(
            "berlin-literal", spec={"cron": "30 2 * * *", "time_zone": "Europe/Berlin"} | literal
        ),
    )
    assert repeated.json()["error"]["details"]["field"] == "spec.dst_overlap"
    outside = api.post(
        "/schedules", named("berlin-4", spec={"cron": "30 4 * * *", "time_zone": "Europe/Berlin"})
    )
    assert outside.status_code == 201, outside.text
    # Temporal counts intervals in whole seconds.
    start = future()[:19] + ".5Z"
    for name, spec, field in (
        ("fractional-interval", {"interval_ms": 1500}, "spec.interval_ms"),
        ("fractional-start", {"interval_ms": 2000, "starts_at": start}, "spec.starts_at"),
    ):
        refused = api.post("/schedules", named(name, spec=spec))
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "unsupported_by_driver"
        assert refused.json()["error"]["details"]["field"] == field
    whole = create(api, named(f"whole-{uuid.uuid4().hex[:6]}", spec={"interval_ms": 2000}))
    assert datetime.fromisoformat(whole["spec"]["starts_at"]).microsecond == 0
    # PUT by name decides as POST and PATCH do.
    put_body = {k: v for k, v in named("put-jitter").items() if k != "name"} | {"jitter_ms": 500}
    put = api.client.put(
        api.path("/schedules/by-name/put-jitter"), headers=api.headers("put-1"), json=put_body
    )
    assert (put.status_code, put.json()["error"]["code"]) == (422, "unsupported_by_driver")


def test_fires_become_one_run_each_and_one_follow_through(
    system: bootstrap.Punctual, api: Api
) -> None:
    system.start_worker(APP_REF)
    system.start_runner()
    created = create(
        api,
        named(
            f"every-second-{uuid.uuid4().hex[:6]}",
            workflow="echo",
            input={"message": "hi"},
            spec={"interval_ms": 1000},
            regression=None,
        ),
    )

    def followed() -> list[dict[str, Any]]:
        page = api.get(f"/schedules/{created['id']}/occurrences", limit=100).json()["items"]
        done = [o for o in page if o["follow_through"] is not None]
        return page if len(done) >= 2 else []

    poll("two fires followed through", followed)
    paused = api.post(f"/schedules/{created['id']}/pause", {"version": created["version"]})
    assert paused.status_code == 200
    time.sleep(2)
    occurrences = api.get(f"/schedules/{created['id']}/occurrences", limit=100).json()["items"]
    instants = [o["occurrence_at"] for o in occurrences]
    assert len(instants) == len(set(instants))
    run_ids = [o["run_id"] for o in occurrences if o["state"] == "dispatched"]
    assert len(run_ids) == len(set(run_ids)) >= 2
    for run_id in run_ids:
        run = api.get(f"/runs/{run_id}").json()
        assert run["origin"]["source"] == "schedule"
        assert run["started_by"] == "alice"


def test_a_retried_fire_never_starts_a_second_run(system: bootstrap.Punctual, api: Api) -> None:
    created = create(api, named(f"retried-{uuid.uuid4().hex[:6]}"))
    at = datetime.now(UTC).replace(microsecond=0)
    command = schedule_driver.TemporalFire(created["id"], "acme", at)
    first = schedule_driver.fire(system.services, command)
    again = schedule_driver.fire(system.services, command)
    assert first.occurrence_id is not None
    assert again.occurrence_id == first.occurrence_id
    page = api.get(f"/schedules/{created['id']}/occurrences").json()["items"]
    assert [o["id"] for o in page] == [first.occurrence_id]


def test_a_fire_activity_retried_after_its_run_was_created_starts_no_second_run(
    system: bootstrap.Punctual, api: Api
) -> None:
    """The first attempt's answer is lost once the run exists (the activity fails after
    the fire committed); Temporal retries the activity, which finds the same occurrence."""
    attempts: list[str] = []

    def lose_the_first_answer(point: str) -> None:
        if point != "after_fire_recorded" or attempts:
            return
        attempts.append(point)
        poll("the first fire's run", lambda: dispatched(api, created["id"]))
        raise Unavailable("the answer of this attempt is lost")

    system.services.crash_point = lose_the_first_answer
    system.start_worker(APP_REF)
    system.start_runner()
    created = create(
        api,
        named(
            f"retried-activity-{uuid.uuid4().hex[:6]}",
            workflow="echo",
            input={"message": "once"},
            spec={"interval_ms": 600_000},  # one fire in this test: Temporal's first
            regression=None,
        ),
    )
    asyncio.run(_trigger_in_temporal(system, created["id"]))
    first = poll("the first fire followed through", lambda: followed(api, created["id"]))
    assert attempts == ["after_fire_recorded"]
    assert asyncio.run(_fire_activity_attempts(system, created["id"])) == 2
    # After the retried attempt: still the one occurrence and its one run.
    occurrences = api.get(f"/schedules/{created['id']}/occurrences").json()["items"]
    assert [o["id"] for o in occurrences] == [first["id"]]
    runs = api.get("/runs", origin_id=first["id"]).json()["items"]
    assert [(r["id"], r["state"]) for r in runs] == [(first["run_id"], "completed")]


def dispatched(api: Api, schedule_id: str) -> bool:
    page = api.get(f"/schedules/{schedule_id}/occurrences").json()["items"]
    return any(o["state"] == "dispatched" for o in page)


def followed(api: Api, schedule_id: str) -> dict[str, Any] | None:
    page = api.get(f"/schedules/{schedule_id}/occurrences").json()["items"]
    return next((o for o in page if o["follow_through"] is not None), None)


async def _trigger_in_temporal(system: bootstrap.Punctual, schedule_id: str) -> None:
    client = await Client.connect(system.settings.temporal.address, namespace=NAMESPACE)
    await client.get_schedule_handle(schedule_id).trigger()


async def _fire_activity_attempts(system: bootstrap.Punctual, schedule_id: str) -> int:
    """The attempt number of the fire activity that completed, from the workflow history,
    once the fire workflow has ended."""
    client = await Client.connect(system.settings.temporal.address, namespace=NAMESPACE)
    query = f'WorkflowType = "punctual.fire" AND WorkflowId STARTS_WITH "fire-{schedule_id}-"'
    deadline = time.monotonic() + WAIT_SECONDS
    found = [w async for w in client.list_workflows(query)]
    while len(found) != 1 and time.monotonic() < deadline:  # visibility lags a little
        await asyncio.sleep(0.2)
        found = [w async for w in client.list_workflows(query)]
    assert len(found) == 1, found
    handle = client.get_workflow_handle(found[0].id)
    await asyncio.wait_for(handle.result(), WAIT_SECONDS)  # the retry answered, it settled
    history = await handle.fetch_history()
    started = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    return started[0]


def test_temporal_down_during_create_removes_the_record(pg_url: str, tmp_path: Path) -> None:
    # A Temporal address nothing listens on: every ensure fails.
    system = bootstrap.build(driver_settings(pg_url, tmp_path, "127.0.0.1:1"))
    try:
        register_demo(system)
        with in_process(system) as client:
            api = member_api(system, client)
            refused = api.post("/schedules", named("down"), key="create-down")
            assert refused.status_code == 503, refused.text
            error = refused.json()["error"]
            assert error["code"] == "engine_unavailable"
            assert error["details"]["rollback_failed"] is False
            assert api.get("/schedules").json()["items"] == []
    finally:
        system.close()


@contextmanager
def temporal_unreachable(system: bootstrap.Punctual) -> Iterator[TemporalSchedulesDriver]:
    """The system's driver pointed at an address nothing listens on, for the block."""
    working = system.services.driver
    unreachable = TemporalSchedulesDriver(
        "127.0.0.1:1", NAMESPACE, driver_of(system).installation_id, rpc_timeout_seconds=1
    )
    system.services.driver = unreachable
    try:
        yield unreachable
    finally:
        system.services.driver = working
        unreachable.close()


def test_temporal_down_during_delete_keeps_the_record(
    system: bootstrap.Punctual, api: Api, temporal_address: str
) -> None:
    created = create(api, named(f"kept-{uuid.uuid4().hex[:6]}"))
    with temporal_unreachable(system):
        refused = api.delete(f"/schedules/{created['id']}", version=created["version"])
    assert refused.status_code == 503, refused.text
    assert api.get(f"/schedules/{created['id']}").status_code == 200
    assert driver_of(system).describe_many([created["id"]])[created["id"]].present


def test_temporal_down_during_an_update_marks_it_drifted_until_reconcile_heals_it(
    system: bootstrap.Punctual, api: Api
) -> None:
    created = create(api, named(f"drifts-{uuid.uuid4().hex[:6]}"))
    with temporal_unreachable(system):
        paused = api.post(f"/schedules/{created['id']}/pause", {"version": created["version"]})
    assert paused.status_code == 200, paused.text  # the store is the source of truth
    assert paused.json()["sync"]["state"] == "drifted"
    assert not driver_of(system).describe_many([created["id"]])[created["id"]].paused

    report = reconcile(system.services)
    assert report.ensured >= 1
    assert driver_of(system).describe_many([created["id"]])[created["id"]].paused
    assert api.get(f"/schedules/{created['id']}").json()["sync"]["state"] == "in_sync"


def test_reconcile_heals_both_ways_and_leaves_unmarked_schedules_alone(
    system: bootstrap.Punctual, api: Api, temporal_address: str
) -> None:
    driver = driver_of(system)
    created = create(api, named(f"healed-{uuid.uuid4().hex[:6]}"))
    driver.remove(created["id"])  # deleted behind punctual's back
    ghost_id = f"sch_ghost{uuid.uuid4().hex[:8]}"
    driver.ensure(
        DriverSchedule(
            ghost_id,
            "acme",
            CronSpec("0 3 * * *"),
            OverlapPolicy.SKIP,
            timedelta(minutes=1),
            paused=True,
        )
    )
    foreign_id = f"someone-else-{uuid.uuid4().hex[:8]}"
    asyncio.run(_create_unmarked(temporal_address, foreign_id))

    report = reconcile(system.services, orphan_grace=timedelta(0))
    assert report.ensured >= 1
    assert report.removed >= 1
    views = driver.describe_many([created["id"], ghost_id, foreign_id])
    assert views[created["id"]].present and views[created["id"]].marked
    assert not views[ghost_id].present
    assert views[foreign_id].present and not views[foreign_id].marked
    assert api.get(f"/schedules/{created['id']}").json()["sync"]["state"] == "in_sync"


def test_a_record_whose_id_an_unmarked_schedule_holds_is_orphaned_until_that_one_goes(
    system: bootstrap.Punctual, api: Api, temporal_address: str
) -> None:
    created = create(api, named(f"taken-{uuid.uuid4().hex[:6]}"))
    driver_of(system).remove(created["id"])
    asyncio.run(_create_unmarked(temporal_address, created["id"]))

    report = reconcile(system.services)
    assert report.orphans >= 1
    assert api.get(f"/schedules/{created['id']}").json()["sync"]["state"] == "orphaned"
    assert orphan_findings(system, api, created["id"]) == ["orphaned_schedule"]
    view = driver_of(system).describe_many([created["id"]])[created["id"]]
    assert view.present and not view.marked  # never touched

    asyncio.run(_delete(temporal_address, created["id"]))  # its owner removes it
    reconcile(system.services)
    assert api.get(f"/schedules/{created['id']}").json()["sync"]["state"] == "in_sync"
    assert orphan_findings(system, api, created["id"]) == []
    assert driver_of(system).describe_many([created["id"]])[created["id"]].marked


async def _delete(address: str, schedule_id: str) -> None:
    client = await Client.connect(address, namespace=NAMESPACE)
    await client.get_schedule_handle(schedule_id).delete()


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


class RollbackFailing:
    """The real store, whose next transaction fails once it is armed: the store failing
    the removal of a create that Temporal refused."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.armed = False

    def transaction(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed:
            self.armed = False
            raise Unavailable("the store did not answer")
        return self._store.transaction(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class ArmsOnRefusal:
    """A driver on an address nothing listens on, arming the store when it refuses."""

    def __init__(self, driver: TemporalSchedulesDriver, store: RollbackFailing) -> None:
        self._driver = driver
        self._store = store
        self.name = driver.name

    def ensure(self, schedule: DriverSchedule) -> list[datetime]:
        try:
            return self._driver.ensure(schedule)
        except EngineUnavailable:
            self._store.armed = True
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)


@contextmanager
def temporal_down_and_rollback_failing(system: bootstrap.Punctual) -> Iterator[None]:
    working_store = system.services.store
    failing = RollbackFailing(working_store)
    with temporal_unreachable(system) as unreachable:
        system.services.store = failing  # the same store, armed
        system.services.driver = ArmsOnRefusal(unreachable, failing)
        try:
            yield
        finally:
            system.services.store = working_store


def orphan_findings(system: bootstrap.Punctual, api: Api, schedule_id: str) -> list[Any]:
    tenant = [f for f in api.get("/health").json()["findings"] if f["subject_id"] == schedule_id]
    host = [f for f in host_report(system.services)["orphans"] if f["subject_id"] == schedule_id]
    assert [f["id"] for f in tenant] == [f["id"] for f in host]
    return [f["kind"] for f in tenant]


def test_a_failed_rollback_is_reported_orphaned_and_a_retry_of_the_request_resumes_it(
    system: bootstrap.Punctual, api: Api
) -> None:
    body = named(f"resumed-{uuid.uuid4().hex[:6]}")
    key = f"create-{uuid.uuid4().hex[:8]}"
    with temporal_down_and_rollback_failing(system):
        refused = send(api, body, key)
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["details"]["rollback_failed"]) == ("engine_unavailable", True)
    schedule_id = error["details"]["schedule_id"]
    stored = api.get(f"/schedules/{schedule_id}").json()
    assert stored["sync"]["state"] == "orphaned"
    assert orphan_findings(system, api, schedule_id) == ["orphaned_schedule"]
    assert not driver_of(system).describe_many([schedule_id])[schedule_id].present

    # Another request for the name is a conflict; only the very same request resumes it.
    assert api.post("/schedules", body).json()["error"]["code"] == "name_taken"
    assert api.get(f"/schedules/{schedule_id}").json()["sync"]["state"] == "orphaned"
    resumed = send(api, body, key)
    assert resumed.status_code == 201, resumed.text
    assert resumed.json()["id"] == schedule_id
    assert resumed.json()["sync"]["state"] == "in_sync"
    assert orphan_findings(system, api, schedule_id) == []
    view = driver_of(system).describe_many([schedule_id])[schedule_id]
    assert view.present and view.marked and not view.paused
    replayed = send(api, body, key)
    assert replayed.status_code == 201 and replayed.json()["id"] == schedule_id


def test_reconcile_removes_the_record_of_a_create_whose_rollback_failed(
    system: bootstrap.Punctual, api: Api
) -> None:
    body = named(f"settled-{uuid.uuid4().hex[:6]}")
    key = f"create-{uuid.uuid4().hex[:8]}"
    with temporal_down_and_rollback_failing(system):
        refused = send(api, body, key)
    schedule_id = refused.json()["error"]["details"]["schedule_id"]
    young = reconcile(system.services)  # within the grace a saga may still be running
    assert api.get(f"/schedules/{schedule_id}").status_code == 200, young

    reconcile(system.services, orphan_grace=timedelta(0))
    assert api.get(f"/schedules/{schedule_id}").status_code == 404
    assert orphan_findings(system, api, schedule_id) == []
    assert not driver_of(system).describe_many([schedule_id])[schedule_id].present
    # Settled: the same request now creates the schedule anew.
    again = send(api, body, key)
    assert again.status_code == 201, again.text
    assert again.json()["id"] != schedule_id
    assert driver_of(system).describe_many([again.json()["id"]])[again.json()["id"]].present


def test_an_edit_of_an_unfinished_create_is_left_to_its_saga(
    system: bootstrap.Punctual, api: Api
) -> None:
    body = named(f"edited-{uuid.uuid4().hex[:6]}")
    key = f"create-{uuid.uuid4().hex[:8]}"
    with temporal_down_and_rollback_failing(system):
        refused = send(api, body, key)
    schedule_id = refused.json()["error"]["details"]["schedule_id"]
    stored = api.get(f"/schedules/{schedule_id}").json()
    paused = api.post(f"/schedules/{schedule_id}/pause", {"version": stored["version"]})
    assert paused.status_code == 200, paused.text
    assert paused.json()["sync"]["state"] == "orphaned"  # not ensured: still the saga's
    assert not driver_of(system).describe_many([schedule_id])[schedule_id].present
    resumed = send(api, body, key)
    assert resumed.status_code == 201, resumed.text
    assert (resumed.json()["enabled"], resumed.json()["sync"]["state"]) == (False, "in_sync")
    view = driver_of(system).describe_many([schedule_id])[schedule_id]
    assert view.present and view.paused  # the record as it is now, pause included


@pytest.mark.parametrize(
    ("zone", "cron", "start", "end", "only_in_punctual"),
    [
        # Gaps: Temporal skips the times that do not exist, as dst_gap=skip does.
        ("America/New_York", "30 1,2,3 * * *", "2027-03-13T00:00:00Z", "2027-03-16T00:00:00Z", []),
        ("Europe/Berlin", "30 1,2,3 * * *", "2027-03-27T00:00:00Z", "2027-03-30T00:00:00Z", []),
        (
            "Australia/Lord_Howe",
            "15,45 1,2 * * *",
            "2027-10-02T00:00:00Z",
            "2027-10-05T00:00:00Z",
            [],
        ),
        # Repeated times: New York fires both passes, Berlin only the first (02:30+02:00),
        # Lord Howe only the second (01:45+10:30): why the driver refuses them.
        ("America/New_York", "30 0,1,2 * * *", "2027-11-06T00:00:00Z", "2027-11-09T00:00:00Z", []),
        (
            "Europe/Berlin",
            "30 1,2,3 * * *",
            "2027-10-30T00:00:00Z",
            "2027-11-02T00:00:00Z",
            ["2027-10-31T01:30:00+00:00"],
        ),
        (
            "Australia/Lord_Howe",
            "15,45 1,2 * * *",
            "2027-04-02T00:00:00Z",
            "2027-04-05T00:00:00Z",
            ["2027-04-03T14:45:00+00:00"],
        ),
    ],
)
def test_temporal_fires_against_punctual_literal_matching_across_transitions(
    system: bootstrap.Punctual,
    zone: str,
    cron: str,
    start: str,
    end: str,
    only_in_punctual: list[str],
) -> None:
    spec = CronSpec(cron, zone, dst_gap=DstGap.SKIP, dst_overlap=DstOverlap.BOTH)
    schedule_id = f"sch_dst{uuid.uuid4().hex[:8]}"
    driver = driver_of(system)
    driver.ensure(
        DriverSchedule(
            schedule_id, "acme", spec, OverlapPolicy.SKIP, timedelta(minutes=1), paused=True
        )
    )
    try:
        begin = datetime.fromisoformat(start)
        until = datetime.fromisoformat(end)
        temporal = driver.matching_times(schedule_id, begin, until)
        punctual = [f.at for f in fires_between(spec, begin, until)]
        missing = [datetime.fromisoformat(t) for t in only_in_punctual]
        assert [t.astimezone(UTC) for t in temporal] == [t for t in punctual if t not in missing]
    finally:
        driver.remove(schedule_id)


def test_startup_refuses_the_driver_without_the_temporal_engine() -> None:
    from punctual.errors import ConfigurationError
    from punctual.settings import load_settings

    with pytest.raises(ConfigurationError) as refused:
        load_settings(None, driver="temporal_schedules", engine="local")
    assert "driver" in str(refused.value) and "engine" in str(refused.value)
    assert load_settings(None).driver == "sql"
