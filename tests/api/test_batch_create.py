"""Batch create through HTTP on both stores (SPEC OS-11, API.md "Batch create").

Each item is decided exactly as ``POST …/scheduled-starts`` with its ``idempotency_key``
as the ``Idempotency-Key`` header and the rest as the body: the same fingerprint, so the
two routes replay each other; one item's refusal leaves the others alone; quota is
decided per item, in request order. A malformed envelope is one whole-request 422 that
changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.adapters.http.edge import canonical_json, fingerprint_of
from punctual.adapters.http.routes.starts import CREATE_ROUTE
from punctual.adapters.stores.sql import tables as t
from punctual.client import PunctualClient
from punctual.domain.permissions import Role
from punctual.usecases.tenancy import identity
from tests.conftest import make_settings
from tests.support.api import Api, echo_start, in_process, member_api, register_demo
from tests.support.server import serving

BATCH = "/scheduled-starts/batch"


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    register_demo(system)
    with in_process(system) as test_client:
        yield test_client


def batch(api: Api, items: list[dict[str, Any]], **headers: str) -> list[dict[str, Any]]:
    response = api.client.post(
        api.path(BATCH), headers={**api.headers(), **headers}, json={"items": items}
    )
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"items"}
    answers: list[dict[str, Any]] = response.json()["items"]
    assert len(answers) == len(items)
    return answers


def item(key: str, **overrides: Any) -> dict[str, Any]:
    return {"idempotency_key": key, **echo_start(**{"business_request_id": key, **overrides})}


def single(api: Api, batch_item: dict[str, Any]) -> Any:
    """The single create a batch item stands for."""
    body = {k: v for k, v in batch_item.items() if k != "idempotency_key"}
    return api.post("/scheduled-starts", body, key=batch_item["idempotency_key"])


def rows(system: bootstrap.Punctual, table: sa.Table, tenant: str = "acme") -> int:
    with system.store.engine.connect() as conn:
        query = sa.select(sa.func.count()).select_from(table).where(table.c.tenant == tenant)
        return int(conn.execute(query).scalar_one())


def test_items_are_created_and_answered_in_request_order(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    items = [item(f"k-{n}", input={"message": f"m{n}"}) for n in range(5)]
    answers = batch(api, items)
    assert [a["status"] for a in answers] == [201] * 5
    assert [a["body"]["business_request_id"] for a in answers] == [f"k-{n}" for n in range(5)]
    for answer in answers:
        assert answer["body"]["state"] == "scheduled"
        assert answer["body"]["version"] == 1
        assert answer["body"]["created_by"] == "alice"
        assert "input" not in answer["body"]
        assert api.get(f"/scheduled-starts/{answer['body']['id']}").json() == answer["body"]
    assert rows(system, t.starts) == 5


def test_replay_across_the_two_routes(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    first, second = item("k-single-first"), item("k-batch-first")
    created = single(api, first)
    assert created.status_code == 201, created.text
    answers = batch(api, [first, second])
    assert answers[0] == {"status": 201, "body": created.json()}
    assert answers[1]["status"] == 201
    # The batch item, replayed through the single route, and both through the batch again.
    replayed = single(api, second)
    assert replayed.status_code == 201
    assert replayed.json() == answers[1]["body"]
    assert batch(api, [second, first]) == [answers[1], answers[0]]
    assert rows(system, t.starts) == 2


def test_a_recorded_error_replays_across_the_two_routes(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    bad = item("k-bad", input={"unexpected": 1})
    refused = single(api, bad)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "input_invalid"
    assert batch(api, [bad]) == [{"status": 422, "body": refused.json()}]
    late = item("k-bad-in-batch", workload_class="secret")
    [answer] = batch(api, [late])
    assert answer["status"] == 403
    again = single(api, late)
    assert (again.status_code, again.json()) == (403, answer["body"])


def test_a_changed_body_is_refused_per_item(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    original = [item("k-1"), item("k-2")]
    created = batch(api, original)
    changed = {**original[1], "business_request_id": "changed"}
    fresh = item("k-3")
    answers = batch(api, [original[0], changed, fresh])
    assert answers[0] == created[0]
    assert answers[1]["status"] == 409
    assert answers[1]["body"]["error"]["code"] == "idempotency_key_reused"
    assert answers[2]["status"] == 201
    # A changed body sent to the single route is refused too, and the key keeps its record.
    reused = single(api, {**original[0], "input": {"message": "other"}})
    assert reused.status_code == 409
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    assert batch(api, original) == created
    assert rows(system, t.starts) == 3


@pytest.fixture
def limited(database_url: str, tmp_path: Path) -> Iterator[bootstrap.Punctual]:
    system = bootstrap.build(
        make_settings(database_url, tmp_path, tenant_defaults={"max_pending_starts": 3})
    )
    register_demo(system)
    yield system
    system.close()


def test_a_quota_hit_mid_batch_refuses_only_the_items_past_the_limit(
    limited: bootstrap.Punctual,
) -> None:
    with in_process(limited) as client:
        api = member_api(limited, client)
        assert single(api, item("k-0")).status_code == 201
        items = [item(f"k-{n}") for n in range(1, 5)]
        answers = batch(api, items)
        assert [a["status"] for a in answers] == [201, 201, 429, 429]
        for refused in answers[2:]:
            error = refused["body"]["error"]
            assert error["code"] == "quota_exceeded"
            assert error["details"] == {"limit": 3, "count": 3, "scope": "tenant"}
        assert rows(limited, t.starts) == 3
        # 429 is not recorded: once quota frees up, the same batch decides those items again.
        first = answers[0]["body"]
        canceled = api.post(
            f"/scheduled-starts/{first['id']}/cancel", {"version": first["version"]}
        )
        assert canceled.status_code == 200, canceled.text
        again = batch(api, items)
        assert again[:2] == answers[:2]
        assert [a["status"] for a in again] == [201, 201, 201, 429]
        assert again[3]["body"]["error"]["details"]["count"] == 3


def test_a_per_class_limit_refuses_only_that_class(database_url: str, tmp_path: Path) -> None:
    system = bootstrap.build(
        make_settings(
            database_url, tmp_path, tenant_defaults={"max_pending_by_class": {"batch": 1}}
        )
    )
    try:
        register_demo(system)
        with in_process(system) as client:
            api = member_api(system, client)
            answers = batch(
                api,
                [
                    item("k-b1", workload_class="batch"),
                    item("k-b2", workload_class="batch"),
                    item("k-s1"),
                ],
            )
        assert [a["status"] for a in answers] == [201, 429, 201]
        details = answers[1]["body"]["error"]["details"]
        assert details["scope"] == "workload_class"
        assert details["workload_class"] == "batch"
    finally:
        system.close()


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"items": {}}',
        b'{"items": []}',
        b'{"items": [{"workflow": "echo"}]}',
        b'{"items": [1]}',
        b'{"items": [{"idempotency_key": ""}]}',
        b'{"items": [{"idempotency_key": "has space"}]}',
        b'{"items": [], "extra": 1}',
        b'{"items": [{"idempotency_key": NaN}]}',
    ],
    ids=[
        "not-json",
        "not-an-object",
        "items-not-a-list",
        "no-items",
        "item-without-key",
        "item-not-an-object",
        "empty-key",
        "invalid-key",
        "extra-field",
        "nan",
    ],
)
def test_a_malformed_envelope_is_one_422_and_changes_nothing(
    system: bootstrap.Punctual, client: TestClient, body: bytes
) -> None:
    api = member_api(system, client)
    response = client.post(
        api.path(BATCH),
        headers={**api.headers(), "Content-Type": "application/json"},
        content=body,
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"
    assert response.json()["error"]["details"]["errors"]
    assert rows(system, t.starts) == 0
    assert rows(system, t.idempotency_keys) == 0


@pytest.mark.parametrize("problem", ["duplicate-key", "too-many", "one-bad-key"])
def test_an_envelope_refused_for_one_item_stores_none_of_the_others(
    system: bootstrap.Punctual, client: TestClient, problem: str
) -> None:
    api = member_api(system, client)
    items = [item(f"k-{n}") for n in range(3)]
    if problem == "duplicate-key":
        items.append(item("k-1"))
    elif problem == "too-many":
        items = [item(f"k-{n}") for n in range(501)]
    else:
        items.append({**item("k-x"), "idempotency_key": "x" * 256})
    response = client.post(api.path(BATCH), headers=api.headers(), json={"items": items})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"
    assert rows(system, t.starts) == 0
    assert rows(system, t.idempotency_keys) == 0
    # The keys are still free: the same item through the single route creates.
    assert single(api, items[0]).status_code == 201


def test_per_item_errors_do_not_affect_the_others(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    items = [
        item("k-ok-1"),
        item("k-invalid", input={"message": 1}),
        item("k-too-large", input={"message": "x" * 70_000}),
        item("k-class", workload_class="secret"),
        item("k-host-owned", task_queue="q"),
        item("k-unknown", workflow="nope"),
        item("k-past", start_at="2020-01-01T00:00:00Z"),
        item("k-naive", start_at="2036-01-01T00:00:00"),
        item("k-nul", business_request_id="a\x00b"),
        item("k-schema", attributes="not an object"),
        item("k-ok-2"),
    ]
    answers = batch(api, items)
    codes = [a["body"]["error"]["code"] if a["status"] >= 400 else a["status"] for a in answers]
    assert codes == [
        201,
        "input_invalid",
        "input_too_large",
        "workload_class_not_allowed",
        "host_owned_field",
        "unknown_workflow",
        "start_at_in_past",
        "start_at_not_timezone_aware",
        "validation_error",
        "validation_error",
        201,
    ]
    assert [a["status"] for a in answers] == [201, 422, 413, 403, 422, 422, 422, 422, 422, 422, 201]
    assert rows(system, t.starts) == 2
    # Each refusal is exactly what the single route answers for that key and body (replayed).
    for batch_item, answer in zip(items, answers, strict=True):
        replay = single(api, batch_item)
        assert (replay.status_code, replay.json()) == (answer["status"], answer["body"])
    assert rows(system, t.starts) == 2


def test_whole_request_refusals(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    viewer = member_api(system, client, subject="vera", role=Role.VIEWER)
    body = {"items": [item("k-1")]}
    assert client.post(api.path(BATCH), json=body).status_code == 401
    bad_token = client.post(api.path(BATCH), json=body, headers={"Authorization": "Bearer x"})
    assert bad_token.status_code == 401
    other = client.post("/v1/tenants/elsewhere" + BATCH, json=body, headers=api.headers())
    assert other.status_code == 404
    forbidden = client.post(viewer.path(BATCH), json=body, headers=viewer.headers())
    assert forbidden.status_code == 403
    assert forbidden.json()["error"]["code"] == "forbidden"
    assert rows(system, t.starts) == 0
    assert rows(system, t.idempotency_keys) == 0


def test_an_idempotency_key_header_is_ignored(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    first = batch(api, [item("k-1")], **{"Idempotency-Key": "header"})
    second = batch(api, [item("k-2")], **{"Idempotency-Key": "header"})
    assert [first[0]["status"], second[0]["status"]] == [201, 201]
    assert first[0]["body"]["id"] != second[0]["body"]["id"]


def test_an_item_in_flight_past_the_bounded_wait_is_202_and_the_rest_is_decided(
    database_url: str, tmp_path: Path
) -> None:
    """A key held in flight by another request (a committed claim with a live lease) is
    waited for, then answered 202; the other items are decided within the wait."""
    system = bootstrap.build(make_settings(database_url, tmp_path, api_wait_seconds=2))
    try:
        register_demo(system)
        with in_process(system) as client:
            api = member_api(system, client)
            held, free = item("k-held"), item("k-free")
            body = {k: v for k, v in held.items() if k != "idempotency_key"}
            fingerprint = fingerprint_of(
                "POST", CREATE_ROUTE, {"tenant": "acme"}, [], canonical_json(body)
            )
            now = system.services.clock.now()
            with system.store.transaction() as tx:
                assert tx.idempotency.try_claim(
                    "acme",
                    "alice",
                    "k-held",
                    fingerprint,
                    "other",
                    now + timedelta(seconds=60),
                    now,
                )
            began = time.monotonic()
            answers = batch(api, [held, free])
            waited = time.monotonic() - began
            assert answers[0] == {"status": 202, "body": {"status": "in_progress"}}
            assert answers[1]["status"] == 201
            assert 1.0 <= waited < 4
            assert rows(system, t.starts) == 1
    finally:
        system.close()


def test_a_batch_not_decided_within_the_bounded_wait_answers_202_and_carries_on(
    database_url: str, tmp_path: Path
) -> None:
    """The whole transaction is held up (another transaction holds the key row on
    PostgreSQL, the write lock on SQLite): every item is 202; the batch still commits, and
    the same batch again replays it."""
    system = bootstrap.build(make_settings(database_url, tmp_path, api_wait_seconds=1))
    try:
        register_demo(system)
        with in_process(system) as client:
            api = member_api(system, client)
            items = [item("k-1"), item("k-2")]
            holder = system.store.engine.connect()
            holder.info["readonly"] = False
            holder.begin()
            now = system.services.clock.now()
            holder.execute(
                t.idempotency_keys.insert().values(
                    tenant="acme", principal="alice", key="k-1", fingerprint="x",
                    state="in_flight", owner="holder", lease_until=now, created_at=now,
                )
            )  # fmt: skip
            try:
                answers = batch(api, items)
                assert answers == [{"status": 202, "body": {"status": "in_progress"}}] * 2
            finally:
                holder.rollback()
                holder.close()
            deadline = time.monotonic() + 10
            while (again := batch(api, items))[0]["status"] == 202:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert [a["status"] for a in again] == [201, 201]
            assert rows(system, t.starts) == 2
    finally:
        system.close()


def test_openapi_declares_the_batch_route_without_a_key_header(
    system: bootstrap.Punctual,
) -> None:
    document = system.http_app().openapi()
    operation = document["paths"]["/v1/tenants/{tenant}/scheduled-starts/batch"]["post"]
    headers = [p["name"] for p in operation.get("parameters", []) if p["in"] == "header"]
    assert "Idempotency-Key" not in headers
    assert operation["security"] == [{"bearer": []}]
    ref = operation["requestBody"]["content"]["application/json"]["schema"]
    assert ref == {"$ref": "#/components/schemas/BatchCreateBody"}
    schema = document["components"]["schemas"]["BatchCreateBody"]
    assert schema["properties"]["items"]["maxItems"] == 500
    assert schema["properties"]["items"]["minItems"] == 1
    response = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert response == {"$ref": "#/components/schemas/BatchCreateResult"}
    assert "BatchItemResult" in document["components"]["schemas"]


def test_the_typed_client_sends_a_batch(system: bootstrap.Punctual) -> None:
    register_demo(system)
    token = identity.ensure_member_token(system.services, "acme", "alice", Role.MEMBER).token
    with serving(system.http_app()) as url, PunctualClient(url, token, "acme") as client:
        calls = [
            {
                "idempotency_key": f"c-{n}",
                "workflow": "echo",
                "input": {"message": "hi"},
                "business_request_id": f"c-{n}",
                "start_at": echo_start()["start_at"],
            }
            for n in range(3)
        ]
        answers = client.create_starts_batch(calls)
        assert [a.status for a in answers] == [201, 201, 201]
        assert [a.idempotency_key for a in answers] == ["c-0", "c-1", "c-2"]
        assert client.create_starts_batch(calls) == answers
        assert client.create_start(**calls[0]) == answers[0].body
