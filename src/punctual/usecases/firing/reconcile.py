"""Reconciliation of schedules with the firing driver (SPEC CR-6).

With the SQL driver the store is both the record and what fires, so there is nothing to
reconcile: the report is all zeros. Under the Temporal Schedules driver one sweep heals
drift both ways:

* every live record whose Temporal Schedule is missing, or differs from what the record
  says (its digest or paused state), is ensured again; the cached next fire times and
  ``sync`` are refreshed for all of them (the periodic describe);
* every create saga that has not finished ``orphan_grace`` after it began (the process
  died between storing the record and ensuring its Temporal Schedule, or the rollback of
  a failed create failed) is settled: its Temporal copy, if any, then its record are
  removed, and its ``orphaned_schedule`` finding is cleared (a retry of the same request
  then creates it anew);
* every Temporal Schedule that carries this installation's mark and has no live record is
  removed, once it is older than ``orphan_grace`` (a saga whose record reconciliation
  removed may still be ensuring it); Temporal Schedules without the mark are never
  touched: they belong to another team or installation, and a record whose id one of them
  holds is ``orphaned``, with a finding.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from punctual.domain.schedules import Schedule
from punctual.errors import InvalidRequest
from punctual.ports.driver import SyncState
from punctual.ports.engine import EngineUnavailable
from punctual.usecases.firing import driver_skips, schedule_driver
from punctual.usecases.kernel.context import Services
from punctual.usecases.tenancy.health import ORPHANED_SCHEDULE

log = logging.getLogger("punctual.reconcile")

PAGE = 200
ORPHAN_GRACE = timedelta(seconds=60)


@dataclass(frozen=True)
class ReconcileReport:
    checked: int = 0
    ensured: int = 0
    removed: int = 0
    orphans: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def reconcile(services: Services, *, orphan_grace: timedelta = ORPHAN_GRACE) -> ReconcileReport:
    """One sweep (``POST /internal/reconcile``, at startup and on a timer); raises
    ``EngineUnavailable`` when Temporal cannot be reached (nothing is changed then)."""
    if not schedule_driver.uses_driver(services):
        return ReconcileReport()
    settled = _settle_unfinished_creates(services, orphan_grace)
    checked = ensured = orphans = 0
    skips = driver_skips.DriverSkipsReport()
    live: set[str] = set()
    after = ""
    while True:
        with services.store.transaction(readonly=True) as tx:
            page = tx.schedule_sync.live_schedules(after, PAGE)
            schedules = tx.schedules.get_many([schedule_id for schedule_id, _ in page])
            records = tx.schedule_sync.get_many(list(schedules))
        if not page:
            break
        after = page[-1][0]
        live.update(schedules)
        views = services.driver.describe_many(list(schedules))
        for schedule in schedules.values():
            record = records.get(schedule.id)
            if record is not None and record.unfinished_create:
                continue  # its saga's own, or the settling above once it is old
            checked += 1
            was_orphaned = record is not None and record.state is SyncState.ORPHANED
            result = _heal(services, schedule, views.get(schedule.id), was_orphaned)
            ensured += result == "ensured"
            orphans += result == "orphaned"
        # Temporal's own skips (RS-4), from what this page's describe found.
        driver_skips.record_page(services, list(schedules), views, skips)
    removed = settled + _remove_ghosts(services, live, orphan_grace)
    report = ReconcileReport(checked, ensured, removed, orphans)
    changed = ensured or removed or orphans or skips.overlap or skips.missed or skips.dst_skipped
    # A sweep that changed nothing is said at DEBUG: no line on a timer while all is well.
    log.log(
        logging.INFO if changed else logging.DEBUG,
        "event=reconciled %s skipped_overlap=%d skipped_missed=%d skipped_dst=%d",
        " ".join(f"{k}={v}" for k, v in report.as_dict().items()),
        skips.overlap,
        skips.missed,
        skips.dst_skipped,
    )
    return report


def _heal(services: Services, schedule: Schedule, view: Any, was_orphaned: bool) -> str:
    now = services.clock.now()
    wanted = schedule_driver.desired(schedule)
    if view is not None and view.present and not view.marked:
        # Same id, someone else's Schedule: never touched; the record cannot fire.
        with services.store.transaction() as tx:
            schedule_driver.record_sync(tx, schedule.id, SyncState.ORPHANED, now)
            tx.findings.raise_finding(
                schedule.tenant,
                ORPHANED_SCHEDULE,
                schedule.id,
                "error",
                f"schedule {schedule.id} cannot fire: a Temporal Schedule with its id exists "
                "without this installation's mark; remove that one or recreate this schedule",
                now,
            )
        return "orphaned"
    matches = (
        view is not None
        and view.present
        and view.digest == wanted.digest
        and view.paused == wanted.paused
    )
    times = view.next_fire_times if view is not None else []
    result = "in_sync"
    if not matches:
        try:
            schedule_driver.check_supported(
                services,
                schedule.timing,
                schedule.policy,
                pause_until=schedule.pause_until,
                stored=True,
            )
            times = services.driver.ensure(wanted)
        except InvalidRequest:
            # Made under the SQL driver with what Temporal cannot honour: left drifted.
            with services.store.transaction() as tx:
                schedule_driver.record_sync(tx, schedule.id, SyncState.DRIFTED, now)
            return "unsupported"
        result = "ensured"
    with services.store.transaction() as tx:
        schedule_driver.record_sync(tx, schedule.id, SyncState.IN_SYNC, now, times, wanted.digest)
        if was_orphaned:  # the unmarked Schedule that held its id is gone
            tx.findings.clear(schedule.tenant, ORPHANED_SCHEDULE, schedule.id)
    return result


def _settle_unfinished_creates(services: Services, grace: timedelta) -> int:
    """Remove what create sagas older than ``grace`` left: Temporal copy first (never a
    firing ghost), then the record; a saga resumed meanwhile is younger and left alone."""
    cutoff = services.clock.now() - grace
    with services.store.transaction(readonly=True) as tx:
        candidates = tx.schedule_sync.unfinished_creates(cutoff, PAGE)
    settled = 0
    for schedule_id in candidates:
        try:
            services.driver.remove(schedule_id)
        except EngineUnavailable:
            log.warning("event=reconcile_remove_failed schedule=%s", schedule_id)
            continue
        with services.store.transaction() as tx:
            now = services.clock.now()
            record = tx.schedule_sync.get_many([schedule_id]).get(schedule_id)
            if record is None or not record.unfinished_create or record.checked_at >= cutoff:
                continue  # finished, or resumed by a retry, since it was read
            schedule = tx.schedules.get_many([schedule_id]).get(schedule_id)
            if schedule is not None and schedule.deleted_at is None:
                schedule_driver.discard_unfinished_create(tx, schedule, now)
            tx.schedule_sync.forget(schedule_id)
        log.warning("event=unfinished_create_removed schedule=%s", schedule_id)
        settled += 1
    return settled


def _remove_ghosts(services: Services, live: set[str], grace: timedelta) -> int:
    ghosts = [i for i in services.driver.list_marked() if i not in live]
    if not ghosts:
        return 0
    with services.store.transaction(readonly=True) as tx:
        # Read again: a create may have committed since the page was read.
        still = {s.id for s in tx.schedules.get_many(ghosts).values() if s.deleted_at is None}
    removed = 0
    views = services.driver.describe_many([g for g in ghosts if g not in still])
    cutoff = services.clock.now() - grace
    for ghost, view in views.items():
        if not view.present or not view.marked:
            continue
        if view.ensured_at is not None and view.ensured_at > cutoff:
            continue
        try:
            services.driver.remove(ghost)
        except EngineUnavailable:
            log.warning("event=reconcile_remove_failed schedule=%s", ghost)
            continue
        removed += 1
    return removed
