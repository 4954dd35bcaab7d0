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


_SEQ_MAX = 2**63 - 1


def paged_within(
    query: sa.Select[Any],
    key: sa.Column[str],
    value: str,
    seq: sa.Column[int],
    at: Seek[int],
) -> sa.Select[Any]:
    """``paged`` for the rows of one ``key`` (a schedule's), read down a ``(key, seq)``
    index: the rows are bounded as the range ``(value, lowest) … (value, highest)`` of
    that pair and ordered by both columns. Written as ``key = value``, PostgreSQL may walk
    the primary key backwards instead and filter, which costs the whole history when the
    key's rows are old ones."""
    pair = sa.tuple_(key, seq)
    query = query.where(key.is_not(None))  # the partial index's predicate, as written
    if at.order is Order.NEWEST:
        high = at.after if at.after is not None else _SEQ_MAX
        upper = pair < (value, high) if at.after is not None else pair <= (value, high)
        query = query.where(pair >= (value, 0), upper)
        return query.order_by(key.desc(), seq.desc()).limit(at.limit)
    low = at.after if at.after is not None else -1
    query = query.where(pair > (value, low), pair <= (value, _SEQ_MAX))
    return query.order_by(key, seq).limit(at.limit)
