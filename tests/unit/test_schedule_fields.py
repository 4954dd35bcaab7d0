"""The one table of schedule fields: every setting has its field, every field decodes to the
domain and back, and every way in meets the same limits (decision 0012)."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from punctual.domain.recurrence import CronSpec, IntervalSpec
from punctual.domain.schedules import (
    SETTINGS,
    MissedPolicy,
    OverlapPolicy,
    Schedule,
    ScheduleSettings,
    VersionPolicy,
)
from punctual.errors import InvalidRequest
from punctual.usecases.recurring.schedule_fields import (
    FIELDS,
    INPUT,
    MAX_SPAN_MS,
    check_end_at,
    check_jitter,
    decode_create,
    decode_update,
    decode_upsert,
    settle_timing,
    view_of,
)

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
MINIMAL = {
    "name": "nightly",
    "workflow": "report",
    "input": {"day": 1},
    "spec": {"cron": "30 2 * * *", "time_zone": "Europe/Berlin"},
    "overlap": "skip",
    "missed": "catch_up",
}


def refusal(body: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as refused:
        decode_create(body)
    return refused.value


def test_every_setting_of_the_domain_is_reached_by_a_field() -> None:
    """A setting that no field writes could never be set through the API, and a field
    whose write changes nothing (or more than its own setting) is wired wrong."""
    blank = decode_create(MINIMAL).settings
    touched: dict[str, set[str]] = {}
    for field in FIELDS:
        assert field.write(blank, field.read(blank)) == blank, field.name
        written = field.write(blank, field.decode(_other_value(field.name)))
        touched[field.name] = {n for n in SETTINGS if getattr(written, n) != getattr(blank, n)}
        assert len(touched[field.name]) == 1, (field.name, touched[field.name])
    assert set().union(*touched.values()) == set(SETTINGS)
    assert {f.name for f in fields(ScheduleSettings)} == set(SETTINGS)
    assert set(SETTINGS) <= {f.name for f in fields(Schedule)}


def _other_value(name: str) -> Any:
    """A valid JSON value of each field that differs from ``MINIMAL``'s defaults."""
    return {
        "name": "weekly",
        "workflow": "score",
        "spec": {"interval_ms": 60_000},
        "specs": [
            {"cron": "0 9 * * 1-5", "time_zone": "Europe/Berlin"},
            {"business_day": -1, "at": "17:30", "time_zone": "Europe/Berlin"},
        ],
        "calendar": {"holidays": [{"country": "DE", "subdivision": "BY"}]},
        "overlap": "allow_all",
        "missed": "skip",
        "max_catch_up": 3,
        "catch_up_window": 60,
        "misfire_grace_ms": 5_000,
        "enabled": False,
        "version_policy": "pinned",
        "workload_class": "heavy",
        "regression": {"metrics": [{"path": "score", "better": "higher"}]},
        "end_at": "2027-01-01T00:00:00Z",
        "max_occurrences": 5,
        "jitter_ms": 250,
        "blackouts": [
            {"from": "2026-12-24T00:00:00+01:00", "to": "2027-01-02T00:00:00+01:00"},
            {"from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z", "reason": "freeze"},
        ],
        "source": "deploy/schedules.toml",
        "pause_until": "2027-01-04T08:00:00+01:00",
        "start_deadline_ms": 3_600_000,
    }[name]


def test_a_create_takes_the_defaults_and_decodes_to_domain_values() -> None:
    command = decode_create(MINIMAL)
    settings = command.settings
    assert command.input == {"day": 1}
    assert settings.spec == CronSpec("30 2 * * *", "Europe/Berlin")
    assert settings.policy.overlap is OverlapPolicy.SKIP
    assert settings.policy.missed is MissedPolicy.CATCH_UP
    assert settings.policy.max_catch_up == 10
    assert settings.policy.misfire_grace == timedelta(minutes=1)
    assert settings.policy.jitter == timedelta(0)
    assert settings.version_policy is VersionPolicy.ACTIVE_AT_FIRE
    assert (settings.enabled, settings.workload_class, settings.source) == (True, "standard", None)


def test_the_view_is_the_request_form_of_every_field() -> None:
    # Every field but ``spec``: a body sends ``spec`` or ``specs``, not both.
    body = {f.name: _other_value(f.name) for f in FIELDS if f.name != "spec"}
    body = {k: v for k, v in {**MINIMAL, **body}.items() if k != "spec"}
    view = view_of(decode_create(body).settings)
    assert list(view) == [f.name for f in FIELDS]
    assert view["spec"] == {
        "cron": "0 9 * * 1-5",
        "time_zone": "Europe/Berlin",
        "dst_gap": "shift_to_gap_end",
        "dst_overlap": "first",
    }
    assert view["specs"][0] == view["spec"]
    assert view["specs"][1] == {
        "business_day": -1,
        "at": "17:30",
        "time_zone": "Europe/Berlin",
        "dst_gap": "shift_to_gap_end",
        "dst_overlap": "first",
    }
    assert view["calendar"] == {
        "holidays": [{"country": "DE", "subdivision": "BY"}],
        "weekend": ["sat", "sun"],
        "extra_holidays": [],
        "extra_workdays": [],
        "on_closed_day": "skip",
    }
    assert view["catch_up_window"] == 60.0
    assert view["end_at"] == "2027-01-01T00:00:00.000Z"
    assert view["regression"] == {
        "metrics": [{"path": "score", "better": "higher", "tolerance": 0.0}]
    }
    assert view["pause_until"] == "2027-01-04T07:00:00.000Z"
    assert view["start_deadline_ms"] == 3_600_000
    assert view["blackouts"] == [  # sorted, in UTC
        {"from": "2026-12-01T00:00:00.000Z", "to": "2026-12-02T00:00:00.000Z", "reason": "freeze"},
        {"from": "2026-12-23T23:00:00.000Z", "to": "2027-01-01T23:00:00.000Z", "reason": None},
    ]
    # The view decodes back to the same settings: no field loses anything on the way out.
    # It shows ``spec`` and ``specs``; a body sends one of them (``spec`` is ``specs[0]``).
    del view["spec"]
    assert decode_create({**view, INPUT: None}).settings == decode_create(body).settings


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("overlap", None, "policy_required"),
        ("missed", "later", "validation_error"),
        ("max_catch_up", 0, "validation_error"),
        ("max_catch_up", True, "validation_error"),
        ("misfire_grace_ms", MAX_SPAN_MS + 1, "validation_error"),
        ("jitter_ms", -1, "validation_error"),
        ("catch_up_window", 0, "validation_error"),
        ("end_at", "2027-01-01T00:00:00", "validation_error"),
        ("max_occurrences", 2**63, "validation_error"),
        ("workload_class", "x" * 65, "validation_error"),
        ("name", "", "validation_error"),
        ("source", "", "validation_error"),
        ("version_policy", "latest", "validation_error"),
        ("regression", {"metrics": []}, "validation_error"),
        ("enabled", "yes", "validation_error"),
        ("spec", {"interval_ms": 10}, "interval_too_short"),
        ("spec", {"interval_ms": MAX_SPAN_MS + 1}, "validation_error"),
        ("jitter_ms", 2**63 - 1, "validation_error"),
        ("spec", {"cron": "61 * * * *"}, "invalid_cron"),
        ("spec", {"cron": "0 * * * *", "time_zone": "Mars/Olympus"}, "unknown_time_zone"),
    ],
)
def test_each_limit_is_refused_with_the_contracts_code(field: str, value: Any, code: str) -> None:
    assert refusal({**MINIMAL, field: value}).code == code


def test_missing_and_unknown_fields_are_named() -> None:
    missing = refusal({"name": "x", "overlap": "skip", "missed": "skip"})
    assert [e["loc"][-1] for e in missing.details["errors"]] == ["workflow", "input", "spec"]
    unknown = refusal({**MINIMAL, "colour": "red"})
    assert [e["loc"][-1] for e in unknown.details["errors"]] == ["colour"]
    with pytest.raises(InvalidRequest) as edit:
        decode_update("sch_1", 1, {"version": 2})
    assert "version" in edit.value.message


def test_an_edit_carries_decoded_values_and_applies_them_to_the_settings() -> None:
    edit = decode_update("sch_1", 3, {"overlap": "allow_all", "jitter_ms": 500, INPUT: [1]})
    assert edit.changes == {
        "overlap": OverlapPolicy.ALLOW_ALL,
        "jitter_ms": timedelta(milliseconds=500),
        INPUT: [1],
    }
    before = decode_create(MINIMAL).settings
    after = edit.apply(before)
    assert after.policy.overlap is OverlapPolicy.ALLOW_ALL
    assert after.policy.jitter == timedelta(milliseconds=500)
    assert after.policy.missed is before.policy.missed
    assert after.name == before.name


def test_an_upsert_takes_its_name_from_the_path_and_remembers_what_was_sent() -> None:
    body = {k: v for k, v in MINIMAL.items() if k != "name"}
    upsert = decode_upsert("from-path", body, 4)
    assert upsert.create.settings.name == "from-path"
    assert upsert.sent == frozenset(body)
    assert upsert.version == 4
    with pytest.raises(InvalidRequest):
        decode_upsert("from-path", {**body, "name": "other"})


def test_the_checks_against_the_mutations_time() -> None:
    unstarted = decode_create({**MINIMAL, "spec": {"interval_ms": 60_000}}).settings
    settled = settle_timing(unstarted, NOW).spec
    assert settled == IntervalSpec(60_000, NOW + timedelta(minutes=1))
    check_end_at(NOW, NOW)
    with pytest.raises(InvalidRequest) as past:
        check_end_at(NOW - timedelta(seconds=1), NOW)
    assert past.value.code == "end_at_in_past"
    minutely = CronSpec("* * * * *", "UTC")
    check_jitter(timedelta(seconds=59), minutely, NOW)
    with pytest.raises(InvalidRequest) as jitter:
        check_jitter(timedelta(seconds=60), minutely, NOW)
    assert jitter.value.code == "jitter_too_large"
    # A jitter of far more than ten years decodes, so it is refused for the spec's gaps
    # with the largest the spec allows, as HTTP answers it.
    huge = decode_create({**MINIMAL, "jitter_ms": 10**15}).settings.policy.jitter
    with pytest.raises(InvalidRequest) as too_large:
        check_jitter(huge, minutely, NOW)
    assert too_large.value.details["max_jitter_ms"] == 59_999
    assert too_large.value.details["jitter_ms"] == 10**15


def test_a_body_with_several_problems_gets_one_answer_whatever_its_order() -> None:
    """The table's order decides, never the body's (a set's order changes with the
    process): plain problems before the first coded refusal are answered together."""
    problems = {"version_policy": "bogus", "spec": {"cron": "nope"}, "max_catch_up": 0}
    answers = set()
    for ordered in (problems, dict(reversed(list(problems.items())))):
        with pytest.raises(InvalidRequest) as refused:
            decode_update("sch_1", 1, ordered)
        answers.add((refused.value.code, refused.value.message))
    assert len(answers) == 1
    assert next(iter(answers))[0] == "invalid_cron"
    with pytest.raises(InvalidRequest) as together:
        decode_update("sch_1", 1, {"misfire_grace_ms": -1, "max_catch_up": 0})
    assert together.value.code == "validation_error"
    assert [e["loc"][-1] for e in together.value.details["errors"]] == [
        "max_catch_up",
        "misfire_grace_ms",
    ]
    with pytest.raises(InvalidRequest) as earlier_coded:
        decode_update("sch_1", 1, {"max_catch_up": 0, "overlap": None})
    assert earlier_coded.value.code == "policy_required"  # overlap comes first in the table
    with pytest.raises(InvalidRequest) as earlier_plain:
        decode_update("sch_1", 1, {"name": "", "spec": {"cron": "nope"}})
    assert earlier_plain.value.code == "validation_error"  # so does name before spec


def test_the_http_client_sends_a_schedule_field_it_has_no_named_option_for() -> None:
    """A field the server has and the client's named options do not yet (a newer server)
    still reaches the body, by its API name, beside the named ones."""
    from punctual.client import calls

    call = calls.create_schedule(
        name="n",
        workflow="echo",
        input={},
        spec={"interval_ms": 60_000},
        overlap="skip",
        missed="skip",
        jitter_ms=5,
        newer_field="kept as given",
    )
    assert call.body["newer_field"] == "kept as given"
    assert call.body["jitter_ms"] == 5
    assert "max_catch_up" not in call.body  # an option left None takes the server's default


@pytest.mark.parametrize(
    ("blackouts", "field", "words"),
    [
        ("freeze", "blackouts", "must be a list of at most 100 windows"),
        ([{"from": "2026-12-24T00:00:00Z"}], "blackouts[0].to", "must be an instant"),
        (
            [{"from": "2026-12-24T00:00:00", "to": "2026-12-25T00:00:00Z"}],
            "blackouts[0].from",
            "UTC offset",
        ),
        (
            [{"from": "2026-12-25T00:00:00Z", "to": "2026-12-24T00:00:00Z"}],
            "blackouts[0].to",
            "not reversed",
        ),
        (
            [{"from": "2026-12-24T00:00:00Z", "to": "2026-12-24T00:00:00Z"}],
            "blackouts[0].to",
            "not reversed",
        ),
        (
            [{"from": "2026-12-24T00:00:00Z", "to": "2026-12-25T00:00:00Z", "why": "x"}],
            "blackouts[0]",
            "must be {",
        ),
        (
            [{"from": "2026-12-24T00:00:00Z", "to": "2026-12-25T00:00:00Z", "reason": ""}],
            "blackouts[0].reason",
            "1 to 200",
        ),
        (
            [
                {"from": "2026-12-24T00:00:00Z", "to": "2026-12-26T00:00:00Z"},
                {"from": "2026-12-25T00:00:00Z", "to": "2026-12-27T00:00:00Z"},
            ],
            "blackouts",
            "must not overlap",
        ),
        (
            [
                {"from": f"2026-12-{d:02d}T00:00:00Z", "to": f"2026-12-{d:02d}T01:00:00Z"}
                for d in range(1, 32)
            ]
            * 4,
            "blackouts",
            "at most 100",
        ),
    ],
)
def test_bad_blackouts_are_refused_naming_the_field(blackouts: Any, field: str, words: str) -> None:
    refused = refusal({**MINIMAL, "blackouts": blackouts})
    assert refused.code == "validation_error"
    path = ["body", *field.replace("]", "").replace("[", ".").split(".")]
    loc = [str(part) for part in refused.details["errors"][0]["loc"]]
    assert loc == path, refused.details
    assert words in str(refused), str(refused)


def test_blackouts_that_touch_are_two_windows() -> None:
    touching = [
        {"from": "2026-12-25T00:00:00Z", "to": "2026-12-26T00:00:00Z"},
        {"from": "2026-12-24T00:00:00Z", "to": "2026-12-25T00:00:00Z"},
    ]
    blackouts = decode_create({**MINIMAL, "blackouts": touching}).settings.policy.blackouts
    assert [b.start.day for b in blackouts] == [24, 25]


@pytest.mark.parametrize("value", [999, 0, -1, "1000", 1.5, True])
def test_a_start_deadline_under_a_second_or_not_whole_is_refused(value: Any) -> None:
    refused = refusal({**MINIMAL, "start_deadline_ms": value})
    assert refused.details["errors"][0]["loc"] == ["body", "start_deadline_ms"]


def test_no_start_deadline_by_default() -> None:
    assert decode_create(MINIMAL).settings.policy.start_deadline is None
