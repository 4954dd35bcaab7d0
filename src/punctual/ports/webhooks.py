"""Webhook sender port: one HTTP POST of a delivery to a tenant's webhook (CR-4).

The adapter owns the network rules of API.md "Notifications and webhooks": only
``http``/``https``, the destination resolved and checked at every send and the connection
made to the checked address, no redirects, short timeouts, a capped read. It never raises
for the receiver's or the network's faults: those are a ``SendResult``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SendResult:
    delivered: bool
    """True for a 2xx answer."""
    status_code: int | None
    """The answer's status, None when there was no answer."""
    error: str | None
    """Why it was not delivered, for ``last_error``: never the URL's path or query."""


class WebhookSender(Protocol):
    def destination_problem(self, url: str) -> str | None:
        """Why deliveries to ``url`` would be refused now (scheme, unresolvable host, a
        refused address), or None; the reason never carries the URL's path or query."""

    def send(self, url: str, body: bytes, headers: dict[str, str]) -> SendResult: ...
