"""Bearer tokens this process has checked, remembered for a bounded time.

A request's token would otherwise cost a transaction of its own before the request's
work begins (SPEC OP-5). A principal found by its token's digest is kept for
``auth_cache_seconds``: within that bound, on every process, a revoked or expired token is
refused and a member's new role or removal is seen. The process that makes such a change
also forgets what it remembers, so its own next requests see it at once unless one was
being checked meanwhile (the bound holds for those). Unknown tokens are never remembered,
so a token issued anywhere works on its first request.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime

from punctual.domain.permissions import Principal
from punctual.ports.records import LiveToken

CAPACITY = 10_000
"""Tokens remembered at most; the least recently checked is forgotten first."""


class PrincipalCache:
    def __init__(
        self,
        seconds: float,
        monotonic: Callable[[], float] = time.monotonic,
        capacity: int = CAPACITY,
    ) -> None:
        self._seconds = seconds
        self._monotonic = monotonic
        self._capacity = capacity
        self._lock = threading.Lock()
        self._known: OrderedDict[str, tuple[float, LiveToken]] = OrderedDict()

    def recall(self, digest: str, now: datetime) -> Principal | None:
        """The principal of the token checked for ``digest`` less than the bound ago, or
        None; never past the token's own expiry (``now``: the clock requests are judged by)."""
        if self._seconds <= 0:
            return None
        with self._lock:
            found = self._known.get(digest)
            if found is None:
                return None
            until, token = found
            if self._monotonic() >= until or (
                token.expires_at is not None and now >= token.expires_at
            ):
                del self._known[digest]
                return None
            self._known.move_to_end(digest)
            return token.principal

    def remember(self, digest: str, token: LiveToken) -> None:
        if self._seconds <= 0:
            return
        with self._lock:
            self._known[digest] = (self._monotonic() + self._seconds, token)
            self._known.move_to_end(digest)
            while len(self._known) > self._capacity:
                self._known.popitem(last=False)

    def forget_all(self) -> None:
        """After this process revoked a token or changed a member: no stale answer here."""
        with self._lock:
            self._known.clear()
