"""Holds (RT-1): keep records from retention for an audit or an investigation.

Tenant admins place and release holds on a start, a schedule, a run or the whole tenant
(``domain.retention.HoldKind`` says what each covers); the host places holds through its
internal routes that a tenant admin cannot release (``403 forbidden``: it is the host's
to release). Placing a hold first locks out sweep batches, then checks the subject
exists, so a sweep never removes a subject between the check and the hold. Every
placement and release is in the audit log: a tenant admin's through the mutation runner
that decides it, the host's written here.

Check order (API.md): validation that reads only the request (422), role (403), then
the subject (404), so a caller who may not hold learns nothing about what exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from punctual.domain.ids import new_id
from punctual.domain.permissions import Action, Principal, require
from punctual.domain.retention import HoldKind, may_release, needs_subject_id
from punctual.errors import Forbidden, InvalidRequest, NotFound, not_found
from punctual.ports.records import Hold, NewHold, Order
from punctual.ports.store import Tx
from punctual.usecases.kernel.audit import HOST_ACTOR, host_entry
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import Answer, Mutation, Outcome
from punctual.usecases.kernel.paging import check_choice, page, seek
from punctual.usecases.kernel.projections import record_view

MAX_REASON_LENGTH = 1000


@dataclass(frozen=True)
class PlaceHold:
    subject_kind: str
    subject_id: str | None
    reason: str


@dataclass(frozen=True)
class ListHolds:
    active: str | None = None
    """``"true"`` lists only active holds; ``"false"`` or absent lists all."""
    limit: int = 50
    cursor: str | None = None
    order: str | None = None
    """``newest`` (the default) or ``oldest``; absent with a cursor, the cursor's order."""


@dataclass(frozen=True)
class RequestLine:
    """The internal route a host action came through, for its audit entry."""

    method: str
    path: str


def hold_view(hold: Hold) -> dict[str, Any]:
    return record_view(hold, hidden=("tenant", "seq"))


def _invalid(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, errors=[{"loc": ["body", field], "msg": message, "type": field}])


def _validated(command: PlaceHold) -> HoldKind:
    """The request's own checks (422): a known kind, a subject id unless it is the tenant,
    a reason of 1-1000 characters."""
    try:
        kind = HoldKind(command.subject_kind)
    except ValueError:
        kinds = ", ".join(k.value for k in HoldKind)
        raise _invalid("subject_kind", f"subject_kind must be one of {kinds}") from None
    if needs_subject_id(kind) and not command.subject_id:
        raise _invalid("subject_id", f"a hold on a {kind.value} needs its subject_id")
    if not command.reason.strip() or len(command.reason) > MAX_REASON_LENGTH:
        raise _invalid("reason", f"reason must be 1 to {MAX_REASON_LENGTH} characters")
    return kind


def _subject(tx: Tx, tenant: str, kind: HoldKind, subject_id: str | None) -> str:
    """The held subject's id, once checked to exist in ``tenant`` (404 otherwise: another
    tenant's record does not exist for this one)."""
    if kind is HoldKind.TENANT:
        if subject_id not in (None, tenant) or not tx.identity.tenant_exists(tenant):
            raise NotFound(f"tenant {subject_id or tenant} does not exist")
        return tenant
    assert subject_id is not None
    if kind is HoldKind.START:
        found = tx.starts.get(tenant, subject_id) is not None
    elif kind is HoldKind.SCHEDULE:
        found = tx.schedules.get(tenant, subject_id, deleted=True) is not None
    else:
        found = tx.runs.get(tenant, subject_id) is not None
    if not found:
        raise not_found(kind.value, subject_id)
    return subject_id


def _insert(
    tx: Tx, tenant: str, command: PlaceHold, kind: HoldKind, by: str, host: bool, now: datetime
) -> Hold:
    tx.holds.lock_against_sweeps()
    subject_id = _subject(tx, tenant, kind, command.subject_id)
    new = NewHold(new_id("hld"), tenant, kind.value, subject_id, command.reason, by, host)
    return tx.holds.insert(new, now)


def place(services: Services, principal: Principal, command: PlaceHold) -> Mutation:
    """A tenant admin's hold (``201``), audited by the runner that decides it."""
    del services

    def mutation(tx: Tx, now: datetime) -> Outcome:
        kind = _validated(command)
        require(principal, Action.ADMINISTER)
        hold = _insert(tx, principal.tenant, command, kind, principal.subject, False, now)
        return Outcome(Answer.CREATED, hold_view(hold), resource_id=hold.id)

    return mutation


def release(services: Services, principal: Principal, hold_id: str) -> Mutation:
    """Idempotent (a second release answers the first ``released_at``); a hold the host
    placed is refused (``403 forbidden``)."""
    del services

    def mutation(tx: Tx, now: datetime) -> Outcome:
        hold = tx.holds.get(hold_id, principal.tenant)
        if hold is None:
            raise not_found("hold", hold_id)
        require(principal, Action.ADMINISTER)
        if not may_release(hold.placed_by_host, by_host=False):
            raise Forbidden(
                f"hold {hold_id} was placed by the host; only the host can release it "
                "(POST /internal/holds/{id}/release)"
            )
        released = tx.holds.release(hold_id, principal.subject, now)
        assert released is not None
        return Outcome(Answer.DONE, hold_view(released), resource_id=hold_id)

    return mutation


def list_holds(services: Services, principal: Principal, query: ListHolds) -> dict[str, Any]:
    """Admins only; newest first unless ``order`` is ``oldest``."""
    at = seek(query.limit, query.cursor, query.order, legacy=Order.NEWEST)
    check_choice("active", query.active, ["true", "false"])
    require(principal, Action.ADMINISTER)
    with services.store.transaction(readonly=True) as tx:
        rows = tx.holds.find(principal.tenant, active_only=query.active == "true", at=at)
    return page([(hold.seq, hold) for hold in rows], at, hold_view)


def place_by_host(
    services: Services,
    tenant: str,
    command: PlaceHold,
    line: RequestLine = RequestLine("POST", "/internal/holds"),
) -> dict[str, Any]:
    """A host hold (``placed_by_host``) on a record of ``tenant``, with its audit entry in
    the same transaction; a tenant that does not exist is ``404``."""
    kind = _validated(command)
    with services.store.transaction() as tx:
        now = services.clock.now()
        if not tx.identity.tenant_exists(tenant):
            raise NotFound(f"tenant {tenant} does not exist")
        hold = _insert(tx, tenant, command, kind, HOST_ACTOR, True, now)
        entry = host_entry(
            tenant, "place_hold", line.method, line.path, "hold", hold.id, status=Answer.CREATED
        )
        tx.audit.record([entry], now)
    return hold_view(hold)


def release_by_host(
    services: Services, hold_id: str, line: RequestLine | None = None
) -> dict[str, Any]:
    """The host releases any hold, of any tenant (idempotent), with its audit entry."""
    line = line or RequestLine("POST", f"/internal/holds/{hold_id}/release")
    with services.store.transaction() as tx:
        now = services.clock.now()
        hold = tx.holds.get(hold_id)
        if hold is None:
            raise NotFound(f"hold {hold_id} does not exist")
        released = tx.holds.release(hold_id, HOST_ACTOR, now)
        assert released is not None
        entry = host_entry(
            hold.tenant, "release_hold", line.method, line.path, "hold", hold_id, status=Answer.DONE
        )
        tx.audit.record([entry], now)
    return hold_view(released)
