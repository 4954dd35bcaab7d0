"""The worker's side of runs: claim, record outcomes, heartbeat, and the reaper (WF-4..7).

Every run of a claimed batch is handled alone (FT-1): one whose input cannot be read is
failed and the others go on. A worker acts on a run only under its own claim token (FT-2).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from punctual.domain.runs import RunErrorCode, RunState, run_error
from punctual.errors import Unavailable
from punctual.ports.events import Event
from punctual.ports.records import AttemptOutcome, ClaimedRun, RunClaim, RunFlags, WorkerRecord
from punctual.usecases.kernel.context import Services
from punctual.usecases.running.definitions import DeclaredDefinition, register_worker
from punctual.usecases.tenancy.health import ARTIFACT_MISMATCH, HOST

log = logging.getLogger("punctual.worker")

BACKSTOP_GRACE_SECONDS = 30.0
"""How long past its execution timeout a ``running`` run may stay so before the reaper
ends it ``timed_out`` whoever renews it (WF-7's backstop for a lost hand-off)."""


@dataclass(frozen=True)
class ClaimedWork:
    run: ClaimedRun
    payload: Any


def start_worker(
    services: Services,
    worker: WorkerRecord,
    declared: Sequence[DeclaredDefinition],
    *,
    pid: int | None = None,
) -> WorkerRecord:
    """Register the worker; the record returned names the versions it may take runs of
    (those whose code is the registered code, OP-3)."""
    return register_worker(services, worker, declared, pid=pid)


def claim_runs(
    services: Services,
    worker_id: str,
    task_queues: Sequence[str],
    loaded: Sequence[tuple[str, str]],
    limit: int,
) -> list[ClaimedWork]:
    """Claim up to ``limit`` runs and read their input; a run whose input cannot be read
    ends ``failed`` alone (FT-1), the others are returned.

    Only runs whose key this process holds are claimed: a run under a key id it lacks
    stays ``pending`` for a worker that has it (never executed twice, never charged an
    attempt here), bounded by the pending timeout.
    """
    with services.store.transaction() as tx:
        # Read once the transaction holds SQLite's write lock: a run created while this
        # claim waited for it is never claimed "before" it was created.
        now = services.clock.now()
        claimed = tx.runs.claim_pending(
            worker_id,
            task_queues,
            loaded,
            limit,
            services.policy.lease_seconds,
            now,
            key_ids=services.codec.key_ids(),
        )
    work: list[ClaimedWork] = []
    unreadable: list[Finished] = []
    for run in claimed:
        try:
            work.append(ClaimedWork(run, services.codec.decrypt(run.input, run.tenant)))
        except Exception as exc:
            unreadable.append(_unreadable(services, run, exc))
    if unreadable:
        _fail_unreadable(services, worker_id, unreadable)
    return work


def _unreadable(services: Services, run: ClaimedRun, exc: Exception) -> Finished:
    # The exception's text is not kept: it is the codec's, and says nothing the code does not.
    if run.input.key_id not in services.codec.key_ids():
        error = run_error(
            RunErrorCode.INPUT_KEY_UNKNOWN,
            f"run {run.id}: this worker does not hold the input's codec key "
            f"{run.input.key_id!r}; add the key to every worker's key ring",
        )
    else:
        error = run_error(
            RunErrorCode.INPUT_UNDECRYPTABLE,
            f"run {run.id}: the stored input failed authentication with key "
            f"{run.input.key_id!r} ({type(exc).__name__}); it was damaged or sealed with "
            "another key under that id, so it cannot be read; create a new start",
        )
    log.error("event=run_input_unreadable run=%s code=%s", run.id, error["code"])
    return Finished(run, RunState.FAILED, None, error)


def _fail_unreadable(services: Services, worker_id: str, unreadable: list[Finished]) -> None:
    """Fail runs whose input cannot be read, with a health finding each. If the store is
    down now, their leases run out and they come back to be read again (nothing lost)."""
    try:
        finish_runs(services, worker_id, unreadable)
        now = services.clock.now()
        with services.store.transaction() as tx:
            for f in unreadable:
                tx.findings.raise_finding(
                    f.run.tenant,
                    "run_failed",
                    f.run.id,
                    "error",
                    f"run {f.run.id} failed: {f.error['message'] if f.error else ''}",
                    now,
                )
    except Unavailable as exc:
        log.warning("event=run_outcomes_unrecorded runs=%d error=%s", len(unreadable), exc)


@dataclass(frozen=True)
class Finished:
    """An attempt's outcome as the worker reports it."""

    run: ClaimedRun
    state: RunState
    result: Any
    error: dict[str, Any] | None
    started_at: datetime | None = None
    """When the body began, if that is not recorded yet."""
    duration_seconds: float | None = None
    """How long the body ran, as the worker measured it (None: it never began)."""


def run_ended(
    tenant: str,
    run_id: str,
    state: RunState,
    attempt: int,
    workflow: str,
    duration_seconds: float | None = None,
) -> Event:
    """``run.<state>``, the one event, and so the one log line, of a run's recorded end
    (SPEC OP-4): whichever worker or sync recorded it emits it, once."""
    data: dict[str, Any] = {"attempt": attempt, "workflow": workflow}
    if duration_seconds is not None:
        data["duration_ms"] = round(duration_seconds * 1000, 1)
    return Event(f"run.{state.value}", tenant, run_id, data)


def finish_runs(services: Services, worker_id: str, finished: Sequence[Finished]) -> list[bool]:
    """Record attempts' outcomes in one transaction and one statement; per run, False
    when it had moved on (terminated, lost). One transaction per batch keeps a busy
    worker's completions from queueing behind each other's commits."""
    now = services.clock.now()
    with services.store.transaction() as tx:
        done = tx.runs.finish_many(
            worker_id,
            [
                AttemptOutcome(
                    f.run.id, f.run.attempt, f.state.value, f.result, f.error, f.started_at
                )
                for f in finished
            ],
            now,
        )
        # The schedule's last_status and the follow-through follow from ended_at (CR-4):
        # the runner's follow-through pass claims these runs.
        recorded = [f.run.id in done for f in finished]
    ended = zip(finished, recorded, strict=True)
    if any(ok and f.run.origin.get("schedule_id") for f, ok in ended):
        services.on_runs_ended()  # their follow-through, in this process
    for f, ok in zip(finished, recorded, strict=True):
        if ok:
            run = f.run
            services.events.emit(
                run_ended(
                    run.tenant, run.id, f.state, run.attempt, run.workflow, f.duration_seconds
                )
            )
    return recorded


def heartbeat(
    services: Services, worker_id: str, claims: Sequence[RunClaim]
) -> tuple[set[str], list[RunFlags]]:
    """Keep the worker and its claims' leases alive (timed by the database's clock on
    PostgreSQL). Returns the run ids whose lease was renewed, and the runs' flags: a run
    not renewed, or whose flags name another claim, is no longer this worker's (FT-2)."""
    now = services.clock.now()
    with services.store.transaction() as tx:
        tx.definitions.heartbeat_worker(worker_id, now)
        renewed = tx.runs.renew_leases(claims, services.policy.lease_seconds, now)
        return renewed, tx.runs.flags([c.run_id for c in claims])


def run_flags(services: Services, running: Sequence[str]) -> list[RunFlags]:
    with services.store.transaction(readonly=True) as tx:
        return tx.runs.flags(running)


def mark_started(services: Services, started: Sequence[tuple[RunClaim, datetime]]) -> None:
    """Record when bodies began (``started_at``), many in one statement."""
    with services.store.transaction() as tx:
        tx.runs.mark_started_each(started)


def give_back(services: Services, claims: Sequence[RunClaim]) -> None:
    """Return claimed runs whose body never began to ``pending``, the attempt not charged
    (a hand-off that failed for this worker's own reasons)."""
    with services.store.transaction() as tx:
        tx.runs.give_back(claims)


def not_storable(finished: Finished, exc: Exception) -> Finished:
    """The outcome to record instead of one the store refuses deterministically (FT-3):
    the run ends ``failed`` and its body is never executed again."""
    run = finished.run
    return Finished(
        run,
        RunState.FAILED,
        None,
        run_error(
            RunErrorCode.RESULT_NOT_STORABLE,
            f"run {run.id} attempt {run.attempt} ended {finished.state.value}, but the store "
            f"refused to record its result or error ({type(exc).__name__}); the body is not "
            "executed again: return (or raise with) data the store accepts",
            outcome=finished.state.value,
        ),
        finished.started_at,
        finished.duration_seconds,
    )


def stop_worker(services: Services, worker_id: str) -> None:
    """The worker stopped; its ``artifact_mismatch`` finding, if any, goes with it."""
    with services.store.transaction() as tx:
        tx.definitions.stop_worker(worker_id, services.clock.now())
        tx.findings.clear(HOST, ARTIFACT_MISMATCH, worker_id)


@dataclass(frozen=True)
class ReapReport:
    requeued: int
    failed: int
    timed_out: int


def reap(services: Services) -> ReapReport:
    """Recover runs of lost workers and end runs no worker picked up in time; each run the
    store ends here gets its one end line, as a worker's would."""
    policy = services.policy
    now = services.clock.now()
    pending_cutoff = now - timedelta(seconds=policy.pending_timeout_seconds)
    with services.store.transaction() as tx:
        requeued, failed = tx.runs.release_lost(now, policy.max_run_attempts)
        tx.starts.release_buffered(now)
        backlog = tx.starts.count_due(now)
        timed_out = tx.runs.time_out_pending(pending_cutoff, now, policy.pending_timeout_seconds)
        timed_out += tx.runs.time_out_running(now, BACKSTOP_GRACE_SECONDS)
        for worker_id in tx.definitions.prune_workers(now - timedelta(days=1)):
            tx.findings.clear(HOST, ARTIFACT_MISMATCH, worker_id)  # killed, never stopped
    services.events.emit(Event("dispatch.backlog", "*", "runner", {"due": backlog}))
    if failed or timed_out:
        services.on_runs_ended()  # their follow-through, in this process
    for run in [*failed, *timed_out]:
        services.events.emit(
            run_ended(run.tenant, run.id, RunState(run.state), run.attempts, run.workflow)
        )
    return ReapReport(requeued, len(failed), len(timed_out))
