"""Holds: what a retention sweep must keep while they are active (RT-1)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import lock_name
from punctual.adapters.stores.sql.reads import first_record, paged
from punctual.adapters.stores.sql.rows import record_columns, record_from_row
from punctual.ports.records import Hold, NewHold, Seek

_h = t.holds.c

RETENTION_LOCK = "punctual:retention"
"""Taken by every sweep batch and every hold placement, so they never interleave."""


def _hold(row: RowMapping) -> Hold:
    return record_from_row(Hold, row, placed_by_host=bool(row["placed_by_host"]))


class SqlHolds:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def lock_against_sweeps(self) -> None:
        """PostgreSQL: the advisory lock every sweep batch takes first. SQLite: its write
        lock, which this transaction already holds, serializes the two."""
        lock_name(self._conn, RETENTION_LOCK)

    def insert(self, new: NewHold, now: datetime) -> Hold:
        self._conn.execute(sa.insert(t.holds).values(record_columns(new, created_at=now)))
        hold = self.get(new.id)
        assert hold is not None, "inserted in this transaction"
        return hold

    def get(self, hold_id: str, tenant: str | None = None) -> Hold | None:
        query = sa.select(t.holds).where(_h.id == hold_id)
        if tenant is not None:
            query = query.where(_h.tenant == tenant)
        return first_record(self._conn, query, _hold)

    def find(self, tenant: str, *, active_only: bool, at: Seek[int]) -> list[Hold]:
        query = sa.select(t.holds).where(_h.tenant == tenant)
        if active_only:
            query = query.where(_h.released_at.is_(None))
        query = paged(query, _h.seq, at)
        return [_hold(row) for row in self._conn.execute(query).mappings()]

    def release(self, hold_id: str, released_by: str, now: datetime) -> Hold | None:
        self._conn.execute(
            sa.update(t.holds)
            .where(_h.id == hold_id, _h.released_at.is_(None))
            .values(released_at=now, released_by=released_by)
        )
        return self.get(hold_id)
