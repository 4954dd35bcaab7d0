"""Dispatch: turn due starts into runs, exactly one run per start (DP-1..DP-3, OS-6, RS-3).

One pass claims a page of due starts under a lease, resolves the definition and a worker
that has it loaded at *this* moment, validates the input again, asks the engine to start
the runs, then records every outcome in one transaction. The run id was allocated when
the start was created, so a pass that crashes anywhere converges on the same run when the
lease expires and another pass picks the start up.

A claim is not a user-visible transition (FT-5): it leaves ``version`` alone and takes a
claim token (claimer, claim sequence) instead. Every outcome is recorded under that token
while the lease runs, so a cancel or reschedule that came in meanwhile wins and a runner
whose lease ran out records nothing. A started run whose dispatch lost that way is
withdrawn from the engine when no later dispatch will take it over.

One bad item never stops the others (FT-1): whatever goes wrong while deciding one start
(its input cannot be decrypted, the decision raises) becomes that start's own outcome.
A pass never outlives its claims' lease (FT-2): the engine is asked in chunks and the
claims are renewed between them.

Occurrences of schedules are starts too. Those whose schedule has an overlap policy
other than ``allow_all`` are decided one at a time under their schedule's lock, so
that two runners cannot both decide "the previous run is finished"; their run is recorded
in that transaction and the engine is asked after its commit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from punctual.domain import backoff, failures
from punctual.domain.failures import DispatchFailure, FailureClass
from punctual.domain.permissions import Action, Principal, Role, allowed
from punctual.domain.runs import Definition, DefinitionState
from punctual.domain.schedules import (
    OverlapDecision,
    Schedule,
    VersionPolicy,
    auto_disabled_status,
    needs_overlap_lock,
    occurrence_overlap_decision,
)
from punctual.domain.starts import LastError, StartState
from punctual.domain.timeutil import to_rfc3339
from punctual.errors import Unavailable
from punctual.ports.codec import InputKeyUnknown, InputUndecryptable
from punctual.ports.engine import EngineUnavailable, RunOrder
from punctual.ports.events import Event
from punctual.ports.records import ClaimedStart, DispatchedStart, Fired, NewRun
from punctual.ports.store import Tx
from punctual.usecases.firing import schedule_driver
from punctual.usecases.kernel.context import Services
from punctual.usecases.outbound.outbox import NotificationEvent, notify, notify_auto_disabled
from punctual.usecases.recurring import history
from punctual.usecases.running.definitions import input_problems

log = logging.getLogger("punctual.dispatch")

START_CHUNK = 64
"""Orders per engine call. On Temporal with default options one call of 64 is bounded at
19 s, inside two thirds of the default 30 s lease, so renewing the claims between chunks
(every third of the lease) keeps every claim live for the whole pass (FT-2)."""

_NO_DISPATCH_FOLLOWS = frozenset({StartState.CANCELED, StartState.FAILED, StartState.SKIPPED})


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


class _Lease:
    """The claims of one pass, renewed once a third of the lease has passed since they were
    taken or last renewed; a claim that another runner took over is dropped (FT-2).

    The store times the lease itself (the database's clock on PostgreSQL); this process's
    clock only measures the time elapsed since the last renewal, which a skew leaves
    alone."""

    def __init__(self, services: Services, claims: Sequence[ClaimedStart], at: datetime) -> None:
        self._services = services
        self._length = timedelta(seconds=services.policy.lease_seconds)
        self._open = {claim.id: claim for claim in claims}
        self._renewed_at = at
        self.lost: set[str] = set()

    def keep(self) -> None:
        now = self._services.clock.now()
        if now - self._renewed_at < self._length / 3 or not self._open:
            return
        tokens = [claim.token for claim in self._open.values()]
        with self._services.store.transaction() as tx:
            renewed = tx.starts.renew_claims(tokens, self._services.policy.lease_seconds, now)
        for start_id in set(self._open) - renewed:
            del self._open[start_id]
            self.lost.add(start_id)
        self._renewed_at = now

    def holds(self, claim: ClaimedStart) -> bool:
        return claim.id in self._open

    def settled(self, claims: Sequence[ClaimedStart]) -> None:
        """Recorded or released: no longer renewed."""
        for claim in claims:
            self._open.pop(claim.id, None)


def dispatch_due(services: Services, runner_id: str, page_size: int) -> DispatchReport:
    """One pass over at most ``page_size`` due starts. Raises ``Unavailable`` on outages,
    after recording what it could and giving back the rest of its claims uncharged."""
    policy = services.policy
    with services.store.transaction() as tx:
        now = services.clock.now()  # with SQLite's write lock held, as in ``claim_runs``
        claims = tx.starts.claim_due(now, page_size, runner_id, policy.lease_seconds)
    report = DispatchReport(claimed=len(claims))
    if not claims:
        return report
    lease = _Lease(services, claims, now)
    services.crash_point("after_claim")
    try:
        loaded = {(name, version) for name, version, _ in services.engine.loaded()}
        with services.store.transaction(readonly=True) as tx:
            schedules = _schedules_of(tx, claims)
            definitions = _definitions_for(tx, claims, schedules)
            creators = tx.identity.member_roles({(c.tenant, c.created_by) for c in claims})
        decisions = [
            _too_late(claim, now)
            or (
                _decide_alone(services, claim, definitions.get(_wanted(claim, schedules)), loaded)
                if _may_create(creators.get((claim.tenant, claim.created_by)))
                else NotDispatched(claim, failures.creator_access_revoked(claim.created_by))
            )
            for claim in claims
        ]
    except Unavailable:
        _release(services, claims)
        raise
    serialized = [d for d in decisions if _needs_schedule_lock(d, schedules)]
    batch = [d for d in decisions if not _needs_schedule_lock(d, schedules)]
    ready = [d for d in batch if isinstance(d, Dispatched)]
    started, outage = _start_in_chunks(services, lease, ready)
    services.crash_point("after_engine_start")
    started_ids = {d.claim.id for d in started}
    report.lost += sum(1 for d in ready if d.claim.id in lease.lost)
    unstarted = [
        d.claim for d in ready if d.claim.id not in started_ids and d.claim.id not in lease.lost
    ]
    if unstarted:
        _release(services, unstarted)
        lease.settled(unstarted)
    lease.keep()  # the lease is checked again by the record itself
    recorded_at = services.clock.now()
    to_record = [d for d in batch if not isinstance(d, Dispatched) or d.claim.id in started_ids]
    with services.store.transaction() as tx:
        _record(services, tx, to_record, recorded_at, report)
        services.crash_point("during_record")
    lease.settled([d.claim for d in to_record])
    services.crash_point("after_record")
    for index, decision in enumerate(serialized):
        assert isinstance(decision, Dispatched)
        if outage is not None:
            rest = [d.claim for d in serialized[index:]]
            _release(services, rest)
            break
        lease.keep()
        if not lease.holds(decision.claim):
            report.lost += 1
            continue
        try:
            if not _dispatch_under_schedule_lock(services, decision, report):
                continue
        except Unavailable:
            _release(services, [d.claim for d in serialized[index:]])
            raise
        except Exception as exc:  # FT-1: this occurrence alone; its lease runs out
            log.error(
                "event=dispatch_decision_failed start=%s error=%s",
                decision.claim.id,
                type(exc).__name__,
            )
            continue
        lease.settled([decision.claim])
        try:
            # After the commit: the run is recorded `pending`, so no other runner decides
            # "the previous run is finished", and the schedule's lock is not held across
            # the engine call. If the call fails the run stays pending, and the engine's
            # own recovery starts it (the Temporal sync restarts pending runs it does not
            # know; the local engine's workers claim them from the store).
            services.engine.start([decision.order])
        except EngineUnavailable as exc:
            outage = exc
    recorded = set(report.dispatched)
    _withdraw_lost(services, [d for d in started if d.claim.id not in recorded])
    services.engine.on_recorded(
        [d.order for d in decisions if isinstance(d, Dispatched) and d.claim.id in recorded]
    )
    _emit(services, decisions, report, recorded_at)
    if outage is not None:
        raise outage
    return report


def _start_in_chunks(
    services: Services, lease: _Lease, ready: Sequence[Dispatched]
) -> tuple[list[Dispatched], EngineUnavailable | None]:
    """Start the runs chunk by chunk, keeping the claims live in between; stop at the first
    outage (what was started is still recorded, the rest released)."""
    started: list[Dispatched] = []
    for offset in range(0, len(ready), START_CHUNK):
        lease.keep()
        chunk = [d for d in ready[offset : offset + START_CHUNK] if lease.holds(d.claim)]
        try:
            services.engine.start([d.order for d in chunk])
        except EngineUnavailable as exc:
            return started, exc
        started.extend(chunk)
    return started, None


def _withdraw_lost(services: Services, lost: Sequence[Dispatched]) -> None:
    """Runs started whose dispatch could not be recorded: when the start is canceled (or
    otherwise ended) no dispatch will follow, so its execution is terminated now; a start
    that is pending again is taken over by the next dispatch, which replaces the
    execution. Best effort: an execution also exits by itself once it reads its start."""
    if not lost:
        return
    with services.store.transaction(readonly=True) as tx:
        states = tx.starts.states_of([d.claim.id for d in lost])
    for decision in lost:
        if states.get(decision.claim.id) not in _NO_DISPATCH_FOLLOWS:
            continue
        try:
            services.engine.terminate(decision.claim.tenant, decision.claim.run_id)
        except Unavailable as exc:
            log.warning(
                "event=dispatch_withdraw_failed start=%s run=%s error=%s",
                decision.claim.id,
                decision.claim.run_id,
                exc,
            )


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
    claim = decision.claim
    return (
        isinstance(decision, Dispatched)
        and schedule is not None
        and needs_overlap_lock(schedule.policy.overlap, claim.occurrence_origin, claim.overlap)
    )


def _too_late(claim: ClaimedStart, now: datetime) -> NotDispatched | None:
    """RS-10: an occurrence past its start deadline is never started late."""
    deadline = claim.start_deadline_at
    if deadline is None or now <= deadline:
        return None
    return NotDispatched(claim, failures.too_late(to_rfc3339(deadline)))


def _may_create(role: Role | None) -> bool:
    """CR-3: runs carry their creator's identity, so the creator must still be allowed to
    create them when they fire."""
    return role is not None and allowed(Principal("", "", role), Action.CREATE)


def _decide_alone(
    services: Services,
    claim: ClaimedStart,
    definition: Definition | None,
    loaded: set[tuple[str, str]],
) -> Decision:
    """FT-1: whatever goes wrong deciding one start is that start's outcome alone. An
    outage (``Unavailable``) is nobody's fault and propagates: the pass gives its claims
    back uncharged."""
    try:
        return _decide(services, claim, definition, loaded)
    except InputUndecryptable:
        return NotDispatched(claim, failures.input_undecryptable(claim.input.key_id))
    except InputKeyUnknown:
        return NotDispatched(claim, failures.input_key_unknown(claim.input.key_id))
    except Unavailable:
        raise
    except Exception as exc:
        # Only the type: an exception's text may quote the input (OS-9).
        log.error("event=dispatch_decision_failed start=%s error=%s", claim.id, type(exc).__name__)
        return NotDispatched(claim, failures.dispatch_error(type(exc).__name__))


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
        replaces_unrecorded=claim.claim_seq > 1,
        traceparent=claim.traceparent,
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


def _settled(
    tx: Tx, claim: ClaimedStart, now: datetime, report: DispatchReport, **changes: Any
) -> bool:
    """What was decided for a claimed start, recorded under its claim, which it leaves; a
    claim that was taken over meanwhile records nothing and counts as lost."""
    won = tx.starts.settle_claim(claim.token, now, claimed_by=None, lease_until=None, **changes)
    if not won:
        report.lost += 1
    return won


def _mark_dispatched(tx: Tx, decision: Dispatched, now: datetime, report: DispatchReport) -> bool:
    claim = decision.claim
    if not _settled(
        tx,
        claim,
        now,
        report,
        state=StartState.DISPATCHED.value,
        attempts=claim.attempts + 1,
        definition_version=decision.definition.version,
        artifact=decision.definition.artifact,
        dispatched_at=now,
        next_attempt_at=None,
    ):
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
                d.claim.token,
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
    next_at = now + backoff.next_delay(attempts, services.rng) if retry else now
    deadline = claim.start_deadline_at
    if retry and deadline is not None and next_at > deadline:
        # Retries stop at the deadline (RS-10): the next attempt would start it late.
        retry, failure = False, failures.too_late(to_rfc3339(deadline))
        error = LastError(failure.code, failure.message, now)
    too_late = failure.failure_class is FailureClass.TOO_LATE
    if retry:
        changes = {
            "state": StartState.SCHEDULED.value,
            "next_attempt_at": next_at,
            "due_at": next_at,
        }
    else:
        changes = {
            "state": (StartState.SKIPPED if too_late else StartState.FAILED).value,
            "reason": failure.code,
            "next_attempt_at": None,
        }
    if not _settled(tx, claim, now, report, attempts=attempts, last_error=error, **changes):
        return
    if retry:
        report.retried.append(claim.id)
        return
    (report.skipped if too_late else report.failed).append(claim.id)
    kind = "occurrence" if claim.schedule_id else "start"
    tx.findings.raise_finding(
        claim.tenant,
        f"{kind}_failed",
        claim.id,
        "error",
        f"{kind} {claim.id} failed after {attempts} attempt(s): {failure.message}",
        now,
    )
    notify(
        services,
        tx,
        NotificationEvent(
            tenant=claim.tenant,
            kind="start_failed",
            title=f"{kind} {claim.id} failed",
            text=(
                f"The {kind} {claim.id} of workflow {claim.workflow} failed for good after "
                f"{attempts} attempt(s): {failure.code}"
            ),
            schedule_id=claim.schedule_id,
            occurrence_id=claim.id if claim.schedule_id else None,
            run_id=claim.run_id,
            details={
                "start_id": claim.id,
                "workflow": claim.workflow,
                "code": failure.code,
                "message": failure.message,
                "attempts": attempts,
            },
        ),
        claim.created_by,
        now,
    )
    if claim.schedule_id and failure.failure_class is FailureClass.CONFIGURATION:
        _auto_disable(services, tx, claim, failure, now)


def _auto_disable(
    services: Services, tx: Tx, claim: ClaimedStart, failure: DispatchFailure, now: datetime
) -> None:
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
            notify_auto_disabled(services, tx, schedule, status, now)
            history.auto_disabled(tx, schedule, now)
            # Not a Temporal call inside dispatch: the fire's workflow or the sweep pauses it.
            schedule_driver.mark_drifted(services, tx, schedule.id, now)
            return


def _dispatch_under_schedule_lock(
    services: Services, decision: Dispatched, report: DispatchReport
) -> bool:
    """Overlap (RS-3) decided at dispatch, one schedule at a time: a run is unfinished
    until it is terminal. True if the run was recorded and the engine must start it."""
    claim = decision.claim
    assert claim.schedule_id is not None
    with services.store.transaction() as tx:
        schedule = tx.schedules.lock_for_dispatch(claim.schedule_id)
        assert schedule is not None
        verdict = occurrence_overlap_decision(
            schedule.policy.overlap,
            claim.occurrence_origin,
            claim.overlap,
            previous_unfinished=tx.runs.count_active_of_schedule(schedule.id) > 0,
            one_already_buffered=tx.starts.buffered_of(schedule.id) > 0,
        )
        # Read once the previous run was seen ended: a clock read before the lock wait
        # would stamp the new run before the end of the run it waited for.
        now = services.clock.now()
        if verdict is OverlapDecision.START:
            if not _mark_dispatched(tx, decision, now, report):
                return False
            tx.runs.insert_new([_new_run(decision)], now)
            return True
        state = StartState.SKIPPED if verdict is OverlapDecision.SKIP else StartState.BUFFERED
        reason = "overlap" if state is StartState.SKIPPED else None
        if _settled(tx, claim, now, report, state=state.value, reason=reason):
            kept = report.skipped if state is StartState.SKIPPED else report.buffered
            kept.append(claim.id)
        return False


def _release(services: Services, claims: Sequence[ClaimedStart]) -> None:
    """Give claims back untouched (no attempt charged, version unchanged) when the engine is
    down; a run it may have started in part is replaced by the next dispatch."""
    now = services.clock.now()
    with services.store.transaction() as tx:
        tx.starts.release_claims([claim.token for claim in claims], now)


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
