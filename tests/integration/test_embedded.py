"""The in-process Python API (IF-2) runs the same use cases as HTTP."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.embedded import Scheduler
from punctual.errors import PunctualError
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.conftest import make_settings
from tests.support.api import live_worker, register_demo


def test_schedule_at_get_list_cancel_and_replay(database_url: str, tmp_path: Path) -> None:
    system = bootstrap.build(make_settings(database_url, tmp_path))
    with Scheduler(system, "default", "billing", Role.MEMBER) as scheduler:
        register_demo(system)
        at = datetime(2030, 12, 1, 7, 0, tzinfo=UTC) + timedelta(hours=-1)
        start = scheduler.schedule_at(
            "echo", {"message": "hi"}, at, business_request_id="inv-1", idempotency_key="k1"
        )
        assert start["state"] == "scheduled"
        assert start["created_by"] == "billing"
        again = scheduler.schedule_at(
            "echo", {"message": "hi"}, at, business_request_id="inv-1", idempotency_key="k1"
        )
        assert again == start
        assert scheduler.get_start(start["id"]) == start
        listed = scheduler.list_starts(business_request_id="inv-1")
        assert [item["id"] for item in listed["items"]] == [start["id"]]
        canceled = scheduler.cancel_start(start["id"], 1, reason="customer left")
        assert canceled["state"] == "canceled"
        assert canceled["reason"] == "customer left"
        with pytest.raises(PunctualError) as conflict:
            scheduler.cancel_start(start["id"], 1)
        assert conflict.value.code == "invalid_state"


def test_background_runner_and_worker_run_a_start(database_url: str, tmp_path: Path) -> None:
    system = bootstrap.build(make_settings(database_url, tmp_path))
    with Scheduler(system, "default", "ops", Role.ADMIN) as scheduler:
        scheduler.run_in_background("punctual.demo:app")
        start = scheduler.schedule_at(
            "score",
            {"score": 0.5},
            datetime.now(UTC),
            business_request_id="score-1",
        )
        deadline = time.monotonic() + 20
        while (current := scheduler.get_start(start["id"]))["dispatch"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        run_id = current["dispatch"]["run_id"]
        while (run := scheduler.get_run(run_id))["state"] != "completed":
            assert time.monotonic() < deadline, run
            time.sleep(0.05)
        assert run["result"] == {"metrics": {"score": 0.5}}
        assert scheduler.health_report()["status"] == "ok"


def test_schedule_controls_trigger_backfill_and_by_name(database_url: str, tmp_path: Path) -> None:
    """RS-9 in the Python API: the same use cases as the HTTP routes."""
    system = bootstrap.build(make_settings(database_url, tmp_path))
    with Scheduler(system, "default", "billing", Role.MEMBER) as scheduler:
        register_demo(system)
        body = {
            "workflow": "echo",
            "input": {"message": "tick"},
            "spec": {"cron": "* * * * *", "time_zone": "UTC"},
            "overlap": "allow_all",
            "missed": "skip",
            "max_occurrences": 3,
        }
        assert scheduler.plan_schedule_by_name("team/nightly", **body)["action"] == "create"
        created = scheduler.put_schedule_by_name("team/nightly", **body)
        assert created["name"] == "team/nightly"
        assert created["remaining_occurrences"] == 3
        assert scheduler.plan_schedule_by_name("team/nightly", **body) == {
            "action": "unchanged",
            "changed_fields": [],
        }
        assert scheduler.get_schedule_by_name("team/nightly")["id"] == created["id"]

        triggered = scheduler.trigger(created["id"], idempotency_key="t1")
        assert triggered["origin"] == "trigger"
        assert scheduler.trigger(created["id"], idempotency_key="t1") == triggered

        now = datetime.now(UTC)
        backfilled = scheduler.backfill(
            created["id"], now - timedelta(minutes=5), now - timedelta(seconds=1)
        )
        assert 4 <= backfilled["generated"] <= 5
        assert {o["origin"] for o in backfilled["items"]} == {"backfill"}
        again = scheduler.backfill(
            created["id"], now - timedelta(minutes=5), now - timedelta(seconds=1)
        )
        assert again["generated"] == 0
        assert again["existing"] == backfilled["generated"]


def test_lists_are_newest_first_with_order_and_filters(database_url: str, tmp_path: Path) -> None:
    """The Python API reads lists through the same use cases: newest first, ``order``, the
    cursor's order, and the filters of runs and occurrences."""
    system = bootstrap.build(make_settings(database_url, tmp_path))
    with Scheduler(system, "default", "billing", Role.MEMBER) as scheduler:
        register_demo(system)
        at = datetime(2030, 12, 1, 7, 0, tzinfo=UTC)
        made = [
            scheduler.schedule_at("echo", {"message": "hi"}, at, business_request_id=f"inv-{n}")[
                "id"
            ]
            for n in range(3)
        ]
        newest = scheduler.list_starts()["items"]
        assert [start["id"] for start in newest] == made[::-1]
        first = scheduler.list_starts(order="oldest", limit=2)
        rest = scheduler.list_starts(cursor=first["next_cursor"])
        assert [s["id"] for s in first["items"] + rest["items"]] == made
        with pytest.raises(PunctualError) as turned:
            scheduler.list_starts(cursor=first["next_cursor"], order="newest")
        assert turned.value.code == "invalid_cursor"

        body = {"overlap": "allow_all", "missed": "skip", "enabled": False}
        every = scheduler.schedule_every(
            "echo", {"message": "tick"}, timedelta(minutes=1), name="every", **body
        )
        other = scheduler.schedule_every(
            "echo", {"message": "tock"}, timedelta(minutes=1), name="other", **body
        )
        names = [s["name"] for s in scheduler.list_schedules()["items"]]
        assert names == ["other", "every"]
        assert [s["name"] for s in scheduler.list_schedules(order="oldest")["items"]] == names[::-1]
        triggered = [scheduler.trigger(every["id"])["id"] for _ in range(2)]
        scheduler.trigger(other["id"])
        listed = scheduler.list_occurrences(every["id"], origin="trigger")["items"]
        assert [o["id"] for o in listed] == triggered[::-1]
        assert scheduler.list_occurrences(every["id"], origin="backfill")["items"] == []
        live_worker(system)
        dispatch_due(system.services, "runner-embedded", 10)
        runs = scheduler.list_runs(schedule_id=every["id"])["items"]
        assert [run["origin"]["id"] for run in runs] == triggered[::-1]
        assert len(scheduler.list_runs(origin="schedule")["items"]) == 3
        assert scheduler.list_runs(origin="scheduled_start")["items"] == []
