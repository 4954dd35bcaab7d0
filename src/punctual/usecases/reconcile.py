"""Reconciliation of schedules with the firing driver (SPEC CR-6).

With the SQL driver the store is both the record and what fires, so there is nothing to
reconcile: the report is all zeros. Under the Temporal Schedules driver one sweep heals
drift both ways:

* every live record whose Temporal Schedule is missing, or differs from what the record
  says (its digest or paused state), is ensured again; the cached next fire times and
  ``sync`` are refreshed for all of them (the periodic describe);
* every Temporal Schedule that carries this installation's mark and has no live record is
  removed, once it is older than ``orphan_grace`` (a create ensures before it commits, so
  a young one may be a create in flight); Temporal Schedules without the mark are never
  touched: they belong to another team or installation.
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
from punctual.usecases import schedule_driver
from punctual.usecases.context import Services

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
    checked = ensured = orphans = 0
    live: set[str] = set()
    after = ""
    while True:
        with services.store.transaction(readonly=True) as tx:
            page = tx.schedule_sync.live_schedules(after, PAGE)
            schedules = tx.schedules.get_many([schedule_id for schedule_id, _ in page])
        if not page:
            break
        after = page[-1][0]
        live.update(schedules)
        views = services.driver.describe_many(list(schedules))
        for schedule in schedules.values():
            checked += 1
            result = _heal(services, schedule, views.get(schedule.id))
            ensured += result == "ensured"
            orphans += result == "orphaned"
    removed = _remove_ghosts(services, live, orphan_grace)
    report = ReconcileReport(checked, ensured, removed, orphans)
    log.info("event=reconciled %s", " ".join(f"{k}={v}" for k, v in report.as_dict().items()))
    return report


def _heal(services: Services, schedule: Schedule, view: Any) -> str:
    now = services.clock.now()
    wanted = schedule_driver.desired(schedule)
    if view is not None and view.present and not view.marked:
        # Same id, someone else's Schedule: never touched; the record cannot fire.
        with services.store.transaction() as tx:
            schedule_driver.record_sync(tx, schedule.id, SyncState.ORPHANED, now)
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
            schedule_driver.check_supported(services, schedule.spec, schedule.policy.jitter)
            times = services.driver.ensure(wanted)
        except InvalidRequest:
            # Made under the SQL driver with what Temporal cannot honour: left drifted.
            with services.store.transaction() as tx:
                schedule_driver.record_sync(tx, schedule.id, SyncState.DRIFTED, now)
            return "unsupported"
        result = "ensured"
    with services.store.transaction() as tx:
        schedule_driver.record_sync(tx, schedule.id, SyncState.IN_SYNC, now, times, wanted.digest)
    return result


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
