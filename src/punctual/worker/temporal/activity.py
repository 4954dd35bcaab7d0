"""The activity side of the Temporal engine: run one attempt of a run's body.

Temporal hands a worker the activity of a ``punctual.run`` execution; ``RunExecutor``
turns it into a body running in one of the worker's child processes (the local engine's
``SlotPool``, so terminate and timeouts can kill a body outright, docs/decisions/0002):

0. a run of a version this worker does not serve (not loaded, or its code differs from
   the registered artifact, OP-3) is refused at once, before anything is read or recorded:
   the workflow asks again later, so the run waits for a worker that serves it;
1. read the run from the store by run id — its encrypted input lives only there; dispatch
   starts the execution *before* it records the run, so the record may lag by a moment
   and is waited for (bounded by the pending timeout, or given up as soon as the run's
   start ended without dispatching);
2. a run the store has already finished is not started again (a retried attempt after
   a worker died just after recording its outcome);
3. decrypt, record ``running`` with Temporal's attempt number (the attempt's
   ``claimed_at``), submit to a free slot; once the child process begins the body, record
   that attempt's ``started_at`` (before its outcome, so a quick body has both).
   Input this worker cannot read fails that run alone (FT-1): a ciphertext that fails
   authentication ends it ``failed`` (``input_undecryptable``) at once; a key id this
   worker does not hold fails the attempt retryably (``input_key_unknown``), so Temporal
   retries it with backoff, perhaps on a worker that holds the key, and the run fails
   with that code once the attempts are exhausted. An attempt older than one the store
   has recorded does not run the body;
4. supervise: heartbeat Temporal, which is how its cancellation (cooperative: the body
   sees ``ctx.cancel_requested``) and termination (the body is killed) arrive; and watch
   the run in the store, so a terminate recorded there kills the body even before
   Temporal's word arrives. Cancel is left to Temporal alone, so that a canceled body
   ends the Temporal execution ``CANCELED`` too;
5. record the outcome in the store (the fast path; the sync is the backstop) and answer
   Temporal with the result, or a typed ``ApplicationError`` the sync maps back. An
   outcome the store refuses (FT-3) ends the run ``failed`` with ``result_not_storable``
   in both, and is never a reason to run the body again (the failure is non-retryable).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from punctual.adapters.engines.temporal.ledger import RunLedger, unstorable_error
from punctual.adapters.engines.temporal.messages import (
    ACTIVITY_TYPE,
    FailureType,
    RunArgs,
    coded_error,
)
from punctual.adapters.engines.temporal.workflow import run_failure
from punctual.adapters.executor import Assignment, Outcome, SlotPool
from punctual.domain.runs import RunErrorCode, RunState, run_error
from punctual.errors import ConfigurationError, Unavailable
from punctual.ports.codec import InputKeyUnknown, InputUndecryptable
from punctual.ports.records import RunRecord
from punctual.ports.store import OutcomeRefused
from punctual.usecases.kernel.context import Services
from punctual.usecases.running.execution import run_ended

log = logging.getLogger("punctual.worker.temporal")

_SUPERVISE_SECONDS = 0.25
"""How often the supervisor wakes to heartbeat (the SDK throttles what it sends)."""
_STORE_FLAGS_SECONDS = 1.0
"""How often a running attempt re-reads its run's state in the store (terminated?)."""
_START_CHECK_SECONDS = 1.0
_ENDED_STARTS = frozenset({"canceled", "failed", "skipped", "buffered", "scheduled"})
"""Start states in which this execution's dispatch is over without a run record: ended, or
back to scheduled (released, rescheduled, retried). The next dispatch of such a start
replaces this execution, so waiting on would only keep a ghost alive."""
_FAILURE_OF_STATE = {
    "failed": FailureType.FAILED,
    "canceled": FailureType.CANCELED,
    "timed_out": FailureType.TIMED_OUT,
    "terminated": FailureType.TERMINATED,
}
_ERROR_OF_STATE = {
    "failed": RunErrorCode.WORKFLOW_ERROR,
    "canceled": RunErrorCode.CANCELED,
    "timed_out": RunErrorCode.TIMED_OUT,
    "terminated": RunErrorCode.TERMINATED,
}


def _benign_failure(failure_type: str, message: str, details: dict[str, Any]) -> ApplicationError:
    """A non-retryable failure of the activity that is no fault of this worker (a run's
    recorded outcome, a refusal): BENIGN, so the SDK logs it at DEBUG instead of a WARNING
    with a traceback per failed run."""
    return ApplicationError(
        message,
        details,
        type=failure_type,
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,
    )


def coded_outcome_error(state: str, error: dict[str, Any] | None) -> dict[str, Any] | None:
    """A body's outcome error in the stored shape, whatever shape the executor gave it."""
    if state == RunState.COMPLETED.value:
        return None
    code = _ERROR_OF_STATE.get(state, RunErrorCode.WORKFLOW_ERROR)
    return coded_error(code.value, error or {})


class RunExecutor:
    """One per worker process; shared by the Temporal workers of all its task queues."""

    def __init__(self, services: Services, app_ref: str, slots: int, ledger: RunLedger) -> None:
        self._services = services
        self._ledger = ledger
        self._served: frozenset[tuple[str, str]] = frozenset()
        """The (workflow, version) whose runs this worker takes: set from its registration
        (``serve``); until then it takes none."""
        self._worker_id = ""
        self._pool = SlotPool(app_ref, slots, on_started=self._on_started, on_finished=self._done)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[str, asyncio.Future[Outcome]] = {}
        self._attempts: dict[str, int] = {}
        """The attempt of each run that this worker currently executes."""
        self._start_writes: dict[str, asyncio.Task[None]] = {}
        """Per run, the write of its current attempt's ``started_at`` (awaited before the
        outcome is recorded, so the outcome never lands first)."""
        self._began: dict[str, float] = {}
        """Per run whose body runs here, the monotonic time it began (the pool's monitor
        thread writes it): its duration goes with its outcome."""

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Spawn the slot processes (blocking: each imports the app)."""
        self._loop = loop
        self._pool.start()

    def close(self, grace_seconds: float) -> None:
        self._pool.close(grace_seconds)

    def serve(self, worker_id: str, versions: Iterable[tuple[str, str]]) -> None:
        """Take runs of ``versions`` only: those whose code is the registered code (OP-3)."""
        self._worker_id = worker_id
        self._served = frozenset(versions)

    # ---- the activity ----------------------------------------------------------------

    @activity.defn(name=ACTIVITY_TYPE)
    async def execute(self, args: RunArgs) -> Any:
        if (args.workflow, args.version) not in self._served:
            self._not_served(args)
        attempt = args.attempts_before + activity.info().attempt
        record = await self._wait_for_record(args)
        if not record.active:
            return self._already_ended(record)
        payload = await self._decrypt(record, attempt, args.max_attempts)
        if not await self._mark_running(record, attempt):
            ended = await asyncio.to_thread(self._ledger.load, record.id)
            current_record = ended or record
            if current_record.active:
                self._superseded(record.id, attempt, current_record.attempts)
            # Ended in the store since we read it (canceled while still pending).
            return self._already_ended(current_record)
        self._attempts[record.id] = attempt  # an older attempt still here no longer records
        start_write: asyncio.Task[None] | None = None
        try:
            outcome, canceled_by_temporal = await self._run_body(record, attempt, payload)
        finally:
            began = self._began.pop(record.id, None)
            duration = None if began is None else time.monotonic() - began
            current = self._attempts.get(record.id) == attempt
            if current:
                del self._attempts[record.id]
                start_write = self._start_writes.pop(record.id, None)
        if start_write is not None:
            await start_write
        error = coded_outcome_error(outcome.state, outcome.error)
        if current:
            state = RunState(outcome.state)
            if not await self._record(record, attempt, state, outcome.result, error, duration):
                self._unstorable(record.id)
        return self._answer(outcome.state, outcome.result, error, canceled_by_temporal)

    # ---- steps -----------------------------------------------------------------------

    async def _decrypt(self, record: RunRecord, attempt: int, max_attempts: int) -> Any:
        """The clear input, or this run's failure alone (FT-1); never a worker-wide one."""
        codec = self._services.codec
        key_id = record.input.key_id
        try:
            if key_id not in codec.key_ids():
                raise InputKeyUnknown(f"codec key {key_id!r} is not in the key ring")
            return await asyncio.to_thread(codec.decrypt, record.input, record.tenant)
        except InputUndecryptable:
            pass  # below: failed authentication
        except ConfigurationError:  # InputKeyUnknown: the key is not in this ring
            await self._key_unknown(record, attempt, max_attempts)
        except Exception:
            pass  # below: what it sealed is not readable input either
        # No key and no retry can read it: this run fails, alone and for good.
        message = (
            f"the input of run {record.id} cannot be decrypted with key {key_id!r}: it "
            "failed authentication (damaged, or not encrypted for this tenant)"
        )
        error = run_error(RunErrorCode.INPUT_UNDECRYPTABLE, message, key_id=key_id)
        await self._record(record, attempt, RunState.FAILED, None, error)
        log.warning("event=run_input_undecryptable run=%s key=%s", record.id, key_id)
        raise ApplicationError(message, error, type=FailureType.FAILED, non_retryable=True)

    async def _key_unknown(self, record: RunRecord, attempt: int, max_attempts: int) -> None:
        """Retryable: another worker (or this one after a key ring reload) may hold the key;
        Temporal retries with backoff, and the last attempt fails the run."""
        key_id = record.input.key_id
        message = (
            f"this worker does not hold codec key {key_id!r} of run {record.id}'s input; add "
            "the key to every worker's key ring"
        )
        error = run_error(RunErrorCode.INPUT_KEY_UNKNOWN, message, key_id=key_id)
        last = attempt >= max_attempts
        if last:
            await self._record(record, attempt, RunState.FAILED, None, error)
        log.warning(
            "event=run_input_key_unknown run=%s key=%s attempt=%d last=%s",
            record.id,
            key_id,
            attempt,
            last,
        )
        raise ApplicationError(
            message, error, type=FailureType.INPUT_KEY_UNKNOWN, non_retryable=last
        ) from None

    def _not_served(self, args: RunArgs) -> None:
        """Refuse a run of a version this worker does not serve, charging nothing: the
        workflow schedules it again after a wait, for a worker that serves it (OP-3)."""
        message = (
            f"worker {self._worker_id} does not serve {args.workflow} version {args.version} "
            "(not loaded, or its code differs from the registered artifact); the run waits "
            "for a worker that serves it"
        )
        log.info(
            "event=run_not_served run=%s workflow=%s version=%s",
            args.run_id,
            args.workflow,
            args.version,
        )
        raise _benign_failure(
            FailureType.NOT_SERVED,
            message,
            {"attempt": activity.info().attempt, "worker": self._worker_id},
        )

    @staticmethod
    def _superseded(run_id: str, attempt: int, recorded: int) -> None:
        """A later attempt of this run was recorded: Temporal gave up on this one."""
        raise ApplicationError(
            f"attempt {attempt} of run {run_id} was superseded by attempt {recorded}; its "
            "body is not run",
            type=FailureType.WORKER_SHUTDOWN,
        )

    @staticmethod
    def _unstorable(run_id: str) -> None:
        """The store refused the outcome: the run ends ``failed`` in Temporal too, for good."""
        error = unstorable_error(run_id)
        raise _benign_failure(FailureType.FAILED, error["message"], error)

    async def _mark_running(self, record: RunRecord, attempt: int) -> bool:
        """Running from here on, like a local worker's claim: a cancel now reaches the body
        cooperatively instead of ending a "pending" run on the spot. False if it ended."""
        try:
            return await asyncio.to_thread(
                self._ledger.mark_running, record.id, attempt, self._now()
            )
        except Unavailable as exc:
            log.warning("event=run_store_write_failed run=%s error=%s", record.id, exc)
            return True  # run anyway; the sync records "running" from Temporal later

    async def _run_body(
        self, record: RunRecord, attempt: int, payload: Any
    ) -> tuple[Outcome, bool]:
        await self._free_slot(record.id)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._waiting[record.id] = future
        try:
            self._pool.submit(Assignment.of_run(record, attempt, payload))
        except RuntimeError as exc:  # the pool is closing: this worker is stopping
            self._waiting.pop(record.id, None)
            raise ApplicationError(
                f"worker stopping: {exc}", type=FailureType.WORKER_SHUTDOWN
            ) from None
        if record.cancel_requested:
            self._pool.cancel(record.id)
        return await self._supervise(record.id, future)

    async def _wait_for_record(self, args: RunArgs) -> RunRecord:
        """The run as recorded by dispatch, which commits just after starting us."""
        deadline = args.ordered_at + args.pending_timeout_seconds
        delay = 0.01
        next_start_check = time.monotonic() + _START_CHECK_SECONDS
        while True:
            try:
                record = await asyncio.to_thread(self._ledger.load, args.run_id)
                if record is not None:
                    return record
                if time.time() > deadline:
                    self._not_recorded(args, "within the pending timeout")
                if time.monotonic() >= next_start_check:
                    next_start_check = time.monotonic() + _START_CHECK_SECONDS
                    start_state = await asyncio.to_thread(self._ledger.start_state, args.run_id)
                    if start_state in _ENDED_STARTS:
                        self._not_recorded(args, f"and its start is {start_state}")
            except Unavailable as exc:  # the store is down: keep waiting (heartbeating)
                log.warning("event=run_record_unreadable run=%s error=%s", args.run_id, exc)
            activity.heartbeat()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    @staticmethod
    def _not_recorded(args: RunArgs, why: str) -> None:
        raise run_failure(
            FailureType.NOT_RECORDED,
            RunErrorCode.ENGINE_EXECUTION_LOST,
            f"run {args.run_id} was started in Temporal but never recorded {why}",
        )

    @staticmethod
    def _already_ended(record: RunRecord) -> Any:
        """The answer for a run the store finished before this attempt ran its body: the
        recorded outcome, typed like the body's own so the sync reads the same state."""
        if record.state is RunState.COMPLETED:
            return record.result
        message = f"run {record.id} had already ended {record.state.value}; not run again"
        code = _ERROR_OF_STATE.get(record.state.value, RunErrorCode.WORKFLOW_ERROR)
        raise _benign_failure(
            _FAILURE_OF_STATE.get(record.state.value, FailureType.FAILED),
            message,
            coded_error(code.value, record.error or {}, message),
        )

    async def _free_slot(self, run_id: str) -> None:
        """Wait (heartbeating) for a slot; stop an older attempt of this run still here."""
        while True:
            if run_id in self._waiting or run_id in self._pool.running():
                # Temporal gave up on that attempt (its heartbeat timed out) and retried.
                self._pool.terminate(run_id)
            elif self._pool.free_slots() > 0:
                return
            activity.heartbeat()
            await asyncio.sleep(0.05)

    async def _supervise(
        self, run_id: str, future: asyncio.Future[Outcome]
    ) -> tuple[Outcome, bool]:
        """Wait for the body's outcome; relay cancel (cooperative) and terminate (kill)."""
        loop = asyncio.get_running_loop()
        canceled_by_temporal = False
        next_flags = loop.time() + _STORE_FLAGS_SECONDS
        while True:
            try:
                if future.done():
                    return future.result(), canceled_by_temporal
                await asyncio.wait({future}, timeout=_SUPERVISE_SECONDS)
                if future.done():
                    continue
                activity.heartbeat()
                if loop.time() >= next_flags:
                    next_flags = loop.time() + _STORE_FLAGS_SECONDS
                    await self._apply_store_flags(run_id)
            except asyncio.CancelledError:
                details = activity.cancellation_details()
                if details is not None and details.cancel_requested:
                    # WF-5: cooperative. The body sees ctx.cancel_requested and decides.
                    canceled_by_temporal = True
                    self._pool.cancel(run_id)
                    task = asyncio.current_task()
                    if task is not None:
                        task.uncancel()
                    continue
                # Terminated or closed in Temporal (not found), the attempt timed out, or
                # the worker is stopping: the body must not run on unsupervised.
                self._waiting.pop(run_id, None)
                self._pool.terminate(run_id)
                if details is not None and details.worker_shutdown:
                    raise ApplicationError(
                        "the worker stopped while the body ran; retried as a new attempt",
                        type=FailureType.WORKER_SHUTDOWN,
                    ) from None
                raise

    async def _apply_store_flags(self, run_id: str) -> None:
        try:
            flags = await asyncio.to_thread(self._ledger.flags, run_id)
        except Unavailable:
            return
        if flags is None:
            return
        state, _ = flags
        if state not in (RunState.PENDING, RunState.RUNNING, RunState.CANCELED):
            # Terminated in the store (or ended by another attempt): stop the body now.
            # A cancel stays cooperative: it reaches the body through Temporal.
            self._pool.terminate(run_id)

    @staticmethod
    def _answer(
        state: str, result: Any, error: dict[str, Any] | None, canceled_by_temporal: bool
    ) -> Any:
        if state == "completed":
            return result
        error = error or {}
        if state == "canceled" and canceled_by_temporal:
            raise asyncio.CancelledError(error.get("message", "canceled"))
        message = str(error.get("message") or state)
        if "type" in error:
            message = f"{error['type']}: {message}"
        raise _benign_failure(_FAILURE_OF_STATE[state], message, error)

    async def _record(
        self,
        record: RunRecord,
        attempt: int,
        state: RunState,
        result: Any,
        error: dict[str, Any] | None,
        duration_seconds: float | None = None,
    ) -> bool:
        """Record the outcome (best effort); False when the store refused it, in which case
        the run is recorded ``failed`` with ``result_not_storable`` instead (FT-3). A
        recorded end is logged once, as its event (``run.<state>``); one the store did not
        take (ended or recorded meanwhile, or the store is down: the sync records it from
        Temporal) is said at DEBUG."""
        now = self._now()
        try:
            recorded = await self._store(
                self._ledger.finish, record.id, state, attempt, result, error, now
            )
        except OutcomeRefused as exc:
            log.warning("event=run_result_not_storable run=%s attempt=%d", record.id, attempt)
            log.debug("the store refused the outcome of run %s", record.id, exc_info=exc)
            state = RunState.FAILED
            recorded = await self._store(self._ledger.fail_unstorable, record.id, attempt, now)
            refused = True
        else:
            refused = False
        if recorded:
            self._services.events.emit(
                run_ended(
                    record.tenant, record.id, state, attempt, record.workflow, duration_seconds
                )
            )
        else:
            log.debug(
                "event=run_outcome_not_recorded run=%s attempt=%d state=%s",
                record.id,
                attempt,
                state.value,
            )
        return not refused

    async def _store(self, call: Callable[..., Any], *args: Any) -> bool:
        """A best-effort store write: the sync records from Temporal what this one missed."""
        try:
            return bool(await asyncio.to_thread(call, *args))
        except Unavailable as exc:
            log.warning("event=run_store_write_failed error=%s", exc)
            return False

    def _now(self) -> datetime:
        return self._services.clock.now()

    # ---- slot pool callbacks (its monitor thread) --------------------------------------

    def _on_started(self, run_id: str) -> None:
        log.debug("event=run_body_started run=%s", run_id)
        self._began[run_id] = time.monotonic()
        now = self._now()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            # Queued before this body's outcome (``_done``), which the pool reports later.
            loop.call_soon_threadsafe(self._body_began, run_id, now)

    def _body_began(self, run_id: str, at: datetime) -> None:
        attempt = self._attempts.get(run_id)
        if attempt is None:  # no attempt of this run is current here any more
            return
        self._start_writes[run_id] = asyncio.get_running_loop().create_task(
            self._note_started(run_id, attempt, at)
        )

    async def _note_started(self, run_id: str, attempt: int, at: datetime) -> None:
        """Best effort, like every write of this worker: a miss leaves ``started_at`` empty."""
        try:
            await asyncio.to_thread(self._ledger.mark_started, run_id, attempt, at)
        except Exception as exc:
            log.warning(
                "event=run_store_write_failed run=%s attempt=%d what=started_at error_type=%s",
                run_id,
                attempt,
                type(exc).__name__,
            )

    def _done(self, outcome: Outcome) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._resolve, outcome)

    def _resolve(self, outcome: Outcome) -> None:
        future = self._waiting.pop(outcome.run_id, None)
        if future is not None and not future.done():
            future.set_result(outcome)
