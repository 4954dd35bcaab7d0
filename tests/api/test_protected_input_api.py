"""Protected input through HTTP on both stores (SPEC FT-4, OS-9, OS-10; API.md check order).

A secret value and a secret unknown key go into the input; no answer, stored start error
or view may carry either. A schedule ``PATCH`` that needs the stored input checks the
caller's role and ownership first. Every path that stores input holds it to the tenant's
``max_input_bytes``.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.domain.runs import DefinitionState
from punctual.ports.records import WorkerRecord
from punctual.usecases.running.definitions import DeclaredDefinition, register_worker, set_lifecycle
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.conftest import make_settings
from tests.support.api import Api, echo_start, future, in_process, member_api, register_demo

MAX_INPUT_BYTES = 1000
SECRET_VALUE = f"SECRET-VALUE-{secrets.token_hex(6)}"
SECRET_KEY = f"secret-key-{secrets.token_hex(6)}"
# Fails the demo ``echo`` schema twice: a non-string message, and a key it does not name.
BAD_ECHO_INPUT = {"message": {"nested": SECRET_VALUE}, SECRET_KEY: SECRET_VALUE}


@pytest.fixture
def system(database_url: str, tmp_path: Path) -> Iterator[bootstrap.Punctual]:
    settings = make_settings(
        database_url, tmp_path, tenant_defaults={"max_input_bytes": MAX_INPUT_BYTES}
    )
    built = bootstrap.build(settings)
    register_demo(built)
    yield built
    built.close()


@pytest.fixture
def client(system: bootstrap.Punctual) -> Iterator[TestClient]:
    with in_process(system) as test_client:
        yield test_client


@pytest.fixture
def alice(system: bootstrap.Punctual, client: TestClient) -> Api:
    return member_api(system, client, "acme", "alice", Role.MEMBER)


def error_of(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    details: dict[str, Any] = error["details"]
    return details


def assert_secrets_absent(where: str, text: str) -> None:
    assert SECRET_VALUE not in text, f"the secret input value appears in {where}: {text}"
    assert SECRET_KEY not in text, f"the secret input key appears in {where}: {text}"


def patch(api: Api, schedule_id: str, body: dict[str, Any], key: str | None = None) -> Any:
    return api.patch(f"/schedules/{schedule_id}", body, key=key)


def schedule_body(workflow: str = "echo", payload: Any = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": f"protected-{secrets.token_hex(3)}",
        "workflow": workflow,
        "input": {"message": "hi"} if payload is None else payload,
        "spec": {"interval_ms": 60_000},
        "overlap": "skip",
        "missed": "skip",
        "workload_class": "standard",
        **extra,
    }


def create_schedule(api: Api, **kwargs: Any) -> dict[str, Any]:
    response = api.post("/schedules", schedule_body(**kwargs))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


# --------------------------------------------------------------------------- 422 input_invalid


def test_input_invalid_quotes_neither_a_value_nor_an_unknown_key(alice: Api) -> None:
    schedule = create_schedule(alice)
    # Each body is built once: a replay must send the very same request.
    start_body = echo_start(input=BAD_ECHO_INPUT)
    new_schedule = schedule_body(payload=BAD_ECHO_INPUT)
    edit = {"version": 1, "input": BAD_ECHO_INPUT}
    attempts = {
        "start create": lambda key: alice.post("/scheduled-starts", start_body, key=key),
        "schedule create": lambda key: alice.post("/schedules", new_schedule, key=key),
        "schedule PATCH of input": lambda key: patch(alice, schedule["id"], edit, key),
    }
    for what, send in attempts.items():
        key = secrets.token_hex(8)
        refused = send(key)
        details = error_of(refused, 422, "input_invalid")
        assert_secrets_absent(f"the answer to the {what}", refused.text)
        # Still actionable: the rules that failed and where, by the schema's names.
        problems = " ".join(details["errors"])
        assert "additionalProperties" in problems and "/message" in problems, problems
        # The answer is recorded for replay (a decided outcome): the replay is safe too.
        replay = send(key)
        assert replay.status_code == 422 and replay.json() == refused.json(), what
    assert alice.get(f"/schedules/{schedule['id']}").json()["version"] == 1
    assert alice.get("/scheduled-starts").json()["items"] == []


def _register_vault(system: bootstrap.Punctual) -> None:
    """``vault`` 1 takes any object; 2 takes only ``code``. A live worker has both."""
    lenient = DeclaredDefinition("vault", "1", "vault-1", {"type": "object"}, 60)
    strict = DeclaredDefinition(
        "vault",
        "2",
        "vault-2",
        {
            "type": "object",
            "properties": {"code": {"type": "string", "maxLength": 8}},
            "additionalProperties": False,
        },
        60,
    )
    now = system.services.clock.now()
    loaded = [(d.name, d.version, d.artifact) for d in (lenient, strict)]
    record = WorkerRecord("wrk_vault", "local", "test", ["standard"], loaded, 1, now, now, None)
    register_worker(system.services, record, [lenient, strict])


def test_input_rejected_at_dispatch_quotes_neither_a_value_nor_an_unknown_key(
    system: bootstrap.Punctual, alice: Api
) -> None:
    _register_vault(system)
    body = {**echo_start(), "workflow": "vault"}
    body["input"] = {"code": SECRET_VALUE, SECRET_KEY: 1}
    created = alice.create_due(body)
    assert created.status_code == 201, created.text
    start_id = created.json()["id"]
    set_lifecycle(system.services, "vault", "2", DefinitionState.ACTIVE)

    report = dispatch_due(system.services, "runner-vault", 10)

    assert report.failed == [start_id], report
    start = alice.get(f"/scheduled-starts/{start_id}")
    last_error = start.json()["last_error"]
    assert last_error["code"] == "input_rejected", start.text
    assert "additionalProperties" in last_error["message"], last_error
    assert "maxLength" in last_error["message"], last_error
    admin = member_api(system, alice.client, "acme", "root", Role.ADMIN)
    for what, response in {
        "the failed start": start,
        "the list of starts": alice.get("/scheduled-starts", state="failed"),
        "the health report": admin.get("/health"),
    }.items():
        assert response.status_code == 200, response.text
        assert_secrets_absent(what, response.text)


# --------------------------------------------------------------------------- stored input, 403


def test_a_patch_of_workflow_checks_role_and_ownership_before_reading_stored_input(
    system: bootstrap.Punctual, client: TestClient, alice: Api
) -> None:
    """The stored input fails the new workflow's schema; only a caller who may make the
    edit learns so, and even then without its keys or values (API.md check order)."""
    viewer = member_api(system, client, "acme", "vera", Role.VIEWER)
    bob = member_api(system, client, "acme", "bob", Role.MEMBER)
    # ``sleep`` takes extra keys; ``echo`` takes only ``message``.
    schedule = create_schedule(alice, workflow="sleep", payload={"seconds": 1, SECRET_KEY: 1})
    sid = schedule["id"]
    to_echo = {"version": 1, "workflow": "echo"}

    for caller in (viewer, bob):
        refused = patch(caller, sid, to_echo)
        error_of(refused, 403, "forbidden")
        assert_secrets_absent("a refused PATCH", refused.text)
    # Validation that reads only the request still answers before the role.
    error_of(patch(viewer, sid, {"version": 1, "workflow": "nope"}), 422, "unknown_workflow")
    error_of(
        patch(viewer, sid, {"version": 1, "workflow": "echo", "input": {}}), 422, "input_invalid"
    )
    error_of(
        patch(viewer, sid, {"version": 1, "workflow": "echo", "input": {"message": "m"}}),
        403,
        "forbidden",
    )

    by_creator = patch(alice, sid, to_echo)
    details = error_of(by_creator, 422, "input_invalid")
    assert details["errors"], details
    assert_secrets_absent("the creator's refused PATCH", by_creator.text)
    # The stored-input check comes before the version check.
    error_of(patch(alice, sid, {**to_echo, "version": 7}), 422, "input_invalid")
    assert alice.get(f"/schedules/{sid}").json()["version"] == 1

    fits = patch(alice, sid, {"version": 1, "workflow": "sleep"})
    assert fits.status_code == 200, fits.text
    assert fits.json()["version"] == 2


# --------------------------------------------------------------------------- 413 input_too_large


def test_every_path_that_stores_input_holds_it_to_max_input_bytes(
    system: bootstrap.Punctual, client: TestClient, alice: Api
) -> None:
    big = {"message": "x" * (MAX_INPUT_BYTES + 1)}
    schedule = create_schedule(alice)
    sid = schedule["id"]
    attempts = {
        "start create": lambda: alice.post("/scheduled-starts", echo_start(input=big)),
        "schedule create": lambda: alice.post("/schedules", schedule_body(payload=big)),
        "schedule PATCH of input": lambda: patch(alice, sid, {"version": 1, "input": big}),
        "schedule PATCH of workflow and input": lambda: patch(
            alice, sid, {"version": 1, "workflow": "echo", "input": big}
        ),
    }
    for what, send in attempts.items():
        details = error_of(send(), 413, "input_too_large")
        assert details["limit"] == MAX_INPUT_BYTES, (what, details)
        assert details["size"] > MAX_INPUT_BYTES, (what, details)
    assert alice.get(f"/schedules/{sid}").json()["version"] == 1
    assert len(alice.get("/schedules").json()["items"]) == 1
    assert alice.get("/scheduled-starts").json()["items"] == []

    # The role comes first: a viewer learns nothing about the limit.
    viewer = member_api(system, client, "acme", "vera", Role.VIEWER)
    error_of(patch(viewer, sid, {"version": 1, "input": big}), 403, "forbidden")

    fits = {"message": "x" * (MAX_INPUT_BYTES - len('{"message":""}'))}
    edited = patch(alice, sid, {"version": 1, "input": fits})
    assert edited.status_code == 200, edited.text
    assert (
        alice.post("/scheduled-starts", echo_start(input=fits, start_at=future())).status_code
        == 201
    )
