"""The public shapes of punctual's resources (API.md), shared by HTTP, CLI and Python API.

Projections never carry workflow input (OS-9), and reveal definition version,
artifact and run id of a start only after dispatch.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from punctual.domain.calendar_timeline import PlannedFire
from punctual.domain.recurrence import Fire
from punctual.domain.runs import Definition, Run
from punctual.domain.schedules import (
    OccurrenceOrigin,
    PreviewSkip,
    Schedule,
    ScheduleState,
    blackout_at,
    first_fire_after,
    skipped_range,
)
from punctual.domain.starts import LastError, ScheduledStart
from punctual.domain.timeutil import to_rfc3339
from punctual.ports.driver import SyncRecord, SyncState
from punctual.ports.records import Finding, FollowThroughRecord, MemberRecord, TokenRecord
from punctual.usecases.recurring.schedule_fields import view_of

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def ts(value: datetime | None) -> str | None:
    return to_rfc3339(value) if value is not None else None


def record_view(record: DataclassInstance, *, hidden: Collection[str]) -> dict[str, Any]:
    """Every field of a stored record but the ``hidden`` ones, in the record's order, shown
    as every view shows a field: instants in RFC 3339, mappings copied."""
    return {f.name: _shown(getattr(record, f.name)) for f in fields(record) if f.name not in hidden}


def _shown(value: Any) -> Any:
    if isinstance(value, datetime):
        return to_rfc3339(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def last_error_view(error: LastError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {"code": error.code, "message": error.message, "at": ts(error.at)}


def start_view(start: ScheduledStart) -> dict[str, Any]:
    dispatch = None
    if start.dispatch is not None:
        dispatch = {
            "run_id": start.dispatch.run_id,
            "definition_version": start.dispatch.definition_version,
            "artifact": start.dispatch.artifact,
            "dispatched_at": ts(start.dispatch.dispatched_at),
        }
    return {
        "id": start.id,
        "tenant": start.tenant,
        "workflow": start.workflow,
        "business_request_id": start.business_request_id,
        "start_at": ts(start.start_at),
        "time_zone": start.time_zone,
        "workload_class": start.workload_class,
        "attributes": dict(start.attributes),
        "traceparent": start.traceparent,
        "state": start.state.value,
        "version": start.version,
        "attempts": start.attempts,
        "next_attempt_at": ts(start.next_attempt_at),
        "last_error": last_error_view(start.last_error),
        "reason": start.reason,
        "created_by": start.created_by,
        "created_at": ts(start.created_at),
        "updated_at": ts(start.updated_at),
        "dispatch": dispatch,
    }


def run_view(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "workflow": run.workflow,
        "definition_version": run.definition_version,
        "artifact": run.artifact,
        "state": run.state.value,
        "origin": dict(run.origin),
        "started_by": run.started_by,
        "attempts": run.attempts,
        "result": run.result,
        "error": run.error,
        "traceparent": run.traceparent,
        "cancel_requested": run.cancel_requested,
        "created_at": ts(run.created_at),
        "claimed_at": ts(run.claimed_at),
        "started_at": ts(run.started_at),
        "ended_at": ts(run.ended_at),
    }


def definition_view(definition: Definition, loaded: bool) -> dict[str, Any]:
    return {
        "name": definition.name,
        "version": definition.version,
        "state": definition.state,
        "artifact": definition.artifact,
        "input_schema": definition.input_schema,
        "execution_timeout_seconds": definition.execution_timeout_seconds,
        "loaded": loaded,
        "created_at": ts(definition.created_at),
    }


def token_view(token: TokenRecord) -> dict[str, Any]:
    return {
        "id": token.id,
        "subject": token.subject,
        "created_at": ts(token.created_at),
        "expires_at": ts(token.expires_at),
        "revoked": token.revoked_at is not None,
        "revoked_at": ts(token.revoked_at),
    }


def member_view(member: MemberRecord) -> dict[str, Any]:
    return {
        "tenant": member.tenant,
        "subject": member.subject,
        "role": member.role.value,
        "created_at": ts(member.created_at),
    }


def finding_view(finding: Finding) -> dict[str, Any]:
    return {
        "id": finding.id,
        "kind": finding.kind,
        "subject_id": finding.subject_id,
        "severity": finding.severity,
        "message": finding.message,
        "created_at": ts(finding.created_at),
        "acknowledged": finding.acknowledged_at is not None,
        "acknowledged_at": ts(finding.acknowledged_at),
        "acknowledged_by": finding.acknowledged_by,
    }


def fire_view(fire: Fire) -> dict[str, Any]:
    """One preview item: the instant, its local time, the wall time named, the DST note."""
    return {
        "fire_at": ts(fire.at),
        "local": fire.local.isoformat(),
        "nominal": fire.nominal.isoformat(),
        "dst_adjustment": fire.dst_adjustment.value if fire.dst_adjustment else None,
    }


def planned_fire_view(fire: PlannedFire) -> dict[str, Any]:
    """A preview item: ``fire_view`` with the specs that yielded it and, when the
    calendar moved it off a closed day, the instant it would have had (RS-10)."""
    return fire_view(fire.fire) | {
        "spec_indexes": list(fire.spec_indexes),
        "calendar_moved_from": ts(fire.moved_from),
    }


def preview_skip_view(skip: PreviewSkip) -> dict[str, Any]:
    """A decision not to fire the preview met, with its reason (RS-10)."""
    return {
        "at": ts(skip.at),
        "reason": skip.reason,
        "detail": skip.detail,
        "spec_indexes": list(skip.spec_indexes),
        "until": ts(skip.until),
    }


def _upcoming(schedule: Schedule, now: datetime, state: ScheduleState) -> list[str | None]:
    """The next 5 fire times (RS-8) that will run: inside the schedule's end and out of its
    blackouts, whose fires count against ``max_occurrences`` too; none unless active."""
    if state is not ScheduleState.ACTIVE or schedule.deleted_at is not None:
        return []
    left = schedule.remaining_occurrences
    blackouts = schedule.policy.blackouts
    upcoming: list[str | None] = []
    cursor = now
    while len(upcoming) < 5 and left != 0:
        fire = first_fire_after(schedule.timing, cursor)
        if fire is None or (schedule.end_at is not None and fire.at > schedule.end_at):
            break
        blackout = blackout_at(blackouts, fire.at)
        if blackout is not None:
            # Jump over it, counting what it skips.
            end = blackout.end - timedelta(microseconds=1)
            skipped = skipped_range(schedule.timing, cursor, end, "blackout", limit=left)
            if left is not None and skipped is not None:
                left -= skipped.count
            cursor = end
            continue
        upcoming.append(ts(fire.at))
        cursor = fire.at
        if left is not None:
            left -= 1
    return upcoming


def sync_view(sync: SyncRecord | None) -> dict[str, Any]:
    """How the schedule's copy in the firing driver stands (CR-6); none yet is drift."""
    if sync is None:
        return {"state": "drifted", "checked_at": None}
    # An unfinished create is not fired by the driver until its saga completes.
    state = SyncState.ORPHANED if sync.state is SyncState.CREATING else sync.state
    return {"state": state.value, "checked_at": ts(sync.checked_at)}


def schedule_view(
    schedule: Schedule, now: datetime, *, sync: SyncRecord | None = None, driven: bool = False
) -> dict[str, Any]:
    """``driven``: a firing driver other than the SQL runner holds the schedule, so the view
    adds ``sync`` and its next fire times are the driver's, cached by ``sync``."""
    view = _schedule_fields(schedule, now)
    if driven:
        view["sync"] = sync_view(sync)
        cached = sync.next_fire_times if sync is not None else []
        active = view["state"] == ScheduleState.ACTIVE.value
        view["next_fire_times"] = [ts(at) for at in cached if at > now][:5] if active else []
    return view


def _schedule_fields(schedule: Schedule, now: datetime) -> dict[str, Any]:
    state = schedule.state
    paused_until = schedule.pause_until if schedule.paused_at(now) else None
    if paused_until is not None and state is ScheduleState.ACTIVE:
        state = ScheduleState.PAUSED
    return {
        "id": schedule.id,
        **view_of(schedule.settings),
        "version": schedule.version,
        "revision": schedule.revision,
        "pinned_version": schedule.pinned_version,
        "created_by": schedule.created_by,
        "last_fired_at": ts(schedule.last_fired_at),
        "last_run_id": schedule.last_run_id,
        "last_status": schedule.last_status,
        "next_fire_times": _upcoming(schedule, now, state),
        "state": state.value,
        "paused_until": ts(paused_until),
        "remaining_occurrences": schedule.remaining_occurrences,
        "created_at": ts(schedule.created_at),
        "updated_at": ts(schedule.updated_at),
    }


def occurrence_view(
    occurrence: ScheduledStart, follow: FollowThroughRecord | None = None
) -> dict[str, Any]:
    """An occurrence; a run of missed occurrences that was not generated carries ``range``;
    ``follow_through`` is null until its run ended (or its deadline passed, CR-4/CR-5)."""
    view: dict[str, Any] = {
        "id": occurrence.id,
        "schedule_id": occurrence.schedule_id,
        "occurrence_at": ts(occurrence.occurrence_at),
        "scheduled_at": ts(occurrence.due_at),
        "nominal": occurrence.nominal,
        "dst_adjustment": occurrence.dst_adjustment,
        "state": occurrence.state.value,
        "reason": occurrence.reason,
        "reason_detail": occurrence.reason_detail,
        "spec_indexes": occurrence.spec_indexes,
        "calendar_moved_from": ts(occurrence.calendar_moved_from),
        "version": occurrence.version,
        "revision": occurrence.revision,
        "run_id": occurrence.run_id if occurrence.dispatch is not None else None,
        "attempts": occurrence.attempts,
        "last_error": last_error_view(occurrence.last_error),
        "follow_through": follow_through_view(follow),
        "origin": occurrence.origin.get("occurrence_origin", OccurrenceOrigin.SCHEDULE.value),
    }
    if occurrence.range_count is not None:
        view["range"] = {
            "first": ts(occurrence.occurrence_at),
            "last": ts(occurrence.range_last),
            "count": occurrence.range_count,
        }
    return view


def follow_through_view(follow: FollowThroughRecord | None) -> dict[str, Any] | None:
    if follow is None:
        return None
    return {
        "status": follow.status,
        "reason": follow.reason,
        "previous_run_id": follow.previous_run_id,
        "regressions": follow.regressions,
        "recorded_at": ts(follow.recorded_at),
    }
