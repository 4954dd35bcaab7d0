"""Punctual systems under either firing driver, running a runner and a worker, for the
driver contract and the driver-switch tests (SPEC CR-6, CR-7).

``sql`` fires schedules from the runner's generation pass, on the local engine (any store)
or on the Temporal engine; ``temporal_schedules`` needs the Temporal engine and fires
through one Temporal Schedule per schedule.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from punctual import bootstrap
from punctual.adapters.drivers.temporal_schedules.driver import TemporalSchedulesDriver
from punctual.errors import Unavailable
from punctual.ports.driver import DriverView
from punctual.ports.events import Event
from punctual.settings import Settings
from tests.conftest import make_settings
from tests.support.api import Api, in_process, member_api, register_demo
from tests.support.temporal import NAMESPACE

T = TypeVar("T")

APP_REF = "punctual.demo:app"
WAIT_SECONDS = 40.0
POLL_SECONDS = 0.1
SQL = "sql"
TEMPORAL_SCHEDULES = "temporal_schedules"


def poll(what: str, check: Callable[[], T | None], timeout: float = WAIT_SECONDS) -> T:
    """The first truthy answer of ``check``, asked every ``POLL_SECONDS`` (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL_SECONDS)


def local_settings(database_url: str, tmp_path: Path) -> Settings:
    """The ``sql`` driver on the local engine: what a plain installation runs."""
    return make_settings(
        database_url,
        tmp_path,
        worker={"heartbeat_seconds": 0.5, "liveness_seconds": 10, "slots": 2},
        runner={"lease_seconds": 2, "max_idle_seconds": 0.2},
    )


def new_prefix() -> str:
    return f"drv-{uuid.uuid4().hex[:8]}"


def temporal_settings(
    database_url: str, tmp_path: Path, address: str, driver: str, prefix: str
) -> Settings:
    """The Temporal engine under ``driver``; task queues named by ``prefix`` (the dev
    server outlives one system: two systems on one database share a prefix, so runs one
    dispatched are executed by the other's worker)."""
    return make_settings(
        database_url,
        tmp_path,
        engine="temporal",
        driver=driver,
        temporal={"address": address, "namespace": NAMESPACE},
        worker={"heartbeat_seconds": 0.5, "liveness_seconds": 15, "slots": 2},
        runner={"lease_seconds": 5, "max_idle_seconds": 0.2},
        workload_classes={
            name: {"task_queue": f"{prefix}-{name}", "priority": priority}
            for name, priority in (("interactive", 1), ("standard", 2), ("batch", 5))
        },
    )


@dataclass
class Firing:
    """A started system, alice's API, and the follow-throughs it recorded per occurrence."""

    system: bootstrap.Punctual
    api: Api
    follow_throughs: Counter[str]

    @property
    def driver(self) -> str:
        return self.system.settings.driver


@contextmanager
def firing(settings: Settings) -> Iterator[Firing]:
    """Build, register the demo app, start a worker and the runner; close on exit."""
    system = bootstrap.build(settings)
    follow_throughs: Counter[str] = Counter()

    def count(event: Event) -> None:
        if event.name == "follow_through.recorded":
            follow_throughs[event.subject_id] += 1

    try:
        system.events.subscribe(count)
        register_demo(system)
        system.start_worker(APP_REF)
        system.start_runner()
        with in_process(system) as client:
            yield Firing(system, member_api(system, client), follow_throughs)
    finally:
        system.close()


def temporal_driver_of(system: bootstrap.Punctual) -> TemporalSchedulesDriver:
    driver = system.services.driver
    assert isinstance(driver, TemporalSchedulesDriver)
    return driver


def temporal_view(
    system: bootstrap.Punctual, schedule_id: str, *, within: float = 30.0
) -> DriverView:
    """What Temporal holds for ``schedule_id``, asked again while the driver answers
    ``engine_unavailable`` (its RPC deadline passed: a loaded dev server), as the runner's
    next pass would; bounded."""
    deadline = time.monotonic() + within
    while True:
        try:
            return temporal_driver_of(system).describe_many([schedule_id])[schedule_id]
        except Unavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def every_second(name: str, **changes: Any) -> dict[str, Any]:
    """An echo schedule that fires every second, every fire a run (``allow_all``)."""
    body: dict[str, Any] = {
        "name": name,
        "workflow": "echo",
        "input": {"message": "tick"},
        "spec": {"interval_ms": 1000},
        "overlap": "allow_all",
        "missed": "catch_up",
        "workload_class": "standard",
    }
    return body | changes


def create_schedule(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post("/schedules", body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def occurrences(api: Api, schedule_id: str) -> list[dict[str, Any]]:
    """Every occurrence of the schedule, all pages."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 100} | ({"cursor": cursor} if cursor else {})
        response = api.get(f"/schedules/{schedule_id}/occurrences", **params)
        assert response.status_code == 200, response.text
        page = response.json()
        items.extend(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return items


def runs(api: Api) -> list[dict[str, Any]]:
    """Every run of the tenant, all pages."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 100} | ({"cursor": cursor} if cursor else {})
        response = api.get("/runs", **params)
        assert response.status_code == 200, response.text
        page = response.json()
        items.extend(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return items


def fired(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The occurrences that are fires of the spec (not a skipped range, not a trigger)."""
    return [o for o in items if o["origin"] == "schedule" and o["state"] != "skipped"]


def assert_each_instant_fired_once(items: list[dict[str, Any]]) -> None:
    """No occurrence_at twice, no run id twice (CR-7, RS-5)."""
    instants = [o["occurrence_at"] for o in items]
    assert len(instants) == len(set(instants)), sorted(instants)
    run_ids = [o["run_id"] for o in items if o["run_id"] is not None]
    assert len(run_ids) == len(set(run_ids)), sorted(run_ids)
