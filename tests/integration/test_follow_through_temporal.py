"""Follow-through of schedules' runs on the Temporal engine, on both stores (CR-4).

A real ``temporal server start-dev``, a real Temporal worker (bodies in child processes)
and the runner with its sync and follow-through threads: the Temporal ledger sets a run's
``ended_at`` when it records the end, and the runner's pass follows it through exactly as
it does the local engine's runs. Completed, failed (the body raised), terminated and
canceled runs of schedules' occurrences each get their follow-through, and each schedule
shows its run's end in ``last_status``/``last_run_id``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.embedded import Scheduler
from tests.api.test_starts_on_temporal import temporal_settings
from tests.integration.test_follow_through_paths import SCORE, TENANT, fire_and_end

pytestmark = pytest.mark.temporal

APP_REF = "punctual.demo:app"
WAIT_SECONDS = 30.0


@pytest.fixture
def on_temporal(
    database_url: str, tmp_path: Path, temporal_address: str
) -> Iterator[bootstrap.Punctual]:
    # Queues of this test's own: the module's Temporal server outlives the test.
    prefix = f"follow-{uuid.uuid4().hex[:8]}"
    system = bootstrap.build(temporal_settings(database_url, tmp_path, temporal_address, prefix))
    try:
        system.start_worker(APP_REF)
        system.start_runner()
        yield system
    finally:
        system.close()


def test_every_run_end_on_temporal_is_followed_through(on_temporal: bootstrap.Punctual) -> None:
    alice = Scheduler(on_temporal, TENANT, "alice", Role.MEMBER)
    ended = fire_and_end(
        alice,
        {
            "completed": ("score", {"score": 0.9}),
            "failed": ("fail", {}),
            "terminated": ("sleep", {"seconds": 60}),
            "canceled": ("sleep", {"seconds": 60}),
        },
        WAIT_SECONDS,
        regression=SCORE,
    )
    for state, seen in ended.items():
        assert seen["run"]["state"] == state
        assert seen["schedule"]["last_run_id"] == seen["run"]["id"]
        follow = seen["follow_through"]
        assert (follow["status"], follow["previous_run_id"], follow["regressions"]) == (
            "not_comparable",
            None,
            [],
        )
        if state == "completed":
            assert "no earlier occurrence" in follow["reason"]
        else:
            assert follow["reason"] == f"the run ended {state}, not completed"
