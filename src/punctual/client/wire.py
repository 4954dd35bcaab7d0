"""How a call goes on the wire: ``Call`` (one request and how to read its answer) and the
small helpers that build its parts."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from punctual.resources import Resource

T = TypeVar("T")
R = TypeVar("R", bound=Resource)


def new_idempotency_key() -> str:
    """A fresh key (1-255 visible ASCII characters, as the API requires)."""
    return str(uuid.uuid4())


class Keep(Enum):
    KEEP = "keep"


KEEP = Keep.KEEP
"""``update_webhook``'s default for a field left as it is (``None`` means something)."""


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer; both clients send the same calls."""

    method: str
    path: str
    """Under ``/v1/tenants/{tenant}``, its segments already percent-encoded."""
    read: Callable[[Any], T]
    body: Any = None
    params: Mapping[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None
    """Set on mutations (every ``POST``, ``PUT``, ``PATCH``, ``DELETE`` but the batch)."""


def escaped(value: str) -> str:
    """``value`` as one path segment. A dot is escaped too: a name such as ``..`` would
    otherwise be a dot segment, which the URL resolves away (``by-name/..`` is the list)."""
    return quote(value, safe="").replace(".", "%2E")


def instant(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def given(**values: Any) -> dict[str, Any]:
    """The fields the caller gave (``None`` leaves the server's default)."""
    return {name: value for name, value in values.items() if value is not None}


def model(kind: type[R]) -> Callable[[Any], R]:
    return kind.model_validate


def nothing(_: Any) -> None:
    return None


def mutation(
    method: str,
    path: str,
    read: Callable[[Any], T],
    key: str | None,
    body: Any = None,
    params: Mapping[str, Any] | None = None,
) -> Call[T]:
    return Call(method, path, read, body, params or {}, key or new_idempotency_key())


def query(path: str, read: Callable[[Any], T], **params: Any) -> Call[T]:
    return Call("GET", path, read, params=given(**params))


def jsonable(value: Any) -> Any:
    """``value`` with its instants (nested ones too) as RFC 3339 text."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {name: jsonable(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    return value
