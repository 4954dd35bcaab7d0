"""Several specs, business calendars and the N-th business day over HTTP on both stores
(API.md "Calendars, windows, several specs, deadlines, audit", SPEC RS-10): what a create
stores and the view shows, the preview that takes the same fields, and every refusal by
its code and field with nothing stored. Answers are parsed by ``punctual.resources``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from fastapi.testclient import TestClient

from punctual import bootstrap, resources
from punctual.domain.permissions import Role
from tests.support.api import Api, in_process, member_api, register_demo

BERLIN = "Europe/Berlin"
BAVARIA = {"holidays": [{"country": "DE", "subdivision": "BY"}]}
EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
PAYROLL = {"business_day": -1, "at": "17:30", "time_zone": BERLIN}


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    register_demo(system)
    with in_process(system) as test_client:
        yield test_client


@pytest.fixture
def alice(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, "acme", "alice", Role.MEMBER)


def body(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "workflow": "echo",
        "input": {"message": "pay"},
        "overlap": "skip",
        "missed": "catch_up",
        **fields,
    }


def refused(api: Api, sent: dict[str, Any], code: str) -> dict[str, Any]:
    response = api.post("/schedules", sent)
    assert response.status_code == 422, response.text
    error = resources.Error.model_validate(response.json()).error
    assert error.code == code, response.text
    details: dict[str, Any] = error.details
    return details


def count(api: Api) -> int:
    return len(api.get("/schedules").json()["items"])


def test_payroll_on_the_last_business_day_is_stored_and_shown(alice: Api) -> None:
    response = alice.post(
        "/schedules",
        body(
            "payroll",
            specs=[PAYROLL],
            calendar={**BAVARIA, "extra_holidays": ["2027-12-24", "2027-12-31"]},
        ),
    )
    assert response.status_code == 201, response.text
    schedule = resources.Schedule.model_validate(response.json())
    assert schedule.spec == schedule.specs[0]
    assert isinstance(schedule.spec, resources.BusinessDaySpec)
    assert (schedule.spec.business_day, schedule.spec.at) == (-1, "17:30")
    assert schedule.calendar is not None
    assert [(r.country, r.subdivision) for r in schedule.calendar.holidays] == [("DE", "BY")]
    assert schedule.calendar.weekend == ["sat", "sun"]
    assert schedule.calendar.extra_holidays == ["2027-12-24", "2027-12-31"]
    assert schedule.calendar.on_closed_day == "skip"
    # The next five are last business days at 17:30 in Berlin, a Tuesday to a Friday.
    assert len(schedule.next_fire_times) == 5
    for at in schedule.next_fire_times:
        local = at.astimezone(ZoneInfo(BERLIN))
        assert (local.hour, local.minute) == (17, 30) and local.weekday() < 5
    again = resources.Schedule.model_validate(alice.get(f"/schedules/{schedule.id}").json())
    assert again.specs == schedule.specs and again.calendar == schedule.calendar


def test_a_single_spec_is_also_its_specs_and_an_edit_of_the_calendar_revises(
    alice: Api,
) -> None:
    created = alice.post(
        "/schedules", body("mornings", spec={"cron": "0 9 * * *", "time_zone": BERLIN})
    ).json()
    assert created["specs"] == [created["spec"]] and created["calendar"] is None
    edited = alice.patch(
        f"/schedules/{created['id']}",
        {"version": created["version"], "calendar": {**BAVARIA, "weekend": ["sun"]}},
    )
    assert edited.status_code == 200, edited.text
    view = edited.json()
    assert view["revision"] == created["revision"] + 1
    assert view["calendar"]["weekend"] == ["sun"]
    both = alice.patch(
        f"/schedules/{created['id']}",
        {
            "version": view["version"],
            "specs": [created["spec"], {"cron": "0 18 * * *", "time_zone": BERLIN}],
        },
    )
    assert both.status_code == 200, both.text
    assert [s["cron"] for s in both.json()["specs"]] == ["0 9 * * *", "0 18 * * *"]
    assert both.json()["spec"]["cron"] == "0 9 * * *"


@pytest.mark.parametrize(
    ("fields", "code", "named"),
    [
        ({"specs": [PAYROLL], "calendar": {"holidays": [{"country": "XX"}]}},
         "unknown_holiday_region", {"country": "XX", "subdivision": None}),
        ({"specs": [PAYROLL], "calendar": {"holidays": [{"country": "DE", "subdivision": "ZZ"}]}},
         "unknown_holiday_region", {"country": "DE", "subdivision": "ZZ"}),
        ({"specs": [PAYROLL], "calendar": {"weekend": EVERY_DAY}}, "calendar_never_open", {}),
        ({"specs": [PAYROLL]}, "validation_error", {"field": "calendar"}),
        ({"specs": [{**PAYROLL, "business_day": 0}], "calendar": BAVARIA},
         "validation_error", {"loc": ["body", "specs", 0, "business_day"]}),
        ({"specs": [{**PAYROLL, "business_day": -24}], "calendar": BAVARIA},
         "validation_error", {"loc": ["body", "specs", 0, "business_day"]}),
        ({"specs": [{**PAYROLL, "at": "5pm"}], "calendar": BAVARIA},
         "validation_error", {"loc": ["body", "specs", 0, "at"]}),
        ({"spec": PAYROLL, "specs": [PAYROLL], "calendar": BAVARIA},
         "validation_error", {"loc": ["body", "specs"]}),
        ({"specs": []}, "validation_error", {"loc": ["body", "specs"]}),
        ({"specs": [PAYROLL] * 11, "calendar": BAVARIA},
         "validation_error", {"loc": ["body", "specs"]}),
        ({"spec": {"interval_ms": 60_000}, "calendar": {"on_closed_day": "next_open_day"}},
         "validation_error", {"loc": ["body", "calendar", "on_closed_day"]}),
        ({"spec": {"cron": "0 9 * * *"}, "calendar": {"extra_holidays": ["24.12.2026"]}},
         "validation_error", {"loc": ["body", "calendar", "extra_holidays", 0]}),
        ({"spec": {"cron": "0 9 * * *"}, "calendar": {"weekend": ["saturday"]}},
         "validation_error", {"loc": ["body", "calendar", "weekend"]}),
        ({"spec": {"cron": "0 9 * * *"}, "calendar": {"on_closed_day": "later"}},
         "validation_error", {"loc": ["body", "calendar", "on_closed_day"]}),
    ],
)  # fmt: skip
def test_bad_calendars_and_specs_are_refused_by_name_and_nothing_is_stored(
    alice: Api, fields: dict[str, Any], code: str, named: dict[str, Any]
) -> None:
    before = count(alice)
    details = refused(alice, body("refused", **fields), code)
    if "loc" in named:
        assert named["loc"] in [e["loc"] for e in details["errors"]], details
    elif "field" in named:
        locs = [e["loc"] for e in details.get("errors", [])]
        assert details.get("field") == named["field"] or ["body", named["field"]] in locs
    else:
        for key, value in named.items():
            assert details[key] == value, details
    assert count(alice) == before


def test_the_preview_takes_the_schedule_fields_and_shows_calendar_decisions(
    alice: Api,
) -> None:
    """Christmas week in Bavaria at 09:00: fires on open days, and each closed day shown
    with its reason; a blackout is one skip with its window."""
    calendar = json.dumps({**BAVARIA, "extra_holidays": ["2026-12-24"]})
    blackouts = json.dumps(
        [
            {
                "from": "2026-12-29T00:00:00+01:00",
                "to": "2026-12-30T00:00:00+01:00",
                "reason": "audit",
            }
        ]
    )
    response = alice.get(
        "/schedule-preview",
        cron="0 9 * * *",
        time_zone=BERLIN,
        calendar=calendar,
        blackouts=blackouts,
        count=3,
        **{"from": "2026-12-22T12:00:00Z"},
    )
    assert response.status_code == 200, response.text
    preview = resources.SchedulePreview.model_validate(response.json())
    assert [item.fire_at.isoformat() for item in preview.items] == [
        "2026-12-23T08:00:00+00:00",
        "2026-12-28T08:00:00+00:00",
        "2026-12-30T08:00:00+00:00",
    ]
    assert [(s.at.isoformat(), s.reason, s.detail) for s in preview.skipped] == [
        ("2026-12-24T08:00:00+00:00", "calendar", "extra closed date"),
        ("2026-12-25T08:00:00+00:00", "calendar", "Christmas Day"),
        ("2026-12-26T08:00:00+00:00", "calendar", "Second Day of Christmas"),
        ("2026-12-27T08:00:00+00:00", "calendar", "weekend"),
        ("2026-12-29T08:00:00+00:00", "blackout", "audit"),
    ]


def test_the_preview_of_a_business_day_and_of_several_specs(alice: Api) -> None:
    last = alice.get(
        "/schedule-preview",
        business_day="-1",
        at="17:30",
        time_zone=BERLIN,
        calendar=json.dumps({**BAVARIA, "extra_holidays": ["2026-12-31"]}),
        count=2,
        **{"from": "2026-12-01T00:00:00Z"},
    )
    assert last.status_code == 200, last.text
    assert [i["fire_at"] for i in last.json()["items"]] == [
        "2026-12-30T16:30:00.000Z",
        "2027-01-29T16:30:00.000Z",
    ]
    moved = alice.get(
        "/schedule-preview",
        specs=json.dumps(
            [{"cron": "0 9 * * *", "time_zone": BERLIN}, {"cron": "0 9 * * 1", "time_zone": BERLIN}]
        ),
        calendar=json.dumps({**BAVARIA, "on_closed_day": "next_open_day"}),
        count=2,
        **{"from": "2026-12-24T12:00:00Z"},
    )
    assert moved.status_code == 200, moved.text
    items = moved.json()["items"]
    # 25 to 27 December move onto Monday the 28th, which fires once, for both specs.
    assert [(i["fire_at"], i["spec_indexes"], i["calendar_moved_from"]) for i in items] == [
        ("2026-12-28T08:00:00.000Z", [0, 1], None),
        ("2026-12-29T08:00:00.000Z", [0], None),
    ]
    bad = alice.get("/schedule-preview", specs="[not json")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "validation_error"
    region = alice.get(
        "/schedule-preview",
        cron="0 9 * * *",
        calendar=json.dumps({"holidays": [{"country": "QQ"}]}),
    )
    assert region.status_code == 422
    assert region.json()["error"]["code"] == "unknown_holiday_region"


def test_the_audit_route_answers_every_instant_of_a_range_and_refuses_bad_ranges(
    alice: Api,
) -> None:
    created = alice.post(
        "/schedules", body("audited", spec={"interval_ms": 60_000}, missed="skip")
    ).json()
    path = f"/schedules/{created['id']}/audit"
    start = created["created_at"]
    end = created["next_fire_times"][2]
    answer = alice.get(path, **{"from": start, "to": end})
    assert answer.status_code == 200, answer.text
    audit = resources.ScheduleAudit.model_validate(answer.json())
    # The first two fire times after creation, not reached yet by a pass.
    assert [(i.outcome, i.reason) for i in audit.items] == [
        ("not_generated", "not_yet_decided")
    ] * 2
    assert audit.paused == []
    week_later = (
        datetime.fromisoformat(start.replace("Z", "+00:00")) + timedelta(days=8)
    ).isoformat()
    for params, where in (
        ({"from": start}, "to"),
        ({"to": end}, "from"),
        ({"from": end, "to": start}, "to"),
        ({"from": start, "to": week_later}, "to"),  # over 10,000 instants
        ({"from": "2020-01-01T00:00:00Z", "to": end}, "from"),  # before what retention keeps
        ({"from": "yesterday", "to": end}, "from"),
    ):
        refused = alice.get(path, **params)
        assert refused.status_code == 422, (params, refused.text)
        errors = refused.json()["error"]["details"]["errors"]
        assert ["query", where] in [e["loc"] for e in errors], (params, errors)
    unknown = alice.get(
        "/schedules/sch_000000000000000000000000/audit", **{"from": start, "to": end}
    )
    assert unknown.status_code == 404
