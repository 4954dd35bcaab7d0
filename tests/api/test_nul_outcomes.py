"""Results and errors holding U+0000 through HTTP, on both stores (SPEC FT-3, OS-4).

A finished run's result or error may hold NUL, which PostgreSQL's JSONB refuses. The
answer to a cancel or terminate carries the run view, and a decided answer is recorded
under its idempotency key: it must be recorded losslessly, so that a retry with the same
key replays the same body, byte for byte, NUL included, instead of a 500 on every retry.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from punctual import bootstrap
from punctual.domain.runs import RunState
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.support.api import Api, echo_start, in_process, live_worker, member_api

NUL_RESULT = {"text": "before\x00after", "\x00key": ["\x00"], "$punctual_escaped": 1}
NUL_ERROR = {"code": "workflow_error", "message": "a message with a \x00 in it"}
WORKER = "wrk_nul_outcomes"


@pytest.fixture
def api(system: bootstrap.Punctual) -> Iterator[Api]:
    live_worker(system)
    with in_process(system) as client:
        yield member_api(system, client)


def finished_run(
    system: bootstrap.Punctual,
    api: Api,
    request_id: str,
    state: RunState,
    result: Any = None,
    error: dict[str, Any] | None = None,
) -> str:
    """A run of a start due now, ended by its worker with ``result`` or ``error``."""
    start = api.create_due(echo_start(business_request_id=request_id))
    assert start.status_code == 201, start.text
    dispatch_due(system.services, "runner", 10)
    run_id: str = api.get(f"/scheduled-starts/{start.json()['id']}").json()["dispatch"]["run_id"]
    now = system.services.clock.now()
    with system.store.transaction() as tx:
        assert tx.run_ledger.mark_running(run_id, 1, WORKER, now)
        assert tx.run_ledger.finish(run_id, state, 1, result, error, WORKER, now) is not None
    return run_id


@pytest.mark.parametrize("operation", ["cancel", "terminate"])
def test_a_run_operation_on_a_nul_outcome_replays_the_same_bytes(
    system: bootstrap.Punctual, api: Api, operation: str
) -> None:
    completed = finished_run(system, api, "req-result", RunState.COMPLETED, result=NUL_RESULT)
    failed = finished_run(system, api, "req-error", RunState.FAILED, error=NUL_ERROR)
    for run_id, field, value in ((completed, "result", NUL_RESULT), (failed, "error", NUL_ERROR)):
        key = f"k-{operation}-{field}"
        first = api.post(f"/runs/{run_id}/{operation}", key=key)
        assert first.status_code == 200, first.text
        assert first.json()[field] == value
        for _ in range(2):
            again = api.post(f"/runs/{run_id}/{operation}", key=key)
            assert again.status_code == 200, again.text
            assert again.content == first.content
        assert api.get(f"/runs/{run_id}").json()[field] == value


def test_a_nul_outcome_reads_back_as_written(system: bootstrap.Punctual, api: Api) -> None:
    run_id = finished_run(system, api, "req-read", RunState.COMPLETED, result=NUL_RESULT)
    listed = api.get("/runs", state="completed").json()["items"]
    assert api.get(f"/runs/{run_id}").json()["result"] == NUL_RESULT
    assert [r["result"] for r in listed if r["id"] == run_id] == [NUL_RESULT]
