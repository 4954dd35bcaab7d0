"""Instants: always timezone-aware UTC inside punctual, RFC 3339 with ``Z`` outside."""

from __future__ import annotations

from datetime import UTC, datetime


def require_aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamp has no UTC offset")
    return value.astimezone(UTC)


def to_rfc3339(value: datetime) -> str:
    """UTC with a ``Z`` and millisecond precision, the one format the API emits."""
    utc = require_aware(value)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_rfc3339(text: str) -> datetime:
    """Parse an offset-carrying timestamp; a naive one is refused."""
    parsed = datetime.fromisoformat(text.replace("z", "Z"))
    return require_aware(parsed)
