"""Reads the repositories share: one row as a record, and a page newest first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

Found = TypeVar("Found")


def first_record(
    conn: sa.Connection, query: sa.Select[Any], record: Callable[[RowMapping], Found]
) -> Found | None:
    """The first row ``query`` reads, as ``record`` makes it; None when it reads none."""
    row = conn.execute(query).mappings().first()
    return None if row is None else record(row)


def newest_first(
    query: sa.Select[Any], seq: sa.Column[int], before_seq: int | None, limit: int
) -> sa.Select[Any]:
    """A page of ``query``: ``limit`` rows newest first (``seq`` descending), older than
    ``before_seq`` when given."""
    if before_seq is not None:
        query = query.where(seq < before_seq)
    return query.order_by(seq.desc()).limit(limit)
