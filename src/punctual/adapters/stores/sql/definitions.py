"""Host-global workflow definitions and the workers that have them loaded."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import insert_ignore, lock_name
from punctual.adapters.stores.sql.reads import first_record
from punctual.adapters.stores.sql.rows import definition_from_row, record_from_row
from punctual.domain.runs import Definition, DefinitionState
from punctual.ports.records import WorkerRecord

_d = t.definitions.c
_w = t.workers.c


def _lock_workflow(conn: sa.Connection, name: str) -> None:
    """Serialize the decisions that make a version of ``name`` active."""
    lock_name(conn, f"punctual.definition:{name}")


class SqlDefinitions:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def register(
        self,
        name: str,
        version: str,
        artifact: str,
        input_schema: dict[str, Any],
        execution_timeout_seconds: float,
        now: datetime,
    ) -> bool:
        """Insert the version if new; it becomes active when it is the name's first version.

        An existing version keeps its state and artifact: a worker restarting must not
        silently re-activate a retired version or rewrite history. Concurrent registrants
        of one name queue on the name's lock, so the second sees the first's version and
        registers its own as not active (one active version per name).
        """
        _lock_workflow(self._conn, name)
        first = (
            self._conn.execute(sa.select(sa.func.count()).where(_d.name == name)).scalar_one() == 0
        )
        row = {
            "name": name,
            "version": version,
            "state": DefinitionState.ACTIVE.value if first else DefinitionState.DEPRECATED.value,
            "artifact": artifact,
            "input_schema": input_schema,
            "execution_timeout_seconds": execution_timeout_seconds,
            "created_at": now,
        }
        return insert_ignore(self._conn, t.definitions, [row], ["name", "version"]) > 0

    def get(self, name: str, version: str) -> Definition | None:
        query = sa.select(t.definitions).where(_d.name == name, _d.version == version)
        return first_record(self._conn, query, definition_from_row)

    def active(self, name: str) -> Definition | None:
        query = sa.select(t.definitions).where(
            _d.name == name, _d.state == DefinitionState.ACTIVE.value
        )
        return first_record(self._conn, query, definition_from_row)

    def find(self, after_seq: int = 0, limit: int = 1000) -> list[tuple[int, Definition]]:
        query = sa.select(t.definitions).where(_d.seq > after_seq).order_by(_d.seq).limit(limit)
        return [(r["seq"], definition_from_row(r)) for r in self._conn.execute(query).mappings()]

    def set_state(self, name: str, version: str, state: DefinitionState) -> None:
        _lock_workflow(self._conn, name)
        if state is DefinitionState.ACTIVE:
            # Zero or one active version per name: the previous one steps down.
            self._conn.execute(
                sa.update(t.definitions)
                .where(
                    _d.name == name,
                    _d.state == DefinitionState.ACTIVE.value,
                    _d.version != version,
                )
                .values(state=DefinitionState.DEPRECATED.value)
            )
        self._conn.execute(
            sa.update(t.definitions)
            .where(_d.name == name, _d.version == version)
            .values(state=state.value)
        )

    def upsert_worker(self, worker: WorkerRecord) -> None:
        values = {
            "engine": worker.engine,
            "host": worker.host,
            "task_queues": list(worker.task_queues),
            "loaded": [list(item) for item in worker.loaded],
            "slots": worker.slots,
            "started_at": worker.started_at,
            "heartbeat_at": worker.heartbeat_at,
            "stopped_at": worker.stopped_at,
        }
        if not insert_ignore(self._conn, t.workers, [{"id": worker.id, **values}], ["id"]):
            self._conn.execute(sa.update(t.workers).where(_w.id == worker.id).values(**values))

    def heartbeat_worker(self, worker_id: str, now: datetime) -> bool:
        result = self._conn.execute(
            sa.update(t.workers)
            .where(_w.id == worker_id, _w.stopped_at.is_(None))
            .values(heartbeat_at=now)
        )
        return result.rowcount > 0

    def stop_worker(self, worker_id: str, now: datetime) -> None:
        self._conn.execute(sa.update(t.workers).where(_w.id == worker_id).values(stopped_at=now))

    def live_workers(self, since: datetime) -> list[WorkerRecord]:
        """Workers that heartbeated after ``since`` and have not stopped."""
        query = (
            sa.select(t.workers)
            .where(_w.heartbeat_at >= since, _w.stopped_at.is_(None))
            .order_by(_w.started_at)
        )
        return [
            record_from_row(
                WorkerRecord,
                r,
                task_queues=list(r["task_queues"]),
                loaded=[(a, b, c) for a, b, c in r["loaded"]],
            )
            for r in self._conn.execute(query).mappings()
        ]

    def prune_workers(self, before: datetime) -> list[str]:
        """Forget workers that stopped or went silent before ``before``; their ids."""
        result = self._conn.execute(
            sa.delete(t.workers)
            .where(sa.or_(_w.heartbeat_at < before, _w.stopped_at < before))
            .returning(_w.id)
        )
        return sorted(result.scalars())
