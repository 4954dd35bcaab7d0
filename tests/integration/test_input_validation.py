"""One judge of input at acceptance, dispatch and the worker, on real workers of both
engines (SPEC FT-4, OS-9; decision 0004).

A workflow's pydantic model that is stricter than its JSON Schema refuses input the
schema accepts: the run fails ``input_rejected`` before its body runs, and pydantic's
message, which quotes the input (``input_value='...'``), reaches neither the run's error,
its views, the database, the log nor Temporal's history. Formats the model enforces are
asserted by the schema, so acceptance refuses what the worker would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from punctual import bootstrap
from punctual.domain.permissions import Role
from tests.integration.test_protected_input import (
    assert_absent,
    iso,
    raw_database_text,
    start_body,
    wait_until,
    worker_settings,
)
from tests.support.api import Api, in_process, member_api
from tests.support.temporal import NAMESPACE

APP_REF = "tests.integration.validation_app:app"


@pytest.fixture(params=["local", pytest.param("temporal", marks=pytest.mark.temporal)])
def engine(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@dataclass
class Running:
    system: bootstrap.Punctual
    member: Api
    viewer: Api
    temporal_address: str | None


@pytest.fixture
def running(
    engine: str, database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Running]:
    overrides: dict[str, Any] = {}
    address: str | None = None
    if engine == "temporal":
        address = request.getfixturevalue("temporal_address")
        prefix = f"validation-{uuid.uuid4().hex[:8]}"
        overrides = {
            "engine": "temporal",
            "temporal": {"address": address, "namespace": NAMESPACE},
            # Queues of this test's own: the module's Temporal server outlives the test.
            "workload_classes": {"standard": {"task_queue": f"{prefix}-standard", "priority": 3}},
        }
    system = bootstrap.build(worker_settings(database_url, tmp_path, **overrides))
    try:
        system.start_worker(APP_REF, slots=2)
        system.start_runner()
        with in_process(system) as client:
            yield Running(
                system,
                member_api(system, client),
                member_api(system, client, subject="vera", role=Role.VIEWER),
                address,
            )
    finally:
        system.close()


def ended_run(api: Api, start_id: str) -> dict[str, Any] | None:
    start = api.get(f"/scheduled-starts/{start_id}").json()
    if start["dispatch"] is None:
        return None
    run: dict[str, Any] = api.get(f"/runs/{start['dispatch']['run_id']}").json()
    return run if run["state"] not in ("pending", "running") else None


def temporal_history_text(address: str, run_id: str) -> str:
    """The run's Temporal history as JSON, with every base64 payload decoded beside it."""
    from temporalio.client import Client

    async def fetch() -> str:
        client = await Client.connect(address, namespace=NAMESPACE)
        history = await client.get_workflow_handle(run_id).fetch_history()
        return history.to_json()

    text = asyncio.run(fetch())
    decoded: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str) and len(node) >= 8:
            with contextlib.suppress(ValueError):
                decoded.append(base64.b64decode(node, validate=True).decode("utf-8", "replace"))

    walk(json.loads(text))
    return text + "\n" + "\n".join(decoded)


def test_a_model_stricter_than_its_schema_fails_the_run_without_quoting_the_input(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="punctual")
    marker = f"PROTECTED-{secrets.token_hex(8)}"
    created = running.member.create_due(start_body("guarded", {"code": marker}, iso(0)))
    assert created.status_code == 201, created.text  # the schema accepts it

    run = wait_until("the run to end", lambda: ended_run(running.member, created.json()["id"]))

    assert run["state"] == "failed", run
    assert run["error"]["code"] == "input_rejected", run["error"]
    assert "/code: value_error" in run["error"]["message"], run["error"]
    assert run["started_at"] is not None and run["result"] is None
    channels: list[tuple[str, bytes | str]] = [
        ("the run, as a viewer reads it", running.viewer.get(f"/runs/{run['id']}").text),
        ("the list of runs", running.viewer.get("/runs").text),
        ("the start", running.viewer.get(f"/scheduled-starts/{created.json()['id']}").text),
        ("the log", caplog.text),
        ("the database", raw_database_text(running.system)),
    ]
    if running.temporal_address is not None:
        channels.append(
            ("the Temporal history", temporal_history_text(running.temporal_address, run["id"]))
        )
    for where, text in channels:
        assert_absent(marker, where, text)


def test_acceptance_refuses_what_the_model_refuses_for_a_format(running: Running) -> None:
    marker = f"PROTECTED-{secrets.token_hex(8)}"
    refused = running.member.create_due(start_body("tagged", {"id": marker}, iso(0)))
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "input_invalid", refused.text
    assert_absent(marker, "the 422 answer", refused.text)

    valid = str(uuid.uuid4())
    created = running.member.create_due(start_body("tagged", {"id": valid}, iso(0)))
    assert created.status_code == 201, created.text
    run = wait_until("the run to end", lambda: ended_run(running.member, created.json()["id"]))
    assert (run["state"], run["result"]) == ("completed", {"id": valid}), run
