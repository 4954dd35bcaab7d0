"""Scheduled starts: a request to start one run at one instant (OS-*).

The state machine, the new-request rules for ``start_at`` and the order in which a
mutation's checks run (state before version, OS-5) live here; the store only applies
what these functions decide, with a compare-and-set on (id, version) (OS-7).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from punctual.domain.recurrence import UnknownTimeZone, load_zone
from punctual.errors import Conflict, InvalidRequest, version_conflict

ALLOWED_CLOCK_SKEW = timedelta(seconds=5)
HOST_OWNED_FIELDS = ("task_queue", "priority", "scope", "temporal_workflow_id", "run_id")


class StartState(StrEnum):
    SCHEDULED = "scheduled"
    """Waiting for its due time (or its next attempt after a retryable failure)."""
    BUFFERED = "buffered"
    """An occurrence waiting for its schedule's previous run to end (overlap buffer_one)."""
    DISPATCHING = "dispatching"
    """Claimed by a runner under a lease; the run is being started."""
    DISPATCHED = "dispatched"
    """The run exists; the start is done. Terminal for the start."""
    FAILED = "failed"
    """Dispatch failed for good; never retried automatically. Terminal."""
    CANCELED = "canceled"
    """Canceled before dispatch. Terminal."""
    SKIPPED = "skipped"
    """An occurrence that was decided not to run (overlap, missed, DST). Terminal."""


TERMINAL_STATES = frozenset(
    {StartState.DISPATCHED, StartState.FAILED, StartState.CANCELED, StartState.SKIPPED}
)
PENDING_STATES = frozenset({StartState.SCHEDULED, StartState.DISPATCHING})


@dataclass(frozen=True)
class LastError:
    code: str
    message: str
    at: datetime


@dataclass(frozen=True)
class DispatchRecord:
    run_id: str
    definition_version: str
    artifact: str
    dispatched_at: datetime


@dataclass(frozen=True)
class StartRequest:
    """What a start's creator asked for, as it is inserted and as it is held after."""

    id: str
    tenant: str
    workflow: str
    business_request_id: str
    start_at: datetime
    time_zone: str | None
    workload_class: str
    attributes: dict[str, str]
    traceparent: str | None


@dataclass(frozen=True)
class ScheduledStart(StartRequest):
    """A start as the store holds it; ``input`` stays encrypted and is not part of it."""

    state: StartState
    version: int
    attempts: int
    next_attempt_at: datetime | None
    last_error: LastError | None
    created_by: str
    created_at: datetime
    updated_at: datetime
    run_id: str
    dispatch: DispatchRecord | None = None
    reason: str | None = None
    reason_detail: str | None = None
    """What the decision names beyond its reason (a blackout's own reason, RS-10)."""
    spec_indexes: list[int] | None = None
    """The specs of its schedule that yielded it (RS-10); None for a one-off start."""
    calendar_moved_from: datetime | None = None
    """The instant it would have had, when the calendar moved it off a closed day."""
    schedule_id: str | None = None
    """Set for occurrences of a schedule; None for one-off starts."""
    occurrence_at: datetime | None = None
    nominal: str | None = None
    dst_adjustment: str | None = None
    revision: int | None = None
    range_last: datetime | None = None
    range_count: int | None = None
    origin: dict[str, Any] = field(default_factory=dict)

    @property
    def due_at(self) -> datetime:
        return self.next_attempt_at or self.start_at


def validate_new_start_at(start_at: datetime, time_zone: str | None, now: datetime) -> None:
    """The checks a *new* request's ``start_at`` must pass (never applied to a replay)."""
    if start_at.tzinfo is None or start_at.utcoffset() is None:
        raise InvalidRequest(
            "start_at must carry a UTC offset or Z, for example 2026-12-01T07:00:00+01:00",
            code="start_at_not_timezone_aware",
        )
    if time_zone is not None:
        try:
            zone = load_zone(time_zone)
        except UnknownTimeZone as exc:
            raise InvalidRequest(str(exc), code="unknown_time_zone", time_zone=time_zone) from exc
        expected = start_at.astimezone(zone).utcoffset()
        if expected != start_at.utcoffset():
            raise InvalidRequest(
                f"start_at has offset {_offset(start_at.utcoffset())} but {time_zone} is at "
                f"{_offset(expected)} at that instant",
                code="start_at_zone_mismatch",
                expected_offset=_offset(expected),
            )
    if start_at < now - ALLOWED_CLOCK_SKEW:
        raise InvalidRequest(
            f"start_at {start_at.isoformat()} is more than "
            f"{int(ALLOWED_CLOCK_SKEW.total_seconds())} s in the past",
            code="start_at_in_past",
        )


def _offset(delta: timedelta | None) -> str:
    seconds = int((delta or timedelta()).total_seconds())
    sign = "+" if seconds >= 0 else "-"
    seconds = abs(seconds)
    return f"{sign}{seconds // 3600:02d}:{seconds % 3600 // 60:02d}"


MUTABLE_STATES = frozenset({StartState.SCHEDULED, StartState.BUFFERED, StartState.DISPATCHING})
"""States a reschedule or cancel applies in. A ``dispatching`` start is only claimed (a
claim is not a transition, FT-5): the mutation wins over the dispatch, which then fails to
record and withdraws the run it may have started."""


def check_mutable(start: ScheduledStart, expected_version: int) -> None:
    """Before reschedule or cancel: state first, then version (OS-5, OS-8)."""
    if start.state is StartState.DISPATCHED:
        kind = "occurrence" if start.schedule_id else "start"
        raise Conflict(
            f"{kind} {start.id} is already dispatched; act on run {start.run_id} "
            "instead (cancel or terminate it)",
            code="already_dispatched",
            run_id=start.run_id,
        )
    if start.state not in MUTABLE_STATES:
        raise Conflict(
            f"start {start.id} is {start.state.value} and can no longer change",
            code="invalid_state",
            state=start.state.value,
        )
    if start.version != expected_version:
        raise version_conflict("start", start.id, start.version)
