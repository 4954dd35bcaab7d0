"""The runner: the process part that keeps time.

Three loops on three threads. The generation loop keeps schedules' occurrences generated a
little ahead of their time (``LOOKAHEAD``). The dispatch loop dispatches due starts in
pages, sleeps until the earliest due time (or until a create, reschedule or generation
pass rings its doorbell), recovers runs of lost workers, and pauses behind a circuit
breaker while the engine or the store is unavailable (DP-3): an outage is waited out,
never charged to starts. Apart, a long generation pass (catch-up after downtime) never
delays a dispatch page, and occurrences are ready before they are due. The follow-through
loop records how schedules' runs ended and what that means (CR-4, CR-5): it writes the
notifications and the webhook outbox, never on the dispatch thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from punctual.domain.ids import new_id
from punctual.errors import Unavailable
from punctual.ports.doorbell import Doorbell
from punctual.runner.threads import longer_backoff, repeat_passes
from punctual.usecases.kernel.context import Services
from punctual.usecases.recurring.generation import LOOKAHEAD, generate
from punctual.usecases.running import execution
from punctual.usecases.running.followthrough import follow_through
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.usecases.tenancy.health import HOST

log = logging.getLogger("punctual.runner")


FOLLOW_THROUGH_GAP_SECONDS = 0.05
"""The least pause between follow-through passes: a stream of ended runs is judged in
pages, not one pass per recorded batch."""


@dataclass(frozen=True)
class RunnerOptions:
    page_size: int = 500
    max_idle_seconds: float = 1.0
    reap_every_seconds: float = 5.0
    follow_through_every_seconds: float = 0.5
    """The follow-through's backstop: a pass at least this often. A recorded end of a
    schedule's run wakes it at once (in this process, or on PostgreSQL in any), at most
    once per ``FOLLOW_THROUGH_GAP_SECONDS``."""


@dataclass
class RunnerStatus:
    engine_available: bool = True
    last_error: str | None = None
    passes: int = 0


class Runner:
    def __init__(
        self,
        services: Services,
        options: RunnerOptions,
        doorbell: Doorbell,
        on_notified: Callable[[], None] = lambda: None,
        ended: Doorbell | None = None,
    ) -> None:
        self.id = new_id("wrk")
        self.status = RunnerStatus()
        self._services = services
        self._options = options
        self._doorbell = doorbell
        self._ended = ended if ended is not None else Doorbell()
        """Rung when a schedule's run ended: the follow-through has work."""
        self._on_notified = on_notified
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._generation_loop, name="runner-generation", daemon=True),
            threading.Thread(target=self._loop, name="runner", daemon=True),
            threading.Thread(
                target=self._follow_through_loop, name="runner-follow-through", daemon=True
            ),
        ]
        for thread in self._threads:
            thread.start()
        log.info("event=runner_started runner=%s", self.id)
        if self._services.driver.name != "sql":
            log.info(
                "event=schedule_generation_off runner=%s driver=%s note=Temporal Schedules "
                "fire schedules; this runner dispatches occurrences and one-off starts",
                self.id,
                self._services.driver.name,
            )

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._doorbell.ring()
        self._ended.ring()
        for thread in self._threads:
            thread.join(timeout)
        log.info("event=runner_stopped runner=%s", self.id)

    def run_once(self) -> int:
        """One pass of each loop (generation, then dispatch); the number of items handled."""
        generated = self.generate_once()
        return max(generated, self.dispatch_once())

    def generate_once(self) -> int:
        """One generation pass; the occurrences generated. Under the Temporal Schedules
        driver Temporal fires schedules, so there is no pass (triggers, backfills and
        one-off starts are still dispatched here)."""
        if self._services.driver.name != "sql":
            return 0
        return generate(self._services, self._options.page_size).generated

    def dispatch_once(self) -> int:
        """One release of buffered occurrences whose previous run ended, one dispatch
        pass; the number of items handled (0 when idle)."""
        with self._services.store.transaction() as tx:
            released = tx.starts.release_buffered(self._services.clock.now())
        report = dispatch_due(self._services, self.id, self._options.page_size)
        self.status.passes += 1
        return max(report.claimed, released)

    def follow_through_once(self) -> int:
        """One follow-through pass; the runs it claimed. Rings the deliverer when the pass
        wrote notifications, so a regression leaves within the deliverer's next turn."""
        report = follow_through(self._services, self._options.page_size)
        if report.notified:
            self._on_notified()
        return report.claimed

    def _follow_through_loop(self) -> None:
        repeat_passes(
            self._stop,
            self.follow_through_once,
            self._options.page_size,
            self._follow_through_rest,
            log,
            "follow_through",
            f" runner={self.id}",
        )

    def _follow_through_rest(self) -> None:
        if self._stop.wait(FOLLOW_THROUGH_GAP_SECONDS):
            return
        self._ended.wait(
            max(0.0, self._options.follow_through_every_seconds - FOLLOW_THROUGH_GAP_SECONDS)
        )

    def _generation_loop(self) -> None:
        # The dispatch loop reports outages; this one only waits them out. A full budget
        # is followed at once by the next pass (catch-up).
        repeat_passes(
            self._stop,
            self.generate_once,
            self._options.page_size,
            lambda: self._rest(self._generation_sleep_seconds),
            log,
            "generation",
            f" runner={self.id}",
        )

    def _loop(self) -> None:
        outage_backoff = 0.0
        next_reap = 0.0
        while not self._stop.is_set():
            if not self.status.engine_available and not self._engine_answers():
                # The breaker is open: probe, never claim. A pass would only claim a page
                # and give it back, making starts flicker to `dispatching` meanwhile.
                outage_backoff = longer_backoff(outage_backoff)
                self._stop.wait(outage_backoff)
                continue
            try:
                claimed = self.dispatch_once()
                if time.monotonic() >= next_reap:
                    execution.reap(self._services)
                    next_reap = time.monotonic() + self._options.reap_every_seconds
                if not self.status.engine_available:
                    log.info("event=engine_available runner=%s", self.id)
                    self._note_outage(None)
                self.status.engine_available = True
                self.status.last_error = None
                outage_backoff = 0.0
            except Unavailable as exc:
                outage_backoff = longer_backoff(outage_backoff)
                if self.status.engine_available:
                    log.warning("event=engine_unavailable runner=%s error=%s", self.id, exc)
                    self._note_outage(str(exc))
                self.status.engine_available = False
                self.status.last_error = str(exc)
                self._stop.wait(outage_backoff)
                continue
            except Exception:
                log.exception("event=runner_pass_failed runner=%s", self.id)
                self._stop.wait(1.0)
                continue
            if claimed >= self._options.page_size:
                continue  # a full page: more is probably due right now
            self._rest(self._sleep_seconds)

    def _rest(self, seconds: Callable[[], float]) -> None:
        """Wait ``seconds()`` or until the doorbell rings; the idle cap when the store
        cannot say how long."""
        try:
            pause = seconds()
        except Unavailable:
            pause = self._options.max_idle_seconds
        self._doorbell.wait(pause)

    def _engine_answers(self) -> bool:
        try:
            return self._services.engine.available()
        except Exception:  # a probe never takes the loop down
            log.exception("event=engine_probe_failed runner=%s", self.id)
            return False

    def _note_outage(self, problem: str | None) -> None:
        """Raise or clear the host-wide ``engine_unavailable`` finding (DP-3). Best effort:
        when the store itself is down, the log line is the record."""
        services = self._services
        try:
            with services.store.transaction() as tx:
                if problem is None:
                    tx.findings.clear(HOST, "engine_unavailable", "engine")
                else:
                    tx.findings.raise_finding(
                        HOST,
                        "engine_unavailable",
                        "engine",
                        "warning",
                        f"dispatch is paused: {problem}",
                        services.clock.now(),
                    )
        except Unavailable:
            pass

    def _sleep_seconds(self) -> float:
        with self._services.store.transaction(readonly=True) as tx:
            return self._until(tx.starts.earliest_due(self._services.clock.now()))

    def _generation_sleep_seconds(self) -> float:
        with self._services.store.transaction(readonly=True) as tx:
            generation = tx.schedules.earliest_generation()
        return self._until(generation - LOOKAHEAD if generation is not None else None)

    def _until(self, instant: datetime | None) -> float:
        """Seconds until ``instant``, at most the idle cap (also when there is none)."""
        longest = self._options.max_idle_seconds
        if instant is None:
            return longest
        wait = (instant - self._services.clock.now()).total_seconds()
        return max(0.0, min(longest, wait))
