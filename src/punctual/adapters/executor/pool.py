"""The parent side of the executor: ``SlotPool`` keeps one warm slot process per slot,
hands it assignments, reads what began and what ended, enforces execution timeouts,
kills for terminate and respawns what died.

One monitor thread waits on every child's pipe and exit sentinel and invokes the
callbacks. Callbacks run on that thread, never while the pool's lock is held, so they may
call back into the pool. ``on_finished`` is called exactly once per submitted assignment
(until ``close``); ``on_started`` is called at most once, only when the body actually began.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import math
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Literal

from punctual.adapters.executor.child import child_main
from punctual.adapters.executor.slot import (
    BEGUN,
    EPOCH,
    Assignment,
    Outcome,
    SharedSlot,
)
from punctual.domain.runs import RunErrorCode, run_error
from punctual.errors import ConfigurationError

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_SECONDS = 60.0
"""How long ``start()`` waits for every child to import the app, at least."""
STARTUP_SECONDS_PER_SLOT = 3.0
"""... and per slot beyond that: children import concurrently, so on a busy machine with
few cores a pool of 32 slots has been seen to need 48 s."""

_MAX_RESPAWN_BACKOFF_SECONDS = 30.0
_TERMINATED_REASON = "terminated on request: the process running the body was killed"
_TERMINATED_UNBEGUN_REASON = "terminated on request before its body began"

REQUEUE_AFTER_SECONDS = 0.2
"""An assignment queued behind another body that has not begun this long after it was
sent is taken back (``on_returned``): a slow body never holds runs queued behind it. The
child keeps the same bound itself, so a pool that was frozen (SIGSTOP, a paused VM) past
it cannot be outrun on thaw by its child beginning what the pool was about to take back,
and whose claim has meanwhile gone to another worker."""
BUSY_AFTER_SECONDS = 0.02
"""A slot whose body has run this long takes no more queued assignments."""
_TRANSITION_LOCK_TIMEOUT_SECONDS = 1.0
"""A child holds its transition lock for a few instructions; one that holds it this long
is stopped or dead, and is killed."""


@dataclass(eq=False)
class _Active:
    assignment: Assignment
    seq: int  # the child's sequence number of this assignment
    epoch: int  # the child's epoch when it was sent
    sent_at: float  # time.monotonic()
    deadline: float = math.inf  # its body's start + the execution timeout, once begun
    sent: bool = False  # the "run" message went out, so a "cancel" can follow it
    cancel_requested: bool = False
    started: bool = False  # the child said its body began
    began_at: float = math.inf  # time.monotonic() in the child when it began


@dataclass(eq=False)
class _Child:
    process: BaseProcess
    conn: Connection
    pid: int
    sentinel: int
    shared: SharedSlot
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    ready: bool = False  # app imported, accepting assignments
    dying: bool = False  # killed by the pool; its last run's words are ignored
    exited: bool = False  # reaped: its pid may belong to someone else now
    conn_open: bool = True
    active: dict[str, _Active] = field(default_factory=dict)
    """Its assignments without an outcome yet, in the order sent (and run)."""
    next_seq: int = 1
    epoch: int = 0


@dataclass(eq=False)
class _Slot:
    index: int
    child: _Child | None = None
    respawn_at: float | None = None
    failures: int = 0  # consecutive children that died before becoming ready


_Event = (
    tuple[Literal["started"], str, float]
    | tuple[Literal["finished"], Outcome]
    | tuple[Literal["returned"], Assignment]
)
_Fate = Literal["unbegun", "killed", "finished"]


class SlotPool:
    """``slots`` warm child processes; each runs its assignments one at a time.

    With ``queue_depth`` above 1, a slot's child also holds up to that many assignments
    queued behind the body it runs, so that it goes from one short body to the next
    without waiting for the parent. Queued assignments never suffer from another run's
    end: terminating or timing out a body kills only its child, after the assignments
    behind it were taken back under the child's transition lock, and those (like any
    assignment that waits too long behind a slow body) are handed to ``on_returned``
    without ever having begun. ``on_finished`` is called exactly once per submitted
    assignment that is not returned (until ``close``).

    Thread-safe: ``submit``, ``cancel``, ``terminate`` and the queries may be called from
    any thread, including from inside the callbacks.
    """

    def __init__(
        self,
        app_ref: str,
        slots: int,
        on_started: Callable[[str], None],
        on_finished: Callable[[Outcome], None],
        *,
        queue_depth: int = 1,
        on_returned: Callable[[list[Assignment]], None] | None = None,
        on_began: Callable[[str, float], None] | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError(f"a slot pool needs at least one slot, not {slots}")
        if queue_depth < 1:
            raise ValueError(f"queue_depth must be at least 1, not {queue_depth}")
        if queue_depth > 1 and on_returned is None:
            raise ValueError("a queue_depth above 1 needs on_returned for runs taken back")
        self._app_ref = app_ref
        self._on_started = on_started
        self._on_began = on_began
        self._on_finished = on_finished
        self._on_returned = on_returned
        self._depth = queue_depth
        self._ctx = multiprocessing.get_context("forkserver")
        # The fork server forks every slot process, so whatever it has imported a child
        # does not import again. Only effective before the server first starts.
        self._ctx.set_forkserver_preload(_preload())
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._slots = [_Slot(index) for index in range(slots)]
        self._runs: dict[str, _Child] = {}
        self._pending: list[_Event] = []  # outcomes decided outside the monitor thread
        self._started = False
        self._start_complete = False
        self._load_error: str | None = None
        self._closed = False
        self._stopping = False
        self._monitor_thread: threading.Thread | None = None
        self._wake_r = -1
        self._wake_w = -1

    # ---- public API ------------------------------------------------------------------

    def start(self) -> None:
        """Spawn every slot's child and wait until each has imported the app."""
        with self._lock:
            if self._started:
                raise RuntimeError("this slot pool was already started")
            self._started = True
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        try:
            for slot in self._slots:
                slot.child = self._spawn(slot.index)
        except BaseException:
            self.close(grace_seconds=0)
            raise
        self._monitor_thread = threading.Thread(
            target=self._monitor, name="punctual-slot-monitor", daemon=True
        )
        self._monitor_thread.start()
        with self._changed:
            ok = self._changed.wait_for(
                lambda: (
                    self._load_error is not None
                    or all(s.child is not None and s.child.ready for s in self._slots)
                ),
                timeout=self._startup_timeout(),
            )
            error = self._load_error
            self._start_complete = True
        if not ok or error is not None:
            self.close(grace_seconds=0)
            detail = error or f"not ready after {self._startup_timeout():g} s"
            raise ConfigurationError(
                f"worker slots could not load app {self._app_ref!r}: {detail}; check the "
                "app reference ('module:attr') and that its module imports cleanly"
            )
        atexit.register(self._close_at_exit)

    def _startup_timeout(self) -> float:
        return max(STARTUP_TIMEOUT_SECONDS, STARTUP_SECONDS_PER_SLOT * len(self._slots))

    @property
    def capacity(self) -> int:
        """Assignments the pool holds at most: slots x queue depth."""
        return len(self._slots) * self._depth

    def free_slots(self) -> int:
        """Slots with nothing assigned."""
        with self._lock:
            return self._free_count()

    def free_capacity(self) -> int:
        """Assignments ``submit`` takes now: a whole queue per idle slot, and the rest of
        the queue of a slot whose body began less than ``BUSY_AFTER_SECONDS`` ago."""
        with self._lock:
            if self._closed:
                return 0
            now = time.monotonic()
            return sum(self._room(s.child, now) for s in self._slots if s.child is not None)

    def wait_for_free_slot(self, timeout: float | None = None) -> bool:
        """Block until a slot is free (``True``) or ``timeout`` passes / the pool closes."""
        with self._changed:
            self._changed.wait_for(lambda: self._closed or self._free_count() > 0, timeout)
            return not self._closed and self._free_count() > 0

    def wait_for_capacity(self, minimum: int, timeout: float | None = None) -> bool:
        """Block until ``free_capacity()`` is at least ``minimum`` or a slot is idle."""

        def enough() -> bool:
            if self._closed or self._free_count() > 0:
                return True
            now = time.monotonic()
            room = sum(self._room(s.child, now) for s in self._slots if s.child is not None)
            return room >= minimum

        with self._changed:
            self._changed.wait_for(enough, timeout)
            return not self._closed and enough()

    def submit(self, assignment: Assignment) -> None:
        """Hand ``assignment`` to a slot with room; ``RuntimeError`` if there is none."""
        timeout = assignment.timeout_seconds
        if math.isnan(timeout) or timeout <= 0:
            raise ValueError(f"timeout_seconds must be positive, not {timeout!r}")
        with self._lock:
            if not self._started or self._closed:
                raise RuntimeError("the slot pool is not running (start() it; not closed)")
            if assignment.run_id in self._runs:
                raise ValueError(f"run {assignment.run_id} is already running in this pool")
            child = self._placement()
            if child is None:
                raise RuntimeError("no free slot: wait for one (free_slots()) before submit")
            queued = bool(child.active)  # behind another body: taken back if not begun soon
            active = _Active(assignment, child.next_seq, child.epoch, time.monotonic())
            begin_by = active.sent_at + REQUEUE_AFTER_SECONDS if queued else math.inf
            child.next_seq += 1
            child.active[assignment.run_id] = active
            self._runs[assignment.run_id] = child
        try:
            message = ("run", [(active.seq, active.epoch, begin_by, assignment)])
            data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:
            # A payload that cannot travel fails here, and its place is given up again
            # (the child skips the sequence number it never received).
            with self._lock:
                self._finalize(child, active)
            raise
        self._send_bytes(child, data)
        with self._lock:
            active.sent = True
            follow_with_cancel = (
                active.cancel_requested and child.active.get(assignment.run_id) is active
            )
        if follow_with_cancel:
            self._send(child, ("cancel", assignment.run_id))
        self._wake()  # the monitor's next deadline may now be this one

    def cancel(self, run_id: str) -> None:
        """Ask the body to stop (``RunContext.cancel_requested``); no-op if not running."""
        with self._lock:
            child = self._runs.get(run_id)
            active = child.active.get(run_id) if child is not None else None
            if child is None or active is None:
                return
            active.cancel_requested = True
            if not active.sent:
                return  # submit() sends the cancel right after the assignment
        self._send(child, ("cancel", run_id))

    def terminate(self, run_id: str) -> None:
        """Stop ``run_id`` now and report it ``terminated`` (once): kill the process if
        its body is running; if it has not begun, take it back so it never does."""
        with self._lock:
            child = self._runs.get(run_id)
            active = child.active.get(run_id) if child is not None else None
            if child is None or active is None:
                return
            fate, taken = self._seize(child, active)
            self._finalize(child, active)
            reason = _TERMINATED_UNBEGUN_REASON if fate == "unbegun" else _TERMINATED_REASON
            error = run_error(RunErrorCode.TERMINATED, reason)
            outcome = Outcome(run_id, "terminated", None, error, active.assignment.attempt)
            self._pending.append(("finished", outcome))
            self._pending.extend(("returned", a.assignment) for a in taken)
        self._wake()

    def running(self) -> set[str]:
        """Runs the pool holds: their body runs, or they wait in a slot's queue."""
        with self._lock:
            return set(self._runs)

    def close(self, grace_seconds: float = 5.0) -> None:
        """Stop the pool.

        With a queue depth above 1, assignments whose body has not begun are taken back
        first (``on_returned``). Runs that finish within ``grace_seconds`` are reported as
        usual; the rest are killed without an outcome (their leases expire and they are
        retried elsewhere). No callback is invoked after ``close`` returns.
        """
        deadline = time.monotonic() + max(0.0, grace_seconds)
        in_monitor = threading.current_thread() is self._monitor_thread
        returned: list[Assignment] = []
        with self._changed:
            if self._closed:
                return
            self._closed = True
            self._changed.notify_all()
            for slot in self._slots if self._depth > 1 else ():
                child = slot.child
                if child is not None and child.ready and not child.dying and child.active:
                    _, taken = self._seize(child, None)
                    returned += [a.assignment for a in taken]
            if not in_monitor and self._monitor_thread is not None:
                self._changed.wait_for(lambda: not self._runs, max(0.0, grace_seconds))
            self._stopping = True
            dropped = sorted(self._runs)
            self._runs.clear()
            children: list[_Child] = []
            for slot in self._slots:
                if slot.child is not None:
                    if slot.child.active:
                        slot.child.active.clear()
                        self._kill(slot.child)  # its run is left to lease expiry
                    children.append(slot.child)
                    slot.child = None
        if dropped:
            logger.warning(
                "closing the slot pool killed %d unfinished run(s); they will be retried: %s",
                len(dropped),
                ", ".join(dropped),
            )
        self._wake()
        if self._monitor_thread is not None and not in_monitor:
            self._monitor_thread.join(timeout=30)
        if returned and self._on_returned is not None:
            try:
                self._on_returned(returned)
            except Exception:
                logger.exception("a slot pool callback raised; the pool carries on")
        self._stop_children(children, deadline)
        with contextlib.suppress(ValueError):
            atexit.unregister(self._close_at_exit)
        with self._lock:
            for fd in (self._wake_r, self._wake_w):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._wake_r = self._wake_w = -1

    # ---- spawning and stopping children ----------------------------------------------

    def _spawn(self, index: int) -> _Child:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        shared = SharedSlot(self._ctx.Lock(), self._ctx.RawArray("q", 2))
        process = self._ctx.Process(
            target=child_main,
            args=(child_conn, self._app_ref, shared),
            name=f"punctual-slot-{index}",
        )
        try:
            process.start()
        except BaseException:
            parent_conn.close()
            raise
        finally:
            child_conn.close()
        assert process.pid is not None
        return _Child(
            process=process,
            conn=parent_conn,
            pid=process.pid,
            sentinel=process.sentinel,
            shared=shared,
        )

    def _stop_children(self, children: list[_Child], deadline: float) -> None:
        for child in children:
            if child.ready and not child.dying:
                self._send(child, ("stop",))  # idle: let it exit on its own
            else:
                self._kill(child)
        for child in children:
            child.process.join(max(0.5, deadline - time.monotonic()))
            if child.process.exitcode is None:
                self._kill(child)
                child.process.join(5)
            child.exited = child.process.exitcode is not None
            self._release(child)

    def _kill(self, child: _Child) -> None:
        """SIGKILL the child and its process group (what the body may have spawned)."""
        child.dying = True
        if child.exited:
            return
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            # Not yet in its own group (still starting), or already gone.
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGKILL)

    def _release(self, child: _Child) -> None:
        with child.send_lock:
            child.conn_open = False
            child.conn.close()
        # The group outlives its leader while the body's own children live on; a group
        # id is not reused while the group exists, so this cannot hit a stranger.
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        if child.process.exitcode is not None:
            child.process.close()

    def _close_at_exit(self) -> None:
        self.close(grace_seconds=0)

    # ---- messaging -------------------------------------------------------------------

    def _send(self, child: _Child, message: tuple[Any, ...]) -> None:
        self._send_bytes(child, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def _send_bytes(self, child: _Child, data: bytes) -> None:
        # A dead child makes this fail; the monitor sees its exit and reports the run.
        with child.send_lock:
            if not child.conn_open:
                return
            try:
                child.conn.send_bytes(data)
            except (OSError, ValueError) as exc:
                logger.debug("could not write to slot process %d: %s", child.pid, exc)

    def _wake(self) -> None:
        # Under the lock: close() may close the pipe, and its fd number could be reused.
        with self._lock:
            if self._wake_w < 0:
                return
            with contextlib.suppress(OSError):  # full pipe: a wake-up is already pending
                os.write(self._wake_w, b"x")

    # ---- state helpers (call with the lock held) -------------------------------------

    def _is_free(self, child: _Child) -> bool:
        return child.ready and not child.dying and not child.active

    def _free_count(self) -> int:
        if self._closed:
            return 0
        return sum(1 for s in self._slots if s.child is not None and self._is_free(s.child))

    def _room(self, child: _Child, now: float) -> int:
        if not child.ready or child.dying:
            return 0
        if not child.active:
            return self._depth
        if self._depth == 1:
            return 0
        running = next((a for a in child.active.values() if a.started), None)
        if running is not None and now - running.began_at > BUSY_AFTER_SECONDS:
            return 0
        return max(0, self._depth - len(child.active))

    def _placement(self) -> _Child | None:
        """An idle slot's child, or else the one with the most room left."""
        now = time.monotonic()
        best: _Child | None = None
        best_room = 0
        for slot in self._slots:
            child = slot.child
            if child is None:
                continue
            if self._is_free(child):
                return child
            room = self._room(child, now)
            if room > best_room:
                best, best_room = child, room
        return best

    def _finalize(self, child: _Child, active: _Active) -> None:
        """``active`` has its outcome (or was taken back): forget it."""
        run_id = active.assignment.run_id
        if child.active.get(run_id) is active:
            del child.active[run_id]
        if self._runs.get(run_id) is child:
            del self._runs[run_id]
        self._changed.notify_all()

    def _seize(self, child: _Child, target: _Active | None) -> tuple[_Fate, list[_Active]]:
        """Stop ``target`` (or, without one, nothing that runs) and take back every
        assignment of ``child`` whose body has not begun.

        Under the child's transition lock the child cannot begin another body, so the
        last-begun number read there is exact: ``target`` is ``unbegun`` (it never will),
        ``killed`` (its body was the one running, and only its process was killed), or
        ``finished`` (its body ended, its outcome is on the pipe; nothing is done). The
        assignments taken back are returned, already forgotten.
        """
        lock = child.shared.lock
        locked = child.exited or lock.acquire(timeout=_TRANSITION_LOCK_TIMEOUT_SECONDS)
        try:
            if not locked:
                logger.error(
                    "slot process %d held its transition lock for over %g s; killing it",
                    child.pid,
                    _TRANSITION_LOCK_TIMEOUT_SECONDS,
                )
                self._kill(child)
                child.process.join(_TRANSITION_LOCK_TIMEOUT_SECONDS)
            begun = int(child.shared.state[BEGUN])
            fate: _Fate = "finished"
            revoke = target is None
            if target is not None and target.seq > begun:
                fate, revoke = "unbegun", True
            elif target is not None and target.seq == begun:
                fate, revoke = "killed", True
                if locked:
                    self._kill(child)
            if revoke:  # even when killed: it can begin nothing queued, whatever happens
                child.epoch += 1
                child.shared.state[EPOCH] = child.epoch
        finally:
            if locked and not child.exited:
                lock.release()
        taken = [a for a in child.active.values() if a.seq > begun] if revoke else []
        for active in taken:
            if active is not target:
                self._finalize(child, active)
        return fate, [a for a in taken if a is not target]

    # ---- the monitor thread ----------------------------------------------------------

    def _monitor(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._stopping:
                        break
                    conns, sentinels, timeout = self._wait_plan()
                ready = wait([self._wake_r, *conns, *sentinels], timeout)
                events: list[_Event] = []
                for obj in ready:
                    if obj == self._wake_r:
                        with contextlib.suppress(OSError):
                            while os.read(self._wake_r, 4096):
                                pass
                    elif isinstance(obj, Connection):
                        self._drain(conns[obj], events)
                for obj in ready:
                    if isinstance(obj, int) and obj in sentinels:
                        child = sentinels[obj]
                        self._drain(child, events)
                        self._retire(child, events)
                with self._lock:
                    if not self._stopping:
                        self._enforce_deadlines(events)
                    events.extend(self._pending)
                    self._pending.clear()
                self._deliver(events)
                self._respawn_due()
        except Exception:
            # Without its monitor the pool cannot report anything: stop it, so submit()
            # fails loudly and the unreported runs go back through lease expiry.
            logger.exception("the slot pool monitor failed; closing the pool")
            with self._lock:
                leftovers = list(self._pending)
                self._pending.clear()
            self._deliver(leftovers)
            self.close(grace_seconds=0)
        else:
            with self._lock:
                leftovers = list(self._pending)
                self._pending.clear()
            self._deliver(leftovers)

    def _wait_plan(self) -> tuple[dict[Connection, _Child], dict[int, _Child], float | None]:
        conns: dict[Connection, _Child] = {}
        sentinels: dict[int, _Child] = {}
        wake_at = math.inf
        for slot in self._slots:
            child = slot.child
            if child is None:
                if slot.respawn_at is not None:
                    wake_at = min(wake_at, slot.respawn_at)
                continue
            sentinels[child.sentinel] = child
            if child.conn_open:
                conns[child.conn] = child
            for active in child.active.values():
                if active.started:
                    wake_at = min(wake_at, active.deadline)
                elif self._depth > 1:
                    wake_at = min(wake_at, active.sent_at + REQUEUE_AFTER_SECONDS)
                    break  # the oldest one not begun is the first to be taken back
        timeout = None if wake_at == math.inf else max(0.0, wake_at - time.monotonic())
        return conns, sentinels, timeout

    def _drain(self, child: _Child, events: list[_Event]) -> None:
        """Read every message the child has written so far (this thread is the only reader)."""
        while child.conn_open:
            try:
                if not child.conn.poll():
                    return
                message = child.conn.recv()
            except (EOFError, OSError, pickle.UnpicklingError):
                child.conn_open = False
                return
            with self._lock:
                if not self._stopping:
                    self._handle(child, message, events)

    def _handle(self, child: _Child, message: tuple[Any, ...], events: list[_Event]) -> None:
        kind = message[0]
        if kind == "events":
            # A killed child's other words still count: the bodies before the killed one
            # ended, and their outcomes were written before it began.
            for event in message[1]:
                self._handle_run_event(child, event, events)
            return
        if child.dying:
            return
        if kind == "ready":
            child.ready = True
            slot = self._slot_of(child)
            if slot is not None:
                slot.failures = 0
            self._changed.notify_all()
        elif kind == "load_failed":
            logger.error("a slot process could not load app %r: %s", self._app_ref, message[1])
            if not self._start_complete and self._load_error is None:
                self._load_error = str(message[1])
                self._changed.notify_all()

    def _handle_run_event(
        self, child: _Child, event: tuple[Any, ...], events: list[_Event]
    ) -> None:
        active = child.active.get(event[1])
        if active is None:
            return  # terminated, timed out or taken back: later words are not accepted
        if event[0] == "started":
            if not active.started:
                active.started = True
                active.began_at = float(event[3])
                active.deadline = active.began_at + active.assignment.timeout_seconds
                events.append(("started", event[1], float(event[2])))
        elif event[0] == "finished":
            _, run_id, state, result_json, error = event
            self._finalize(child, active)
            result = json.loads(result_json) if result_json is not None else None
            attempt = active.assignment.attempt
            events.append(("finished", Outcome(run_id, state, result, error, attempt)))

    def _retire(self, child: _Child, events: list[_Event]) -> None:
        """``child`` exited: report its runs if it had any, and plan its replacement."""
        child.process.join(1)
        exit_code = child.process.exitcode
        with self._lock:
            child.exited = exit_code is not None
            if self._stopping:
                return  # close() owns the children now
            slot = self._slot_of(child)
            if child.active:
                # Whatever it wrote is read: a body that began is the one that died with
                # it (or, for a child the pool killed, one it could not be asked about);
                # the rest never began and go back.
                begun = int(child.shared.state[BEGUN])
                for active in list(child.active.values()):
                    self._finalize(child, active)
                    if active.seq <= begun:
                        events.append(("finished", _died(active.assignment, exit_code)))
                    else:
                        events.append(("returned", active.assignment))
            elif not child.ready and not child.dying:
                detail = f"the slot process exited ({_describe_exit(exit_code)}) while starting"
                if not self._start_complete and self._load_error is None:
                    self._load_error = detail
                    self._changed.notify_all()
                if slot is not None:
                    slot.failures += 1
            elif not child.dying:
                logger.warning(
                    "idle slot process %d exited (%s); respawning",
                    child.pid,
                    _describe_exit(exit_code),
                )
            if slot is not None:
                slot.child = None
                backoff = 0.0
                if slot.failures:
                    backoff = min(0.5 * 2 ** (slot.failures - 1), _MAX_RESPAWN_BACKOFF_SECONDS)
                slot.respawn_at = time.monotonic() + backoff
            self._release(child)

    def _enforce_deadlines(self, events: list[_Event]) -> None:
        now = time.monotonic()
        for slot in self._slots:
            child = slot.child
            if child is None or child.dying or not child.active:
                continue
            for active in list(child.active.values()):
                if active.started and active.deadline <= now:
                    fate, taken = self._seize(child, active)
                    events.extend(("returned", a.assignment) for a in taken)
                    if fate != "killed":
                        continue  # it ended in time; its outcome is on the pipe
                    self._finalize(child, active)
                    assignment = active.assignment
                    reason = f"execution timeout of {assignment.timeout_seconds:g} s exceeded"
                    error = run_error(RunErrorCode.TIMED_OUT, reason)
                    outcome = Outcome(
                        assignment.run_id, "timed_out", None, error, assignment.attempt
                    )
                    events.append(("finished", outcome))
                    break
                if (
                    not active.started
                    and self._depth > 1
                    and now - active.sent_at >= REQUEUE_AFTER_SECONDS
                ):
                    # Queued behind a slow body: take back what has not begun.
                    _, taken = self._seize(child, None)
                    events.extend(("returned", a.assignment) for a in taken)
                    break

    def _respawn_due(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [
                s
                for s in self._slots
                if s.child is None and s.respawn_at is not None and s.respawn_at <= now
            ]
            if self._closed:
                return
        for slot in due:
            try:
                child = self._spawn(slot.index)
            except Exception:
                logger.exception("could not respawn slot %d; retrying", slot.index)
                with self._lock:
                    slot.failures += 1
                    delay = min(0.5 * 2 ** (slot.failures - 1), _MAX_RESPAWN_BACKOFF_SECONDS)
                    slot.respawn_at = time.monotonic() + delay
                continue
            with self._lock:
                if not self._closed:
                    slot.child = child
                    slot.respawn_at = None
                    continue
            self._kill(child)  # closed while spawning: this one is not needed
            child.process.join(5)
            self._release(child)

    def _deliver(self, events: list[_Event]) -> None:
        returned: list[Assignment] = []
        for event in events:
            try:
                if event[0] == "started":
                    if self._on_began is not None:
                        self._on_began(event[1], event[2])
                    else:
                        self._on_started(event[1])
                elif event[0] == "finished":
                    self._on_finished(event[1])
                else:
                    returned.append(event[1])
            except Exception:
                logger.exception("a slot pool callback raised; the pool carries on")
        if returned:
            if self._on_returned is None:  # queue depth 1 queues nothing behind a body
                logger.error("slot pool took back %d run(s) without on_returned", len(returned))
                return
            try:
                self._on_returned(returned)
            except Exception:
                logger.exception("a slot pool callback raised; the pool carries on")

    def _slot_of(self, child: _Child) -> _Slot | None:
        return next((s for s in self._slots if s.child is child), None)


def _preload() -> list[str]:
    """Modules for the fork server to import once, for every slot child.

    Each child re-runs the parent's ``__main__`` (multiprocessing does, so that objects
    defined there unpickle; the fork server's own ``"__main__"`` preload never reaches it
    on this Python, as it is not handed the main module's path). For ``punctual serve`` and
    ``punctual worker`` that is the CLI, whose modules are therefore preloaded: the re-run
    then finds them imported. Nothing else the parent has loaded is wanted: a child needs
    the slot protocol, the workflow API and the app it imports itself, not the store, the
    HTTP app or an engine's SDK (importing those cost the fork server ~2 s of CPU at every
    start of a worker).
    """
    cli = sorted(m for m in sys.modules if m == "punctual.cli" or m.startswith("punctual.cli."))
    return ["__main__", child_main.__module__, *cli]


def _died(assignment: Assignment, exit_code: int | None) -> Outcome:
    error = run_error(
        RunErrorCode.WORKFLOW_ERROR,
        f"the process running workflow {assignment.workflow!r} version "
        f"{assignment.version!r} died ({_describe_exit(exit_code)}) before the body "
        "returned: it crashed, ran out of memory or called os._exit",
        type="WorkerProcessDied",
        exit_code=exit_code,
        traceback="",
    )
    return Outcome(assignment.run_id, "failed", None, error, assignment.attempt)


def _describe_exit(exit_code: int | None) -> str:
    if exit_code is None:
        return "exit code unknown"
    if exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        return f"killed by {name}, exit code {exit_code}"
    return f"exit code {exit_code}"
