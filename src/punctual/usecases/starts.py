"""One-off scheduled starts: create, read, reschedule, cancel (OS-1..OS-10).

Each mutation is a function ``(tx, now) -> Outcome`` built from a frozen command, so
HTTP, the CLI and the Python API run the same code under the same idempotency
mechanism. Checks run in the contract's order: existence, validation, role, state,
version.

A start that a runner has only claimed (``dispatching``) is still reschedulable and
cancelable: claims do not change ``version`` (FT-5), the mutation wins the compare-and-set,
and the dispatch, which records under the claim's token, loses and withdraws the engine
execution it may have started.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from punctual.domain.ids import new_id
from punctual.domain.permissions import Action, Principal, require
from punctual.domain.starts import (
    ScheduledStart,
    StartState,
    check_mutable,
    validate_new_start_at,
)
from punctual.errors import InvalidRequest, not_found
from punctual.ports.records import NewStart, StartFilter
from punctual.ports.store import Tx
from punctual.usecases.admission import admit_input_and_class
from punctual.usecases.context import Services
from punctual.usecases.definitions import input_problems, require_active
from punctual.usecases.idempotency import Mutation, Outcome
from punctual.usecases.paging import check_choice, check_limit, decode_cursor, page
from punctual.usecases.projections import start_view


@dataclass(frozen=True)
class CreateStart:
    workflow: str
    input: Any
    business_request_id: str
    start_at: datetime
    workload_class: str
    time_zone: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    traceparent: str | None = None


@dataclass(frozen=True)
class RescheduleStart:
    start_id: str
    version: int
    start_at: datetime
    time_zone: str | None = None


@dataclass(frozen=True)
class CancelStart:
    start_id: str
    version: int
    reason: str | None = None


@dataclass(frozen=True)
class ListStarts:
    state: str | None = None
    workflow: str | None = None
    business_request_id: str | None = None
    limit: int = 50
    cursor: str | None = None


def create(services: Services, principal: Principal, cmd: CreateStart) -> Mutation:
    def mutation(tx: Tx, now: datetime) -> Outcome:
        validate_new_start_at(cmd.start_at, cmd.time_zone, now)
        definition = require_active(tx, cmd.workflow)
        problems = input_problems(definition, cmd.input)
        if problems:
            raise InvalidRequest(
                f"input does not validate against {cmd.workflow} version "
                f"{definition.version}: {'; '.join(problems)}",
                code="input_invalid",
                errors=problems,
            )
        require(principal, Action.CREATE)
        admit_input_and_class(services, principal.tenant, cmd.workload_class, cmd.input)
        limits = services.policy.tenant_policy(principal.tenant)
        services.quota.admit_start(
            tx,
            principal.tenant,
            cmd.workload_class,
            limits.max_pending_starts,
            limits.max_pending_by_class.get(cmd.workload_class),
        )
        start_id = new_id("st")
        start = tx.starts.insert(
            NewStart(
                id=start_id,
                tenant=principal.tenant,
                workflow=cmd.workflow,
                business_request_id=cmd.business_request_id,
                start_at=cmd.start_at,
                time_zone=cmd.time_zone,
                workload_class=cmd.workload_class,
                attributes=dict(cmd.attributes),
                traceparent=cmd.traceparent,
                input=services.codec.encrypt(cmd.input, principal.tenant),
                created_by=principal.subject,
                run_id=new_id("run"),
            ),
            now,
        )
        _wake_if_due_soon(services, tx, cmd.start_at, now)
        return Outcome(201, start_view(start), resource_id=start_id)

    return mutation


def _wake_if_due_soon(services: Services, tx: Tx, due_at: datetime, now: datetime) -> None:
    """Runners look again within the horizon anyway; only sooner work needs a wake-up."""
    if (due_at - now).total_seconds() < services.policy.wake_horizon_seconds:
        tx.starts.notify_due()


def _load(tx: Tx, principal: Principal, start_id: str) -> ScheduledStart:
    start = tx.starts.get(principal.tenant, start_id, lock=True)
    if start is None:
        raise not_found("start", start_id)
    return start


def _changed(tx: Tx, start: ScheduledStart, now: datetime, **changes: Any) -> ScheduledStart:
    if not tx.starts.compare_and_set(start.id, start.version, now, **changes):
        # Lost the race to a claim or another mutation: report what won.
        latest = tx.starts.get(start.tenant, start.id)
        assert latest is not None
        check_mutable(latest, start.version)
    updated = tx.starts.get(start.tenant, start.id)
    assert updated is not None
    return updated


def reschedule(services: Services, principal: Principal, cmd: RescheduleStart) -> Mutation:
    def mutation(tx: Tx, now: datetime) -> Outcome:
        start = _load(tx, principal, cmd.start_id)
        validate_new_start_at(cmd.start_at, cmd.time_zone, now)
        require(principal, Action.MUTATE_START, owner=start.created_by)
        check_mutable(start, cmd.version)
        # A dispatching start goes back to scheduled: the reschedule wins over the claim,
        # whose dispatch then cannot record (FT-5).
        updated = _changed(
            tx,
            start,
            now,
            state=StartState.SCHEDULED.value,
            start_at=cmd.start_at,
            time_zone=cmd.time_zone,
            due_at=cmd.start_at,
            next_attempt_at=None,
            claimed_by=None,
            lease_until=None,
        )
        _wake_if_due_soon(services, tx, cmd.start_at, now)
        return Outcome(200, start_view(updated), resource_id=start.id)

    return mutation


def cancel(services: Services, principal: Principal, cmd: CancelStart) -> Mutation:
    del services

    def mutation(tx: Tx, now: datetime) -> Outcome:
        start = _load(tx, principal, cmd.start_id)
        if cmd.reason is not None and len(cmd.reason) > 300:
            raise InvalidRequest("reason is limited to 300 characters")
        require(principal, Action.MUTATE_START, owner=start.created_by)
        check_mutable(start, cmd.version)
        updated = _changed(
            tx,
            start,
            now,
            state=StartState.CANCELED.value,
            reason=cmd.reason or "canceled",
            claimed_by=None,
            lease_until=None,
        )
        return Outcome(200, start_view(updated), resource_id=start.id)

    return mutation


def get(services: Services, principal: Principal, start_id: str) -> dict[str, Any]:
    with services.store.transaction(readonly=True) as tx:
        start = tx.starts.get(principal.tenant, start_id)
    if start is None:
        raise not_found("start", start_id)
    return start_view(start)


def list_starts(services: Services, principal: Principal, query: ListStarts) -> dict[str, Any]:
    limit = check_limit(query.limit)
    check_choice("state", query.state, [s.value for s in StartState])
    where = StartFilter(query.state, query.workflow, query.business_request_id)
    with services.store.transaction(readonly=True) as tx:
        rows = tx.starts.find(principal.tenant, where, decode_cursor(query.cursor), limit + 1)
    return page(rows, limit, start_view)
