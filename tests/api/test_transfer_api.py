"""Ownership transfer of a schedule through HTTP on both stores (API.md "Schedules",
``POST …/schedules/{id}/transfer``; SPEC CR-8).

Only an admin transfers; the new owner must be a member or admin; a stale version is a
conflict. After a transfer the runs carry the new owner's identity, occurrences that were
already waiting included (the real generation and dispatch passes show it), and removing
the previous creator no longer auto-disables the schedule.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import httpx2
import pytest
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.client import ApiError, PunctualClient
from punctual.domain.permissions import Role
from punctual.ports.records import CursorMove
from punctual.usecases.recurring.generation import generate
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.support.api import Api, in_process, live_worker, member_api, register_demo
from tests.support.server import serving

Response = httpx.Response | httpx2.Response

TENANT = "acme"


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    register_demo(system)
    with in_process(system) as test_client:
        yield test_client


@pytest.fixture
def alice(system: bootstrap.Punctual, client: TestClient) -> Api:
    """A member: the schedules' creator."""
    return member_api(system, client, TENANT, "alice", Role.MEMBER)


@pytest.fixture
def bob(system: bootstrap.Punctual, client: TestClient) -> Api:
    """Another member: the new owner."""
    return member_api(system, client, TENANT, "bob", Role.MEMBER)


@pytest.fixture
def admin(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, TENANT, "root", Role.ADMIN)


def schedule_body(name: str = "nightly", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "workflow": "echo",
        "input": {"message": "tick"},
        "spec": {"interval_ms": 60_000},
        "overlap": "allow_all",
        "missed": "catch_up",
    }
    body.update(overrides)
    return body


def create(api: Api, **overrides: Any) -> dict[str, Any]:
    response = api.post("/schedules", schedule_body(**overrides))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def transfer(api: Api, schedule_id: str, body: Any, *, key: str | None = None) -> Response:
    return api.post(f"/schedules/{schedule_id}/transfer", body, key=key or secrets.token_hex(8))


def error_of(response: Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    details: dict[str, Any] = error["details"]
    return details


def get(api: Api, schedule_id: str) -> dict[str, Any]:
    response = api.get(f"/schedules/{schedule_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def remove_member(admin: Api, subject: str) -> None:
    response = admin.delete(f"/members/{subject}")
    assert response.status_code == 204, response.text


def behind(system: bootstrap.Punctual, api: Api, fires: int) -> dict[str, Any]:
    """A 60 s interval schedule whose cursor is put back ``fires`` intervals, as after
    downtime, so the next generation pass writes that many occurrences at once."""
    first = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=fires)
    spec = {"interval_ms": 60_000, "starts_at": first.isoformat().replace("+00:00", "Z")}
    schedule = create(api, name="behind", spec=spec, max_catch_up=fires)
    with system.store.transaction() as tx:
        tx.schedules.move_cursors([CursorMove(schedule["id"], first - timedelta(seconds=1), first)])
    return schedule


def runs_of(api: Api, schedule_id: str) -> list[dict[str, Any]]:
    items = api.get(f"/schedules/{schedule_id}/occurrences", limit=100).json()["items"]
    runs = []
    for occurrence in items:
        if occurrence["run_id"] is not None:
            response = api.get(f"/runs/{occurrence['run_id']}")
            assert response.status_code == 200, response.text
            runs.append(response.json())
    return runs


# --------------------------------------------------------------------------- the transfer


def test_an_admin_transfers_a_schedule_to_another_member(alice: Api, bob: Api, admin: Api) -> None:
    schedule = create(alice)
    response = transfer(admin, schedule["id"], {"version": 1, "to": "bob"})
    assert response.status_code == 200, response.text
    moved = response.json()
    assert moved["created_by"] == "bob"
    assert moved["version"] == 2
    assert moved["revision"] == schedule["revision"], "ownership is not a content change"
    unchanged = {k: v for k, v in schedule.items() if k not in ("created_by", "version")}
    assert {k: v for k, v in moved.items() if k in unchanged and k != "updated_at"} == {
        k: v for k, v in unchanged.items() if k != "updated_at"
    }
    assert get(alice, schedule["id"]) == moved


def test_an_admin_may_be_the_new_owner(alice: Api, admin: Api) -> None:
    schedule = create(alice)
    moved = transfer(admin, schedule["id"], {"version": 1, "to": "root"})
    assert moved.status_code == 200, moved.text
    assert moved.json()["created_by"] == "root"


def test_the_new_owner_may_edit_and_the_previous_one_no_longer(
    alice: Api, bob: Api, admin: Api
) -> None:
    schedule = create(alice)
    transfer(admin, schedule["id"], {"version": 1, "to": "bob"})
    path = f"/schedules/{schedule['id']}"
    edit = {"version": 2, "input": {"message": "bob's now"}}
    refused = alice.client.patch(alice.path(path), headers=alice.headers("e-1"), json=edit)
    error_of(refused, 403, "forbidden")
    allowed = bob.client.patch(bob.path(path), headers=bob.headers("e-2"), json=edit)
    assert allowed.status_code == 200, allowed.text


def test_only_an_admin_transfers(
    system: bootstrap.Punctual, client: TestClient, alice: Api, bob: Api
) -> None:
    schedule = create(alice)
    viewer = member_api(system, client, TENANT, "victor", Role.VIEWER)
    for api in (alice, bob, viewer):
        error_of(transfer(api, schedule["id"], {"version": 1, "to": "bob"}), 403, "forbidden")
    assert get(alice, schedule["id"])["created_by"] == "alice"


def test_the_new_owner_must_be_a_member_who_may_create(
    system: bootstrap.Punctual, client: TestClient, alice: Api, admin: Api
) -> None:
    schedule = create(alice)
    member_api(system, client, TENANT, "victor", Role.VIEWER)
    member_api(system, client, "beta", "bertha", Role.ADMIN)  # a member elsewhere only
    for to, reason in (
        ("nobody", "not_a_member"),
        ("bertha", "not_a_member"),
        ("victor", "cannot_create"),
    ):
        response = transfer(admin, schedule["id"], {"version": 1, "to": to})
        details = error_of(response, 422, "transfer_target_invalid")
        assert details["reason"] == reason
        assert to not in response.json()["error"]["message"]
    assert get(alice, schedule["id"])["created_by"] == "alice"


def test_a_stale_version_is_a_conflict(alice: Api, admin: Api) -> None:
    schedule = create(alice)
    pause = alice.post(f"/schedules/{schedule['id']}/pause", {"version": 1})
    assert pause.status_code == 200, pause.text
    details = error_of(
        transfer(admin, schedule["id"], {"version": 1, "to": "root"}), 409, "version_conflict"
    )
    assert details["current_version"] == 2
    assert get(alice, schedule["id"])["created_by"] == "alice"


def test_the_body_is_validated(alice: Api, admin: Api) -> None:
    schedule = create(alice)
    for body in (
        {},
        {"version": 1},
        {"to": "bob"},
        {"version": 1, "to": ""},
        {"version": "1", "to": "bob"},
        {"version": 1, "to": "bob", "extra": True},
    ):
        error_of(transfer(admin, schedule["id"], body), 422, "validation_error")


def test_unknown_deleted_and_other_tenants_schedules_are_404(
    system: bootstrap.Punctual, client: TestClient, alice: Api, admin: Api
) -> None:
    error_of(transfer(admin, "sch_unknown", {"version": 1, "to": "bob"}), 404, "not_found")
    schedule = create(alice)
    outsider = member_api(system, client, "beta", "bertha", Role.ADMIN)
    error_of(transfer(outsider, schedule["id"], {"version": 1, "to": "bertha"}), 404, "not_found")
    deleted = alice.delete(f"/schedules/{schedule['id']}", version=1)
    assert deleted.status_code == 204, deleted.text
    error_of(transfer(admin, schedule["id"], {"version": 2, "to": "bob"}), 404, "not_found")


def test_a_replay_answers_the_same(alice: Api, bob: Api, admin: Api) -> None:
    schedule = create(alice)
    first = transfer(admin, schedule["id"], {"version": 1, "to": "bob"}, key="move-1")
    second = transfer(admin, schedule["id"], {"version": 1, "to": "bob"}, key="move-1")
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.json() == second.json()
    assert get(alice, schedule["id"])["version"] == 2
    reused = transfer(admin, schedule["id"], {"version": 2, "to": "root"}, key="move-1")
    error_of(reused, 409, "idempotency_key_reused")


# --------------------------------------------------------------------------- what follows


def test_removing_the_previous_creator_no_longer_disables_the_schedule(
    alice: Api, bob: Api, admin: Api
) -> None:
    moved = create(alice, name="moved")
    kept = create(alice, name="kept")
    transfer(admin, moved["id"], {"version": 1, "to": "bob"})
    remove_member(admin, "alice")
    after_move = get(admin, moved["id"])
    assert after_move["enabled"] is True
    assert after_move["version"] == 2, "nothing touched it after the transfer"
    assert not (after_move["last_status"] or "").startswith("auto_disabled")
    control = get(admin, kept["id"])
    assert control["enabled"] is False, "the schedule left with alice is auto-disabled (CR-3)"


def test_runs_after_the_transfer_carry_the_new_owner(
    system: bootstrap.Punctual, alice: Api, bob: Api, admin: Api
) -> None:
    """Occurrences generated while alice owned it, and dispatched after the transfer, and
    after alice left, run as bob."""
    schedule = behind(system, alice, fires=3)
    assert generate(system.services, 100).generated >= 3
    transfer(admin, schedule["id"], {"version": 1, "to": "bob"})
    remove_member(admin, "alice")
    live_worker(system)
    dispatch_due(system.services, "runner-transfer", 100)
    runs = runs_of(admin, schedule["id"])
    assert len(runs) >= 3
    assert {run["started_by"] for run in runs} == {"bob"}
    states = {
        o["state"] for o in admin.get(f"/schedules/{schedule['id']}/occurrences").json()["items"]
    }
    assert states == {"dispatched"}, "none failed for a creator who left"


def test_the_typed_client_transfers(system: bootstrap.Punctual, alice: Api, admin: Api) -> None:
    schedule = create(alice)
    with serving(system.http_app()) as url, PunctualClient(url, admin.token, TENANT) as client:
        moved = client.transfer_schedule(
            schedule["id"], idempotency_key="t-1", version=1, to="root"
        )
        assert (moved.created_by, moved.version) == ("root", 2)
        assert moved.idempotency_key == "t-1"
        with pytest.raises(ApiError) as stale:
            client.transfer_schedule(schedule["id"], idempotency_key="t-2", version=1, to="alice")
        assert (stale.value.status, stale.value.code) == (409, "version_conflict")
        assert stale.value.details["current_version"] == 2
