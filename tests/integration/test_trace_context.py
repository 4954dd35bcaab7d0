"""A start's ``traceparent`` reaches its run's body on the local engine, both stores (OS-1).

A real worker (bodies in child processes) and runner: the start is created through the
API with a W3C ``traceparent``, and the body returns ``RunContext.traceparent``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from punctual import bootstrap
from punctual.domain.permissions import Role
from tests.conftest import make_settings
from tests.integration.test_worker_runs import finished, run_id_of, wait_for
from tests.support.api import Api, in_process, member_api

APP_REF = "tests.integration.trace_app:app"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    settings = make_settings(
        database_url,
        tmp_path,
        worker={"heartbeat_seconds": 0.5, "liveness_seconds": 10},
        runner={"lease_seconds": 2, "max_idle_seconds": 0.2},
    )
    system = bootstrap.build(settings)
    try:
        system.start_worker(APP_REF, slots=1)
        system.start_runner()
        with in_process(system) as client:
            yield member_api(system, client, role=Role.ADMIN)
    finally:
        system.close()


def start_traced(api: Api, request_id: str, traceparent: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workflow": "traced",
        "input": {},
        "business_request_id": request_id,
        "workload_class": "standard",
    }
    if traceparent is not None:
        body["traceparent"] = traceparent
    response = api.create_due(body)
    assert response.status_code == 201, response.text
    start: dict[str, Any] = response.json()
    return start


def test_the_body_sees_its_starts_traceparent(api: Api) -> None:
    run = wait_for(api, run_id_of(api, start_traced(api, "traced-1", TRACEPARENT)), finished)
    assert run["state"] == "completed"
    assert run["result"] == {"traceparent": TRACEPARENT}
    assert run["traceparent"] == TRACEPARENT


def test_a_start_without_one_gives_the_body_none(api: Api) -> None:
    run = wait_for(api, run_id_of(api, start_traced(api, "untraced-1", None)), finished)
    assert run["state"] == "completed"
    assert run["result"] == {"traceparent": None}
    assert run["traceparent"] is None
