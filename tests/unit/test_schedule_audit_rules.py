"""The missed-run audit's rules (SPEC RS-10), pure: pauses from a schedule's history, the
timing that held at each instant, and the order in which an instant is accounted for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from punctual.domain.calendar_timeline import Timing
from punctual.domain.recurrence import IntervalSpec
from punctual.domain.schedule_audit import (
    AuditRow,
    EventKind,
    Outcome,
    Pause,
    ScheduleEvent,
    audit,
    pauses,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
EVERY_MINUTE = Timing((IntervalSpec(60_000, T0),))
EVERY_TWO = Timing((IntervalSpec(120_000, T0),))


def event(
    kind: EventKind,
    minute: float,
    *,
    timing: Timing | None = None,
    previous: Timing | None = None,
    until: datetime | None = None,
) -> ScheduleEvent:
    at = T0 + minute * MINUTE
    return ScheduleEvent(kind, at, "alice", timing=timing, previous=previous, until=until)


def row(minute: int, state: str = "dispatched", reason: str | None = None) -> AuditRow:
    return AuditRow(f"occ_{minute}", T0 + minute * MINUTE, state, reason, None, None, None)


def test_pauses_end_at_a_resume_a_deletion_or_their_own_end() -> None:
    history = [
        event(EventKind.CREATED, 0, timing=EVERY_MINUTE),
        event(EventKind.PAUSED, 2),
        event(EventKind.RESUMED, 4),
        event(EventKind.PAUSED, 5, until=T0 + 7 * MINUTE),
        event(EventKind.PAUSED, 9),
        event(EventKind.DELETED, 11),
    ]
    assert pauses(history) == [
        Pause(T0 + 2 * MINUTE, T0 + 4 * MINUTE, "alice"),
        Pause(T0 + 5 * MINUTE, T0 + 7 * MINUTE, "alice"),
        Pause(T0 + 9 * MINUTE, T0 + 11 * MINUTE, "alice"),
    ]


def test_each_instant_is_accounted_for_in_order_records_first() -> None:
    history = [
        event(EventKind.CREATED, 1.5, timing=EVERY_MINUTE),
        event(EventKind.TIMING, 4, timing=EVERY_TWO),
        event(EventKind.PAUSED, 8.5),
    ]
    rows = [
        row(2),
        row(3, "skipped", reason="overlap"),
        AuditRow("occ_r", T0 + 4 * MINUTE, "skipped", "missed", T0 + 4 * MINUTE, None, None),
        row(6),
        row(8, "skipped", reason="too_late"),
    ]
    items = audit(
        history,
        rows,
        T0,
        T0 + 13 * MINUTE,
        decided_until=T0 + 9 * MINUTE,
        ended=False,
        timing=EVERY_TWO,
    )
    decided = [((i.instant - T0) // MINUTE, i.outcome.value, i.reason) for i in items]
    assert decided == [
        (0, "not_generated", "before_creation"),
        (1, "not_generated", "before_creation"),
        (2, "fired", None),
        (3, "skipped", "overlap"),
        (4, "skipped", "missed"),  # the old timing holds up to the change
        (6, "fired", None),  # then every two minutes
        (8, "skipped", "too_late"),
        (10, "not_generated", "paused"),
        (12, "not_generated", "paused"),
    ]
    assert items[-1].pause == Pause(T0 + 8.5 * MINUTE, None, "alice")


def test_a_decided_instant_without_a_record_is_missing() -> None:
    history = [event(EventKind.CREATED, 0, timing=EVERY_MINUTE)]
    items = audit(
        history,
        [row(1), row(3)],
        T0,
        T0 + 5 * MINUTE,
        decided_until=T0 + 3 * MINUTE,
        ended=False,
        timing=EVERY_MINUTE,
    )
    assert [i.outcome for i in items] == [
        Outcome.NOT_GENERATED,  # its first fire, as it was created
        Outcome.FIRED,
        Outcome.MISSING,
        Outcome.FIRED,
        Outcome.NOT_GENERATED,
    ]
    ended = audit(
        history,
        [row(1)],
        T0,
        T0 + 3 * MINUTE,
        decided_until=T0 + MINUTE,
        ended=True,
        timing=EVERY_MINUTE,
    )
    assert [i.reason for i in ended] == ["before_creation", None, "ended"]


def test_a_history_that_began_after_the_schedule_was_made_never_calls_the_past_missing() -> None:
    """A schedule made before its history was kept: its rows still answer for the past;
    an instant before the history with none is ``before_history``. Its first change
    tells what held before it."""
    history = [
        event(EventKind.HISTORY_BEGAN, 3),
        event(EventKind.TIMING, 6, timing=EVERY_TWO, previous=EVERY_MINUTE),
    ]
    items = audit(
        history,
        [row(2), row(5)],
        T0,
        T0 + 9 * MINUTE,
        decided_until=T0 + 8 * MINUTE,
        ended=False,
        timing=EVERY_TWO,
    )
    decided = [((i.instant - T0) // MINUTE, i.outcome.value, i.reason) for i in items]
    assert decided == [
        (0, "not_generated", "before_history"),
        (1, "not_generated", "before_history"),
        (2, "fired", None),
        (3, "not_generated", "before_history"),
        (4, "missing", None),  # every minute held up to the change: 4 had to be decided
        (5, "fired", None),
        (6, "missing", None),
        (8, "missing", None),  # then every two minutes
    ]


def test_a_pause_renewed_while_it_holds_lasts_as_the_later_one_says() -> None:
    history = [
        event(EventKind.CREATED, 0, timing=EVERY_MINUTE),
        event(EventKind.PAUSED, 2, until=T0 + 5 * MINUTE),
        event(EventKind.PAUSED, 3, until=T0 + 30 * MINUTE),  # extended
        event(EventKind.PAUSED, 40, until=T0 + 45 * MINUTE),
        ScheduleEvent(EventKind.PAUSED, T0 + 42 * MINUTE, "punctual"),  # auto-disabled
    ]
    assert pauses(history) == [
        Pause(T0 + 2 * MINUTE, T0 + 30 * MINUTE, "alice"),
        Pause(T0 + 40 * MINUTE, None, "alice"),
    ]


def test_skipped_ranges_nest_and_the_innermost_names_the_reason() -> None:
    """A closed day recorded inside a missed stretch: every instant of the stretch is
    skipped (none missing), the closed day's with its own reason."""
    history = [event(EventKind.CREATED, 0, timing=EVERY_MINUTE)]
    missed = AuditRow("occ_m", T0 + MINUTE, "skipped", "missed", T0 + 8 * MINUTE, None, None)
    closed = AuditRow("occ_c", T0 + 3 * MINUTE, "skipped", "calendar", T0 + 4 * MINUTE, None, None)
    items = audit(
        history,
        [missed, closed],
        T0,
        T0 + 9 * MINUTE,
        decided_until=T0 + 8 * MINUTE,
        ended=False,
        timing=EVERY_MINUTE,
    )
    assert [(i.outcome.value, i.reason) for i in items[1:]] == [
        ("skipped", "missed"),
        ("skipped", "missed"),
        ("skipped", "calendar"),
        ("skipped", "calendar"),
        ("skipped", "missed"),
        ("skipped", "missed"),
        ("skipped", "missed"),
        ("skipped", "missed"),
    ]
