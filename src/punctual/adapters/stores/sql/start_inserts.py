"""The create hot path's INSERT of one-off starts: one multi-row statement, built once."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import insert_returning
from punctual.adapters.stores.sql.rows import encrypted_columns, record_columns, start_from_row
from punctual.domain.starts import ScheduledStart, StartState
from punctual.ports.records import NewStart

_ALL_COLUMNS = [c.name for c in t.starts.c]


def insert_starts(
    conn: sa.Connection, new: Sequence[NewStart], now: datetime
) -> list[ScheduledStart]:
    """Insert new starts (``scheduled``, version 1, due at ``start_at``) with one
    ``INSERT … RETURNING``; returned in the order given."""
    rows = [
        record_columns(
            n,
            **encrypted_columns("input", n.input),
            state=StartState.SCHEDULED.value,
            version=1,
            attempts=0,
            due_at=n.start_at,
            created_at=now,
            updated_at=now,
        )
        for n in new
    ]
    inserted = insert_returning(conn, t.starts, rows, _ALL_COLUMNS)
    by_id = {row["id"]: start_from_row(row) for row in inserted}
    return [by_id[n.id] for n in new]
