"""A run as API.md "Runs" describes it: every field, the start's trace context included."""

from __future__ import annotations

from punctual import bootstrap
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.support.api import echo_start, in_process, live_worker, member_api

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
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
    "traceparent",
    "created_at",
    "claimed_at",
    "started_at",
    "ended_at",
}


def test_a_run_shows_every_contract_field_and_its_starts_traceparent(
    system: bootstrap.Punctual,
) -> None:
    live_worker(system)
    with in_process(system) as client:
        api = member_api(system, client)
        start = api.create_due(echo_start(traceparent=TRACEPARENT)).json()
        dispatch_due(system.services, "runner", 10)
        run_id = api.get(f"/scheduled-starts/{start['id']}").json()["dispatch"]["run_id"]
        run = api.get(f"/runs/{run_id}").json()
        listed = api.get("/runs").json()["items"]
    assert set(run) >= RUN_FIELDS, RUN_FIELDS - set(run)
    assert run["traceparent"] == TRACEPARENT
    assert [r["traceparent"] for r in listed] == [TRACEPARENT]
