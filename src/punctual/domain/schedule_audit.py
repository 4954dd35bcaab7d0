"""The missed-run audit (SPEC RS-10): every instant a schedule's specs yielded in a range,
and what became of it.

"Why didn't my schedule fire?" has one answer per instant, decided here from three things
the store keeps: the schedule's history (when it was created, each change of when it
fires, each pause and resume, its deletion), the rows generation wrote (occurrences,
skipped ranges, DST and calendar skips), and where generation has got to (the cursor).
An instant is

- ``fired``: an occurrence was generated for it (its run says how it went);
- ``skipped``: a decision not to run it was recorded, with its reason;
- ``not_generated``: nothing is recorded, by design: before the schedule existed, after it
  was deleted or ended, while it was paused (with the pause), or not yet reached;
- ``missing``: none of those. It must never appear: it is punctual's own defect.

Pure: the same history and rows give the same answer in every process.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from punctual.domain.calendar_timeline import PlannedFire, PlannedSkip, Timing

MAX_AUDIT_INSTANTS = 10_000
_TICK = timedelta(microseconds=1)


class EventKind(StrEnum):
    CREATED = "created"
    """The schedule began, with its timing."""
    HISTORY_BEGAN = "history_began"
    """The history of a schedule made before it was kept begins (at its cursor then)."""
    TIMING = "timing"
    """Its specs or calendar changed: the new timing holds after ``at``."""
    PAUSED = "paused"
    """Paused (by a member, a timed pause until ``until``, or auto-disable)."""
    RESUMED = "resumed"
    DELETED = "deleted"


@dataclass(frozen=True)
class ScheduleEvent:
    """One entry of a schedule's history."""

    kind: EventKind
    at: datetime
    by: str
    timing: Timing | None = None
    """For ``created`` and ``timing``."""
    previous: Timing | None = None
    """For ``timing``: the one it replaced (what held before a history's first change)."""
    until: datetime | None = None
    """For a timed pause: when it ends by itself."""


class Outcome(StrEnum):
    FIRED = "fired"
    SKIPPED = "skipped"
    NOT_GENERATED = "not_generated"
    MISSING = "missing"


@dataclass(frozen=True)
class AuditRow:
    """A row generation wrote: an occurrence at ``occurrence_at``, or a skipped range up to
    ``range_last``; with its run's state once it has one."""

    occurrence_id: str
    occurrence_at: datetime
    state: str
    reason: str | None
    range_last: datetime | None
    run_id: str | None
    run_state: str | None
    rerun: int = 0


@dataclass(frozen=True)
class Pause:
    start: datetime
    end: datetime | None
    """None: still paused."""
    by: str


@dataclass(frozen=True)
class AuditItem:
    instant: datetime
    spec_indexes: tuple[int, ...]
    outcome: Outcome
    reason: str | None
    occurrence_id: str | None = None
    run_id: str | None = None
    run_state: str | None = None
    pause: Pause | None = None


class AuditTooLarge(ValueError):
    """More than ``MAX_AUDIT_INSTANTS`` instants in the range."""


_NOT_RUN = frozenset({"skipped", "canceled"})


def pauses(events: Sequence[ScheduleEvent]) -> list[Pause]:
    """The intervals the schedule was paused, from its history in time order; a timed pause
    ends at its ``until`` unless a resume comes first."""
    found: list[Pause] = []
    open_pause: ScheduleEvent | None = None
    for event in sorted(events, key=lambda e: e.at):
        if open_pause is not None and open_pause.until is not None and open_pause.until <= event.at:
            found.append(Pause(open_pause.at, open_pause.until, open_pause.by))
            open_pause = None
        if event.kind is EventKind.PAUSED:
            if open_pause is None:
                open_pause = event
            else:  # paused again while paused (a new timed pause, an auto-disable): it
                # lasts as the later pause says, from when the first began
                open_pause = replace(event, at=open_pause.at, by=open_pause.by)
        elif event.kind in (EventKind.RESUMED, EventKind.DELETED) and open_pause is not None:
            found.append(Pause(open_pause.at, event.at, open_pause.by))
            open_pause = None
    if open_pause is not None:
        found.append(Pause(open_pause.at, open_pause.until, open_pause.by))
    return found


def audit(
    events: Sequence[ScheduleEvent],
    rows: Sequence[AuditRow],
    start: datetime,
    end: datetime,
    *,
    decided_until: datetime,
    ended: bool,
    timing: Timing,
    ends_after: datetime | None = None,
) -> list[AuditItem]:
    """Every instant in ``[start, end)`` the schedule's timing yielded while it held, with
    what became of it. ``decided_until``: the cursor (generation decided every instant up
    to it); ``ended``: the schedule reached its end, so nothing after the cursor comes;
    ``timing``: the schedule's own, which holds until the first change its history
    records (for a history that began after it was made, the best knowledge there is);
    ``ends_after``: its ``end_at``, or its last fire once ``max_occurrences`` is reached:
    nothing after it is the schedule's."""
    ordered = sorted(events, key=lambda e: e.at)
    beginnings = (EventKind.CREATED, EventKind.HISTORY_BEGAN)
    created = next((e for e in ordered if e.kind in beginnings), None)
    if created is None:
        return []
    deleted = next((e.at for e in ordered if e.kind is EventKind.DELETED), None)
    spans = [e for e in ordered if e.timing is not None]
    if not spans or spans[0].kind is not EventKind.CREATED:
        # A history that began after the schedule was made: what held before its first
        # change is the timing that change replaced, or, without one, the schedule's own.
        held = spans[0].previous if spans and spans[0].previous is not None else timing
        spans.insert(0, ScheduleEvent(created.kind, created.at, created.by, timing=held))
    paused = pauses(ordered)
    exact: dict[datetime, list[AuditRow]] = {}
    ranges: list[AuditRow] = []
    for row in rows:
        if row.range_last is not None:
            ranges.append(row)
        else:
            exact.setdefault(row.occurrence_at, []).append(row)
    ranges.sort(key=lambda r: r.occurrence_at)
    starts = [r.occurrence_at for r in ranges]
    reach: list[datetime] = []  # the furthest any range up to each one reaches
    for covering in ranges:
        assert covering.range_last is not None
        reach.append(max(reach[-1], covering.range_last) if reach else covering.range_last)
    items: list[AuditItem] = []
    for index, span in enumerate(spans):
        assert span.timing is not None
        held_until = spans[index + 1].at if index + 1 < len(spans) else None
        # The first timing also answers for the instants before the schedule existed.
        lower = start - _TICK if index == 0 else max(start - _TICK, span.at)
        for item in span.timing.timeline(lower):
            if item.at >= end or (held_until is not None and item.at > held_until):
                break
            if isinstance(item, PlannedSkip) and not span.timing.recorded(item):
                continue
            if len(items) >= MAX_AUDIT_INSTANTS:
                raise AuditTooLarge(
                    f"the range holds more than {MAX_AUDIT_INSTANTS} instants; ask for a "
                    "shorter one"
                )
            decided = _decide(
                item,
                exact,
                _Ranges(ranges, starts, reach),
                paused,
                created.at,
                deleted,
                decided_until,
                ended,
                ends_after,
            )
            if decided.reason == "before_creation" and created.kind is EventKind.HISTORY_BEGAN:
                decided = replace(decided, reason="before_history")
            items.append(decided)
    return items


@dataclass(frozen=True)
class _Ranges:
    """Skipped ranges by their first instant. They nest (a closed day's range inside a
    missed stretch's), so ``reach`` says whether any range up to one still covers."""

    rows: list[AuditRow]
    starts: list[datetime]
    reach: list[datetime]

    def covering(self, at: datetime) -> AuditRow | None:
        """The innermost range covering ``at`` (the latest to start): its reason is the
        most particular."""
        index = bisect.bisect_right(self.starts, at) - 1
        if index < 0 or self.reach[index] < at:
            return None
        while True:
            row = self.rows[index]
            assert row.range_last is not None
            if row.range_last >= at:
                return row
            index -= 1


def _decide(
    item: PlannedFire | PlannedSkip,
    exact: dict[datetime, list[AuditRow]],
    ranges: _Ranges,
    paused: list[Pause],
    created_at: datetime,
    deleted_at: datetime | None,
    decided_until: datetime,
    ended: bool,
    ends_after: datetime | None,
) -> AuditItem:
    at, indexes = item.at, item.spec_indexes
    found = exact.get(at)
    if found:
        # The live or finished row of an instant generated again wins over its history.
        row = max(found, key=lambda r: (r.state not in _NOT_RUN, r.rerun))
        outcome = Outcome.SKIPPED if row.state in _NOT_RUN else Outcome.FIRED
        return AuditItem(
            at, indexes, outcome, row.reason, row.occurrence_id, row.run_id, row.run_state
        )
    covering = ranges.covering(at)
    if covering is not None:
        return AuditItem(at, indexes, Outcome.SKIPPED, covering.reason, covering.occurrence_id)
    if at <= created_at:
        return AuditItem(at, indexes, Outcome.NOT_GENERATED, "before_creation")
    if deleted_at is not None and at > deleted_at:
        return AuditItem(at, indexes, Outcome.NOT_GENERATED, "deleted")
    if ends_after is not None and at > ends_after:
        return AuditItem(at, indexes, Outcome.NOT_GENERATED, "ended")
    pause = next((p for p in paused if p.start < at and (p.end is None or at <= p.end)), None)
    if pause is not None:
        return AuditItem(at, indexes, Outcome.NOT_GENERATED, "paused", pause=pause)
    if at > decided_until:
        reason = "ended" if ended else "not_yet_decided"
        return AuditItem(at, indexes, Outcome.NOT_GENERATED, reason)
    return AuditItem(at, indexes, Outcome.MISSING, None)
