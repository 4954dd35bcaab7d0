"""What a slot's two processes share: the assignment handed over, the outcome sent back,
and the transition lock's state that says which bodies began."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

OutcomeState = Literal["completed", "failed", "canceled", "terminated", "timed_out"]

EPOCH = 0
"""Index in ``SharedSlot.state`` of the epoch an assignment must carry to begin."""
BEGUN = 1
"""Index in ``SharedSlot.state`` of the sequence number of the last assignment begun."""


@dataclass(eq=False)
class SharedSlot:
    """What a slot's child and the parent share: ``state[EPOCH]``, the epoch an
    assignment must carry to begin, and ``state[BEGUN]``, the sequence number of the
    last assignment whose body began, both changed only under ``lock``."""

    lock: Any  # multiprocessing.synchronize.Lock
    state: Any  # multiprocessing RawArray of two signed 64-bit integers


@dataclass(frozen=True)
class Assignment:
    """One attempt of one run, handed to a slot."""

    run_id: str
    workflow: str
    version: str
    payload: Any  # JSON-ready input (already decrypted)
    attempt: int
    origin: dict[str, Any]
    timeout_seconds: float  # execution timeout
    traceparent: str | None = None  # the start's W3C trace context (OS-1)


@dataclass(frozen=True)
class Outcome:
    """How an assignment ended.

    ``error`` is a run error (``domain.runs.run_error``): ``workflow_error`` with the
    exception's ``type`` and ``traceback`` for ``failed`` (plus ``exit_code`` when the
    child process died), ``input_rejected``, or ``canceled``, ``terminated``, ``timed_out``.
    """

    run_id: str
    state: OutcomeState
    result: Any | None  # JSON-ready, for completed
    error: dict[str, Any] | None
    attempt: int = 0
    """The assignment's attempt, so a caller can tell an earlier attempt's outcome apart."""
