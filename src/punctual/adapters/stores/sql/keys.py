"""The codec key lifecycle's records (RT-2): the active key id, the processes' key reports
and the sealed columns a rewrap moves onto the active key.

``SEALED`` names every column that holds a sealed value and which of its rows may still be
read; ``key_usage`` counts them and ``sealed``/``reseal`` rewrap them, so what a key is
"needed by" and what a rewrap moves off it are one definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import (
    insert_ignore,
    lock_name,
    passed,
    store_now,
    store_stamp,
)
from punctual.adapters.stores.sql.rows import record_from_row
from punctual.domain.starts import StartState
from punctual.ports.records import (
    EncryptedInput,
    ProcessRecord,
    Resealed,
    SealedKind,
    SealedValue,
)

_p = t.processes.c
_state = t.codec_state.c
_STATE_ROW = 1
_LOCK = "punctual.codec_keys"


@dataclass(frozen=True)
class SealedColumn:
    """A column of sealed values: ``needed`` selects the rows that may still be read,
    ``idle`` those of them a rewrap may change now."""

    table: sa.Table
    value: str
    needed: sa.ColumnElement[bool]
    idle: sa.ColumnElement[bool]

    @property
    def key(self) -> str:
        """The column of the values' key ids (as ``rows.encrypted_columns`` names it)."""
        return f"{self.value}_key_id"


def _sealed_columns() -> dict[SealedKind, SealedColumn]:
    starts, runs, schedules, webhooks = t.starts.c, t.runs.c, t.schedules.c, t.webhooks.c
    waiting = (StartState.SCHEDULED.value, StartState.BUFFERED.value)
    unfinished = runs.state.in_(["pending", "running"])
    live_schedule = schedules.deleted_at.is_(None)
    live_webhook = webhooks.deleted_at.is_(None)
    live_secret = sa.and_(live_webhook, webhooks.secret_key_id.is_not(None))
    return {
        SealedKind.STARTS: SealedColumn(
            t.starts,
            "input",
            starts.state.in_([*waiting, StartState.DISPATCHING.value]),
            # A claimed start's dispatch copies the input it read: left to its claim.
            starts.state.in_(waiting),
        ),
        SealedKind.RUNS: SealedColumn(t.runs, "input", unfinished, unfinished),
        SealedKind.SCHEDULES: SealedColumn(t.schedules, "input", live_schedule, live_schedule),
        SealedKind.WEBHOOK_URLS: SealedColumn(t.webhooks, "url", live_webhook, live_webhook),
        SealedKind.WEBHOOK_SECRETS: SealedColumn(t.webhooks, "secret", live_secret, live_secret),
    }


SEALED = _sealed_columns()


def key_usage(conn: sa.Connection) -> dict[str, dict[str, int]]:
    """Key id -> {kind: count} of the sealed values that may still be read."""
    usage: dict[str, dict[str, int]] = {}
    for kind, column in SEALED.items():
        key = column.table.c[column.key]
        query = sa.select(key, sa.func.count()).where(column.needed).group_by(key)
        for key_id, count in conn.execute(query):
            usage.setdefault(key_id, {})[kind.value] = int(count)
    return usage


def _process(row: RowMapping) -> ProcessRecord:
    return record_from_row(
        ProcessRecord, row, components=list(row["components"]), key_ids=list(row["key_ids"])
    )


class SqlKeys:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def lock(self) -> None:
        lock_name(self._conn, _LOCK)

    def active_key_id(self) -> str | None:
        query = sa.select(_state.active_key_id).where(_state.id == _STATE_ROW)
        found: str | None = self._conn.execute(query).scalar_one_or_none()
        return found

    def set_active_key_id(self, key_id: str, now: datetime) -> None:
        values = {"active_key_id": key_id, "activated_at": now}
        inserted = insert_ignore(self._conn, t.codec_state, [{"id": _STATE_ROW, **values}], ["id"])
        if not inserted:
            self._conn.execute(
                sa.update(t.codec_state).where(_state.id == _STATE_ROW).values(**values)
            )

    def heartbeat_process(self, process: ProcessRecord, now: datetime) -> None:
        reported = {
            "host": process.host,
            "pid": process.pid,
            "components": sorted(process.components),
            "key_ids": sorted(process.key_ids),
            "active_key_id": process.active_key_id,
            "heartbeat_at": store_stamp(self._conn, now),
        }
        refreshed = self._conn.execute(
            sa.update(t.processes)
            .where(_p.id == process.id, _p.stopped_at.is_(None))
            .values(**reported)
        )
        if refreshed.rowcount == 0 and not self._known(process.id):
            # New, or forgotten by a prune while it could not reach the store. A stopped
            # row is known and keeps its stop. Only this process writes its own row.
            self._conn.execute(
                sa.insert(t.processes).values(
                    id=process.id, started_at=process.started_at, **reported
                )
            )

    def _known(self, process_id: str) -> bool:
        query = sa.select(_p.id).where(_p.id == process_id)
        return self._conn.execute(query).first() is not None

    def stop_process(self, process_id: str, now: datetime) -> None:
        self._conn.execute(
            sa.update(t.processes)
            .where(_p.id == process_id)
            .values(stopped_at=store_now(self._conn, now))
        )

    def _silent(self, liveness_seconds: float, now: datetime) -> sa.ColumnElement[bool]:
        return passed(self._conn, _p.heartbeat_at, sa.literal(liveness_seconds, sa.Float), now)

    def live_processes(self, liveness_seconds: float, now: datetime) -> list[ProcessRecord]:
        query = (
            sa.select(t.processes)
            .where(_p.stopped_at.is_(None), sa.not_(self._silent(liveness_seconds, now)))
            .order_by(_p.started_at, _p.id)
        )
        return [_process(row) for row in self._conn.execute(query).mappings()]

    def prune_processes(self, liveness_seconds: float, now: datetime) -> int:
        result = self._conn.execute(
            sa.delete(t.processes).where(
                sa.or_(_p.stopped_at.is_not(None), self._silent(liveness_seconds, now))
            )
        )
        return result.rowcount

    def sealed(
        self, kind: SealedKind, other_than: str, after_seq: int, limit: int
    ) -> list[SealedValue]:
        column = SEALED[kind]
        c = column.table.c
        query = (
            sa.select(c.seq, c.id, c.tenant, c[column.key], c[column.value])
            .where(column.idle, c[column.key] != other_than, c.seq > after_seq)
            .order_by(c.seq)
            .limit(limit)
        )
        return [
            SealedValue(kind, seq, row_id, tenant, EncryptedInput(key_id, value))
            for seq, row_id, tenant, key_id, value in self._conn.execute(query)
        ]

    def reseal(self, kind: SealedKind, values: Sequence[Resealed]) -> set[str]:
        if not values:
            return set()
        column = SEALED[kind]
        c = column.table.c
        statement = (
            sa.update(column.table)
            .where(
                c.id == sa.bindparam("b_id"),
                c[column.key] == sa.bindparam("b_old_key"),
                c[column.value] == sa.bindparam("b_old_value", type_=sa.LargeBinary),
                column.idle,
            )
            .values({column.key: sa.bindparam("b_new_key"), column.value: sa.bindparam("b_new")})
        )
        replaced = set()
        for item in values:
            # One statement per row keeps each compare-and-set's outcome its own.
            result = self._conn.execute(
                statement,
                {
                    "b_id": item.id,
                    "b_old_key": item.old.key_id,
                    "b_old_value": item.old.ciphertext,
                    "b_new_key": item.new.key_id,
                    "b_new": item.new.ciphertext,
                },
            )
            if result.rowcount == 1:
                replaced.add(item.id)
        return replaced
