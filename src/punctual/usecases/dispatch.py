"""Dispatch: turn due starts into runs, exactly one run per start (DP-1..DP-3, OS-6).

One pass claims a page of due starts under a lease (a versioned transition, so it
races reschedule and cancel through the same arbiter), resolves the active definition
and a worker that has it loaded at *this* moment, validates the input again, asks the
engine to start the runs, then records every outcome in one transaction. The run id
was allocated when the start was created, so a pass that crashes anywhere converges
on the same run when the lease expires and another pass picks the start up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from punctual.domain import backoff, failures
from punctual.domain.failures import DispatchFailure, FailureClass
from punctual.domain.runs import Definition
from punctual.domain.starts import LastError, StartState
from punctual.domain.timeutil import to_rfc3339
from punctual.ports.engine import EngineUnavailable, RunOrder
from punctual.ports.events import Event
from punctual.ports.records import ClaimedStart, NewRun
from punctual.ports.store import Tx
from punctual.usecases.context import Services
from punctual.usecases.definitions import input_problems


@dataclass(frozen=True)
class Dispatched:
    claim: ClaimedStart
    definition: Definition
    order: RunOrder


@dataclass(frozen=True)
class NotDispatched:
    claim: ClaimedStart
    failure: DispatchFailure


@dataclass
class DispatchReport:
    claimed: int = 0
    dispatched: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    lost: int = 0
    """Claims that another runner took over before this pass recorded them."""


def dispatch_due(services: Services, runner_id: str, page_size: int) -> DispatchReport:
    """One pass over at most ``page_size`` due starts. Raises ``Unavailable`` on outages."""
    policy = services.policy
    now = services.clock.now()
    with services.store.transaction() as tx:
        claims = tx.starts.claim_due(
            now, page_size, runner_id, now + timedelta(seconds=policy.lease_seconds)
        )
    report = DispatchReport(claimed=len(claims))
    if not claims:
        return report
    services.crash_point("after_claim")
    loaded = {(name, version) for name, version, _ in services.engine.loaded()}
    with services.store.transaction(readonly=True) as tx:
        active = {name: tx.definitions.active(name) for name in {c.workflow for c in claims}}
    decisions = [_decide(services, claim, active.get(claim.workflow), loaded) for claim in claims]
    ready = [d for d in decisions if isinstance(d, Dispatched)]
    try:
        services.engine.start([d.order for d in ready])
    except EngineUnavailable:
        _release(services, claims)
        raise
    services.crash_point("after_engine_start")
    recorded_at = services.clock.now()
    with services.store.transaction() as tx:
        _record(services, tx, decisions, recorded_at, report)
        services.crash_point("during_record")
    services.crash_point("after_record")
    recorded = set(report.dispatched)
    services.engine.on_recorded([d.order for d in ready if d.claim.id in recorded])
    _emit(services, decisions, report, recorded_at)
    return report


def _decide(
    services: Services,
    claim: ClaimedStart,
    definition: Definition | None,
    loaded: set[tuple[str, str]],
) -> Dispatched | NotDispatched:
    policy = services.policy
    workload = policy.workload_classes.get(claim.workload_class)
    allowed = policy.tenant_policy(claim.tenant).allowed_workload_classes
    if workload is None or claim.workload_class not in allowed:
        return NotDispatched(claim, failures.workload_class_removed(claim.workload_class))
    if definition is None:
        return NotDispatched(claim, failures.workflow_inactive(claim.workflow))
    if (definition.name, definition.version) not in loaded:
        return NotDispatched(
            claim, failures.version_not_loaded(definition.name, definition.version)
        )
    payload = services.codec.decrypt(claim.input, claim.tenant)
    problems = input_problems(definition, payload)
    if problems:
        return NotDispatched(
            claim, failures.input_rejected(definition.name, definition.version, "; ".join(problems))
        )
    timeout = min(definition.execution_timeout_seconds, policy.max_execution_timeout_seconds)
    order = RunOrder(
        run_id=claim.run_id,
        tenant=claim.tenant,
        workflow=definition.name,
        definition_version=definition.version,
        task_queue=workload.task_queue,
        priority=workload.priority,
        timeout_seconds=timeout,
        origin=claim.origin,
    )
    return Dispatched(claim, definition, order)


def _record(
    services: Services,
    tx: Tx,
    decisions: Sequence[Dispatched | NotDispatched],
    now: datetime,
    report: DispatchReport,
) -> None:
    new_runs: list[NewRun] = []
    for decision in decisions:
        claim = decision.claim
        attempts = claim.attempts + 1
        if isinstance(decision, Dispatched):
            won = tx.starts.compare_and_set(
                claim.id,
                claim.version,
                now,
                state=StartState.DISPATCHED.value,
                attempts=attempts,
                definition_version=decision.definition.version,
                artifact=decision.definition.artifact,
                dispatched_at=now,
                next_attempt_at=None,
                claimed_by=None,
                lease_until=None,
            )
            if won:
                order = decision.order
                new_runs.append(
                    NewRun(
                        id=order.run_id,
                        tenant=order.tenant,
                        workflow=order.workflow,
                        definition_version=order.definition_version,
                        artifact=decision.definition.artifact,
                        origin=order.origin,
                        started_by=claim.created_by,
                        input=claim.input,
                        task_queue=order.task_queue,
                        priority=order.priority,
                        traceparent=claim.traceparent,
                        timeout_seconds=order.timeout_seconds,
                    )
                )
                report.dispatched.append(claim.id)
            else:
                report.lost += 1
            continue
        failure = decision.failure
        error = LastError(failure.code, failure.message, now)
        retry = failure.failure_class is FailureClass.START_SPECIFIC and not backoff.exhausted(
            attempts
        )
        if retry:
            next_at = now + backoff.next_delay(attempts, services.rng)
            changes = {
                "state": StartState.SCHEDULED.value,
                "next_attempt_at": next_at,
                "due_at": next_at,
            }
        else:
            changes = {"state": StartState.FAILED.value, "reason": failure.code}
        won = tx.starts.compare_and_set(
            claim.id,
            claim.version,
            now,
            attempts=attempts,
            last_error=error,
            claimed_by=None,
            lease_until=None,
            **changes,
        )
        if not won:
            report.lost += 1
        elif retry:
            report.retried.append(claim.id)
        else:
            report.failed.append(claim.id)
            tx.findings.raise_finding(
                claim.tenant,
                "start_failed",
                claim.id,
                "error",
                f"start {claim.id} failed after {attempts} attempt(s): {failure.message}",
                now,
            )
    tx.runs.insert_new(new_runs, now)


def _release(services: Services, claims: Sequence[ClaimedStart]) -> None:
    """Give claims back untouched (no attempt charged) when the engine is down."""
    now = services.clock.now()
    with services.store.transaction() as tx:
        for claim in claims:
            tx.starts.compare_and_set(
                claim.id,
                claim.version,
                now,
                state=StartState.SCHEDULED.value,
                claimed_by=None,
                lease_until=None,
            )


def _emit(
    services: Services,
    decisions: Sequence[Dispatched | NotDispatched],
    report: DispatchReport,
    now: datetime,
) -> None:
    dispatched, retried, failed = set(report.dispatched), set(report.retried), set(report.failed)
    for decision in decisions:
        claim = decision.claim
        if claim.id in dispatched:
            services.events.emit(
                Event(
                    "start.dispatched",
                    claim.tenant,
                    claim.id,
                    {"run_id": claim.run_id, "at": to_rfc3339(now)},
                )
            )
        elif isinstance(decision, NotDispatched) and claim.id in (retried | failed):
            name = "start.retried" if claim.id in retried else "start.failed"
            services.events.emit(
                Event(
                    name,
                    claim.tenant,
                    claim.id,
                    {"code": decision.failure.code, "attempts": claim.attempts + 1},
                )
            )
