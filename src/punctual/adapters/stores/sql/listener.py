"""Cross-process wake-ups on PostgreSQL: LISTEN/NOTIFY.

A create or reschedule notifies ``punctual_due``, a dispatch ``punctual_runs``, the
recording of a schedule's ended run ``punctual_ended`` and a queued webhook delivery
``punctual_deliveries``, inside their transactions; PostgreSQL delivers a notification
only when (and if) that transaction commits. Each process that runs a runner or a worker
keeps one listening connection and rings the matching in-process wake-up, so a runner in
another process wakes for a start that is due sooner than it planned, for a run's
follow-through and for a delivery, and workers claim new runs at once instead of on their
next poll.

The polling backstops (``runner.max_idle_seconds``, the worker's idle poll, the
follow-through's and the deliverer's pauses) stay: a notification is an optimisation,
never the only way work is found.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

import psycopg

log = logging.getLogger("punctual.listener")

DUE_CHANNEL = "punctual_due"
RUNS_CHANNEL = "punctual_runs"
ENDED_CHANNEL = "punctual_ended"
"""A schedule's run ended: the runner's follow-through has work."""
DELIVERIES_CHANNEL = "punctual_deliveries"
"""Webhook deliveries were queued: the runner's deliverer has work."""
_RECONNECT_SECONDS = 1.0


class PgListener:
    def __init__(self, dsn: str, handlers: dict[str, Callable[[], None]]) -> None:
        self._dsn = dsn
        self._handlers = dict(handlers)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pg-listener", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.cancel_safe()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._dsn, autocommit=True) as conn:
                    self._conn = conn
                    for channel in self._handlers:
                        conn.execute(f"LISTEN {channel}")
                    # Anything may have happened while we were not listening.
                    for ring in self._handlers.values():
                        ring()
                    while not self._stop.is_set():
                        for notify in conn.notifies(timeout=1.0):
                            handler = self._handlers.get(notify.channel)
                            if handler is not None:
                                handler()
            except psycopg.Error as exc:
                if not self._stop.is_set():
                    log.warning("event=listener_reconnecting error=%s", exc)
                    self._stop.wait(_RECONNECT_SECONDS)
            finally:
                self._conn = None
