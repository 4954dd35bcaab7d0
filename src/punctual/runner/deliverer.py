"""The deliverer: the runner's thread that sends webhook deliveries (CR-4).

It is a thread of its own, never the dispatch loop's: a receiver that hangs delays other
deliveries by at most its own budget and never delays a run's start. It delivers while
deliveries are due, then sleeps up to a second, or less when its doorbell rings (a commit
that queued deliveries, in this process or, on PostgreSQL, in another). A store outage is
waited out with a growing pause; deliveries are never charged for it, since nothing was
claimed.
"""

from __future__ import annotations

import logging

from punctual.ports.doorbell import Doorbell
from punctual.runner.threads import RunnerThread, repeat_passes
from punctual.usecases.kernel.context import Services
from punctual.usecases.outbound.delivery import SEND_CONCURRENCY, deliver_due

log = logging.getLogger("punctual.deliverer")


class Deliverer(RunnerThread):
    def __init__(
        self,
        services: Services,
        *,
        doorbell: Doorbell | None = None,
        batch_size: int = SEND_CONCURRENCY,
        max_idle_seconds: float = 1.0,
    ) -> None:
        super().__init__("webhook-deliverer")
        self._services = services
        self._doorbell = doorbell if doorbell is not None else Doorbell()
        self._batch_size = batch_size
        self._max_idle_seconds = max_idle_seconds

    def start(self) -> None:
        if self._start_thread():
            log.info("event=deliverer_started")

    def stop(self, timeout: float = 15.0) -> None:
        """Stop after the pass under way (its sends are bounded by their budget)."""
        self._stop.set()
        self._doorbell.ring()
        self._stop_thread(timeout)
        log.info("event=deliverer_stopped")

    def wake(self) -> None:
        """Deliver now rather than after the idle pause: deliveries were just queued."""
        self._doorbell.ring()

    def deliver_once(self) -> int:
        """One delivery pass; the number of deliveries claimed (0 when none was due)."""
        return deliver_due(self._services, self._batch_size).claimed

    def _loop(self) -> None:
        repeat_passes(
            self._stop,
            self.deliver_once,
            self._batch_size,
            # A ring during a pass is kept, so the pause after it ends at once.
            lambda: self._doorbell.wait(self._max_idle_seconds),
            log,
            "delivery",
        )
