"""The audit log (CR-8): one entry per decided user mutation, readable by the tenant's admins.

Who writes it: ``MutationRunner`` (``usecases/kernel/idempotency.py``), which decides every user
mutation, appends the entry in the mutation's own transaction, so an entry exists exactly
when its mutation committed. A refusal (any 4xx) changed nothing and has none (bad input
changes nothing, SEC-4), nor has an answer that is not decided (``202 in_progress``,
``429``, ``503``); a replay writes nothing either: the mutation took effect once. What it
knows of the request comes from the edge that serves it: the HTTP edge names the request
with ``serving`` once it has authenticated the caller, and the runner reads it with
``being_served``. An entry holds who (subject, token), what (action, method, path,
subject kind and id), when and the status; never a body or input. A batch create is one
request and writes one entry (status 200) when any of its items was created, not one
per item.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from punctual.domain.ids import new_id
from punctual.domain.permissions import Action, Principal, require
from punctual.ports.records import AuditEntry, NewAuditEntry, Order
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.paging import page, seek
from punctual.usecases.kernel.projections import record_view

HOST_ACTOR = "host"
"""The actor of the host's own actions (internal routes): no member has a token for it."""


@dataclass(frozen=True)
class AuditedRequest:
    """A request being served, as its audit entry will show it."""

    tenant: str
    actor: str
    token_digest: str | None
    action: str
    method: str
    path: str
    subject_kind: str | None
    subject_id: str | None
    """The subject the path names; None lets the decided outcome's resource fill it in
    (a create names what it created)."""
    status: int | None = None
    """The status the request answers whatever its mutation decided (a batch create answers
    200 for any mix of item outcomes); None: the mutation's own."""

    def entry(self, status: int, resource_id: str | None) -> NewAuditEntry:
        return NewAuditEntry(
            id=new_id("aud"),
            tenant=self.tenant,
            actor=self.actor,
            token_id=None,
            token_digest=self.token_digest,
            action=self.action,
            method=self.method,
            path=self.path,
            subject_kind=self.subject_kind,
            subject_id=self.subject_id if self.subject_id is not None else resource_id,
            status=self.status if self.status is not None else status,
        )


_served: ContextVar[AuditedRequest | None] = ContextVar("punctual_audited_request", default=None)


def serving(request: AuditedRequest) -> None:
    """Name the request this context serves (the HTTP edge, once the caller is known).
    Each request is served in a context of its own, so the name never outlives it."""
    _served.set(request)


def being_served() -> AuditedRequest | None:
    return _served.get()


def host_entry(
    tenant: str,
    action: str,
    method: str,
    path: str,
    subject_kind: str,
    subject_id: str,
    status: int,
) -> NewAuditEntry:
    """An entry for something the host did through its internal routes."""
    return NewAuditEntry(
        id=new_id("aud"),
        tenant=tenant,
        actor=HOST_ACTOR,
        token_id=None,
        token_digest=None,
        action=action,
        method=method,
        path=path,
        subject_kind=subject_kind,
        subject_id=subject_id,
        status=status,
    )


@dataclass(frozen=True)
class ListAudit:
    subject_id: str | None = None
    actor: str | None = None
    limit: int = 50
    cursor: str | None = None
    order: str | None = None
    """``newest`` (the default) or ``oldest``; absent with a cursor, the cursor's order."""


def entry_view(entry: AuditEntry) -> dict[str, Any]:
    return record_view(entry, hidden=("tenant", "seq"))


def list_entries(services: Services, principal: Principal, query: ListAudit) -> dict[str, Any]:
    """Admins only; newest first unless ``order`` is ``oldest``, filtered by subject id
    and actor (exact matches)."""
    at = seek(query.limit, query.cursor, query.order, legacy=Order.NEWEST)
    require(principal, Action.ADMINISTER)
    with services.store.transaction(readonly=True) as tx:
        rows = tx.audit.find(
            principal.tenant,
            subject_id=query.subject_id,
            actor=query.actor,
            at=at,
        )
    return page([(entry.seq, entry) for entry in rows], at, entry_view)
