"""Runs as users see them: read, list, cancel (cooperative), terminate (immediate).

Cancel and terminate change the store first (FT-6): the change commits with the answer,
and only then is the engine told, outside the transaction and without holding up the
answer (``Outcome.after_commit``). An engine that is down changes nothing recorded: the
runner sends the cancel or terminate again until the engine has it (for Temporal, the
sync pass; the local engine's workers read the store itself).

A run id that a start or occurrence allocated but whose run is not recorded yet (the
start is still being dispatched) answers ``202 in_progress``, never recorded under the
idempotency key, so a retry of the same request acts on the run once it exists (FT-5).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from punctual.domain.permissions import Action, Principal, require
from punctual.domain.runs import Run, RunState
from punctual.domain.starts import TERMINAL_STATES
from punctual.errors import not_found
from punctual.ports.records import Order, RunFilter
from punctual.ports.store import Tx
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import IN_PROGRESS_BODY, Answer, Mutation, Outcome
from punctual.usecases.kernel.paging import check_choice, page, seek
from punctual.usecases.kernel.projections import run_view
from punctual.usecases.running.execution import run_ended

log = logging.getLogger("punctual.runs")


RUN_SOURCES = ["scheduled_start", "schedule"]
"""A run's ``origin.source``: what the ``origin`` filter names, besides an origin's id."""


@dataclass(frozen=True)
class ListRuns:
    workflow: str | None = None
    state: str | None = None
    origin_id: str | None = None
    """The id of the start or occurrence that started the run (``origin.id``)."""
    limit: int = 50
    cursor: str | None = None
    order: str | None = None
    """``newest`` (the default) or ``oldest``; absent with a cursor, the cursor's order."""
    schedule_id: str | None = None
    """Runs of that schedule's occurrences."""
    origin: str | None = None
    """``scheduled_start`` or ``schedule`` (``origin.source``); any other value is an
    origin's id, as ``origin_id``."""


def _load(tx: Tx, principal: Principal, run_id: str) -> Run:
    run = tx.runs.get(principal.tenant, run_id)
    if run is None:
        raise not_found("run", run_id)
    return run


def get(services: Services, principal: Principal, run_id: str) -> dict[str, Any]:
    with services.store.transaction(readonly=True) as tx:
        return run_view(_load(tx, principal, run_id))


def _run_filter(query: ListRuns) -> RunFilter | None:
    """The store's filter; None when it keeps no run (two different origin ids)."""
    source = query.origin if query.origin in RUN_SOURCES else None
    origin_id = query.origin_id
    if query.origin and source is None:
        if origin_id and origin_id != query.origin:
            return None
        origin_id = query.origin
    return RunFilter(query.workflow, query.state, origin_id, query.schedule_id, source)


def list_runs(services: Services, principal: Principal, query: ListRuns) -> dict[str, Any]:
    at = seek(query.limit, query.cursor, query.order, legacy=Order.OLDEST)
    check_choice("state", query.state, [s.value for s in RunState])
    where = _run_filter(query)
    if where is None:
        return page([], at, run_view)
    with services.store.transaction(readonly=True) as tx:
        rows = tx.runs.find(principal.tenant, where, at)
    return page(rows, at, run_view)


def _load_to_mutate(tx: Tx, principal: Principal, run_id: str) -> Run | Outcome:
    """The run, once the principal may change it; ``202 in_progress`` when its run id was
    allocated by a start still being dispatched (FT-5), so nothing decided is recorded."""
    run = tx.runs.get(principal.tenant, run_id)
    if run is not None:
        require(principal, Action.MUTATE_START, owner=run.started_by)
        return run
    allocation = tx.starts.allocation_of_run(principal.tenant, run_id)
    if allocation is not None:
        state, created_by = allocation
        require(principal, Action.MUTATE_START, owner=created_by)
        if state not in TERMINAL_STATES:
            return Outcome(Answer.ACCEPTED, IN_PROGRESS_BODY)
    # No start allocated it, or its start ended without a run (canceled, failed, skipped).
    raise not_found("run", run_id)


def _tell_engine(call: Callable[[str, str], None], what: str, tenant: str, run_id: str) -> None:
    """The engine call that follows a committed store change; never raises (FT-6)."""
    try:
        call(tenant, run_id)
    except Exception as exc:
        log.warning("event=run_%s_deferred run=%s error=%s", what, run_id, exc)


def cancel(services: Services, principal: Principal, run_id: str) -> Mutation:
    """Cooperative: the workflow sees ``cancel_requested``; idempotent, also once finished."""

    def record(tx: Tx, now: datetime) -> None:
        tx.runs.request_cancel(principal.tenant, run_id, now)

    return _stop(services, principal, run_id, record, services.engine.cancel, "cancel")


def terminate(services: Services, principal: Principal, run_id: str) -> Mutation:
    """Immediate: recorded ``terminated`` now, the body is stopped, later results ignored."""

    def record(tx: Tx, now: datetime) -> None:
        tx.runs.terminate(principal.tenant, run_id, now, f"terminated by {principal.subject}")

    return _stop(services, principal, run_id, record, services.engine.terminate, "terminate")


def _stop(
    services: Services,
    principal: Principal,
    run_id: str,
    record: Callable[[Tx, datetime], None],
    tell: Callable[[str, str], None],
    what: str,
) -> Mutation:
    """Cancel and terminate alike: a run that has not finished is changed in the store, and
    the engine is told once that commits (FT-6); a finished one answers as it is."""

    def mutation(tx: Tx, now: datetime) -> Outcome:
        run = _load_to_mutate(tx, principal, run_id)
        if isinstance(run, Outcome):
            return run
        follow = None
        changed = run
        if not run.finished:
            record(tx, now)
            changed = _load(tx, principal, run_id)
            tell_engine = partial(_tell_engine, tell, what, principal.tenant, run_id)
            # Terminated, or canceled before a worker took it: recorded here, not by a
            # worker, so its one end line is said here (a running run's cancel is only a
            # request; its worker records the end).
            ended = changed if changed.finished else None

            def follow() -> None:
                services.on_runs_ended()  # a run it ended: its follow-through, here
                if ended is not None:
                    services.events.emit(
                        run_ended(
                            ended.tenant, ended.id, ended.state, ended.attempts, ended.workflow
                        )
                    )
                tell_engine()

        return Outcome(Answer.DONE, run_view(changed), resource_id=run_id, after_commit=follow)

    return mutation
