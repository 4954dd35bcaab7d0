"""Start deadlines (SPEC RS-10, API.md ``start_deadline_ms``): an occurrence whose body has
not begun that long after it was due is never started late. Dispatch skips it (reason
``too_late``) with a finding and a ``start_failed`` notification; retries stop at the
deadline; the run carries the deadline, and the worker refuses to begin a body after it.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.executor.child import _past_start_deadline
from punctual.adapters.executor.slot import Assignment
from punctual.adapters.stores.sql import tables as t
from punctual.domain.permissions import Principal, Role
from punctual.domain.timeutil import to_rfc3339
from punctual.ports.records import Seek
from punctual.usecases.recurring import schedules
from punctual.usecases.recurring.schedule_fields import decode_create
from tests.conftest import make_settings
from tests.integration.test_schedule_runtime import MINUTE, Rig, build_rig  # noqa: F401
from tests.support.api import enroll


@pytest.fixture
def rig(build_rig: Any) -> Rig:  # noqa: F811
    built: Rig = build_rig()
    return built


def findings_of(rig: Rig, subject_id: str) -> list[Any]:
    query = sa.select(t.findings).where(t.findings.c.subject_id == subject_id)
    with rig.system.store.engine.connect() as conn:
        return list(conn.execute(query).mappings())


def notifications_of(rig: Rig, kind: str) -> list[Any]:
    query = sa.select(t.notifications).where(t.notifications.c.kind == kind)
    with rig.system.store.engine.connect() as conn:
        return list(conn.execute(query).mappings())


def test_an_occurrence_past_its_deadline_is_skipped_too_late_and_told(rig: Rig) -> None:
    created = rig.every("punctual-or-never", start_deadline_ms=60_000)
    assert created["start_deadline_ms"] == 60_000
    rig.advance(MINUTE)
    rig.generate()  # the occurrence of 1:00, due then, deadline 2:00
    rig.advance(MINUTE + 30)  # the runner was away: 2:30
    report = rig.dispatch()
    (late,) = rig.occurrences(created["id"])
    assert (late.state, late.reason) == ("skipped", "too_late"), late
    assert late.id in report.skipped
    assert late.last_error["code"] == "too_late"
    assert [f["kind"] for f in findings_of(rig, late.id)] == ["occurrence_failed"]
    told = notifications_of(rig, "start_failed")
    assert [n["recipient"] for n in told] == ["alice"]
    assert told[0]["details"]["code"] == "too_late"
    assert rig.get(created["id"])["enabled"] is True  # nothing is wrong with the schedule


def test_an_occurrence_in_time_carries_its_deadline_to_the_run(rig: Rig) -> None:
    created = rig.every("in-time", start_deadline_ms=60_000)
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()
    (occurrence,) = rig.occurrences(created["id"])
    run = rig.admin.get_run(occurrence.run_id)
    assert run["origin"]["start_deadline_at"] == to_rfc3339(
        occurrence.due_at + timedelta(minutes=1)
    )


def test_retries_stop_at_the_deadline(build_rig: Any) -> None:  # noqa: F811
    rig: Rig = build_rig(live=False)  # no worker has the workflow loaded: retried later
    created = rig.every("no-worker", start_deadline_ms=1_000)
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()
    (occurrence,) = rig.occurrences(created["id"])
    assert (occurrence.state, occurrence.reason) == ("skipped", "too_late"), occurrence


def test_a_schedule_without_a_deadline_retries_as_before(build_rig: Any) -> None:  # noqa: F811
    rig: Rig = build_rig(live=False)
    created = rig.every("patient")
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()
    (occurrence,) = rig.occurrences(created["id"])
    assert occurrence.state == "scheduled" and occurrence.attempts == 1, occurrence


def _assignment(deadline: str | None) -> Assignment:
    origin: dict[str, Any] = {"source": "schedule", "id": "occ_1", "schedule_id": "sch_1"}
    if deadline is not None:
        origin["start_deadline_at"] = deadline
    return Assignment("run_1", "echo", "1", {}, 1, origin, 60.0)


def test_a_worker_never_begins_a_body_after_the_deadline() -> None:
    past = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() - 5))
    future = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + 60))
    error = _past_start_deadline(_assignment(past))
    assert error is not None and error["code"] == "too_late"
    assert _past_start_deadline(_assignment(future)) is None
    assert _past_start_deadline(_assignment(None)) is None


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_run_stuck_behind_a_busy_worker_past_its_deadline_never_begins(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """One slot, bodies of 2 s every second, a deadline of 1 s: the runs queued behind a
    busy slot are dispatched in time but end ``canceled``, ``too_late``, without a body;
    every body that began did so before its deadline."""
    url = request.getfixturevalue("sqlite_url" if store == "sqlite" else "pg_url")
    system = bootstrap.build(make_settings(url, tmp_path))
    try:
        system.start_worker("punctual.demo:app", slots=1)
        alice = Principal("acme", "alice", Role.MEMBER)
        enroll(system, alice)
        body = {
            "name": "busy",
            "workflow": "sleep",
            "input": {"seconds": 2},
            "spec": {"interval_ms": 1000},
            "overlap": "allow_all",
            "missed": "skip",
            "start_deadline_ms": 1000,
        }
        sid = system.mutations.run(
            None, schedules.create(system.services, alice, decode_create(body))
        ).body["id"]
        system.start_runner()
        deadline = time.monotonic() + 30
        while True:
            runs = _runs_of(system, sid)
            late = [r for r in runs if r["error"] and r["error"]["code"] == "too_late"]
            if late and any(r["state"] == "completed" for r in runs):
                break
            assert time.monotonic() < deadline, runs
            time.sleep(0.1)
        for run in late:
            assert run["state"] == "canceled" and run["started_at"] is None, run
        for run in runs:
            if run["started_at"] is not None:
                assert run["started_at"] <= run["start_deadline_at"], run
        # Follow-through tells the creator of each run that never began, as dispatch does.
        while True:
            with system.store.transaction() as tx:
                told = [
                    n
                    for n in tx.notifications.find("acme", "alice", unread_only=False, at=Seek(100))
                    if n.kind == "start_failed" and n.details.get("code") == "too_late"
                ]
                found = [
                    f for f in tx.findings.latest("acme", 100) if f.kind == "occurrence_failed"
                ]
            if told and found:
                break
            assert time.monotonic() < deadline, "no start_failed notification for too_late"
            time.sleep(0.1)
        assert told[0].schedule_id == sid and told[0].run_id is not None
    finally:
        system.close()


def _runs_of(system: bootstrap.Punctual, schedule_id: str) -> list[dict[str, Any]]:
    r, s = t.runs.c, t.starts.c
    query = (
        sa.select(r.state, r.error, r.started_at, s.start_deadline_at)
        .select_from(t.runs.join(t.starts, s.run_id == r.id))
        .where(r.schedule_id == schedule_id)
    )
    with system.store.engine.connect() as conn:
        return [dict(row) for row in conn.execute(query).mappings()]
