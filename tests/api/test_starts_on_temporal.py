"""Scheduled starts through HTTP with the Temporal engine (WF-5, WF-6, WF-8, OS-1, OS-4).

The same API as ``test_scheduled_starts.py``, once, on a system built with
``engine = "temporal"``: a real ``temporal server start-dev``, a real Temporal worker
(``system.start_worker``, bodies in child processes) and the runner with its sync loop
(``system.start_runner``). Requests go through the in-process ASGI app; what Temporal
did is checked with a ``temporalio`` client of the test's own.

* a start created 1 s ahead is dispatched no earlier than its instant, runs as the
  Temporal execution whose workflow id is the run id, and its result is in the store;
* cancel reaches a sleeping body (``canceled``); terminate is recorded at once;
* a create replayed with the same key returns the same start, and no second run;
* reads keep answering from the store after the Temporal server is gone (WF-8); a run
  operation then answers ``503`` (not recorded), and the same request with the same key
  succeeds once the server is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from punctual import bootstrap
from punctual.settings import Settings
from tests.conftest import make_settings
from tests.e2e.temporal_harness import RestartableTemporal
from tests.support.api import Api, echo_start, future, in_process, member_api
from tests.support.temporal import NAMESPACE

pytestmark = pytest.mark.temporal

APP_REF = "punctual.demo:app"
WORKFLOW_TYPE = "punctual.run"
ACTIVE = ("pending", "running")
WAIT_SECONDS = 20.0


@dataclass
class OnTemporal:
    """A punctual on the Temporal engine (worker and runner started) and its HTTP client."""

    system: bootstrap.Punctual
    api: Api
    address: str
    task_queue: str
    """The Temporal task queue of the workload class ``standard``."""


def temporal_settings(database_url: str, tmp_path: Path, address: str, prefix: str) -> Settings:
    return make_settings(
        database_url,
        tmp_path,
        engine="temporal",
        temporal={"address": address, "namespace": NAMESPACE},
        worker={"heartbeat_seconds": 0.5, "liveness_seconds": 15, "slots": 2},
        runner={"lease_seconds": 5, "max_idle_seconds": 0.2},
        # Queues of this test's own: the session's Temporal server outlives the test.
        workload_classes={
            name: {"task_queue": f"{prefix}-{name}", "priority": priority}
            for name, priority in (("interactive", 1), ("standard", 2), ("batch", 5))
        },
    )


@contextlib.contextmanager
def punctual_on_temporal(database_url: str, tmp_path: Path, address: str) -> Iterator[OnTemporal]:
    prefix = f"api-{uuid.uuid4().hex[:8]}"
    system = bootstrap.build(temporal_settings(database_url, tmp_path, address, prefix))
    try:
        system.start_worker(APP_REF)
        system.start_runner()
        with in_process(system) as client:
            yield OnTemporal(system, member_api(system, client), address, f"{prefix}-standard")
    finally:
        system.close()


@pytest.fixture
def on_temporal(sqlite_url: str, tmp_path: Path, temporal_address: str) -> Iterator[OnTemporal]:
    with punctual_on_temporal(sqlite_url, tmp_path, temporal_address) as running:
        yield running


# --------------------------------------------------------------------------- helpers


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def poll(what: str, check: Callable[[], Any], timeout: float = WAIT_SECONDS) -> Any:
    """``check()`` until it returns something truthy; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def create(api: Api, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    response = api.post("/scheduled-starts", body, key=key)
    assert response.status_code == 201, response.text
    start: dict[str, Any] = response.json()
    return start


def dispatched(api: Api, start_id: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        start: dict[str, Any] = api.get(f"/scheduled-starts/{start_id}").json()
        return start if start["dispatch"] is not None else None

    found: dict[str, Any] = poll(f"start {start_id} to be dispatched", check)
    return found


def run_of(api: Api, run_id: str) -> dict[str, Any]:
    response = api.get(f"/runs/{run_id}")
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()
    return run


def wait_run(
    api: Api, run_id: str, done: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def check() -> dict[str, Any] | None:
        nonlocal last
        last = run_of(api, run_id)
        return last if done(last) else None

    try:
        found: dict[str, Any] = poll(f"run {run_id} {what}", check)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {last}") from None
    return found


def finished(run: dict[str, Any]) -> bool:
    return run["state"] not in ACTIVE


def sleeping_run(api: Api) -> str:
    """The run id of a demo ``sleep`` of 60 s, once its body is running."""
    start = create(api, echo_start(future(0), workflow="sleep", input={"seconds": 60}))
    run_id: str = dispatched(api, start["id"])["dispatch"]["run_id"]
    wait_run(api, run_id, body_began, "to be running its body")
    return run_id


def body_began(run: dict[str, Any]) -> bool:
    """Running is the claim; the body began once its start is recorded (API.md "Runs")."""
    return run["state"] == "running" and run["started_at"] is not None


def temporal(address: str, action: Callable[[Any], Any]) -> Any:
    """Run ``action(client)`` with a Temporal client of the test's own (not punctual's)."""
    from temporalio.client import Client

    async def main() -> Any:
        client = await Client.connect(address, namespace=NAMESPACE)
        return await action(client)

    return asyncio.run(main())


def describe(address: str, run_id: str) -> Any:
    async def action(client: Any) -> Any:
        return await client.get_workflow_handle(run_id).describe()

    return temporal(address, action)


def temporal_status(address: str, run_id: str, expected: str) -> str:
    """Temporal's status of the execution, waited for until ``expected`` (bounded)."""
    deadline = time.monotonic() + 10
    status = str(describe(address, run_id).status.name)
    while status != expected and time.monotonic() < deadline:
        time.sleep(0.1)
        status = str(describe(address, run_id).status.name)
    return status


def executions(address: str, run_id: str) -> list[Any]:
    """Every execution Temporal's visibility knows under the workflow id ``run_id``,
    once none of them shows running any more (visibility lags a little; bounded)."""

    async def action(client: Any) -> list[Any]:
        return [e async for e in client.list_workflows(f"WorkflowId = '{run_id}'")]

    deadline = time.monotonic() + 10
    while True:
        found: list[Any] = temporal(address, action)
        settled = found and all(e.status.name != "RUNNING" for e in found)
        if settled or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


# --------------------------------------------------------------------------- tests


def test_a_start_one_second_ahead_runs_as_the_temporal_execution_of_its_run_id(
    on_temporal: OnTemporal,
) -> None:
    api, address = on_temporal.api, on_temporal.address
    body = echo_start(future(1), input={"message": "hello from temporal"})
    created = create(api, body)
    assert created["state"] == "scheduled"
    assert created["dispatch"] is None

    start = dispatched(api, created["id"])
    assert start["state"] == "dispatched"
    assert start["attempts"] == 1
    assert start["last_error"] is None
    dispatch = start["dispatch"]
    assert instant(dispatch["dispatched_at"]) >= instant(created["start_at"]), "dispatched early"
    run_id: str = dispatch["run_id"]

    run = wait_run(api, run_id, finished, "to finish")
    assert run["state"] == "completed", run
    assert run["result"] == {"message": "hello from temporal"}
    assert run["error"] is None
    assert run["attempts"] == 1
    assert run["origin"] == {"source": "scheduled_start", "id": created["id"]}
    assert run["definition_version"] == dispatch["definition_version"] == "1"
    assert run["started_at"] is not None and run["ended_at"] is not None
    assert [r["id"] for r in api.get("/runs", origin_id=created["id"]).json()["items"]] == [run_id]

    # The run *is* a Temporal execution: workflow id = run id, on the class's task queue.
    description = describe(address, run_id)
    assert description.id == run_id
    assert description.workflow_type == WORKFLOW_TYPE
    assert description.task_queue == on_temporal.task_queue
    assert temporal_status(address, run_id, "COMPLETED") == "COMPLETED"
    found = executions(address, run_id)
    assert [(e.id, e.status.name) for e in found] == [(run_id, "COMPLETED")]


def test_a_schedule_fires_on_temporal_and_records_its_last_status(
    on_temporal: OnTemporal,
) -> None:
    api = on_temporal.api
    body = {
        "name": "every-second-on-temporal",
        "workflow": "echo",
        "input": {"message": "tick"},
        "spec": {"interval_ms": 1000},
        "overlap": "skip",
        "missed": "skip",
    }
    response = api.post("/schedules", body)
    assert response.status_code == 201, response.text
    schedule_id = response.json()["id"]

    def first_run_done() -> dict[str, Any] | None:
        items = api.get(f"/schedules/{schedule_id}/occurrences").json()["items"]
        fired = [o for o in items if o["run_id"] is not None]
        if not fired:
            return None
        run = run_of(api, fired[0]["run_id"])
        return run if finished(run) else None

    run = poll("the schedule's first run to end on Temporal", first_run_done)
    assert run["state"] == "completed", run
    assert run["origin"]["schedule_id"] == schedule_id
    paused = api.post(f"/schedules/{schedule_id}/pause", {"version": 1})
    assert paused.status_code == 200, paused.text

    def settled() -> dict[str, Any] | None:
        """The schedule once its last run has ended and says so (CR-4)."""
        schedule: dict[str, Any] = api.get(f"/schedules/{schedule_id}").json()
        last = run_of(api, schedule["last_run_id"])
        return schedule if finished(last) and schedule["last_status"] == last["state"] else None

    schedule = poll("the schedule to record its last run's end", settled)
    assert schedule["last_status"] == "completed"


def test_cancel_reaches_a_sleeping_run_on_temporal(on_temporal: OnTemporal) -> None:
    api, address = on_temporal.api, on_temporal.address
    run_id = sleeping_run(api)

    began = time.monotonic()
    response = api.post(f"/runs/{run_id}/cancel")
    assert response.status_code == 200, response.text
    assert response.json()["cancel_requested"] is True
    run = wait_run(api, run_id, finished, "to end after the cancel")
    assert run["state"] == "canceled", run
    assert time.monotonic() - began < 10, "the cancel took too long to reach the body"
    assert run["result"] is None

    again = api.post(f"/runs/{run_id}/cancel")  # idempotent, also once finished
    assert again.status_code == 200, again.text
    assert again.json()["state"] == "canceled"
    assert temporal_status(address, run_id, "CANCELED") == "CANCELED"


def test_terminate_ends_a_sleeping_run_on_temporal_at_once(on_temporal: OnTemporal) -> None:
    api, address = on_temporal.api, on_temporal.address
    run_id = sleeping_run(api)

    response = api.post(f"/runs/{run_id}/terminate")
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "terminated"  # recorded at once, in the answer
    assert run_of(api, run_id)["state"] == "terminated"
    assert temporal_status(address, run_id, "TERMINATED") == "TERMINATED"

    time.sleep(2.5)  # past a sync pass: nothing may turn it back or give it a result
    run = run_of(api, run_id)
    assert run["state"] == "terminated", run
    assert run["result"] is None
    again = api.post(f"/runs/{run_id}/terminate")
    assert again.status_code == 200, again.text
    assert again.json()["state"] == "terminated"


def test_a_replayed_create_returns_the_same_start_and_runs_once(on_temporal: OnTemporal) -> None:
    api, address = on_temporal.api, on_temporal.address
    body = echo_start(future(1), input={"message": "once"}, business_request_id="replay-1")
    first = api.post("/scheduled-starts", body, key="create-on-temporal")
    assert first.status_code == 201, first.text
    replay = api.post("/scheduled-starts", body, key="create-on-temporal")
    assert replay.status_code == 201, replay.text
    assert replay.json() == first.json()

    start_id = first.json()["id"]
    run_id: str = dispatched(api, start_id)["dispatch"]["run_id"]
    assert wait_run(api, run_id, finished, "to finish")["state"] == "completed"
    # After dispatch and completion, the replay still answers the original 201.
    late = api.post("/scheduled-starts", body, key="create-on-temporal")
    assert late.status_code == 201, late.text
    assert late.json() == first.json()

    starts = api.get("/scheduled-starts", business_request_id="replay-1").json()["items"]
    assert [s["id"] for s in starts] == [start_id]
    assert [r["id"] for r in api.get("/runs", origin_id=start_id).json()["items"]] == [run_id]
    assert len(executions(address, run_id)) == 1


def test_runs_are_read_from_the_store_after_the_temporal_server_is_gone(
    sqlite_url: str, tmp_path: Path
) -> None:
    """WF-8 with a Temporal server of this test's own, stopped in the middle of it: reads
    answer from the store; a run cancel is recorded at once (FT-6: the store changes first)
    and reaches the execution once the server is back (on the same port and database file)."""
    with (
        RestartableTemporal(tmp_path / "temporal") as server,
        punctual_on_temporal(sqlite_url, tmp_path, server.address) as running,
    ):
        api = running.api
        start = create(api, echo_start(future(0), input={"message": "kept"}))
        done_id: str = dispatched(api, start["id"])["dispatch"]["run_id"]
        done = wait_run(api, done_id, finished, "to finish")
        assert done["state"] == "completed", done
        sleeping_id = sleeping_run(api)
        sleeping = run_of(api, sleeping_id)

        server.stop()  # the Temporal server is gone; punctual keeps running

        assert run_of(api, done_id) == done
        assert run_of(api, sleeping_id) == sleeping
        listed = api.get("/runs")
        assert listed.status_code == 200, listed.text
        assert {r["id"] for r in listed.json()["items"]} == {done_id, sleeping_id}
        fetched = api.get(f"/scheduled-starts/{start['id']}")
        assert fetched.status_code == 200, fetched.text
        assert fetched.json()["dispatch"]["run_id"] == done_id
        # The cancel is the user's decision: recorded now, although Temporal is down.
        accepted = api.post(f"/runs/{sleeping_id}/cancel", key="cancel-in-outage")
        assert accepted.status_code == 200, accepted.text
        assert accepted.json()["cancel_requested"] is True
        assert run_of(api, sleeping_id)["cancel_requested"] is True
        assert run_of(api, sleeping_id)["state"] == "running"

        server.start()

        # The retry replays the recorded answer; the sync sends the cancel to Temporal.
        replayed = api.post(f"/runs/{sleeping_id}/cancel", key="cancel-in-outage")
        assert replayed.status_code == 200, replayed.text
        assert replayed.json() == accepted.json()
        run = wait_run(api, sleeping_id, finished, "to end after the cancel")
        assert run["state"] == "canceled", run
        assert run_of(api, done_id) == done
