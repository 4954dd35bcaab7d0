"""A reproduction of what chaos seed 102 found: a run queued in a frozen worker's slot
begins when the worker thaws, although its lease ran out meanwhile and another worker
already executed (even completed) the run's next attempt (docs/reliability.md).

``python -m tests.chaos.frozen_slot`` (needs the PostgreSQL server of the tests): one
worker with one slot claims two runs due together, A (1 s) and B queued behind it; the
moment A's body begins, the worker and its slot processes get SIGSTOP; a second worker
starts, the runner gives both runs back when their leases expire and the second worker
executes them as attempt 2; then the first worker gets SIGCONT. Its slot finishes A and
goes on to B's attempt 1 before the worker's watchdog fences the claim. The freeze must
land in the 0.2 s B waits queued behind A (then the worker takes it back), so a round that
misses it is made again, up to five. Exits 1 when B's superseded attempt began (the
defect), 0 when no round saw it.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.embedded import Scheduler
from punctual.settings import load_settings
from tests.chaos.deployment import CHAOS_APP, ChaosProcesses, descendants, signal_all
from tests.chaos.record import BODIES, read_records
from tests.e2e.harness import RUNNER_READY, WORKER_READY, Managed, fresh_database, wait_for

READY_SECONDS = 90.0
ROUNDS = 5


def main() -> int:
    for number in range(1, ROUNDS + 1):
        found = one_round()
        if found is None:
            print(f"round {number}: the freeze missed B's wait in the slot")
            continue
        reproduced, text = found
        print(text)
        return 1 if reproduced else 0
    print(f"B never waited in the frozen slot in {ROUNDS} rounds")
    return 0


def one_round() -> tuple[bool, str] | None:
    """Whether B's superseded attempt began, and what the round saw; None when B never
    waited in the frozen slot."""
    directory = Path(tempfile.mkdtemp(prefix="punctual-frozen-slot-"))

    def bodies() -> list[dict[str, Any]]:
        return list(read_records(directory / BODIES))

    def began(tag: str, attempt: int) -> dict[str, Any] | None:
        return next((b for b in bodies() if b.get("tag") == tag and b["attempt"] >= attempt), None)

    slot = {"PUNCTUAL_WORKER__SLOTS": "1"}
    with fresh_database() as url, ChaosProcesses(directory, url, slot) as procs:
        worker = ["worker", "--app", CHAOS_APP, "--slots", "1"]
        frozen = procs.start(Managed("worker-1", worker, WORKER_READY))
        procs.wait_ready(frozen, READY_SECONDS)
        runner = ["serve", "--components", "runner", "--app", CHAOS_APP]
        procs.wait_ready(procs.start(Managed("runner", runner, RUNNER_READY)), READY_SECONDS)
        settings = load_settings(None, database_url=url, codec={"key_file": str(procs.key_file)})
        scheduler = Scheduler(bootstrap.build(settings), "default", "repro", Role.ADMIN)
        try:
            due = datetime.now(UTC) + timedelta(seconds=3)  # one pass dispatches both
            for tag, seconds in (("A", 1.0), ("B", 0.1)):
                body = {"tag": tag, "seconds": seconds}
                scheduler.schedule_at(
                    "chaos-body", body, due, business_request_id=tag, idempotency_key=tag
                )
            wait_for("A's body to begin", lambda: began("A", 1), 60, step=0.005)
            pid = frozen.current.process.pid
            stopped = signal_all([pid, *descendants(pid)], signal.SIGSTOP)
            rescuer = procs.start(Managed("worker-2", worker, WORKER_READY))
            procs.wait_ready(rescuer, READY_SECONDS)
            retried = wait_for("B's next body", lambda: began("B", 1), 60, step=0.05)
            if retried["attempt"] < 2:
                return None  # B was taken back before the freeze and ran on worker-2
            time.sleep(0.5)
            signal_all(list(reversed(stopped)), signal.SIGCONT)
            time.sleep(4)
        finally:
            scheduler.close()
    run_id = retried["run_id"]
    executions = sorted((b for b in bodies() if b["run_id"] == run_id), key=lambda b: b["t"])
    lines = [
        f"{run_id} attempt {b['attempt']} {b['event']} pid {b['pid']} at {b['t']:.3f}"
        for b in executions
    ]
    stale = [
        b
        for b in executions
        if b["event"] == "begin" and b["attempt"] == 1 and b["t"] > retried["t"]
    ]
    verdict = (
        f"reproduced: attempt 1 began {stale[0]['t'] - retried['t']:.3f} s after attempt 2"
        if stale
        else "attempt 1 did not begin after attempt 2"
    )
    return bool(stale), "\n".join([*lines, verdict, f"records in {directory}"])


if __name__ == "__main__":
    sys.exit(main())
