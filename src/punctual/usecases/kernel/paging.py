"""Cursor paging by stable row order: an opaque cursor wraps the last row's sequence."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from punctual.domain.permissions import Principal
from punctual.errors import InvalidRequest
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


def decode_cursor(cursor: str | None) -> int:
    """The sequence a cursor of ``encode_cursor`` wraps; anything else is ``invalid_cursor``.

    Only what ``encode_cursor`` makes is accepted: a sequence of ASCII digits that a 64-bit
    column holds (a larger number would overflow PostgreSQL's ``bigint``).
    """
    if not cursor:
        return 0
    try:
        raw = base64.urlsafe_b64decode(cursor.encode() + b"=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeError):
        raw = ""
    kind, _, seq = raw.partition(":")
    digits = seq.isascii() and seq.isdigit() and len(seq) <= len(str(BIGINT_MAX))
    if kind != "seq" or not digits or int(seq) > BIGINT_MAX:
        raise InvalidRequest("cursor is not one this API returned", code="invalid_cursor")
    return int(seq)


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"seq:{seq}".encode()).decode().rstrip("=")


def page(
    rows: list[tuple[int, T]], limit: int, present: Callable[[T], dict[str, Any]]
) -> dict[str, Any]:
    """Rows were fetched with ``limit + 1`` so that a next page is known to exist."""
    items = rows[:limit]
    next_cursor = encode_cursor(items[-1][0]) if len(rows) > limit and items else None
    return {"items": [present(item) for _, item in items], "next_cursor": next_cursor}


def read_page(
    services: Services,
    principal: Principal,
    limit: int,
    cursor: str | None,
    finder: Callable[[Tx], Callable[[str, int, int], Sequence[S]]],
    present: Callable[[S], dict[str, Any]],
) -> dict[str, Any]:
    """A page of the principal's tenant's records in their ``seq`` order: ``finder`` names
    the store's method that reads ``(tenant, after_seq, limit)``."""
    limit = check_limit(limit)
    with services.store.transaction(readonly=True) as tx:
        rows = finder(tx)(principal.tenant, decode_cursor(cursor), limit + 1)
    return page([(row.seq, row) for row in rows], limit, present)
