"""Run workflow bodies in warm child processes, so that terminate and timeouts really stop them.

A Python thread cannot be stopped from outside: a body that ignores its ``RunContext`` (a
hung socket read, a busy loop, a C extension) would keep running after the run was
recorded ``terminated`` or ``timed_out`` (SPEC WF-5, WF-7). So every body runs in a child
process that the parent can SIGKILL. To keep starts cheap, a ``SlotPool`` pre-spawns one
long-lived child per slot; each child imports the app once and then serves assignments
one at a time over a pipe.

Children are created with multiprocessing's ``forkserver`` context: the worker process is
multi-threaded (HTTP client, heartbeats, this pool's monitor), and ``fork`` from a
multi-threaded process can copy a lock held by another thread and deadlock the child.

Protocol (all messages are small tuples on one duplex ``Pipe`` per child)::

    parent -> child   ("run", [(seq, epoch, begin_by, Assignment)]) | ("cancel", run_id) | ("stop",)
    child  -> parent  ("ready", pid) | ("load_failed", text)
                      ("started", run_id) | ("finished", run_id, state, result_json, error)

One monitor thread in the parent waits on every child's pipe and exit sentinel, enforces
execution timeouts, respawns dead children and invokes the callbacks. Callbacks run on
that thread, never while the pool's lock is held, so they may call back into the pool.
``on_finished`` is called exactly once per submitted assignment (until ``close``);
``on_started`` is called at most once, only when the body actually began.

Its parts: ``slot`` holds what both sides of a slot share (the assignment, its outcome,
the transition lock's state), ``child`` is the slot process, ``pool`` the parent's
``SlotPool``. Both engines run bodies through it: the local worker and the Temporal
activity.
"""

from punctual.adapters.executor.pool import SlotPool
from punctual.adapters.executor.slot import Assignment, Outcome, OutcomeState

__all__ = ["Assignment", "Outcome", "OutcomeState", "SlotPool"]
