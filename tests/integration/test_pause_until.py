"""A timed pause (SPEC RS-10, API.md ``pause_until``): the schedule is paused until the
instant, shown ``paused`` with ``paused_until``, and then resumes by itself under its
missed policy, on both stores. Any member may set it (operating, CR-2); resuming ends it;
an instant already past is refused by name.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from punctual.domain.permissions import Principal, Role
from punctual.domain.timeutil import to_rfc3339
from punctual.errors import InvalidRequest
from punctual.usecases.recurring import schedules
from punctual.usecases.recurring.schedule_fields import decode_update
from tests.integration.test_schedule_runtime import MINUTE, Rig, build_rig  # noqa: F401
from tests.support.api import enroll

BOB = Principal("acme", "bob", Role.MEMBER)


@pytest.fixture
def rig(build_rig: Any) -> Rig:  # noqa: F811
    built: Rig = build_rig()
    return built


def passes(rig: Rig, count: int) -> None:
    for _ in range(count):
        rig.advance(MINUTE)
        rig.generate()
        rig.dispatch()


def ran_minutes(rig: Rig, t0: Any, schedule_id: str) -> list[float]:
    return [
        (o.occurrence_at - t0) / timedelta(minutes=1)
        for o in rig.occurrences(schedule_id)
        if o.state != "skipped"
    ]


@pytest.mark.parametrize(
    ("missed", "ran"),
    [
        # The fires of the pause are one missed range; 10:00 is within the grace at 11:00.
        ("skip", [10, 11, 12, 13, 14, 15]),
        ("catch_up", list(range(1, 16))),
    ],
)
def test_a_timed_pause_ends_by_itself_under_the_missed_policy(
    rig: Rig, missed: str, ran: list[int]
) -> None:
    t0 = rig.now
    until = to_rfc3339(t0 + timedelta(minutes=10, seconds=30))
    created = rig.every("resting", missed=missed, pause_until=until)
    assert (created["state"], created["paused_until"], created["pause_until"]) == (
        "paused",
        until,
        until,
    )
    assert created["next_fire_times"] == []
    passes(rig, 10)
    assert ran_minutes(rig, t0, created["id"]) == []
    assert rig.get(created["id"])["state"] == "paused"
    passes(rig, 5)
    assert ran_minutes(rig, t0, created["id"]) == ran
    after = rig.get(created["id"])
    assert (after["state"], after["paused_until"], after["pause_until"]) == ("active", None, until)
    skipped = [o for o in rig.occurrences(created["id"]) if o.state == "skipped"]
    if missed == "skip":
        assert [(o.reason, o.range_count) for o in skipped] == [("missed", 9)]
    else:
        assert skipped == []


def test_any_member_may_pause_until_and_resuming_ends_it(rig: Rig) -> None:
    enroll(rig.system, BOB)
    t0 = rig.now
    created = rig.every("operated", missed="skip")
    passes(rig, 2)
    version = rig.get(created["id"])["version"]
    until = to_rfc3339(t0 + timedelta(hours=1))
    edit = decode_update(created["id"], version, {"pause_until": until})
    paused = rig.system.mutations.run(None, schedules.update(rig.services, BOB, edit)).body
    assert (paused["state"], paused["paused_until"]) == ("paused", until)
    passes(rig, 3)
    assert ran_minutes(rig, t0, created["id"]) == [1, 2]
    resumed = rig.alice.resume(created["id"], paused["version"])
    assert (resumed["state"], resumed["paused_until"], resumed["pause_until"]) == (
        "active",
        None,
        None,
    )
    passes(rig, 1)
    assert ran_minutes(rig, t0, created["id"])[-1] == 6


def test_a_pause_until_already_past_is_refused_naming_the_field(rig: Rig) -> None:
    with pytest.raises(InvalidRequest) as refused:
        rig.every("late", missed="skip", pause_until=to_rfc3339(rig.now - timedelta(seconds=1)))
    assert refused.value.details["errors"][0]["loc"] == ["body", "pause_until"]
    assert "must be in the future" in str(refused.value)
    with pytest.raises(InvalidRequest):
        rig.every("garbled", missed="skip", pause_until="tomorrow")
