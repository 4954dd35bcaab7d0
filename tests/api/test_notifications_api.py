"""The notification feed through HTTP on both stores (API.md "Notifications and webhooks").

Notifications are written the one way punctual writes them, ``usecases/outbound/outbox.py``'s
``notify`` in a store transaction; the feed is each principal's own: newest first,
``unread=true``, paged, marked read idempotently, and absent for anyone else.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import httpx2
import pytest
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.client import ApiError, PunctualClient
from punctual.domain.permissions import Role
from punctual.usecases.outbound.outbox import NotificationEvent, notify
from punctual.usecases.tenancy import identity
from tests.support.api import Api, in_process, member_api
from tests.support.server import serving

Response = httpx.Response | httpx2.Response

TENANT = "acme"
NOTIFICATION_FIELDS = {
    "id",
    "kind",
    "schedule_id",
    "occurrence_id",
    "run_id",
    "title",
    "text",
    "details",
    "created_at",
    "read_at",
}


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    with in_process(system) as test_client:
        yield test_client


@pytest.fixture
def alice(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, TENANT, "alice", Role.MEMBER)


@pytest.fixture
def bob(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, TENANT, "bob", Role.MEMBER)


@pytest.fixture
def admin(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, TENANT, "root", Role.ADMIN)


def note_for(
    system: bootstrap.Punctual,
    owner: str | None,
    *,
    kind: str = "regression",
    title: str = "Score fell",
    tenant: str = TENANT,
) -> str:
    """One event through ``notify``; returns its event id."""
    event = NotificationEvent(
        tenant=tenant,
        kind=kind,
        title=title,
        text=f"{title}: nightly-scores",
        schedule_id="sch_feed",
        occurrence_id="occ_feed",
        run_id="run_feed",
        details={"regressions": [{"path": "metrics.score", "previous": 0.9, "current": 0.5}]},
    )
    with system.store.transaction() as tx:
        return notify(system.services, tx, event, owner, system.services.clock.now())


def feed(api: Api, **params: Any) -> dict[str, Any]:
    response = api.get("/notifications", **params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"items", "next_cursor"}
    return body


def titles(api: Api, **params: Any) -> list[str]:
    return [item["title"] for item in feed(api, **params)["items"]]


def mark_read(api: Api, notification_id: str, *, key: str | None = None) -> Response:
    return api.post(f"/notifications/{notification_id}/read", key=key or secrets.token_hex(8))


def error_of(response: Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code, response.text


def test_a_notification_shows_every_contract_field(system: bootstrap.Punctual, alice: Api) -> None:
    note_for(system, "alice")
    (item,) = feed(alice)["items"]
    assert set(item) == NOTIFICATION_FIELDS
    assert item["id"].startswith("ntf_")
    assert (item["kind"], item["title"]) == ("regression", "Score fell")
    assert item["text"] == "Score fell: nightly-scores"
    assert (item["schedule_id"], item["occurrence_id"], item["run_id"]) == (
        "sch_feed",
        "occ_feed",
        "run_feed",
    )
    assert item["details"]["regressions"][0]["current"] == 0.5
    assert item["created_at"].endswith("Z")
    assert item["read_at"] is None


def test_the_feed_is_the_callers_own(
    system: bootstrap.Punctual, alice: Api, bob: Api, admin: Api
) -> None:
    note_for(system, "alice", title="for alice")
    note_for(system, "bob", title="for bob")
    assert titles(alice) == ["for alice"]
    assert titles(bob) == ["for bob"]
    assert titles(admin) == [], "an owner who is a member gets it, not the admins"


def test_a_creator_who_left_is_replaced_by_the_admins(
    system: bootstrap.Punctual, alice: Api, admin: Api
) -> None:
    note_for(system, "carol-who-left", title="orphaned")
    assert titles(admin) == ["orphaned"]
    assert titles(alice) == []


def test_newest_first_and_paged(system: bootstrap.Punctual, alice: Api) -> None:
    for number in range(5):
        note_for(system, "alice", title=f"n{number}")
    first = feed(alice, limit=2)
    assert [i["title"] for i in first["items"]] == ["n4", "n3"]
    second = feed(alice, limit=2, cursor=first["next_cursor"])
    assert [i["title"] for i in second["items"]] == ["n2", "n1"]
    note_for(system, "alice", title="newer")  # arrives meanwhile: the pages go on as they were
    third = feed(alice, limit=2, cursor=second["next_cursor"])
    assert [i["title"] for i in third["items"]] == ["n0"]
    assert third["next_cursor"] is None
    assert titles(alice)[0] == "newer"


def test_unread_true_lists_only_unread(system: bootstrap.Punctual, alice: Api) -> None:
    note_for(system, "alice", title="old")
    note_for(system, "alice", title="new")
    old = next(i for i in feed(alice)["items"] if i["title"] == "old")
    assert mark_read(alice, old["id"]).status_code == 200
    assert titles(alice, unread="true") == ["new"]
    assert titles(alice, unread="false") == ["new", "old"]
    assert titles(alice) == ["new", "old"]


def test_bad_query_parameters_are_422(alice: Api) -> None:
    error_of(alice.get("/notifications", unread="yes"), 422, "validation_error")
    error_of(alice.get("/notifications", limit=0), 422, "validation_error")
    error_of(alice.get("/notifications", limit=101), 422, "validation_error")
    error_of(alice.get("/notifications", cursor="not-ours"), 422, "invalid_cursor")


def test_mark_read_sets_read_at_once(system: bootstrap.Punctual, alice: Api) -> None:
    note_for(system, "alice")
    (item,) = feed(alice)["items"]
    first = mark_read(alice, item["id"])
    assert first.status_code == 200, first.text
    read = first.json()
    assert set(read) == NOTIFICATION_FIELDS
    assert read["read_at"] is not None and read["read_at"].endswith("Z")
    assert datetime.fromisoformat(read["read_at"]) >= datetime.fromisoformat(item["created_at"])
    assert {k: v for k, v in read.items() if k != "read_at"} == {
        k: v for k, v in item.items() if k != "read_at"
    }
    again = mark_read(alice, item["id"])
    assert again.status_code == 200
    assert again.json()["read_at"] == read["read_at"], "idempotent: the first time stays"
    assert feed(alice)["items"] == [read]


def test_a_replayed_mark_read_answers_the_same(system: bootstrap.Punctual, alice: Api) -> None:
    note_for(system, "alice")
    (item,) = feed(alice)["items"]
    first = mark_read(alice, item["id"], key="read-1")
    second = mark_read(alice, item["id"], key="read-1")
    assert first.json() == second.json()
    other = alice.post("/notifications/ntf_other/read", key="read-1")
    error_of(other, 409, "idempotency_key_reused")


def test_mark_read_needs_an_idempotency_key(system: bootstrap.Punctual, alice: Api) -> None:
    note_for(system, "alice")
    (item,) = feed(alice)["items"]
    response = alice.client.post(
        alice.path(f"/notifications/{item['id']}/read"), headers=alice.headers()
    )
    error_of(response, 400, "idempotency_key_required")
    assert feed(alice)["items"][0]["read_at"] is None


def test_another_principals_notification_is_404(
    system: bootstrap.Punctual, alice: Api, bob: Api, admin: Api
) -> None:
    note_for(system, "alice")
    (item,) = feed(alice)["items"]
    for other in (bob, admin):
        error_of(mark_read(other, item["id"]), 404, "not_found")
    error_of(mark_read(alice, "ntf_unknown"), 404, "not_found")
    assert feed(alice)["items"][0]["read_at"] is None


def test_another_tenant_sees_nothing(
    system: bootstrap.Punctual, client: TestClient, alice: Api
) -> None:
    note_for(system, "alice")
    (item,) = feed(alice)["items"]
    # Same subject, other tenant: a different principal with a different feed.
    other = member_api(system, client, "beta", "alice", Role.ADMIN)
    assert feed(other)["items"] == []
    error_of(mark_read(other, item["id"]), 404, "not_found")
    into = other.client.get(f"/v1/tenants/{TENANT}/notifications", headers=other.headers())
    error_of(into, 404, "not_found")
    assert feed(alice)["items"][0]["read_at"] is None


def test_a_viewer_reads_and_marks_its_own_feed(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    viewer = member_api(system, client, TENANT, "victor", Role.VIEWER)
    note_for(system, "victor", kind="schedule_auto_disabled", title="disabled")
    (item,) = feed(viewer)["items"]
    assert item["kind"] == "schedule_auto_disabled"
    assert mark_read(viewer, item["id"]).status_code == 200


def test_the_feed_needs_a_token(client: TestClient) -> None:
    response = client.get(f"/v1/tenants/{TENANT}/notifications")
    error_of(response, 401, "unauthenticated")


def test_the_typed_client_reads_and_marks_the_feed(system: bootstrap.Punctual) -> None:
    alice = identity.ensure_member_token(system.services, TENANT, "alice", Role.MEMBER)
    note_for(system, "alice", title="first")
    note_for(system, "alice", title="second")
    with serving(system.http_app()) as url, PunctualClient(url, alice.token, TENANT) as client:
        newest, older = client.list_notifications().items
        assert (newest.title, older.title) == ("second", "first")
        read = client.mark_notification_read(older.id, idempotency_key="m-1")
        assert read.read_at is not None
        assert [n.title for n in client.list_notifications(unread=True).items] == ["second"]
        page = client.list_notifications(limit=1)
        assert client.list_notifications(limit=1, cursor=page.next_cursor).items == [read]
        with pytest.raises(ApiError) as missing:
            client.mark_notification_read("ntf_unknown", idempotency_key="m-2")
        assert (missing.value.status, missing.value.code) == (404, "not_found")


def test_openapi_declares_the_feed(system: bootstrap.Punctual) -> None:
    document = system.http_app().openapi()
    schemas = document["components"]["schemas"]
    assert set(schemas["Notification"]["properties"]) == NOTIFICATION_FIELDS
    listed = document["paths"]["/v1/tenants/{tenant}/notifications"]["get"]
    assert listed["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/NotificationPage"
    }
    assert {p["name"] for p in listed["parameters"]} >= {"unread", "limit", "cursor"}
