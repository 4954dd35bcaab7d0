"""One log line per run end (SPEC OP-4), on both engines: the ``run.<state>`` event of
the worker that recorded the end, with the run's workflow and the body's duration, and
no second line about the same end (the Temporal worker used to add its own).

A real local worker and runner; on Temporal a real ``temporal server start-dev``, a real
Temporal worker and the runner.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.stores.sql import tables
from punctual.usecases.running.execution import reap
from tests.api.test_starts_on_temporal import temporal_settings
from tests.conftest import make_settings
from tests.integration.test_worker_runs import finished, run_id_of, start_now, wait_for
from tests.support.api import Api, in_process, member_api

APP_REF = "punctual.demo:app"
WAIT_SECONDS = 30.0
RUN_END = ("run.completed", "run.failed", "run.canceled", "run.terminated", "run.timed_out")


def lines_about(caplog: pytest.LogCaptureFixture, run_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if run_id in r.getMessage()]


def end_lines(caplog: pytest.LogCaptureFixture, run_id: str) -> list[str]:
    """The lines that say the run ended: its event, or any ``run_<state>`` line."""
    ends = tuple(f"event={name} " for name in RUN_END) + tuple(
        f"event={name.replace('.', '_')} " for name in RUN_END
    )
    return [r.getMessage() for r in lines_about(caplog, run_id) if r.getMessage().startswith(ends)]


def the_one_end_line(
    caplog: pytest.LogCaptureFixture, run_id: str, state: str, attempt: int = 1
) -> str:
    deadline = time.monotonic() + WAIT_SECONDS
    while not end_lines(caplog, run_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    said = end_lines(caplog, run_id)
    assert len(said) == 1, "\n".join(r.getMessage() for r in lines_about(caplog, run_id))
    (line,) = said
    assert line.startswith(f"event=run.{state} tenant=acme subject={run_id} "), line
    assert " workflow=" in line and f"attempt={attempt}" in line, line
    return line


def run_and_read(
    api: Api, caplog: pytest.LogCaptureFixture, workflow: str, body: dict[str, Any]
) -> str:
    run_id = run_id_of(api, start_now(api, workflow, body))
    run = wait_for(api, run_id, finished, timeout=WAIT_SECONDS)
    return the_one_end_line(caplog, run_id, run["state"])


@pytest.fixture
def local_api(sqlite_url: str, tmp_path: Path) -> Iterator[Api]:
    system = bootstrap.build(
        make_settings(sqlite_url, tmp_path, runner={"max_idle_seconds": 0.2}, worker={"slots": 1})
    )
    try:
        system.start_worker(APP_REF)
        system.start_runner()
        with in_process(system) as client:
            yield member_api(system, client)
    finally:
        system.close()


def test_a_local_run_s_end_is_one_line(local_api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="punctual")
    completed = run_and_read(local_api, caplog, "echo", {"message": "hi"})
    assert " workflow=echo" in completed and " duration_ms=" in completed
    failed = run_and_read(local_api, caplog, "fail", {})
    assert " workflow=fail" in failed and " duration_ms=" in failed


@pytest.mark.temporal
def test_a_temporal_run_s_end_is_one_line(
    sqlite_url: str, tmp_path: Path, temporal_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="punctual")
    prefix = f"lines-{uuid.uuid4().hex[:8]}"
    system = bootstrap.build(temporal_settings(sqlite_url, tmp_path, temporal_address, prefix))
    try:
        system.start_worker(APP_REF)
        system.start_runner()
        with in_process(system) as client:
            api = member_api(system, client)
            completed = run_and_read(api, caplog, "echo", {"message": "hi"})
    finally:
        system.close()
    assert " workflow=echo" in completed and " duration_ms=" in completed


@pytest.fixture
def one_slot(sqlite_url: str, tmp_path: Path) -> Iterator[tuple[bootstrap.Punctual, Api]]:
    """A runner and a worker of one slot: while a run holds it, the next runs wait."""
    settings = make_settings(
        sqlite_url, tmp_path, runner={"max_idle_seconds": 0.2}, worker={"slots": 1}
    )
    system = bootstrap.build(settings)
    try:
        system.start_worker(APP_REF)
        system.start_runner()
        with in_process(system) as client:
            yield system, member_api(system, client)
    finally:
        system.close()


def test_runs_the_store_ends_have_their_one_line_too(
    one_slot: tuple[bootstrap.Punctual, Api], caplog: pytest.LogCaptureFixture
) -> None:
    """Canceled before a worker took it, terminated, or timed out waiting for a worker: no
    worker records these ends, so the process that does says the line."""
    system, api = one_slot
    caplog.set_level(logging.INFO, logger="punctual")
    busy = run_id_of(api, start_now(api, "sleep", {"seconds": 60}))
    wait_for(api, busy, lambda run: run["state"] == "running", timeout=WAIT_SECONDS)
    waiting, abandoned = (
        run_id_of(api, start_now(api, "echo", {"message": name})) for name in ("a", "b")
    )
    assert api.post(f"/runs/{waiting}/cancel").json()["state"] == "canceled"
    assert " workflow=echo" in the_one_end_line(caplog, waiting, "canceled", attempt=0)

    # Waiting longer than the pending timeout, without waiting that long.
    with system.store.engine.begin() as conn:
        conn.execute(
            sa.update(tables.runs)
            .where(tables.runs.c.id == abandoned)
            .values(queued_at=datetime.now(UTC) - timedelta(days=1))
        )
    assert reap(system.services).timed_out == 1
    assert api.get(f"/runs/{abandoned}").json()["state"] == "timed_out"
    assert " workflow=echo" in the_one_end_line(caplog, abandoned, "timed_out", attempt=0)

    assert api.post(f"/runs/{busy}/terminate").json()["state"] == "terminated"
    assert " workflow=sleep" in the_one_end_line(caplog, busy, "terminated")
    # Asked again, an ended run changes nothing and says nothing more.
    assert api.post(f"/runs/{waiting}/cancel").status_code == 200
    assert api.post(f"/runs/{busy}/terminate").status_code == 200
    assert len(end_lines(caplog, waiting)) == len(end_lines(caplog, busy)) == 1
