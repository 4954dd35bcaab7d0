"""A tenant's pending one-off starts per workload class, read from ``pending_start_counts``.

The table holds signed deltas that triggers on ``starts`` insert in every transaction that
moves a one-off start into or out of ``scheduled``/``dispatching`` (migration 0008); their
sum per class is the count the quota decides on. Reading sums a handful of rows: the
reader folds a tenant's rows into one per class once they pile up, so the cost stays flat
however many starts are pending and however many have come and gone.
"""

from __future__ import annotations

from collections import defaultdict

import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t

FOLD_AFTER_ROWS = 64
"""A tenant's delta rows are folded once there are more than this many."""

_c = t.pending_start_counts.c
_SUMS = (
    sa.select(_c.workload_class, sa.func.sum(_c.delta), sa.func.count())
    .where(_c.tenant == sa.bindparam("tenant"))
    .group_by(_c.workload_class)
)
_TAKE = (
    sa.delete(t.pending_start_counts)
    .where(_c.tenant == sa.bindparam("tenant"))
    .returning(_c.workload_class, _c.delta)
)
_PUT = sa.insert(t.pending_start_counts)


def pending_by_class(conn: sa.Connection, tenant: str) -> dict[str, int]:
    """Pending one-off starts of ``tenant`` per workload class (classes with none may be
    absent). Exact within the caller's transaction: the deltas of transactions that have
    not committed are not counted, as their starts are not."""
    rows = conn.execute(_SUMS, {"tenant": tenant}).all()
    if sum(int(count) for _, _, count in rows) > FOLD_AFTER_ROWS:
        _fold(conn, tenant)
    return {str(cls): int(total) for cls, total, _ in rows if total}


def _fold(conn: sa.Connection, tenant: str) -> None:
    """Replace the tenant's rows by one per class with their sum. What the delete returns
    is exactly what is re-inserted, so the sums hold whatever commits concurrently (a
    delta committed meanwhile is simply not folded this time)."""
    sums: defaultdict[str, int] = defaultdict(int)
    for cls, delta in conn.execute(_TAKE, {"tenant": tenant}):
        sums[str(cls)] += int(delta)
    folded = [
        {"tenant": tenant, "workload_class": cls, "delta": total}
        for cls, total in sorted(sums.items())
        if total
    ]
    if folded:
        conn.execute(_PUT, folded)
