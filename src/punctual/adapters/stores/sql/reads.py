"""Reads the repositories share: one row as a record, and a page of a list."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.ports.records import Order, Seek

Found = TypeVar("Found")


def first_record(
    conn: sa.Connection, query: sa.Select[Any], record: Callable[[RowMapping], Found]
) -> Found | None:
    """The first row ``query`` reads, as ``record`` makes it; None when it reads none."""
    row = conn.execute(query).mappings().first()
    return None if row is None else record(row)


def paged(query: sa.Select[Any], seq: sa.Column[int], at: Seek[int]) -> sa.Select[Any]:
    """The page of ``query`` that ``at`` selects by ``seq``: a descending scan for newest
    first, so the ``(…, seq)`` indexes serve both orders."""
    if at.order is Order.NEWEST:
        if at.after is not None:
            query = query.where(seq < at.after)
        return query.order_by(seq.desc()).limit(at.limit)
    if at.after is not None:
        query = query.where(seq > at.after)
    return query.order_by(seq).limit(at.limit)
