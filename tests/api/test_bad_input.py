"""Bad input at the HTTP edge gets a 4xx with the error envelope, never a 5xx (SPEC FT-3, FT-7).

Each case here was a 500 on at least one store before the edge refused it: U+0000 in any
request string (PostgreSQL's text and JSONB refuse it), non-finite JSON numbers (Python's
``json`` accepts ``NaN`` and ``Infinity``), numbers beyond what a column or a ``timedelta``
holds, cursors that decode to such numbers, non-string values in a ``PATCH``. Also: the
readiness probe and 503 answers never echo the database's connection details.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.domain.permissions import Role
from tests.support.api import Api, echo_start, in_process, member_api, register_demo

TENANT = "acme"
NUL = "\u0000"
HUGE = 10**30


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    register_demo(system)
    with in_process(system) as test_client:
        yield test_client


@pytest.fixture
def admin(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, TENANT, "root", Role.ADMIN)


def interval_schedule(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "every-minute",
        "workflow": "echo",
        "input": {"message": "tick"},
        "spec": {"interval_ms": 60_000},
        "overlap": "skip",
        "missed": "catch_up",
    }
    body.update(overrides)
    return body


@pytest.fixture
def schedule(admin: Api) -> dict[str, Any]:
    created = admin.post("/schedules", interval_schedule())
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


@pytest.fixture
def start(admin: Api) -> dict[str, Any]:
    created = admin.post("/scheduled-starts", echo_start())
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


def send(api: Api, method: str, suffix: str, raw: str | None = None, **params: Any) -> Any:
    """One request with a raw JSON text body (so ``NaN`` and U+0000 go out as written)."""
    headers = api.headers(secrets.token_hex(8))
    if raw is not None:
        headers["Content-Type"] = "application/json"
    return api.client.request(
        method, api.path(suffix), headers=headers, content=raw, params=params or None
    )


def refused(response: Any, status: int = 422, code: str = "validation_error") -> dict[str, Any]:
    """The error envelope with ``status`` and ``code``, and no U+0000 echoed back."""
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert error["code"] == code, error
    assert NUL not in json.dumps(error, ensure_ascii=False), error
    return error


# --- U+0000 in any request string (FT-3) ---------------------------------------------------

NUL_START_BODIES = {
    "business_request_id": echo_start(business_request_id=f"req{NUL}1"),
    "attribute value": echo_start(attributes={"team": f"a{NUL}b"}),
    "attribute key": echo_start(attributes={f"te{NUL}am": "a"}),
    "workflow": echo_start(workflow=f"echo{NUL}"),
    "workload_class": echo_start(workload_class=f"standard{NUL}"),
    "time_zone": echo_start(time_zone=f"Europe/Paris{NUL}"),
    "input value": echo_start(input={"message": f"hi{NUL}"}),
    "input key": echo_start(input={f"mess{NUL}age": "hi"}),
    "unknown key": {**echo_start(), f"x{NUL}": 1},
}


@pytest.mark.parametrize("body", NUL_START_BODIES.values(), ids=NUL_START_BODIES.keys())
def test_nul_in_a_start_body_is_422(admin: Api, body: dict[str, Any]) -> None:
    refused(send(admin, "POST", "/scheduled-starts", json.dumps(body)))


def test_nul_in_protected_input_is_located_without_naming_input_keys(admin: Api) -> None:
    """FT-4: the location stops at ``input``; the input's own keys may be personal data."""
    body = echo_start(input={"patient-name-ada": {"note": f"x{NUL}"}})
    error = refused(send(admin, "POST", "/scheduled-starts", json.dumps(body)))
    assert "patient-name-ada" not in json.dumps(error), error
    assert error["details"]["errors"][0]["loc"] == ["body", "input"]


NUL_SCHEDULE_BODIES = {
    "name": interval_schedule(name=f"n{NUL}"),
    "cron": interval_schedule(spec={"cron": f"* * * * *{NUL}"}),
    "cron time_zone": interval_schedule(spec={"cron": "* * * * *", "time_zone": f"UTC{NUL}"}),
    "overlap": interval_schedule(overlap=f"skip{NUL}"),
    "regression path": interval_schedule(
        regression={"metrics": [{"path": f"a{NUL}", "better": "higher"}]}
    ),
}


@pytest.mark.parametrize("body", NUL_SCHEDULE_BODIES.values(), ids=NUL_SCHEDULE_BODIES.keys())
def test_nul_in_a_schedule_body_is_422(admin: Api, body: dict[str, Any]) -> None:
    refused(send(admin, "POST", "/schedules", json.dumps(body)))


@pytest.mark.parametrize(
    "changes",
    [{"name": f"n{NUL}"}, {"workload_class": f"w{NUL}"}, {"spec": {"cron": f"*{NUL}"}}],
    ids=["name", "workload_class", "spec"],
)
def test_nul_in_a_schedule_patch_is_422(
    admin: Api, schedule: dict[str, Any], changes: dict[str, Any]
) -> None:
    body = json.dumps({"version": schedule["version"], **changes})
    refused(send(admin, "PATCH", f"/schedules/{schedule['id']}", body))


def test_nul_in_members_tokens_and_cancel_reason_is_422(admin: Api, start: dict[str, Any]) -> None:
    refused(send(admin, "POST", "/members", json.dumps({"subject": f"a{NUL}", "role": "member"})))
    refused(send(admin, "POST", "/tokens", json.dumps({"subject": f"root{NUL}"})))
    cancel = json.dumps({"version": start["version"], "reason": f"r{NUL}"})
    refused(send(admin, "POST", f"/scheduled-starts/{start['id']}/cancel", cancel))


@pytest.mark.parametrize(
    ("suffix", "params"),
    [
        ("/scheduled-starts", {"business_request_id": f"r{NUL}"}),
        ("/scheduled-starts", {"workflow": f"echo{NUL}"}),
        ("/scheduled-starts", {"state": f"scheduled{NUL}"}),
        ("/scheduled-starts", {"cursor": f"abc{NUL}"}),
        ("/runs", {"workflow": f"echo{NUL}"}),
        ("/runs", {"origin_id": f"sta{NUL}"}),
        ("/schedules", {"limit": f"5{NUL}"}),
        ("/schedule-preview", {"cron": f"* * * * *{NUL}"}),
        ("/schedule-preview", {"cron": "* * * * *", "time_zone": f"UTC{NUL}"}),
    ],
)
def test_nul_in_a_query_parameter_is_422(admin: Api, suffix: str, params: dict[str, str]) -> None:
    error = refused(admin.get(suffix, **params))
    (name,) = [key for key, value in params.items() if NUL in value]
    assert error["details"]["errors"][0]["loc"] == ["query", name], error


@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        ("GET", "/scheduled-starts/sta{}x"),
        ("GET", "/runs/run{}x"),
        ("GET", "/schedules/sch{}x"),
        ("GET", "/schedules/sch{}x/occurrences"),
        ("POST", "/runs/run{}x/cancel"),
        ("POST", "/runs/run{}x/terminate"),
        ("DELETE", "/members/alice{}"),
        ("DELETE", "/tokens/tok{}x"),
        ("POST", "/health/findings/fnd{}x/acknowledge"),
    ],
)
def test_nul_in_a_path_parameter_is_422(admin: Api, method: str, suffix: str) -> None:
    refused(send(admin, method, suffix.format("%00")))


def test_nul_in_the_tenant_is_422_too(admin: Api) -> None:
    """One rule for every path parameter, on reads and mutations alike."""
    refused(admin.client.get("/v1/tenants/ac%00me/runs", headers=admin.headers()))
    refused(admin.client.post("/v1/tenants/ac%00me/runs/r/cancel", headers=admin.headers("k")))


# --- numbers: non-finite, huge, or not numbers at all (FT-7) -------------------------------


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize(
    "template",
    [
        '{{"name": "s", "workflow": "echo", "input": {{}}, "spec": {{"interval_ms": {c}}},'
        ' "overlap": "skip", "missed": "skip"}}',
        '{{"name": "s", "workflow": "echo", "input": {{}}, "spec": {{"interval_ms": 60000}},'
        ' "overlap": "skip", "missed": "skip", "catch_up_window": {c}}}',
        '{{"name": "s", "workflow": "echo", "input": {{"message": {c}}},'
        ' "spec": {{"interval_ms": 60000}}, "overlap": "skip", "missed": "skip"}}',
    ],
    ids=["interval_ms", "catch_up_window", "input"],
)
def test_non_finite_numbers_are_refused_when_parsing(
    admin: Api, template: str, constant: str
) -> None:
    error = refused(send(admin, "POST", "/schedules", template.format(c=constant)))
    assert error["details"]["errors"][0]["type"] == "json_invalid", error


@pytest.mark.parametrize(
    "overrides",
    [
        {"spec": {"interval_ms": 1e20}},
        {"spec": {"interval_ms": HUGE}},
        {"spec": {"interval_ms": "60000"}},
        {"spec": {"interval_ms": 60_000, "starts_at": [{"a": 1}]}},
        {"max_catch_up": HUGE},
        {"catch_up_window": 1e300},
        {"misfire_grace_ms": HUGE},
        {"misfire_grace_ms": 1e20},
    ],
    ids=[
        "interval 1e20",
        "interval huge int",
        "interval string",
        "starts_at a list",
        "max_catch_up",
        "catch_up_window",
        "misfire_grace_ms int",
        "misfire_grace_ms float",
    ],
)
def test_out_of_range_schedule_numbers_are_4xx(admin: Api, overrides: dict[str, Any]) -> None:
    refused(send(admin, "POST", "/schedules", json.dumps(interval_schedule(**overrides))))


# UTC values before the year 1 or after 9999 overflow Python's datetime when stored.
OUT_OF_RANGE_INSTANTS = ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"]


@pytest.mark.parametrize("instant", OUT_OF_RANGE_INSTANTS)
def test_an_instant_beyond_the_years_1_to_9999_in_utc_is_422(
    admin: Api, start: dict[str, Any], instant: str
) -> None:
    refused(send(admin, "POST", "/scheduled-starts", json.dumps(echo_start(start_at=instant))))
    moved = json.dumps({"version": start["version"], "start_at": instant})
    refused(send(admin, "POST", f"/scheduled-starts/{start['id']}/reschedule", moved))
    refused(send(admin, "POST", "/tokens", json.dumps({"subject": "root", "expires_at": instant})))
    spec = {"interval_ms": 60_000, "starts_at": instant}
    refused(send(admin, "POST", "/schedules", json.dumps(interval_schedule(spec=spec))))
    refused(admin.get("/schedule-preview", cron="* * * * *", **{"from": instant}))
    refused(admin.get("/schedule-preview", interval_ms="60000", starts_at=instant))


@pytest.mark.parametrize("version", [HUGE, -HUGE, 1e20, 0.5, "1", True])
def test_a_version_that_no_column_holds_is_422(
    admin: Api, schedule: dict[str, Any], start: dict[str, Any], version: Any
) -> None:
    body = json.dumps({"version": version})
    refused(send(admin, "POST", f"/schedules/{schedule['id']}/pause", body))
    refused(send(admin, "PATCH", f"/schedules/{schedule['id']}", body))
    refused(send(admin, "POST", f"/scheduled-starts/{start['id']}/cancel", body))
    moved = json.dumps({"version": version, "start_at": echo_start()["start_at"]})
    refused(send(admin, "POST", f"/scheduled-starts/{start['id']}/reschedule", moved))


@pytest.mark.parametrize("version", [str(HUGE), "\u00b2", "-1", "1.0"])
def test_a_delete_version_that_is_not_a_column_value_is_422(
    admin: Api, schedule: dict[str, Any], version: str
) -> None:
    refused(send(admin, "DELETE", f"/schedules/{schedule['id']}", version=version))


@pytest.mark.parametrize(
    "changes",
    [
        {"name": 5},
        {"workflow": 5},
        {"workload_class": 5},
        {"overlap": 5},
        {"missed": ["skip"]},
        {"version_policy": 5},
        {"spec": 5},
        {"spec": {"interval_ms": 1e20}},
        {"spec": {"interval_ms": HUGE}},
        {"spec": {"interval_ms": 60_000, "starts_at": 5}},
        {"regression": 5},
        {"regression": {"metrics": 5}},
        {"max_catch_up": HUGE},
        {"catch_up_window": "soon"},
        {"catch_up_window": 1e300},
        {"misfire_grace_ms": HUGE},
        {"enabled": "yes"},
    ],
)
def test_a_patch_with_values_of_the_wrong_kind_is_4xx(
    admin: Api, schedule: dict[str, Any], changes: dict[str, Any]
) -> None:
    body = json.dumps({"version": schedule["version"], **changes})
    response = send(admin, "PATCH", f"/schedules/{schedule['id']}", body)
    assert 400 <= response.status_code < 500, response.text
    refused(response, response.status_code, response.json()["error"]["code"])


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        _cursor(f"seq:{HUGE}"),
        _cursor(f"seq:-{HUGE}"),
        _cursor("seq:-1"),
        _cursor("seq:\u0661\u0662"),
        _cursor("seq:abc"),
        _cursor("seq:"),
        "%%%",
        "\u00e9t\u00e9",
        "a",
    ],
)
def test_a_cursor_this_api_did_not_return_is_422_invalid_cursor(admin: Api, cursor: str) -> None:
    for suffix in ("/scheduled-starts", "/runs", "/schedules", "/tokens"):
        refused(admin.get(suffix, cursor=cursor), 422, "invalid_cursor")


@pytest.mark.parametrize(
    "params",
    [
        {"interval_ms": str(HUGE)},
        {"interval_ms": "\u00b2"},
        {"interval_ms": "1" + "0" * 20},
        {"cron": "* * * * *", "count": "\u00b2"},
        {"cron": "* * * * *", "count": str(HUGE)},
        {"interval_ms": "86400000", "starts_at": "9999-12-31T00:00:00Z"},
        {"cron": "* * * * *", "from": "9999-12-31T23:59:00Z"},
        {"interval_ms": "86400000", "from": "9999-12-31T23:59:00Z"},
    ],
)
def test_a_preview_with_numbers_or_instants_out_of_range_is_4xx(
    admin: Api, params: dict[str, str]
) -> None:
    response = admin.get("/schedule-preview", **params)
    assert response.status_code < 500, response.text
    if response.status_code != 200:
        refused(response, response.status_code, response.json()["error"]["code"])


@pytest.mark.parametrize("limit", [str(HUGE), "\u00b2", "-1", "1e3"])
def test_a_limit_out_of_range_is_422(admin: Api, limit: str) -> None:
    refused(admin.get("/scheduled-starts", limit=limit))


# --- the probe and 503s never echo connection details (scenario 16) -----------------------


def test_readyz_answers_a_generic_message_and_logs_the_detail(
    system: bootstrap.Punctual, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    secret_url = "postgresql+psycopg://scott:tiger-pass@db.internal.example:6543/prod"
    broken = sa.create_engine(secret_url, connect_args={"connect_timeout": 1})
    original = system.store.engine
    system.store.engine = broken
    try:
        with caplog.at_level(logging.WARNING, logger="punctual.http"):
            response = client.get("/readyz")
    finally:
        system.store.engine = original
        broken.dispose()
    error = refused(response, 503, "store_unavailable")
    for detail in ("db.internal.example", "6543", "scott", "tiger", "prod"):
        assert detail not in response.text, response.text
    assert "db.internal.example" in caplog.text, "the detail is for the operator's log"
    del error


def test_a_503_from_the_store_does_not_echo_connection_details(
    system: bootstrap.Punctual, admin: Api, caplog: pytest.LogCaptureFixture
) -> None:
    secret_url = "postgresql+psycopg://scott:tiger-pass@db.internal.example:6543/prod"
    broken = sa.create_engine(secret_url, connect_args={"connect_timeout": 1})
    original = system.store.engine
    system.store.engine = broken
    try:
        with caplog.at_level(logging.WARNING, logger="punctual.http"):
            response = admin.get("/scheduled-starts")
    finally:
        system.store.engine = original
        broken.dispose()
    refused(response, 503, "store_unavailable")
    for detail in ("db.internal.example", "6543", "scott", "tiger"):
        assert detail not in response.text, response.text
    assert "db.internal.example" in caplog.text


# --- token look-up (scenario 16, SPEC SEC-1) -----------------------------------------------


def test_only_the_exact_secret_authenticates_never_a_near_miss_or_its_digest(
    system: bootstrap.Punctual, admin: Api
) -> None:
    """The look-up is by the SHA-256 digest of what is presented (no second comparison of a
    digest with itself): a one-character change, a prefix, an extension, and the stored
    digest itself presented as a token are all 401."""
    secret = admin.token
    near_misses = [
        secret[:-1] + ("A" if secret[-1] != "A" else "B"),
        secret[:-1],
        secret + "x",
        secret.upper() if secret.upper() != secret else secret.lower(),
        hashlib.sha256(secret.encode()).hexdigest(),
    ]
    for token in near_misses:
        response = Api(admin.client, token, TENANT).get("/tokens")
        refused(response, 401, "unauthenticated")
    assert admin.get("/tokens").status_code == 200
