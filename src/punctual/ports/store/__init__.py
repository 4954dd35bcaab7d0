"""The Store port: punctual's single source of truth (SQL on SQLite or PostgreSQL).

The transaction and its repositories; each family of repositories has a module of its
own (``tenancy``, ``work``, ``outbox``, ``records``).

Every unit of work runs in ``Store.transaction()``; the repositories reachable from the
transaction object operate inside it. The contract suite in ``tests/contract`` has a
named test for each "must" of these modules and runs over every adapter.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from punctual.ports.driver import ScheduleSync
from punctual.ports.records import NewAuditEntry, NewStart
from punctual.ports.store.outbox import Findings, FollowThrough, Notifications, Webhooks
from punctual.ports.store.records import Audit, Holds, Retention
from punctual.ports.store.tenancy import Definitions, Idempotency, Identity, Keys
from punctual.ports.store.work import OutcomeRefused, RunLedgerStore, Runs, Schedules, Starts

__all__ = [
    "Audit",
    "Definitions",
    "Findings",
    "FollowThrough",
    "Holds",
    "Idempotency",
    "Identity",
    "Keys",
    "Notifications",
    "OneTripAnswer",
    "OneTripCreate",
    "OneTripOutcome",
    "OutcomeRefused",
    "Retention",
    "RunLedgerStore",
    "Runs",
    "Schedules",
    "Starts",
    "Store",
    "Tx",
    "Webhooks",
]


class Tx(Protocol):
    """The repositories of one open transaction."""

    @property
    def keys(self) -> Keys: ...
    @property
    def identity(self) -> Identity: ...
    @property
    def definitions(self) -> Definitions: ...
    @property
    def idempotency(self) -> Idempotency: ...
    @property
    def starts(self) -> Starts: ...
    @property
    def runs(self) -> Runs: ...
    @property
    def run_ledger(self) -> RunLedgerStore: ...
    @property
    def findings(self) -> Findings: ...
    @property
    def schedules(self) -> Schedules: ...
    @property
    def follow_through(self) -> FollowThrough: ...
    @property
    def notifications(self) -> Notifications: ...
    @property
    def webhooks(self) -> Webhooks: ...
    @property
    def retention(self) -> Retention: ...
    @property
    def holds(self) -> Holds: ...
    @property
    def audit(self) -> Audit: ...
    @property
    def schedule_sync(self) -> ScheduleSync: ...


class Store(Protocol):
    @property
    def dialect(self) -> str: ...

    def transaction(
        self, *, readonly: bool = False, lock_timeout: float | None = None
    ) -> AbstractContextManager[Tx]:
        """One unit of work: commits on success, rolls back on error. ``lock_timeout``
        bounds row-lock waits. Must raise ``Unavailable`` when the database is down."""

    @property
    def creates_in_one_trip(self) -> bool:
        """Whether ``create_in_one_trip`` can answer (PostgreSQL)."""
        ...

    def create_in_one_trip(self, request: OneTripCreate) -> OneTripAnswer | None:
        """The create's whole transaction in one round trip (OP-5), or None when this store
        has no such path (SQLite, in process, needs none) or the trip failed without an
        answer: the caller then takes the transaction path, which finds whatever this
        trip may have committed under the key and replays it."""


@dataclass(frozen=True)
class OneTripCreate:
    """A create the process has decided as far as it can, for the store to finish in one
    round trip: the key is recorded already answered, and the start and the audit entry
    are written, only if the key is new, ``definition_version`` is still the active
    version of the workflow, and the tenant's pending starts leave room."""

    start: NewStart
    definition_version: str
    principal: str
    key: str
    fingerprint: str
    owner: str
    lease_until: datetime
    response: Any
    """The ``201`` body the key records and a replay answers."""
    audit: NewAuditEntry | None
    max_pending: int
    max_pending_in_class: int | None
    lock_quota: bool
    """Take the tenant's quota lock before counting (the exact controller, QA-3)."""
    notify_due: bool
    lock_timeout: float
    """Seconds the trip may wait for a lock (a concurrent request with its key, the
    tenant's quota lock) before it gives up, and the transaction path takes over within
    what is left of the bounded wait."""
    now: datetime


class OneTripOutcome(StrEnum):
    CREATED = "created"
    KEY_TAKEN = "key_taken"
    """The key has a record (``OneTripAnswer.record``): nothing was written."""
    DEFINITION_CHANGED = "definition_changed"
    """Another version is active now, or none: nothing was written."""
    OVER_QUOTA = "over_quota"
    """No room in the tenant or the class: nothing was written."""


@dataclass(frozen=True)
class OneTripAnswer:
    outcome: OneTripOutcome
    status_code: int | None = None
    """With ``KEY_TAKEN``: the key's recorded status, None while it is in flight."""
    response: Any = None
    fingerprint: str | None = None
    state: str | None = None
