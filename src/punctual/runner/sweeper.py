"""The sweeper: the runner's thread that removes expired records (RT-1).

A thread of its own, never the dispatch loop's. Every ``interval_seconds`` it sweeps
(``usecases.retention.sweep``): batches of short transactions, and after each full batch
it rests at least as long as the batch took (the sweep uses at most half of what the
store and this process could give it), and then for as long as starts are due and not yet
claimed (up to ``max_yield_seconds``): dispatch goes first, and SQLite's single writer
lock is free for it. After a pass that removed anything it calls ``after_pass`` (the
composition root makes the freed space reusable there: a plain ``VACUUM`` of the swept
tables on PostgreSQL). A store outage ends the sweep under way; the next one carries on
where the store stands, so nothing is lost by stopping anywhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from punctual.errors import Unavailable
from punctual.runner.threads import RunnerThread
from punctual.usecases.kernel.context import Services
from punctual.usecases.tenancy.retention import RetentionPolicy, SweepReport, sweep

log = logging.getLogger("punctual.sweeper")


class Sweeper(RunnerThread):
    def __init__(
        self,
        services: Services,
        policy: RetentionPolicy,
        *,
        interval_seconds: float = 300.0,
        pause_seconds: float = 0.02,
        max_yield_seconds: float = 5.0,
        after_pass: Callable[[SweepReport], None] = lambda report: None,
    ) -> None:
        super().__init__("retention-sweeper")
        self._services = services
        self._after_pass = after_pass
        self._policy = policy
        self._interval = interval_seconds
        self._pause = pause_seconds
        self._max_yield = max_yield_seconds
        self._batch_began = time.monotonic()

    def start(self) -> None:
        if self._start_thread():
            log.info("event=sweeper_started interval_seconds=%s", self._interval)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop after the batch under way (each is one short transaction)."""
        self._stop_thread(timeout)
        log.info("event=sweeper_stopped")

    def sweep_once(self) -> SweepReport:
        self._batch_began = time.monotonic()
        return sweep(self._services, self._policy, pause=self.between_batches)

    def between_batches(self) -> bool:
        """Rest after a full batch; False once the sweeper is stopping."""
        worked = time.monotonic() - self._batch_began
        if self._stop.wait(max(self._pause, worked)):
            return False
        deadline = time.monotonic() + self._max_yield
        while self._dispatch_due() and time.monotonic() < deadline:
            if self._stop.wait(self._pause):
                return False
        self._batch_began = time.monotonic()
        return True

    def _dispatch_due(self) -> bool:
        """Starts are due and not claimed yet: a dispatch pass is about to run."""
        now = self._services.clock.now()
        with self._services.store.transaction(readonly=True) as tx:
            due = tx.starts.earliest_due(now)
        return due is not None and due <= now

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                report = self.sweep_once()
                removed = any(report.removed.values())
                if removed:
                    self._after_pass(report)
                # A sweep that found nothing to remove is said at DEBUG: an idle runner
                # writes no line on a timer (SPEC OP-4).
                log.log(
                    logging.INFO if removed or not report.complete else logging.DEBUG,
                    "event=sweep_done batches=%d removed=%d complete=%s",
                    report.batches,
                    sum(report.removed.values()),
                    report.complete,
                )
            except Unavailable as exc:
                log.info("event=sweep_paused error=%s", exc)
            except Exception:
                log.exception("event=sweep_failed")
            self._stop.wait(self._interval)
