"""Members and bearer tokens through HTTP, on both stores (SEC-1, SEC-5, API.md "Conventions",
"Definitions, tenant, members, tokens, health, notifications")."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import httpx2
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.domain.permissions import Role
from punctual.settings import Settings
from punctual.usecases.tenancy import identity
from tests.conftest import FakeClock
from tests.support.api import Api, in_process, member_api

Response = httpx.Response | httpx2.Response
"""What the in-process TestClient (httpx2) or a real httpx client returns."""

TENANT = "acme"


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
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


def as_token(api: Api, token: str) -> Api:
    return Api(api.client, token, api.tenant)


def error_code(response: Response) -> str:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) >= {"code", "message", "details"}, body
    code: str = body["error"]["code"]
    return code


def assert_unauthenticated(response: Response) -> None:
    assert response.status_code == 401, response.text
    assert error_code(response) == "unauthenticated"


def assert_forbidden(response: Response) -> None:
    assert response.status_code == 403, response.text
    assert error_code(response) == "forbidden"


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def create_token(admin: Api, subject: str, **extra: Any) -> dict[str, Any]:
    response = admin.post("/tokens", {"subject": subject, **extra})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def all_token_items(api: Api) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor is not None:
            params["cursor"] = cursor
        response = api.get("/tokens", **params)
        assert response.status_code == 200, response.text
        page = response.json()
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


# --- members -------------------------------------------------------------------------------


def test_admin_adds_a_member_who_then_acts_with_that_role(admin: Api) -> None:
    added = admin.post("/members", {"subject": "bob", "role": "viewer"})
    assert added.status_code == 201, added.text
    assert added.json()["subject"] == "bob"
    assert added.json()["role"] == "viewer"

    issued = create_token(admin, "bob")
    bob = as_token(admin, issued["token"])
    assert bob.get("/definitions").status_code == 200
    # bob is a viewer: the role the admin gave decides what the token may do.
    assert_forbidden(bob.post("/members", {"subject": "eve", "role": "admin"}))

    promoted = admin.post("/members", {"subject": "bob", "role": "admin"})
    assert promoted.status_code == 201, promoted.text
    assert bob.post("/members", {"subject": "eve", "role": "member"}).status_code == 201


@pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER])
def test_only_admins_add_members(
    system: bootstrap.Punctual, client: TestClient, role: Role
) -> None:
    api = member_api(system, client, TENANT, "someone", role)
    assert_forbidden(api.post("/members", {"subject": "mallory", "role": "admin"}))
    assert_forbidden(api.post("/members", {"subject": "someone", "role": "admin"}))
    with system.store.transaction(readonly=True) as tx:
        assert tx.identity.member_role(TENANT, "mallory") is None
        assert tx.identity.member_role(TENANT, "someone") is role


@pytest.mark.parametrize(
    "body", [{"subject": "bob", "role": "owner"}, {"subject": "", "role": "member"}, {"role": "x"}]
)
def test_invalid_member_bodies_are_422(admin: Api, body: dict[str, Any]) -> None:
    response = admin.post("/members", body)
    assert response.status_code == 422, response.text
    assert error_code(response) == "validation_error"


def test_removing_a_member_revokes_its_tokens(admin: Api, member: Api) -> None:
    assert member.get("/definitions").status_code == 200
    second = create_token(admin, "alice")
    removed = admin.delete("/members/alice")
    assert removed.status_code == 204, removed.text
    assert removed.content == b""
    assert_unauthenticated(member.get("/definitions"))
    assert_unauthenticated(as_token(member, second["token"]).get("/definitions"))
    listed = {item["id"]: item for item in all_token_items(admin)}
    assert listed[second["id"]]["revoked"] is True
    # Re-adding the member later does not bring its old tokens back.
    assert admin.post("/members", {"subject": "alice", "role": "member"}).status_code == 201
    assert_unauthenticated(member.get("/definitions"))


def test_removing_an_unknown_member_is_404(admin: Api) -> None:
    response = admin.delete("/members/nobody")
    assert response.status_code == 404, response.text
    assert error_code(response) == "not_found"


@pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER])
def test_only_admins_remove_members(
    system: bootstrap.Punctual, client: TestClient, admin: Api, role: Role
) -> None:
    api = member_api(system, client, TENANT, "someone", role)
    assert_forbidden(api.delete("/members/root"))
    assert admin.get("/definitions").status_code == 200


# --- tokens ---------------------------------------------------------------------------------


def test_created_token_is_shown_once_and_authenticates_as_its_subject(
    system: bootstrap.Punctual, admin: Api
) -> None:
    assert admin.post("/members", {"subject": "carol", "role": "member"}).status_code == 201
    response = admin.post("/tokens", {"subject": "carol"}, key="token-for-carol")
    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) >= {"id", "token", "subject", "expires_at"}
    assert body["subject"] == "carol"
    assert body["expires_at"] is None
    token = body["token"]
    assert isinstance(token, str)
    # >= 256 bits of randomness: 32 random bytes are at least 43 url-safe characters.
    assert len(token) >= 43

    with system.store.transaction(readonly=True) as tx:
        principal = tx.identity.principal_for_digest(
            identity.digest(token), system.services.clock.now()
        )
    assert principal is not None
    assert (principal.tenant, principal.subject, principal.role) == (TENANT, "carol", Role.MEMBER)
    assert as_token(admin, token).get("/definitions").status_code == 200

    replay = admin.post("/tokens", {"subject": "carol"}, key="token-for-carol")
    assert replay.status_code == 201, replay.text
    assert replay.json()["id"] == body["id"]
    assert replay.json().get("token") != token, "the secret must be shown only once"
    assert token not in replay.text


def test_two_tokens_differ(admin: Api) -> None:
    first = create_token(admin, "root")
    second = create_token(admin, "root")
    assert first["token"] != second["token"]
    assert first["id"] != second["id"]


def test_token_with_future_expiry_is_reported(admin: Api) -> None:
    expires = datetime.now(UTC).replace(microsecond=0) + timedelta(days=7)
    body = create_token(admin, "root", expires_at=iso(expires))
    assert body["expires_at"].endswith("Z")
    assert datetime.fromisoformat(body["expires_at"]) == expires
    listed = {item["id"]: item for item in all_token_items(admin)}
    assert datetime.fromisoformat(listed[body["id"]]["expires_at"]) == expires
    assert as_token(admin, body["token"]).get("/definitions").status_code == 200


@pytest.mark.parametrize("offset", [timedelta(hours=-1), timedelta(0)])
def test_token_expiring_in_the_past_is_422(admin: Api, offset: timedelta) -> None:
    expires = datetime.now(UTC) + offset
    response = admin.post("/tokens", {"subject": "root", "expires_at": iso(expires)})
    assert response.status_code == 422, response.text
    assert error_code(response) == "validation_error"


def test_token_for_unknown_subject_is_refused(admin: Api) -> None:
    response = admin.post("/tokens", {"subject": "ghost"})
    assert response.status_code in (404, 422), response.text


@pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER])
def test_only_admins_create_list_and_revoke_tokens(
    system: bootstrap.Punctual, client: TestClient, admin: Api, role: Role
) -> None:
    api = member_api(system, client, TENANT, "someone", role)
    assert_forbidden(api.post("/tokens", {"subject": "root"}))
    assert_forbidden(api.get("/tokens"))
    root_token = create_token(admin, "root")
    assert_forbidden(api.delete(f"/tokens/{root_token['id']}"))
    assert as_token(admin, root_token["token"]).get("/definitions").status_code == 200


def test_token_list_has_no_secrets(system: bootstrap.Punctual, admin: Api, member: Api) -> None:
    issued = [create_token(admin, "alice") for _ in range(3)]
    items = all_token_items(admin)
    ids = [item["id"] for item in items]
    assert len(ids) == len(set(ids)), "paging must not repeat items"
    assert {i["id"] for i in issued} <= set(ids)
    # root's and alice's tokens from the fixtures are listed too (their ids are not empty).
    assert len(items) >= 5
    secrets_seen = [i["token"] for i in issued] + [admin.token, member.token]
    digests = [identity.digest(s) for s in secrets_seen]
    for item in items:
        assert "token" not in item
        assert "digest" not in item
        assert {"id", "subject", "expires_at"} <= set(item)
    listing = str(items)
    for value in secrets_seen + digests:
        assert value not in listing


def test_revoked_token_is_401_and_revoking_twice_is_fine(admin: Api) -> None:
    assert admin.post("/members", {"subject": "dave", "role": "member"}).status_code == 201
    issued = create_token(admin, "dave")
    dave = as_token(admin, issued["token"])
    assert dave.get("/definitions").status_code == 200

    first = admin.delete(f"/tokens/{issued['id']}")
    assert first.status_code == 204, first.text
    assert_unauthenticated(dave.get("/definitions"))
    assert_unauthenticated(dave.post("/members", {"subject": "x", "role": "viewer"}))

    again = admin.delete(f"/tokens/{issued['id']}")  # a new key: a second, separate revoke
    assert again.status_code == 204, again.text
    assert_unauthenticated(dave.get("/definitions"))
    listed = {item["id"]: item for item in all_token_items(admin)}
    assert listed[issued["id"]]["revoked"] is True
    # The member itself is untouched: a new token works.
    assert as_token(admin, create_token(admin, "dave")["token"]).get(
        "/definitions"
    ).status_code == (200)


def test_revoking_an_unknown_token_is_404(admin: Api) -> None:
    response = admin.delete("/tokens/tok_doesnotexist")
    assert response.status_code == 404, response.text
    assert error_code(response) == "not_found"


def test_admin_can_revoke_its_own_token(admin: Api) -> None:
    listed = all_token_items(admin)
    own = [i for i in listed if i["subject"] == "root"]
    assert len(own) == 1
    assert admin.delete(f"/tokens/{own[0]['id']}").status_code == 204
    assert_unauthenticated(admin.get("/definitions"))


# --- authentication -------------------------------------------------------------------------


def _raw(client: TestClient, method: str, path: str, headers: dict[str, str]) -> Response:
    body = {"subject": "x", "role": "viewer"} if method == "POST" else None
    return client.request(method, path, headers=headers, json=body)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", f"/v1/tenants/{TENANT}/definitions"),
        ("GET", f"/v1/tenants/{TENANT}/tokens"),
        ("GET", f"/v1/tenants/{TENANT}/health"),
        ("GET", f"/v1/tenants/{TENANT}/scheduled-starts"),
        ("GET", f"/v1/tenants/{TENANT}/runs"),
        ("POST", f"/v1/tenants/{TENANT}/members"),
    ],
)
def test_missing_garbage_and_basic_auth_are_401(
    client: TestClient, admin: Api, method: str, path: str
) -> None:
    basic = base64.b64encode(f"root:{admin.token}".encode()).decode()
    variants = [
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer "},
        {"Authorization": "Bearer garbage"},
        {"Authorization": f"Bearer {secrets.token_urlsafe(32)}"},
        {"Authorization": f"Bearer {admin.token}x"},
        {"Authorization": f"Bearer {identity.digest(admin.token)}"},
        {"Authorization": f"Basic {basic}"},
        {"Authorization": admin.token},
        {"Authorization": f"Token {admin.token}"},
    ]
    for headers in variants:
        response = _raw(client, method, path, {**headers, "Idempotency-Key": secrets.token_hex(8)})
        assert_unauthenticated(response)
        assert response.headers.get("www-authenticate", "").lower().startswith("bearer")
    good = _raw(
        client,
        method,
        path,
        {"Authorization": f"Bearer {admin.token}", "Idempotency-Key": secrets.token_hex(8)},
    )
    assert good.status_code in (200, 201), good.text


def test_mutation_without_auth_is_401_even_without_idempotency_key(client: TestClient) -> None:
    response = client.post(f"/v1/tenants/{TENANT}/members", json={"subject": "x", "role": "admin"})
    assert_unauthenticated(response)


def test_authentication_is_checked_before_query_validation(client: TestClient) -> None:
    """API.md check order: authentication comes before validation, so a caller without a
    token learns nothing about the request's shape."""
    for path in ("/tokens", "/scheduled-starts", "/runs"):
        response = client.get(f"/v1/tenants/{TENANT}{path}", params={"limit": 0})
        assert_unauthenticated(response)


# --- token storage --------------------------------------------------------------------------


def _all_rows(system: bootstrap.Punctual) -> dict[str, list[dict[str, Any]]]:
    with system.store.engine.connect() as conn:
        return {
            table.name: [dict(row) for row in conn.execute(sa.select(table)).mappings()]
            for table in t.metadata.sorted_tables
        }


def test_tokens_are_stored_only_as_sha256_digests(
    system: bootstrap.Punctual, admin: Api, member: Api
) -> None:
    issued = create_token(admin, "alice", expires_at=iso(datetime.now(UTC) + timedelta(days=1)))
    known = {admin.token, member.token, issued["token"]}
    with system.store.engine.connect() as conn:
        rows = conn.execute(sa.select(t.tokens)).mappings().all()
    assert len(rows) == 3
    hexdigest = re.compile(r"^[0-9a-f]{64}$")
    for row in rows:
        assert hexdigest.fullmatch(row["digest"]), row["digest"]
    assert {row["digest"] for row in rows} == {
        hashlib.sha256(token.encode()).hexdigest() for token in known
    }
    # No table anywhere (the recorded idempotent answer included) holds a secret.
    dump = repr(_all_rows(system))
    for token in known:
        assert token not in dump


# --- expiry with a controlled clock ---------------------------------------------------------


@pytest.fixture
def clocked(settings: Settings) -> Iterator[tuple[bootstrap.Punctual, FakeClock]]:
    clock = FakeClock()
    built = bootstrap.build(settings, clock=clock)
    yield built, clock
    built.close()


def test_token_stops_working_when_it_expires(
    clocked: tuple[bootstrap.Punctual, FakeClock],
) -> None:
    system, clock = clocked
    with in_process(system) as client:
        admin = member_api(system, client, TENANT, "root", Role.ADMIN)
        through_api = create_token(admin, "root", expires_at=iso(clock.now() + timedelta(hours=1)))
        with system.store.transaction() as tx:
            direct = identity.issue_token(
                tx, TENANT, "root", clock.now(), clock.now() + timedelta(minutes=10)
            )
        short = as_token(admin, direct.token)
        long = as_token(admin, through_api["token"])
        assert short.get("/definitions").status_code == 200
        assert long.get("/definitions").status_code == 200

        clock.advance(10 * 60 - 1)
        assert short.get("/definitions").status_code == 200
        clock.advance(1)  # expires_at is exclusive: at the instant, the token is dead
        assert_unauthenticated(short.get("/definitions"))
        assert long.get("/definitions").status_code == 200

        clock.advance(3600)
        assert_unauthenticated(long.get("/definitions"))
        # The non-expiring admin token is unaffected by time.
        assert admin.get("/definitions").status_code == 200
        # An expiry in the past relative to the (fake) server clock is refused.
        late = admin.post("/tokens", {"subject": "root", "expires_at": iso(clock.now())})
        assert late.status_code == 422, late.text
