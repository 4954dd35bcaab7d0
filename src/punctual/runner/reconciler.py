"""The reconciliation sweep's timer (CR-6): once at start, then every ``interval``."""

from __future__ import annotations

import logging
import threading

from punctual.errors import Unavailable
from punctual.usecases.firing.reconcile import reconcile
from punctual.usecases.kernel.context import Services

log = logging.getLogger("punctual.runner")


class Reconciler:
    def __init__(self, services: Services, interval_seconds: float) -> None:
        self._services = services
        self._interval = interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="reconciler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                reconcile(self._services)
            except Unavailable as exc:
                log.warning("event=reconcile_paused error=%s", exc)
            except Exception:
                log.exception("event=reconcile_failed")
            self._stop.wait(self._interval)
