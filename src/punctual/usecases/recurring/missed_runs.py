"""The missed-run audit (SPEC RS-10, API.md ``GET …/schedules/{id}/audit``): every instant
a schedule's specs yielded in a range, with what became of it and why. ``missing`` must
never appear; when it does, it is punctual's own defect, and health says so."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from punctual.domain.permissions import Principal
from punctual.domain.schedule_audit import (
    MAX_AUDIT_INSTANTS,
    AuditItem,
    AuditTooLarge,
    Outcome,
    Pause,
    audit,
    pauses,
)
from punctual.domain.schedules import ScheduleState
from punctual.domain.timeutil import to_rfc3339
from punctual.errors import InvalidRequest, not_found
from punctual.usecases.kernel.context import Services

MISSING_OCCURRENCE = "occurrence_missing"
"""The health finding of an audit that found an instant with no decision."""


@dataclass(frozen=True)
class AuditSchedule:
    schedule_id: str
    start: datetime
    end: datetime


def audit_schedule(services: Services, principal: Principal, cmd: AuditSchedule) -> dict[str, Any]:
    """``{"items": [...], "paused": [...]}`` for ``[start, end)``; a range of more than
    ``MAX_AUDIT_INSTANTS`` instants is refused by name."""
    if cmd.start >= cmd.end:
        raise InvalidRequest(
            f"from ({to_rfc3339(cmd.start)}) must be before to ({to_rfc3339(cmd.end)})",
            errors=[{"loc": ["query", "to"], "msg": "not after from", "type": "value_error"}],
        )
    now = services.clock.now()
    kept = services.retention_keep_for(principal.tenant)
    if kept < math.inf and cmd.start < now - timedelta(seconds=kept):
        earliest = to_rfc3339(now - timedelta(seconds=kept))
        raise InvalidRequest(
            f"records older than {earliest} may have been removed by retention (keep_seconds "
            f"{kept:g}): audit from {earliest} on",
            errors=[{"loc": ["query", "from"], "msg": "before retention", "type": "range"}],
        )
    with services.store.transaction(readonly=True) as tx:
        schedule = tx.schedules.get(principal.tenant, cmd.schedule_id, deleted=True)
        if schedule is None:
            raise not_found("schedule", cmd.schedule_id)
        events = tx.schedules.events(schedule.id)
        rows = tx.starts.audit_rows(schedule.id, cmd.start, cmd.end)
        ends_after = schedule.end_at
        if schedule.remaining_occurrences == 0:
            last = tx.starts.last_decided(schedule.id)
            ends_after = last if ends_after is None or last is None else min(ends_after, last)
    try:
        items = audit(
            events,
            rows,
            cmd.start,
            cmd.end,
            decided_until=schedule.cursor,
            ended=schedule.state is ScheduleState.ENDED,
            timing=schedule.timing,
            ends_after=ends_after,
        )
    except AuditTooLarge as exc:
        raise InvalidRequest(
            str(exc),
            errors=[{"loc": ["query", "to"], "msg": f"over {MAX_AUDIT_INSTANTS}", "type": "range"}],
        ) from None
    missing = [item for item in items if item.outcome is Outcome.MISSING]
    if missing:
        with services.store.transaction() as tx:
            tx.findings.raise_finding(
                schedule.tenant,
                MISSING_OCCURRENCE,
                schedule.id,
                "error",
                f"{len(missing)} instants of schedule {schedule.name} from "
                f"{to_rfc3339(missing[0].instant)} have no decision recorded: a defect of "
                "punctual; backfill the range to run them",
                now,
            )
    held = [p for p in pauses(events) if p.start < cmd.end and (p.end is None or p.end > cmd.start)]
    return {"items": [_item_view(item) for item in items], "paused": [_pause_view(p) for p in held]}


def _item_view(item: AuditItem) -> dict[str, Any]:
    return {
        "instant": to_rfc3339(item.instant),
        "spec_indexes": list(item.spec_indexes),
        "outcome": item.outcome.value,
        "reason": item.reason,
        "occurrence_id": item.occurrence_id,
        "run_id": item.run_id,
        "run_state": item.run_state,
        "pause": _pause_view(item.pause) if item.pause is not None else None,
    }


def _pause_view(pause: Pause) -> dict[str, Any]:
    return {
        "from": to_rfc3339(pause.start),
        "to": to_rfc3339(pause.end) if pause.end is not None else None,
        "by": pause.by,
    }
