"""Crashes during dispatch and during a run, with real processes on PostgreSQL (DP-1, DP-2, WF-4).

Runners and workers are ``punctual`` subprocesses that die by SIGKILL at injected crash
points (``PUNCTUAL_CRASH_AT``). Whatever dies where, every start ends ``dispatched`` with
exactly one run, whose id is the start's preallocated run id, and every run completes.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.e2e.harness import (
    Creator,
    Processes,
    Supervisor,
    fresh_database,
    read_facts,
    utc_in,
    wait_for,
    wait_until_done,
)

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.spread]

KILLED = -signal.SIGKILL

DISPATCH_STARTS = 300
DISPATCH_SPREAD_SECONDS = 8.0
# Each runner: its first incarnation's crash spec, then the specs of its restarts in order
# (None: no crash point, so the last incarnation runs until the end).
CRASH_PLAN: dict[str, list[str | None]] = {
    "runner-a": ["after_claim:2", "during_record:3", None],
    "runner-b": ["after_engine_start:2", "after_record:2", None],
}


def test_runners_killed_during_dispatch_never_lose_or_duplicate_a_run(tmp_path: Path) -> None:
    with fresh_database() as url, Processes(tmp_path, url) as procs:
        # Started side by side: nothing is due before the starts below are created.
        worker = procs.worker("worker")
        runners = {
            name: procs.serve(name, "runner", crash_at=plan[0]) for name, plan in CRASH_PLAN.items()
        }
        for managed in (worker, *runners.values()):
            procs.wait_ready(managed)
        with Supervisor(procs, {n: p[1:] for n, p in CRASH_PLAN.items()}) as supervisor:
            with Creator(url, procs.key_file) as creator:
                created = creator.spread(DISPATCH_STARTS, utc_in(0.5), DISPATCH_SPREAD_SECONDS)
            assert len({s["id"] for s in created}) == DISPATCH_STARTS

            def all_crashes_happened() -> bool | None:
                supervisor.check()
                return True if supervisor.done() else None

            wait_for("every planned runner crash", all_crashes_happened, 60)
            for runner in runners.values():
                procs.wait_ready(runner)  # the last incarnations, without crash points
            facts = wait_until_done(url, 60, check=supervisor.check)

        assert worker.alive(), "the worker died"
        for name, runner in runners.items():
            crashed = runner.incarnations[:-1]
            assert [i.exit_code for i in crashed] == [KILLED] * len(crashed), (
                f"{name}: expected every crash-spec incarnation to be killed by SIGKILL, got "
                f"{[(i.crash_at, i.exit_code) for i in runner.incarnations]}"
            )
            assert runner.killed_count() == len(CRASH_PLAN[name]) - 1
            assert runner.alive(), f"{name}'s last incarnation (no crash point) died"

        problems = facts.exactly_once_problems(DISPATCH_STARTS)
        assert not problems, "\n".join(problems[:20])
        assert set(facts.starts) == {s["id"] for s in created}
        # Nothing about a runner's crash is the start's fault: no attempt is charged.
        charged = [s for s in facts.starts.values() if s.attempts != 1 or s.last_error]
        assert not charged, charged[:10]
        # Claims the dead runners held were recovered by another pass (claimed again after
        # their lease ran out): they were claimed more than once.
        recovered = [s for s in facts.starts.values() if s.claim_seq > 1]
        assert recovered, "no start was ever reclaimed: the crashes hit no claim"


def test_a_worker_killed_after_claiming_runs_has_them_retried_by_another(
    tmp_path: Path,
) -> None:
    count = 12
    with fresh_database() as url, Processes(tmp_path, url) as procs:
        doomed = procs.worker("worker-doomed", crash_at="after_run_claim:1", slots=4)
        doomed_id = procs.wait_ready(doomed)
        with Creator(url, procs.key_file) as creator:
            created = [creator.echo_at(utc_in(0), i) for i in range(count)]
        # Only now a runner: its first pass dispatches every start at once, and the only
        # worker claims its slots' worth of runs and dies before starting any body.
        runner = procs.serve("runner", "runner")
        procs.wait_ready(runner)
        assert procs.wait_exit(doomed, timeout=30) == KILLED

        facts = read_facts(url)
        victims = {r.id for r in facts.runs.values() if r.claimed_by == doomed_id}
        assert victims, f"the doomed worker {doomed_id} claimed nothing: {facts.runs}"
        assert all(facts.runs[v].state == "running" for v in victims)
        assert all(facts.runs[v].attempts == 1 for v in victims)

        rescuer = procs.worker("worker-rescuer")
        rescuer_id = procs.wait_ready(rescuer)
        facts = wait_until_done(url, 60)

        problems = facts.exactly_once_problems(count)
        assert not problems, "\n".join(problems)
        assert set(facts.starts) == {s["id"] for s in created}
        attempts = {run.id: run.attempts for run in facts.runs.values()}
        assert {v: attempts[v] for v in victims} == dict.fromkeys(victims, 2), attempts
        others = {r: a for r, a in attempts.items() if r not in victims}
        assert others == dict.fromkeys(others, 1), others
        assert {facts.runs[v].claimed_by for v in victims} == {rescuer_id}
        assert rescuer.alive() and runner.alive()
