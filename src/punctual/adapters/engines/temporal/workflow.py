"""The one generic Temporal workflow every punctual run executes as: ``PunctualRun``.

User workflows are plain Python functions (WF-1) that do I/O freely, so they cannot run
as Temporal workflow code (which must be deterministic and replayable). The Temporal
workflow is therefore a thin, fixed shell around a single activity that runs the body in
a worker's child process; Temporal contributes what it is good at: durable dispatch to
task queues with priority, retries of lost workers (heartbeat timeout) as new attempts,
timeouts, cancellation and termination (docs/decisions/0003).

This module is imported inside the workflow sandbox: it must stay deterministic and must
not start anything at import time. It imports only ``temporalio``, ``messages`` and the
pure ``punctual.domain.runs``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TimeoutType,
)
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from punctual.adapters.engines.temporal.messages import (
        ACTIVITY_TYPE,
        WORKFLOW_TYPE,
        FailureType,
        RunArgs,
    )
    from punctual.domain.runs import RunErrorCode, run_error

START_TO_CLOSE_GRACE = timedelta(seconds=30)
"""Slack on top of the body's own deadline, which the worker enforces by killing the body;
Temporal's start-to-close is only the backstop for a worker that stops reporting."""
NOT_SERVED_FIRST_WAIT = timedelta(seconds=1)
NOT_SERVED_MAX_WAIT = timedelta(seconds=10)
"""After a worker refused the run (``NOT_SERVED``), the workflow waits this long, doubling
from the first wait, before it asks again: another poller of the queue may serve it."""


def retry_policy(args: RunArgs) -> RetryPolicy:
    """Lost workers are retried as new attempts; raising bodies never are (WF-4). An
    activity scheduled after a refusal has the attempts the run has left."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=max(1, args.max_attempts - args.attempts_before),
    )


@workflow.defn(name=WORKFLOW_TYPE)
class PunctualRun:
    """Run one punctual run: one activity, whose result or failure is the workflow's.

    A worker that does not serve the run's version (it lacks it, or its code differs from
    the registered artifact, OP-3) refuses it before the body begins; the workflow then
    waits and schedules the activity again, so the run waits for a worker that serves it,
    as a local run waits to be claimed, up to the pending timeout from its dispatch."""

    @workflow.run
    async def run(self, args: RunArgs) -> Any:
        current = args
        wait = NOT_SERVED_FIRST_WAIT
        while True:
            try:
                return await workflow.execute_activity(
                    ACTIVITY_TYPE,
                    current,
                    # The activity may wait for its run record and a free slot before the
                    # body starts; the body's own deadline is enforced by the worker.
                    start_to_close_timeout=timedelta(
                        seconds=args.timeout_seconds + args.pending_timeout_seconds
                    )
                    + START_TO_CLOSE_GRACE,
                    schedule_to_start_timeout=timedelta(seconds=args.pending_timeout_seconds),
                    heartbeat_timeout=timedelta(seconds=args.heartbeat_timeout_seconds),
                    retry_policy=retry_policy(current),
                    # A cancel reaches the body cooperatively; wait for the body's answer
                    # (it may clean up, end canceled, or even complete) before closing.
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
            except ActivityError as err:
                refused = refused_attempt(err)
                if refused is None:
                    failure = punctual_failure(err, args)
                    if failure is err:
                        # Re-raised as is: ``raise ... from`` would replace the cause, and
                        # the SDK reads the cause to tell a cancellation (CANCELED) from a
                        # failure.
                        raise
                    raise failure from None
                # The refused attempt ran no body: the next activity's first attempt takes
                # its number, and the run keeps every attempt it had left.
                current = replace(current, attempts_before=current.attempts_before + refused - 1)
            deadline = args.ordered_at + args.pending_timeout_seconds
            if workflow.now().timestamp() + wait.total_seconds() > deadline:
                raise not_served_in_time(args)
            await workflow.sleep(wait)
            wait = min(wait * 2, NOT_SERVED_MAX_WAIT)


def refused_attempt(err: ActivityError) -> int | None:
    """The activity attempt a worker refused as not serving the run's version, if so."""
    cause = err.cause
    if not isinstance(cause, ApplicationError) or cause.type != FailureType.NOT_SERVED:
        return None
    detail = cause.details[0] if cause.details else None
    attempt = detail.get("attempt") if isinstance(detail, dict) else None
    return attempt if isinstance(attempt, int) and attempt >= 1 else 1


def run_failure(
    failure_type: str, code: RunErrorCode, message: str, **extra: Any
) -> ApplicationError:
    """A failure that ends the run for good, typed for the sync and carrying the run error
    it records (``extra`` as in ``run_error``)."""
    return ApplicationError(
        message, run_error(code, message, **extra), type=failure_type, non_retryable=True
    )


def not_served_in_time(args: RunArgs) -> ApplicationError:
    return run_failure(
        FailureType.TIMED_OUT,
        RunErrorCode.TIMED_OUT,
        f"no worker serving {args.workflow} version {args.version} with its registered code "
        f"took it within {args.pending_timeout_seconds:g} s",
    )


def punctual_failure(err: ActivityError, args: RunArgs) -> BaseException:
    """The workflow's failure for a failed activity, typed so the sync can map it (WF-4)."""
    cause = err.cause
    if isinstance(cause, CancelledError):
        return err  # a requested cancel: the workflow ends CANCELED
    if isinstance(cause, ApplicationError):
        return ApplicationError(
            cause.message,
            *cause.details,
            type=cause.type,
            non_retryable=True,
            category=cause.category,
        )
    if isinstance(cause, TemporalTimeoutError):
        if cause.type is TimeoutType.SCHEDULE_TO_START:
            return run_failure(
                FailureType.TIMED_OUT,
                RunErrorCode.TIMED_OUT,
                f"no worker picked it up within {args.pending_timeout_seconds:g} s",
            )
        if cause.type is TimeoutType.HEARTBEAT:
            return run_failure(
                FailureType.WORKER_LOST,
                RunErrorCode.WORKER_LOST,
                f"its worker was lost {args.max_attempts} times (no heartbeat within "
                f"{args.heartbeat_timeout_seconds:g} s)",
            )
        return run_failure(
            FailureType.TIMED_OUT,
            RunErrorCode.TIMED_OUT,
            f"execution timeout of {args.timeout_seconds:g} s exceeded",
        )
    message = str(cause) if cause is not None else str(err)
    kind = type(cause).__name__ if cause is not None else type(err).__name__
    return run_failure(FailureType.FAILED, RunErrorCode.WORKFLOW_ERROR, message, type=kind)
