"""Runs: the store's record of every execution, and the local engine's work queue."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import claimable, insert_ignore, notify
from punctual.adapters.stores.sql.listener import RUNS_CHANNEL
from punctual.adapters.stores.sql.rows import run_from_row
from punctual.domain.runs import Run, RunState
from punctual.ports.records import ClaimedRun, EncryptedInput, NewRun, RunFilter, RunFlags

_r = t.runs.c
_ACTIVE = (RunState.PENDING.value, RunState.RUNNING.value)


class SqlRuns:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def insert_new(self, runs: Sequence[NewRun], now: datetime) -> int:
        """Create runs that do not exist yet; an existing run id is left untouched (WF-6)."""
        rows = [
            {
                "id": run.id,
                "tenant": run.tenant,
                "workflow": run.workflow,
                "definition_version": run.definition_version,
                "artifact": run.artifact,
                "state": RunState.PENDING.value,
                "origin": run.origin,
                "origin_id": run.origin.get("id", ""),
                "started_by": run.started_by,
                "attempts": 0,
                "input": run.input.ciphertext,
                "input_key_id": run.input.key_id,
                "task_queue": run.task_queue,
                "priority": run.priority,
                "traceparent": run.traceparent,
                "timeout_seconds": run.timeout_seconds,
                "cancel_requested": False,
                "created_at": now,
                "queued_at": now,
                "schedule_id": run.origin.get("schedule_id"),
            }
            for run in runs
        ]
        # Chunks keep one statement under the drivers' parameter limits.
        inserted = sum(
            insert_ignore(self._conn, t.runs, rows[i : i + 500], ["id"])
            for i in range(0, len(rows), 500)
        )
        if inserted:
            notify(self._conn, RUNS_CHANNEL)
        return inserted

    def get(self, tenant: str, run_id: str) -> Run | None:
        row = (
            self._conn.execute(sa.select(t.runs).where(_r.tenant == tenant, _r.id == run_id))
            .mappings()
            .first()
        )
        return run_from_row(row) if row else None

    def find(
        self, tenant: str, where: RunFilter, after_seq: int, limit: int
    ) -> list[tuple[int, Run]]:
        query = sa.select(t.runs).where(_r.tenant == tenant, _r.seq > after_seq)
        if where.workflow:
            query = query.where(_r.workflow == where.workflow)
        if where.state:
            query = query.where(_r.state == where.state)
        if where.origin_id:
            query = query.where(_r.origin_id == where.origin_id)
        query = query.order_by(_r.seq).limit(limit)
        return [(r["seq"], run_from_row(r)) for r in self._conn.execute(query).mappings()]

    def count_unfinished(self, workflow: str, version: str) -> int:
        query = sa.select(sa.func.count()).where(
            _r.workflow == workflow, _r.definition_version == version, _r.state.in_(_ACTIVE)
        )
        return int(self._conn.execute(query).scalar_one())

    def count_active_of_schedule(self, schedule_id: str) -> int:
        query = sa.select(sa.func.count()).where(
            _r.schedule_id == schedule_id, _r.state.in_(_ACTIVE)
        )
        return int(self._conn.execute(query).scalar_one())

    def request_cancel(self, tenant: str, run_id: str, now: datetime) -> None:
        """Cooperative cancel: an unclaimed pending run ends at once, a running one is flagged."""
        self._conn.execute(
            sa.update(t.runs)
            .where(
                _r.tenant == tenant,
                _r.id == run_id,
                _r.state == RunState.PENDING.value,
                _r.claimed_by.is_(None),
            )
            .values(
                state=RunState.CANCELED.value,
                cancel_requested=True,
                ended_at=now,
                error={"reason": "canceled before a worker picked it up"},
            )
        )
        self._conn.execute(
            sa.update(t.runs)
            .where(_r.tenant == tenant, _r.id == run_id, _r.state.in_(_ACTIVE))
            .values(cancel_requested=True)
        )

    def terminate(self, tenant: str, run_id: str, now: datetime, reason: str) -> None:
        """Record the run terminated now; the worker kills its body when it notices."""
        self._conn.execute(
            sa.update(t.runs)
            .where(_r.tenant == tenant, _r.id == run_id, _r.state.in_(_ACTIVE))
            .values(state=RunState.TERMINATED.value, ended_at=now, error={"reason": reason})
        )

    def claim_pending(
        self,
        worker_id: str,
        task_queues: Sequence[str],
        loaded: Sequence[tuple[str, str]],
        limit: int,
        lease_until: datetime,
        now: datetime,
    ) -> list[ClaimedRun]:
        """Claim pending runs this worker can execute, by priority then age; a new attempt each."""
        if not loaded or limit <= 0:
            return []
        pending = (
            sa.select(_r.id)
            .where(
                _r.state == RunState.PENDING.value,
                _r.task_queue.in_(list(task_queues)),
                sa.tuple_(_r.workflow, _r.definition_version).in_(list(loaded)),
            )
            .order_by(_r.priority, _r.seq)
            .limit(limit)
        )
        claimed = self._conn.execute(
            sa.update(t.runs)
            .where(_r.id.in_(claimable(pending, self._conn)), _r.state == RunState.PENDING.value)
            .values(
                state=RunState.RUNNING.value,
                claimed_by=worker_id,
                lease_until=lease_until,
                attempts=_r.attempts + 1,
                started_at=now,
            )
            .returning(
                _r.id,
                _r.tenant,
                _r.workflow,
                _r.definition_version,
                _r.origin,
                _r.attempts,
                _r.input,
                _r.input_key_id,
                _r.timeout_seconds,
            )
        )
        return [
            ClaimedRun(
                id=r["id"],
                tenant=r["tenant"],
                workflow=r["workflow"],
                definition_version=r["definition_version"],
                origin=dict(r["origin"]),
                attempt=r["attempts"],
                input=EncryptedInput(r["input_key_id"], r["input"]),
                timeout_seconds=r["timeout_seconds"],
            )
            for r in claimed.mappings()
        ]

    def renew_leases(self, worker_id: str, run_ids: Sequence[str], lease_until: datetime) -> None:
        if run_ids:
            self._conn.execute(
                sa.update(t.runs)
                .where(
                    _r.id.in_(list(run_ids)),
                    _r.claimed_by == worker_id,
                    _r.state == RunState.RUNNING.value,
                )
                .values(lease_until=lease_until)
            )

    def flags(self, run_ids: Sequence[str]) -> list[RunFlags]:
        if not run_ids:
            return []
        query = sa.select(_r.id, _r.state, _r.cancel_requested).where(_r.id.in_(list(run_ids)))
        return [RunFlags(r[0], r[1], bool(r[2])) for r in self._conn.execute(query)]

    def finish(
        self,
        run_id: str,
        worker_id: str,
        attempt: int,
        state: RunState,
        result: Any,
        error: dict[str, Any] | None,
        now: datetime,
    ) -> bool:
        """Record the outcome of this attempt; False if the run moved on (terminated, lost)."""
        outcome = self._conn.execute(
            sa.update(t.runs)
            .where(
                _r.id == run_id,
                _r.claimed_by == worker_id,
                _r.attempts == attempt,
                _r.state == RunState.RUNNING.value,
            )
            .values(state=state.value, result=result, error=error, ended_at=now, lease_until=None)
        )
        return outcome.rowcount == 1

    def release_lost(self, now: datetime, max_attempts: int) -> tuple[int, int]:
        """Runs whose worker's lease expired: retry as a new attempt, or fail after too many.

        Returns (requeued, failed).
        """
        expired = sa.and_(_r.state == RunState.RUNNING.value, _r.lease_until < now)
        failed = self._conn.execute(
            sa.update(t.runs)
            .where(expired, _r.attempts >= max_attempts)
            .values(
                state=RunState.FAILED.value,
                ended_at=now,
                error={
                    "type": "WorkerLost",
                    "message": f"its worker was lost {max_attempts} times",
                },
            )
        ).rowcount
        requeued = self._conn.execute(
            sa.update(t.runs)
            .where(expired)
            .values(state=RunState.PENDING.value, claimed_by=None, lease_until=None, queued_at=now)
        ).rowcount
        return requeued, failed

    def time_out_pending(self, queued_before: datetime, now: datetime, timeout: float) -> int:
        """Runs waiting in the queue since before ``queued_before`` end ``timed_out`` (WF-7),
        including runs requeued after a lost worker that no worker picks up again."""
        return self._conn.execute(
            sa.update(t.runs)
            .where(_r.state == RunState.PENDING.value, _r.queued_at < queued_before)
            .values(
                state=RunState.TIMED_OUT.value,
                ended_at=now,
                error={"reason": f"no worker picked it up within {timeout:g} s"},
            )
        ).rowcount
