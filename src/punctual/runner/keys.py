"""The key watch: every process's heartbeat for the codec key lifecycle (RT-2).

A thread of its own in every assembled process (API, runner, worker, a command), apart
from the workers' run heartbeats: a process that runs no worker must report its keys too,
and following an activation must not wait on a long claim or dispatch pass. Every
``refresh_seconds`` it reports the key ids this process holds and follows the store's
active key; a store outage is waited out (the process keeps the key it has, which every
live process held when it was activated).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

from punctual.errors import Unavailable
from punctual.ports.records import ProcessRecord
from punctual.usecases.kernel.context import Services
from punctual.usecases.tenancy import keys

log = logging.getLogger("punctual.keys")


class KeyWatch:
    def __init__(self, services: Services, process: ProcessRecord, refresh_seconds: float) -> None:
        self._services = services
        self._process = process
        self._refresh_seconds = refresh_seconds
        self._components: set[str] = set(process.components)
        self._lock = threading.Lock()
        self._beating = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def process(self) -> ProcessRecord:
        return self._process

    def add_component(self, name: str) -> None:
        """Name what this process runs (``api``, ``runner``, ``worker``) in its reports;
        reported at once, so ``punctual keys check`` shows it without waiting a beat."""
        with self._lock:
            if name in self._components:
                return
            self._components.add(name)
        if self._thread is not None:
            self._beat()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="key-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop beating and mark the process stopped (best effort: a store that is down
        lets the row go silent, which counts the same after ``codec.liveness_seconds``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        try:
            keys.leave(self._services, self._process.id)
        except Unavailable as exc:
            log.debug("event=process_leave_failed process=%s error=%s", self._process.id, exc)

    def refresh_once(self) -> ProcessRecord:
        # One beat at a time: a timer beat that read the components before a new one was
        # added must not commit after the beat that reported it, and undo the report.
        with self._beating:
            with self._lock:
                components = sorted(self._components)
            self._process = keys.heartbeat(
                self._services, replace(self._process, components=components)
            )
            return self._process

    def _beat(self) -> None:
        try:
            self.refresh_once()
        except Unavailable as exc:
            log.debug("event=key_watch_paused process=%s error=%s", self._process.id, exc)
        except Exception:  # the watch never takes the process down
            log.exception("event=key_watch_failed process=%s", self._process.id)

    def _loop(self) -> None:
        while not self._stop.wait(self._refresh_seconds):
            self._beat()
