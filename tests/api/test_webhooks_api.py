"""Webhooks through HTTP on both stores (API.md "Notifications and webhooks", SPEC CR-4).

Create, read, change, delete, test, deliveries and redeliver, each with its status and
error code; the URL is masked in every read and the secret never returned; destinations
are judged by the real sender (``HttpWebhookSender``) with the host's allowed networks.
Deliveries go to a real HTTP receiver on 127.0.0.1 through the real delivery pass, so a
rotated secret is proven by the signature the receiver gets.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import httpx2
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.webhooks import HttpWebhookSender, default_allowed_cidrs
from punctual.client import ApiError, PunctualClient
from punctual.domain.permissions import Role
from punctual.ports.records import EncryptedInput
from punctual.usecases.outbound.delivery import deliver_due
from punctual.usecases.outbound.outbox import KINDS, NotificationEvent, notify
from punctual.usecases.tenancy import identity
from tests.support.api import Api, in_process, member_api
from tests.support.server import serving

Response = httpx.Response | httpx2.Response

TENANT = "acme"
HOOK_PATH = "/services/T0001/B0002/credential-in-path"
HOOK_QUERY = "token=query-credential"
SECRET = "first-secret-0123456789"
WEBHOOK_FIELDS = {"id", "url", "events", "created_at"}
DELIVERY_FIELDS = {
    "id",
    "event_id",
    "kind",
    "status",
    "attempts",
    "last_status_code",
    "last_error",
    "next_attempt_at",
    "delivered_at",
}


# --------------------------------------------------------------------------- a receiver


class Receiver:
    """A webhook receiver on 127.0.0.1 that records every request and answers 204."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                received.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{HOOK_PATH}?{HOOK_QUERY}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def local_sender(system: bootstrap.Punctual) -> HttpWebhookSender:
    """The real sender with the local profile's allowed networks (loopback, private)."""
    sender = HttpWebhookSender(default_allowed_cidrs("local"))
    system.services.webhooks = sender
    return sender


@pytest.fixture
def client(system: bootstrap.Punctual, local_sender: HttpWebhookSender) -> Iterator[TestClient]:
    with in_process(system) as test_client:
        yield test_client


@pytest.fixture
def admin(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, TENANT, "root", Role.ADMIN)


@pytest.fixture
def member(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, TENANT, "alice", Role.MEMBER)


@pytest.fixture
def viewer(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, TENANT, "victor", Role.VIEWER)


@pytest.fixture
def outsider(system: bootstrap.Punctual, client: TestClient) -> Api:
    """An admin of another tenant."""
    return member_api(system, client, "beta", "bertha", Role.ADMIN)


def error_of(response: Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert body["error"]["code"] == code, body
    details: dict[str, Any] = body["error"]["details"]
    return details


def patch(api: Api, webhook_id: str, body: Any, *, key: str | None = None) -> Response:
    return api.patch(f"/webhooks/{webhook_id}", body, key=key)


def create(api: Api, url: str, **fields: Any) -> dict[str, Any]:
    response = api.post("/webhooks", {"url": url, **fields})
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def stored_row(system: bootstrap.Punctual, webhook_id: str) -> dict[str, Any]:
    with system.store.engine.connect() as conn:
        row = conn.execute(sa.select(t.webhooks).where(t.webhooks.c.id == webhook_id)).one()
    return dict(row._mapping)


def stored_secret(system: bootstrap.Punctual, webhook_id: str) -> str | None:
    row = stored_row(system, webhook_id)
    if row["secret"] is None:
        return None
    sealed = EncryptedInput(row["secret_key_id"], row["secret"])
    value: str = system.services.codec.decrypt(sealed, TENANT)
    return value


def deliveries(api: Api, webhook_id: str, **params: Any) -> list[dict[str, Any]]:
    response = api.get(f"/webhooks/{webhook_id}/deliveries", **params)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def signed(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def assert_hidden(text: str) -> None:
    """Neither the URL's path nor its query nor the secret shows."""
    for hidden in (HOOK_PATH, "credential-in-path", HOOK_QUERY, "query-credential", SECRET):
        assert hidden not in text, f"{hidden!r} leaked: {text}"


# --------------------------------------------------------------------------- create and read


def test_create_answers_201_with_the_url_cut_after_its_host(admin: Api, receiver: Receiver) -> None:
    response = admin.post(
        "/webhooks", {"url": receiver.url, "events": ["regression"], "secret": SECRET}
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == WEBHOOK_FIELDS
    assert body["id"].startswith("whk_")
    assert body["url"] == f"http://127.0.0.1:{receiver.port}/…"
    assert body["events"] == ["regression"]
    assert body["created_at"].endswith("Z")
    assert_hidden(response.text)


def test_reads_mask_the_url_and_never_return_the_secret(admin: Api, receiver: Receiver) -> None:
    created = create(admin, receiver.url, secret=SECRET)
    listed = admin.get("/webhooks")
    one = admin.get(f"/webhooks/{created['id']}")
    for response in (listed, one):
        assert response.status_code == 200, response.text
        assert_hidden(response.text)
    assert listed.json() == {"items": [created], "next_cursor": None}
    assert one.json() == created


def test_the_url_and_the_secret_are_stored_encrypted(
    system: bootstrap.Punctual, admin: Api, receiver: Receiver
) -> None:
    created = create(admin, receiver.url, secret=SECRET)
    row = stored_row(system, created["id"])
    assert_hidden(json.dumps(row, default=lambda v: v.hex() if isinstance(v, bytes) else str(v)))
    assert_hidden(repr(row))
    assert row["url_display"] == created["url"]
    assert system.services.codec.decrypt(EncryptedInput(row["url_key_id"], row["url"]), TENANT) == (
        receiver.url
    )
    assert stored_secret(system, created["id"]) == SECRET


def test_events_omitted_means_every_kind_and_duplicates_are_dropped(
    admin: Api, receiver: Receiver
) -> None:
    assert create(admin, receiver.url)["events"] == []
    again = create(admin, receiver.url, events=["start_failed", "regression", "start_failed"])
    assert again["events"] == ["start_failed", "regression"]


def test_an_unknown_event_kind_is_refused(admin: Api, receiver: Receiver) -> None:
    for events in (["regression", "made_up"], ["test"]):
        response = admin.post("/webhooks", {"url": receiver.url, "events": events})
        details = error_of(response, 422, "unknown_event_kind")
        assert details["kinds"] == list(KINDS)
        assert details["errors"][0]["loc"] == ["body", "events", len(events) - 1]
    assert admin.get("/webhooks").json()["items"] == []


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example.com/x",
        "hooks.example.com/x",
        "http:///no-host",
        "http://user:pass@hooks.example.com/x",
        "http://hooks.example.com/with space",
    ],
)
def test_a_url_that_cannot_be_a_webhook_is_refused(admin: Api, url: str) -> None:
    response = admin.post("/webhooks", {"url": url})
    error_of(response, 422, "webhook_url_not_allowed")
    assert "/x" not in response.json()["error"]["message"]


def test_the_body_is_validated(admin: Api, receiver: Receiver) -> None:
    for body in (
        {},
        {"url": receiver.url, "secret": ""},
        {"url": receiver.url, "unknown": 1},
        {"url": 5},
        {"url": receiver.url, "events": "regression"},
    ):
        error_of(admin.post("/webhooks", body), 422, "validation_error")


def test_a_replayed_create_answers_the_same_and_creates_one(admin: Api, receiver: Receiver) -> None:
    first = admin.post("/webhooks", {"url": receiver.url}, key="hook-1")
    second = admin.post("/webhooks", {"url": receiver.url}, key="hook-1")
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json() == second.json()
    assert len(admin.get("/webhooks").json()["items"]) == 1
    other = admin.post("/webhooks", {"url": receiver.url, "events": ["regression"]}, key="hook-1")
    error_of(other, 409, "idempotency_key_reused")


def test_the_list_pages_newest_first(admin: Api, receiver: Receiver) -> None:
    made = [create(admin, receiver.url)["id"] for _ in range(3)]
    first = admin.get("/webhooks", limit=2).json()
    assert [h["id"] for h in first["items"]] == made[:0:-1]
    rest = admin.get("/webhooks", limit=2, cursor=first["next_cursor"]).json()
    assert [h["id"] for h in rest["items"]] == made[:1]
    assert rest["next_cursor"] is None


# --------------------------------------------------------------------------- destinations


@pytest.mark.parametrize("allowed", [[], default_allowed_cidrs("production")])
def test_loopback_private_and_link_local_are_refused_unless_allowed(
    system: bootstrap.Punctual, admin: Api, allowed: list[str]
) -> None:
    system.services.webhooks = HttpWebhookSender(allowed)
    for host in ("127.0.0.1:9", "10.1.2.3", "192.168.0.10", "169.254.169.254", "[::1]:9"):
        url = f"http://{host}{HOOK_PATH}?{HOOK_QUERY}"
        response = admin.post("/webhooks", {"url": url})
        error_of(response, 422, "webhook_url_not_allowed")
        assert_hidden(response.text)
    assert admin.get("/webhooks").json()["items"] == []


def test_the_local_profile_allows_loopback(admin: Api) -> None:
    created = create(admin, f"http://127.0.0.1:9{HOOK_PATH}")
    assert created["url"] == "http://127.0.0.1:9/…"


def test_allowed_cidrs_open_exactly_the_named_network(
    system: bootstrap.Punctual, admin: Api
) -> None:
    system.services.webhooks = HttpWebhookSender(["10.0.0.0/8"])
    assert create(admin, "http://10.1.2.3/hook")["url"] == "http://10.1.2.3/…"
    error_of(
        admin.post("/webhooks", {"url": "http://127.0.0.1/hook"}), 422, "webhook_url_not_allowed"
    )


def test_a_patch_to_a_refused_url_changes_nothing(
    system: bootstrap.Punctual, admin: Api, receiver: Receiver
) -> None:
    created = create(admin, receiver.url)
    system.services.webhooks = HttpWebhookSender([])
    response = patch(admin, created["id"], {"url": f"http://127.0.0.1:1{HOOK_PATH}"})
    error_of(response, 422, "webhook_url_not_allowed")
    assert_hidden(response.text)
    assert admin.get(f"/webhooks/{created['id']}").json() == created


# --------------------------------------------------------------------------- roles, tenants


def test_members_and_viewers_may_not_manage_webhooks(
    admin: Api, member: Api, viewer: Api, receiver: Receiver
) -> None:
    hook = create(admin, receiver.url)["id"]
    admin.post(f"/webhooks/{hook}/test")
    delivery = deliveries(admin, hook)[0]["id"]
    for api in (member, viewer):
        for response in (
            api.post("/webhooks", {"url": receiver.url}),
            api.get("/webhooks"),
            api.get(f"/webhooks/{hook}"),
            patch(api, hook, {"events": ["regression"]}),
            api.post(f"/webhooks/{hook}/test"),
            api.get(f"/webhooks/{hook}/deliveries"),
            api.post(f"/webhooks/{hook}/deliveries/{delivery}/redeliver"),
            api.delete(f"/webhooks/{hook}"),
        ):
            error_of(response, 403, "forbidden")
    assert admin.get(f"/webhooks/{hook}").json()["events"] == []
    assert len(deliveries(admin, hook)) == 1


def test_another_tenant_sees_nothing(admin: Api, outsider: Api, receiver: Receiver) -> None:
    hook = create(admin, receiver.url, secret=SECRET)["id"]
    admin.post(f"/webhooks/{hook}/test")
    delivery = deliveries(admin, hook)[0]["id"]
    for response in (
        outsider.get(f"/webhooks/{hook}"),
        patch(outsider, hook, {"secret": None}),
        outsider.post(f"/webhooks/{hook}/test"),
        outsider.get(f"/webhooks/{hook}/deliveries"),
        outsider.post(f"/webhooks/{hook}/deliveries/{delivery}/redeliver"),
        outsider.delete(f"/webhooks/{hook}"),
    ):
        error_of(response, 404, "not_found")
    assert outsider.get("/webhooks").json() == {"items": [], "next_cursor": None}
    own_path = outsider.client.get(f"/v1/tenants/{TENANT}/webhooks", headers=outsider.headers())
    error_of(own_path, 404, "not_found")
    assert len(deliveries(admin, hook)) == 1


def test_unknown_ids_are_404(admin: Api, receiver: Receiver) -> None:
    hook = create(admin, receiver.url)["id"]
    for response in (
        admin.get("/webhooks/whk_unknown"),
        patch(admin, "whk_unknown", {"events": None}),
        admin.post("/webhooks/whk_unknown/test"),
        admin.get("/webhooks/whk_unknown/deliveries"),
        admin.delete("/webhooks/whk_unknown"),
        admin.post(f"/webhooks/{hook}/deliveries/dlv_unknown/redeliver"),
    ):
        error_of(response, 404, "not_found")


# --------------------------------------------------------------------------- change, delete


def test_patch_changes_only_what_it_sends(
    system: bootstrap.Punctual, admin: Api, receiver: Receiver
) -> None:
    created = create(admin, receiver.url, events=["regression"], secret=SECRET)
    changed = patch(admin, created["id"], {"events": ["start_failed", "finalize_timed_out"]})
    assert changed.status_code == 200, changed.text
    assert changed.json() == {**created, "events": ["start_failed", "finalize_timed_out"]}
    assert stored_secret(system, created["id"]) == SECRET
    every = patch(admin, created["id"], {"events": None})
    assert every.json()["events"] == []
    moved = patch(admin, created["id"], {"url": "http://localhost:9/elsewhere"})
    assert moved.json()["url"] == "http://localhost:9/…"
    assert_hidden(moved.text)
    assert patch(admin, created["id"], {}).json() == moved.json()


def test_patch_refuses_what_cannot_change(admin: Api, receiver: Receiver) -> None:
    hook = create(admin, receiver.url)["id"]
    error_of(patch(admin, hook, {"url": None}), 422, "validation_error")
    error_of(patch(admin, hook, {"created_by": "x"}), 422, "validation_error")
    error_of(patch(admin, hook, {"events": ["nope"]}), 422, "unknown_event_kind")
    error_of(patch(admin, hook, {"url": "gopher://x/y"}), 422, "webhook_url_not_allowed")


def test_patch_rotates_the_secret_and_null_removes_it(
    system: bootstrap.Punctual, admin: Api, receiver: Receiver
) -> None:
    """Proven end to end: the receiver checks each delivery's signature."""
    hook = create(admin, receiver.url, secret=SECRET)["id"]
    rotated = "second-secret-9876543210"
    steps: list[str | None] = [SECRET, rotated, None]
    for step, secret in enumerate(steps):
        if step == 1:
            response = patch(admin, hook, {"secret": rotated})
            assert response.status_code == 200, response.text
            assert rotated not in response.text
        if step == 2:
            assert patch(admin, hook, {"secret": None}).status_code == 200
        assert stored_secret(system, hook) == secret
        assert admin.post(f"/webhooks/{hook}/test").status_code == 202
        assert deliver_due(system.services).delivered == 1
        path, headers, body = receiver.requests[-1]
        assert path == f"{HOOK_PATH}?{HOOK_QUERY}"
        if secret is None:
            assert "x-punctual-signature" not in headers
        else:
            assert hmac.compare_digest(headers["x-punctual-signature"], signed(secret, body))
    assert len(receiver.requests) == 3


def test_delete_answers_204_and_the_webhook_is_gone(
    system: bootstrap.Punctual, admin: Api, receiver: Receiver
) -> None:
    hook = create(admin, receiver.url)["id"]
    admin.post(f"/webhooks/{hook}/test")
    response = admin.delete(f"/webhooks/{hook}")
    assert response.status_code == 204, response.text
    assert response.content == b""
    error_of(admin.get(f"/webhooks/{hook}"), 404, "not_found")
    error_of(admin.delete(f"/webhooks/{hook}"), 404, "not_found")
    assert admin.get("/webhooks").json()["items"] == []
    assert deliver_due(system.services).claimed == 0, "a deleted webhook is sent nothing"
    assert receiver.requests == []


# --------------------------------------------------------------------------- test, deliveries


def test_test_queues_a_test_event_to_this_webhook_only(
    system: bootstrap.Punctual, admin: Api, receiver: Receiver
) -> None:
    hook = create(admin, receiver.url, events=["regression"])["id"]
    other = create(admin, receiver.url)["id"]
    response = admin.post(f"/webhooks/{hook}/test")
    assert response.status_code == 202, response.text
    queued = response.json()
    assert queued["status"] == "queued"
    assert queued["event_id"].startswith("evt_")
    (delivery,) = deliveries(admin, hook)
    assert set(delivery) == DELIVERY_FIELDS
    assert delivery["id"] == queued["delivery_id"]
    assert delivery["event_id"] == queued["event_id"]
    assert (delivery["kind"], delivery["status"], delivery["attempts"]) == ("test", "pending", 0)
    assert delivery["last_status_code"] is None and delivery["last_error"] is None
    assert delivery["delivered_at"] is None and delivery["next_attempt_at"].endswith("Z")
    assert deliveries(admin, other) == []

    assert deliver_due(system.services).delivered == 1
    (_, headers, body) = receiver.requests[0]
    payload = json.loads(body)
    assert payload["event"] == "test" and payload["event_id"] == queued["event_id"]
    assert payload["tenant"] == TENANT and payload["text"]
    assert headers["x-punctual-event-id"] == queued["event_id"]
    (sent,) = deliveries(admin, hook)
    assert (sent["status"], sent["attempts"], sent["last_status_code"]) == ("delivered", 1, 204)
    assert sent["delivered_at"].endswith("Z") and sent["next_attempt_at"] is None


def test_each_accepted_test_call_queues_one_event(admin: Api, receiver: Receiver) -> None:
    """A 202 is not recorded against the key (API.md), so a retry queues again."""
    hook = create(admin, receiver.url)["id"]
    first = admin.post(f"/webhooks/{hook}/test", key="test-1").json()
    second = admin.post(f"/webhooks/{hook}/test", key="test-1").json()
    assert first["event_id"] != second["event_id"]
    assert len(deliveries(admin, hook)) == 2


def test_redeliver_queues_a_new_delivery_with_the_same_event_id(
    system: bootstrap.Punctual, admin: Api, receiver: Receiver
) -> None:
    hook = create(admin, receiver.url)["id"]
    queued = admin.post(f"/webhooks/{hook}/test").json()
    deliver_due(system.services)
    response = admin.post(f"/webhooks/{hook}/deliveries/{queued['delivery_id']}/redeliver")
    assert response.status_code == 202, response.text
    again = response.json()
    assert again["status"] == "queued"
    assert again["event_id"] == queued["event_id"]
    assert again["delivery_id"] not in (None, queued["delivery_id"])
    newest, original = deliveries(admin, hook)
    assert (newest["id"], newest["status"]) == (again["delivery_id"], "pending")
    assert newest["event_id"] == original["event_id"] == queued["event_id"]
    assert original["status"] == "delivered"
    deliver_due(system.services)
    first_body, second_body = receiver.requests[0][2], receiver.requests[1][2]
    assert first_body == second_body


def test_deliveries_page_newest_first(admin: Api, receiver: Receiver) -> None:
    hook = create(admin, receiver.url)["id"]
    events = [admin.post(f"/webhooks/{hook}/test").json()["event_id"] for _ in range(3)]
    first = admin.get(f"/webhooks/{hook}/deliveries", limit=2).json()
    assert [d["event_id"] for d in first["items"]] == events[::-1][:2]
    rest = admin.get(f"/webhooks/{hook}/deliveries", limit=2, cursor=first["next_cursor"]).json()
    assert [d["event_id"] for d in rest["items"]] == events[:1]
    assert rest["next_cursor"] is None
    error_of(admin.get(f"/webhooks/{hook}/deliveries", limit=0), 422, "validation_error")
    error_of(admin.get(f"/webhooks/{hook}/deliveries", cursor="bogus"), 422, "invalid_cursor")


def test_subscribed_webhooks_receive_notified_events(
    system: bootstrap.Punctual, admin: Api, receiver: Receiver
) -> None:
    """``notify`` writes the outbox rows the deliveries page shows, by subscription."""
    regressions = create(admin, receiver.url, events=["regression"])["id"]
    everything = create(admin, receiver.url)["id"]
    failures = create(admin, receiver.url, events=["start_failed"])["id"]
    now = system.services.clock.now()
    event = NotificationEvent(TENANT, "regression", "Score fell", "nightly: score fell")
    with system.store.transaction() as tx:
        event_id = notify(system.services, tx, event, "root", now)
    assert [d["event_id"] for d in deliveries(admin, regressions)] == [event_id]
    assert [d["event_id"] for d in deliveries(admin, everything)] == [event_id]
    assert deliveries(admin, failures) == []


# --------------------------------------------------------------------------- typed client


def test_the_typed_client_manages_webhooks_over_http(
    system: bootstrap.Punctual, local_sender: HttpWebhookSender, receiver: Receiver
) -> None:
    root = identity.ensure_member_token(system.services, TENANT, "root", Role.ADMIN)
    alice = identity.ensure_member_token(system.services, TENANT, "alice", Role.MEMBER)
    with (
        serving(system.http_app()) as url,
        PunctualClient(url, root.token, TENANT) as client,
        PunctualClient(url, alice.token, TENANT) as member_client,
    ):
        hook = client.create_webhook(
            idempotency_key="c-1", url=receiver.url, events=["regression"], secret=SECRET
        )
        assert set(hook.raw) == WEBHOOK_FIELDS and hook.url.endswith("/…")
        assert client.list_webhooks().items == [hook]
        kept = client.update_webhook(hook.id, idempotency_key="u-1", events=None)
        assert kept.events == [] and kept.url == hook.url
        assert stored_secret(system, hook.id) == SECRET, "a secret not given is kept"
        client.update_webhook(hook.id, idempotency_key="u-2", secret=None)
        assert stored_secret(system, hook.id) is None
        queued = client.test_webhook(hook.id, idempotency_key="t-1")
        assert queued.status == "queued"
        (delivery,) = client.list_deliveries(hook.id).items
        assert delivery.event_id == queued.event_id
        again = client.redeliver(hook.id, delivery.id, idempotency_key="r-1")
        assert again.event_id == queued.event_id
        assert len(client.list_deliveries(hook.id, limit=1).items) == 1
        with pytest.raises(ApiError) as refused:
            member_client.list_webhooks()
        assert (refused.value.status, refused.value.code) == (403, "forbidden")
        client.delete_webhook(hook.id, idempotency_key="d-1")
        with pytest.raises(ApiError) as gone:
            client.list_deliveries(hook.id)
        assert gone.value.code == "not_found"


# --------------------------------------------------------------------------- OpenAPI


def test_openapi_names_the_webhook_and_notification_schemas(system: bootstrap.Punctual) -> None:
    document = system.http_app().openapi()
    schemas = document["components"]["schemas"]
    for name in ("Webhook", "WebhookPage", "Delivery", "DeliveryPage", "Notification", "Error"):
        assert name in schemas, name
    assert set(schemas["Delivery"]["properties"]) == DELIVERY_FIELDS
    assert set(schemas["Webhook"]["properties"]) == WEBHOOK_FIELDS
    paths = document["paths"]
    create_op = paths["/v1/tenants/{tenant}/webhooks"]["post"]
    assert create_op["responses"]["201"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Webhook"
    }
    for status in ("401", "403", "422"):
        schema = create_op["responses"][status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/Error"}, status
    ref = create_op["requestBody"]["content"]["application/json"]["schema"]
    assert ref == {"$ref": "#/components/schemas/CreateWebhookBody"}
    body = schemas["CreateWebhookBody"]
    assert set(body["properties"]) == {"url", "events", "secret"}
    listed = paths["/v1/tenants/{tenant}/webhooks/{webhook_id}/deliveries"]["get"]
    assert listed["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/DeliveryPage"
    }
