"""A punctual schedule as a Temporal Schedule: spec, policies and state.

Temporal's cron strings combine day-of-month and day-of-week with AND, punctual's (Vixie
cron) with OR when both are restricted; such an expression becomes two cron strings whose
union Temporal fires. An interval is Temporal's ``every`` with the offset that puts one
fire on ``starts_at`` (on the next whole second if it is off one), which is also the
spec's start.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from temporalio.client import (
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)

from punctual.domain.recurrence import CronSpec, IntervalSpec
from punctual.domain.schedules import OverlapPolicy
from punctual.ports.driver import DriverSchedule

OVERLAP = {
    OverlapPolicy.SKIP: ScheduleOverlapPolicy.SKIP,
    OverlapPolicy.BUFFER_ONE: ScheduleOverlapPolicy.BUFFER_ONE,
    OverlapPolicy.ALLOW_ALL: ScheduleOverlapPolicy.ALLOW_ALL,
}

MIN_CATCHUP_WINDOW = timedelta(seconds=10)
"""Temporal refuses a shorter catch-up window."""

_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def cron_strings(expression: str) -> list[str]:
    """Temporal cron strings whose union fires exactly when the expression does."""
    text = _MACROS.get(expression.strip().lower(), expression)
    minute, hour, dom, month, dow = text.split()
    if dom.startswith("*") or dow.startswith("*"):
        return [" ".join((minute, hour, dom, month, dow))]
    return [
        " ".join((minute, hour, dom, month, "*")),
        " ".join((minute, hour, "*", month, dow)),
    ]


def spec_of(schedule: DriverSchedule) -> ScheduleSpec:
    if isinstance(schedule.spec, CronSpec):
        return ScheduleSpec(
            cron_expressions=cron_strings(schedule.spec.expression),
            time_zone_name=schedule.spec.time_zone,
            end_at=schedule.end_at,
        )
    if not isinstance(schedule.spec, IntervalSpec):
        raise ValueError("a business_day spec has no Temporal Schedule (check_supported)")
    starts_at = schedule.spec.starts_at
    assert starts_at is not None, "a stored interval schedule has its first fire"
    if starts_at.microsecond:
        # Temporal fires on whole seconds: a first fire made off one (an older record) is
        # honoured on the next whole second, never earlier than the record says.
        starts_at = starts_at.replace(microsecond=0) + timedelta(seconds=1)
    every = timedelta(milliseconds=schedule.spec.interval_ms)
    offset = (starts_at - _EPOCH) % every
    return ScheduleSpec(
        intervals=[ScheduleIntervalSpec(every=every, offset=offset)],
        start_at=starts_at,
        end_at=schedule.end_at,
    )


def policy_of(schedule: DriverSchedule) -> SchedulePolicy:
    return SchedulePolicy(
        overlap=OVERLAP[schedule.overlap],
        catchup_window=max(schedule.catchup_window, MIN_CATCHUP_WINDOW),
    )


def state_of(schedule: DriverSchedule, note: str) -> ScheduleState:
    remaining = schedule.remaining_actions
    if remaining is not None and remaining <= 0:
        # Ended by its count: nothing more fires; Temporal wants no limit of zero.
        return ScheduleState(note=note, paused=True)
    return ScheduleState(
        note=note,
        paused=schedule.paused,
        limited_actions=remaining is not None,
        remaining_actions=remaining or 0,
    )
