"""What a slot's two processes share: the assignment handed over, the outcome sent back,
and the transition lock's state that says which bodies began."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from punctual.ports.records import ClaimedRun, RunRecord

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

    @classmethod
    def of_run(cls, run: ClaimedRun | RunRecord, attempt: int, payload: Any) -> Assignment:
        """Attempt ``attempt`` of ``run``, as a claim (local) or a run record (Temporal)
        hands it over, with its decrypted input."""
        return cls(
            run_id=run.id,
            workflow=run.workflow,
            version=run.definition_version,
            payload=payload,
            attempt=attempt,
            origin=run.origin,
            timeout_seconds=run.timeout_seconds,
            traceparent=run.traceparent,
        )


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
