"""The missed-run audit on both stores (SPEC RS-10): over a range with a pause, a blackout,
a start-deadline skip and a backfill, every instant the spec yielded is accounted for, and
none is ``missing``; an instant whose record is gone is ``missing``, and health says so.
The clock is moved by hand, a runner's passes once a minute."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from punctual import resources
from punctual.adapters.stores.sql import tables as t
from punctual.domain.timeutil import to_rfc3339
from punctual.errors import PunctualError
from tests.integration.test_schedule_runtime import MINUTE, Rig, build_rig  # noqa: F401


@pytest.fixture
def rig(build_rig: Any) -> Rig:  # noqa: F811
    built: Rig = build_rig()
    return built


def minute_passes(rig: Rig, count: int, *, dispatch: bool = True) -> None:
    for _ in range(count):
        rig.advance(MINUTE)
        rig.generate()
        if dispatch:
            rig.dispatch()


def at_minute(t0: datetime, minute: int) -> datetime:
    return t0 + timedelta(minutes=minute)


def audited(rig: Rig, schedule_id: str, start: datetime, end: datetime) -> resources.ScheduleAudit:
    return resources.ScheduleAudit.model_validate(rig.alice.audit_schedule(schedule_id, start, end))


def test_a_range_with_a_pause_a_blackout_a_deadline_skip_and_a_backfill_has_no_missing(
    rig: Rig,
) -> None:
    t0 = rig.now.replace(second=0, microsecond=0)
    rig.clock.current = t0
    created = rig.every(
        "audited",
        starts_at=to_rfc3339(at_minute(t0, -3)),  # its first fires came before it existed
        missed="skip",
        misfire_grace_ms=1000,
        start_deadline_ms=1000,
        blackouts=[
            {
                "from": to_rfc3339(at_minute(t0, 5)),
                "to": to_rfc3339(at_minute(t0, 8)),
                "reason": "freeze",
            }
        ],
    )
    sid = created["id"]
    minute_passes(rig, 10)  # minutes 1-4 run, 5-7 blacked out, 8-10 run
    # Minute 11 is generated, and dispatched only once its deadline has passed: too_late.
    minute_passes(rig, 1, dispatch=False)
    rig.advance(5)
    rig.dispatch()
    paused = rig.alice.pause(sid, rig.get(sid)["version"])
    minute_passes(rig, 5, dispatch=False)  # paused over minutes 12-16
    rig.alice.resume(sid, paused["version"])
    # The paused minutes, and those the passes (5 s late, past the 1 s grace) reach,
    # become missed ranges.
    minute_passes(rig, 3)
    # The missed minutes 12-13 are run again by a backfill.
    rig.alice.backfill(sid, at_minute(t0, 11) + timedelta(seconds=30), at_minute(t0, 13))
    rig.dispatch()

    report = audited(rig, sid, at_minute(t0, -2), at_minute(t0, 25))
    outcomes = {
        round((i.instant - t0) / timedelta(minutes=1)): (i.outcome, i.reason) for i in report.items
    }
    assert outcomes[-2] == ("not_generated", "before_creation")
    assert outcomes[0] == ("not_generated", "before_creation")
    assert [outcomes[m] for m in (1, 4, 8, 10)] == [("fired", None)] * 4
    assert [outcomes[m] for m in (5, 6, 7)] == [("skipped", "blackout")] * 3
    assert outcomes[11] == ("skipped", "too_late")
    assert outcomes[12] == outcomes[13] == ("fired", None)  # backfilled
    assert [outcomes[m] for m in range(14, 20)] == [("skipped", "missed")] * 6
    assert outcomes[24] == ("not_generated", "not_yet_decided")
    assert "missing" not in {outcome for outcome, _ in outcomes.values()}
    assert len(report.items) == 27  # minutes -2 to 24
    [pause] = report.paused
    assert pause.by == "alice" and pause.end is not None
    assert at_minute(t0, 11) < pause.start < pause.end <= at_minute(t0, 17)
    fired = [i for i in report.items if i.outcome == "fired" and i.run_id is not None]
    assert fired and all(i.run_state for i in fired)
    health = rig.alice.health_report()
    assert not [f for f in health["findings"] if f["kind"] == "occurrence_missing"]


def test_an_instant_without_a_record_is_missing_and_health_says_so(rig: Rig) -> None:
    t0 = rig.now.replace(second=0, microsecond=0)
    rig.clock.current = t0
    sid = rig.every("lossy", starts_at=to_rfc3339(at_minute(t0, 1)))["id"]
    minute_passes(rig, 4)
    with rig.system.store.engine.begin() as conn:  # a lost row: what must never happen
        conn.execute(
            sa.delete(t.starts).where(
                t.starts.c.schedule_id == sid, t.starts.c.occurrence_at == at_minute(t0, 2)
            )
        )
    report = audited(rig, sid, t0, at_minute(t0, 4))
    assert Counter(i.outcome for i in report.items) == Counter({"fired": 2, "missing": 1})
    findings = rig.alice.health_report()["findings"]
    missing = [f for f in findings if f["kind"] == "occurrence_missing"]
    assert [f["subject_id"] for f in missing] == [sid]


def test_a_paused_schedule_says_so_and_an_edit_of_its_spec_keeps_the_old_instants(
    rig: Rig,
) -> None:
    t0 = rig.now.replace(second=0, microsecond=0)
    rig.clock.current = t0
    created = rig.every("edited", starts_at=to_rfc3339(at_minute(t0, 1)))
    sid = created["id"]
    minute_passes(rig, 3)
    edited = rig.edit(
        sid,
        created["version"],
        rig.alice,
        spec={"interval_ms": 120_000, "starts_at": to_rfc3339(at_minute(t0, 4))},
    )
    minute_passes(rig, 4)  # minutes 4 and 6 under the new spec
    rig.alice.pause(sid, edited["version"])
    report = audited(rig, sid, t0, at_minute(t0, 12))
    minutes = [
        (round((i.instant - t0) / timedelta(minutes=1)), i.outcome, i.reason) for i in report.items
    ]
    assert minutes[:5] == [
        (1, "fired", None),
        (2, "fired", None),
        (3, "fired", None),
        (4, "fired", None),
        (6, "fired", None),
    ]
    assert minutes[5:] == [(8, "not_generated", "paused"), (10, "not_generated", "paused")]
    assert report.items[-1].pause is not None and report.items[-1].pause.end is None


def outcomes(rig: Rig, schedule_id: str, start: datetime, end: datetime) -> Counter[Any]:
    report = audited(rig, schedule_id, start, end)
    return Counter((item.outcome, item.reason) for item in report.items)


@pytest.mark.parametrize(
    "bound",
    [{"max_occurrences": 3}, {"end_at_minutes": 3.5}],
    ids=["max_occurrences", "end_at"],
)
def test_an_ended_schedule_edited_later_has_no_missing(rig: Rig, bound: dict[str, Any]) -> None:
    """It ended (its count, or its end), then its spec changed: the instants after its
    end are ``ended``, those the edit passed over are recorded."""
    t0 = rig.now.replace(second=0, microsecond=0)
    rig.clock.current = t0
    options: dict[str, Any] = {"starts_at": to_rfc3339(at_minute(t0, 1))}
    if "max_occurrences" in bound:
        options["max_occurrences"] = bound["max_occurrences"]
    else:
        options["end_at"] = to_rfc3339(t0 + timedelta(minutes=bound["end_at_minutes"]))
    sid = rig.every("bounded", **options)["id"]
    minute_passes(rig, 6)
    view = rig.get(sid)
    assert view["state"] == "ended"
    new_spec = {"interval_ms": 120_000, "starts_at": to_rfc3339(at_minute(t0, 7))}
    rig.edit(sid, view["version"], rig.alice, spec=new_spec)
    found = outcomes(rig, sid, t0, at_minute(t0, 7))
    assert found == Counter({("fired", None): 3, ("not_generated", "ended"): 3}), found


def test_a_missed_stretch_over_closed_days_is_all_accounted_for(rig: Rig) -> None:
    """The runner is down three days over a holiday: the missed fires are one range, the
    holiday's instants ranges of their own inside it, and none is missing."""
    t0 = rig.now.replace(hour=0, minute=0, second=0, microsecond=0)
    rig.clock.current = t0
    holiday = (t0 + timedelta(days=1)).date().isoformat()
    sid = rig.every(
        "hourly",
        seconds=3600,
        starts_at=to_rfc3339(t0 + timedelta(hours=1)),
        missed="skip",
        calendar={"weekend": [], "extra_holidays": [holiday]},
    )["id"]
    rig.advance(3 * 86_400 + 1800)
    rig.generate()
    found = outcomes(rig, sid, t0, rig.now)
    assert found[("skipped", "calendar")] == 24
    assert found[("skipped", "missed")] == 48
    assert not [key for key in found if key[0] == "missing"], found


def test_a_calendar_that_closes_every_instant_of_the_specs_is_refused_at_once(rig: Rig) -> None:
    started = time.monotonic()
    with pytest.raises(PunctualError) as refused:
        rig.alice.put_schedule_by_name(
            "saturdays",
            workflow="echo",
            input={"message": "x"},
            spec={"cron": "0 9 * * 6"},
            calendar={"weekend": ["sat", "sun"]},
            overlap="skip",
            missed="skip",
        )
    assert refused.value.code == "calendar_never_open"
    assert time.monotonic() - started < 10
