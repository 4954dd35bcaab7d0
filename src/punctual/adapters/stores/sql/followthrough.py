"""Follow-through: which runs of occurrences await it, their baselines, what it recorded.

A run of a schedule awaits its follow-through from its insert (``runs.follow_up`` = 0)
until it is marked done (2). Both claims read through a partial index that holds only
awaiting runs, so the pass costs the same however many runs the store keeps; their
predicates are repeated term by term, with constants rather than parameters, so that
both databases recognize the index as usable.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import for_update, lock_name, upsert
from punctual.adapters.stores.sql.rows import record_columns, record_from_row
from punctual.domain.runs import RunState
from punctual.ports.records import BaselineRun, EndedRun, FollowThroughRecord

_r = t.runs.c
_s = t.starts.c
_f = t.follow_throughs.c

_AWAITING: sa.ColumnElement[int] = sa.literal_column("2")
"""Stage 2 is done: a run below it is awaited."""
_UNRECORDED: sa.ColumnElement[int] = sa.literal_column("0")
_OUTCOMES = sa.text(t.SCHEDULE_OUTCOMES)
"""The predicate of ``ix_runs_schedule_outcomes``, as constants (the index is then usable)."""
_OUTCOMES_PER_STATEMENT = 100
"""Schedules read per statement (SQLite takes at most 500 terms in one compound select)."""


def _ended_run(row: RowMapping) -> EndedRun:
    return record_from_row(EndedRun, row, run_id=row["id"], stage=row["follow_up"])


def _record(row: RowMapping) -> FollowThroughRecord:
    return record_from_row(FollowThroughRecord, row, regressions=list(row["regressions"] or []))


class SqlFollowThrough:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def _awaiting(self, *conditions: sa.ColumnElement[bool]) -> sa.Select[Any]:
        """Awaiting runs with their occurrence (the start row that allocated the run)."""
        return (
            sa.select(
                _r.id,
                _r.tenant,
                _r.schedule_id,
                _r.state,
                _r.result,
                _r.error,
                _r.created_at,
                _r.ended_at,
                _r.follow_up,
                _s.id.label("occurrence_id"),
                _s.occurrence_at,
            )
            .select_from(t.runs.join(t.starts, _s.run_id == _r.id))
            .where(_r.schedule_id.is_not(None), *conditions)
        )

    def claim_ended(self, limit: int) -> list[EndedRun]:
        if limit <= 0:
            return []
        query = (
            self._awaiting(_r.follow_up < _AWAITING, _r.ended_at.is_not(None))
            .order_by(_r.ended_at, _r.seq)
            .limit(limit)
        )
        locked = for_update(query, self._conn, of=t.runs, skip_locked=True)
        return [_ended_run(row) for row in self._conn.execute(locked).mappings()]

    def claim_overdue(self, created_before: datetime, limit: int) -> list[EndedRun]:
        if limit <= 0:
            return []
        query = (
            self._awaiting(
                _r.follow_up == _UNRECORDED,
                _r.ended_at.is_(None),
                _r.created_at < created_before,
            )
            .order_by(_r.created_at, _r.seq)
            .limit(limit)
        )
        locked = for_update(query, self._conn, of=t.runs, skip_locked=True)
        return [_ended_run(row) for row in self._conn.execute(locked).mappings()]

    def baseline(self, schedule_id: str, occurrence_at: datetime) -> BaselineRun | None:
        """Walks the schedule's occurrences down from ``occurrence_at`` (its unique
        (schedule_id, occurrence_at) index) to the first whose run completed."""
        query = (
            sa.select(_r.id, _s.occurrence_at, _r.result)
            .select_from(t.starts.join(t.runs, _r.id == _s.run_id))
            .where(
                _s.schedule_id == schedule_id,
                _s.occurrence_at < occurrence_at,
                _r.state == RunState.COMPLETED.value,
            )
            .order_by(_s.occurrence_at.desc())
            .limit(1)
        )
        row = self._conn.execute(query).first()
        if row is None:
            return None
        return BaselineRun(run_id=row.id, occurrence_at=row.occurrence_at, result=row.result)

    def record(self, records: Sequence[FollowThroughRecord]) -> set[str]:
        latest = {r.occurrence_id: r for r in records}
        upsert(
            self._conn,
            t.follow_throughs,
            [record_columns(latest[key]) for key in sorted(latest)],
            ["occurrence_id"],
        )
        return set(latest)

    def get_many(self, occurrence_ids: Collection[str]) -> dict[str, FollowThroughRecord]:
        if not occurrence_ids:
            return {}
        query = sa.select(t.follow_throughs).where(_f.occurrence_id.in_(sorted(occurrence_ids)))
        return {row["occurrence_id"]: _record(row) for row in self._conn.execute(query).mappings()}

    def mark_stage(self, run_ids: Sequence[str], stage: int) -> None:
        """Stages only grow: marking a run done twice, or 1 after 2, changes nothing."""
        if not run_ids:
            return
        self._conn.execute(
            sa.update(t.runs)
            .where(_r.id.in_(sorted(set(run_ids))), _r.follow_up < stage)
            .values(follow_up=stage)
        )

    def hold_outcomes(self) -> None:
        """A transaction lock on PostgreSQL; SQLite's write lock already serializes passes."""
        lock_name(self._conn, "punctual.schedule_outcomes")

    def latest_outcomes(
        self, schedule_ids: Collection[str], count: int
    ) -> dict[str, list[tuple[str, str]]]:
        """Each schedule's last ``count`` runs to end, latest first, read through
        ``ix_runs_schedule_outcomes``: a few index entries per schedule, one statement per
        hundred schedules."""
        ordered = sorted(set(schedule_ids))
        found: dict[str, list[tuple[str, str]]] = {}
        if count <= 0:
            return found
        for at in range(0, len(ordered), _OUTCOMES_PER_STATEMENT):
            parts = [
                sa.select(
                    sa.select(_r.schedule_id, _r.id, _r.state, _r.ended_at, _r.seq)
                    .where(_r.schedule_id == schedule_id, _OUTCOMES)
                    .order_by(_r.ended_at.desc(), _r.seq.desc())
                    .limit(count)
                    .subquery()
                )
                for schedule_id in ordered[at : at + _OUTCOMES_PER_STATEMENT]
            ]
            rows = self._conn.execute(sa.union_all(*parts)).all()
            for row in sorted(rows, key=lambda r: (r.ended_at, r.seq), reverse=True):
                found.setdefault(row.schedule_id, []).append((row.id, row.state))
        return found
