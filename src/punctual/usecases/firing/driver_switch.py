"""Switching the firing driver back to ``sql`` on a store that Temporal Schedules fired
(SPEC CR-6, CR-7; docs/temporal.md, "Switching drivers").

The other way needs nothing of its own: under ``temporal_schedules`` the first
reconciliation sweep ensures every live record, and a Temporal fire at an instant the SQL
pass already generated finds that occurrence instead of making a second one.

Back to ``sql``, the store was under the Temporal Schedules driver when it holds sync
records. Then, once, when the runner starts:

* a create saga that never finished is settled as reconciliation would (its record is
  removed): under ``sql`` it would otherwise start firing, although its create never
  answered ``201``;
* every live schedule gets back the next fire its cursor gives (a Temporal fire records
  the instant it fired, not the next one, and the generation pass only looks at schedules
  with a next fire), so the pass continues where Temporal stopped; the unique
  (schedule, occurrence_at) key keeps any instant from firing twice;
* every Temporal Schedule carrying this installation's mark is removed, else Temporal
  would keep firing into a store that fires by itself: those the sync records name and
  those Temporal lists with the mark. One without the mark is never touched;
* then the fire workflows those schedules started that are still open are terminated: no
  process takes them under ``sql``, and a later switch back to ``temporal_schedules``
  would fire their instants late, whatever the generation pass decided for them since;
* the sync records are forgotten, last: a sweep cut short (Temporal unreachable) leaves
  them, and the next start sweeps again (every step above is idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from punctual.domain.schedules import Schedule, next_bounded_fire
from punctual.ports.driver import Driver
from punctual.ports.records import CursorMove
from punctual.usecases.firing import schedule_driver
from punctual.usecases.kernel.context import Services

log = logging.getLogger("punctual.driver")

PAGE = 200


@dataclass(frozen=True)
class SwitchReport:
    resumed: int
    """Live schedules whose next fire was restored from their cursor."""
    settled: int
    """Records of unfinished creates removed."""
    removed: int
    """Marked Temporal Schedules removed."""
    ended: int
    """Open fire workflows of those schedules terminated."""
    forgotten: int
    """Sync records forgotten."""


def was_driven(services: Services) -> bool:
    """The store holds sync records: the Temporal Schedules driver fired it and no switch
    back has completed since."""
    with services.store.transaction(readonly=True) as tx:
        return bool(tx.schedule_sync.recorded("", 1))


def switch_to_sql(services: Services, former: Driver) -> SwitchReport:
    """The one-shot sweep back to the SQL driver; ``former`` is the Temporal Schedules
    driver of this installation. Raises ``EngineUnavailable`` when Temporal cannot be
    reached (the store's steps are kept, the sync records too, for the next start)."""
    recorded = _recorded(services)
    settled = _settle(services, _unfinished_creates(services, recorded))
    resumed = _resume_generation(services)
    candidates = sorted(set(recorded) | set(former.list_marked()))
    views = former.describe_many(candidates)
    owned = [i for i, view in views.items() if view.present and view.marked]
    for schedule_id in owned:
        former.remove(schedule_id)
    # Never the fires of an id another installation's Temporal Schedule holds.
    foreign = {i for i, view in views.items() if view.present and not view.marked}
    ended = former.end_fires([i for i in candidates if i not in foreign])
    with services.store.transaction() as tx:
        for schedule_id in recorded:
            tx.schedule_sync.forget(schedule_id)
    if resumed:
        services.on_due_change()
    report = SwitchReport(resumed, settled, len(owned), ended, len(recorded))
    log.info(
        "event=driver_switched driver=sql resumed=%d settled=%d removed=%d ended=%d "
        "forgotten=%d note=this installation's Temporal Schedules are removed; the runner's "
        "generation pass fires schedules from their cursors",
        report.resumed,
        report.settled,
        report.removed,
        report.ended,
        report.forgotten,
    )
    return report


def _recorded(services: Services) -> list[str]:
    ids: list[str] = []
    while True:
        with services.store.transaction(readonly=True) as tx:
            page = tx.schedule_sync.recorded(ids[-1] if ids else "", PAGE)
        ids.extend(page)
        if len(page) < PAGE:
            return ids


def _resume_generation(services: Services) -> int:
    """Give every live schedule without a next fire the one its cursor gives (bookkeeping:
    no version moves; an edit meanwhile wins). A schedule that ended has none, and keeps
    none."""
    resumed = 0
    after = ""
    while True:
        with services.store.transaction() as tx:
            page = tx.schedule_sync.live_schedules(after, PAGE)
            if not page:
                return resumed
            after = page[-1][0]
            schedules = tx.schedules.get_many([schedule_id for schedule_id, _ in page])
            moves = [
                CursorMove(s.id, s.cursor, fire, s.version)
                for s in schedules.values()
                if s.next_fire_at is None and (fire := _next_fire(s)) is not None
            ]
            tx.schedules.move_cursors(moves)
            resumed += len(moves)


def _next_fire(schedule: Schedule) -> datetime | None:
    return next_bounded_fire(
        schedule.timing, schedule.cursor, schedule.end_at, schedule.remaining_occurrences
    )


def _unfinished_creates(services: Services, recorded: Sequence[str]) -> list[str]:
    unfinished: list[str] = []
    for start in range(0, len(recorded), PAGE):
        with services.store.transaction(readonly=True) as tx:
            records = tx.schedule_sync.get_many(recorded[start : start + PAGE])
        unfinished.extend(i for i, record in records.items() if record.unfinished_create)
    return unfinished


def _settle(services: Services, unfinished: Sequence[str]) -> int:
    """Remove the records of creates that never finished, as reconciliation settles them
    under the Temporal driver. Their Temporal copies go with the others next: until then
    they fire nothing (no process takes their fires, and a fire finds no record)."""
    settled = 0
    for schedule_id in unfinished:
        with services.store.transaction() as tx:
            now = services.clock.now()
            schedule = tx.schedules.get_many([schedule_id]).get(schedule_id)
            if schedule is None or schedule.deleted_at is not None:
                continue
            schedule_driver.discard_unfinished_create(tx, schedule, now)
        log.warning("event=unfinished_create_removed schedule=%s", schedule_id)
        settled += 1
    return settled
