"""What crosses the Temporal boundary: type names, failure types and the workflow argument.

Kept to the standard library (and punctual's pure domain) so the workflow sandbox can
pass it through without importing anything non-deterministic. The argument carries no
input: the activity reads the encrypted input from the store by run id, so neither clear
text nor ciphertext of a run's input ever enters Temporal history (docs/decisions/0003).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from punctual.domain.runs import RunErrorCode

WORKFLOW_TYPE = "punctual.run"
"""The one Temporal workflow type every punctual run executes as."""

ACTIVITY_TYPE = "punctual.execute"
"""Its single activity: runs the user's workflow body in a worker's child process."""


class FailureType:
    """``ApplicationError.type`` values; the sync maps them back to run states."""

    FAILED = "punctual.Failed"
    """The body raised, or could not be started (unknown version, undecryptable input)."""
    CANCELED = "punctual.Canceled"
    """The run ended canceled without Temporal having asked (the store had canceled it)."""
    TIMED_OUT = "punctual.TimedOut"
    """Execution timeout, or no worker picked the run up within the pending timeout."""
    TERMINATED = "punctual.Terminated"
    """The store recorded the run terminated; the body was killed."""
    WORKER_LOST = "punctual.WorkerLost"
    """Every attempt lost its worker (heartbeat timeouts)."""
    NOT_RECORDED = "punctual.NotRecorded"
    """The dispatch that started the execution never recorded the run (its start ended)."""
    WORKER_SHUTDOWN = "punctual.WorkerShutdown"
    """The worker stopped under the body; retryable, so another worker takes the run."""
    INPUT_KEY_UNKNOWN = "punctual.InputKeyUnknown"
    """This worker does not hold the input's key; retryable, another worker may (FT-1)."""
    NOT_SERVED = "punctual.NotServed"
    """This worker does not serve the run's version: it lacks it, or its code for it is not
    the registered code (OP-3). The body never began; the workflow asks again later, so the
    run waits for a worker that serves it, and the refused attempt is not charged."""


FailedRunState = Literal["failed", "canceled", "timed_out", "terminated"]

RUN_STATE_OF_FAILURE: dict[str, FailedRunState] = {
    FailureType.FAILED: "failed",
    FailureType.CANCELED: "canceled",
    FailureType.TIMED_OUT: "timed_out",
    FailureType.TERMINATED: "terminated",
    FailureType.WORKER_LOST: "failed",
    FailureType.NOT_RECORDED: "failed",
    FailureType.WORKER_SHUTDOWN: "failed",
    FailureType.INPUT_KEY_UNKNOWN: "failed",
}
"""Run state for a workflow that failed with one of our types; anything else is ``failed``."""

RUN_ERROR_OF_FAILURE: dict[str, str] = {
    FailureType.FAILED: RunErrorCode.WORKFLOW_ERROR.value,
    FailureType.CANCELED: RunErrorCode.CANCELED.value,
    FailureType.TIMED_OUT: RunErrorCode.TIMED_OUT.value,
    FailureType.TERMINATED: RunErrorCode.TERMINATED.value,
    FailureType.WORKER_LOST: RunErrorCode.WORKER_LOST.value,
    FailureType.NOT_RECORDED: RunErrorCode.ENGINE_EXECUTION_LOST.value,
    FailureType.WORKER_SHUTDOWN: RunErrorCode.WORKER_LOST.value,
    FailureType.INPUT_KEY_UNKNOWN: RunErrorCode.INPUT_KEY_UNKNOWN.value,
}
"""The run error code a failure type stands for when its details carry no ``code``."""


def coded_error(code: str, error: dict[str, Any], message: str | None = None) -> dict[str, Any]:
    """``error`` in the one stored shape ``{"code", "message", ...}``: kept as it is when it
    has a code; otherwise ``code`` is added and an older ``reason`` becomes the message."""
    if "code" in error:
        return error
    text = error.get("message") or error.get("reason") or message or code
    rest = {key: value for key, value in error.items() if key not in ("message", "reason")}
    return {"code": code, "message": str(text), **rest}


@dataclass(frozen=True)
class RunArgs:
    """The argument of every ``punctual.run`` execution (the workflow id is the run id)."""

    run_id: str
    tenant: str
    workflow: str
    version: str
    timeout_seconds: float
    """Execution timeout of one attempt of the body (WF-7)."""
    pending_timeout_seconds: float
    """How long the run may wait for a worker (schedule-to-start) or for its record."""
    heartbeat_timeout_seconds: float
    """A worker silent for this long is lost; the attempt is retried elsewhere."""
    max_attempts: int
    """Attempts after lost workers before the run fails (never retries a raising body)."""
    ordered_at: float
    """Unix time at which dispatch asked for the run; bounds the wait for its record."""
    attempts_before: int = 0
    """Attempts of the run made before this activity was scheduled (the workflow schedules
    a new one after a refusal, ``NOT_SERVED``): the run's attempt is this plus the
    activity's own."""
