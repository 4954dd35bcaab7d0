"""What fires a schedule's due work, whichever driver fires it (SPEC CR-6, CR-7, RS-*).

One set of behaviour tests through the HTTP API, run over every driver: ``sql`` (the
runner's generation pass) on SQLite and on PostgreSQL, and ``temporal_schedules`` on
PostgreSQL with the Temporal engine and a real ``temporal server start-dev`` (one per
module). Each system runs the demo app's workflows on a started runner and worker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.drivers import (
    TEMPORAL_SCHEDULES,
    Firing,
    assert_each_instant_fired_once,
    create_schedule,
    every_second,
    fired,
    firing,
    local_settings,
    new_prefix,
    occurrences,
    poll,
    runs,
    temporal_settings,
    temporal_view,
)
from tests.support.temporal import dev_server

QUIET_SECONDS = 2.0
"""How long a paused or deleted every-second schedule is watched for a new occurrence."""

DRIVERS = [
    pytest.param("sql-sqlite", id="sql-sqlite"),
    pytest.param("sql-postgres", id="sql-postgres", marks=pytest.mark.postgres),
    pytest.param(
        "temporal_schedules-sqlite",
        id="temporal_schedules-sqlite",
        marks=[pytest.mark.temporal],
    ),
    pytest.param(
        "temporal_schedules-postgres",
        id="temporal_schedules-postgres",
        marks=[pytest.mark.temporal, pytest.mark.postgres],
    ),
]


@pytest.fixture(scope="module")
def schedules_temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One dev server for this module's Temporal Schedules cases."""
    with dev_server(tmp_path_factory.mktemp("driver-contract")) as address:
        yield address


@pytest.fixture(params=DRIVERS)
def fires(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Firing]:
    if request.param == "sql-sqlite":
        settings = local_settings(request.getfixturevalue("sqlite_url"), tmp_path)
    elif request.param == "sql-postgres":
        settings = local_settings(request.getfixturevalue("pg_url"), tmp_path)
    else:
        address = request.getfixturevalue("schedules_temporal")
        store = "sqlite_url" if request.param.endswith("sqlite") else "pg_url"
        url = request.getfixturevalue(store)
        settings = temporal_settings(url, tmp_path, address, TEMPORAL_SCHEDULES, new_prefix())
    with firing(settings) as started:
        yield started


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def at(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp)


def test_an_every_second_schedule_fires_one_run_per_occurrence_each_followed_through_once(
    fires: Firing,
) -> None:
    api = fires.api
    created = create_schedule(api, every_second(unique("every-second")))

    def two_followed() -> bool:
        done = [o for o in occurrences(api, created["id"]) if o["follow_through"] is not None]
        return len(done) >= 2

    poll("two fires followed through", two_followed)
    paused = api.post(f"/schedules/{created['id']}/pause", {"version": created["version"]})
    assert paused.status_code == 200, paused.text
    # Queued occurrences still run after a pause (RS-6): wait until each has ended.
    items = poll("every occurrence followed through", lambda: _settled_items(fires, created))

    assert_each_instant_fired_once(items)
    spec_fires = fired(items)
    assert len(spec_fires) >= 2
    assert all(o["state"] == "dispatched" for o in spec_fires)
    for occurrence in spec_fires:
        assert fires.follow_throughs[occurrence["id"]] == 1, occurrence
        run = api.get(f"/runs/{occurrence['run_id']}").json()
        assert run["state"] == "completed"
        assert run["result"] == {"message": "tick"}
        assert run["started_by"] == "alice"
        assert run["origin"]["source"] == "schedule"
        assert run["origin"]["id"] == occurrence["id"]
        assert run["origin"]["schedule_id"] == created["id"]
        assert run["origin"]["occurrence_at"] == occurrence["occurrence_at"]
    schedule_runs = [r for r in runs(api) if r["origin"].get("schedule_id") == created["id"]]
    assert sorted(r["id"] for r in schedule_runs) == sorted(o["run_id"] for o in spec_fires)


def _settled_items(fires: Firing, created: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The occurrences once each has come to an end: followed through (and its event
    counted), or never run."""
    items = occurrences(fires.api, created["id"])
    ended = all(
        (o["follow_through"] is not None and fires.follow_throughs[o["id"]] > 0)
        or o["state"] in ("skipped", "canceled")
        for o in items
    )
    return items if ended else None


def test_next_fire_times_of_a_new_cron_schedule_are_punctuals_preview(fires: Firing) -> None:
    api = fires.api
    spec = {"cron": "0 9,17 * * 1-5", "time_zone": "Asia/Tokyo"}
    body = every_second(unique("cron"), spec=spec, overlap="skip")
    created = create_schedule(api, body)
    preview = api.get("/schedule-preview", count=5, **spec)
    assert preview.status_code == 200, preview.text
    expected = [item["fire_at"] for item in preview.json()["items"]]
    assert len(expected) == 5
    assert created["next_fire_times"] == expected
    assert api.get(f"/schedules/{created['id']}").json()["next_fire_times"] == expected


def test_a_paused_schedule_fires_nothing_until_resumed(fires: Firing) -> None:
    api = fires.api
    created = create_schedule(api, every_second(unique("paused"), missed="skip"))
    poll("a first fire", lambda: fired(occurrences(api, created["id"])))
    paused = api.post(f"/schedules/{created['id']}/pause", {"version": created["version"]})
    assert paused.status_code == 200, paused.text
    assert paused.json()["next_fire_times"] == []
    if fires.driver == TEMPORAL_SCHEDULES:
        view = temporal_view(fires.system, created["id"])
        assert view.paused
    at_pause = {o["id"] for o in occurrences(api, created["id"])}
    time.sleep(QUIET_SECONDS)
    assert {o["id"] for o in occurrences(api, created["id"])} == at_pause

    resumed_at = datetime.now(UTC)
    resumed = api.post(f"/schedules/{created['id']}/resume", {"version": paused.json()["version"]})
    assert resumed.status_code == 200, resumed.text

    def a_fire_after_resume() -> list[dict[str, Any]]:
        return [
            o
            for o in fired(occurrences(api, created["id"]))
            if o["id"] not in at_pause and at(o["occurrence_at"]) >= resumed_at
        ]

    poll("a fire after the resume", a_fire_after_resume)
    assert_each_instant_fired_once(occurrences(api, created["id"]))


def test_a_deleted_schedule_fires_no_more_and_answers_404(fires: Firing) -> None:
    api = fires.api
    created = create_schedule(api, every_second(unique("deleted")))
    poll("a first fire", lambda: fired(occurrences(api, created["id"])))
    current = api.get(f"/schedules/{created['id']}").json()
    gone = api.delete(f"/schedules/{created['id']}", version=current["version"])
    assert gone.status_code == 204, gone.text
    assert api.get(f"/schedules/{created['id']}").status_code == 404
    if fires.driver == TEMPORAL_SCHEDULES:
        view = temporal_view(fires.system, created["id"])
        assert not view.present
    at_delete = {o["id"] for o in occurrences(api, created["id"])}
    time.sleep(QUIET_SECONDS)
    after = occurrences(api, created["id"])
    assert {o["id"] for o in after} == at_delete
    assert_each_instant_fired_once(after)


def test_a_trigger_is_exactly_one_run_with_the_trigger_origin(fires: Firing) -> None:
    api = fires.api
    yearly = {"cron": "0 0 1 1 *", "time_zone": "UTC"}
    created = create_schedule(api, every_second(unique("triggered"), spec=yearly))
    triggered = api.post(f"/schedules/{created['id']}/trigger", {})
    assert triggered.status_code == 201, triggered.text
    occurrence = triggered.json()
    assert occurrence["origin"] == "trigger"

    def followed() -> list[dict[str, Any]]:
        return [o for o in occurrences(api, created["id"]) if o["follow_through"] is not None]

    [done] = poll(
        "the triggered run followed through",
        lambda: [o for o in followed() if fires.follow_throughs[o["id"]] > 0],
    )
    assert done["id"] == occurrence["id"]
    assert fires.follow_throughs[occurrence["id"]] == 1
    [run] = runs(api)
    assert run["id"] == done["run_id"]
    assert run["state"] == "completed"
    assert run["origin"]["source"] == "schedule"
    assert run["origin"]["id"] == occurrence["id"]
    assert run["origin"]["occurrence_origin"] == "trigger"
    assert [o["id"] for o in occurrences(api, created["id"])] == [occurrence["id"]]
