"""Runs on a real worker (child processes) and a real runner, on both stores (WF-4..WF-7).

A start is created through the API 1 s in the past (due at once); the runner
dispatches it and the worker executes it. Cancel is cooperative, terminate immediate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.domain import backoff
from punctual.domain.permissions import Role
from punctual.domain.runs import RunState
from punctual.errors import Unavailable
from punctual.usecases.running import execution
from tests.conftest import make_settings
from tests.support.api import Api, in_process, member_api

APP_REF = "tests.integration.worker_app:app"


@pytest.fixture
def running(settings_for_worker: Any) -> Iterator[tuple[bootstrap.Punctual, Api]]:
    system = bootstrap.build(settings_for_worker)
    try:
        system.start_worker(APP_REF, slots=2)
        system.start_runner()
        with in_process(system) as client:
            yield system, member_api(system, client, role=Role.ADMIN)
    finally:
        system.close()


@pytest.fixture
def settings_for_worker(database_url: str, tmp_path: Path) -> Any:
    return make_settings(
        database_url,
        tmp_path,
        worker={"heartbeat_seconds": 0.5, "liveness_seconds": 10},
        runner={"lease_seconds": 2, "max_idle_seconds": 0.2},
    )


def start_now(api: Api, workflow: str, payload: Any) -> dict[str, Any]:
    response = api.create_due(
        {
            "workflow": workflow,
            "input": payload,
            "business_request_id": f"test-{workflow}",
            "workload_class": "standard",
        },
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_for(
    api: Api, run_id: str, done: Callable[[dict[str, Any]], bool], timeout: float = 15
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        response = api.get(f"/runs/{run_id}")
        if response.status_code == 200:
            last = response.json()
            if done(last):
                return last
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not get there in {timeout} s; last seen: {last}")


def run_id_of(api: Api, start: dict[str, Any]) -> str:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        current = api.get(f"/scheduled-starts/{start['id']}").json()
        if current["dispatch"] is not None:
            run_id: str = current["dispatch"]["run_id"]
            return run_id
        time.sleep(0.05)
    raise AssertionError(f"start {start['id']} was not dispatched")


def finished(run: dict[str, Any]) -> bool:
    return run["state"] not in (RunState.PENDING.value, RunState.RUNNING.value)


def test_a_due_start_runs_once_and_records_its_result(
    running: tuple[bootstrap.Punctual, Api],
) -> None:
    _, api = running
    start = start_now(api, "echo", {"message": "hello"})
    run = wait_for(api, run_id_of(api, start), finished)
    assert run["state"] == "completed"
    assert run["result"] == {"message": "hello"}
    assert run["attempts"] == 1
    assert run["origin"] == {"source": "scheduled_start", "id": start["id"]}
    assert run["started_by"] == "alice"
    runs = api.get("/runs", origin_id=start["id"]).json()["items"]
    assert [r["id"] for r in runs] == [run["id"]]


def test_a_raising_workflow_fails_its_run(running: tuple[bootstrap.Punctual, Api]) -> None:
    _, api = running
    run = wait_for(api, run_id_of(api, start_now(api, "explode", {})), finished)
    assert run["state"] == "failed"
    assert run["error"]["code"] == "workflow_error"
    assert run["error"]["type"] == "RuntimeError"
    assert "exploded on purpose" in run["error"]["message"]


def test_cancel_is_cooperative(running: tuple[bootstrap.Punctual, Api]) -> None:
    _, api = running
    run_id = run_id_of(api, start_now(api, "nap", {"seconds": 60}))
    wait_for(api, run_id, lambda r: r["state"] == "running")
    canceled = api.post(f"/runs/{run_id}/cancel")
    assert canceled.status_code == 200, canceled.text
    assert canceled.json()["cancel_requested"] is True
    began = time.monotonic()
    run = wait_for(api, run_id, finished)
    assert run["state"] == "canceled"
    assert time.monotonic() - began < 5
    again = api.post(f"/runs/{run_id}/cancel")
    assert again.status_code == 200
    assert again.json()["state"] == "canceled"


def test_terminate_is_immediate_and_frees_the_slot(running: tuple[bootstrap.Punctual, Api]) -> None:
    _, api = running
    run_ids = [run_id_of(api, start_now(api, "wedge", {})) for _ in range(2)]
    hung = run_ids[0]
    wait_for(api, hung, lambda r: r["state"] == "running")
    terminated = api.post(f"/runs/{hung}/terminate")
    assert terminated.status_code == 200, terminated.text
    assert terminated.json()["state"] == "terminated"
    assert api.post(f"/runs/{hung}/terminate").json()["state"] == "terminated"
    # Both slots were busy with hung bodies; a new run proves the killed slot came back.
    follow_up = wait_for(api, run_id_of(api, start_now(api, "echo", {"message": "next"})), finished)
    assert follow_up["state"] == "completed"
    final = api.get(f"/runs/{hung}").json()
    assert final["state"] == "terminated"
    assert final["result"] is None


def test_execution_timeout_ends_a_hung_run(running: tuple[bootstrap.Punctual, Api]) -> None:
    _, api = running
    run = wait_for(api, run_id_of(api, start_now(api, "hang", {})), finished, timeout=20)
    assert run["state"] == "timed_out"
    assert run["error"]["code"] == "timed_out"
    assert "timeout" in run["error"]["message"]


def test_a_lost_workers_run_is_retried_as_a_new_attempt(
    running: tuple[bootstrap.Punctual, Api],
) -> None:
    system, api = running
    # A start whose run is claimed by a worker that then vanishes: nobody renews its lease.
    start = start_now(api, "echo", {"message": "again"})
    run_id = run_id_of(api, start)
    lost = wait_for(api, run_id, finished)
    assert lost["attempts"] == 1
    with system.store.engine.begin() as conn:
        from punctual.adapters.stores.sql.tables import runs

        conn.execute(
            runs.update()
            .where(runs.c.id == run_id)
            .values(
                state="running",
                claimed_by="wrk_gone",
                lease_until=system.services.clock.now() - timedelta(seconds=1),
                result=None,
                ended_at=None,
            )
        )
    run = wait_for(api, run_id, lambda r: r["attempts"] == 2 and finished(r), timeout=20)
    assert run["state"] == "completed"
    assert run["result"] == {"message": "again"}


def test_an_outcome_the_store_cannot_take_yet_is_kept_and_recorded_once(
    running: tuple[bootstrap.Punctual, Api], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store refuses the outcome for longer than a lease: the worker keeps it, renews
    the run's lease meanwhile and records it when the store is back; the body runs once."""
    _, api = running
    refusals = 4  # retried every 0.5 s: ~2 s, the lease's length
    attempts: list[int] = []
    real = execution.finish_runs

    def refusing(services: Any, worker_id: str, finished: Any) -> list[bool]:
        attempts.append(len(finished))
        if len(attempts) <= refusals:
            raise Unavailable("the test's outage", code="store_unavailable")
        return real(services, worker_id, finished)

    monkeypatch.setattr(execution, "finish_runs", refusing)
    start = start_now(api, "echo", {"message": "kept"})
    run = wait_for(api, run_id_of(api, start), finished, timeout=20)

    assert len(attempts) == refusals + 1
    assert (run["state"], run["attempts"]) == ("completed", 1)
    assert run["result"] == {"message": "kept"}


def test_a_start_waits_for_a_worker_with_its_version(database_url: str, tmp_path: Path) -> None:
    """No worker has the version loaded: the start goes back to scheduled with backoff."""
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        from tests.support.api import register_demo

        register_demo(system)  # definitions exist, but no live worker has them loaded
        client: TestClient
        with in_process(system) as client:
            api = member_api(system, client)
            start = start_now(api, "echo", {"message": "waiting"})
            system.start_runner()
            deadline = time.monotonic() + 10
            current = start
            while time.monotonic() < deadline and current["attempts"] == 0:
                time.sleep(0.05)
                current = api.get(f"/scheduled-starts/{start['id']}").json()
            # A loaded machine may let the 5 s backoff pass before the poll looks again, so a
            # second attempt can already be in: what must hold is the spacing, not the count.
            assert current["state"] == "scheduled"
            assert 1 <= current["attempts"] < backoff.MAX_ATTEMPTS
            assert current["last_error"]["code"] == "version_not_loaded"
            failed_at = datetime.fromisoformat(current["last_error"]["at"])
            next_at = datetime.fromisoformat(current["next_attempt_at"])
            assert next_at - failed_at >= backoff.FIRST_DELAY
            assert current["dispatch"] is None
    finally:
        system.close()
