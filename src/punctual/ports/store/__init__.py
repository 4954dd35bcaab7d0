"""The Store port: punctual's single source of truth (SQL on SQLite or PostgreSQL).

The transaction and its repositories; each family of repositories has a module of its
own (``tenancy``, ``work``, ``outbox``, ``records``).

Every unit of work runs in ``Store.transaction()``; the repositories reachable from the
transaction object operate inside it. The contract suite in ``tests/contract`` has a
named test for each "must" of these modules and runs over every adapter.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from punctual.ports.driver import ScheduleSync
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
