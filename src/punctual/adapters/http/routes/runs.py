"""Runs (API.md, "Runs")."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query
from fastapi.responses import Response

from punctual.adapters.http.openapi import ADMIN, IDEMPOTENCY_DOC, LIST, READ, answering, mutating
from punctual.adapters.http.routes.common import (
    CallDep,
    MutationDep,
    PageDep,
    choice_query,
    tenant_router,
)
from punctual.domain.runs import RunState
from punctual.resources import Run, RunPage
from punctual.usecases.running import runs

router = tenant_router("runs", collection="/runs")
_StateFilter = Annotated[str | None, choice_query([s.value for s in RunState])]
_OriginIdFilter = Annotated[
    str | None, Query(description="The id of the start or occurrence that started the run.")
]
_OriginFilter = Annotated[
    str | None,
    Query(
        description="`scheduled_start` or `schedule`: runs whose `origin.source` is that; "
        "any other value is the id of the start or occurrence that started the run, as "
        "`origin_id`."
    ),
]
_ScheduleFilter = Annotated[str | None, Query(description="Runs of this schedule's occurrences.")]


@router.get("/{run_id}", **answering(200, Run, READ))
def get_run(tenant: str, run_id: str, call: CallDep) -> dict[str, Any]:
    return runs.get(call.services, call.principal(tenant), run_id)


@router.get(
    "",
    **answering(200, RunPage, LIST),
    description="Runs, newest first unless `order=oldest`, filtered by what is given.",
)
def list_runs(
    tenant: str,
    call: CallDep,
    page: PageDep,
    workflow: str | None = None,
    state: _StateFilter = None,
    schedule_id: _ScheduleFilter = None,
    origin: _OriginFilter = None,
    origin_id: _OriginIdFilter = None,
) -> dict[str, Any]:
    principal = call.principal(tenant)
    query = runs.ListRuns(
        workflow=workflow,
        state=state,
        origin_id=origin_id,
        limit=page.size(),
        cursor=page.cursor,
        order=page.order,
        schedule_id=schedule_id,
        origin=origin,
    )
    return runs.list_runs(call.services, principal, query)


@router.post(
    "/{run_id}/cancel",
    **mutating(200, Run, ADMIN, answer="The run"),
    description="Cooperative cancel: the workflow sees `cancel_requested` and may clean up. "
    "Idempotent, also once the run has ended; owner or admin. " + IDEMPOTENCY_DOC,
)
def cancel_run(tenant: str, run_id: str, call: MutationDep) -> Response:
    return call.mutate(tenant, lambda p: runs.cancel(call.services, p, run_id))


@router.post(
    "/{run_id}/terminate",
    **mutating(200, Run, ADMIN, answer="The run"),
    description="Immediate: the run is recorded `terminated` at once and its body stopped. "
    "Idempotent; owner or admin. " + IDEMPOTENCY_DOC,
)
def terminate_run(tenant: str, run_id: str, call: MutationDep) -> Response:
    return call.mutate(tenant, lambda p: runs.terminate(call.services, p, run_id))
