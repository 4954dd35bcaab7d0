"""Schedule controls over HTTP on both stores (API.md "Schedule fields and controls", RS-9).

Trigger, backfill, the end, count and jitter fields, and the upsert by name, each with its
status, error code and details, through the in-process app; the names with ``/`` also
through a real uvicorn on 127.0.0.1, whose path decoding is the one clients meet. Every
answer is parsed by its model in ``punctual.resources`` with no field left undeclared.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient

from punctual import bootstrap, resources
from punctual.client import AsyncPunctualClient, PunctualClient
from punctual.domain.permissions import Role
from punctual.ports.records import CursorMove
from punctual.usecases.recurring.generation import generate
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.usecases.tenancy import identity
from tests.api.test_openapi import exactly
from tests.support.api import Api, in_process, live_worker, member_api
from tests.support.server import serving

MINUTE = timedelta(minutes=1)
DECIDED_WITHIN_SECONDS = 40.0
"""How long a mutation is resent while it answers 202: it never hangs, however slow."""
REAL_SERVER_TIMEOUT_SECONDS = 30.0
"""Per request over the real server: a request may take the bounded wait (10 s in the
tests) and more on a loaded machine before it answers, 201 or 202; httpx's default of
5 s would turn a slow answer into a failure. Only a hang reaches this."""
NIGHTLY = {
    "workflow": "echo",
    "input": {"message": "nightly"},
    "spec": {"cron": "30 2 * * *", "time_zone": "Europe/Berlin"},
    "overlap": "skip",
    "missed": "catch_up",
    "source": "deploy/schedules.toml",
}


def z(value: datetime) -> str:
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def code_of(response: httpx.Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


def put(api: Api, name: str, body: Any, key: str | None = None, **params: Any) -> httpx.Response:
    return api.put(f"/schedules/by-name/{quote(name, safe='')}", body, key=key, **params)


def patch(api: Api, suffix: str, body: Any) -> httpx.Response:
    return api.patch(suffix, body)


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    live_worker(system)
    with in_process(system) as test_client:
        yield test_client


@pytest.fixture
def alice(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, "acme", "alice", Role.MEMBER)


@pytest.fixture
def bob(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, "acme", "bob", Role.MEMBER)


@pytest.fixture
def viewer(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, "acme", "vera", Role.VIEWER)


def every_minute(api: Api, name: str, **fields: Any) -> dict[str, Any]:
    body = {
        "name": name,
        "workflow": "echo",
        "input": {"message": "tick"},
        "spec": {"interval_ms": 60_000},
        "overlap": "allow_all",
        "missed": "skip",
        **fields,
    }
    response = api.post("/schedules", body)
    assert response.status_code == 201, response.text
    schedule: dict[str, Any] = exactly(resources.Schedule, response.json()).raw
    return schedule


# --------------------------------------------------------------------------- trigger


def test_trigger_answers_201_with_the_occurrence(
    system: bootstrap.Punctual, alice: Api, bob: Api
) -> None:
    schedule = every_minute(alice, "triggered")
    before = datetime.now(UTC)
    response = bob.post(f"/schedules/{schedule['id']}/trigger", key="trig-1")
    assert response.status_code == 201, response.text
    occurrence = exactly(resources.Occurrence, response.json())
    assert occurrence.origin == "trigger"
    assert before - timedelta(milliseconds=1) <= occurrence.occurrence_at <= datetime.now(UTC)
    replay = bob.post(f"/schedules/{schedule['id']}/trigger", key="trig-1")
    assert (replay.status_code, replay.json()) == (201, response.json())
    assert alice.get(f"/schedules/{schedule['id']}").json()["version"] == schedule["version"]

    dispatch_due(system.services, "runner-api", 10)
    run_id = alice.get(f"/schedules/{schedule['id']}/occurrences").json()["items"][0]["run_id"]
    run = exactly(resources.Run, alice.get(f"/runs/{run_id}").json())
    assert run.origin.occurrence_origin == "trigger"


def test_trigger_takes_an_overlap_policy_and_refuses_others(alice: Api) -> None:
    sid = every_minute(alice, "named")["id"]
    named = alice.post(f"/schedules/{sid}/trigger", {"overlap": "allow_all"})
    assert named.status_code == 201, named.text
    wrong = alice.post(f"/schedules/{sid}/trigger", {"overlap": "sometimes"})
    assert (wrong.status_code, code_of(wrong)) == (422, "validation_error")
    extra = alice.post(f"/schedules/{sid}/trigger", {"version": 1})
    assert (extra.status_code, code_of(extra)) == (422, "validation_error")


def test_trigger_needs_a_key_a_member_and_an_existing_schedule(
    alice: Api, viewer: Api, client: TestClient
) -> None:
    sid = every_minute(alice, "guarded")["id"]
    forbidden = viewer.post(f"/schedules/{sid}/trigger")
    assert (forbidden.status_code, code_of(forbidden)) == (403, "forbidden")
    missing = alice.post("/schedules/sch_none/trigger")
    assert (missing.status_code, code_of(missing)) == (404, "not_found")
    unkeyed = client.post(alice.path(f"/schedules/{sid}/trigger"), headers=alice.headers())
    assert (unkeyed.status_code, code_of(unkeyed)) == (400, "idempotency_key_required")


# --------------------------------------------------------------------------- backfill


def test_backfill_answers_the_generated_and_existing_occurrences(alice: Api) -> None:
    first = datetime.now(UTC).replace(microsecond=0) - 10 * MINUTE
    sid = every_minute(alice, "backfilled", spec={"interval_ms": 60_000, "starts_at": z(first)})[
        "id"
    ]
    body = {"from": z(first - MINUTE), "to": z(first + 4 * MINUTE)}
    response = alice.post(f"/schedules/{sid}/backfill", body)
    assert response.status_code == 200, response.text
    result = exactly(resources.BackfillResult, response.json())
    assert (result.generated, result.existing) == (5, 0)
    assert [item.occurrence_at for item in result.items] == [first + n * MINUTE for n in range(5)]
    assert {item.origin for item in result.items} == {"backfill"}
    assert [item.state for item in result.items].count("scheduled") <= 1, "one after another"

    again = exactly(resources.BackfillResult, alice.post(f"/schedules/{sid}/backfill", body).json())
    assert (again.generated, again.existing) == (0, 5)
    together = alice.post(
        f"/schedules/{sid}/backfill",
        {"from": z(first + 4 * MINUTE), "to": z(first + 6 * MINUTE), "overlap": "allow_all"},
    )
    assert {item["state"] for item in together.json()["items"]} == {"scheduled"}


def test_backfill_refusals(alice: Api, bob: Api) -> None:
    now = datetime.now(UTC)
    first = now - 2000 * MINUTE
    sid = every_minute(alice, "refused", spec={"interval_ms": 60_000, "starts_at": z(first)})["id"]
    path = f"/schedules/{sid}/backfill"
    cases = [
        ({"from": z(now - MINUTE), "to": z(now - MINUTE)}, "backfill_range_invalid"),
        ({"from": z(now - MINUTE), "to": z(now + MINUTE)}, "backfill_range_invalid"),
        ({"from": "2026-01-01T00:00:00", "to": z(now)}, "backfill_range_invalid"),
        ({"from": z(now - 1500 * MINUTE), "to": z(now - 10 * MINUTE)}, "backfill_too_large"),
        ({"from": z(now - MINUTE)}, "validation_error"),
    ]
    for body, code in cases:
        response = alice.post(path, body)
        assert (response.status_code, code_of(response)) == (422, code), body
    assert response.json()["error"]["details"]["errors"]
    too_large = alice.post(path, cases[3][0]).json()["error"]
    assert too_large["details"]["limit"] == 1000
    forbidden = bob.post(path, {"from": z(now - 5 * MINUTE), "to": z(now)})
    assert (forbidden.status_code, code_of(forbidden)) == (403, "forbidden")
    assert alice.get(f"/schedules/{sid}/occurrences").json()["items"] == []


def test_backfill_over_the_pending_start_quota_is_429(
    database_url: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    from tests.conftest import make_settings

    settings = make_settings(database_url, tmp_path, tenant_defaults={"max_pending_starts": 2})
    system = bootstrap.build(settings)
    request.addfinalizer(system.close)
    live_worker(system)
    with in_process(system) as client:
        api = member_api(system, client)
        first = datetime.now(UTC) - 10 * MINUTE
        sid = every_minute(api, "quota", spec={"interval_ms": 60_000, "starts_at": z(first)})["id"]
        response = api.post(
            f"/schedules/{sid}/backfill", {"from": z(first - MINUTE), "to": z(first + 2 * MINUTE)}
        )
        assert (response.status_code, code_of(response)) == (429, "quota_exceeded")
        details = response.json()["error"]["details"]
        assert (details["limit"], details["count"], details["requested"]) == (2, 0, 3)


# --------------------------------------------------------------------------- end, count, jitter


def test_end_count_and_jitter_fields_and_their_refusals(alice: Api) -> None:
    end = datetime.now(UTC) + timedelta(days=2)
    created = every_minute(alice, "bounded", end_at=z(end), max_occurrences=3, jitter_ms=5000)
    assert (created["state"], created["end_at"], created["remaining_occurrences"]) == (
        "active",
        z(end),
        3,
    )
    assert (created["max_occurrences"], created["jitter_ms"]) == (3, 5000)
    assert len(created["next_fire_times"]) == 3

    past = alice.post(
        "/schedules",
        {**_body("late"), "end_at": z(datetime.now(UTC) - MINUTE)},
    )
    assert (past.status_code, code_of(past)) == (422, "end_at_in_past")
    jitter = alice.post("/schedules", {**_body("jumpy"), "jitter_ms": 60_000})
    assert (jitter.status_code, code_of(jitter)) == (422, "jitter_too_large")
    assert jitter.json()["error"]["details"]["max_jitter_ms"] == 59_999
    zero = alice.post("/schedules", {**_body("none"), "max_occurrences": 0})
    assert (zero.status_code, code_of(zero)) == (422, "validation_error")

    lifted = patch(
        alice,
        f"/schedules/{created['id']}",
        {"version": created["version"], "end_at": None, "max_occurrences": None},
    )
    assert lifted.status_code == 200, lifted.text
    view = exactly(resources.Schedule, lifted.json())
    assert (view.end_at, view.max_occurrences, view.remaining_occurrences) == (None, None, None)


def test_an_ended_schedule_reads_ended_and_resume_is_409(
    system: bootstrap.Punctual, alice: Api
) -> None:
    first = datetime.now(UTC).replace(microsecond=0) - 10 * MINUTE
    created = every_minute(
        alice, "done", spec={"interval_ms": 60_000, "starts_at": z(first)}, max_occurrences=2
    )
    with system.store.transaction() as tx:  # as after downtime: ten fires behind
        tx.schedules.move_cursors([CursorMove(created["id"], first - MINUTE, first)])
    generate(system.services, 100)  # the missed range counts 2 fires: the end
    ended = alice.get(f"/schedules/{created['id']}").json()
    assert (ended["state"], ended["remaining_occurrences"], ended["next_fire_times"]) == (
        "ended",
        0,
        [],
    )
    paused = alice.post(f"/schedules/{created['id']}/pause", {"version": ended["version"]})
    resumed = alice.post(f"/schedules/{created['id']}/resume", {"version": ended["version"] + 1})
    assert paused.status_code == 200
    assert (resumed.status_code, code_of(resumed)) == (409, "invalid_state")
    extended = patch(
        alice,
        f"/schedules/{created['id']}",
        {"version": ended["version"] + 1, "max_occurrences": 5, "enabled": True},
    )
    assert extended.json()["state"] == "active", extended.text


def _body(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "workflow": "echo",
        "input": {"message": "tick"},
        "spec": {"interval_ms": 60_000},
        "overlap": "skip",
        "missed": "skip",
    }


# --------------------------------------------------------------------------- by name


def test_put_by_name_creates_leaves_alone_and_updates(alice: Api) -> None:
    created = put(alice, "team/nightly", NIGHTLY)
    assert created.status_code == 201, created.text
    first = exactly(resources.ScheduleUpsert, created.json())
    assert (first.name, first.changed, first.source) == ("team/nightly", True, NIGHTLY["source"])

    same = put(alice, "team/nightly", NIGHTLY)
    assert same.status_code == 200
    unchanged = exactly(resources.ScheduleUpsert, same.json())
    assert (unchanged.changed, unchanged.version) == (False, first.version)

    edited = {**NIGHTLY, "input": {"message": "changed"}}
    plan = put(alice, "team/nightly", edited, dry_run="true")
    assert plan.status_code == 200
    assert exactly(resources.UpsertPlan, plan.json()).raw == {
        "action": "update",
        "changed_fields": ["input"],
    }
    updated = exactly(resources.ScheduleUpsert, put(alice, "team/nightly", edited).json())
    assert (updated.changed, updated.version, updated.revision) == (
        True,
        first.version + 1,
        first.revision + 1,
    )
    read = alice.get(f"/schedules/by-name/{quote('team/nightly', safe='')}")
    assert read.status_code == 200
    assert exactly(resources.Schedule, read.json()).id == first.id
    every_minute(alice, "by-hand")
    assert put(alice, "other/file", {**NIGHTLY, "source": "other.toml"}).status_code == 201
    listed = alice.get("/schedules", source=NIGHTLY["source"]).json()["items"]
    assert [item["id"] for item in listed] == [first.id]
    assert len(alice.get("/schedules").json()["items"]) == 3


def test_put_by_name_dry_run_creates_nothing_and_needs_no_key(
    alice: Api, client: TestClient
) -> None:
    path = alice.path("/schedules/by-name/fresh")
    plan = client.put(path, headers=alice.headers(), json=NIGHTLY, params={"dry_run": "true"})
    assert plan.json() == {"action": "create", "changed_fields": []}, plan.text
    assert alice.get("/schedules/by-name/fresh").status_code == 404
    bad = client.put(path, headers=alice.headers(), json=NIGHTLY, params={"dry_run": "yes"})
    assert (bad.status_code, code_of(bad)) == (422, "validation_error")


def test_put_by_name_refusals(alice: Api, bob: Api) -> None:
    created = put(alice, "owned", NIGHTLY).json()
    stale = put(alice, "owned", {**NIGHTLY, "version": created["version"] + 1})
    assert (stale.status_code, code_of(stale)) == (409, "version_conflict")
    assert stale.json()["error"]["details"]["current_version"] == created["version"]
    other = put(bob, "owned", {**NIGHTLY, "input": {"message": "bob's"}})
    assert (other.status_code, code_of(other)) == (403, "forbidden")
    renamed = put(alice, "owned", {**NIGHTLY, "name": "other"})
    assert (renamed.status_code, code_of(renamed)) == (422, "validation_error")
    no_policy = put(alice, "fresh", {k: v for k, v in NIGHTLY.items() if k != "overlap"})
    assert (no_policy.status_code, code_of(no_policy)) == (422, "policy_required")
    owned_field = put(alice, "fresh", {**NIGHTLY, "task_queue": "q"})
    assert (owned_field.status_code, code_of(owned_field)) == (422, "host_owned_field")


def test_an_apply_never_re_enables_a_paused_schedule(alice: Api) -> None:
    created = put(alice, "paused", NIGHTLY).json()
    alice.post(f"/schedules/{created['id']}/pause", {"version": created["version"]})
    applied = put(alice, "paused", NIGHTLY).json()
    assert (applied["changed"], applied["enabled"], applied["state"]) == (False, False, "paused")


def test_names_with_slashes_over_a_real_server(system: bootstrap.Punctual) -> None:
    live_worker(system)
    with (
        serving(system.http_app()) as url,
        httpx.Client(base_url=url, timeout=REAL_SERVER_TIMEOUT_SECONDS) as http,
    ):
        api = member_api(system, http)
        for name in ("team/a", "team/a/occurrences", "odd %2F name"):
            created = put(api, name, NIGHTLY)
            assert created.status_code == 201, (name, created.text)
            encoded = api.get(f"/schedules/by-name/{quote(name, safe='')}")
            assert (encoded.status_code, encoded.json()["name"]) == (200, name)
        plain = api.get("/schedules/by-name/team/a")
        assert plain.json()["name"] == "team/a"
        occurrences = api.get("/schedules/by-name/team/a/occurrences")
        assert occurrences.json()["name"] == "team/a/occurrences"
        dispatch_due(system.services, "runner-api", 10)


def test_the_typed_clients_drive_the_controls(system: bootstrap.Punctual) -> None:
    live_worker(system)
    token = identity.ensure_member_token(system.services, "acme", "alice", Role.MEMBER).token
    first = datetime.now(UTC).replace(microsecond=0) - 10 * MINUTE
    body = {**NIGHTLY, "spec": {"interval_ms": 60_000, "starts_at": first}}
    with serving(system.http_app()) as url, PunctualClient(url, token, "acme") as client:
        assert client.plan_schedule_by_name("ops/sync", body).action == "create"
        created = client.put_schedule_by_name("ops/sync", body, idempotency_key="put-1")
        assert (created.changed, created.idempotency_key) == (True, "put-1")
        assert client.put_schedule_by_name("ops/sync", body).changed is False
        assert client.get_schedule_by_name("ops/sync").id == created.id
        client.put_schedule_by_name("ops/other", {**body, "source": "other.toml"})
        assert [s.id for s in client.list_schedules(source=NIGHTLY["source"]).items] == [created.id]
        triggered = client.trigger_schedule(created.id, overlap="allow_all")
        assert triggered.origin == "trigger"
        filled = client.backfill_schedule(created.id, after=first - MINUTE, to=first + MINUTE)
        assert (filled.generated, filled.existing) == (2, 0)

        async def asynchronously() -> None:
            async with AsyncPunctualClient(url, token, "acme") as aclient:
                plan = await aclient.plan_schedule_by_name("ops/sync", {**body, "jitter_ms": 10})
                assert plan.changed_fields == ["jitter_ms"]
                again = await aclient.backfill_schedule(
                    created.id, after=first - MINUTE, to=first + MINUTE
                )
                assert (again.generated, again.existing) == (0, 2)
                assert (await aclient.trigger_schedule(created.id)).origin == "trigger"
                named = await aclient.get_schedule_by_name("ops/sync")
                assert named.source == NIGHTLY["source"]

        asyncio.run(asynchronously())
