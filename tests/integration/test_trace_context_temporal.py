"""A start's ``traceparent`` on the Temporal engine (OS-1): the body sees it as
``RunContext.traceparent`` (from the run record), and the workflow execution carries it as
its ``traceparent`` header, read back from the execution's history.

A real ``temporal server start-dev``, a real Temporal worker and the runner.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from punctual import bootstrap
from punctual.adapters.engines.temporal.trace import TRACEPARENT_HEADER, header_value
from tests.api.test_starts_on_temporal import temporal_settings
from tests.integration.test_trace_context import TRACEPARENT, start_traced
from tests.integration.test_worker_runs import finished, run_id_of, wait_for
from tests.support.api import Api, in_process, member_api
from tests.support.temporal import NAMESPACE

pytestmark = pytest.mark.temporal

APP_REF = "tests.integration.trace_app:app"
WAIT_SECONDS = 30.0


@pytest.fixture
def api(sqlite_url: str, tmp_path: Path, temporal_address: str) -> Iterator[Api]:
    # Queues of this test's own: the module's Temporal server outlives the test.
    prefix = f"trace-{uuid.uuid4().hex[:8]}"
    system = bootstrap.build(temporal_settings(sqlite_url, tmp_path, temporal_address, prefix))
    try:
        system.start_worker(APP_REF)
        system.start_runner()
        with in_process(system) as client:
            yield member_api(system, client)
    finally:
        system.close()


def started_headers(address: str, run_id: str) -> dict[str, Payload]:
    """The headers of the run's execution as Temporal recorded its start."""

    async def read() -> dict[str, Payload]:
        client = await Client.connect(address, namespace=NAMESPACE)
        history = await client.get_workflow_handle(run_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        return dict(started.header.fields)

    return asyncio.run(read())


def test_the_body_and_the_execution_carry_the_traceparent(api: Api, temporal_address: str) -> None:
    run_id = run_id_of(api, start_traced(api, "traced-temporal", TRACEPARENT))
    run = wait_for(api, run_id, finished, timeout=WAIT_SECONDS)
    assert run["state"] == "completed", run
    assert run["result"] == {"traceparent": TRACEPARENT}
    headers = started_headers(temporal_address, run_id)
    assert header_value(headers[TRACEPARENT_HEADER]) == TRACEPARENT


def test_a_start_without_one_has_no_header_and_none_in_the_body(
    api: Api, temporal_address: str
) -> None:
    run_id = run_id_of(api, start_traced(api, "untraced-temporal", None))
    run = wait_for(api, run_id, finished, timeout=WAIT_SECONDS)
    assert run["state"] == "completed", run
    assert run["result"] == {"traceparent": None}
    assert TRACEPARENT_HEADER not in started_headers(temporal_address, run_id)
