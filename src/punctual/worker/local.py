"""The local worker: claims runs it has loaded, executes them in child processes, reports.

It claims runs only of the versions whose code is the registered artifact: a version whose
body was edited without a new version is left to workers with the registered code (OP-3).

One control thread claims, heartbeats and checks flags, and keeps the slots fed from a
short queue of its own while they drain fast (a burst takes a few claims, not one per
slot queue's worth); one recorder thread records
outcomes and body starts, all those since its last commit in one transaction, so the slot
pool hands an outcome over without waiting on the store. Run bodies execute in a
``SlotPool`` of warm child processes, so terminate and timeouts can kill a body outright
(see docs/decisions/0002).

Fencing (FT-2): every claim has a token (``<worker id>/<attempt>``). A body runs only
while its claim is this worker's: the worker stops it when the flags name another claim
or renewal no longer matches, and a watchdog thread stops it by itself when the lease
was not renewed in time (the store unreachable, the control loop blocked), before the
lease can expire and another worker take the run over.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from punctual.adapters.executor import Assignment, Outcome, SlotPool
from punctual.domain.ids import new_id
from punctual.domain.runs import RunErrorCode, RunState, run_error
from punctual.errors import Unavailable
from punctual.ports.doorbell import Doorbell
from punctual.ports.records import ClaimedRun, RunClaim, RunFlags, WorkerRecord
from punctual.usecases.kernel.context import Services
from punctual.usecases.running import execution
from punctual.worker.definitions import declared_definitions
from punctual.workflows import App

log = logging.getLogger("punctual.worker")

_FLAG_CHECK_SECONDS = 0.25
_IDLE_POLL_SECONDS = 0.5
_RECORD_RETRY_SECONDS = 0.5
_WATCHDOG_SECONDS = 0.1
_MAX_HELD_PER_CAPACITY = 4
"""A worker holds at most this many runs per place in its slots, recorded or not."""
_READY_HORIZON_SECONDS = 0.1
"""Beyond the room in its slots, a claim takes what the slots finished in this long just
before: about what they will begin before the claim after it could deliver."""
_READY_WAIT_SECONDS = 0.5
"""A claimed run waits this long at most in the worker's ready queue; after that the
slots have slowed down and it goes back uncharged, for another worker to take."""
_START_ALONE_AFTER_SECONDS = 0.05
"""A body's start is recorded on its own once the body has run this long; a shorter
body's start is recorded with its outcome, in the same statement."""
_MAX_FENCE_MARGIN_SECONDS = 1.0
"""A body is stopped this long (at most; a tenth of the lease for short leases) before
its lease could expire unrenewed."""


@dataclass(frozen=True)
class WorkerOptions:
    app_ref: str
    task_queues: Sequence[str]
    slots: int = 4
    heartbeat_seconds: float = 5.0
    queue_depth: int = 16
    """Runs a slot holds at most: the one whose body runs and those queued behind it, so
    a slot goes from one short body to the next without a round trip through this
    process (docs/decisions/0005). 1 hands a slot one run at a time."""


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
        self._starts: list[tuple[RunClaim, datetime, float]] = []
        """Bodies that began and whose ``started_at`` is not recorded yet (with the
        monotonic time they began)."""
        self._began: dict[str, float] = {}
        """Per run whose body runs here, the monotonic time it began: its duration goes
        with its outcome (the one line of its end)."""
        self._durations: dict[RunClaim, float] = {}
        """How long the bodies of outcomes not recorded yet ran."""
        self._renew_by: dict[str, float] = {}
        """Per run, the monotonic time by which its lease must have been renewed again,
        or its body is stopped (the lease may expire soon after)."""
        self._fenced: set[tuple[str, int]] = set()
        """(run, attempt) whose body this worker stopped because the claim is no longer its
        own (or may not be): that attempt's outcome is not recorded. Keyed by attempt, so
        a later attempt of the same run handed to this worker keeps its own outcome."""
        lease = services.policy.lease_seconds
        self._lease_margin = min(_MAX_FENCE_MARGIN_SECONDS, lease / 10)
        self._outcome_ready = threading.Event()
        self._recorded = threading.Event()
        """Set when the recorder has recorded outcomes: held runs went down."""
        self._stop_recording = threading.Event()
        self._stop_watching = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._recorder: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._returned: list[ClaimedRun] = []
        """Runs a slot took back before their body began: given back uncharged."""
        self._ready: dict[str, tuple[float, execution.ClaimedWork]] = {}
        """Claimed runs not handed to a slot yet, by run id in claim order, with when they
        were claimed (monotonic); only the control thread touches it."""
        self._pool = SlotPool(
            options.app_ref,
            options.slots,
            on_started=self._started,
            on_finished=self._finished,
            queue_depth=options.queue_depth,
            on_returned=self._taken_back,
        )
        self._finishes: deque[float] = deque(maxlen=_MAX_HELD_PER_CAPACITY * self._pool.capacity)
        """When recent bodies finished (monotonic, the last ``_READY_HORIZON_SECONDS``); no
        claim asks for more than the held limit, so no more are kept while claims pause."""
        self._claim_batch = max(1, self._pool.capacity // 4)
        """The least a claim asks for while every slot still has work: claims stay few
        and large under load, and an idle slot is filled at once."""
        self._loaded: list[tuple[str, str]] = []
        """The versions whose runs this worker claims: those its registration found to be
        the registered code (OP-3); set by ``start``."""

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
        served = execution.start_worker(
            self._services, record, declared_definitions(self._app), pid=os.getpid()
        )
        self._loaded = [(name, version) for name, version, _ in served.loaded]
        self._recorder = threading.Thread(
            target=self._record_loop, name=f"worker-{self.id}-recorder", daemon=True
        )
        self._recorder.start()
        self._watchdog = threading.Thread(
            target=self._watch_leases, name=f"worker-{self.id}-watchdog", daemon=True
        )
        self._watchdog.start()
        self._thread = threading.Thread(target=self._loop, name=f"worker-{self.id}", daemon=True)
        self._thread.start()
        log.info("event=worker_started worker=%s slots=%d", self.id, self._options.slots)

    def stop(self, grace_seconds: float = 5.0) -> None:
        self._stop.set()
        self._doorbell.ring()
        if self._thread is not None:
            self._thread.join(timeout=grace_seconds + 5)
        if self._thread is None or not self._thread.is_alive():
            # The control loop is over: what it kept ready goes back now, before the slots'
            # grace period (unrenewed meanwhile, its leases could run out and be charged).
            with self._lock:
                self._returned.extend(item.run for _, item in self._ready.values())
            self._ready.clear()
            self._give_back_returned()
        self._pool.close(grace_seconds)
        self._give_back_returned()
        # The watchdog outlives the control loop: bodies finishing within the grace
        # period are no longer renewed, and must still stop before their leases end.
        self._stop_watching.set()
        if self._watchdog is not None:
            self._watchdog.join(timeout=5)
        self._stop_recording.set()
        self._outcome_ready.set()
        if self._recorder is not None:
            self._recorder.join(timeout=grace_seconds + 5)
        try:
            execution.stop_worker(self._services, self.id)
        except Unavailable:
            log.warning("event=worker_stop_unrecorded worker=%s", self.id)
        log.info("event=worker_stopped worker=%s", self.id)

    def executing(self) -> set[str]:
        """Ids of the runs whose body is executing in a slot now."""
        return self._pool.running()

    def _loop(self) -> None:
        next_heartbeat = 0.0
        next_flags = 0.0
        # The last claim got fewer runs than it asked for: while runs wait in the ready
        # queue, the next claim waits for the doorbell (new runs, or a recording that
        # freed room) or the next flag check.
        drained = False
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if now >= next_heartbeat:
                    self._heartbeat()
                    next_heartbeat = now + self._options.heartbeat_seconds
                    next_flags = now + _FLAG_CHECK_SECONDS
                    drained = False
                elif now >= next_flags and self._running_ids():
                    self._apply_flags(execution.run_flags(self._services, self._running_ids()))
                    next_flags = now + _FLAG_CHECK_SECONDS
                    drained = False
                self._give_back_returned()
                self._feed()
                if drained and self._ready and not self._doorbell.wait(0):
                    # Runs to feed and nothing announced: feed them as slots drain, without
                    # asking the store again for runs it just said it does not have.
                    self._pool.wait_for_capacity(1, _FLAG_CHECK_SECONDS / 10)
                    continue
                wanted, claimed = self._claim()
            except Unavailable as exc:
                log.warning("event=worker_store_unavailable worker=%s error=%s", self.id, exc)
                wanted, claimed = 1, 0
            except Exception:
                log.exception("event=worker_loop_error worker=%s", self.id)
                wanted, claimed = 1, 0
            drained = 0 <= claimed < wanted
            if claimed < 0:
                self._recorded.wait(_FLAG_CHECK_SECONDS)  # until the recorder catches up
            elif drained and not self._ready:
                # Nothing (more) to claim now, or it failed: until runs arrive (the
                # doorbell) or the next flag check.
                wait = _FLAG_CHECK_SECONDS if self._running_ids() else _IDLE_POLL_SECONDS
                drained = not self._doorbell.wait(wait)
            elif not self._pool.wait_for_capacity(
                1 if self._ready else self._claim_batch, _FLAG_CHECK_SECONDS
            ):
                # Runs to feed: as soon as a slot has room. More may be pending: claimed
                # again when there is room for a batch (above). Without room by the next
                # flag check, or a closed pool, here.
                self._doorbell.wait(_FLAG_CHECK_SECONDS / 10)

    def _running_ids(self) -> list[str]:
        with self._lock:
            return list(self._running)

    def _heartbeat(self) -> None:
        with self._lock:
            claims = [run.claim for run in self._running.values()]
        began = time.monotonic()
        renewed, flags = execution.heartbeat(self._services, self.id, claims)
        renew_by = began + self._services.policy.lease_seconds - self._lease_margin
        with self._lock:
            for run_id in renewed:
                if run_id in self._renew_by:
                    self._renew_by[run_id] = renew_by
        self._apply_flags(flags)
        for claim in claims:
            if claim.run_id not in renewed:
                # Ended elsewhere (terminated, timed out: the flags stopped the body) or
                # claimed again: either way no body of this claim may run on.
                self._fence(claim, "lease_not_renewed")

    def _claim(self) -> tuple[int, int]:
        """Claim, in one statement, as many runs as the slots have room for and what they
        finished in the last ``_READY_HORIZON_SECONDS`` (those wait in the ready queue);
        returns (asked for, claimed). Asks for nothing while the room is less than a batch
        and every slot still has work; claimed is -1 while too many outcomes await
        recording."""
        room = self._pool.free_capacity()
        self._recorded.clear()  # before counting: a recording from now on ends the wait
        with self._lock:
            # Runs whose outcome is not recorded yet are still held (and renewed): the
            # recorder falling behind slows claims down instead of piling runs up.
            unheld = _MAX_HELD_PER_CAPACITY * self._pool.capacity - len(self._running)
        if unheld < self._claim_batch:
            return 0, -1
        wanted = min(unheld, room + self._recent_finishes() - len(self._ready))
        if wanted <= 0 or (room < self._claim_batch and self._pool.free_slots() == 0):
            # Claims come as often as without the ready queue (room for a batch, or an
            # idle slot), only larger: more of them would cost the store, not the slots.
            return 0, 0
        began = time.monotonic()
        work = execution.claim_runs(
            self._services, self.id, self._options.task_queues, self._loaded, wanted
        )
        if work:
            self._services.crash_point("after_run_claim")
        renew_by = began + self._services.policy.lease_seconds - self._lease_margin
        arrived = time.monotonic()  # a ready run's wait counts from here, not the claim's start
        for item in work:
            run = item.run
            stale = self._running.get(run.id)
            if stale is not None:
                # This worker's earlier attempt lost its lease and the run came back to
                # it: the old body must not run beside the new one (FT-2).
                self._fence(stale.claim, "claimed_again")
            with self._lock:
                self._running[run.id] = run
                self._renew_by[run.id] = renew_by
            self._ready.pop(run.id, None)
            self._ready[run.id] = (arrived, item)
        self._feed()
        return wanted, len(work)

    def _recent_finishes(self) -> int:
        horizon = time.monotonic() - _READY_HORIZON_SECONDS
        with self._lock:
            while self._finishes and self._finishes[0] < horizon:
                self._finishes.popleft()
            return len(self._finishes)

    def _feed(self) -> None:
        """Hand ready runs to the slots while they have room, oldest first; give back
        (uncharged) those whose lease renewal is overdue, and those that found no room for
        ``_READY_WAIT_SECONDS``."""
        now = time.monotonic()
        stale: list[ClaimedRun] = []
        while self._ready:
            run_id = next(iter(self._ready))
            claimed_at, item = self._ready[run_id]
            run = item.run
            with self._lock:
                current = self._running.get(run_id)
                renew_by = self._renew_by.get(run_id, now)
            if current is None or current.claim != run.claim:
                del self._ready[run_id]  # fenced or ended meanwhile: it never begins
                continue
            if renew_by > now and self._pool.free_capacity() > 0 and self._hand_over(item):
                del self._ready[run_id]
                continue
            if renew_by > now and now - claimed_at <= _READY_WAIT_SECONDS:
                break  # no room yet; the runs behind it waited less
            del self._ready[run_id]
            self._drop(run.claim)
            stale.append(run)
        if stale:
            self._give_back(stale)

    def _hand_over(self, item: execution.ClaimedWork) -> bool:
        """Submit one claimed run to a slot; False if no slot took it after all (it stays
        ready). A failure of the assignment itself concerns that run alone."""
        run = item.run
        try:
            self._pool.submit(Assignment.of_run(run, run.attempt, item.payload))
        except RuntimeError as exc:
            # No slot after all (a slot process died between "room" and "submit", or the
            # pool is closing): it waits in the ready queue, or goes back uncharged.
            log.debug("event=run_handoff_deferred run=%s error=%s", run.id, exc)
            return False
        except Exception as exc:
            # The assignment itself cannot run (a bad timeout, input that cannot travel):
            # it would fail the same way on any worker, so the run fails now.
            log.error("event=run_handoff_failed run=%s error=%s", run.id, type(exc).__name__)
            error = run_error(
                RunErrorCode.HANDOFF_FAILED,
                f"run {run.id} attempt {run.attempt} could not be handed to an execution "
                f"slot ({type(exc).__name__}): check the definition's "
                "execution_timeout_seconds and that the input is plain JSON",
            )
            self._finished(Outcome(run.id, "failed", None, error, run.attempt))
        return True

    def _taken_back(self, assignments: list[Assignment]) -> None:
        """Called by the pool: these runs' bodies never began (queued behind a slow body,
        or beside one that was killed); the control loop gives them back."""
        with self._lock:
            for assignment in assignments:
                run = self._running.get(assignment.run_id)
                if run is not None and run.attempt == assignment.attempt:
                    self._returned.append(run)
        log.debug("event=runs_taken_back worker=%s runs=%d", self.id, len(assignments))
        self._doorbell.ring()

    def _give_back_returned(self) -> None:
        with self._lock:
            returned, self._returned = self._returned, []
        for run in returned:
            self._drop(run.claim)
        if returned:
            self._give_back(returned)

    def _drop(self, claim: RunClaim) -> None:
        """Hold ``claim`` no longer (its body never began here)."""
        with self._lock:
            current = self._running.get(claim.run_id)
            if current is not None and current.claim == claim:
                del self._running[claim.run_id]
                self._renew_by.pop(claim.run_id, None)

    def _give_back(self, runs: list[ClaimedRun]) -> None:
        try:
            execution.give_back(self._services, [run.claim for run in runs])
        except Unavailable as exc:
            # Their leases run out and the reaper takes them back (one attempt charged).
            log.warning("event=run_give_back_failed runs=%d error=%s", len(runs), exc)

    def _apply_flags(self, flags: Sequence[RunFlags]) -> None:
        for flag in flags:
            with self._lock:
                run = self._running.get(flag.id)
            if run is None:
                continue
            if flag.claim_token != run.claim_token:
                self._fence(run.claim, "claim_taken_over")
            elif flag.state != RunState.RUNNING.value:
                # Terminated, or finished elsewhere (timed out by the reaper): stop the body,
                # or drop it before it begins if it waits in the ready queue.
                if self._ready.pop(flag.id, None) is not None:
                    self._drop(run.claim)
                else:
                    self._pool.terminate(flag.id)
            elif flag.cancel_requested:
                self._pool.cancel(flag.id)

    def _fence(self, claim: RunClaim, reason: str) -> None:
        """Stop the body of ``claim`` at once and record nothing of it: the run is, or may
        soon be, another claim's (a later attempt here or on another worker)."""
        with self._lock:
            run = self._running.get(claim.run_id)
            if run is None or run.claim_token != claim.token:
                return
            body_running = claim.run_id in self._pool.running()
            self._running.pop(claim.run_id, None)
            self._renew_by.pop(claim.run_id, None)
            self._outcomes = [o for o in self._outcomes if o[0].claim != claim]
            self._starts = [s for s in self._starts if s[0] != claim]
            if body_running:
                self._fenced.add((claim.run_id, run.attempt))
        if body_running:
            log.warning(
                "event=run_body_fenced run=%s attempt=%d reason=%s", run.id, run.attempt, reason
            )
            self._pool.terminate(claim.run_id)

    def _watch_leases(self) -> None:
        """Stop bodies whose lease was not renewed in time, whatever the control loop does."""
        while not self._stop_watching.wait(_WATCHDOG_SECONDS):
            try:
                self._fence_overdue()
            except Exception:  # the self-fence must outlive any one failure (FT-2)
                log.exception("event=worker_watchdog_error worker=%s", self.id)

    def _fence_overdue(self) -> None:
        now = time.monotonic()
        with self._lock:
            overdue = [
                run.claim
                for run_id, run in self._running.items()
                if self._renew_by.get(run_id, now + 1) <= now
            ]
        running = self._pool.running()
        for claim in overdue:
            if claim.run_id in running:
                self._fence(claim, "lease_renewal_overdue")

    def _started(self, run_id: str) -> None:
        log.debug("event=run_body_started run=%s", run_id)
        with self._lock:
            run = self._running.get(run_id)
            if run is None:
                return
            began = time.monotonic()
            self._starts.append((run.claim, self._services.clock.now(), began))
            self._began[run_id] = began
        self._outcome_ready.set()

    def _finished(self, outcome: Outcome) -> None:
        """Called by the pool's monitor: hand the outcome to the recorder, never wait."""
        with self._lock:
            now = time.monotonic()
            began = self._began.pop(outcome.run_id, None)
            fenced = (outcome.run_id, outcome.attempt)
            if fenced in self._fenced:
                self._fenced.discard(fenced)
                return
            run = self._running.get(outcome.run_id)
            if run is None or run.attempt != outcome.attempt:
                return  # an earlier attempt's body, stopped when the run came back here
            self._outcomes.append((run, outcome))
            if began is not None:
                self._durations[run.claim] = now - began
            self._finishes.append(now)
        self._outcome_ready.set()

    def _record_loop(self) -> None:
        wait: float | None = None
        while True:
            self._outcome_ready.wait(wait)
            self._outcome_ready.clear()
            stopping = self._stop_recording.is_set()
            with self._lock:
                batch = list(self._outcomes)
                starts = list(self._starts)
            # A body's start goes with its outcome when both are here: one statement. The
            # start of a body still running is recorded on its own once it has run a while
            # (and before its outcome, so an ended run's started_at is never written
            # afterwards); all of them at stop.
            ended = {run.claim for run, _ in batch}
            began = {claim: at for claim, at, _ in starts if claim in ended}
            now = time.monotonic()
            running = [s for s in starts if s[0] not in ended]
            self._record_starts(
                [s for s in running if stopping or now - s[2] >= _START_ALONE_AFTER_SECONDS]
            )
            later = [s[2] for s in running if now - s[2] < _START_ALONE_AFTER_SECONDS]
            wait = None if stopping or not later else min(later) + _START_ALONE_AFTER_SECONDS - now
            if batch and not self._record(batch, began):
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

    def _record_starts(self, starts: list[tuple[RunClaim, datetime, float]]) -> None:
        """``started_at`` of bodies still running, in one transaction; kept while the
        store is down (a lost one only leaves ``started_at`` empty)."""
        if not starts:
            return
        try:
            execution.mark_started(self._services, [(claim, at) for claim, at, _ in starts])
        except Unavailable as exc:
            log.warning("event=run_starts_unrecorded runs=%d error=%s", len(starts), exc)
            return
        except Exception:
            log.exception("event=run_starts_refused runs=%d", len(starts))
        recorded = {id(start) for start in starts}  # by identity: a batch holds thousands
        with self._lock:
            self._starts = [s for s in self._starts if id(s) not in recorded]

    def _record(
        self, batch: list[tuple[ClaimedRun, Outcome]], began: dict[RunClaim, datetime]
    ) -> bool:
        """Record a batch in one transaction; False (all kept) when the store is down."""
        with self._lock:
            durations = [self._durations.get(run.claim) for run, _ in batch]
        finished = [
            execution.Finished(
                run, RunState(o.state), o.result, o.error, began.get(run.claim), duration
            )
            for (run, o), duration in zip(batch, durations, strict=True)
        ]
        try:
            recorded = execution.finish_runs(self._services, self.id, finished)
        except Unavailable as exc:
            log.warning("event=run_outcomes_unrecorded runs=%d error=%s", len(batch), exc)
            return False
        except Exception:
            if len(batch) > 1:  # find the outcome the store refuses; record the others
                return all([self._record([item], began) for item in batch])
            return self._record_refused(batch[0], finished[0])
        self._forget(batch)
        # A recorded outcome is logged once, as its event (``run.<state>``); one the store
        # did not take (the run was terminated or claimed again meanwhile) is said here.
        for (run, outcome), was_recorded in zip(batch, recorded, strict=True):
            if not was_recorded:
                log.info(
                    "event=run_outcome_not_recorded run=%s attempt=%d state=%s",
                    run.id,
                    run.attempt,
                    outcome.state,
                )
        self._doorbell.ring()
        return True

    def _record_refused(
        self, item: tuple[ClaimedRun, Outcome], finished: execution.Finished
    ) -> bool:
        """The store refused this outcome alone: once more (a transient error), then it
        is refused deterministically and the run ends ``result_not_storable`` (FT-3),
        so the body is never executed again for it."""
        run = item[0]
        try:
            execution.finish_runs(self._services, self.id, [finished])
        except Unavailable:
            return False
        except Exception as exc:
            log.error("event=run_outcome_refused run=%s error=%s", run.id, type(exc).__name__)
            try:
                execution.finish_runs(
                    self._services, self.id, [execution.not_storable(finished, exc)]
                )
            except Unavailable:
                return False
            except Exception:
                # Not even the short error is accepted: the lease runs out and the reaper
                # takes the run back (WF-4).
                log.exception("event=run_outcome_unrecordable run=%s", run.id)
        self._forget([item])
        self._doorbell.ring()
        return True

    def _forget(self, batch: list[tuple[ClaimedRun, Outcome]]) -> None:
        done = {run.claim for run, _ in batch}
        self._recorded.set()
        with self._lock:
            self._outcomes = [item for item in self._outcomes if item[0].claim not in done]
            self._starts = [s for s in self._starts if s[0] not in done]
            for claim in done:
                self._durations.pop(claim, None)
            for claim in done:
                current = self._running.get(claim.run_id)
                if current is not None and current.claim == claim:
                    del self._running[claim.run_id]
                    self._renew_by.pop(claim.run_id, None)
