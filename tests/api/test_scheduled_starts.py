"""Scheduled starts through HTTP on both stores (API.md "Scheduled starts", SPEC OS-1..OS-10).

Every status and error code of the scheduled-start routes is asserted here with its
envelope and details, together with the contract's check order. Idempotency replay and
key rules have their own module, ``test_idempotency.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pytest
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.ports.records import WorkerRecord
from punctual.settings import Settings
from punctual.usecases.running.definitions import register_worker
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.workflows import load_app
from tests.conftest import FakeClock
from tests.support.api import Api, echo_start, future, in_process, member_api, register_demo

# The fields API.md names for a start; the implementation may add more, never remove any.
START_FIELDS = {
    "id",
    "tenant",
    "workflow",
    "business_request_id",
    "start_at",
    "time_zone",
    "workload_class",
    "attributes",
    "state",
    "version",
    "attempts",
    "next_attempt_at",
    "last_error",
    "created_by",
    "created_at",
    "updated_at",
    "dispatch",
}
RUN_FIELDS = {
    "id",
    "workflow",
    "definition_version",
    "artifact",
    "state",
    "origin",
    "started_by",
    "attempts",
    "result",
    "error",
    "created_at",
    "started_at",
    "ended_at",
}
RFC3339_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
HOST_OWNED = ["task_queue", "priority", "scope", "temporal_workflow_id", "run_id"]
NEXT_YEAR = datetime.now(UTC).year + 1


# --------------------------------------------------------------------------- helpers


class Response(Protocol):
    """What the tests read from a response (the TestClient's and httpx's alike)."""

    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...

    def json(self, **kwargs: Any) -> Any: ...


@pytest.fixture
def clock() -> FakeClock:
    """Starts at the real now (a whole second, as the API renders milliseconds), so that
    the instants ``future()`` gives lie ahead of it."""
    return FakeClock(datetime.now(UTC).replace(microsecond=0))


@pytest.fixture
def system(settings: Settings, clock: FakeClock) -> Iterator[bootstrap.Punctual]:
    """punctual on a clock that moves only when a test moves it: a start_at near the 5 s
    bound on the past is judged against the instant the test chose, never against how long
    a request took on a busy machine."""
    built = bootstrap.build(settings, clock=clock)
    yield built
    built.close()


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    """The in-process app with the demo workflows registered (not loaded by a worker)."""
    register_demo(system)
    with in_process(system) as test_client:
        yield test_client


def ago(system: bootstrap.Punctual, seconds: float) -> str:
    """An instant ``seconds`` before the system's (fake) now, RFC 3339 with ``Z``."""
    earlier = system.services.clock.now() - timedelta(seconds=seconds)
    return earlier.isoformat().replace("+00:00", "Z")


def instant(text: str) -> datetime:
    assert RFC3339_UTC.match(text), f"{text!r} is not RFC 3339 UTC with Z"
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


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
    for item in errors:
        assert {"loc", "msg", "type"} <= set(item), item
    return errors


def keys_anywhere(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = set(value)
        for item in value.values():
            found |= keys_anywhere(item)
        return found
    if isinstance(value, list):
        found = set()
        for item in value:
            found |= keys_anywhere(item)
        return found
    return set()


def raw_post(
    client: TestClient,
    path: str,
    *,
    token: str | None,
    key: str | None,
    content: bytes | None = None,
    json: Any = None,
) -> Response:
    headers: dict[str, str] = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if key is not None:
        headers["Idempotency-Key"] = key
    if content is not None:
        headers["Content-Type"] = "application/json"
        return client.post(path, headers=headers, content=content)
    return client.post(path, headers=headers, json=json)


def create(api: Api, body: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    response = api.post("/scheduled-starts", body or echo_start(**overrides))
    assert response.status_code == 201, response.text
    start: dict[str, Any] = response.json()
    return start


def live_worker(system: bootstrap.Punctual) -> None:
    """A live worker with the demo versions loaded, so that dispatch can pin them."""
    app = load_app("punctual.demo:app")
    now = system.services.clock.now()
    record = WorkerRecord(
        id="wrk_live_test",
        engine="local",
        host="test",
        task_queues=["interactive", "standard", "batch"],
        loaded=[(d.name, d.version, d.artifact) for d in app.definitions],
        slots=1,
        started_at=now,
        heartbeat_at=now,
        stopped_at=None,
    )
    register_worker(system.services, record, [])


def dispatched_start(system: bootstrap.Punctual, api: Api) -> dict[str, Any]:
    """A start created 1 s in the past (due at once; well within the 5 s skew) and
    dispatched."""
    live_worker(system)
    start = create(api, start_at=ago(system, 1))
    assert start["dispatch"] is None
    report = dispatch_due(system.services, "runner-test", 100)
    assert start["id"] in report.dispatched, report
    fetched = api.get(f"/scheduled-starts/{start['id']}")
    assert fetched.status_code == 200, fetched.text
    body: dict[str, Any] = fetched.json()
    assert body["state"] == "dispatched"
    return body


def berlin_winter(offset: str = "+01:00") -> str:
    return f"{NEXT_YEAR}-12-01T07:00:00{offset}"


# --------------------------------------------------------------------------- create, get, list


def test_create_returns_201_with_the_contract_fields(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client, "acme", "alice")
    body = {
        "workflow": "echo",
        "input": {"message": "s3cret-payload"},
        "business_request_id": "appt-42",
        "start_at": berlin_winter(),
        "time_zone": "Europe/Berlin",
        "workload_class": "standard",
        "attributes": {"customer": "c-17"},
    }
    response = api.post("/scheduled-starts", body)
    assert response.status_code == 201, response.text
    start = response.json()
    assert set(start) >= START_FIELDS, START_FIELDS - set(start)
    assert isinstance(start["id"], str) and start["id"]
    assert start["tenant"] == "acme"
    assert start["workflow"] == "echo"
    assert start["business_request_id"] == "appt-42"
    assert instant(start["start_at"]) == datetime(NEXT_YEAR, 12, 1, 6, 0, tzinfo=UTC)
    assert start["start_at"].startswith(f"{NEXT_YEAR}-12-01T06:00:00")
    assert start["time_zone"] == "Europe/Berlin"
    assert start["workload_class"] == "standard"
    assert start["attributes"] == {"customer": "c-17"}
    assert start["state"] == "scheduled"
    assert start["version"] == 1
    assert start["attempts"] == 0
    assert start["next_attempt_at"] is None
    assert start["last_error"] is None
    assert start["created_by"] == "alice"
    assert start["dispatch"] is None
    assert instant(start["created_at"]) == system.services.clock.now()
    assert instant(start["updated_at"]) == system.services.clock.now()
    # Input is never returned (OS-9), and nothing about the run leaks before dispatch.
    assert "input" not in keys_anywhere(start)
    assert not {"run_id", "definition_version", "artifact"} & keys_anywhere(start)
    assert "s3cret-payload" not in response.text


def test_get_returns_200_with_the_created_start(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    start = create(api, input={"message": "s3cret-payload"}, traceparent=traceparent)
    response = api.get(f"/scheduled-starts/{start['id']}")
    assert response.status_code == 200, response.text
    assert response.json() == start
    assert "input" not in keys_anywhere(response.json())
    assert "s3cret-payload" not in response.text
    # A viewer reads too (SEC-5).
    viewer = member_api(system, client, "acme", "victor", Role.VIEWER)
    assert viewer.get(f"/scheduled-starts/{start['id']}").json() == start


def test_get_unknown_start_is_404(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    error_of(api.get("/scheduled-starts/st_does_not_exist"), 404, "not_found")


def test_list_filters_by_state_workflow_and_business_request_id(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    first = create(api, business_request_id="req-A")
    second = create(api, business_request_id="req-B")
    scored = create(api, workflow="score", input={"score": 0.5}, business_request_id="req-A")
    canceled = api.post(f"/scheduled-starts/{second['id']}/cancel", {"version": 1})
    assert canceled.status_code == 200, canceled.text

    def ids(**params: Any) -> list[str]:
        response = api.get("/scheduled-starts", **params)
        assert response.status_code == 200, response.text
        page = response.json()
        assert set(page) >= {"items", "next_cursor"}
        assert page["next_cursor"] is None
        for item in page["items"]:
            assert "input" not in keys_anywhere(item)
        return sorted(item["id"] for item in page["items"])

    assert ids() == sorted([first["id"], second["id"], scored["id"]])
    assert ids(state="scheduled") == sorted([first["id"], scored["id"]])
    assert ids(state="canceled") == [second["id"]]
    assert ids(state="dispatched") == []
    assert ids(workflow="score") == [scored["id"]]
    assert ids(workflow="echo") == sorted([first["id"], second["id"]])
    assert ids(business_request_id="req-A") == sorted([first["id"], scored["id"]])
    assert ids(business_request_id="req-B", state="scheduled") == []
    assert ids(workflow="echo", business_request_id="req-A") == [first["id"]]


def test_list_pages_with_a_cursor(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    created = [create(api, business_request_id=f"req-{i}")["id"] for i in range(3)]

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 1}
        if cursor is not None:
            params["cursor"] = cursor
        response = api.get("/scheduled-starts", **params)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["items"]) == 1
        seen.append(page["items"][0]["id"])
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert isinstance(cursor, str) and cursor
        assert pages < 10
    assert pages == 3
    assert sorted(seen) == sorted(created)
    assert len(set(seen)) == 3

    # A page that holds exactly the rest has no next page; the order is stable.
    first_two = api.get("/scheduled-starts", limit=2).json()
    assert [item["id"] for item in first_two["items"]] == seen[:2]
    rest = api.get("/scheduled-starts", limit=2, cursor=first_two["next_cursor"]).json()
    assert [item["id"] for item in rest["items"]] == seen[2:]
    assert rest["next_cursor"] is None
    everything = api.get("/scheduled-starts", limit=100).json()
    assert [item["id"] for item in everything["items"]] == seen
    assert everything["next_cursor"] is None
    assert api.get("/scheduled-starts", limit=3).json()["next_cursor"] is None
    # A cursor this API did not hand out is refused.
    bad = api.get("/scheduled-starts", cursor="garbage!")
    assert bad.status_code == 422, bad.text
    assert bad.json()["error"]["code"] in {"invalid_cursor", "validation_error"}


@pytest.mark.parametrize("limit", [0, 101, -1])
def test_list_limit_out_of_range_is_422(
    system: bootstrap.Punctual, client: TestClient, limit: int
) -> None:
    api = member_api(system, client)
    errors = validation_errors(api.get("/scheduled-starts", limit=limit))
    assert any("limit" in [str(p) for p in err["loc"]] for err in errors), errors


def test_list_limit_not_an_integer_is_422(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    errors = validation_errors(api.get("/scheduled-starts", limit="ten"))
    assert any("limit" in [str(p) for p in err["loc"]] for err in errors), errors


def test_order_authentication_beats_query_validation(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    for params in ({"limit": "0"}, {"limit": "ten"}, {"state": "bogus"}, {"cursor": "x!"}):
        response = client.get("/v1/tenants/acme/scheduled-starts", params=params)
        error_of(response, 401, "unauthenticated")


def test_list_with_an_unknown_state_is_a_validation_error(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    """API.md: ``422 validation_error`` carries ``details.errors``, for queries too."""
    api = member_api(system, client)
    validation_errors(api.get("/scheduled-starts", state="bogus"))


def test_list_is_tenant_scoped(system: bootstrap.Punctual, client: TestClient) -> None:
    alice = member_api(system, client, "acme", "alice")
    mallory = member_api(system, client, "globex", "mallory")
    start = create(alice)
    assert mallory.get("/scheduled-starts").json()["items"] == []
    error_of(
        client.get("/v1/tenants/acme/scheduled-starts", headers=mallory.headers()),
        404,
        "not_found",
    )
    assert [item["id"] for item in alice.get("/scheduled-starts").json()["items"]] == [start["id"]]


# --------------------------------------------------------------------------- 400, 401, 404


def test_idempotency_key_required_on_every_start_mutation(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    start = create(api)
    base = "/v1/tenants/acme/scheduled-starts"
    calls: list[tuple[str, dict[str, Any]]] = [
        (base, echo_start()),
        (f"{base}/{start['id']}/reschedule", {"version": 1, "start_at": future(7200)}),
        (f"{base}/{start['id']}/cancel", {"version": 1}),
    ]
    for path, body in calls:
        error_of(
            raw_post(client, path, token=api.token, key=None, json=body),
            400,
            "idempotency_key_required",
        )
        error_of(
            raw_post(client, path, token=api.token, key="", json=body),
            400,
            "idempotency_key_required",
        )
    # Nothing changed.
    assert api.get(f"/scheduled-starts/{start['id']}").json() == start
    assert len(api.get("/scheduled-starts").json()["items"]) == 1


@pytest.mark.parametrize(
    "authorization", [None, "Bearer pn_not-a-real-token", "Bearer ", "Basic YWxpY2U6c2VjcmV0"]
)
def test_unauthenticated_is_401(
    system: bootstrap.Punctual, client: TestClient, authorization: str | None
) -> None:
    api = member_api(system, client)
    start = create(api)
    headers = {} if authorization is None else {"Authorization": authorization}
    base = "/v1/tenants/acme/scheduled-starts"
    mutate = {**headers, "Idempotency-Key": "k-401"}
    responses = [
        client.get(base, headers=headers),
        client.get(f"{base}/{start['id']}", headers=headers),
        client.post(base, headers=mutate, json=echo_start()),
        client.post(f"{base}/{start['id']}/reschedule", headers=mutate, json={"version": 1}),
        client.post(f"{base}/{start['id']}/cancel", headers=mutate, json={"version": 1}),
    ]
    for response in responses:
        error_of(response, 401, "unauthenticated")
    assert api.get(f"/scheduled-starts/{start['id']}").json() == start


def test_unknown_start_is_404_for_reschedule_and_cancel(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    error_of(
        api.post("/scheduled-starts/st_nope/reschedule", {"version": 1, "start_at": future()}),
        404,
        "not_found",
    )
    error_of(api.post("/scheduled-starts/st_nope/cancel", {"version": 1}), 404, "not_found")


def test_another_tenants_start_is_404_under_both_paths(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    alice = member_api(system, client, "acme", "alice")
    admin_b = member_api(system, client, "globex", "bob", Role.ADMIN)
    start = create(alice)
    sid = start["id"]
    headers = admin_b.headers()
    for tenant in ("acme", "globex"):
        path = f"/v1/tenants/{tenant}/scheduled-starts/{sid}"
        response = client.get(path, headers=headers)
        error_of(response, 404, "not_found")
        assert "alice" not in response.text and "req-1" not in response.text
        mutate = {**headers, "Idempotency-Key": f"k-{tenant}-reschedule"}
        error_of(
            client.post(
                f"{path}/reschedule", headers=mutate, json={"version": 1, "start_at": future()}
            ),
            404,
            "not_found",
        )
        mutate = {**headers, "Idempotency-Key": f"k-{tenant}-cancel"}
        error_of(
            client.post(f"{path}/cancel", headers=mutate, json={"version": 1}), 404, "not_found"
        )
    # Creating in another tenant's space is 404 as well, and creates nothing there.
    error_of(
        client.post(
            "/v1/tenants/acme/scheduled-starts",
            headers={**headers, "Idempotency-Key": "k-create"},
            json=echo_start(),
        ),
        404,
        "not_found",
    )
    assert alice.get(f"/scheduled-starts/{sid}").json() == start
    assert len(alice.get("/scheduled-starts").json()["items"]) == 1


# --------------------------------------------------------------------------- 422 validation_error


def test_missing_field_is_validation_error(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    body = echo_start()
    del body["business_request_id"]
    errors = validation_errors(api.post("/scheduled-starts", body))
    assert any(
        err["loc"][-1] == "business_request_id" and err["type"] == "missing" for err in errors
    ), errors


def test_wrong_type_is_validation_error(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    errors = validation_errors(api.post("/scheduled-starts", echo_start(workflow=5)))
    assert any(err["loc"][-1] == "workflow" for err in errors), errors
    errors = validation_errors(api.post("/scheduled-starts", echo_start(start_at="tomorrow")))
    assert any(err["loc"][-1] == "start_at" for err in errors), errors
    errors = validation_errors(api.post("/scheduled-starts", echo_start(attributes={"a": 1})))
    assert any("attributes" in err["loc"] for err in errors), errors


def test_unknown_field_is_validation_error(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    errors = validation_errors(api.post("/scheduled-starts", echo_start(colour="red")))
    assert any(err["loc"][-1] == "colour" for err in errors), errors
    start = create(api)
    errors = validation_errors(
        api.post(f"/scheduled-starts/{start['id']}/cancel", {"version": 1, "reasn": "typo"})
    )
    assert any(err["loc"][-1] == "reasn" for err in errors), errors


@pytest.mark.parametrize(
    "content",
    [b'{"workflow": "echo",', b"not json", b"[1, 2]", b'"a string"', b"null", b"42", b""],
    ids=["truncated", "garbage", "array", "string", "null", "number", "empty"],
)
def test_malformed_or_non_object_body_is_validation_error(
    system: bootstrap.Punctual, client: TestClient, content: bytes
) -> None:
    api = member_api(system, client)
    start = create(api)
    base = "/v1/tenants/acme/scheduled-starts"
    for index, path in enumerate([base, f"{base}/{start['id']}/cancel"]):
        response = raw_post(
            client, path, token=api.token, key=f"k-{index}", content=content or b" "
        )
        validation_errors(response)
    assert api.get(f"/scheduled-starts/{start['id']}").json() == start


def test_naive_start_at_is_not_timezone_aware(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    naive = f"{NEXT_YEAR}-12-01T07:00:00"
    error_of(
        api.post("/scheduled-starts", echo_start(start_at=naive)),
        422,
        "start_at_not_timezone_aware",
    )
    error_of(
        api.post("/scheduled-starts", echo_start(start_at=naive, time_zone="Europe/Berlin")),
        422,
        "start_at_not_timezone_aware",
    )
    start = create(api)
    error_of(
        api.post(f"/scheduled-starts/{start['id']}/reschedule", {"version": 1, "start_at": naive}),
        422,
        "start_at_not_timezone_aware",
    )
    assert api.get(f"/scheduled-starts/{start['id']}").json() == start


def test_start_at_more_than_5s_in_the_past_is_refused(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    error_of(
        api.post("/scheduled-starts", echo_start(start_at=ago(system, 6))), 422, "start_at_in_past"
    )
    error_of(
        api.post("/scheduled-starts", echo_start(start_at=ago(system, 86400))),
        422,
        "start_at_in_past",
    )
    start = create(api)
    error_of(
        api.post(
            f"/scheduled-starts/{start['id']}/reschedule",
            {"version": 1, "start_at": ago(system, 6)},
        ),
        422,
        "start_at_in_past",
    )
    assert api.get(f"/scheduled-starts/{start['id']}").json() == start
    assert len(api.get("/scheduled-starts").json()["items"]) == 1


def test_start_at_4s_in_the_past_is_accepted(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    start_at = ago(system, 4)
    response = api.post("/scheduled-starts", echo_start(start_at=start_at))
    assert response.status_code == 201, response.text
    start = response.json()
    assert start["state"] == "scheduled"
    assert abs((instant(start["start_at"]) - instant(start_at)).total_seconds()) < 0.001
    # Within the skew it is also accepted as a new start_at for a reschedule.
    other = create(api)
    moved = api.post(
        f"/scheduled-starts/{other['id']}/reschedule", {"version": 1, "start_at": ago(system, 4)}
    )
    assert moved.status_code == 200, moved.text


def test_start_at_zone_mismatch(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    details = error_of(
        api.post(
            "/scheduled-starts",
            echo_start(start_at=berlin_winter("+02:00"), time_zone="Europe/Berlin"),
        ),
        422,
        "start_at_zone_mismatch",
    )
    assert details.get("expected_offset") == "+01:00", details
    # UTC "Z" with a zone that is not at offset 0 is a mismatch too.
    error_of(
        api.post(
            "/scheduled-starts",
            echo_start(start_at=f"{NEXT_YEAR}-12-01T06:00:00Z", time_zone="Europe/Berlin"),
        ),
        422,
        "start_at_zone_mismatch",
    )
    # Summer time in Berlin is +02:00.
    summer = api.post(
        "/scheduled-starts",
        echo_start(start_at=f"{NEXT_YEAR}-07-01T07:00:00+02:00", time_zone="Europe/Berlin"),
    )
    assert summer.status_code == 201, summer.text
    start = summer.json()
    assert instant(start["start_at"]) == datetime(NEXT_YEAR, 7, 1, 5, 0, tzinfo=UTC)
    error_of(
        api.post(
            f"/scheduled-starts/{start['id']}/reschedule",
            {"version": 1, "start_at": berlin_winter("+02:00"), "time_zone": "Europe/Berlin"},
        ),
        422,
        "start_at_zone_mismatch",
    )


def test_unknown_time_zone(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    for zone in ("Mars/Olympus_Mons", "../../etc/passwd", "europe/berlin"):
        details = error_of(
            api.post("/scheduled-starts", echo_start(start_at=future(), time_zone=zone)),
            422,
            "unknown_time_zone",
        )
        assert details.get("time_zone") == zone, details


def test_unknown_workflow(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    response = api.post("/scheduled-starts", echo_start(workflow="no-such-workflow"))
    error_of(response, 422, "unknown_workflow")
    assert "no-such-workflow" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("payload", "mentions"),
    [
        ({"message": "hi", "extra": 1}, "additionalProperties"),
        ({}, "message"),
        ({"message": 5}, "message"),
        ("just a string", "object"),
    ],
    ids=["extra-key", "missing-message", "wrong-type", "not-an-object"],
)
def test_input_invalid(
    system: bootstrap.Punctual, client: TestClient, payload: Any, mentions: str
) -> None:
    api = member_api(system, client)
    response = api.post("/scheduled-starts", echo_start(input=payload))
    details = error_of(response, 422, "input_invalid")
    errors = details.get("errors")
    assert isinstance(errors, list) and errors, details
    assert mentions in " ".join(str(e) for e in errors), errors
    # FT-4: a key the schema does not name is never echoed, in the details or the message.
    assert "extra" not in response.text, response.text
    assert api.get("/scheduled-starts").json()["items"] == []


@pytest.mark.parametrize("field", HOST_OWNED)
def test_host_owned_field_is_refused(
    system: bootstrap.Punctual, client: TestClient, field: str
) -> None:
    api = member_api(system, client)
    value: Any = 1 if field == "priority" else "x"
    details = error_of(
        api.post("/scheduled-starts", echo_start(**{field: value})), 422, "host_owned_field"
    )
    assert details.get("fields") == [field], details
    assert api.get("/scheduled-starts").json()["items"] == []


def test_host_owned_fields_are_all_named(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    details = error_of(
        api.post("/scheduled-starts", echo_start(task_queue="q", run_id="run_x")),
        422,
        "host_owned_field",
    )
    assert sorted(details.get("fields", [])) == ["run_id", "task_queue"], details


# --------------------------------------------------------------------------- 413, 403


def test_input_too_large(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    limit = system.settings.limits_for("acme").max_input_bytes
    details = error_of(
        api.post("/scheduled-starts", echo_start(input={"message": "x" * (limit + 1)})),
        413,
        "input_too_large",
    )
    assert details.get("limit") == limit, details
    assert details.get("size", 0) > limit, details
    assert api.get("/scheduled-starts").json()["items"] == []


def test_body_larger_than_the_host_limit_is_413(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    huge = b'{"workflow": "echo", "pad": "' + b"x" * (system.settings.max_body_bytes + 10) + b'"}'
    response = raw_post(
        client, "/v1/tenants/acme/scheduled-starts", token=api.token, key="k-huge", content=huge
    )
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] in {"body_too_large", "input_too_large"}


def test_workload_class_not_allowed(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    details = error_of(
        api.post("/scheduled-starts", echo_start(workload_class="gpu")),
        403,
        "workload_class_not_allowed",
    )
    assert details.get("allowed") == ["batch", "interactive", "standard"], details
    assert api.get("/scheduled-starts").json()["items"] == []


def test_viewer_may_not_create(system: bootstrap.Punctual, client: TestClient) -> None:
    viewer = member_api(system, client, "acme", "victor", Role.VIEWER)
    error_of(viewer.post("/scheduled-starts", echo_start()), 403, "forbidden")
    assert viewer.get("/scheduled-starts").json()["items"] == []


def test_member_may_not_change_another_members_start_but_admin_may(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    alice = member_api(system, client, "acme", "alice")
    bob = member_api(system, client, "acme", "bob")
    viewer = member_api(system, client, "acme", "victor", Role.VIEWER)
    admin = member_api(system, client, "acme", "root", Role.ADMIN)
    start = create(alice)
    sid = start["id"]
    new_at = future(7200)
    for api in (bob, viewer):
        error_of(
            api.post(f"/scheduled-starts/{sid}/reschedule", {"version": 1, "start_at": new_at}),
            403,
            "forbidden",
        )
        error_of(api.post(f"/scheduled-starts/{sid}/cancel", {"version": 1}), 403, "forbidden")
    assert alice.get(f"/scheduled-starts/{sid}").json() == start

    moved = admin.post(f"/scheduled-starts/{sid}/reschedule", {"version": 1, "start_at": new_at})
    assert moved.status_code == 200, moved.text
    assert moved.json()["version"] == 2
    assert moved.json()["created_by"] == "alice"
    canceled = admin.post(f"/scheduled-starts/{sid}/cancel", {"version": 2})
    assert canceled.status_code == 200, canceled.text
    assert canceled.json()["state"] == "canceled"

    # The owner may change its own start.
    own = create(alice)
    moved = alice.post(
        f"/scheduled-starts/{own['id']}/reschedule", {"version": 1, "start_at": new_at}
    )
    assert moved.status_code == 200, moved.text


# --------------------------------------------------------------------------- reschedule, cancel


def test_reschedule_returns_200_with_a_new_version(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    start = create(api, start_at=berlin_winter(), time_zone="Europe/Berlin")
    new_at = f"{NEXT_YEAR}-12-02T09:30:00+01:00"
    response = api.post(
        f"/scheduled-starts/{start['id']}/reschedule",
        {"version": 1, "start_at": new_at, "time_zone": "Europe/Berlin"},
    )
    assert response.status_code == 200, response.text
    moved = response.json()
    assert set(moved) >= START_FIELDS
    assert moved["id"] == start["id"]
    assert moved["version"] == 2
    assert moved["state"] == "scheduled"
    assert instant(moved["start_at"]) == datetime(NEXT_YEAR, 12, 2, 8, 30, tzinfo=UTC)
    assert moved["time_zone"] == "Europe/Berlin"
    assert moved["created_at"] == start["created_at"]
    assert instant(moved["updated_at"]) >= instant(start["updated_at"])
    assert moved["dispatch"] is None
    assert "input" not in keys_anywhere(moved)
    assert api.get(f"/scheduled-starts/{start['id']}").json() == moved


def test_cancel_returns_200_canceled_with_a_new_version(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    start = create(api)
    response = api.post(f"/scheduled-starts/{start['id']}/cancel", {"version": 1, "reason": "no"})
    assert response.status_code == 200, response.text
    canceled = response.json()
    assert set(canceled) >= START_FIELDS
    assert canceled["state"] == "canceled"
    assert canceled["version"] == 2
    assert canceled["start_at"] == start["start_at"]
    assert canceled["dispatch"] is None
    assert api.get(f"/scheduled-starts/{start['id']}").json() == canceled


def test_stale_version_is_version_conflict(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    start = create(api)
    sid = start["id"]
    moved = api.post(f"/scheduled-starts/{sid}/reschedule", {"version": 1, "start_at": future(60)})
    assert moved.status_code == 200, moved.text
    assert moved.json()["version"] == 2

    details = error_of(
        api.post(f"/scheduled-starts/{sid}/reschedule", {"version": 1, "start_at": future(90)}),
        409,
        "version_conflict",
    )
    assert details.get("current_version") == 2, details
    details = error_of(
        api.post(f"/scheduled-starts/{sid}/cancel", {"version": 1}), 409, "version_conflict"
    )
    assert details.get("current_version") == 2, details
    # A version from the future is stale too.
    details = error_of(
        api.post(f"/scheduled-starts/{sid}/cancel", {"version": 7}), 409, "version_conflict"
    )
    assert details.get("current_version") == 2, details
    assert api.get(f"/scheduled-starts/{sid}").json() == moved.json()


def test_version_must_be_a_positive_integer(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    start = create(api)
    for body in ({}, {"version": 0}, {"version": "one"}):
        errors = validation_errors(api.post(f"/scheduled-starts/{start['id']}/cancel", body))
        assert any("version" in err["loc"] for err in errors), errors


def test_cancel_twice_is_invalid_state(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    start = create(api)
    sid = start["id"]
    first = api.post(f"/scheduled-starts/{sid}/cancel", {"version": 1})
    assert first.status_code == 200, first.text
    assert first.json()["version"] == 2
    details = error_of(
        api.post(f"/scheduled-starts/{sid}/cancel", {"version": 2}), 409, "invalid_state"
    )
    assert details.get("state") == "canceled", details
    error_of(
        api.post(f"/scheduled-starts/{sid}/reschedule", {"version": 2, "start_at": future()}),
        409,
        "invalid_state",
    )
    assert api.get(f"/scheduled-starts/{sid}").json() == first.json()


def test_after_dispatch_reschedule_and_cancel_are_already_dispatched(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    start = dispatched_start(system, api)
    sid = start["id"]
    dispatch = start["dispatch"]
    assert isinstance(dispatch, dict)
    run_id = dispatch["run_id"]
    for body, suffix in (
        ({"version": start["version"], "start_at": future()}, "reschedule"),
        ({"version": start["version"]}, "cancel"),
    ):
        details = error_of(
            api.post(f"/scheduled-starts/{sid}/{suffix}", body), 409, "already_dispatched"
        )
        assert details.get("run_id") == run_id, details
    assert api.get(f"/scheduled-starts/{sid}").json() == start

    response = api.get(f"/runs/{run_id}")
    assert response.status_code == 200, response.text
    run = response.json()
    assert set(run) >= RUN_FIELDS, RUN_FIELDS - set(run)
    assert run["id"] == run_id
    assert run["state"] == "pending"
    assert run["workflow"] == "echo"
    assert run["origin"]["source"] == "scheduled_start"
    assert run["origin"]["id"] == sid
    assert run["started_by"] == "alice"
    assert run["definition_version"] == dispatch["definition_version"]
    assert run["artifact"] == dispatch["artifact"]
    assert "input" not in keys_anywhere(run)


def test_projection_reveals_dispatch_only_after_dispatch(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    live_worker(system)
    created = create(api, start_at=ago(system, 1))
    sid = created["id"]
    before = api.get(f"/scheduled-starts/{sid}").json()
    assert before["dispatch"] is None
    assert not {"run_id", "definition_version", "artifact"} & keys_anywhere(before)
    listed = api.get("/scheduled-starts").json()["items"]
    assert [item["dispatch"] for item in listed] == [None]

    dispatch_due(system.services, "runner-test", 100)
    after = api.get(f"/scheduled-starts/{sid}").json()
    assert after["state"] == "dispatched"
    assert after["version"] > created["version"]
    assert after["attempts"] == 1
    dispatch = after["dispatch"]
    assert set(dispatch) == {"run_id", "definition_version", "artifact", "dispatched_at"}
    definitions = api.get("/definitions").json()["items"]
    echo = next(d for d in definitions if d["name"] == "echo")
    assert dispatch["definition_version"] == echo["version"] == "1"
    assert dispatch["artifact"] == echo["artifact"]
    assert isinstance(dispatch["run_id"], str) and dispatch["run_id"]
    assert instant(dispatch["dispatched_at"]) >= instant(created["created_at"])
    assert "input" not in keys_anywhere(after)
    listed = api.get("/scheduled-starts", state="dispatched").json()["items"]
    assert listed == [after]
    runs = api.get("/runs", origin_id=sid).json()["items"]
    assert [run["id"] for run in runs] == [dispatch["run_id"]]


# --------------------------------------------------------------------------- check order


def test_order_replay_beats_new_request_checks_for_create(
    system: bootstrap.Punctual, client: TestClient, clock: FakeClock
) -> None:
    """A create replayed after its start_at has passed returns the original 201 body."""
    api = member_api(system, client)
    body = echo_start(start_at=ago(system, 4))
    first = api.post("/scheduled-starts", body, key="create-once")
    assert first.status_code == 201, first.text
    clock.advance(2)  # start_at is now 6 s in the past: a new request is refused
    error_of(api.post("/scheduled-starts", body), 422, "start_at_in_past")
    replay = api.post("/scheduled-starts", body, key="create-once")
    assert replay.status_code == 201, replay.text
    assert replay.json() == first.json()
    # ... and after it was dispatched, too.
    live_worker(system)
    dispatch_due(system.services, "runner-test", 100)
    assert api.get(f"/scheduled-starts/{first.json()['id']}").json()["state"] == "dispatched"
    again = api.post("/scheduled-starts", body, key="create-once")
    assert again.status_code == 201, again.text
    assert again.json() == first.json()
    assert len(api.get("/scheduled-starts").json()["items"]) == 1


def test_order_replay_beats_state_and_version_for_reschedule_and_cancel(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    start = create(api)
    sid = start["id"]
    reschedule_body = {"version": 1, "start_at": future(7200)}
    moved = api.post(f"/scheduled-starts/{sid}/reschedule", reschedule_body, key="move-1")
    assert moved.status_code == 200, moved.text
    cancel_body = {"version": 2}
    canceled = api.post(f"/scheduled-starts/{sid}/cancel", cancel_body, key="cancel-1")
    assert canceled.status_code == 200, canceled.text

    # New requests with the same bodies are refused (state beats version) ...
    error_of(api.post(f"/scheduled-starts/{sid}/cancel", cancel_body), 409, "invalid_state")
    error_of(api.post(f"/scheduled-starts/{sid}/reschedule", reschedule_body), 409, "invalid_state")
    # ... but replays answer what was decided, after later state changes.
    replay = api.post(f"/scheduled-starts/{sid}/reschedule", reschedule_body, key="move-1")
    assert replay.status_code == 200, replay.text
    assert replay.json() == moved.json()
    assert replay.json()["state"] == "scheduled"
    replay = api.post(f"/scheduled-starts/{sid}/cancel", cancel_body, key="cancel-1")
    assert replay.status_code == 200, replay.text
    assert replay.json() == canceled.json()


def test_order_replay_of_a_reschedule_after_dispatch(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    api = member_api(system, client)
    live_worker(system)
    start = create(api)
    body = {"version": 1, "start_at": ago(system, 1)}
    moved = api.post(f"/scheduled-starts/{start['id']}/reschedule", body, key="move-now")
    assert moved.status_code == 200, moved.text
    report = dispatch_due(system.services, "runner-test", 100)
    assert report.dispatched == [start["id"]]
    replay = api.post(f"/scheduled-starts/{start['id']}/reschedule", body, key="move-now")
    assert replay.status_code == 200, replay.text
    assert replay.json() == moved.json()
    assert replay.json()["dispatch"] is None


def test_order_wrong_tenant_and_existence_beat_validation(
    system: bootstrap.Punctual, client: TestClient
) -> None:
    alice = member_api(system, client, "acme", "alice")
    mallory = member_api(system, client, "globex", "mallory", Role.ADMIN)
    start = create(alice)
    headers = {**mallory.headers(), "Idempotency-Key": "k-order"}
    base = "/v1/tenants/acme/scheduled-starts"
    invalid = {"workflow": 5, "colour": "red"}
    error_of(client.post(base, headers=headers, json=invalid), 404, "not_found")
    error_of(
        client.post(
            f"{base}/{start['id']}/cancel",
            headers={**headers, "Idempotency-Key": "k2"},
            json={"version": "x"},
        ),
        404,
        "not_found",
    )
    error_of(
        raw_post(client, base, token=mallory.token, key="k3", content=b"not json"),
        404,
        "not_found",
    )
    # Existence beats validation within the caller's own tenant.
    error_of(
        alice.post("/scheduled-starts/st_nope/reschedule", {"version": "x", "start_at": 1}),
        404,
        "not_found",
    )
    error_of(alice.post("/scheduled-starts/st_nope/cancel", [1, 2]), 404, "not_found")


def test_order_validation_beats_role(system: bootstrap.Punctual, client: TestClient) -> None:
    alice = member_api(system, client, "acme", "alice")
    bob = member_api(system, client, "acme", "bob")
    viewer = member_api(system, client, "acme", "victor", Role.VIEWER)
    validation_errors(viewer.post("/scheduled-starts", echo_start(colour="red")))
    error_of(
        viewer.post("/scheduled-starts", echo_start(start_at="2026-12-01T07:00:00")),
        422,
        "start_at_not_timezone_aware",
    )
    error_of(
        viewer.post("/scheduled-starts", echo_start(start_at=ago(system, 60))),
        422,
        "start_at_in_past",
    )
    error_of(viewer.post("/scheduled-starts", echo_start(workflow="nope")), 422, "unknown_workflow")
    error_of(viewer.post("/scheduled-starts", echo_start(input={})), 422, "input_invalid")
    error_of(viewer.post("/scheduled-starts", echo_start(run_id="r")), 422, "host_owned_field")
    error_of(viewer.post("/scheduled-starts", echo_start()), 403, "forbidden")

    start = create(alice)
    sid = start["id"]
    error_of(
        bob.post(
            f"/scheduled-starts/{sid}/reschedule", {"version": 1, "start_at": ago(system, 60)}
        ),
        422,
        "start_at_in_past",
    )
    validation_errors(bob.post(f"/scheduled-starts/{sid}/cancel", {"version": 1, "x": 1}))
    error_of(bob.post(f"/scheduled-starts/{sid}/cancel", {"version": 1}), 403, "forbidden")


def test_order_role_beats_state_and_version(system: bootstrap.Punctual, client: TestClient) -> None:
    alice = member_api(system, client, "acme", "alice")
    bob = member_api(system, client, "acme", "bob")
    pending = create(alice)
    error_of(
        bob.post(f"/scheduled-starts/{pending['id']}/cancel", {"version": 9}), 403, "forbidden"
    )
    start = dispatched_start(system, alice)
    error_of(bob.post(f"/scheduled-starts/{start['id']}/cancel", {"version": 1}), 403, "forbidden")


def test_order_state_beats_version(system: bootstrap.Punctual, client: TestClient) -> None:
    api = member_api(system, client)
    start = dispatched_start(system, api)
    assert start["version"] > 1
    run_id = start["dispatch"]["run_id"]
    for body, suffix in (
        ({"version": 1, "start_at": future()}, "reschedule"),
        ({"version": 1}, "cancel"),
    ):
        details = error_of(
            api.post(f"/scheduled-starts/{start['id']}/{suffix}", body), 409, "already_dispatched"
        )
        assert details.get("run_id") == run_id, details
        assert "current_version" not in details

    canceled = create(api)
    assert api.post(f"/scheduled-starts/{canceled['id']}/cancel", {"version": 1}).status_code == 200
    error_of(
        api.post(f"/scheduled-starts/{canceled['id']}/cancel", {"version": 1}), 409, "invalid_state"
    )
