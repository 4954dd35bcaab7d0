"""The generation pass: turn schedules into occurrences (RS-4, RS-5, RS-9c, RS-9d).

Due schedules are locked for the pass (concurrent runners skip them); for each one the
pure ``plan_occurrences`` decides what to generate, what was missed, what DST removed
and whether the schedule reached its end, and the occurrences, the moved cursor and the
count of the spec's fires commit in the same transaction. A crash before the commit
leaves neither; after it, an occurrence is a start like any other and is retried, never
regenerated (the (schedule, occurrence_at, rerun) key is unique). Each occurrence is due
at its ``occurrence_at`` plus the schedule's deterministic jitter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from punctual.domain.schedules import (
    Plan,
    Schedule,
    jitter_delay,
    plan_occurrences,
)
from punctual.ports.events import Event
from punctual.ports.records import CursorMove, EncryptedInput, NewOccurrence
from punctual.usecases.kernel.context import Services
from punctual.usecases.recurring.occurrence_rows import (
    dst_gap_row,
    new_occurrence,
    skipped_range_row,
)

LOOKAHEAD = timedelta(seconds=2)
"""Occurrences are generated this far ahead so that dispatch finds them on time."""


@dataclass
class GenerationReport:
    schedules: int = 0
    generated: int = 0
    missed: int = 0
    dst_skipped: int = 0
    blacked_out: int = 0
    calendar_skipped: int = 0


def generate(services: Services, budget: int) -> GenerationReport:
    """One pass over due schedules, generating at most ``budget`` occurrences in total.

    The pass costs a fixed handful of statements however many schedules it plans: one
    claim (which also reads each schedule's sealed input), one update of every cursor,
    one insert of every row. A cursor moves only if its schedule is still at the version
    the plan read, and only the occurrences of moved schedules are written: a plan never
    outlives an edit of its schedule.
    """
    report = GenerationReport()
    missed_events: list[tuple[Schedule, int]] = []
    now = services.clock.now()
    with services.store.transaction() as tx:
        due = tx.schedules.claim_due_for_generation(now + LOOKAHEAD, budget)
        planned: list[tuple[Schedule, EncryptedInput, Plan]] = []
        budget_left = budget
        for claimed in due:
            if budget_left <= 0:
                break
            schedule = claimed.schedule
            if schedule.paused_at(now):
                # A timed pause (RS-10): nothing is decided; the pass that comes once it is
                # over plans from the cursor, under the missed policy.
                waiting = Plan([], None, [], schedule.cursor, schedule.pause_until)
                planned.append((schedule, claimed.input, waiting))
                continue
            plan = plan_occurrences(
                schedule.timing,
                schedule.policy,
                schedule.cursor,
                now,
                budget_left,
                LOOKAHEAD,
                end_at=schedule.end_at,
                remaining=schedule.remaining_occurrences,
            )
            planned.append((schedule, claimed.input, plan))
            budget_left -= len(plan.occurrences)
        moved = tx.schedules.move_cursors(
            [
                CursorMove(
                    schedule.id,
                    plan.cursor,
                    plan.next_fire_at,
                    schedule.version,
                    fires_counted=schedule.fires_counted + plan.counted,
                )
                for schedule, _, plan in planned
            ]
        )
        rows: list[NewOccurrence] = []
        for schedule, encrypted, plan in planned:
            if schedule.id not in moved:
                continue
            rows.extend(_rows(schedule, encrypted, plan, now))
            report.schedules += 1
            report.generated += len(plan.occurrences)
            missed = [plan.missed] if plan.missed is not None else []
            missed += [r for r in plan.skipped_ranges if r.reason == "missed"]
            report.missed += sum(r.count for r in missed)
            report.blacked_out += sum(
                r.count for r in plan.skipped_ranges if r.reason == "blackout"
            )
            report.dst_skipped += len(plan.dst_skipped)
            report.calendar_skipped += sum(r.count for r in plan.calendar_skipped)
            if missed:
                missed_events.append((schedule, sum(r.count for r in missed)))
        tx.starts.insert_occurrences(rows, now)
        if report.generated:
            services.crash_point("during_generation")
    if report.generated:
        services.on_due_change()
    for schedule, count in missed_events:
        services.events.emit(
            Event(
                "occurrence.skipped",
                schedule.tenant,
                schedule.id,
                {"reason": "missed", "count": count},
            )
        )
    return report


def _rows(
    schedule: Schedule, encrypted: EncryptedInput, plan: Plan, now: datetime
) -> list[NewOccurrence]:
    """The rows a plan writes: occurrences to fire, and a record of every decision not to."""
    rows: list[NewOccurrence] = []
    for planned in plan.occurrences:
        due_at = planned.at + jitter_delay(schedule.id, planned.at, schedule.policy.jitter)
        rows.append(
            new_occurrence(
                schedule,
                encrypted,
                planned.at,
                max(due_at, now) if planned.late else due_at,
                nominal=planned.nominal.isoformat(),
                dst_adjustment=planned.dst_adjustment.value if planned.dst_adjustment else None,
                spec_indexes=planned.spec_indexes,
                calendar_moved_from=planned.moved_from,
            )
        )
    if plan.missed is not None:
        rows.append(skipped_range_row(schedule, encrypted, plan.missed))
    rows += [skipped_range_row(schedule, encrypted, skipped) for skipped in plan.skipped_ranges]
    rows += [skipped_range_row(schedule, encrypted, closed) for closed in plan.calendar_skipped]
    # A skip shares its instant with a fire only for expressions that name the gap's end
    # too; the unique key then keeps the fire, which is the decision that matters.
    rows += [dst_gap_row(schedule, encrypted, skip) for skip in plan.dst_skipped]
    return rows
