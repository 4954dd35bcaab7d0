"""Faults on the Temporal engine, with real processes on PostgreSQL (DP-2, DP-3, WF-6, WF-8).

Each test has a fresh PostgreSQL database and a Temporal dev server of its own, and runs
``punctual serve --components runner`` and ``punctual worker --engine temporal`` as
subprocesses (``PUNCTUAL_ENGINE=temporal``):

* the runner is killed (SIGKILL) after Temporal accepted its starts and before the store
  recorded them; restarted without the crash point, it converges on the executions that
  already exist: one execution per run id, each start dispatched once, every run done;
* the Temporal server stops in the middle of a burst of due starts and comes back on the
  same port and database file: dispatch pauses and resumes, every start is dispatched
  exactly once to exactly one execution, and the outage is charged to no start.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from punctual.adapters.engines.temporal.messages import FailureType
from tests.e2e.harness import (
    Creator,
    Facts,
    count_starts,
    fresh_database,
    read_facts,
    utc_in,
    wait_for,
    wait_until_done,
)
from tests.e2e.temporal_harness import (
    RestartableTemporal,
    TemporalProcesses,
    closing_failure_types,
    executions_of,
    started_in_temporal,
)

pytestmark = [pytest.mark.e2e, pytest.mark.temporal, pytest.mark.postgres, pytest.mark.spread]

KILLED = -signal.SIGKILL
CRASH_STARTS = 5
BURST_STARTS = 50
BURST_SPREAD_SECONDS = 5.0
OUTAGE_SECONDS = 5.0


def charged(facts: Facts) -> list[str]:
    """Starts that were charged more than their one successful dispatch (DP-3)."""
    return [
        f"{s.id}: attempts={s.attempts} last_error={s.last_error}"
        for s in facts.starts.values()
        if s.attempts != 1 or s.last_error is not None
    ]


def execution_problems(address: str, facts: Facts) -> list[str]:
    """Every run id without exactly one completed execution, or with another execution
    that could have run the body. An execution started for a dispatch that a fault kept
    from recording the run waits for the record, gives up ``NotRecorded`` without running
    the body, and the re-dispatch starts a new one: that leftover is the designed path
    (the engine's ``_id_policies``), any other one is not."""
    run_ids = [s.run_id for s in facts.starts.values()]
    problems: list[str] = []
    for run_id, found in sorted(executions_of(address, run_ids).items()):
        completed = [e for e in found if e.status.name == "COMPLETED"]
        others = [e for e in found if e.status.name != "COMPLETED"]
        statuses = [e.status.name for e in found]
        if len(completed) != 1:
            problems.append(f"run {run_id}: executions {statuses}, expected one COMPLETED")
            continue
        if completed[0].workflow_type != "punctual.run":
            problems.append(f"run {run_id}: workflow type {completed[0].workflow_type}")
        failures = closing_failure_types(address, others)
        ran = [e.run_id for e in others if failures[e.run_id] != FailureType.NOT_RECORDED]
        if ran:
            problems.append(
                f"run {run_id}: executions {statuses}; not a NotRecorded leftover: {ran}"
            )
    return problems


def test_runner_killed_between_temporal_start_and_record_converges_on_one_execution(
    tmp_path: Path,
) -> None:
    with (
        RestartableTemporal(tmp_path / "temporal") as temporal,
        fresh_database() as url,
        TemporalProcesses(tmp_path, url, temporal.address) as procs,
    ):
        procs.extras.append(temporal.log_tail)
        # Started side by side: nothing is due before the starts below are created.
        worker = procs.temporal_worker("worker", slots=2)
        runner = procs.serve("runner", "runner", crash_at="after_engine_start:1")
        procs.wait_ready(worker)
        procs.wait_ready(runner)

        with Creator(url, procs.key_file) as creator:
            due = utc_in(2.0)  # every start due at one instant: one page, one crash
            created = [creator.echo_at(due, n) for n in range(CRASH_STARTS)]
        assert procs.wait_exit(runner, timeout=30) == KILLED

        # The window: Temporal accepted every start of the page, the store recorded none.
        facts = read_facts(url)
        run_ids = {s.run_id for s in facts.starts.values()}
        assert len(run_ids) == CRASH_STARTS
        assert facts.runs == {}, f"runs were recorded before the crash: {facts.runs}"
        assert Counter(s.state for s in facts.starts.values()) == {"dispatching": CRASH_STARTS}
        assert started_in_temporal(temporal.address, run_ids) == run_ids

        procs.restart(runner)  # no crash point this time
        procs.wait_ready(runner)
        facts = wait_until_done(url, 60)

        problems = facts.exactly_once_problems(CRASH_STARTS)
        assert not problems, "\n".join(problems)
        assert set(facts.starts) == {s["id"] for s in created}
        assert not charged(facts), charged(facts)
        assert {r.id: r.attempts for r in facts.runs.values()} == dict.fromkeys(run_ids, 1)
        assert {r.claimed_by for r in facts.runs.values()} == {"temporal"}
        # The restarted runner reclaimed them after the dead one's lease ran out (claims
        # do not change the version): created(1) -> dispatched(2), claimed twice.
        assert {s.version for s in facts.starts.values()} == {2}, facts.starts
        assert {s.claim_seq for s in facts.starts.values()} == {2}, facts.starts
        problems = execution_problems(temporal.address, facts)
        assert not problems, "\n".join(problems)
        assert worker.alive(), "the Temporal worker died"
        assert runner.alive(), "the restarted runner died"


def test_temporal_down_during_a_burst_dispatches_every_start_once_and_charges_none(
    tmp_path: Path,
) -> None:
    with (
        RestartableTemporal(tmp_path / "temporal") as temporal,
        fresh_database() as url,
        TemporalProcesses(tmp_path, url, temporal.address) as procs,
    ):
        procs.extras.append(temporal.log_tail)
        worker = procs.temporal_worker("worker", slots=2)
        runner = procs.serve("runner", "runner")
        procs.wait_ready(worker)
        procs.wait_ready(runner)

        with Creator(url, procs.key_file) as creator:
            created = creator.spread(BURST_STARTS, utc_in(1.5), BURST_SPREAD_SECONDS)
        assert len({s["id"] for s in created}) == BURST_STARTS

        # A few of the burst went out; the rest fall due while Temporal is down.
        wait_for(
            "the first starts of the burst to be dispatched",
            lambda: True if count_starts(url, "dispatched") >= 5 else None,
            timeout=30,
            step=0.05,
        )
        temporal.stop()
        down_at = time.monotonic()
        before_outage = count_starts(url, "dispatched")
        time.sleep(OUTAGE_SECONDS)
        during_outage = read_facts(url)
        temporal.start()  # the same port and database file
        outage = time.monotonic() - down_at

        facts = wait_until_done(url, 90)
        problems = facts.exactly_once_problems(BURST_STARTS)
        assert not problems, "\n".join(problems[:20])
        assert set(facts.starts) == {s["id"] for s in created}
        assert not charged(facts), charged(facts)[:10]
        problems = execution_problems(temporal.address, facts)
        assert not problems, "\n".join(problems[:20])

        # The outage really hit the burst: starts fell due while Temporal was down.
        assert outage >= OUTAGE_SECONDS
        assert before_outage < BURST_STARTS, "the whole burst went out before the outage"
        waiting = [s for s in during_outage.starts.values() if s.state != "dispatched"]
        assert waiting, "no start was waiting for Temporal during the outage"
        failed = [s for s in during_outage.starts.values() if s.state == "failed"]
        assert not failed, f"starts failed during the outage: {failed[:5]}"
        runner_log = runner.log_text()
        assert "event=engine_unavailable" in runner_log, "the runner never saw the outage"
        assert "event=engine_available" in runner_log, "the runner never saw Temporal back"
        assert worker.alive(), "the Temporal worker died"
        assert runner.alive(), "the runner died"
