"""The one way an occurrence row of a schedule is made, whatever decided it: the
generation pass, a Temporal fire, a trigger or backfill, a skip Temporal made."""

from __future__ import annotations

from datetime import datetime

from punctual.domain.ids import new_id
from punctual.domain.recurrence import DstSkip
from punctual.domain.schedules import OccurrenceOrigin, Schedule, SkippedRange
from punctual.domain.starts import StartState
from punctual.ports.records import EncryptedInput, NewOccurrence


def new_occurrence(
    schedule: Schedule,
    encrypted: EncryptedInput,
    at: datetime,
    due_at: datetime,
    *,
    nominal: str | None = None,
    dst_adjustment: str | None = None,
    state: StartState = StartState.SCHEDULED,
    reason: str | None = None,
    reason_detail: str | None = None,
    range_last: datetime | None = None,
    range_count: int | None = None,
    origin: OccurrenceOrigin = OccurrenceOrigin.SCHEDULE,
    overlap: str | None = None,
    rerun: int = 0,
    spec_indexes: tuple[int, ...] | None = None,
    calendar_moved_from: datetime | None = None,
) -> NewOccurrence:
    """A row for ``schedule`` at ``at`` with fresh occurrence and run ids; its run (if it
    gets one) carries the schedule's current revision, workflow, class and creator."""
    return NewOccurrence(
        id=new_id("occ"),
        tenant=schedule.tenant,
        schedule_id=schedule.id,
        revision=schedule.revision,
        workflow=schedule.workflow,
        workload_class=schedule.workload_class,
        input=encrypted,
        created_by=schedule.created_by,
        business_request_id=schedule.name,
        occurrence_at=at,
        due_at=due_at,
        nominal=nominal,
        dst_adjustment=dst_adjustment,
        run_id=new_id("run"),
        state=state.value,
        reason=reason,
        reason_detail=reason_detail,
        start_deadline_at=(
            due_at + schedule.policy.start_deadline
            if schedule.policy.start_deadline is not None and state is StartState.SCHEDULED
            else None
        ),
        range_last=range_last,
        range_count=range_count,
        origin=origin.value,
        overlap=overlap,
        rerun=rerun,
        spec_indexes=list(spec_indexes) if spec_indexes is not None else None,
        calendar_moved_from=calendar_moved_from,
    )


def skipped_range_row(
    schedule: Schedule, encrypted: EncryptedInput, skipped: SkippedRange
) -> NewOccurrence:
    """Fire times not generated, recorded once as a range at its first instant (RS-4)."""
    return new_occurrence(
        schedule,
        encrypted,
        skipped.first,
        skipped.first,
        state=StartState.SKIPPED,
        reason=skipped.reason,
        reason_detail=skipped.detail,
        range_last=skipped.last,
        range_count=skipped.count,
    )


def dst_gap_row(schedule: Schedule, encrypted: EncryptedInput, skip: DstSkip) -> NewOccurrence:
    """A named wall time that DST removed, recorded as skipped with the wall time it named."""
    return new_occurrence(
        schedule,
        encrypted,
        skip.at,
        skip.at,
        nominal=skip.nominal.isoformat(),
        dst_adjustment=skip.dst_adjustment.value,
        state=StartState.SKIPPED,
        reason="dst_gap",
    )
