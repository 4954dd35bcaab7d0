"""The audit log over HTTP (API.md ``GET …/audit``, SPEC CR-8), on both stores: one entry per
decided mutation, newest first, filtered by subject and actor, paged; admins only; never
a body, input or query string. (Which routes write an entry is
``tests/integration/test_audit_log.py``'s walk of the route table.)"""

from __future__ import annotations

from typing import Any

from punctual import resources
from tests.api.test_holds_api import (
    HOST,
    TENANT,
    World,
    created,
    exactly,
    schedule_of,
    world,
)
from tests.support.api import echo_start

__all__ = ["world"]

SECRET = "audit-secret-91d4"


def entries(world: World, **params: Any) -> list[dict[str, Any]]:
    page = created(world.admin.get("/audit", **params), 200)
    items: list[dict[str, Any]] = page["items"]
    return items


def token_id_of(world: World, subject: str) -> str:
    tokens = world.admin.get("/tokens").json()["items"]
    return str(next(token["id"] for token in tokens if token["subject"] == subject))


def test_each_decided_mutation_is_one_entry_newest_first(world: World) -> None:
    body = {
        "workflow": "echo",
        "input": {"message": SECRET},
        "business_request_id": SECRET,
        "start_at": "2036-12-01T07:00:00+01:00",
        "workload_class": "standard",
        "attributes": {"note": SECRET},
    }
    start = created(world.member.post("/scheduled-starts", body, key="k-create"))
    assert created(world.member.post("/scheduled-starts", body, key="k-create")) == start
    cancel = world.member.post(f"/scheduled-starts/{start['id']}/cancel", {"version": 1})
    assert cancel.status_code == 200, cancel.text
    hold = created(world.admin.post("/holds", {"subject_kind": "tenant", "reason": SECRET}))

    page = exactly(resources.AuditPage, created(world.admin.get("/audit"), 200))
    mine = [e for e in page.items if e.actor in ("alice", "root")]
    assert [(e.action, e.status) for e in mine] == [
        ("place_hold", 201),
        ("cancel_start", 200),
        ("create_start", 201),
    ]
    placed, canceled, made = mine
    assert (made.method, made.path) == ("POST", f"/v1/tenants/{TENANT}/scheduled-starts")
    assert (made.subject_kind, made.subject_id) == ("start", start["id"])
    assert (canceled.subject_kind, canceled.subject_id) == ("start", start["id"])
    assert (placed.subject_kind, placed.subject_id) == ("hold", hold["id"])
    assert made.actor == "alice" and made.token_id == token_id_of(world, "alice")
    assert placed.actor == "root" and placed.token_id == token_id_of(world, "root")
    assert made.at <= canceled.at <= placed.at
    # Never a body, input or anything the body named.
    assert SECRET not in world.admin.get("/audit").text


def test_a_refusal_writes_no_entry_and_a_path_keeps_no_query(world: World) -> None:
    before = len(entries(world))
    refused = world.member.post("/scheduled-starts", {"workflow": "echo"})
    assert refused.status_code == 422
    forbidden = world.viewer.post("/scheduled-starts", echo_start())
    assert forbidden.status_code == 403, forbidden.text
    assert len(entries(world)) == before
    schedule_id = schedule_of(world.member)
    deleted = world.member.delete(f"/schedules/{schedule_id}", version=1)
    assert deleted.status_code == 204, deleted.text
    [entry] = entries(world, subject_id=schedule_id, limit=1)
    assert (entry["action"], entry["status"]) == ("delete_schedule", 204)
    assert entry["path"] == f"/v1/tenants/{TENANT}/schedules/{schedule_id}"


def test_entries_are_filtered_by_subject_and_actor(world: World) -> None:
    first = schedule_of(world.member, "first")
    second = schedule_of(world.admin, "second")
    paused = world.admin.post(f"/schedules/{first}/pause", {"version": 1})
    assert paused.status_code == 200, paused.text

    about_first = entries(world, subject_id=first)
    assert [(e["action"], e["actor"]) for e in about_first] == [
        ("pause_schedule", "root"),
        ("create_schedule", "alice"),
    ]
    by_alice = entries(world, actor="alice")
    assert {e["actor"] for e in by_alice} == {"alice"}
    assert [e["subject_id"] for e in by_alice] == [first]
    both = entries(world, actor="root", subject_id=second)
    assert [(e["action"], e["subject_id"]) for e in both] == [("create_schedule", second)]
    assert entries(world, actor="nobody") == []
    assert entries(world, subject_id="sch_none") == []


def test_entries_are_paged(world: World) -> None:
    for index in range(5):
        schedule_of(world.member, f"paged-{index}")
    everything = [e["id"] for e in entries(world, actor="alice")]
    assert len(everything) == 5
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"actor": "alice", "limit": 2}
        page = created(
            world.admin.get("/audit", **params, **({"cursor": cursor} if cursor else {})), 200
        )
        assert len(page["items"]) <= 2
        seen += [e["id"] for e in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == everything
    for bad in ({"limit": 0}, {"limit": 101}, {"limit": "two"}, {"cursor": "???"}):
        refused = world.admin.get("/audit", **bad)
        assert refused.status_code == 422, (bad, refused.text)


def test_only_admins_read_the_log(world: World) -> None:
    schedule_of(world.member)
    for api in (world.member, world.viewer):
        refused = api.get("/audit")
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "forbidden"
        assert "create_schedule" not in refused.text
    theirs = world.other_admin.get("/audit")
    assert theirs.status_code == 200 and theirs.json()["items"] == []
    across = world.other_admin.client.get(
        f"/v1/tenants/{TENANT}/audit", headers=world.other_admin.headers()
    )
    assert across.status_code == 404 and across.json()["error"]["code"] == "not_found"


def test_the_hosts_holds_are_in_the_tenants_log(world: World) -> None:
    body = {"tenant": TENANT, "subject_kind": "tenant", "reason": SECRET}
    hold = created(world.client.post("/internal/holds", headers=HOST, json=body))
    released = world.client.post(f"/internal/holds/{hold['id']}/release", headers=HOST)
    assert released.status_code == 200, released.text
    log = entries(world, subject_id=hold["id"])
    assert [(e["action"], e["actor"], e["token_id"], e["status"]) for e in log] == [
        ("release_hold", "host", None, 200),
        ("place_hold", "host", None, 201),
    ]
    assert [e["path"] for e in log] == [
        f"/internal/holds/{hold['id']}/release",
        "/internal/holds",
    ]
    assert entries(world, actor="host") == log
    assert SECRET not in world.admin.get("/audit").text
