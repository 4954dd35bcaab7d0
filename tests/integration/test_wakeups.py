"""Cross-process wake-ups on PostgreSQL (LISTEN/NOTIFY): a runner that planned to sleep
for a minute wakes for a start created elsewhere and due sooner; a worker elsewhere claims
and starts the new run.

The three parts are separate systems (separate doorbells, connection pools and
listeners), so the only path between them is the database, as between processes.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.domain.permissions import Principal, Role
from punctual.usecases.recurring import schedules
from punctual.usecases.recurring.schedule_fields import decode_create
from punctual.usecases.scheduled import starts
from tests.conftest import make_settings
from tests.support.api import enroll, member_api
from tests.support.webhook_receiver import Receiver

IDLE_SECONDS = 60.0
"""The runner's sleep when nothing is due: a dispatch before it ends can only come from the
wake-up, however slowly a loaded machine runs the rest (pytest's limit is 120 s)."""


@pytest.mark.postgres
def test_a_sleeping_runner_wakes_for_work_committed_elsewhere(pg_url: str, tmp_path: Path) -> None:
    def part() -> bootstrap.Punctual:
        return bootstrap.build(
            make_settings(pg_url, tmp_path, runner={"max_idle_seconds": IDLE_SECONDS})
        )

    api, runner, worker = part(), part(), part()
    try:
        worker.start_worker("punctual.demo:app", slots=2)
        asleep_from = datetime.now(UTC)
        dispatcher = runner.start_runner()
        deadline = time.monotonic() + 30
        # Its first wait returns at once (a doorbell starts rung, so no ring is lost); after
        # its second pass, which found nothing either, it sleeps for IDLE_SECONDS.
        while dispatcher.status.passes < 2:
            assert time.monotonic() < deadline, "the runner never made its first two passes"
            time.sleep(0.02)
        due = datetime.now(UTC) + timedelta(milliseconds=300)
        command = starts.CreateStart(
            workflow="echo",
            input={"message": "wake up"},
            business_request_id="wake",
            start_at=due,
            workload_class="standard",
        )
        alice = Principal("acme", "alice", Role.MEMBER)
        enroll(api, alice)
        created = api.mutations.run(None, starts.create(api.services, alice, command)).body
        deadline = time.monotonic() + 30  # never hangs; well inside the runner's sleep
        while True:
            with api.store.transaction(readonly=True) as tx:
                start = tx.starts.get("acme", created["id"])
                assert start is not None
                run = tx.runs.get("acme", start.run_id)
            if run is not None and run.started_at is not None:
                break
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.02)
        assert start.dispatch is not None
        dispatched_at = start.dispatch.dispatched_at
        assert due <= dispatched_at < asleep_from + timedelta(seconds=IDLE_SECONDS), (
            "dispatched before the runner's own sleep could end: it was woken"
        )
        assert run.started_at >= dispatched_at
    finally:
        for part_ in (api, runner, worker):
            part_.close()


def _schedule_every_second(system: bootstrap.Punctual) -> str:
    alice = Principal("acme", "alice", Role.MEMBER)
    enroll(system, alice)
    body: dict[str, Any] = {
        "name": "every-second",
        "workflow": "echo",
        "input": {"message": "tick"},
        "spec": {"interval_ms": 1000},
        "overlap": "allow_all",
        "missed": "skip",
    }
    created = system.mutations.run(
        None, schedules.create(system.services, alice, decode_create(body))
    )
    return str(created.body["id"])


def _ended_since(
    system: bootstrap.Punctual, schedule_id: str, waited_for: float
) -> tuple[float, float]:
    """When a run of the schedule had ended and when a follow-through of it was recorded
    (monotonic seconds), looking every 20 ms for up to ``waited_for``."""
    runs, judged = t.runs.c, t.follow_throughs.c
    ended_query = sa.select(sa.func.count()).where(
        runs.schedule_id == schedule_id, runs.ended_at.is_not(None)
    )
    judged_query = sa.select(sa.func.count()).where(judged.schedule_id == schedule_id)
    deadline = time.monotonic() + waited_for
    ended_at: float | None = None
    while time.monotonic() < deadline:
        with system.store.engine.connect() as conn:
            if ended_at is None and conn.execute(ended_query).scalar_one():
                ended_at = time.monotonic()
            if ended_at is not None and conn.execute(judged_query).scalar_one():
                return ended_at, time.monotonic()
        time.sleep(0.02)
    raise AssertionError(f"no follow-through within {waited_for} s (a run ended: {ended_at})")


@pytest.mark.parametrize(
    ("store", "worker_apart"),
    [
        ("sqlite", False),
        pytest.param("postgres", False, marks=pytest.mark.postgres),
        pytest.param("postgres", True, marks=pytest.mark.postgres),
    ],
)
def test_a_run_that_ends_wakes_its_follow_through(
    store: str, worker_apart: bool, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The worker's recording rings the follow-through, which otherwise sleeps half of
    ``max_idle_seconds`` (30 s here): in one ``serve``, and from a worker in another
    process (PostgreSQL's NOTIFY, the only path between two systems)."""
    url = request.getfixturevalue("sqlite_url" if store == "sqlite" else "pg_url")
    settings = make_settings(url, tmp_path, runner={"max_idle_seconds": IDLE_SECONDS})
    runner = bootstrap.build(settings)
    worker = bootstrap.build(settings) if worker_apart else runner
    try:
        worker.start_worker("punctual.demo:app", slots=2)
        schedule_id = _schedule_every_second(runner)
        runner.start_runner()
        ended, judged = _ended_since(runner, schedule_id, 40)
        assert judged - ended < IDLE_SECONDS / 4, (ended, judged)
    finally:
        if worker_apart:
            worker.close()
        runner.close()


def _tested_and_delivered(api: bootstrap.Punctual, runner: bootstrap.Punctual) -> float:
    """Seconds from a webhook's test request (served by ``api``) to its arrival at a real
    receiver, sent by ``runner``'s deliverer, whose idle pause is ``IDLE_SECONDS``."""
    receiver = Receiver()
    receiver.start()
    try:
        with TestClient(api.http_app()) as client:
            admin = member_api(api, client, subject="root", role=Role.ADMIN)
            hook = admin.post("/webhooks", {"url": receiver.url(), "events": ["regression"]})
            assert hook.status_code == 201, hook.text
            runner.start_runner()
            time.sleep(0.5)  # its first passes found nothing: it sleeps for IDLE_SECONDS
            asked = time.monotonic()
            tested = admin.post(f"/webhooks/{hook.json()['id']}/test")
            assert tested.status_code == 202, tested.text
            deadline = asked + IDLE_SECONDS / 2
            while not receiver.received:
                assert time.monotonic() < deadline, "the deliverer never woke"
                time.sleep(0.02)
            return time.monotonic() - asked
    finally:
        receiver.stop()


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_delivery_queued_in_this_process_leaves_at_once(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue("sqlite_url" if store == "sqlite" else "pg_url")
    settings = make_settings(url, tmp_path, runner={"max_idle_seconds": IDLE_SECONDS})
    system = bootstrap.build(settings)
    try:
        assert _tested_and_delivered(system, system) < IDLE_SECONDS / 4
    finally:
        system.close()


@pytest.mark.postgres
def test_a_delivery_queued_in_another_process_leaves_at_once(pg_url: str, tmp_path: Path) -> None:
    settings = make_settings(pg_url, tmp_path, runner={"max_idle_seconds": IDLE_SECONDS})
    api, runner = bootstrap.build(settings), bootstrap.build(settings)
    try:
        assert _tested_and_delivered(api, runner) < IDLE_SECONDS / 4
    finally:
        api.close()
        runner.close()
