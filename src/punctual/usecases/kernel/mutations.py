"""The one path of a mutation from the edge, in the contract's check order (API.md
"Conventions"): the path's tenant, then the subject the path names (``404`` before the
body is read), then the body, then the use case. Every step runs inside the mutation, so
what it refuses is decided and recorded under the request's key like any other answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from punctual.domain.permissions import Principal
from punctual.errors import NotFound, not_found
from punctual.ports.store import Tx
from punctual.usecases.kernel.idempotency import Mutation, Outcome

SubjectKind = Literal["schedule", "start", "webhook", "occurrence"]


@dataclass(frozen=True)
class Subject:
    """What a path names by id; an occurrence is named within its schedule."""

    kind: SubjectKind
    id: str
    schedule_id: str | None = None

    def require(self, tx: Tx, tenant: str) -> None:
        """``404`` unless the subject exists in ``tenant`` (another tenant's does not)."""
        if self.kind == "schedule":
            found: object = tx.schedules.get(tenant, self.id)
        elif self.kind == "start":
            found = tx.starts.get(tenant, self.id)
        elif self.kind == "webhook":
            found = tx.webhooks.get(tenant, self.id)
        else:
            found = tx.starts.get_occurrence(tenant, self.schedule_id or "", self.id)
        if found is None:
            raise not_found(self.kind, self.id)


def schedule(schedule_id: str) -> Subject:
    return Subject("schedule", schedule_id)


def start(start_id: str) -> Subject:
    return Subject("start", start_id)


def webhook(webhook_id: str) -> Subject:
    return Subject("webhook", webhook_id)


def occurrence(schedule_id: str, occurrence_id: str) -> Subject:
    return Subject("occurrence", occurrence_id, schedule_id)


def check_tenant(principal: Principal, tenant: str) -> None:
    """Another tenant's resources do not exist for this principal (SEC-2)."""
    if principal.tenant != tenant:
        raise NotFound(f"tenant {tenant} does not exist")


def in_order(
    principal: Principal,
    tenant: str,
    subject: Subject | None,
    decided: Callable[[], Mutation],
) -> Mutation:
    """The mutation that checks the tenant, then ``subject``, then asks ``decided`` (which
    reads the body) for the use case's mutation and runs it in the same transaction."""

    def mutation(tx: Tx, now: datetime) -> Outcome:
        check_tenant(principal, tenant)
        if subject is not None:
            subject.require(tx, principal.tenant)
        return decided()(tx, now)

    return mutation
