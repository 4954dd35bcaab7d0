"""Holds over HTTP (API.md "Retention and holds", SPEC RT-1), on both stores: a tenant admin
places a hold on each subject kind, lists and releases it; subjects are checked (404 for an
unknown or another tenant's, 422 for a missing ``subject_id``); a host hold is not the
tenant admin's to release; only admins may act. The typed client, sync and async, over a
real uvicorn."""

from __future__ import annotations

import asyncio
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from punctual import bootstrap, resources
from punctual.client import AsyncPunctualClient, PermissionDeniedError, PunctualClient
from punctual.domain.permissions import Role
from punctual.domain.retention import HoldKind
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.conftest import make_settings
from tests.support.api import Api, echo_start, in_process, live_worker, member_api
from tests.support.server import serving

TENANT = "acme"
OTHER = "beta"
INTERNAL_TOKEN = "internal-" + "5c1e" * 8
HOST = {"X-Internal-Token": INTERNAL_TOKEN}
SCHEDULE_BODY: dict[str, Any] = {
    "workflow": "score",
    "input": {"score": 0.5},
    "spec": {"cron": "30 2 * * *", "time_zone": "Europe/Berlin"},
    "overlap": "skip",
    "missed": "skip",
}


@dataclass
class World:
    system: bootstrap.Punctual
    client: TestClient
    admin: Api
    member: Api
    viewer: Api
    other_admin: Api


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[World]:
    system = bootstrap.build(make_settings(database_url, tmp_path, internal_token=INTERNAL_TOKEN))
    live_worker(system)
    try:
        with in_process(system) as client:
            yield World(
                system,
                client,
                member_api(system, client, TENANT, "root", Role.ADMIN),
                member_api(system, client, TENANT, "alice", Role.MEMBER),
                member_api(system, client, TENANT, "victor", Role.VIEWER),
                member_api(system, client, OTHER, "bertha", Role.ADMIN),
            )
    finally:
        system.close()


def created(response: Any, status: int = 201) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


def start_of(api: Api, business_request_id: str = "req-1") -> str:
    body = echo_start(business_request_id=business_request_id)
    return str(created(api.post("/scheduled-starts", body))["id"])


def schedule_of(api: Api, name: str = "nightly") -> str:
    return str(created(api.post("/schedules", {**SCHEDULE_BODY, "name": name}))["id"])


def run_of(system: bootstrap.Punctual, api: Api) -> str:
    """A run: a start due now, dispatched by one runner pass."""
    start_id = created(api.create_due(echo_start(business_request_id="due")))
    assert dispatch_due(system.services, "runner-holds", 10).dispatched
    dispatched = api.get(f"/scheduled-starts/{start_id['id']}").json()
    return str(dispatched["dispatch"]["run_id"])


def subjects(world: World, api: Api) -> dict[str, str | None]:
    """One subject of each kind in ``api``'s tenant (the tenant names none)."""
    return {
        "start": start_of(api),
        "schedule": schedule_of(api),
        "run": run_of(world.system, api),
        "tenant": None,
    }


def exactly(model: type[BaseModel], body: Any) -> Any:
    """``body`` parsed by ``model``, which must declare every field the route sent."""
    parsed = model.model_validate(body)
    assert not parsed.model_extra, parsed.model_extra
    for name in type(parsed).model_fields:
        value = getattr(parsed, name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, BaseModel):
                assert not item.model_extra, (name, item.model_extra)
    return parsed


def place(api: Api, kind: str, subject_id: str | None, reason: str = "audit") -> Any:
    body: dict[str, Any] = {"subject_kind": kind, "reason": reason}
    if subject_id is not None:
        body["subject_id"] = subject_id
    return api.post("/holds", body)


def host_hold(world: World, tenant: str, kind: str, subject_id: str | None) -> dict[str, Any]:
    body = {"tenant": tenant, "subject_kind": kind, "subject_id": subject_id, "reason": "legal"}
    return created(world.client.post("/internal/holds", headers=HOST, json=body))


# --------------------------------------------------------------------------- placing


def test_an_admin_holds_each_subject_kind(world: World) -> None:
    held = subjects(world, world.member)
    for kind, subject_id in held.items():
        hold = exactly(resources.Hold, created(place(world.admin, kind, subject_id, f"why {kind}")))
        assert hold.id.startswith("hld_")
        assert (hold.subject_kind, hold.subject_id) == (kind, subject_id or TENANT)
        assert (hold.reason, hold.created_by) == (f"why {kind}", "root")
        assert hold.released_at is None and hold.released_by is None
        assert hold.placed_by_host is False
        assert hold.created_at.tzinfo is not None
    page = exactly(resources.HoldPage, created(world.admin.get("/holds"), 200))
    assert [(h.subject_kind, h.subject_id) for h in page.items] == [
        (kind, subject_id or TENANT) for kind, subject_id in reversed(held.items())
    ]
    assert page.next_cursor is None


def test_the_documented_kinds_are_the_domain_s() -> None:
    assert set(typing.get_args(resources.HoldKind)) == {kind.value for kind in HoldKind}


def test_a_tenant_hold_may_name_its_own_tenant(world: World) -> None:
    hold = created(place(world.admin, "tenant", TENANT))
    assert (hold["subject_kind"], hold["subject_id"]) == ("tenant", TENANT)


def test_an_unknown_or_another_tenants_subject_is_404(world: World) -> None:
    theirs = subjects(world, world.other_admin)
    for kind in ("start", "schedule", "run"):
        for subject_id in (f"{kind}_none", theirs[kind]):
            refused = place(world.admin, kind, subject_id)
            assert refused.status_code == 404, (kind, refused.text)
            assert refused.json()["error"]["code"] == "not_found"
    refused = place(world.admin, "tenant", OTHER)
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    assert world.admin.get("/holds").json()["items"] == []


def test_a_missing_subject_id_is_a_validation_error_for_every_kind_but_tenant(
    world: World,
) -> None:
    for kind in ("start", "schedule", "run"):
        refused = place(world.admin, kind, None)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] == "validation_error"
        assert error["details"]["errors"][0]["loc"] == ["body", "subject_id"]
    for body in (
        {"subject_kind": "occurrence", "subject_id": "x", "reason": "r"},
        {"subject_kind": "tenant", "reason": ""},
        {"subject_kind": "tenant", "reason": "   "},
        {"subject_kind": "tenant", "reason": "r" * 1001},
        {"subject_kind": "tenant"},
        {"subject_kind": "tenant", "reason": "r", "extra": 1},
        {"subject_kind": 3, "reason": "r"},
    ):
        refused = world.admin.post("/holds", body)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["error"]["code"] == "validation_error", body
    assert world.admin.get("/holds").json()["items"] == []


def test_a_placement_needs_a_key_and_its_retry_replays_the_same_hold(world: World) -> None:
    body = {"subject_kind": "tenant", "reason": "audit"}
    first = created(world.admin.post("/holds", body, key="hold-1"))
    assert created(world.admin.post("/holds", body, key="hold-1")) == first
    reused = world.admin.post("/holds", {**body, "reason": "other"}, key="hold-1")
    assert reused.status_code == 409
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    missing = world.client.post(
        world.admin.path("/holds"), headers=world.admin.headers(), json=body
    )
    assert missing.status_code == 400
    assert missing.json()["error"]["code"] == "idempotency_key_required"
    assert [h["id"] for h in world.admin.get("/holds").json()["items"]] == [first["id"]]


# --------------------------------------------------------------------------- releasing


def test_a_release_is_idempotent_and_released_holds_stay_listed(world: World) -> None:
    kept = created(place(world.admin, "tenant", None, "kept"))
    gone = created(place(world.admin, "start", start_of(world.member), "gone"))
    released = exactly(
        resources.Hold, created(world.admin.post(f"/holds/{gone['id']}/release"), 200)
    )
    assert released.released_at is not None and released.released_by == "root"
    again = created(world.admin.post(f"/holds/{gone['id']}/release"), 200)
    assert again["released_at"] == released.raw["released_at"]

    active = created(world.admin.get("/holds", active="true"), 200)["items"]
    assert [h["id"] for h in active] == [kept["id"]]
    every = created(world.admin.get("/holds"), 200)["items"]
    assert {h["id"]: h["released_at"] is not None for h in every} == {
        kept["id"]: False,
        gone["id"]: True,
    }
    assert created(world.admin.get("/holds", active="false"), 200)["items"] == every
    refused = world.admin.get("/holds", active="yes")
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "validation_error"


def test_an_unknown_or_another_tenants_hold_is_404_to_release(world: World) -> None:
    theirs = created(place(world.other_admin, "tenant", None))
    for hold_id in ("hld_none", theirs["id"]):
        refused = world.admin.post(f"/holds/{hold_id}/release")
        assert refused.status_code == 404, refused.text
        assert refused.json()["error"]["code"] == "not_found"
    listed = world.other_admin.get("/holds", active="true").json()["items"]
    assert [h["id"] for h in listed] == [theirs["id"]]


def test_a_host_hold_is_not_the_tenant_admins_to_release(world: World) -> None:
    placed = host_hold(world, TENANT, "start", start_of(world.member))
    refused = world.admin.post(f"/holds/{placed['id']}/release")
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "forbidden"
    assert "/internal/holds" in refused.json()["error"]["message"]
    [listed] = world.admin.get("/holds", active="true").json()["items"]
    assert listed["id"] == placed["id"]
    assert (listed["placed_by_host"], listed["created_by"]) == (True, "host")
    assert listed["released_at"] is None


# --------------------------------------------------------------------------- roles and pages


def test_only_admins_place_list_and_release_holds(world: World) -> None:
    hold = created(place(world.admin, "tenant", None))
    for api in (world.member, world.viewer):
        for response in (
            place(api, "tenant", None),
            api.get("/holds"),
            api.post(f"/holds/{hold['id']}/release"),
        ):
            assert response.status_code == 403, response.text
            assert response.json()["error"]["code"] == "forbidden"
    [listed] = world.admin.get("/holds").json()["items"]
    assert listed["released_at"] is None


def test_holds_are_paged_newest_first(world: World) -> None:
    placed = [created(place(world.admin, "tenant", None, f"r{i}"))["id"] for i in range(5)]
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = created(world.admin.get("/holds", **params), 200)
        assert len(page["items"]) <= 2
        seen += [h["id"] for h in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(placed))
    for bad in ({"limit": 0}, {"limit": "x"}, {"cursor": "not-a-cursor"}):
        refused = world.admin.get("/holds", **bad)
        assert refused.status_code == 422, (bad, refused.text)


# --------------------------------------------------------------------------- typed client


def test_the_typed_clients_place_list_and_release_holds(world: World) -> None:
    start_id = start_of(world.member)
    with (
        serving(world.system.http_app()) as url,
        PunctualClient(url, world.admin.token, TENANT) as client,
    ):
        hold = client.place_hold(subject_kind="start", subject_id=start_id, reason="case 7")
        assert isinstance(hold, resources.Hold) and hold.subject_id == start_id
        assert hold.idempotency_key is not None
        tenant_hold = client.place_hold(subject_kind="tenant", reason="legal")
        assert tenant_hold.subject_id == TENANT
        assert [h.id for h in client.list_holds().items] == [tenant_hold.id, hold.id]
        released = client.release_hold(hold.id)
        assert released.released_at is not None
        assert [h.id for h in client.list_holds(active=True).items] == [tenant_hold.id]
        entries = client.list_audit_entries(subject_id=hold.id)
        assert [e.action for e in entries.items] == ["release_hold", "place_hold"]
        host = host_hold(world, TENANT, "tenant", None)
        with pytest.raises(PermissionDeniedError) as refused:
            client.release_hold(host["id"])
        assert refused.value.code == "forbidden"

        async def drive() -> None:
            async with AsyncPunctualClient(url, world.admin.token, TENANT) as aclient:
                placed = await aclient.place_hold(subject_kind="tenant", reason="async")
                page = await aclient.list_holds(active=True, limit=1)
                assert [h.id for h in page.items] == [placed.id] and page.next_cursor
                assert (await aclient.release_hold(placed.id)).released_at is not None
                log = await aclient.list_audit_entries(actor="root", limit=1)
                assert log.items[0].action == "release_hold"

        asyncio.run(drive())
