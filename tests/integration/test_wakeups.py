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

import pytest

from punctual import bootstrap
from punctual.domain.permissions import Principal, Role
from punctual.usecases.scheduled import starts
from tests.conftest import make_settings
from tests.support.api import enroll

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
