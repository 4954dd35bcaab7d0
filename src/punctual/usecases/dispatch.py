"""Dispatch: turn due starts into runs, exactly one run per start (DP-1..DP-3, OS-6, RS-3).

One pass claims a page of due starts under a lease (a versioned transition, so it
races reschedule and cancel through the same arbiter), resolves the definition and a
worker that has it loaded at *this* moment, validates the input again, asks the engine
to start the runs, then records every outcome in one transaction. The run id was
allocated when the start was created, so a pass that crashes anywhere converges on the
same run when the lease expires and another pass picks the start up.

Occurrences of schedules are starts too. Those whose schedule has an overlap policy
other than ``allow_all`` are dispatched one at a time under their schedule's lock, so
that two runners cannot both decide "the previous run is finished".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from punctual.domain import backoff, failures
from punctual.domain.failures import DispatchFailure, FailureClass
from punctual.domain.runs import Definition, DefinitionState
from punctual.domain.schedules import (
    OverlapDecision,
    OverlapPolicy,
    Schedule,
    VersionPolicy,
    auto_disabled_status,
    overlap_decision,
)
from punctual.domain.starts import LastError, StartState
from punctual.domain.timeutil import to_rfc3339
from punctual.ports.engine import EngineUnavailable, RunOrder
from punctual.ports.events import Event
from punctual.ports.records import ClaimedStart, DispatchedStart, Fired, NewRun
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


Decision = Dispatched | NotDispatched


@dataclass
class DispatchReport:
    claimed: int = 0
    dispatched: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    buffered: list[str] = field(default_factory=list)
    lost: int = 0
    """Claims that another runner took over before this pass recorded them."""
    lag_seconds: list[float] = field(default_factory=list)
    """Per dispatched start: dispatched_at - due_at."""


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
        schedules = _schedules_of(tx, claims)
        definitions = _definitions_for(tx, claims, schedules)
    decisions = [
        _decide(services, claim, definitions.get(_wanted(claim, schedules)), loaded)
        for claim in claims
    ]
    serialized = [d for d in decisions if _needs_schedule_lock(d, schedules)]
    batch = [d for d in decisions if not _needs_schedule_lock(d, schedules)]
    ready = [d for d in batch if isinstance(d, Dispatched)]
    try:
        services.engine.start([d.order for d in ready])
    except EngineUnavailable:
        _release(services, claims)
        raise
    services.crash_point("after_engine_start")
    recorded_at = services.clock.now()
    with services.store.transaction() as tx:
        _record(services, tx, batch, recorded_at, report)
        services.crash_point("during_record")
    services.crash_point("after_record")
    for decision in serialized:
        assert isinstance(decision, Dispatched)
        _dispatch_under_schedule_lock(services, decision, report)
    recorded = set(report.dispatched)
    services.engine.on_recorded(
        [d.order for d in decisions if isinstance(d, Dispatched) and d.claim.id in recorded]
    )
    _emit(services, decisions, report, recorded_at)
    return report


def _schedules_of(tx: Tx, claims: Sequence[ClaimedStart]) -> dict[str, Schedule]:
    return tx.schedules.get_many({c.schedule_id for c in claims if c.schedule_id})


def _wanted(claim: ClaimedStart, schedules: dict[str, Schedule]) -> tuple[str, str | None]:
    """(workflow, pinned version or None for the active one) a claim resolves to (RS-7)."""
    schedule = schedules.get(claim.schedule_id or "")
    if schedule is not None and schedule.version_policy is VersionPolicy.PINNED:
        return claim.workflow, schedule.pinned_version
    return claim.workflow, None


def _definitions_for(
    tx: Tx, claims: Sequence[ClaimedStart], schedules: dict[str, Schedule]
) -> dict[tuple[str, str | None], Definition | None]:
    wanted = {_wanted(claim, schedules) for claim in claims}
    resolved: dict[tuple[str, str | None], Definition | None] = {}
    for name, version in wanted:
        if version is None:
            resolved[(name, None)] = tx.definitions.active(name)
        else:
            pinned = tx.definitions.get(name, version)
            usable = pinned is not None and pinned.state != DefinitionState.RETIRED
            resolved[(name, version)] = pinned if usable else None
    return resolved


def _needs_schedule_lock(decision: Decision, schedules: dict[str, Schedule]) -> bool:
    schedule = schedules.get(decision.claim.schedule_id or "")
    return (
        isinstance(decision, Dispatched)
        and schedule is not None
        and schedule.policy.overlap is not OverlapPolicy.ALLOW_ALL
    )


def _decide(
    services: Services,
    claim: ClaimedStart,
    definition: Definition | None,
    loaded: set[tuple[str, str]],
) -> Decision:
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


def _new_run(decision: Dispatched) -> NewRun:
    order, claim = decision.order, decision.claim
    return NewRun(
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


def _mark_dispatched(tx: Tx, decision: Dispatched, now: datetime, report: DispatchReport) -> bool:
    claim = decision.claim
    won = tx.starts.compare_and_set(
        claim.id,
        claim.version,
        now,
        state=StartState.DISPATCHED.value,
        attempts=claim.attempts + 1,
        definition_version=decision.definition.version,
        artifact=decision.definition.artifact,
        dispatched_at=now,
        next_attempt_at=None,
        claimed_by=None,
        lease_until=None,
    )
    if not won:
        report.lost += 1
        return False
    _note_dispatched(decision, now, report)
    tx.schedules.note_fired(_fired([decision]), now)
    return True


def _note_dispatched(decision: Dispatched, now: datetime, report: DispatchReport) -> None:
    claim = decision.claim
    report.dispatched.append(claim.id)
    if claim.due_at is not None:
        report.lag_seconds.append((now - claim.due_at).total_seconds())


def _fired(dispatched: Sequence[Dispatched]) -> list[Fired]:
    """Schedule bookkeeping of dispatched occurrences, oldest occurrence first (the latest
    of a schedule wins)."""
    claims = sorted(
        (d.claim for d in dispatched if d.claim.schedule_id and d.claim.occurrence_at),
        key=lambda c: (c.occurrence_at, c.id),
    )
    return [Fired(c.schedule_id, c.run_id) for c in claims if c.schedule_id]


def _record(
    services: Services,
    tx: Tx,
    decisions: Sequence[Decision],
    now: datetime,
    report: DispatchReport,
) -> None:
    dispatched = [d for d in decisions if isinstance(d, Dispatched)]
    won = tx.starts.mark_dispatched_many(
        [
            DispatchedStart(
                d.claim.id,
                d.claim.version,
                d.claim.attempts + 1,
                d.definition.version,
                d.definition.artifact,
            )
            for d in dispatched
        ],
        now,
    )
    for ready in dispatched:
        if ready.claim.id in won:
            _note_dispatched(ready, now, report)
        else:
            report.lost += 1
    tx.schedules.note_fired(_fired([d for d in dispatched if d.claim.id in won]), now)
    for decision in decisions:
        if isinstance(decision, NotDispatched):
            _record_failure(services, tx, decision, now, report)
    tx.runs.insert_new([_new_run(d) for d in dispatched if d.claim.id in won], now)


def _record_failure(
    services: Services, tx: Tx, decision: NotDispatched, now: datetime, report: DispatchReport
) -> None:
    claim, failure = decision.claim, decision.failure
    attempts = claim.attempts + 1
    error = LastError(failure.code, failure.message, now)
    retry = failure.failure_class is FailureClass.START_SPECIFIC and not backoff.exhausted(attempts)
    if retry:
        next_at = now + backoff.next_delay(attempts, services.rng)
        changes = {
            "state": StartState.SCHEDULED.value,
            "next_attempt_at": next_at,
            "due_at": next_at,
        }
    else:
        changes = {
            "state": StartState.FAILED.value,
            "reason": failure.code,
            "next_attempt_at": None,
        }
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
        return
    if retry:
        report.retried.append(claim.id)
        return
    report.failed.append(claim.id)
    kind = "occurrence" if claim.schedule_id else "start"
    tx.findings.raise_finding(
        claim.tenant,
        f"{kind}_failed",
        claim.id,
        "error",
        f"{kind} {claim.id} failed after {attempts} attempt(s): {failure.message}",
        now,
    )
    if claim.schedule_id and failure.failure_class is FailureClass.CONFIGURATION:
        _auto_disable(tx, claim, failure, now)


def _auto_disable(tx: Tx, claim: ClaimedStart, failure: DispatchFailure, now: datetime) -> None:
    """CR-3: a configuration failure would fail every later fire too, so the schedule stops
    and says why; a human re-enables it after fixing the cause."""
    assert claim.schedule_id is not None
    for _ in range(3):  # a concurrent edit moves the version; read it again
        schedule = tx.schedules.get(claim.tenant, claim.schedule_id)
        if schedule is None or not schedule.enabled:
            return
        status = auto_disabled_status(failure.message)
        if tx.schedules.compare_and_set(
            schedule.id, schedule.version, now, enabled=False, last_status=status
        ):
            return


def _dispatch_under_schedule_lock(
    services: Services, decision: Dispatched, report: DispatchReport
) -> None:
    """Overlap (RS-3) decided at dispatch, one schedule at a time: a run is unfinished
    until it is terminal."""
    claim = decision.claim
    assert claim.schedule_id is not None
    with services.store.transaction() as tx:
        now = services.clock.now()
        schedule = tx.schedules.lock_for_dispatch(claim.schedule_id)
        assert schedule is not None
        verdict = overlap_decision(
            schedule.policy.overlap,
            previous_unfinished=tx.runs.count_active_of_schedule(schedule.id) > 0,
            one_already_buffered=tx.starts.buffered_of(schedule.id) > 0,
        )
        if verdict is OverlapDecision.START:
            services.engine.start([decision.order])
            if _mark_dispatched(tx, decision, now, report):
                tx.runs.insert_new([_new_run(decision)], now)
            return
        state = StartState.SKIPPED if verdict is OverlapDecision.SKIP else StartState.BUFFERED
        won = tx.starts.compare_and_set(
            claim.id,
            claim.version,
            now,
            state=state.value,
            reason="overlap" if state is StartState.SKIPPED else None,
            claimed_by=None,
            lease_until=None,
        )
        if not won:
            report.lost += 1
        elif state is StartState.SKIPPED:
            report.skipped.append(claim.id)
        else:
            report.buffered.append(claim.id)


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
    decisions: Sequence[Decision],
    report: DispatchReport,
    now: datetime,
) -> None:
    outcome: dict[str, str] = {}
    for name, ids in (
        ("start.dispatched", report.dispatched),
        ("start.retried", report.retried),
        ("start.failed", report.failed),
        ("occurrence.skipped", report.skipped),
        ("occurrence.buffered", report.buffered),
    ):
        outcome.update(dict.fromkeys(ids, name))
    for decision in decisions:
        claim = decision.claim
        found = outcome.get(claim.id)
        if found is None:
            continue
        name = found
        data: dict[str, object] = {"run_id": claim.run_id, "at": to_rfc3339(now)}
        if isinstance(decision, NotDispatched):
            data = {"code": decision.failure.code, "attempts": claim.attempts + 1}
        if name == "occurrence.skipped":
            data = {"reason": "overlap", "schedule_id": claim.schedule_id}
        if claim.due_at is not None and name == "start.dispatched":
            data["lag_ms"] = round((now - claim.due_at).total_seconds() * 1000, 1)
        services.events.emit(Event(name, claim.tenant, claim.id, data))
