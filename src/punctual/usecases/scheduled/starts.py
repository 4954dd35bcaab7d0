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

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from punctual.domain.ids import new_id
from punctual.domain.permissions import Action, Principal, require
from punctual.domain.runs import Definition
from punctual.domain.starts import (
    ScheduledStart,
    StartRequest,
    StartState,
    check_mutable,
    validate_new_start_at,
)
from punctual.errors import InvalidRequest, PunctualError, not_found
from punctual.ports.records import NewStart, Order, StartFilter
from punctual.ports.store import OneTripCreate, OneTripOutcome, Tx
from punctual.usecases.kernel.admission import admit_input_and_class
from punctual.usecases.kernel.audit import AuditedRequest
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import (
    Answer,
    BatchMutation,
    IdempotentRequest,
    ItemResult,
    Mutation,
    MutationRunner,
    Outcome,
)
from punctual.usecases.kernel.mutations import check_tenant
from punctual.usecases.kernel.paging import check_choice, page, seek
from punctual.usecases.kernel.projections import start_view
from punctual.usecases.running.definitions import input_problems, require_active


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
    order: str | None = None
    """``newest`` (the default) or ``oldest``; absent with a cursor, the cursor's order."""


def create(services: Services, principal: Principal, cmd: CreateStart) -> Mutation:
    """One create as a ``Mutation`` (the Python API, the CLI): decided by ``create_many``,
    so a single create and a batch item cannot drift apart."""
    decide = create_many(services, principal, [cmd])

    def mutation(tx: Tx, now: datetime) -> Outcome:
        answer = decide(tx, now, [0])[0]
        if isinstance(answer, PunctualError):
            raise answer
        return answer

    return mutation


def create_many(
    services: Services,
    principal: Principal,
    commands: Sequence[CreateStart | PunctualError],
    *,
    tenant: str | None = None,
    seal_failures: Mapping[int, PunctualError] | None = None,
) -> BatchMutation:
    """Creates decided together in one transaction (a batch create, OS-11, and the single
    create route): each item exactly as ``create`` decides it, in the contract's order, with
    one quota decision for all that admits them in order up to the limit, and one INSERT.

    An item is a command, or the error its request body already failed with (raised at the
    validation step, after replay and the tenant check). ``tenant`` is the tenant the
    request addressed, checked per item as the single create checks it.
    ``seal_failures``, read when the mutation runs: items whose input could not be sealed
    already (``create_in_one_trip``), answered with that error at the seal step.
    """

    def mutation(
        tx: Tx, now: datetime, indexes: Sequence[int]
    ) -> dict[int, Outcome | PunctualError]:
        decided: dict[int, Outcome | PunctualError] = {}
        definitions: dict[str, Definition] = {}

        def definition_of(workflow: str) -> Definition:
            definition = definitions.get(workflow)
            if definition is None:
                definition = definitions[workflow] = require_active(tx, workflow)
                services.definitions.remember(definition)
            return definition

        valid: list[int] = []
        for index in indexes:
            cmd = commands[index]
            try:
                if tenant is not None:
                    check_tenant(principal, tenant)
                if isinstance(cmd, PunctualError):
                    raise cmd
                _validate(services, principal, cmd, now, definition_of)
            except PunctualError as refusal:
                decided[index] = refusal
                continue
            valid.append(index)
        if not valid:
            return decided
        admitted = _admit(services, tx, principal, [commands[i] for i in valid])
        new: list[tuple[int, NewStart]] = []
        for index, quota_refusal in zip(valid, admitted, strict=True):
            if quota_refusal is not None:
                decided[index] = quota_refusal
                continue
            cmd = commands[index]
            assert isinstance(cmd, CreateStart)
            if seal_failures is not None and index in seal_failures:
                decided[index] = seal_failures[index]
                continue
            try:
                new.append((index, _new_start(services, principal, cmd)))
            except PunctualError as failure:  # the codec could not encrypt (503)
                decided[index] = failure
        inserted = tx.starts.insert_many([n for _, n in new], now)
        for (index, _), start in zip(new, inserted, strict=True):
            decided[index] = Outcome(Answer.CREATED, start_view(start), resource_id=start.id)
        if new:
            _wake_if_due_soon(services, tx, min(n.start_at for _, n in new), now)
        return decided

    return mutation


def create_in_one_trip(
    services: Services,
    runner: MutationRunner,
    principal: Principal,
    cmd: CreateStart | PunctualError,
    tenant: str,
    request: IdempotentRequest,
    audited: AuditedRequest | None,
) -> ItemResult | PunctualError | None:
    """A single create decided here and stored in one round trip (OP-5), when the store
    has such a path and everything but the store's part passes here: the tenant, the
    checks, the role and the host limits, against the active definition this process
    remembers. The store then records the key already answered, checks that definition is
    still the active one and counts the quota, and inserts the start and the audit entry.
    Run it as ``run_batch``'s ``first`` step, so the bounded wait covers it; its lock
    waits are bounded by ``MutationRunner.one_trip_lock_wait``, leaving the transaction
    path the rest of the wait.

    ``None`` means the transaction path (``create_many``) decides ``cmd`` exactly as
    before: a refusal (a replay comes first there), a key used with another body or still
    in flight, another active definition, a full quota, a store that is busy or
    unreachable. An error means sealing the input failed: that path decides ``cmd`` with
    it as its seal's outcome (``seal_failures``), so the input is sealed once and every
    check before the seal still comes first. ``audited`` is the request's audit entry,
    taken on the request's thread.

    On PostgreSQL the input is sealed before the store can say the key is a replay; a
    replay then discards that copy.
    """
    one_trip = services.quota.one_trip
    if one_trip is None or isinstance(cmd, PunctualError):
        return None
    if not services.store.creates_in_one_trip:
        return None
    definition = services.definitions.recall(cmd.workflow)
    if definition is None:
        return None
    now = services.clock.now()
    known: Definition = definition

    def remembered(_: str) -> Definition:
        return known

    try:
        check_tenant(principal, tenant)
        _validate(services, principal, cmd, now, remembered)
    except PunctualError:
        return None
    try:
        new = _new_start(services, principal, cmd)
    except PunctualError as failure:  # the codec could not seal (503)
        return failure
    view = start_view(_as_inserted(new, now))
    limits = services.policy.tenant_policy(principal.tenant)
    answer = services.store.create_in_one_trip(
        OneTripCreate(
            start=new,
            definition_version=definition.version,
            principal=request.principal,
            key=request.key,
            fingerprint=request.fingerprint,
            owner=secrets.token_hex(8),
            lease_until=now + runner.key_lease,
            response=view,
            audit=audited.entry(Answer.CREATED, new.id) if audited is not None else None,
            max_pending=limits.max_pending_starts,
            max_pending_in_class=limits.max_pending_by_class.get(cmd.workload_class),
            lock_quota=one_trip == "lock_and_count",
            notify_due=_due_soon(services, new.start_at, now),
            lock_timeout=runner.one_trip_lock_wait,
            now=now,
        )
    )
    if answer is None:
        return None
    if answer.outcome is OneTripOutcome.CREATED:
        services.on_due_change()
        return ItemResult(Answer.CREATED, view)
    if answer.outcome is OneTripOutcome.DEFINITION_CHANGED:
        services.definitions.forget(definition.name, definition.version)
    elif (
        answer.outcome is OneTripOutcome.KEY_TAKEN
        and answer.state == "done"
        and answer.fingerprint == request.fingerprint
        and answer.status_code is not None
    ):
        return ItemResult(answer.status_code, answer.response)
    return None


def _as_inserted(new: NewStart, now: datetime) -> ScheduledStart:
    """The start as the store's insert returns it (``Starts.insert_many``)."""
    requested = {f.name: getattr(new, f.name) for f in fields(StartRequest)}
    return ScheduledStart(
        **requested | {"attributes": dict(new.attributes)},
        state=StartState.SCHEDULED,
        version=1,
        attempts=0,
        next_attempt_at=None,
        last_error=None,
        created_by=new.created_by,
        created_at=now,
        updated_at=now,
        run_id=new.run_id,
    )


def _validate(
    services: Services,
    principal: Principal,
    cmd: CreateStart,
    now: datetime,
    definition_of: Callable[[str], Definition],
) -> Definition:
    """Validation, role and host limits of a new start, in the contract's order; the
    definition its input was validated against."""
    validate_new_start_at(cmd.start_at, cmd.time_zone, now)
    definition = definition_of(cmd.workflow)
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
    return definition


def _admit(
    services: Services, tx: Tx, principal: Principal, cmds: Sequence[CreateStart | PunctualError]
) -> list[PunctualError | None]:
    limits = services.policy.tenant_policy(principal.tenant)
    return services.quota.admit_starts(
        tx,
        principal.tenant,
        [c.workload_class for c in cmds if isinstance(c, CreateStart)],
        limits.max_pending_starts,
        limits.max_pending_by_class,
    )


def _new_start(services: Services, principal: Principal, cmd: CreateStart) -> NewStart:
    return NewStart(
        id=new_id("st"),
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
    )


def _wake_if_due_soon(services: Services, tx: Tx, due_at: datetime, now: datetime) -> None:
    if _due_soon(services, due_at, now):
        tx.starts.notify_due()


def _due_soon(services: Services, due_at: datetime, now: datetime) -> bool:
    """Runners look again within the horizon anyway; only sooner work needs a wake-up."""
    return (due_at - now).total_seconds() < services.policy.wake_horizon_seconds


def _load(tx: Tx, principal: Principal, start_id: str) -> ScheduledStart:
    start = tx.starts.get(principal.tenant, start_id, lock=True)
    if start is None:
        raise not_found("start", start_id)
    return start


def _moved(
    tx: Tx, now: datetime, start: ScheduledStart, version: int, state: StartState, **changes: Any
) -> ScheduledStart:
    """State and version checks (OS-5), then the move to ``state``. It leaves any claim: a
    dispatching start's mutation wins over the claim, whose dispatch then cannot record
    (FT-5)."""
    check_mutable(start, version)
    changes.update(state=state.value, claimed_by=None, lease_until=None)
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
        updated = _moved(
            tx,
            now,
            start,
            cmd.version,
            StartState.SCHEDULED,
            start_at=cmd.start_at,
            time_zone=cmd.time_zone,
            due_at=cmd.start_at,
            next_attempt_at=None,
        )
        _wake_if_due_soon(services, tx, cmd.start_at, now)
        return Outcome(Answer.DONE, start_view(updated), resource_id=start.id)

    return mutation


def cancel(services: Services, principal: Principal, cmd: CancelStart) -> Mutation:
    del services

    def mutation(tx: Tx, now: datetime) -> Outcome:
        start = _load(tx, principal, cmd.start_id)
        if cmd.reason is not None and len(cmd.reason) > 300:
            raise InvalidRequest("reason is limited to 300 characters")
        require(principal, Action.MUTATE_START, owner=start.created_by)
        updated = _moved(
            tx, now, start, cmd.version, StartState.CANCELED, reason=cmd.reason or "canceled"
        )
        return Outcome(Answer.DONE, start_view(updated), resource_id=start.id)

    return mutation


def get(services: Services, principal: Principal, start_id: str) -> dict[str, Any]:
    with services.store.transaction(readonly=True) as tx:
        start = tx.starts.get(principal.tenant, start_id)
    if start is None:
        raise not_found("start", start_id)
    return start_view(start)


def list_starts(services: Services, principal: Principal, query: ListStarts) -> dict[str, Any]:
    at = seek(query.limit, query.cursor, query.order, legacy=Order.OLDEST)
    check_choice("state", query.state, [s.value for s in StartState])
    where = StartFilter(query.state, query.workflow, query.business_request_id)
    with services.store.transaction(readonly=True) as tx:
        rows = tx.starts.find(principal.tenant, where, at)
    return page(rows, at, start_view)
