"""Instants: always timezone-aware UTC inside punctual, RFC 3339 with ``Z`` outside."""

from __future__ import annotations

from datetime import UTC, datetime


def require_aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamp has no UTC offset")
    return value.astimezone(UTC)


def to_rfc3339(value: datetime) -> str:
    """UTC with a ``Z`` and millisecond precision, the one format the API emits.

    ``isoformat`` writes the year with four digits (``0005-…``); ``strftime("%Y")`` writes
    it as the platform does (``5`` on glibc), which no RFC 3339 parser reads."""
    utc = require_aware(value)
    return utc.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def parse_rfc3339(text: str) -> datetime:
    """Parse an offset-carrying timestamp; a naive one is refused."""
    parsed = datetime.fromisoformat(text.replace("z", "Z"))
    return require_aware(parsed)
