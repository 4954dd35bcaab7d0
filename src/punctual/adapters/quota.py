"""Quota controllers: best-effort for one machine, exact on PostgreSQL, or none.

* ``LocalQuota`` counts pending starts in the inserting transaction under a process-local
  lock. On SQLite writers are serialized, so it is exact there; on PostgreSQL two API
  processes can both count below the limit and both insert: best-effort only (QA-2).
* ``PostgresQuota`` takes a transaction-scoped advisory lock per tenant before counting,
  held until the insert commits, so every API process sees every earlier decision (QA-3).
* ``NoQuota`` refuses every create with ``503 quota_unavailable`` (production without a
  controller must not admit blindly).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import sqlalchemy as sa

from punctual.errors import QuotaExceeded, Unavailable
from punctual.ports.store import Tx


def _check(tx: Tx, tenant: str, workload_class: str, limit: int, class_limit: int | None) -> None:
    count = tx.starts.count_pending(tenant)
    if count >= limit:
        raise QuotaExceeded(
            f"tenant {tenant} has {count} pending starts, its limit is {limit}; wait for some "
            "to dispatch or cancel some",
            limit=limit,
            count=count,
            scope="tenant",
        )
    if class_limit is not None:
        count = tx.starts.count_pending(tenant, workload_class)
        if count >= class_limit:
            raise QuotaExceeded(
                f"tenant {tenant} has {count} pending starts of class {workload_class}, its "
                f"limit is {class_limit}",
                limit=class_limit,
                count=count,
                scope="workload_class",
                workload_class=workload_class,
            )


class LocalQuota:
    exact = False

    def __init__(self, after_count: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._after_count = after_count
        """A seam for tests to show why this is best-effort (runs between count and insert)."""

    def admit_start(
        self,
        tx: Tx,
        tenant: str,
        workload_class: str,
        max_pending: int,
        max_pending_for_class: int | None,
    ) -> None:
        with self._lock:
            _check(tx, tenant, workload_class, max_pending, max_pending_for_class)
        if self._after_count is not None:
            self._after_count()


class PostgresQuota:
    exact = True

    def __init__(self, connection_of: Callable[[Tx], sa.Connection]) -> None:
        self._connection_of = connection_of

    def admit_start(
        self,
        tx: Tx,
        tenant: str,
        workload_class: str,
        max_pending: int,
        max_pending_for_class: int | None,
    ) -> None:
        conn = self._connection_of(tx)
        # Held until this transaction commits, i.e. until the start is inserted.
        conn.execute(
            sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"),
            {"key": f"punctual.quota:{tenant}"},
        )
        _check(tx, tenant, workload_class, max_pending, max_pending_for_class)


class NoQuota:
    exact = False

    def admit_start(
        self,
        tx: Tx,
        tenant: str,
        workload_class: str,
        max_pending: int,
        max_pending_for_class: int | None,
    ) -> None:
        raise Unavailable(
            "no quota controller is configured, so no start can be admitted; the host sets "
            "quota.controller (see docs/configuration.md)",
            code="quota_unavailable",
        )
