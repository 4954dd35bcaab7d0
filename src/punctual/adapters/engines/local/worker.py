"""The local worker: claims runs it has loaded, executes them in child processes, reports.

One control thread claims, heartbeats and checks flags; one recorder thread records
outcomes, all those that finished since its last commit in one transaction, so the slot
pool hands an outcome over without waiting on the store. Run bodies execute in a
``SlotPool`` of warm child processes, so terminate and timeouts can kill a body outright
(see docs/decisions/0002).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from punctual.adapters.engines.local.executor import Assignment, Outcome, SlotPool
from punctual.domain.ids import new_id
from punctual.domain.runs import RunState
from punctual.errors import Unavailable
from punctual.ports.records import ClaimedRun, RunFlags, WorkerRecord
from punctual.usecases import execution
from punctual.usecases.context import Services
from punctual.usecases.definitions import DeclaredDefinition
from punctual.usecases.doorbell import Doorbell
from punctual.workflows import App

log = logging.getLogger("punctual.worker")

_FLAG_CHECK_SECONDS = 0.25
_IDLE_POLL_SECONDS = 0.5
_RECORD_RETRY_SECONDS = 0.5


@dataclass(frozen=True)
class WorkerOptions:
    app_ref: str
    task_queues: Sequence[str]
    slots: int = 4
    heartbeat_seconds: float = 5.0


def declared_definitions(app: App) -> list[DeclaredDefinition]:
    return [
        DeclaredDefinition(
            name=d.name,
            version=d.version,
            artifact=d.artifact,
            input_schema=d.input_schema,
            execution_timeout_seconds=d.execution_timeout_seconds,
        )
        for d in app.definitions
    ]


class LocalWorker:
    def __init__(
        self, services: Services, app: App, options: WorkerOptions, doorbell: Doorbell
    ) -> None:
        self.id = new_id("wrk")
        self._services = services
        self._app = app
        self._options = options
        self._doorbell = doorbell
        self._stop = threading.Event()
        self._running: dict[str, ClaimedRun] = {}
        self._outcomes: list[tuple[ClaimedRun, Outcome]] = []
        """Outcomes not recorded yet; kept (and retried) while the store is unavailable,
        and the runs stay ours meanwhile: their leases are renewed until recorded."""
        self._outcome_ready = threading.Event()
        self._stop_recording = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._recorder: threading.Thread | None = None
        self._pool = SlotPool(
            options.app_ref, options.slots, on_started=self._started, on_finished=self._finished
        )
        self._loaded = [(d.name, d.version) for d in app.definitions]

    def start(self) -> None:
        self._pool.start()
        # Timestamped after the slots are warm: a stale first heartbeat would hide this
        # worker's versions from dispatch until its next beat.
        now = self._services.clock.now()
        record = WorkerRecord(
            id=self.id,
            engine="local",
            host=socket.gethostname(),
            task_queues=list(self._options.task_queues),
            loaded=[(d.name, d.version, d.artifact) for d in self._app.definitions],
            slots=self._options.slots,
            started_at=now,
            heartbeat_at=now,
            stopped_at=None,
        )
        execution.start_worker(self._services, record, declared_definitions(self._app))
        self._recorder = threading.Thread(
            target=self._record_loop, name=f"worker-{self.id}-recorder", daemon=True
        )
        self._recorder.start()
        self._thread = threading.Thread(target=self._loop, name=f"worker-{self.id}", daemon=True)
        self._thread.start()
        log.info("event=worker_started worker=%s slots=%d", self.id, self._options.slots)

    def stop(self, grace_seconds: float = 5.0) -> None:
        self._stop.set()
        self._doorbell.ring()
        if self._thread is not None:
            self._thread.join(timeout=grace_seconds + 5)
        self._pool.close(grace_seconds)
        self._stop_recording.set()
        self._outcome_ready.set()
        if self._recorder is not None:
            self._recorder.join(timeout=grace_seconds + 5)
        try:
            execution.stop_worker(self._services, self.id)
        except Unavailable:
            log.warning("event=worker_stop_unrecorded worker=%s", self.id)
        log.info("event=worker_stopped worker=%s", self.id)

    def _loop(self) -> None:
        next_heartbeat = 0.0
        next_flags = 0.0
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if now >= next_heartbeat:
                    self._apply_flags(
                        execution.heartbeat(self._services, self.id, self._running_ids())
                    )
                    next_heartbeat = now + self._options.heartbeat_seconds
                    next_flags = now + _FLAG_CHECK_SECONDS
                elif now >= next_flags and self._running_ids():
                    self._apply_flags(execution.run_flags(self._services, self._running_ids()))
                    next_flags = now + _FLAG_CHECK_SECONDS
                claimed = self._claim()
            except Unavailable as exc:
                log.warning("event=worker_store_unavailable worker=%s error=%s", self.id, exc)
                claimed = 0
            except Exception:
                log.exception("event=worker_loop_error worker=%s", self.id)
                claimed = 0
            if claimed == 0 or self._pool.free_slots() == 0:
                wait = _FLAG_CHECK_SECONDS if self._running_ids() else _IDLE_POLL_SECONDS
                self._doorbell.wait(wait)

    def _running_ids(self) -> list[str]:
        with self._lock:
            return list(self._running)

    def _claim(self) -> int:
        free = self._pool.free_slots()
        if free <= 0:
            return 0
        work = execution.claim_runs(
            self._services, self.id, self._options.task_queues, self._loaded, free
        )
        if work:
            self._services.crash_point("after_run_claim")
        for item in work:
            run = item.run
            with self._lock:
                self._running[run.id] = run
            self._pool.submit(
                Assignment(
                    run_id=run.id,
                    workflow=run.workflow,
                    version=run.definition_version,
                    payload=item.payload,
                    attempt=run.attempt,
                    origin=run.origin,
                    timeout_seconds=run.timeout_seconds,
                )
            )
        return len(work)

    def _apply_flags(self, flags: Sequence[RunFlags]) -> None:
        for flag in flags:
            if flag.state == RunState.TERMINATED.value:
                self._pool.terminate(flag.id)
            elif flag.state != RunState.RUNNING.value:
                # Finished elsewhere (for example timed out by the reaper): stop the body.
                self._pool.terminate(flag.id)
            elif flag.cancel_requested:
                self._pool.cancel(flag.id)

    def _started(self, run_id: str) -> None:
        log.debug("event=run_body_started run=%s", run_id)

    def _finished(self, outcome: Outcome) -> None:
        """Called by the pool's monitor: hand the outcome to the recorder, never wait."""
        with self._lock:
            run = self._running.get(outcome.run_id)
            if run is None:
                return
            self._outcomes.append((run, outcome))
        self._outcome_ready.set()

    def _record_loop(self) -> None:
        while True:
            self._outcome_ready.wait()
            self._outcome_ready.clear()
            stopping = self._stop_recording.is_set()
            with self._lock:
                batch = list(self._outcomes)
            if batch and not self._record(batch):
                if stopping:
                    log.warning("event=run_outcomes_unrecorded_at_stop runs=%d", len(batch))
                    return
                # The store is unavailable: keep them and retry; if the store is back
                # before a lease is taken over, no body runs again (WF-4 retries it otherwise).
                self._stop_recording.wait(_RECORD_RETRY_SECONDS)
                self._outcome_ready.set()
                continue
            if stopping:
                return

    def _record(self, batch: list[tuple[ClaimedRun, Outcome]]) -> bool:
        """Record a batch in one transaction; False (all kept) when the store is down."""
        finished = [
            execution.Finished(run, RunState(o.state), o.result, o.error) for run, o in batch
        ]
        try:
            recorded = execution.finish_runs(self._services, self.id, finished)
        except Unavailable as exc:
            log.warning("event=run_outcomes_unrecorded runs=%d error=%s", len(batch), exc)
            return False
        except Exception:
            if len(batch) > 1:  # find the outcome the store refuses; record the others
                return all([self._record([item]) for item in batch])
            # Not retried here: the lease runs out and the reaper takes the run back (WF-4).
            log.exception("event=run_outcome_refused run=%s", batch[0][0].id)
            self._forget(batch)
            return True
        self._forget(batch)
        for (run, outcome), was_recorded in zip(batch, recorded, strict=True):
            log.info(
                "event=run_%s run=%s attempt=%d recorded=%s",
                outcome.state,
                run.id,
                run.attempt,
                was_recorded,
            )
        self._doorbell.ring()
        return True

    def _forget(self, batch: list[tuple[ClaimedRun, Outcome]]) -> None:
        done = {run.id for run, _ in batch}
        with self._lock:
            self._outcomes = [item for item in self._outcomes if item[0].id not in done]
            for run_id in done:
                self._running.pop(run_id, None)
