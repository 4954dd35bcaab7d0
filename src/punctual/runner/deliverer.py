"""The deliverer: the runner's thread that sends webhook deliveries (CR-4).

It is a thread of its own, never the dispatch loop's: a receiver that hangs delays other
deliveries by at most its own budget and never delays a run's start. It delivers while
deliveries are due, then sleeps up to a second, or less when ``wake`` is called (after a
commit that queued deliveries). A store outage is waited out with a growing pause;
deliveries are never charged for it, since nothing was claimed.
"""

from __future__ import annotations

import logging
import threading

from punctual.errors import Unavailable
from punctual.usecases.kernel.context import Services
from punctual.usecases.outbound.delivery import SEND_CONCURRENCY, deliver_due

log = logging.getLogger("punctual.deliverer")

_MAX_OUTAGE_BACKOFF = 10.0


class Deliverer:
    def __init__(
        self,
        services: Services,
        *,
        batch_size: int = SEND_CONCURRENCY,
        max_idle_seconds: float = 1.0,
    ) -> None:
        self._services = services
        self._batch_size = batch_size
        self._max_idle_seconds = max_idle_seconds
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="webhook-deliverer", daemon=True)
        self._thread.start()
        log.info("event=deliverer_started")

    def stop(self, timeout: float = 15.0) -> None:
        """Stop after the pass under way (its sends are bounded by their budget)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        log.info("event=deliverer_stopped")

    def wake(self) -> None:
        """Deliver now rather than after the idle pause: deliveries were just queued."""
        self._wake.set()

    def deliver_once(self) -> int:
        """One delivery pass; the number of deliveries claimed (0 when none was due)."""
        return deliver_due(self._services, self._batch_size).claimed

    def _loop(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            # Cleared before the pass, so a wake during it makes the pause below end at once.
            self._wake.clear()
            try:
                claimed = self.deliver_once()
                backoff = 0.0
            except Unavailable as exc:
                backoff = min(_MAX_OUTAGE_BACKOFF, max(0.2, backoff * 2))
                log.debug("event=delivery_paused error=%s", exc)
                self._stop.wait(backoff)
                continue
            except Exception:
                log.exception("event=delivery_pass_failed")
                self._stop.wait(1.0)
                continue
            if claimed >= self._batch_size:
                continue  # a full batch: more is probably due
            self._wake.wait(self._max_idle_seconds)
