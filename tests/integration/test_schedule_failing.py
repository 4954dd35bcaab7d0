"""Health sees a schedule whose runs keep failing (OP-2): ``schedule_failing``.

A schedule whose last three runs to end failed or timed out (canceled and terminated runs
are an operator's doing and are left out) has an open ``schedule_failing`` finding, and
the tenant is ``degraded``, until one of its runs completes. Judged by the runner's
follow-through pass, which sees every run end of every engine; on both stores, with the
follow-through tests' rig (a fake clock, runs ended through the worker's use cases).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from punctual.domain.runs import RunState
from punctual.usecases.recurring import schedules
from punctual.usecases.tenancy import health
from tests.integration.test_follow_through_paths import Follow
from tests.integration.test_schedule_runtime import Rig, build_rig

__all__ = ["build_rig"]  # the schedule runtime tests' rig fixture, used here too

FAILING = "schedule_failing"


@pytest.fixture
def follow(build_rig: Callable[..., Rig]) -> Follow:
    return Follow(build_rig())


def fire_and_end(follow: Follow, ends: dict[str, RunState]) -> dict[str, str]:
    """One more fire of every schedule; each named schedule's new run ends as given, then
    the runner's follow-through pass runs. The new run id of each named schedule."""
    follow.rig.advance(60)
    follow.rig.generate()
    follow.rig.dispatch()
    claimed = follow.claim()
    run_ids: dict[str, str] = {}
    for schedule_id, state in ends.items():
        (run_id,) = [r["id"] for r in follow.rig.runs_of(schedule_id) if r["id"] in claimed]
        run_ids[schedule_id] = run_id
        if state is RunState.TERMINATED:
            assert follow.rig.alice.terminate_run(run_id)["state"] == "terminated"
            continue
        error = None
        if state is RunState.TIMED_OUT:
            error = {"code": "timed_out", "message": "execution timeout exceeded"}
        follow.end(claimed[run_id], state, {"metrics": {"score": 0.5}}, error)
    follow.follow()
    return run_ids


def report(follow: Follow) -> dict[str, Any]:
    return follow.rig.admin.health_report()


def failing(follow: Follow) -> list[dict[str, Any]]:
    return [f for f in report(follow)["findings"] if f["kind"] == FAILING]


def acknowledge(follow: Follow, finding_id: str) -> dict[str, Any]:
    mutation = health.acknowledge(follow.services, follow.rig.admin.principal, finding_id)
    body: dict[str, Any] = follow.rig.system.mutations.run(None, mutation).body
    return body


F, T, C = RunState.FAILED, RunState.TIMED_OUT, RunState.COMPLETED


def test_three_failed_runs_make_a_finding_and_degrade_health(follow: Follow) -> None:
    sid = follow.schedule("nightly-import")
    runs = [fire_and_end(follow, {sid: F})[sid] for _ in range(2)]
    assert report(follow)["status"] == "ok", "two failures are not yet a failing schedule"
    assert failing(follow) == []

    runs.append(fire_and_end(follow, {sid: F})[sid])

    status = report(follow)
    assert status["status"] == "degraded"
    (finding,) = failing(follow)
    assert finding["subject_id"] == sid
    assert finding["acknowledged"] is False
    assert "nightly-import" in finding["message"]
    assert all(run_id in finding["message"] for run_id in runs), finding["message"]
    assert "failed" in finding["message"]
    assert status["open_findings_count"] == 1


def test_two_failures_and_a_completion_are_ok(follow: Follow) -> None:
    sid = follow.schedule("mostly-fine")
    for state in (F, F, C):
        fire_and_end(follow, {sid: state})
    assert (report(follow)["status"], failing(follow)) == ("ok", [])

    for state in (F, F):  # the last three: completed, failed, failed
        fire_and_end(follow, {sid: state})
    assert (report(follow)["status"], failing(follow)) == ("ok", [])


def test_a_completion_clears_the_finding(follow: Follow) -> None:
    sid = follow.schedule("recovers")
    for state in (F, F, F, F):
        fire_and_end(follow, {sid: state})
    assert report(follow)["status"] == "degraded"
    assert len(failing(follow)) == 1, "one finding per schedule, however long the streak"

    fire_and_end(follow, {sid: C})

    assert (report(follow)["status"], failing(follow)) == ("ok", [])


def test_timed_out_runs_count_as_failed(follow: Follow) -> None:
    sid = follow.schedule("too-slow")
    for state in (T, F, T):
        fire_and_end(follow, {sid: state})

    (finding,) = failing(follow)
    assert finding["subject_id"] == sid
    assert "timed_out" in finding["message"]
    assert report(follow)["status"] == "degraded"


def test_runs_of_different_schedules_do_not_mix(follow: Follow) -> None:
    first = follow.schedule("first")
    second = follow.schedule("second")
    fire_and_end(follow, {first: F, second: F})
    fire_and_end(follow, {first: F, second: C})
    fire_and_end(follow, {first: C, second: F})
    assert (report(follow)["status"], failing(follow)) == ("ok", []), (
        "three failures in the tenant, but no schedule's own last three"
    )

    fire_and_end(follow, {first: F, second: F})
    fire_and_end(follow, {first: F, second: C})
    fire_and_end(follow, {first: F, second: C})

    (finding,) = failing(follow)
    assert finding["subject_id"] == first


def test_canceled_and_terminated_runs_neither_count_nor_clear(follow: Follow) -> None:
    sid = follow.schedule("interrupted")
    fire_and_end(follow, {sid: F})
    fire_and_end(follow, {sid: F})
    fire_and_end(follow, {sid: RunState.CANCELED})
    assert failing(follow) == [], "a cancel is not a failure"
    fire_and_end(follow, {sid: F})
    assert [f["subject_id"] for f in failing(follow)] == [sid]

    fire_and_end(follow, {sid: RunState.TERMINATED})

    assert [f["subject_id"] for f in failing(follow)] == [sid], "nor is it a completion"


def test_acknowledging_keeps_the_finding_quiet_until_a_new_streak(follow: Follow) -> None:
    sid = follow.schedule("acknowledged")
    for state in (F, F, F):
        fire_and_end(follow, {sid: state})
    (finding,) = failing(follow)

    assert acknowledge(follow, finding["id"])["acknowledged"] is True
    assert report(follow)["status"] == "ok"
    fire_and_end(follow, {sid: F})
    (same,) = failing(follow)
    assert (same["id"], same["acknowledged"]) == (finding["id"], True), "the same streak"
    assert report(follow)["status"] == "ok"

    fire_and_end(follow, {sid: C})
    assert failing(follow) == []
    for state in (F, F, F):
        fire_and_end(follow, {sid: state})

    (again,) = failing(follow)
    assert again["id"] != finding["id"]
    assert again["acknowledged"] is False
    assert report(follow)["status"] == "degraded"


def test_deleting_a_failing_schedule_clears_its_finding(follow: Follow) -> None:
    sid = follow.schedule("nightly-import")
    for _ in range(3):
        fire_and_end(follow, {sid: F})
    assert [f["subject_id"] for f in failing(follow)] == [sid]
    version = follow.rig.get(sid)["version"]

    mutation = schedules.delete(follow.services, follow.rig.alice.principal, sid, version)
    follow.rig.system.mutations.run(None, mutation)

    assert failing(follow) == []
    assert report(follow)["status"] == "ok"
