"""What several migrations spell the same way: the row sequence column and partial indexes.

Revisions already applied call these, so they are history too: what they build must never
change (a later need gets a helper of its own).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic.operations import BatchOperations

from punctual.adapters.stores.sql import column_types


def seq_column() -> sa.Column[Any]:
    """A sequenced table's first column, its primary key (the SQLite rowid alias)."""
    return sa.Column("seq", column_types.Seq, autoincrement=True, nullable=False)


def create_partial_index(
    batch_op: BatchOperations, name: str, columns: list[str], where: str, *, unique: bool = False
) -> None:
    """An index over only the rows ``where`` selects, the same on both databases."""
    predicate = sa.text(where)
    batch_op.create_index(
        name, columns, unique=unique, postgresql_where=predicate, sqlite_where=predicate
    )
