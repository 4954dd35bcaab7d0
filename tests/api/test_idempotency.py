"""Idempotency keys through HTTP on both stores (API.md "Conventions", SPEC OS-4, OS-5).

A key belongs to (tenant, principal, key); the fingerprint is method, route, path
parameters, query and canonical JSON body. Decided outcomes (2xx, deterministic 4xx)
are replayed verbatim; 503 and 5xx are not recorded, so a retry can still succeed.
The bounded wait (202 in_progress) is tested elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.errors import Unavailable
from punctual.usecases.tenancy import identity
from tests.support.api import Api, echo_start, future, in_process, member_api, register_demo

STARTS = "/v1/tenants/acme/scheduled-starts"


class Response(Protocol):
    """What the tests read from a response (the TestClient's and httpx's alike)."""

    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...

    def json(self, **kwargs: Any) -> Any: ...


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    register_demo(system)
    with in_process(system) as test_client:
        yield test_client


def error_of(response: Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    details: dict[str, Any] = body["error"]["details"]
    return details


def post_raw(
    client: TestClient, path: str, token: str, key: str | bytes | None, content: bytes
) -> Response:
    headers: dict[bytes, bytes] = {
        b"Authorization": f"Bearer {token}".encode(),
        b"Content-Type": b"application/json",
    }
    if key is not None:
        headers[b"Idempotency-Key"] = key if isinstance(key, bytes) else key.encode()
    return client.post(path, headers=headers, content=content)


def start_count(api: Api) -> int:
    return len(api.get("/scheduled-starts", limit=100).json()["items"])


def test_same_key_and_body_replays_status_and_body(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    body = echo_start()
    first = api.post("/scheduled-starts", body, key="k-same")
    assert first.status_code == 201, first.text
    for _ in range(2):
        replay = api.post("/scheduled-starts", body, key="k-same")
        assert replay.status_code == 201, replay.text
        assert replay.json() == first.json()
    assert start_count(api) == 1

    start = first.json()
    cancel = {"version": 1, "reason": "changed my mind"}
    canceled = api.post(f"/scheduled-starts/{start['id']}/cancel", cancel, key="k-cancel")
    assert canceled.status_code == 200, canceled.text
    replay = api.post(f"/scheduled-starts/{start['id']}/cancel", cancel, key="k-cancel")
    assert replay.status_code == 200, replay.text
    assert replay.json() == canceled.json()
    assert replay.json()["version"] == 2


def test_replay_uses_canonical_json(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    body = echo_start(attributes={"b": "2", "a": "1"})
    compact = json.dumps(body, separators=(",", ":")).encode()
    reordered = json.dumps(dict(reversed(list(body.items()))), indent=4, sort_keys=False)
    spaced = ("\n  " + reordered.replace(": ", " :  ") + "\n\n").encode()
    assert json.loads(spaced) == body and spaced != compact

    first = post_raw(client, STARTS, api.token, "k-canon", compact)
    assert first.status_code == 201, first.text
    replay = post_raw(client, STARTS, api.token, "k-canon", spaced)
    assert replay.status_code == 201, replay.text
    assert replay.json() == first.json()
    assert start_count(api) == 1


def test_same_key_different_body_is_reused(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    body = echo_start()
    first = api.post("/scheduled-starts", body, key="k-reuse")
    assert first.status_code == 201, first.text
    variants = [
        {**body, "business_request_id": "req-2"},
        {**body, "input": {"message": "other"}},
        {**body, "start_at": future(7200)},
        {**body, "attributes": {}},  # the default, but a different body
    ]
    for variant in variants:
        error_of(
            api.post("/scheduled-starts", variant, key="k-reuse"), 409, "idempotency_key_reused"
        )
    # The conflict changed nothing: the original still replays, nothing new was created.
    replay = api.post("/scheduled-starts", body, key="k-reuse")
    assert replay.status_code == 201, replay.text
    assert replay.json() == first.json()
    assert start_count(api) == 1


def test_same_key_different_query_is_reused(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    body = echo_start()
    first = api.post("/scheduled-starts", body, key="k-query")
    assert first.status_code == 201, first.text
    error_of(
        api.post("/scheduled-starts", body, key="k-query", dry_run="1"),
        409,
        "idempotency_key_reused",
    )
    assert start_count(api) == 1
    # The same query again is the same request.
    second = api.post("/scheduled-starts", body, key="k-query2", note="x")
    assert second.status_code == 201, second.text
    replay = api.post("/scheduled-starts", body, key="k-query2", note="x")
    assert replay.json() == second.json()
    error_of(
        api.post("/scheduled-starts", body, key="k-query2", note="y"), 409, "idempotency_key_reused"
    )


def test_same_key_on_another_route_or_resource_is_reused(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    one = api.post("/scheduled-starts", echo_start()).json()
    two = api.post("/scheduled-starts", echo_start()).json()
    canceled = api.post(f"/scheduled-starts/{one['id']}/cancel", {"version": 1}, key="k-path")
    assert canceled.status_code == 200, canceled.text
    # Another path parameter (another start) ...
    error_of(
        api.post(f"/scheduled-starts/{two['id']}/cancel", {"version": 1}, key="k-path"),
        409,
        "idempotency_key_reused",
    )
    # ... another route with the same body ...
    error_of(
        api.post(f"/scheduled-starts/{one['id']}/reschedule", {"version": 1}, key="k-path"),
        409,
        "idempotency_key_reused",
    )
    # ... another method and route.
    error_of(
        api.post("/scheduled-starts", echo_start(), key="k-path"), 409, "idempotency_key_reused"
    )
    assert api.get(f"/scheduled-starts/{two['id']}").json()["state"] == "scheduled"
    assert start_count(api) == 2


def test_keys_are_per_principal(system: bootstrap.Punctual, client: TestClient) -> None:
    alice = member_api(system, client, "acme", "alice")
    bob = member_api(system, client, "acme", "bob")
    body = echo_start()
    by_alice = alice.post("/scheduled-starts", body, key="shared-key")
    by_bob = bob.post("/scheduled-starts", body, key="shared-key")
    assert by_alice.status_code == by_bob.status_code == 201
    assert by_alice.json()["id"] != by_bob.json()["id"]
    assert by_alice.json()["created_by"] == "alice"
    assert by_bob.json()["created_by"] == "bob"
    # Bob may also use the key for a different request: it is not alice's.
    other = bob.post("/scheduled-starts", {**body, "business_request_id": "x"}, key="alice-key")
    assert other.status_code == 201, other.text
    mine = alice.post("/scheduled-starts", body, key="alice-key")
    assert mine.status_code == 201, mine.text
    assert alice.post("/scheduled-starts", body, key="shared-key").json() == by_alice.json()
    assert bob.post("/scheduled-starts", body, key="shared-key").json() == by_bob.json()
    assert start_count(alice) == 4


def test_keys_are_per_tenant(system: bootstrap.Punctual, client: TestClient) -> None:
    acme = member_api(system, client, "acme", "alice")
    globex = member_api(system, client, "globex", "alice")
    body = echo_start()
    in_acme = acme.post("/scheduled-starts", body, key="tenant-key")
    in_globex = globex.post("/scheduled-starts", body, key="tenant-key")
    assert in_acme.status_code == in_globex.status_code == 201
    assert in_acme.json()["tenant"] == "acme"
    assert in_globex.json()["tenant"] == "globex"
    assert in_acme.json()["id"] != in_globex.json()["id"]
    assert start_count(acme) == 1 and start_count(globex) == 1


def test_key_belongs_to_the_principal_not_the_token(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    body = echo_start()
    first = api.post("/scheduled-starts", body, key="k-token")
    assert first.status_code == 201, first.text
    second_token = identity.ensure_member_token(system.services, "acme", "alice", Role.MEMBER)
    again = Api(client, second_token.token, "acme")
    replay = again.post("/scheduled-starts", body, key="k-token")
    assert replay.status_code == 201, replay.text
    assert replay.json() == first.json()
    assert start_count(api) == 1


def test_recorded_4xx_is_replayed_even_when_the_request_would_now_succeed(
    system: bootstrap.Punctual,
) -> None:
    with in_process(system) as client:
        api = member_api(system, client)
        body = echo_start()
        first = api.post("/scheduled-starts", body, key="k-early")
        error_of(first, 422, "unknown_workflow")
        register_demo(system)  # now the workflow exists
        replay = api.post("/scheduled-starts", body, key="k-early")
        assert replay.status_code == 422
        assert replay.json() == first.json()
        assert start_count(api) == 0
        fresh = api.post("/scheduled-starts", body, key="k-late")
        assert fresh.status_code == 201, fresh.text


@pytest.mark.parametrize(
    ("overrides", "status", "code"),
    [
        ({"start_at": future(-60)}, 422, "start_at_in_past"),
        ({"colour": "red"}, 422, "validation_error"),
        ({"task_queue": "q"}, 422, "host_owned_field"),
        ({"workload_class": "gpu"}, 403, "workload_class_not_allowed"),
    ],
    ids=["start_at_in_past", "validation_error", "host_owned_field", "class_not_allowed"],
)
def test_deterministic_4xx_is_recorded_and_replayed(
    system: bootstrap.Punctual,
    client: TestClient,
    overrides: dict[str, Any],
    status: int,
    code: str,
) -> None:
    api = member_api(system, client)
    body = echo_start(**overrides)
    first = api.post("/scheduled-starts", body, key="k-4xx")
    error_of(first, status, code)
    replay = api.post("/scheduled-starts", body, key="k-4xx")
    assert replay.status_code == status
    assert replay.json() == first.json()
    # A corrected request needs a new key: this one is bound to the refused request.
    error_of(
        api.post("/scheduled-starts", echo_start(), key="k-4xx"), 409, "idempotency_key_reused"
    )
    assert start_count(api) == 0


def test_recorded_409_and_403_are_replayed(system: bootstrap.Punctual, client: TestClient) -> None:
    alice = member_api(system, client, "acme", "alice")
    bob = member_api(system, client, "acme", "bob")
    start = alice.post("/scheduled-starts", echo_start()).json()
    sid = start["id"]
    forbidden = bob.post(f"/scheduled-starts/{sid}/cancel", {"version": 1}, key="k-bob")
    error_of(forbidden, 403, "forbidden")
    stale = alice.post(f"/scheduled-starts/{sid}/cancel", {"version": 5}, key="k-stale")
    assert error_of(stale, 409, "version_conflict")["current_version"] == 1
    assert bob.post(f"/scheduled-starts/{sid}/cancel", {"version": 1}, key="k-bob").json() == (
        forbidden.json()
    )
    assert alice.post(f"/scheduled-starts/{sid}/cancel", {"version": 5}, key="k-stale").json() == (
        stale.json()
    )
    assert alice.get(f"/scheduled-starts/{sid}").json() == start


def test_503_is_not_recorded_and_a_retry_succeeds(
    system: bootstrap.Punctual, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = member_api(system, client)
    codec = system.services.codec
    original: Callable[..., Any] = codec.encrypt
    calls = {"n": 0}

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise Unavailable("the key store is briefly unreachable", code="store_unavailable")
        return original(*args, **kwargs)

    monkeypatch.setattr(codec, "encrypt", flaky)
    body = echo_start()
    failed = api.post("/scheduled-starts", body, key="k-503")
    error_of(failed, 503, "store_unavailable")
    assert start_count(api) == 0
    retry = api.post("/scheduled-starts", body, key="k-503")
    assert retry.status_code == 201, retry.text
    replay = api.post("/scheduled-starts", body, key="k-503")
    assert replay.status_code == 201
    assert replay.json() == retry.json()
    # The failed request and the retry each sealed the input once. On PostgreSQL a create
    # seals before its one round trip can tell it the key is a replay, so the replay seals
    # a copy that is thrown away; nothing is created or recorded again either way.
    assert calls["n"] == (3 if system.store.creates_in_one_trip else 2)
    assert start_count(api) == 1


def test_500_is_not_recorded_and_a_retry_succeeds(
    system: bootstrap.Punctual, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = member_api(system, client)
    codec = system.services.codec
    original: Callable[..., Any] = codec.encrypt
    calls = {"n": 0}

    def broken_once(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("boom-internal-detail")
        return original(*args, **kwargs)

    monkeypatch.setattr(codec, "encrypt", broken_once)
    body = echo_start()
    failed = api.post("/scheduled-starts", body, key="k-500")
    error_of(failed, 500, "internal_error")
    assert "boom-internal-detail" not in failed.text
    retry = api.post("/scheduled-starts", body, key="k-500")
    assert retry.status_code == 201, retry.text
    assert start_count(api) == 1


@pytest.mark.parametrize(
    "key",
    ["k" * 256, "has space", " leading", "tab\tkey", "clé".encode(), "x" * 1000],
    ids=["256-chars", "space", "leading-space", "tab", "non-ascii", "1000-chars"],
)
def test_malformed_idempotency_key_is_400(
    system: bootstrap.Punctual, client: TestClient, key: str | bytes
) -> None:
    api = member_api(system, client)
    body = json.dumps(echo_start()).encode()
    details = error_of(
        post_raw(client, STARTS, api.token, key, body), 400, "idempotency_key_required"
    )
    assert isinstance(details, dict)
    assert start_count(api) == 0


@pytest.mark.parametrize("key", ["k" * 255, "a", "!~#$%&'*+-.^_`|", "Z9"])
def test_visible_ascii_keys_up_to_255_are_accepted(
    system: bootstrap.Punctual, client: TestClient, key: str
) -> None:
    api = member_api(system, client)
    body = json.dumps(echo_start()).encode()
    first = post_raw(client, STARTS, api.token, key, body)
    assert first.status_code == 201, first.text
    replay = post_raw(client, STARTS, api.token, key, body)
    assert replay.status_code == 201
    assert replay.json() == first.json()


def test_token_secret_is_not_replayed(system: bootstrap.Punctual, client: TestClient) -> None:
    member_api(system, client, "acme", "alice")
    admin = member_api(system, client, "acme", "root", Role.ADMIN)
    created = admin.post("/tokens", {"subject": "alice"}, key="k-token-create")
    assert created.status_code == 201, created.text
    token = created.json()
    assert isinstance(token["token"], str) and token["token"]
    replay = admin.post("/tokens", {"subject": "alice"}, key="k-token-create")
    assert replay.status_code == 201, replay.text
    assert replay.json() == {**token, "token": None}
    # The replay issued nothing new, and the secret shown once works.
    fresh = Api(client, token["token"], "acme")
    assert fresh.get("/scheduled-starts").status_code == 200
    listed = admin.get("/tokens", limit=100).json()["items"]
    assert [t["id"] for t in listed].count(token["id"]) == 1
    assert all("token" not in item for item in listed)
