"""A wake-up signal between threads of one process: ring to end waits early.

Every waiting thread has a signal of its own, so one ring wakes them all: the runner's
generation and dispatch loops both wait on the due doorbell.
"""

from __future__ import annotations

import threading


class Doorbell:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._signals: dict[int, threading.Event] = {}

    def ring(self) -> None:
        with self._lock:
            signals = list(self._signals.values())
        for signal in signals:
            signal.set()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout``; True if rung. The ring is consumed (for this thread)."""
        signal = self._signal()
        rung = signal.wait(timeout)
        signal.clear()
        return rung

    def _signal(self) -> threading.Event:
        key = threading.get_ident()
        with self._lock:
            signal = self._signals.get(key)
            if signal is None:
                # Threads that waited here and have ended since (a runner stopped and
                # started again) leave nothing behind.
                alive = {thread.ident for thread in threading.enumerate()}
                for gone in [k for k in self._signals if k not in alive]:
                    del self._signals[gone]
                # A ring before this thread's first wait must not be lost: start rung.
                signal = self._signals[key] = threading.Event()
                signal.set()
            return signal
