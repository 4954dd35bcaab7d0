"""Blackout windows (SPEC RS-10): a schedule's fires inside a window never run. They are
recorded ``skipped``, reason ``blackout`` with the window's own reason, as ranges (one up
to the generation horizon, the rest once the window ended), on both stores; a blackout
wins over catch-up; the view's next fire times leave them out; an edit is seen by the next
pass.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from punctual import resources
from punctual.cli.schedules import occurrence_line, schedule_block
from punctual.domain.permissions import Principal, Role
from punctual.domain.timeutil import to_rfc3339
from punctual.usecases.recurring import schedules
from punctual.usecases.recurring.schedule_fields import decode_update
from tests.integration.test_schedule_runtime import MINUTE, Rig, build_rig  # noqa: F401

ALICE = Principal("acme", "alice", Role.MEMBER)


@pytest.fixture
def rig(build_rig: Any) -> Rig:  # noqa: F811
    built: Rig = build_rig()
    return built


def window(rig: Rig, start_minute: int, end_minute: int, reason: str | None) -> dict[str, Any]:
    return {
        "from": to_rfc3339(rig.now + timedelta(minutes=start_minute)),
        "to": to_rfc3339(rig.now + timedelta(minutes=end_minute)),
        "reason": reason,
    }


def minutes(rig_start: Any, instants: list[Any]) -> list[float]:
    return [(at - rig_start) / timedelta(minutes=1) for at in instants]


def run_minute_by_minute(rig: Rig, count: int) -> None:
    """A runner's passes, once a minute, each dispatching what became due."""
    for _ in range(count):
        rig.advance(MINUTE)
        rig.generate()
        rig.dispatch()


def test_fires_in_a_blackout_are_skipped_with_its_reason_and_the_others_run(rig: Rig) -> None:
    t0 = rig.now
    freeze = window(rig, 10, 20, "release freeze")
    created = rig.every("billing", blackouts=[freeze])
    assert created["blackouts"] == [
        {"from": freeze["from"], "to": freeze["to"], "reason": "release freeze"}
    ]
    run_minute_by_minute(rig, 5)
    upcoming = rig.get(created["id"])["next_fire_times"]
    assert [round(m) for m in minutes(t0, [_at(u) for u in upcoming])] == [6, 7, 8, 9, 20]

    run_minute_by_minute(rig, 20)
    rows = rig.occurrences(created["id"])
    ran = [o.occurrence_at for o in rows if o.state != "skipped"]
    assert minutes(t0, ran) == [*range(1, 10), *range(20, 26)]
    skipped = [o for o in rows if o.state == "skipped"]
    assert skipped and all(o.reason == "blackout" for o in skipped), skipped
    assert sum(o.range_count or 0 for o in skipped) == 10  # minutes 10 to 19, each once
    covered = sorted(
        m
        for o in skipped
        for m in range(
            round(minutes(t0, [o.occurrence_at])[0]), round(minutes(t0, [o.range_last])[0]) + 1
        )
    )
    assert covered == list(range(10, 20))
    assert len(skipped) <= 2  # one range up to the horizon, one once the window ended
    listed = rig.alice.list_occurrences(created["id"], state="skipped")["items"]
    assert {item["reason_detail"] for item in listed} == {"release freeze"}

    # What the CLI shows of them, from the API's resources.
    shown = schedule_block(resources.Schedule.model_validate(rig.get(created["id"])))
    assert f"blackouts: {freeze['from']} - {freeze['to']} (release freeze)" in [
        " ".join(line.split()) for line in shown
    ], shown
    line = occurrence_line(resources.Occurrence.model_validate(listed[0]))
    assert "(blackout: release freeze)" in line, line


def test_a_blackout_wins_over_catch_up_after_downtime(rig: Rig) -> None:
    t0 = rig.now
    created = rig.every("catching-up", blackouts=[window(rig, 10, 20, None)], max_catch_up=100)
    rig.advance(30 * MINUTE)  # down for half an hour
    rig.generate()
    rows = rig.occurrences(created["id"])
    ran = [o.occurrence_at for o in rows if o.state != "skipped"]
    assert minutes(t0, ran) == [*range(1, 10), *range(20, 31)]
    (skipped,) = [o for o in rows if o.state == "skipped"]
    assert (skipped.reason, skipped.range_count) == ("blackout", 10)


def test_a_blackout_splits_a_missed_stretch(rig: Rig) -> None:
    t0 = rig.now
    created = rig.every("skipping", missed="skip", blackouts=[window(rig, 10, 20, "freeze")])
    rig.advance(30 * MINUTE)
    rig.generate()
    rows = rig.occurrences(created["id"])
    ranges = [
        (o.reason, round(minutes(t0, [o.occurrence_at])[0]), o.range_count)
        for o in rows
        if o.state == "skipped"
    ]
    # Minute 29 is inside the misfire grace at 30:00: late, not missed.
    assert ranges == [("missed", 1, 9), ("blackout", 10, 10), ("missed", 20, 9)], ranges
    assert minutes(t0, [o.occurrence_at for o in rows if o.state != "skipped"]) == [29, 30]
    assert rig.row(created["id"])["fires_counted"] == 30


def test_a_blackout_removed_while_in_force_lets_the_next_fires_run(rig: Rig) -> None:
    t0 = rig.now
    created = rig.every("thawed", blackouts=[window(rig, 2, 60, "freeze")])
    run_minute_by_minute(rig, 3)  # into the blackout: the schedule waits for its end
    assert rig.row(created["id"])["next_fire_at"] == t0 + timedelta(minutes=60)
    schedule = rig.get(created["id"])
    edit = decode_update(created["id"], schedule["version"], {"blackouts": []})
    rig.system.mutations.run(None, schedules.update(rig.services, ALICE, edit))
    run_minute_by_minute(rig, 3)
    rows = rig.occurrences(created["id"])
    ran = [o.occurrence_at for o in rows if o.state != "skipped"]
    # Minute 3 was not decided yet (the pass at 2:00 decided up to its horizon, 2:02).
    assert minutes(t0, ran) == [1, 3, 4, 5, 6]
    (skipped,) = [o for o in rows if o.state == "skipped"]
    assert (skipped.reason, skipped.range_count) == ("blackout", 1)  # minute 2


def _at(text: str) -> Any:
    from punctual.domain.timeutil import parse_rfc3339

    return parse_rfc3339(text)
