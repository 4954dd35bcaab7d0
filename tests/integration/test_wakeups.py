"""Cross-process wake-ups on PostgreSQL (LISTEN/NOTIFY): a runner that planned to sleep
for 30 s wakes for a start created elsewhere and due sooner; a worker elsewhere claims
the new run at once.

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
from punctual.usecases import starts
from tests.conftest import make_settings
from tests.support.api import enroll


@pytest.mark.postgres
def test_a_sleeping_runner_wakes_for_work_committed_elsewhere(pg_url: str, tmp_path: Path) -> None:
    def part() -> bootstrap.Punctual:
        return bootstrap.build(make_settings(pg_url, tmp_path, runner={"max_idle_seconds": 30}))

    api, runner, worker = part(), part(), part()
    try:
        worker.start_worker("punctual.demo:app", slots=2)
        runner.start_runner()
        time.sleep(1.0)  # the runner has looked, found nothing, and gone to sleep for 30 s
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
        deadline = time.monotonic() + 10
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
        assert (start.dispatch.dispatched_at - due).total_seconds() < 1.0
        assert (run.started_at - due).total_seconds() < 1.5
    finally:
        for part_ in (api, runner, worker):
            part_.close()
