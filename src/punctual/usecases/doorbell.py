"""A wake-up signal between threads of one process: ring to end someone's wait early."""

from __future__ import annotations

import threading


class Doorbell:
    def __init__(self) -> None:
        self._event = threading.Event()

    def ring(self) -> None:
        self._event.set()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout``; True if rung. The ring is consumed."""
        rung = self._event.wait(timeout)
        self._event.clear()
        return rung
