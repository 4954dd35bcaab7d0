"""The worker's side of runs: claim, record outcomes, heartbeat, and the reaper (WF-4..7)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from punctual.domain.runs import RunState
from punctual.ports.events import Event
from punctual.ports.records import ClaimedRun, RunFlags, WorkerRecord
from punctual.usecases.context import Services
from punctual.usecases.definitions import DeclaredDefinition, register_worker


@dataclass(frozen=True)
class ClaimedWork:
    run: ClaimedRun
    payload: Any


def start_worker(
    services: Services, worker: WorkerRecord, declared: Sequence[DeclaredDefinition]
) -> None:
    register_worker(services, worker, declared)


def claim_runs(
    services: Services,
    worker_id: str,
    task_queues: Sequence[str],
    loaded: Sequence[tuple[str, str]],
    limit: int,
) -> list[ClaimedWork]:
    now = services.clock.now()
    lease_until = now + timedelta(seconds=services.policy.lease_seconds)
    with services.store.transaction() as tx:
        claimed = tx.runs.claim_pending(worker_id, task_queues, loaded, limit, lease_until, now)
    return [ClaimedWork(run, services.codec.decrypt(run.input, run.tenant)) for run in claimed]


@dataclass(frozen=True)
class Finished:
    """An attempt's outcome as the worker reports it."""

    run: ClaimedRun
    state: RunState
    result: Any
    error: dict[str, Any] | None


def finish_runs(services: Services, worker_id: str, finished: Sequence[Finished]) -> list[bool]:
    """Record attempts' outcomes in one transaction; per run, False when it had moved on
    (terminated, lost). One transaction per batch keeps a busy worker's completions from
    queueing behind each other's commits."""
    now = services.clock.now()
    with services.store.transaction() as tx:
        recorded = [
            tx.runs.finish(f.run.id, worker_id, f.run.attempt, f.state, f.result, f.error, now)
            for f in finished
        ]
        # Follow-through bookkeeping (CR-4); never a version change (RS-6).
        tx.schedules.note_status(
            {
                f.run.origin["schedule_id"]: f.state.value
                for f, ok in zip(finished, recorded, strict=True)
                if ok and f.run.origin.get("schedule_id")
            }
        )
    for f, ok in zip(finished, recorded, strict=True):
        if ok:
            services.events.emit(
                Event(f"run.{f.state.value}", f.run.tenant, f.run.id, {"attempt": f.run.attempt})
            )
    return recorded


def heartbeat(services: Services, worker_id: str, running: Sequence[str]) -> list[RunFlags]:
    """Keep the worker and its runs' leases alive; returns the runs' cancel/terminate flags."""
    now = services.clock.now()
    lease_until = now + timedelta(seconds=services.policy.lease_seconds)
    with services.store.transaction() as tx:
        tx.definitions.heartbeat_worker(worker_id, now)
        tx.runs.renew_leases(worker_id, running, lease_until)
        return tx.runs.flags(running)


def run_flags(services: Services, running: Sequence[str]) -> list[RunFlags]:
    with services.store.transaction(readonly=True) as tx:
        return tx.runs.flags(running)


def stop_worker(services: Services, worker_id: str) -> None:
    with services.store.transaction() as tx:
        tx.definitions.stop_worker(worker_id, services.clock.now())


@dataclass(frozen=True)
class ReapReport:
    requeued: int
    failed: int
    timed_out: int


def reap(services: Services) -> ReapReport:
    """Recover runs of lost workers and end runs no worker picked up in time."""
    policy = services.policy
    now = services.clock.now()
    pending_cutoff = now - timedelta(seconds=policy.pending_timeout_seconds)
    with services.store.transaction() as tx:
        requeued, failed = tx.runs.release_lost(now, policy.max_run_attempts)
        tx.starts.release_buffered(now)
        backlog = tx.starts.count_due(now)
        timed_out = tx.runs.time_out_pending(pending_cutoff, now, policy.pending_timeout_seconds)
        tx.definitions.prune_workers(now - timedelta(days=1))
    services.events.emit(Event("dispatch.backlog", "*", "runner", {"due": backlog}))
    return ReapReport(requeued, failed, timed_out)
