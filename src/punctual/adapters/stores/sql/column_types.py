"""Column types both stores share: aware UTC instants, JSON that keeps any value, row
sequences. Apart from the tables so that the migrations, written once, name them without
depending on today's schema.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC in and out; naive UTC text on SQLite so comparisons sort correctly."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; pass an aware UTC instant")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

_ESCAPED = "$punctual_escaped"
"""Marks a JSON value stored as its JSON text (``{"$punctual_escaped": 1, "json": ...}``)."""
_NOT_STORABLE_AS_IS = re.compile(r"\\u0000|\\ud[89a-f]|" + re.escape(_ESCAPED))


class OutcomeJSON(sa.TypeDecorator[Any]):
    """JSON that keeps any value a workflow body returns or raises, on both stores (FT-3).

    PostgreSQL's JSONB refuses U+0000 and lone surrogates. A value whose JSON text holds
    one of them (or that could be mistaken for the envelope) is stored as a versioned
    envelope holding that text, ``{"$punctual_escaped": 1, "json": "..."}``, and read
    back as the value itself: reading gives exactly what the body returned. Every other
    value is stored as is.
    """

    impl = sa.JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.JSONB())
        return dialect.type_descriptor(sa.JSON())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        text = json.dumps(value)
        if _NOT_STORABLE_AS_IS.search(text):
            return {_ESCAPED: 1, "json": text}
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if isinstance(value, dict) and value.get(_ESCAPED) == 1:
            return json.loads(value["json"])
        return value


Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
