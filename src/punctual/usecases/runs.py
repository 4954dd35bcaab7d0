"""Runs as users see them: read, list, cancel (cooperative), terminate (immediate)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from punctual.domain.permissions import Action, Principal, require
from punctual.domain.runs import Run, RunState
from punctual.errors import not_found
from punctual.ports.records import RunFilter
from punctual.ports.store import Tx
from punctual.usecases.context import Services
from punctual.usecases.idempotency import Mutation, Outcome
from punctual.usecases.paging import check_choice, check_limit, decode_cursor, page
from punctual.usecases.projections import run_view


@dataclass(frozen=True)
class ListRuns:
    workflow: str | None = None
    state: str | None = None
    origin_id: str | None = None
    limit: int = 50
    cursor: str | None = None


def _load(tx: Tx, principal: Principal, run_id: str) -> Run:
    run = tx.runs.get(principal.tenant, run_id)
    if run is None:
        raise not_found("run", run_id)
    return run


def get(services: Services, principal: Principal, run_id: str) -> dict[str, Any]:
    with services.store.transaction(readonly=True) as tx:
        return run_view(_load(tx, principal, run_id))


def list_runs(services: Services, principal: Principal, query: ListRuns) -> dict[str, Any]:
    limit = check_limit(query.limit)
    check_choice("state", query.state, [s.value for s in RunState])
    where = RunFilter(query.workflow, query.state, query.origin_id)
    with services.store.transaction(readonly=True) as tx:
        rows = tx.runs.find(principal.tenant, where, decode_cursor(query.cursor), limit + 1)
    return page(rows, limit, run_view)


def cancel(services: Services, principal: Principal, run_id: str) -> Mutation:
    """Cooperative: the workflow sees ``cancel_requested``; idempotent, also once finished."""

    def mutation(tx: Tx, now: datetime) -> Outcome:
        run = _load(tx, principal, run_id)
        require(principal, Action.MUTATE_START, owner=run.started_by)
        if not run.finished:
            tx.runs.request_cancel(principal.tenant, run_id, now)
            services.engine.cancel(principal.tenant, run_id)
        return Outcome(200, run_view(_load(tx, principal, run_id)), resource_id=run_id)

    return mutation


def terminate(services: Services, principal: Principal, run_id: str) -> Mutation:
    """Immediate: recorded ``terminated`` now, the body is stopped, later results ignored."""

    def mutation(tx: Tx, now: datetime) -> Outcome:
        run = _load(tx, principal, run_id)
        require(principal, Action.MUTATE_START, owner=run.started_by)
        if not run.finished:
            tx.runs.terminate(principal.tenant, run_id, now, f"terminated by {principal.subject}")
            services.engine.terminate(principal.tenant, run_id)
        return Outcome(200, run_view(_load(tx, principal, run_id)), resource_id=run_id)

    return mutation
