"""Business calendars and several specs in generation, on both stores (SPEC RS-10): the
customer walkthrough's payroll fires on the last business day at 17:30 Berlin skipping
Bavarian holidays, each closed day is recorded with the holiday's name, a move is recorded
with the instant it came from, and several specs make one occurrence per instant naming
them. The clock is moved by hand, a generation pass a day, as the runner would.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from punctual import resources
from tests.integration.test_schedule_runtime import TICK, Rig, build_rig  # noqa: F401

BERLIN = ZoneInfo("Europe/Berlin")
DAY = 86_400.0
BAVARIA = {"country": "DE", "subdivision": "BY"}


@pytest.fixture
def rig(build_rig: Any) -> Rig:  # noqa: F811
    built: Rig = build_rig()
    return built


def put(rig: Rig, name: str, **fields: Any) -> dict[str, Any]:
    return rig.alice.put_schedule_by_name(
        name, workflow="echo", input=TICK, overlap="allow_all", missed="catch_up", **fields
    )


def day_by_day(rig: Rig, days: int) -> None:
    for _ in range(days):
        rig.advance(DAY)
        rig.generate()


def listed(rig: Rig, schedule_id: str) -> list[resources.Occurrence]:
    items: list[resources.Occurrence] = []
    cursor = None
    while True:
        page = rig.alice.list_occurrences(schedule_id, limit=100, cursor=cursor)
        items += [resources.Occurrence.model_validate(item) for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return sorted(items, key=lambda o: o.occurrence_at)


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def local(at: datetime) -> datetime:
    return at.astimezone(BERLIN)


def test_payroll_on_the_last_business_day_at_17_30_berlin_skipping_bavarian_holidays(
    rig: Rig,
) -> None:
    """The walkthrough's schedule, from 29 November 2026 to mid-February 2027: 30 November
    (a Monday), 30 December (the 31st is closed as an extra date), 29 January (a Friday)."""
    created = put(
        rig,
        "payroll",
        specs=[{"business_day": -1, "at": "17:30", "time_zone": "Europe/Berlin"}],
        calendar={"holidays": [BAVARIA], "extra_holidays": ["2026-12-24", "2026-12-31"]},
    )
    upcoming = [
        datetime.fromisoformat(t.replace("Z", "+00:00")) for t in created["next_fire_times"]
    ]
    assert [local(at).date() for at in upcoming[:3]] == [
        date(2026, 11, 30),
        date(2026, 12, 30),
        date(2027, 1, 29),
    ]
    day_by_day(rig, 80)
    fired = [o for o in listed(rig, created["id"]) if o.state != "skipped"]
    assert [
        (local(o.occurrence_at).date(), local(o.occurrence_at).strftime("%H:%M")) for o in fired
    ] == [
        (date(2026, 11, 30), "17:30"),
        (date(2026, 12, 30), "17:30"),
        (date(2027, 1, 29), "17:30"),
    ]
    assert all(o.spec_indexes == [0] and o.calendar_moved_from is None for o in fired)


def test_closed_days_are_recorded_with_their_reason_and_several_specs_name_theirs(
    rig: Rig,
) -> None:
    """Weekday mornings at 09:00 and every day at 09:00 and 18:00, skipping Bavarian
    holidays, over Christmas: one occurrence at each 09:00 naming both specs, none on a
    closed day, and each closed day's instants recorded skipped, reason ``calendar``,
    with the holiday's name."""
    rig.clock.current = datetime(2026, 12, 21, 12, 0, tzinfo=UTC)
    created = put(
        rig,
        "mornings",
        specs=[
            {"cron": "0 9 * * 1-5", "time_zone": "Europe/Berlin"},
            {"cron": "0 9,18 * * *", "time_zone": "Europe/Berlin"},
        ],
        calendar={"holidays": [BAVARIA]},
    )
    day_by_day(rig, 8)  # to 29 December, 12:00 UTC
    rows = listed(rig, created["id"])
    fired = [(local(o.occurrence_at), o.spec_indexes) for o in rows if o.state != "skipped"]
    assert [(at.strftime("%d %H:%M"), ix) for at, ix in fired] == [
        ("21 18:00", [1]),
        ("22 09:00", [0, 1]),
        ("22 18:00", [1]),
        ("23 09:00", [0, 1]),
        ("23 18:00", [1]),
        ("24 09:00", [0, 1]),
        ("24 18:00", [1]),
        ("28 09:00", [0, 1]),
        ("28 18:00", [1]),
        ("29 09:00", [0, 1]),
    ]
    skipped = [o for o in rows if o.state == "skipped"]
    assert {o.reason for o in skipped} == {"calendar"}
    by_day: dict[int, tuple[str | None, int]] = {}
    for o in skipped:  # a range per pass: a day's two instants may be two rows
        assert o.range is not None
        day = local(o.occurrence_at).day
        assert local(o.range.last).day == day
        count = by_day.get(day, (None, 0))[1]
        by_day[day] = (o.reason_detail, count + o.range.count)
    assert by_day == {
        25: ("Christmas Day", 2),
        26: ("Second Day of Christmas", 2),
        27: ("weekend", 2),
    }
    health = rig.alice.health_report()
    assert health["holidays_version"]


def test_a_move_to_the_next_open_day_is_recorded_with_where_it_came_from(rig: Rig) -> None:
    rig.clock.current = datetime(2026, 12, 23, 12, 0, tzinfo=UTC)
    created = put(
        rig,
        "reports",
        spec={"cron": "0 7 * * *", "time_zone": "Europe/Berlin"},
        calendar={"holidays": [BAVARIA], "on_closed_day": "next_open_day"},
    )
    day_by_day(rig, 6)
    rows = listed(rig, created["id"])
    assert all(o.state != "skipped" for o in rows), rows
    moved = [(local(o.occurrence_at).day, o.calendar_moved_from) for o in rows]
    # 24 Dec fires; 25 to 27 Dec move onto Monday 28 Dec, which is one occurrence (its
    # own fire wins, unmoved); the 29th fires as itself.
    assert [day for day, _ in moved] == [24, 28, 29]
    assert all(came is None for _, came in moved)
    previous = put(
        rig,
        "closing",
        spec={"cron": "0 7 * * 2", "time_zone": "Europe/Berlin"},
        calendar={"extra_holidays": ["2027-01-05"], "on_closed_day": "previous_open_day"},
    )
    day_by_day(rig, 10)
    rows = listed(rig, previous["id"])
    shifted = [o for o in rows if o.calendar_moved_from is not None]
    assert len(shifted) == 1
    assert local(shifted[0].occurrence_at).date() == date(2027, 1, 4)
    assert shifted[0].calendar_moved_from is not None
    assert local(shifted[0].calendar_moved_from).date() == date(2027, 1, 5)
    assert shifted[0].occurrence_at - shifted[0].calendar_moved_from == timedelta(days=-1)
