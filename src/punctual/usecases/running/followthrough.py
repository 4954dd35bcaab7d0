"""Follow-through of schedules' runs (SPEC CR-4, CR-5): one use case for every run end.

Every path that ends a run, on every engine (the local worker's outcome, a terminate or
cancel, a timeout, the pending timeout, the reaper's backstop, lost workers exhausted, the
Temporal ledger), sets the run's ``ended_at``. This pass claims the runs of occurrences
that ended and were not yet followed through, so no end path has to remember to call it
and a crash between the end and the follow-through only delays it: the claim comes back.
Idempotent per occurrence: a run is followed through once (its stage moves to done in the
same transaction as the record, the notifications and the outbox rows).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from punctual.domain.followthrough import (
    FollowThroughStatus,
    Verdict,
    judge,
    policy_rules,
    regression_text,
)
from punctual.domain.runs import RunErrorCode
from punctual.domain.schedules import Schedule
from punctual.domain.timeutil import to_rfc3339
from punctual.ports.events import Event
from punctual.ports.records import EndedRun, EndedStatus, FollowThroughRecord
from punctual.ports.store import Tx
from punctual.usecases.kernel.context import Services
from punctual.usecases.outbound.outbox import NotificationEvent, notify

log = logging.getLogger("punctual.follow_through")

STAGE_TIMED_OUT = 1
"""``finalize_timed_out`` is recorded; the run's later end only moves ``last_status``."""
STAGE_DONE = 2
SCHEDULE_FAILING = "schedule_failing"
"""The finding of a schedule whose last ``FAILING_STREAK`` runs failed or timed out (OP-2)."""
FAILING_STREAK = 3
_FAILURES = frozenset({"failed", "timed_out"})
_OUTCOMES = _FAILURES | {"completed"}
"""Run ends that say how a schedule fares; a cancel or terminate is an operator's doing."""


@dataclass(frozen=True)
class FollowThroughReport:
    recorded: int
    """Occurrences whose follow-through was written in this pass."""
    notified: int
    """Events that notified someone (feeds and webhooks)."""
    claimed: int


def follow_through(services: Services, limit: int = 200) -> FollowThroughReport:
    """One pass: the runs that ended, then the runs past the deadline, in one transaction."""
    now = services.clock.now()
    deadline = timedelta(seconds=services.policy.follow_through_deadline_seconds)
    with services.store.transaction() as tx:
        ended = tx.follow_through.claim_ended(limit)
        overdue = tx.follow_through.claim_overdue(now - deadline, limit)
        if not ended and not overdue:
            return FollowThroughReport(0, 0, 0)
        schedules = tx.schedules.get_many({r.schedule_id for r in [*ended, *overdue]})
        records: list[FollowThroughRecord] = []
        notified = 0
        for run in ended:
            if run.stage == STAGE_TIMED_OUT:
                continue  # finalize_timed_out stands (CR-5); only last_status moves below
            schedule = schedules.get(run.schedule_id)
            verdict = _verdict(tx, schedule, run)
            records.append(_record(run, verdict, now))
            if verdict.status is FollowThroughStatus.REGRESSED and _live(schedule):
                assert schedule is not None
                notify(services, tx, _notice(schedule, run, verdict), schedule.created_by, now)
                notified += 1
            if _never_began_in_time(run) and _live(schedule):
                assert schedule is not None
                _too_late(services, tx, schedule, run, now)
                notified += 1
        for run in overdue:
            verdict = Verdict(
                FollowThroughStatus.FINALIZE_TIMED_OUT,
                f"the run did not end within {deadline.total_seconds():g} s of its creation; "
                "it is left running, and its end will still update the schedule's last status",
            )
            records.append(_record(run, verdict, now))
            schedule = schedules.get(run.schedule_id)
            if _live(schedule):
                assert schedule is not None
                notify(services, tx, _notice(schedule, run, verdict), schedule.created_by, now)
                notified += 1
        tx.follow_through.record(records)
        tx.schedules.note_ended(
            [EndedStatus(r.schedule_id, r.run_id, r.state, r.occurrence_at) for r in ended]
        )
        _judge_streaks(tx, ended, schedules, now)
        tx.follow_through.mark_stage([r.run_id for r in ended], STAGE_DONE)
        tx.follow_through.mark_stage([r.run_id for r in overdue], STAGE_TIMED_OUT)
    for record in records:
        services.events.emit(
            Event(
                "follow_through.recorded",
                record.tenant,
                record.occurrence_id,
                {
                    "status": record.status,
                    "run_id": record.run_id,
                    "schedule_id": record.schedule_id,
                },
            )
        )
    return FollowThroughReport(len(records), notified, len(ended) + len(overdue))


def _live(schedule: Schedule | None) -> bool:
    """A deleted schedule's late runs are still recorded, but nobody is alerted."""
    return schedule is not None and schedule.deleted_at is None


def _judge_streaks(
    tx: Tx, ended: list[EndedRun], schedules: dict[str, Schedule], now: datetime
) -> None:
    """Raise ``schedule_failing`` for a schedule whose last ``FAILING_STREAK`` runs to end
    failed or timed out, and clear it once one of its runs completed (OP-2).

    Judged here, off the worker's path, from the runs table as it stands, for every
    schedule with an outcome in this pass: a schedule whose latest end in the pass is a
    completion is cleared without a read (runs that ended later are judged by a later
    pass). The judgement lock makes concurrent passes judge in turn, so a completion's
    pass always sees, and clears, what a pass of an earlier failure raised. A few
    statements per pass, however many schedules it has.
    """
    latest_end: dict[str, EndedRun] = {}
    for run in ended:  # claimed oldest end first: the last one seen is the latest
        if run.state in _OUTCOMES:
            latest_end[run.schedule_id] = run
    if not latest_end:
        return
    tx.follow_through.hold_outcomes()
    suspects = [
        schedule_id
        for schedule_id, run in latest_end.items()
        if run.state in _FAILURES and _live(schedules.get(schedule_id))
    ]
    outcomes = tx.follow_through.latest_outcomes(suspects, FAILING_STREAK)
    cleared: list[tuple[str, str]] = []
    for schedule_id, run in sorted(latest_end.items()):
        latest = outcomes.get(schedule_id, [])
        schedule = schedules.get(schedule_id)
        if len(latest) == FAILING_STREAK and all(state in _FAILURES for _, state in latest):
            assert schedule is not None  # only live schedules were read
            tx.findings.raise_finding(
                run.tenant,
                SCHEDULE_FAILING,
                schedule_id,
                "error",
                _failing_text(schedule, latest),
                now,
            )
        elif schedule_id not in suspects or any(state == "completed" for _, state in latest):
            cleared.append((run.tenant, schedule_id))
    tx.findings.clear_each(SCHEDULE_FAILING, cleared)


def _failing_text(schedule: Schedule, latest: list[tuple[str, str]]) -> str:
    ends = ", ".join(f"{run_id} {state}" for run_id, state in latest)
    return (
        f"schedule {schedule.name} ({schedule.id}): its last {len(latest)} runs failed or "
        f"timed out (latest first: {ends}); look at their errors. This clears by itself "
        "when a run of the schedule completes"
    )


def _verdict(tx: Tx, schedule: Schedule | None, run: EndedRun) -> Verdict:
    rules = policy_rules(schedule.regression if schedule else None)
    if not rules or run.state != "completed":
        return judge(rules, run.state, run.result, None, has_baseline=False)
    baseline = tx.follow_through.baseline(run.schedule_id, run.occurrence_at)
    verdict = judge(
        rules,
        run.state,
        run.result,
        baseline.result if baseline else None,
        has_baseline=baseline is not None,
    )
    return replace(verdict, previous_run_id=baseline.run_id if baseline else None)


def _record(run: EndedRun, verdict: Verdict, now: datetime) -> FollowThroughRecord:
    return FollowThroughRecord(
        occurrence_id=run.occurrence_id,
        tenant=run.tenant,
        schedule_id=run.schedule_id,
        run_id=run.run_id,
        status=verdict.status.value,
        reason=verdict.reason,
        previous_run_id=verdict.previous_run_id,
        regressions=[r.as_dict() for r in verdict.regressions],
        recorded_at=now,
    )


def _never_began_in_time(run: EndedRun) -> bool:
    """The worker refused to begin its body after the start deadline (RS-10)."""
    return run.error is not None and run.error.get("code") == RunErrorCode.TOO_LATE.value


def _too_late(services: Services, tx: Tx, schedule: Schedule, run: EndedRun, now: datetime) -> None:
    """As dispatch does for an occurrence past its deadline: a finding and a
    ``start_failed`` notification, so a run that never began is not a silent cancel."""
    assert run.error is not None
    message = str(run.error.get("message") or "its start deadline passed")
    tx.findings.raise_finding(
        run.tenant,
        "occurrence_failed",
        run.occurrence_id,
        "error",
        f"occurrence {run.occurrence_id} of schedule {schedule.name} never began: {message}",
        now,
    )
    event = NotificationEvent(
        tenant=run.tenant,
        kind="start_failed",
        title=f"{schedule.name}: run {run.run_id} began too late to run",
        text=(
            f"Schedule {schedule.name}: the run {run.run_id} of the occurrence at "
            f"{to_rfc3339(run.occurrence_at)} never began: its start deadline had passed"
        ),
        schedule_id=schedule.id,
        occurrence_id=run.occurrence_id,
        run_id=run.run_id,
        details={"schedule_name": schedule.name, "code": "too_late", "message": message},
    )
    notify(services, tx, event, schedule.created_by, now)


def _notice(schedule: Schedule, run: EndedRun, verdict: Verdict) -> NotificationEvent:
    """What the schedule's owner is told of a regression or of a run past its deadline."""
    occurrence_at = to_rfc3339(run.occurrence_at)
    details: dict[str, Any]
    if verdict.status is FollowThroughStatus.REGRESSED:
        kind, title = "regression", f"{schedule.name} regressed"
        text = regression_text(schedule.name, verdict.regressions)
        details = {
            "previous_run_id": verdict.previous_run_id,
            "occurrence_at": occurrence_at,
            "regressions": [r.as_dict() for r in verdict.regressions],
        }
    else:
        kind, title = "finalize_timed_out", f"{schedule.name}: run {run.run_id} has not ended"
        text = (
            f"Schedule {schedule.name}: run {run.run_id} of the occurrence at "
            f"{occurrence_at} has not ended; follow-through stopped waiting"
        )
        details = {"occurrence_at": occurrence_at, "reason": verdict.reason}
    return NotificationEvent(
        tenant=run.tenant,
        kind=kind,
        title=title,
        text=text,
        schedule_id=schedule.id,
        occurrence_id=run.occurrence_id,
        run_id=run.run_id,
        details={"schedule_name": schedule.name, **details},
    )
