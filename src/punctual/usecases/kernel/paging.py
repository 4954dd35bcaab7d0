"""Cursor paging (keyset): every list reads newest first unless asked ``order=oldest``, and
an opaque cursor wraps the order and the last row's position (its ``seq``).

A cursor carries its order: a request without ``order`` pages on in the cursor's order,
and one whose ``order`` contradicts its cursor is ``422 invalid_cursor`` (a page never
silently turns round). Cursors made before lists took an order (``seq:N``) keep the order
their list had then, ``legacy``: oldest first for most lists, newest first for the lists
that were already (holds, the audit log, notifications, a webhook's deliveries).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from punctual.domain.permissions import Principal
from punctual.errors import InvalidRequest
from punctual.ports.records import Order, Seek
from punctual.ports.store import Tx
from punctual.usecases.kernel.context import Services


class _Sequenced(Protocol):
    """A record that carries its place in its table's order (the cursor wraps it)."""

    @property
    def seq(self) -> int: ...


T = TypeVar("T")
S = TypeVar("S", bound=_Sequenced)
MAX_LIMIT = 100
BIGINT_MAX = 2**63 - 1  # the largest value a 64-bit column (sequences, versions) holds
ORDERS = [order.value for order in Order]
_LEGACY = "seq"
"""The kind of the cursors made before lists took an order: ``seq:N``."""
MemberKey = tuple[datetime, str]
"""A member's place in the members list: when it joined, then its subject."""


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        message = f"limit must be between 1 and {MAX_LIMIT}, got {limit}"
        raise InvalidRequest(
            message, errors=[{"loc": ["query", "limit"], "msg": message, "type": "range"}]
        )
    return limit


def check_choice(name: str, value: str | None, allowed: list[str]) -> None:
    """A filter that must be one of a closed set of values."""
    if value is not None and value not in allowed:
        message = f"{name} must be one of {', '.join(allowed)}"
        raise InvalidRequest(
            message, errors=[{"loc": ["query", name], "msg": message, "type": "enum"}]
        )


def _not_ours() -> InvalidRequest:
    return InvalidRequest("cursor is not one this API returned", code="invalid_cursor")


def read_cursor(cursor: str | None, order: str | None, legacy: Order) -> tuple[Order, str | None]:
    """The order to read a page in and the position its cursor wraps (None: the first
    page). ``order`` absent: the cursor's, else newest first."""
    check_choice("order", order, ORDERS)
    asked = Order(order) if order is not None else None
    if not cursor:
        return asked or Order.NEWEST, None
    try:
        padded = cursor.encode() + b"=" * (-len(cursor) % 4)
        # Strict: a character outside the alphabet is a cursor this API did not make.
        raw = base64.b64decode(padded, altchars=b"-_", validate=True).decode()
    except (ValueError, UnicodeError):
        raise _not_ours() from None
    kind, colon, position = raw.partition(":")
    if not colon or kind not in (_LEGACY, *ORDERS):
        raise _not_ours()
    carried = legacy if kind == _LEGACY else Order(kind)
    if asked is not None and asked is not carried:
        raise InvalidRequest(
            f"this cursor pages order={carried.value}: send order={carried.value}, or no "
            f"order, to go on; start again without a cursor for order={asked.value}",
            code="invalid_cursor",
        )
    return carried, position


def encode_cursor(order: Order, position: str) -> str:
    return base64.urlsafe_b64encode(f"{order.value}:{position}".encode()).decode().rstrip("=")


def _seq(position: str) -> int:
    """Only a sequence of ASCII digits that a 64-bit column holds (a larger number would
    overflow PostgreSQL's ``bigint``)."""
    digits = position.isascii() and position.isdigit() and len(position) <= len(str(BIGINT_MAX))
    if not digits or int(position) > BIGINT_MAX:
        raise _not_ours()
    return int(position)


def seek(limit: int, cursor: str | None, order: str | None, *, legacy: Order) -> Seek[int]:
    """What a store reads for a page of a list ordered by ``seq``: one row more than
    ``limit``, so that ``page`` knows whether a next page exists. ``legacy``: the order of
    the list's cursors made before lists took an order."""
    limit = check_limit(limit)
    direction, position = read_cursor(cursor, order, legacy)
    return Seek(limit + 1, None if position is None else _seq(position), direction)


def member_seek(limit: int, cursor: str | None, order: str | None) -> Seek[MemberKey]:
    """``seek`` for the members list, whose position is ``(created_at, subject)``."""
    limit = check_limit(limit)
    direction, position = read_cursor(cursor, order, Order.NEWEST)
    if position is None:
        return Seek(limit + 1, None, direction)
    joined, bar, subject = position.partition("|")
    try:
        at = datetime.fromisoformat(joined)
    except ValueError:
        raise _not_ours() from None
    if not bar or at.tzinfo is None:
        raise _not_ours()
    return Seek(limit + 1, (at, subject), direction)


def member_position(key: MemberKey) -> str:
    joined, subject = key
    return f"{joined.isoformat()}|{subject}"


P = TypeVar("P")


def shown(rows: Sequence[T], at: Seek[Any]) -> Sequence[T]:
    """The rows a page read with ``at`` shows (it reads one more)."""
    return rows[: at.limit - 1]


def page(
    rows: Sequence[tuple[P, T]],
    at: Seek[P],
    present: Callable[[T], dict[str, Any]],
    position: Callable[[P], str] = str,
) -> dict[str, Any]:
    """The answer to a page read with ``at`` (one row more than shown): its items and, when
    more follow, the cursor past the last one, in the same order."""
    items = shown(rows, at)
    more = len(rows) > len(items) and items
    next_cursor = encode_cursor(at.order, position(items[-1][0])) if more else None
    return {"items": [present(item) for _, item in items], "next_cursor": next_cursor}


def read_page(
    services: Services,
    principal: Principal,
    at: Seek[int],
    finder: Callable[[Tx], Callable[[str, Seek[int]], Sequence[S]]],
    present: Callable[[S], dict[str, Any]],
) -> dict[str, Any]:
    """A page of the principal's tenant's records ordered by ``seq``: ``finder`` names the
    store's method that reads ``(tenant, at)``."""
    with services.store.transaction(readonly=True) as tx:
        rows = finder(tx)(principal.tenant, at)
    return page([(row.seq, row) for row in rows], at, present)
