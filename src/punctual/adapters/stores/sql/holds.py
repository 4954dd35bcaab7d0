"""Holds: what a retention sweep must keep while they are active (RT-1)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import lock_name
from punctual.ports.records import Hold, NewHold

_h = t.holds.c

RETENTION_LOCK = "punctual:retention"
"""Taken by every sweep batch and every hold placement, so they never interleave."""


def _hold(row: RowMapping) -> Hold:
    return Hold(
        id=row["id"],
        tenant=row["tenant"],
        subject_kind=row["subject_kind"],
        subject_id=row["subject_id"],
        reason=row["reason"],
        created_by=row["created_by"],
        created_at=row["created_at"],
        released_at=row["released_at"],
        released_by=row["released_by"],
        placed_by_host=bool(row["placed_by_host"]),
        seq=row["seq"],
    )


class SqlHolds:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def lock_against_sweeps(self) -> None:
        """PostgreSQL: the advisory lock every sweep batch takes first. SQLite: its write
        lock, which this transaction already holds, serializes the two."""
        lock_name(self._conn, RETENTION_LOCK)

    def insert(self, new: NewHold, now: datetime) -> Hold:
        self._conn.execute(
            sa.insert(t.holds).values(
                id=new.id,
                tenant=new.tenant,
                subject_kind=new.subject_kind,
                subject_id=new.subject_id,
                reason=new.reason,
                created_by=new.created_by,
                created_at=now,
                placed_by_host=new.placed_by_host,
            )
        )
        hold = self.get(new.id)
        assert hold is not None, "inserted in this transaction"
        return hold

    def get(self, hold_id: str, tenant: str | None = None) -> Hold | None:
        query = sa.select(t.holds).where(_h.id == hold_id)
        if tenant is not None:
            query = query.where(_h.tenant == tenant)
        row = self._conn.execute(query).mappings().first()
        return _hold(row) if row else None

    def find(
        self, tenant: str, *, active_only: bool, before_seq: int | None, limit: int
    ) -> list[Hold]:
        query = sa.select(t.holds).where(_h.tenant == tenant)
        if active_only:
            query = query.where(_h.released_at.is_(None))
        if before_seq is not None:
            query = query.where(_h.seq < before_seq)
        query = query.order_by(_h.seq.desc()).limit(limit)
        return [_hold(row) for row in self._conn.execute(query).mappings()]

    def release(self, hold_id: str, released_by: str, now: datetime) -> Hold | None:
        self._conn.execute(
            sa.update(t.holds)
            .where(_h.id == hold_id, _h.released_at.is_(None))
            .values(released_at=now, released_by=released_by)
        )
        return self.get(hold_id)
