"""Events: what happened, for in-process subscribers, logs and metrics (DP-5)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Event:
    """``name`` is one of the documented event names, e.g. ``start.dispatched``."""

    name: str
    tenant: str
    subject_id: str
    data: dict[str, Any] = field(default_factory=dict)


class EventSink(Protocol):
    def emit(self, event: Event) -> None:
        """Deliver the event; must not raise (a broken subscriber never breaks dispatch)."""
