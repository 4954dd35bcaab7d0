"""The slot process: it imports the app once, then runs the bodies it is sent, one at a
time, and reports each body's start and outcome to the pool over its pipe."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import sys
import threading
import time
import traceback
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from punctual.adapters.executor.slot import BEGUN, EPOCH, Assignment, OutcomeState, SharedSlot
from punctual.domain.runs import RunErrorCode, run_error
from punctual.workflows import App, Canceled, InputRejected, RunContext, load_app

_MAX_TRACEBACK_CHARS = 16_000
_MAX_MESSAGE_CHARS = 4_000


def child_main(conn: Connection, app_ref: str, shared: SharedSlot) -> None:
    """Entry point of a slot process: import the app once, then serve assignments."""
    # Ctrl-C on the worker is the parent's to handle (it decides how to shut down), and
    # a process group of our own lets the parent kill whatever the body spawned, too.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    try:
        app = load_app(app_ref)
    except BaseException as exc:
        with contextlib.suppress(OSError, ValueError):
            conn.send(("load_failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", os.getpid()))
    _ChildServer(conn, app, app_ref, shared).serve()


def _exit_now() -> None:
    """The parent is gone: stop at once so an orphaned body cannot run on unsupervised."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _past_start_deadline(assignment: Assignment) -> dict[str, Any] | None:
    """RS-10: the error of a run whose occurrence's start deadline passed before its body
    could begin (on either engine, this is where bodies begin); None while in time."""
    deadline = assignment.origin.get("start_deadline_at")
    if deadline is None:
        return None
    if time.time() <= datetime.fromisoformat(str(deadline).replace("Z", "+00:00")).timestamp():
        return None
    return run_error(
        RunErrorCode.TOO_LATE,
        f"its occurrence's start deadline {deadline} passed before the body could begin; "
        "it never began (the schedule's start_deadline_ms)",
    )


class _ChildServer:
    """Runs bodies on the child's main thread, one at a time in the order sent; a
    listener thread reads the pipe.

    Before it begins a body the child takes the slot's transition lock, checks that the
    assignment's epoch is still the slot's (the parent bumps the epoch to take back every
    assignment not begun yet) and writes the assignment's sequence number as the last one
    begun. The parent reads that number under the same lock, so it always knows exactly
    which bodies began: the rest can be taken back or killed around without loss.
    """

    def __init__(self, conn: Connection, app: App, app_ref: str, shared: SharedSlot) -> None:
        self._conn = conn
        self._app = app
        self._app_ref = app_ref
        self._shared = shared
        self._jobs: queue.SimpleQueue[tuple[int, int, float, Assignment] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._cancels: dict[str, threading.Event] = {}
        self._outbox: list[tuple[Any, ...]] = []
        """Events not sent yet: a body's outcome waits here only until the next body is
        about to begin (or the queue is empty), so it is always on the pipe before another
        body can crash this process."""

    def serve(self) -> None:
        listener = threading.Thread(target=self._listen, name="punctual-slot-listener")
        listener.daemon = True
        listener.start()
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                self._flush()
                job = self._jobs.get()
            if job is None:
                self._flush()
                return
            seq, epoch, begin_by, assignment = job
            with self._lock:
                cancel_event = self._cancels.get(assignment.run_id) or threading.Event()
            try:
                # The previous body's outcome goes out before this one may begin: once the
                # parent reads this body as begun, everything before it is on the pipe.
                self._flush()
                if self._begin(seq, epoch, begin_by):
                    self._run(assignment, cancel_event)
            finally:
                with self._lock:
                    if self._cancels.get(assignment.run_id) is cancel_event:
                        del self._cancels[assignment.run_id]

    def _begin(self, seq: int, epoch: int, begin_by: float) -> bool:
        """Claim the right to begin this body, or learn it was (or is due to be) taken
        back: ``begin_by`` is the parent's ``time.monotonic()`` deadline for a queued one
        (the clock is the machine's, shared by both processes)."""
        with self._shared.lock:
            if self._shared.state[EPOCH] != epoch or time.monotonic() >= begin_by:
                return False
            self._shared.state[BEGUN] = seq
        return True

    def _flush(self) -> None:
        if not self._outbox:
            return
        events, self._outbox = self._outbox, []
        self._conn.send(("events", events))

    def _listen(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                _exit_now()
                return
            kind = message[0]
            if kind == "run":
                for seq, epoch, begin_by, assignment in message[1]:
                    with self._lock:
                        self._cancels[assignment.run_id] = threading.Event()
                    self._jobs.put((seq, epoch, begin_by, assignment))
            elif kind == "cancel":
                with self._lock:
                    event = self._cancels.get(message[1])
                if event is not None:
                    event.set()
            elif kind == "stop":
                self._jobs.put(None)
                return

    def _run(self, assignment: Assignment, cancel_event: threading.Event) -> None:
        run_id = assignment.run_id
        late = _past_start_deadline(assignment)
        if late is not None:
            self._outbox.append(("finished", run_id, "canceled", None, late))
            return
        definition = self._app.get(assignment.workflow, assignment.version)
        if definition is None:
            error = run_error(
                RunErrorCode.WORKFLOW_ERROR,
                f"workflow {assignment.workflow!r} version {assignment.version!r} is not "
                f"registered in app {self._app_ref!r} as loaded by this worker; deploy a "
                "worker that has it, or pin the run to a loaded version",
                type="WorkflowNotLoaded",
                traceback="",
            )
            self._outbox.append(("finished", run_id, "failed", None, error))
            return
        ctx = RunContext(
            run_id,
            assignment.attempt,
            assignment.origin,
            cancel_event,
            traceparent=assignment.traceparent,
        )
        self._outbox.append(("started", run_id, time.time(), time.monotonic()))
        self._flush()
        state: OutcomeState
        result_json: str | None = None
        error_info: dict[str, Any] | None = None
        try:
            result = definition.invoke(assignment.payload, ctx)
        except Canceled as exc:
            state = "canceled"
            error_info = run_error(
                RunErrorCode.CANCELED, _cap(str(exc), _MAX_MESSAGE_CHARS) or "canceled"
            )
        except InputRejected as exc:  # refused before the body began; quotes no input
            state = "failed"
            error_info = run_error(RunErrorCode.INPUT_REJECTED, _cap(str(exc), _MAX_MESSAGE_CHARS))
        except BaseException as exc:  # SystemExit too: a body must not end the slot
            state = "failed"
            error_info = run_error(
                RunErrorCode.WORKFLOW_ERROR,
                _cap(_safe_str(exc), _MAX_MESSAGE_CHARS),
                type=type(exc).__name__,
                traceback=_cap(traceback.format_exc(), _MAX_TRACEBACK_CHARS),
            )
        else:
            try:
                result_json = json.dumps(result, allow_nan=False)
                state = "completed"
            except (TypeError, ValueError, RecursionError) as exc:
                state = "failed"
                error_info = run_error(
                    RunErrorCode.WORKFLOW_ERROR,
                    f"workflow {assignment.workflow!r} version {assignment.version!r} "
                    f"returned a result that is not JSON-serializable "
                    f"({type(result).__name__}): {exc}; return JSON-ready data "
                    "(dict, list, str, int, float, bool, None) or a pydantic model",
                    type="ResultNotSerializable",
                    traceback="",
                )
        self._outbox.append(("finished", run_id, state, result_json, error_info))


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return "...(truncated)...\n" + text[-limit:]
