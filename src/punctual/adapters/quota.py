"""Quota controllers: best-effort for one machine, exact on PostgreSQL, or none.

Both counting controllers read the tenant's pending starts from the counter that triggers
keep in step with ``starts`` (``Starts.pending_by_class``, migration 0008): a few rows,
whatever the backlog. A batch create asks once for all its items (``admit_starts``), and
they are admitted in request order up to the limit.

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
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import sqlalchemy as sa

from punctual.errors import PunctualError, QuotaExceeded, Unavailable
from punctual.ports.store import Tx


def _over_tenant(tenant: str, count: int, limit: int) -> QuotaExceeded:
    return QuotaExceeded(
        f"tenant {tenant} has {count} pending starts, its limit is {limit}; wait for some "
        "to dispatch or cancel some",
        limit=limit,
        count=count,
        scope="tenant",
    )


def _over_class(tenant: str, workload_class: str, count: int, limit: int) -> QuotaExceeded:
    return QuotaExceeded(
        f"tenant {tenant} has {count} pending starts of class {workload_class}, its "
        f"limit is {limit}",
        limit=limit,
        count=count,
        scope="workload_class",
        workload_class=workload_class,
    )


def _decide(
    tx: Tx,
    tenant: str,
    workload_classes: Sequence[str],
    limit: int,
    class_limits: Mapping[str, int],
) -> list[PunctualError | None]:
    """Admit in order up to the limits, counting each admitted start as pending."""
    pending = tx.starts.pending_by_class(tenant)
    count = sum(pending.values())
    class_counts = {c: pending.get(c, 0) for c in set(workload_classes) if c in class_limits}
    answers: list[PunctualError | None] = []
    for workload_class in workload_classes:
        if count >= limit:
            answers.append(_over_tenant(tenant, count, limit))
            continue
        class_limit = class_limits.get(workload_class)
        if class_limit is not None and class_counts[workload_class] >= class_limit:
            answers.append(
                _over_class(tenant, workload_class, class_counts[workload_class], class_limit)
            )
            continue
        count += 1
        if class_limit is not None:
            class_counts[workload_class] += 1
        answers.append(None)
    return answers


class LocalQuota:
    exact = False

    def __init__(self, after_count: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._after_count = after_count
        """A seam for tests to show why this is best-effort (runs between count and insert)."""
        self.one_trip: Literal["count", "lock_and_count"] | None = (
            "count" if after_count is None else None  # one trip has no "between" to pause
        )

    def admit_starts(
        self,
        tx: Tx,
        tenant: str,
        workload_classes: Sequence[str],
        max_pending: int,
        max_pending_by_class: Mapping[str, int],
    ) -> list[PunctualError | None]:
        with self._lock:
            answers = _decide(tx, tenant, workload_classes, max_pending, max_pending_by_class)
        if self._after_count is not None:
            self._after_count()
        return answers


_ADVISORY_LOCK = sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")


class PostgresQuota:
    exact = True
    one_trip: Literal["count", "lock_and_count"] | None = "lock_and_count"

    def __init__(self, connection_of: Callable[[Tx], sa.Connection]) -> None:
        self._connection_of = connection_of

    def admit_starts(
        self,
        tx: Tx,
        tenant: str,
        workload_classes: Sequence[str],
        max_pending: int,
        max_pending_by_class: Mapping[str, int],
    ) -> list[PunctualError | None]:
        self._lock(tx, tenant)
        return _decide(tx, tenant, workload_classes, max_pending, max_pending_by_class)

    def _lock(self, tx: Tx, tenant: str) -> None:
        # Held until this transaction commits, i.e. until the admitted starts are inserted:
        # every API process decides for a tenant one after another (QA-3).
        self._connection_of(tx).execute(_ADVISORY_LOCK, {"key": f"punctual.quota:{tenant}"})


class NoQuota:
    exact = False
    one_trip: Literal["count", "lock_and_count"] | None = None

    def admit_starts(
        self,
        tx: Tx,
        tenant: str,
        workload_classes: Sequence[str],
        max_pending: int,
        max_pending_by_class: Mapping[str, int],
    ) -> list[PunctualError | None]:
        refusal = Unavailable(
            "no quota controller is configured, so no start can be admitted; the host sets "
            "quota.controller (see docs/configuration.md)",
            code="quota_unavailable",
        )
        return [refusal for _ in workload_classes]
