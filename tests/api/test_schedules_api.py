"""Recurring schedules through HTTP on both stores (API.md "Schedules", SPEC RS-1..RS-8, CR-2).

Create, read, edit, pause/resume, delete, the occurrence list and cancel, the preview and
the schedule quota, each with its status, error code and details. Occurrences are made
by the real generation pass (``usecases.generation.generate``) after moving a schedule's
cursor back through the store's bookkeeping call, so no test waits for time to pass.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import pytest
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.domain.recurrence import CronSpec, next_fires
from punctual.ports.records import CursorMove
from punctual.usecases.recurring.generation import generate
from tests.conftest import make_settings
from tests.support.api import Api, in_process, member_api, register_demo

SCHEDULE_FIELDS = {
    "id",
    "name",
    "workflow",
    "spec",
    "overlap",
    "missed",
    "max_catch_up",
    "catch_up_window",
    "misfire_grace_ms",
    "enabled",
    "version",
    "revision",
    "version_policy",
    "workload_class",
    "regression",
    "created_by",
    "last_fired_at",
    "last_run_id",
    "last_status",
    "next_fire_times",
    "created_at",
    "updated_at",
}
OCCURRENCE_FIELDS = {
    "id",
    "schedule_id",
    "occurrence_at",
    "scheduled_at",
    "nominal",
    "dst_adjustment",
    "state",
    "reason",
    "version",
    "run_id",
    "attempts",
    "last_error",
}
PREVIEW_FIELDS = {
    "fire_at",
    "local",
    "nominal",
    "dst_adjustment",
    "spec_indexes",
    "calendar_moved_from",
}
RFC3339_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
REGRESSION = {"metrics": [{"path": "metrics.score", "better": "higher", "tolerance": 0.0}]}


class Response(Protocol):
    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...

    def json(self, **kwargs: Any) -> Any: ...


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    """The in-process app with the demo workflows registered (not loaded by a worker)."""
    register_demo(system)
    with in_process(system) as test_client:
        yield test_client


@pytest.fixture
def alice(system: bootstrap.Punctual, client: TestClient) -> Api:
    """A member of ``acme``: the creator in most tests."""
    return member_api(system, client, "acme", "alice", Role.MEMBER)


@pytest.fixture
def bob(system: bootstrap.Punctual, client: TestClient) -> Api:
    """Another member of ``acme``: not the creator."""
    return member_api(system, client, "acme", "bob", Role.MEMBER)


@pytest.fixture
def admin(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, "acme", "root", Role.ADMIN)


def instant(text: str) -> datetime:
    assert RFC3339_UTC.match(text), f"{text!r} is not RFC 3339 UTC with Z"
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def z(value: datetime) -> str:
    """The API's timestamp format: UTC, milliseconds, ``Z``."""
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def error_of(response: Response, status: int, code: str) -> dict[str, Any]:
    """Assert the status and the error envelope; return ``details``."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["details"], dict), error
    details: dict[str, Any] = error["details"]
    return details


def validation_errors(response: Response) -> list[dict[str, Any]]:
    details = error_of(response, 422, "validation_error")
    errors = details.get("errors")
    assert isinstance(errors, list) and errors, details
    return errors


def cron_body(**overrides: Any) -> dict[str, Any]:
    """API.md's example body, every field given."""
    body: dict[str, Any] = {
        "name": "nightly-scores",
        "workflow": "score",
        "input": {"score": 0.9},
        "spec": {"cron": "30 2 * * 1-5", "time_zone": "America/New_York"},
        "overlap": "skip",
        "missed": "catch_up",
        "max_catch_up": 10,
        "catch_up_window": 86400,
        "misfire_grace_ms": 60000,
        "enabled": True,
        "version_policy": "active_at_fire",
        "workload_class": "standard",
        "regression": REGRESSION,
    }
    body.update(overrides)
    return body


def interval_body(name: str = "every-minute", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "workflow": "echo",
        "input": {"message": "tick"},
        "spec": {"interval_ms": 60_000},
        "overlap": "skip",
        "missed": "catch_up",
    }
    body.update(overrides)
    return body


def create(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post("/schedules", body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def patch(api: Api, schedule_id: str, body: dict[str, Any]) -> Response:
    return api.patch(f"/schedules/{schedule_id}", body)


def get(api: Api, schedule_id: str) -> dict[str, Any]:
    response = api.get(f"/schedules/{schedule_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def whole_second(offset_seconds: float = 0) -> datetime:
    now = datetime.now(UTC).replace(microsecond=0)
    return now + timedelta(seconds=offset_seconds)


def behind(
    system: bootstrap.Punctual, api: Api, name: str, *, fires: int, **overrides: Any
) -> tuple[dict[str, Any], datetime]:
    """A 60 s interval schedule whose cursor is put back ``fires`` intervals, as after
    downtime (runner bookkeeping, no version change); returns it and its first fire."""
    first = whole_second(-60 * fires)
    spec = {"interval_ms": 60_000, "starts_at": first.isoformat().replace("+00:00", "Z")}
    schedule = create(api, interval_body(name, spec=spec, **overrides))
    with system.store.transaction() as tx:
        tx.schedules.move_cursors([CursorMove(schedule["id"], first - timedelta(seconds=1), first)])
    return schedule, first


def occurrences(api: Api, schedule_id: str, **params: Any) -> list[dict[str, Any]]:
    """Every page of the occurrence list."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(100):
        query = dict(params, limit=params.get("limit", 100))
        if cursor:
            query["cursor"] = cursor
        response = api.get(f"/schedules/{schedule_id}/occurrences", **query)
        assert response.status_code == 200, response.text
        page = response.json()
        assert set(page) == {"items", "next_cursor"}, page
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError("the occurrence list never ended")


# --------------------------------------------------------------------------- create and read


def test_create_cron_returns_201_with_every_contract_field(alice: Api) -> None:
    before = datetime.now(UTC)
    created = create(alice, cron_body())
    assert set(created) >= SCHEDULE_FIELDS, SCHEDULE_FIELDS - set(created)
    assert "input" not in created, "input is never returned"
    assert created["name"] == "nightly-scores"
    assert created["workflow"] == "score"
    assert created["spec"] == {
        "cron": "30 2 * * 1-5",
        "time_zone": "America/New_York",
        "dst_gap": "shift_to_gap_end",
        "dst_overlap": "first",
    }
    assert (created["overlap"], created["missed"]) == ("skip", "catch_up")
    assert created["max_catch_up"] == 10
    assert created["catch_up_window"] == 86400
    assert created["misfire_grace_ms"] == 60000
    assert created["enabled"] is True
    assert (created["version"], created["revision"]) == (1, 1)
    assert created["version_policy"] == "active_at_fire"
    assert created["workload_class"] == "standard"
    assert created["regression"] == REGRESSION
    assert created["created_by"] == "alice"
    assert (created["last_fired_at"], created["last_run_id"], created["last_status"]) == (
        None,
        None,
        None,
    )
    assert isinstance(created["id"], str) and created["id"]
    assert before - timedelta(seconds=1) <= instant(created["created_at"])
    assert instant(created["updated_at"]) >= instant(created["created_at"])

    times = [instant(t) for t in created["next_fire_times"]]
    expected = next_fires(CronSpec("30 2 * * 1-5", "America/New_York"), before, 5)
    assert times == [f.at.replace(microsecond=0) for f in expected]
    for fire in expected:
        local = fire.local
        assert (local.hour, local.minute, local.weekday() < 5) == (2, 30, True)

    fetched = get(alice, created["id"])
    assert {k: v for k, v in fetched.items() if k != "next_fire_times"} == {
        k: v for k, v in created.items() if k != "next_fire_times"
    }
    assert fetched["next_fire_times"] == created["next_fire_times"]


def test_create_interval_defaults_and_explicit_first_occurrence(alice: Api) -> None:
    before = datetime.now(UTC)
    created = create(alice, interval_body())
    assert set(created) >= SCHEDULE_FIELDS
    assert created["spec"]["interval_ms"] == 60_000
    first = datetime.fromisoformat(created["spec"]["starts_at"].replace("Z", "+00:00"))
    assert before + timedelta(seconds=59) <= first <= datetime.now(UTC) + timedelta(seconds=61)
    # Defaults of the optional fields.
    assert created["max_catch_up"] == 10
    assert created["catch_up_window"] is None
    assert created["misfire_grace_ms"] == 60_000
    assert created["version_policy"] == "active_at_fire"
    assert created["workload_class"] == "standard"
    assert created["regression"] is None
    times = [instant(t) for t in created["next_fire_times"]]
    assert len(times) == 5
    assert [b - a for a, b in itertools.pairwise(times)] == [timedelta(minutes=1)] * 4

    start = whole_second(3600)
    explicit = create(
        alice,
        interval_body(
            "hourly",
            spec={"interval_ms": 3_600_000, "starts_at": start.isoformat().replace("+00:00", "Z")},
        ),
    )
    assert explicit["next_fire_times"][0] == z(start)
    offset = create(
        alice,
        interval_body(
            "offset",
            spec={"interval_ms": 3_600_000, "starts_at": "2099-06-01T09:00:00+02:00"},
        ),
    )
    assert offset["next_fire_times"][0] == "2099-06-01T07:00:00.000Z"
    starts_at = datetime.fromisoformat(offset["spec"]["starts_at"].replace("Z", "+00:00"))
    assert starts_at == datetime(2099, 6, 1, 7, tzinfo=UTC)


def test_next_fire_times_are_empty_while_paused(alice: Api) -> None:
    paused = create(alice, interval_body(enabled=False))
    assert paused["enabled"] is False
    assert paused["next_fire_times"] == []
    running = create(alice, interval_body("running"))
    assert len(running["next_fire_times"]) == 5
    response = alice.post(f"/schedules/{running['id']}/pause", {"version": 1})
    assert response.status_code == 200, response.text
    assert response.json()["next_fire_times"] == []
    assert get(alice, running["id"])["next_fire_times"] == []
    resumed = alice.post(f"/schedules/{running['id']}/resume", {"version": 2})
    assert resumed.status_code == 200, resumed.text
    assert len(resumed.json()["next_fire_times"]) == 5


def test_list_schedules_pages_newest_first(alice: Api, bob: Api) -> None:
    ids = [create(alice, interval_body(f"s{i}"))["id"] for i in range(5)]
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = bob.get("/schedules", **params).json()
        assert len(page["items"]) <= 2
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]
    error_of(bob.get("/schedules", limit=0), 422, "validation_error")
    error_of(bob.get("/schedules", limit=101), 422, "validation_error")


# --------------------------------------------------------------------------- validation


def test_policy_required(alice: Api) -> None:
    for missing in ("overlap", "missed"):
        body = interval_body()
        del body[missing]
        details = error_of(alice.post("/schedules", body), 422, "policy_required")
        assert details.get("field") == missing, details
        nulled = interval_body()
        nulled[missing] = None
        details = error_of(alice.post("/schedules", nulled), 422, "policy_required")
        assert details.get("field") == missing, details
    assert alice.get("/schedules").json()["items"] == []


INVALID_CRON = [
    ("61 * * * *", "minute"),
    ("* 24 * * *", "hour"),
    ("* * 32 * *", "day-of-month"),
    ("* * * 13 *", "month"),
    ("* * * * 8", "day-of-week"),
    ("* * * JANUARY *", "month"),
    ("0 0 L * *", "day-of-month"),
    ("5/10 * * * *", "minute"),
    ("* * * * * *", "expression"),
    ("@every_5m", "expression"),
    ("", "expression"),
]


def test_invalid_cron_names_the_field(alice: Api) -> None:
    for expression, field in INVALID_CRON:
        body = cron_body(spec={"cron": expression, "time_zone": "UTC"})
        details = error_of(alice.post("/schedules", body), 422, "invalid_cron")
        assert details.get("field") == field, (expression, details)


def test_unknown_time_zone(alice: Api) -> None:
    body = cron_body(spec={"cron": "0 9 * * *", "time_zone": "Mars/Olympus_Mons"})
    details = error_of(alice.post("/schedules", body), 422, "unknown_time_zone")
    assert details.get("time_zone") == "Mars/Olympus_Mons"


def test_interval_too_short(alice: Api) -> None:
    for interval_ms in (999, 1, 0):
        body = interval_body(spec={"interval_ms": interval_ms})
        details = error_of(alice.post("/schedules", body), 422, "interval_too_short")
        assert details.get("interval_ms") == interval_ms, details


def test_interval_of_one_second_is_accepted(alice: Api) -> None:
    created = create(alice, interval_body(spec={"interval_ms": 1000}))
    times = [instant(t) for t in created["next_fire_times"]]
    assert [b - a for a, b in itertools.pairwise(times)] == [timedelta(seconds=1)] * 4


BAD_VALUES: list[tuple[str, Any]] = [
    ("max_catch_up", 0),
    ("max_catch_up", 101),
    ("max_catch_up", -1),
    ("catch_up_window", -5),
    ("catch_up_window", 0),
    ("misfire_grace_ms", -1),
    ("overlap", "sometimes"),
    ("missed", "later"),
    ("version_policy", "latest"),
]


def test_bad_policy_values_are_validation_errors(alice: Api) -> None:
    for field, value in BAD_VALUES:
        errors = validation_errors(alice.post("/schedules", interval_body(**{field: value})))
        assert any(field in [str(p) for p in e["loc"]] for e in errors), (field, value, errors)
    assert alice.get("/schedules").json()["items"] == []


def test_max_catch_up_bounds_are_inclusive(alice: Api) -> None:
    for max_catch_up in (1, 100):
        created = create(alice, interval_body(f"bound-{max_catch_up}", max_catch_up=max_catch_up))
        assert created["max_catch_up"] == max_catch_up


def test_unknown_or_conflicting_fields_are_refused(alice: Api) -> None:
    for body in (
        interval_body(colour="red"),
        interval_body(spec={"interval_ms": 60_000, "every": 2}),
        cron_body(spec={"cron": "0 9 * * *", "time_zone": "UTC", "seconds": 0}),
        interval_body(spec={"cron": "0 9 * * *", "interval_ms": 60_000}),
        interval_body(spec={}),
    ):
        validation_errors(alice.post("/schedules", body))
    assert alice.get("/schedules").json()["items"] == []


def test_host_owned_fields_are_refused(alice: Api) -> None:
    details = error_of(
        alice.post("/schedules", interval_body(task_queue="fast")), 422, "host_owned_field"
    )
    assert details.get("fields") == ["task_queue"]


def test_input_is_validated_against_the_active_definition(alice: Api) -> None:
    error_of(alice.post("/schedules", interval_body(input={"nope": 1})), 422, "input_invalid")
    error_of(alice.post("/schedules", interval_body(workflow="missing")), 422, "unknown_workflow")


def test_a_viewer_may_not_create(system: bootstrap.Punctual, client: TestClient) -> None:
    viewer = member_api(system, client, "acme", "vera", Role.VIEWER)
    error_of(viewer.post("/schedules", interval_body()), 403, "forbidden")
    # Check order: validation (422) answers before the role (403).
    error_of(viewer.post("/schedules", interval_body(overlap=None)), 422, "policy_required")
    assert viewer.get("/schedules").json()["items"] == []


def test_schedule_names_are_unique_among_live_schedules(alice: Api) -> None:
    first = create(alice, interval_body("unique"))
    assert alice.post("/schedules", interval_body("unique")).status_code == 409
    assert alice.delete(f"/schedules/{first['id']}", version=1).status_code == 204
    create(alice, interval_body("unique"))


# --------------------------------------------------------------------------- edit, pause, resume


def test_content_edit_is_for_the_creator_or_an_admin(alice: Api, bob: Api, admin: Api) -> None:
    created = create(alice, interval_body())
    sid = created["id"]

    for change in (
        {"input": {"message": "bob was here"}},
        {"spec": {"interval_ms": 120_000}},
        {"overlap": "allow_all"},
        {"name": "bobs"},
    ):
        error_of(patch(bob, sid, {"version": 1, **change}), 403, "forbidden")
    assert get(alice, sid)["version"] == 1
    # Check order: validation (422) answers before the role (403).
    error_of(patch(bob, sid, {"version": 1, "spec": {"cron": "99 * * * *"}}), 422, "invalid_cron")

    by_creator = patch(alice, sid, {"version": 1, "input": {"message": "new"}})
    assert by_creator.status_code == 200, by_creator.text
    assert (by_creator.json()["version"], by_creator.json()["revision"]) == (2, 2)

    by_admin = patch(admin, sid, {"version": 2, "spec": {"interval_ms": 120_000}})
    assert by_admin.status_code == 200, by_admin.text
    edited = by_admin.json()
    assert (edited["version"], edited["revision"]) == (3, 3)
    assert edited["spec"]["interval_ms"] == 120_000
    assert edited["created_by"] == "alice", "an admin's edit keeps the creator"

    workflow = patch(alice, sid, {"version": 3, "workflow": "score", "input": {"score": 1}})
    assert workflow.status_code == 200, workflow.text
    assert (workflow.json()["version"], workflow.json()["revision"]) == (4, 4)
    assert workflow.json()["workflow"] == "score"

    # Fields other than spec, workflow and input are edits without a new revision.
    policy = patch(alice, sid, {"version": 4, "overlap": "buffer_one", "max_catch_up": 3})
    assert policy.status_code == 200, policy.text
    assert (policy.json()["version"], policy.json()["revision"]) == (5, 4)
    assert (policy.json()["overlap"], policy.json()["max_catch_up"]) == ("buffer_one", 3)
    assert instant(policy.json()["updated_at"]) >= instant(created["updated_at"])


def test_an_edit_is_validated_like_a_create(alice: Api) -> None:
    sid = create(alice, interval_body())["id"]
    error_of(patch(alice, sid, {"version": 1, "spec": {"cron": "99 * * * *"}}), 422, "invalid_cron")
    error_of(
        patch(alice, sid, {"version": 1, "spec": {"interval_ms": 10}}), 422, "interval_too_short"
    )
    validation_errors(patch(alice, sid, {"version": 1, "max_catch_up": 0}))
    validation_errors(patch(alice, sid, {"version": 1, "max_catch_up": 101}))
    validation_errors(patch(alice, sid, {"version": 1, "created_by": "mallory"}))
    error_of(patch(alice, sid, {"version": 1, "input": {"x": 1}}), 422, "input_invalid")
    assert get(alice, sid)["version"] == 1


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_pause_and_resume_by_any_member(alice: Api, bob: Api, admin: Api, action: str) -> None:
    enabled = action == "resume"
    created = create(alice, interval_body(enabled=not enabled))
    sid = created["id"]
    response = bob.post(f"/schedules/{sid}/{action}", {"version": 1})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["enabled"] is enabled
    assert (body["version"], body["revision"]) == (2, 1)
    assert body["created_by"] == "alice"
    back = admin.post(f"/schedules/{sid}/{'pause' if enabled else 'resume'}", {"version": 2})
    assert back.status_code == 200, back.text
    assert back.json()["enabled"] is not enabled
    assert back.json()["version"] == 3
    # PATCH with only ``enabled`` is a pause/resume too, not a content edit.
    toggled = patch(bob, sid, {"version": 3, "enabled": enabled})
    assert toggled.status_code == 200, toggled.text
    assert toggled.json()["enabled"] is enabled


def test_a_viewer_may_not_pause(system: bootstrap.Punctual, client: TestClient, alice: Api) -> None:
    viewer = member_api(system, client, "acme", "vera", Role.VIEWER)
    sid = create(alice, interval_body())["id"]
    error_of(viewer.post(f"/schedules/{sid}/pause", {"version": 1}), 403, "forbidden")
    assert get(viewer, sid)["enabled"] is True


def test_stale_version_is_a_conflict_with_the_current_version(alice: Api) -> None:
    sid = create(alice, interval_body())["id"]
    assert alice.post(f"/schedules/{sid}/pause", {"version": 1}).status_code == 200
    for response in (
        patch(alice, sid, {"version": 1, "input": {"message": "late"}}),
        alice.post(f"/schedules/{sid}/resume", {"version": 1}),
        alice.post(f"/schedules/{sid}/pause", {"version": 1}),
        alice.delete(f"/schedules/{sid}", version=1),
        patch(alice, sid, {"version": 7, "max_catch_up": 3}),
    ):
        details = error_of(response, 409, "version_conflict")
        assert details.get("current_version") == 2, details
    assert get(alice, sid)["version"] == 2


def test_version_is_required_on_mutations(alice: Api) -> None:
    sid = create(alice, interval_body())["id"]
    validation_errors(alice.post(f"/schedules/{sid}/pause", {}))
    validation_errors(patch(alice, sid, {"max_catch_up": 3}))
    validation_errors(alice.delete(f"/schedules/{sid}"))
    validation_errors(alice.delete(f"/schedules/{sid}", version="x"))


# --------------------------------------------------------------------------- occurrences


def test_occurrences_list_filters_by_state_and_pages(
    system: bootstrap.Punctual, alice: Api
) -> None:
    schedule, first = behind(system, alice, "catching-up", fires=20, max_catch_up=4)
    sid = schedule["id"]
    for _ in range(3):
        generate(system.services, 100)
    everything = occurrences(alice, sid, limit=5)
    assert len(everything) == 12
    for item in everything:
        assert set(item) >= OCCURRENCE_FIELDS, OCCURRENCE_FIELDS - set(item)
        assert item["schedule_id"] == sid
        assert item["state"] == "scheduled"
        assert item["run_id"] is None, "the run id is revealed only after dispatch"
        assert item["version"] == 1 and item["attempts"] == 0 and item["last_error"] is None
        assert RFC3339_UTC.match(item["occurrence_at"]) and RFC3339_UTC.match(item["scheduled_at"])
        assert instant(item["scheduled_at"]) >= instant(item["occurrence_at"])
        assert item["dst_adjustment"] is None
    assert [item["occurrence_at"] for item in everything] == [
        z(first + timedelta(minutes=i)) for i in reversed(range(12))
    ]
    assert len({item["id"] for item in everything}) == 12

    one_page = alice.get(f"/schedules/{sid}/occurrences", limit=100).json()
    assert one_page["next_cursor"] is None and len(one_page["items"]) == 12
    victim = everything[3]
    canceled = alice.post(f"/schedules/{sid}/occurrences/{victim['id']}/cancel", {"version": 1})
    assert canceled.status_code == 200, canceled.text
    assert [o["id"] for o in occurrences(alice, sid, state="canceled")] == [victim["id"]]
    assert len(occurrences(alice, sid, state="scheduled", limit=2)) == 11
    assert occurrences(alice, sid, state="dispatched") == []
    validation_errors(alice.get(f"/schedules/{sid}/occurrences", state="bogus"))
    validation_errors(alice.get(f"/schedules/{sid}/occurrences", limit=0))
    error_of(alice.get(f"/schedules/{sid}/occurrences", cursor="!!"), 422, "invalid_cursor")
    error_of(alice.get("/schedules/sch_missing/occurrences"), 404, "not_found")


def test_missed_downtime_is_one_skipped_item_with_a_range(
    system: bootstrap.Punctual, alice: Api
) -> None:
    schedule, first = behind(system, alice, "skipping", fires=10, missed="skip")
    generate(system.services, 100)
    items = occurrences(alice, schedule["id"])
    skipped = [o for o in items if o["state"] == "skipped"]
    assert len(skipped) == 1, items
    (missed,) = skipped
    assert missed["reason"] == "missed"
    assert missed["range"] == {
        "first": z(first),
        "last": z(first + timedelta(minutes=9)),
        "count": 10,
    }
    assert missed["occurrence_at"] == z(first)
    rest = [o for o in items if o["state"] != "skipped"]
    assert [o["occurrence_at"] for o in rest] == [z(first + timedelta(minutes=10))]
    assert "range" not in rest[0] or rest[0]["range"] is None


def test_cancel_one_unstarted_occurrence(system: bootstrap.Punctual, alice: Api, bob: Api) -> None:
    schedule, _ = behind(system, alice, "cancel-one", fires=3, max_catch_up=3)
    sid = schedule["id"]
    generate(system.services, 100)
    first, second, *_ = occurrences(alice, sid)
    path = f"/schedules/{sid}/occurrences/{first['id']}/cancel"

    details = error_of(bob.post(path, {"version": 5}), 409, "version_conflict")
    assert details.get("current_version") == 1
    response = bob.post(path, {"version": 1})  # any member may cancel an occurrence
    assert response.status_code == 200, response.text
    canceled = response.json()
    assert set(canceled) >= OCCURRENCE_FIELDS
    assert (canceled["id"], canceled["state"], canceled["version"]) == (first["id"], "canceled", 2)
    assert canceled["occurrence_at"] == first["occurrence_at"]

    error_of(bob.post(path, {"version": 2}), 409, "invalid_state")
    error_of(bob.post(path, {"version": 1}), 409, "invalid_state")
    untouched = [o for o in occurrences(alice, sid) if o["id"] == second["id"]]
    assert untouched[0]["state"] == "scheduled"
    error_of(
        bob.post(f"/schedules/{sid}/occurrences/occ_missing/cancel", {"version": 1}),
        404,
        "not_found",
    )
    validation_errors(bob.post(f"/schedules/{sid}/occurrences/{second['id']}/cancel", {}))
    # An occurrence is reached through its own schedule only.
    other = create(alice, interval_body("other"))
    error_of(
        bob.post(f"/schedules/{other['id']}/occurrences/{second['id']}/cancel", {"version": 1}),
        404,
        "not_found",
    )


def test_delete_cancels_unstarted_occurrences_and_keeps_history(
    system: bootstrap.Punctual, alice: Api, bob: Api
) -> None:
    schedule, _ = behind(system, alice, "doomed", fires=4, max_catch_up=4)
    sid = schedule["id"]
    generate(system.services, 100)
    before = occurrences(alice, sid)
    assert len(before) == 5
    first_path = f"/schedules/{sid}/occurrences/{before[0]['id']}/cancel"
    assert alice.post(first_path, {"version": 1}).status_code == 200

    error_of(bob.delete(f"/schedules/{sid}", version=1), 403, "forbidden")  # not the creator
    error_of(alice.delete(f"/schedules/{sid}", version=9), 409, "version_conflict")
    deleted = alice.delete(f"/schedules/{sid}", version=1)
    assert deleted.status_code == 204, deleted.text
    assert deleted.content == b""

    error_of(alice.get(f"/schedules/{sid}"), 404, "not_found")
    assert sid not in [s["id"] for s in alice.get("/schedules").json()["items"]]
    error_of(alice.post(f"/schedules/{sid}/pause", {"version": 2}), 404, "not_found")
    error_of(alice.delete(f"/schedules/{sid}", version=2), 404, "not_found")

    after = occurrences(alice, sid)
    assert [o["id"] for o in after] == [o["id"] for o in before], "history stays listable"
    assert after[0]["state"] == "canceled" and after[0]["reason"] != "schedule_deleted"
    for item in after[1:]:
        assert (item["state"], item["reason"]) == ("canceled", "schedule_deleted"), item
    assert [o["id"] for o in occurrences(alice, sid, state="canceled")] == [o["id"] for o in after]
    # Nothing of a deleted schedule is generated any more.
    assert generate(system.services, 100).generated == 0


# --------------------------------------------------------------------------- preview


def preview(api: Api, **params: Any) -> list[dict[str, Any]]:
    return preview_body(api, **params)["items"]


def preview_body(api: Api, **params: Any) -> dict[str, Any]:
    response = api.get("/schedule-preview", **params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"items", "skipped"}, body
    items: list[dict[str, Any]] = body["items"]
    for item in items:
        assert set(item) == PREVIEW_FIELDS, item
        assert RFC3339_UTC.match(item["fire_at"]), item
    return body


def rows(items: list[dict[str, Any]]) -> list[tuple[str, str, str, str | None]]:
    return [(i["fire_at"], i["local"], i["nominal"], i["dst_adjustment"]) for i in items]


def test_preview_berlin_spring_gap(alice: Api) -> None:
    items = preview(
        alice,
        cron="30 2 * * *",
        time_zone="Europe/Berlin",
        **{"from": "2024-03-30T00:00:00Z"},
        count=3,
    )
    assert rows(items) == [
        ("2024-03-30T01:30:00.000Z", "2024-03-30T02:30:00+01:00", "2024-03-30T02:30:00", None),
        (
            "2024-03-31T01:00:00.000Z",
            "2024-03-31T03:00:00+02:00",
            "2024-03-31T02:30:00",
            "gap_shifted",
        ),
        ("2024-04-01T00:30:00.000Z", "2024-04-01T02:30:00+02:00", "2024-04-01T02:30:00", None),
    ]
    body = preview_body(
        alice,
        cron="30 2 * * *",
        time_zone="Europe/Berlin",
        dst_gap="skip",
        **{"from": "2024-03-30T00:00:00Z"},
        count=2,
    )
    assert [i["fire_at"] for i in body["items"]] == [
        "2024-03-30T01:30:00.000Z",
        "2024-04-01T00:30:00.000Z",
    ]
    # The night's 02:30 that did not exist is shown as the decision it is.
    assert body["skipped"] == [
        {
            "at": "2024-03-31T01:00:00.000Z",
            "reason": "dst_gap",
            "detail": None,
            "spec_indexes": [0],
            "until": None,
        }
    ]


AUTUMN_BERLIN: dict[str | None, list[tuple[str, str, str | None]]] = {
    None: [("2024-10-27T00:30:00.000Z", "2024-10-27T02:30:00+02:00", None)],
    "first": [("2024-10-27T00:30:00.000Z", "2024-10-27T02:30:00+02:00", None)],
    "last": [("2024-10-27T01:30:00.000Z", "2024-10-27T02:30:00+01:00", "overlap_second")],
    "both": [
        ("2024-10-27T00:30:00.000Z", "2024-10-27T02:30:00+02:00", None),
        ("2024-10-27T01:30:00.000Z", "2024-10-27T02:30:00+01:00", "overlap_second"),
    ],
}


def test_preview_berlin_autumn_overlap(alice: Api) -> None:
    for overlap, expected in AUTUMN_BERLIN.items():
        params: dict[str, Any] = {"cron": "30 2 * * *", "time_zone": "Europe/Berlin"}
        if overlap:
            params["dst_overlap"] = overlap
        items = preview(
            alice, **params, **{"from": "2024-10-26T12:00:00Z"}, count=len(expected) + 1
        )
        assert [(i["fire_at"], i["local"], i["dst_adjustment"]) for i in items[:-1]] == expected
        assert all(i["nominal"] == "2024-10-27T02:30:00" for i in items[:-1])
        assert items[-1]["fire_at"] == "2024-10-28T01:30:00.000Z"


def test_preview_new_york_transitions(alice: Api) -> None:
    spring = preview(
        alice,
        cron="30 2 * * *",
        time_zone="America/New_York",
        **{"from": "2024-03-10T00:00:00Z"},
        count=1,
    )
    assert rows(spring) == [
        (
            "2024-03-10T07:00:00.000Z",
            "2024-03-10T03:00:00-04:00",
            "2024-03-10T02:30:00",
            "gap_shifted",
        )
    ]
    autumn = preview(
        alice,
        cron="30 * * * *",
        time_zone="America/New_York",
        **{"from": "2024-11-03T05:00:00Z"},
        count=3,
    )
    assert rows(autumn) == [
        ("2024-11-03T05:30:00.000Z", "2024-11-03T01:30:00-04:00", "2024-11-03T01:30:00", None),
        (
            "2024-11-03T06:30:00.000Z",
            "2024-11-03T01:30:00-05:00",
            "2024-11-03T01:30:00",
            "overlap_second",
        ),
        ("2024-11-03T07:30:00.000Z", "2024-11-03T02:30:00-05:00", "2024-11-03T02:30:00", None),
    ]


def test_preview_interval_ignores_dst(alice: Api) -> None:
    items = preview(
        alice,
        interval_ms=3_600_000,
        starts_at="2024-10-26T22:00:00Z",
        **{"from": "2024-10-26T22:00:00Z"},
        count=4,
    )
    assert [i["fire_at"] for i in items] == [
        "2024-10-26T23:00:00.000Z",
        "2024-10-27T00:00:00.000Z",
        "2024-10-27T01:00:00.000Z",
        "2024-10-27T02:00:00.000Z",
    ]
    assert all(i["dst_adjustment"] is None for i in items)
    for item in items:
        assert datetime.fromisoformat(item["local"]) == instant(item["fire_at"])


def test_preview_count_and_from(alice: Api) -> None:
    before = datetime.now(UTC)
    default = preview(alice, cron="* * * * *")
    assert len(default) == 10
    assert all(instant(i["fire_at"]) > before for i in default), "from defaults to now"
    assert len(preview(alice, cron="* * * * *", count=1)) == 1
    assert len(preview(alice, cron="* * * * *", count=100)) == 100
    for bad in ("0", "101", "-1", "ten"):
        validation_errors(alice.get("/schedule-preview", cron="* * * * *", count=bad))
    strictly_after = preview(alice, cron="0 * * * *", **{"from": "2030-01-01T10:00:00Z"}, count=1)
    assert strictly_after[0]["fire_at"] == "2030-01-01T11:00:00.000Z"
    validation_errors(alice.get("/schedule-preview", cron="* * * * *", **{"from": "yesterday"}))
    validation_errors(
        alice.get("/schedule-preview", cron="* * * * *", **{"from": "2030-01-01T10:00:00"})
    )
    error_of(alice.get("/schedule-preview", cron="61 * * * *"), 422, "invalid_cron")
    error_of(
        alice.get("/schedule-preview", cron="* * * * *", time_zone="Nowhere/Land"),
        422,
        "unknown_time_zone",
    )
    error_of(alice.get("/schedule-preview", interval_ms="10"), 422, "interval_too_short")
    validation_errors(alice.get("/schedule-preview"))


def test_preview_needs_no_idempotency_key_and_a_viewer_may_use_it(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    viewer = member_api(system, client, "acme", "vera", Role.VIEWER)
    assert len(preview(viewer, cron="@daily", count=2)) == 2
    anonymous = client.get("/v1/tenants/acme/schedule-preview", params={"cron": "@daily"})
    error_of(anonymous, 401, "unauthenticated")


# --------------------------------------------------------------------------- tenants and quota


def test_another_tenants_schedule_is_not_found(
    system: bootstrap.Punctual, client: TestClient, alice: Api
) -> None:
    schedule, _ = behind(system, alice, "private", fires=2)
    sid = schedule["id"]
    generate(system.services, 100)
    occurrence = occurrences(alice, sid)[0]
    for role in (Role.ADMIN, Role.MEMBER):
        other = member_api(system, client, "globex", f"mallory-{role}", role)
        error_of(other.get(f"/schedules/{sid}"), 404, "not_found")
        error_of(patch(other, sid, {"version": 1, "max_catch_up": 3}), 404, "not_found")
        error_of(other.post(f"/schedules/{sid}/pause", {"version": 1}), 404, "not_found")
        error_of(other.post(f"/schedules/{sid}/resume", {"version": 1}), 404, "not_found")
        error_of(other.delete(f"/schedules/{sid}", version=1), 404, "not_found")
        error_of(other.get(f"/schedules/{sid}/occurrences"), 404, "not_found")
        error_of(
            other.post(f"/schedules/{sid}/occurrences/{occurrence['id']}/cancel", {"version": 1}),
            404,
            "not_found",
        )
        assert other.get("/schedules").json()["items"] == []
        # A principal of tenant globex naming tenant acme in the path is not let in either.
        intruder = Api(client, other.token, "acme")
        assert intruder.get(f"/schedules/{sid}").status_code in (401, 403, 404)
    fetched = get(alice, sid)
    assert (fetched["version"], fetched["enabled"]) == (1, True)
    assert occurrences(alice, sid)[0]["state"] == "scheduled"


def test_max_schedules_quota(database_url: str, tmp_path: Path) -> None:
    settings = make_settings(database_url, tmp_path, tenant_defaults={"max_schedules": 2})
    system = bootstrap.build(settings)
    try:
        register_demo(system)
        with in_process(system) as client:
            api = member_api(system, client, "acme", "alice", Role.MEMBER)
            first = create(api, interval_body("one"))
            create(api, interval_body("two", enabled=False))  # paused ones count too
            details = error_of(
                api.post("/schedules", interval_body("three")), 429, "quota_exceeded"
            )
            assert details.get("limit") == 2
            # Another tenant has its own allowance.
            other = member_api(system, client, "globex", "gina", Role.MEMBER)
            create(other, interval_body("one"))
            # A deleted schedule no longer counts.
            assert api.delete(f"/schedules/{first['id']}", version=1).status_code == 204
            create(api, interval_body("three"))
    finally:
        system.close()
