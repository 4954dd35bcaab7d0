"""The store's record of the Temporal Schedules driver (``ports.driver.ScheduleSync``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import insert_ignore, upsert
from punctual.adapters.stores.sql.rows import record_columns, record_from_row
from punctual.domain.timeutil import parse_rfc3339, to_rfc3339
from punctual.ports.driver import SkipMark, SyncRecord, SyncState

_s = t.schedule_sync.c
_INSTALLATION_ROW = 1


class SqlScheduleSync:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def installation_id(self, candidate: str, now: datetime) -> str:
        # The first process to ask records its candidate; every later one reads it back.
        insert_ignore(
            self._conn,
            t.driver_installation,
            [{"id": _INSTALLATION_ROW, "installation_id": candidate, "created_at": now}],
            ["id"],
        )
        stored = self._conn.execute(
            sa.select(t.driver_installation.c.installation_id).where(
                t.driver_installation.c.id == _INSTALLATION_ROW
            )
        ).scalar_one()
        return str(stored)

    def get_many(self, schedule_ids: Sequence[str]) -> dict[str, SyncRecord]:
        if not schedule_ids:
            return {}
        rows = self._conn.execute(
            sa.select(t.schedule_sync).where(_s.schedule_id.in_(list(schedule_ids)))
        ).mappings()
        return {
            row["schedule_id"]: record_from_row(
                SyncRecord,
                row,
                state=SyncState(row["state"]),
                next_fire_times=[parse_rfc3339(v) for v in row["next_fire_times"]],
            )
            for row in rows
        }

    def record(self, record: SyncRecord) -> None:
        upsert(
            self._conn,
            t.schedule_sync,
            [
                record_columns(
                    record,
                    state=record.state.value,
                    next_fire_times=[to_rfc3339(v) for v in record.next_fire_times],
                )
            ],
            ["schedule_id"],
        )

    def forget(self, schedule_id: str) -> None:
        self._conn.execute(sa.delete(t.schedule_sync).where(_s.schedule_id == schedule_id))

    def live_schedules(self, after_id: str, limit: int) -> list[tuple[str, str]]:
        s = t.schedules.c
        rows = self._conn.execute(
            sa.select(s.id, s.tenant)
            .where(s.deleted_at.is_(None), s.id > after_id)
            .order_by(s.id)
            .limit(limit)
        )
        return [(str(r.id), str(r.tenant)) for r in rows]

    def recorded(self, after_id: str, limit: int) -> list[str]:
        rows = self._conn.execute(
            sa.select(_s.schedule_id)
            .where(_s.schedule_id > after_id)
            .order_by(_s.schedule_id)
            .limit(limit)
        )
        return [str(r) for r in rows.scalars()]

    def not_in_sync(self, limit: int) -> list[str]:
        rows = self._conn.execute(
            sa.select(_s.schedule_id)
            .where(_s.state != SyncState.IN_SYNC.value)
            .order_by(_s.checked_at)
            .limit(limit)
        )
        return [str(r) for r in rows.scalars()]

    def unfinished_creates(self, checked_before: datetime, limit: int) -> list[str]:
        rows = self._conn.execute(
            sa.select(_s.schedule_id)
            .where(_s.create_token.is_not(None), _s.checked_at < checked_before)
            .order_by(_s.checked_at)
            .limit(limit)
        )
        return [str(r) for r in rows.scalars()]

    def skip_marks(self, schedule_ids: Sequence[str]) -> dict[str, SkipMark]:
        if not schedule_ids:
            return {}
        rows = self._conn.execute(
            sa.select(_s.schedule_id, _s.skips_checked_through, _s.skips_version).where(
                _s.schedule_id.in_(list(schedule_ids)),
                _s.skips_checked_through.is_not(None),
                _s.skips_version.is_not(None),
            )
        )
        return {
            str(r.schedule_id): SkipMark(
                str(r.schedule_id), r.skips_checked_through, int(r.skips_version)
            )
            for r in rows
        }

    def record_skip_mark(self, mark: SkipMark) -> None:
        self._conn.execute(
            sa.update(t.schedule_sync)
            .where(_s.schedule_id == mark.schedule_id)
            .values(
                skips_checked_through=mark.checked_through,
                skips_version=mark.schedule_version,
            )
        )
