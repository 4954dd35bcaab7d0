"""Runs: the store's record of every execution, and the local engine's work queue."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from punctual.adapters.stores.sql import column_types
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import (
    claimable,
    insert_ignore,
    lease_expiry,
    notify,
    passed,
    store_now,
    store_stamp,
    update_many,
)
from punctual.adapters.stores.sql.listener import ENDED_CHANNEL, RUNS_CHANNEL
from punctual.adapters.stores.sql.reads import first_record, paged, paged_within
from punctual.adapters.stores.sql.rows import (
    encrypted_columns,
    encrypted_from_row,
    record_columns,
    record_from_row,
    run_from_row,
)
from punctual.domain.runs import Run, RunErrorCode, RunState, claim_token, run_error
from punctual.ports.records import (
    AttemptOutcome,
    ClaimedRun,
    NewRun,
    RunClaim,
    RunFilter,
    RunFlags,
    Seek,
    StoreEndedRun,
)

_r = t.runs.c
_ACTIVE = (RunState.PENDING.value, RunState.RUNNING.value)
_FINISH_MANY = sa.text(
    "WITH ended AS (UPDATE runs SET state = batch.state, result = CAST(batch.result AS JSONB), "
    "error = CAST(batch.error AS JSONB), ended_at = :now, lease_until = NULL, "
    "started_at = COALESCE(batch.started_at, runs.started_at) "
    "FROM unnest(:ids, :tokens, :states, :results, :errors, :started) "
    "AS batch(id, claim_token, state, result, error, started_at) "
    "WHERE runs.id = batch.id AND runs.claim_token = batch.claim_token "
    "AND runs.state = 'running' RETURNING runs.id, runs.schedule_id) "
    # A schedule's run ended: its follow-through is due. PostgreSQL delivers one
    # notification per transaction however many rows call it, and only at commit.
    f"SELECT id, CASE WHEN schedule_id IS NOT NULL THEN pg_notify('{ENDED_CHANNEL}', '') END "
    "FROM ended"
).bindparams(
    sa.bindparam("ids", type_=postgresql.ARRAY(sa.Text())),
    sa.bindparam("tokens", type_=postgresql.ARRAY(sa.Text())),
    sa.bindparam("states", type_=postgresql.ARRAY(sa.Text())),
    sa.bindparam("results", type_=postgresql.ARRAY(sa.Text())),
    sa.bindparam("errors", type_=postgresql.ARRAY(sa.Text())),
    sa.bindparam("started", type_=postgresql.ARRAY(sa.DateTime(timezone=True))),
    sa.bindparam("now", type_=t.runs.c.ended_at.type),
)
"""PostgreSQL only: the outcomes of a batch, one array per column, and the wake-up of
follow-through in other processes, in the same statement."""


class SqlRuns:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def insert_new(self, runs: Sequence[NewRun], now: datetime) -> int:
        """Create runs that do not exist yet; an existing run id is left untouched (WF-6)."""
        rows = [
            record_columns(
                run,
                **encrypted_columns("input", run.input),
                state=RunState.PENDING.value,
                origin_id=run.origin.get("id", ""),
                attempts=0,
                cancel_requested=False,
                created_at=now,
                queued_at=now,
                schedule_id=run.origin.get("schedule_id"),
            )
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
        query = sa.select(t.runs).where(_r.tenant == tenant, _r.id == run_id)
        return first_record(self._conn, query, run_from_row)

    def find(self, tenant: str, where: RunFilter, at: Seek[int]) -> list[tuple[int, Run]]:
        query = sa.select(t.runs).where(_r.tenant == tenant)
        if where.workflow:
            query = query.where(_r.workflow == where.workflow)
        if where.state:
            query = query.where(_r.state == where.state)
        if where.origin_id:
            query = query.where(_r.origin_id == where.origin_id)
        if where.source == "schedule":
            query = query.where(_r.schedule_id.is_not(None))
        elif where.source == "scheduled_start":
            query = query.where(_r.schedule_id.is_(None))
        if where.schedule_id:
            query = paged_within(query, _r.schedule_id, where.schedule_id, _r.seq, at)
        else:
            query = paged(query, _r.seq, at)
        return [(r["seq"], run_from_row(r)) for r in self._conn.execute(query).mappings()]

    def count_unfinished(self, workflow: str, version: str) -> int:
        query = sa.select(sa.func.count()).where(
            _r.workflow == workflow, _r.definition_version == version, _r.state.in_(_ACTIVE)
        )
        return int(self._conn.execute(query).scalar_one())

    def pending_by_queue(self) -> dict[str, tuple[int, datetime]]:
        """One grouped read of the pending rows alone (``ix_runs_pending`` is partial)."""
        queued = sa.func.coalesce(_r.queued_at, _r.created_at)
        query = (
            sa.select(_r.task_queue, sa.func.count(), sa.func.min(queued))
            .where(_r.state == RunState.PENDING.value)
            .group_by(_r.task_queue)
        )
        return {queue: (int(count), oldest) for queue, count, oldest in self._conn.execute(query)}

    def count_active_of_schedule(self, schedule_id: str) -> int:
        query = sa.select(sa.func.count()).where(
            _r.schedule_id == schedule_id, _r.state.in_(_ACTIVE)
        )
        return int(self._conn.execute(query).scalar_one())

    def request_cancel(self, tenant: str, run_id: str, now: datetime) -> None:
        """Cooperative cancel: an unclaimed pending run ends at once, a running one is flagged."""
        ended = self._conn.execute(
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
                error=run_error(RunErrorCode.CANCELED, "canceled before a worker picked it up"),
            )
        )
        if ended.rowcount:
            notify(self._conn, ENDED_CHANNEL)
        self._conn.execute(
            sa.update(t.runs)
            .where(_r.tenant == tenant, _r.id == run_id, _r.state.in_(_ACTIVE))
            .values(cancel_requested=True)
        )

    def terminate(self, tenant: str, run_id: str, now: datetime, reason: str) -> None:
        """Record the run terminated now; the worker kills its body when it notices."""
        ended = self._conn.execute(
            sa.update(t.runs)
            .where(_r.tenant == tenant, _r.id == run_id, _r.state.in_(_ACTIVE))
            .values(
                state=RunState.TERMINATED.value,
                ended_at=now,
                error=run_error(RunErrorCode.TERMINATED, reason),
            )
        )
        if ended.rowcount:
            notify(self._conn, ENDED_CHANNEL)

    def claim_pending(
        self,
        worker_id: str,
        task_queues: Sequence[str],
        loaded: Sequence[tuple[str, str]],
        limit: int,
        lease_seconds: float,
        now: datetime,
        key_ids: Sequence[str] | None = None,
    ) -> list[ClaimedRun]:
        """Claim pending runs this worker can execute, by priority then age; a new attempt
        each, under the claim token ``<worker id>/<attempt>``. The lease is timed by the
        database's clock on PostgreSQL, and so is its ``claimed_at`` (the reaper's backstop
        counts from it); SQLite takes ``now``."""
        if not loaded or limit <= 0 or not task_queues:
            return []
        claimed = self._conn.execute(
            sa.update(t.runs)
            .where(
                _r.id.in_(self._claimable(task_queues, loaded, limit, key_ids)),
                _r.state == RunState.PENDING.value,
            )
            .values(
                state=RunState.RUNNING.value,
                claimed_by=worker_id,
                claim_token=sa.literal(f"{worker_id}/", sa.String)
                + sa.cast(_r.attempts + 1, sa.String),
                lease_until=lease_expiry(self._conn, lease_seconds, now),
                attempts=_r.attempts + 1,
                claimed_at=store_stamp(self._conn, now),
                started_at=None,
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
                _r.claim_token,
                _r.traceparent,
            )
        )
        return [
            record_from_row(
                ClaimedRun,
                r,
                origin=dict(r["origin"]),
                attempt=r["attempts"],
                input=encrypted_from_row(r, "input"),
            )
            for r in claimed.mappings()
        ]

    def _claimable(
        self,
        task_queues: Sequence[str],
        loaded: Sequence[tuple[str, str]],
        limit: int,
        key_ids: Sequence[str] | None,
    ) -> sa.ScalarSelect[Any]:
        """The ids of the next ``limit`` claimable runs, locked (skipping locked ones).

        On PostgreSQL each task queue is read on its own, in index order
        (``ix_runs_pending``: queue, priority, seq), and the best ``limit`` of those are
        taken: one ``task_queue IN (..)`` over several queues made PostgreSQL sort every
        pending run of them, a cost that grew with the backlog (12 ms at 30,000 pending).
        """
        conditions = [
            _r.state == RunState.PENDING.value,
            sa.tuple_(_r.workflow, _r.definition_version).in_(list(loaded)),
        ]
        if key_ids is not None:
            conditions.append(_r.input_key_id.in_(list(key_ids)))
        if self._conn.dialect.name != "postgresql" or len(task_queues) == 1:
            pending = (
                sa.select(_r.id)
                .where(_r.task_queue.in_(list(task_queues)), *conditions)
                .order_by(_r.priority, _r.seq)
                .limit(limit)
            )
            return claimable(pending, self._conn)
        queues = (
            sa.func.unnest(sa.literal(sorted(set(task_queues)), postgresql.ARRAY(sa.Text())))
            .table_valued("name")
            .render_derived(name="queue")
        )
        per_queue = (
            sa.select(_r.id, _r.priority, _r.seq)
            .where(_r.task_queue == queues.c.name, *conditions)
            .order_by(_r.priority, _r.seq)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .lateral("per_queue")
        )
        best = (
            sa.select(per_queue.c.id)
            .select_from(queues)
            .join(per_queue, sa.true())
            .order_by(per_queue.c.priority, per_queue.c.seq)
            .limit(limit)
            .cte("claimable")
            .prefix_with("MATERIALIZED")
        )
        return sa.select(best.c.id).scalar_subquery()

    def renew_leases(
        self, claims: Sequence[RunClaim], lease_seconds: float, now: datetime
    ) -> set[str]:
        """Extend the leases of runs still running under these claims; the ids renewed."""
        if not claims:
            return set()
        renewed = self._conn.execute(
            sa.update(t.runs)
            .where(
                sa.tuple_(_r.id, _r.claim_token).in_([(c.run_id, c.token) for c in claims]),
                _r.state == RunState.RUNNING.value,
            )
            .values(lease_until=lease_expiry(self._conn, lease_seconds, now))
            .returning(_r.id)
        )
        return set(renewed.scalars())

    def give_back(self, claims: Sequence[RunClaim]) -> int:
        """Runs still under these claims go back to ``pending``, the attempt uncounted."""
        if not claims:
            return 0
        given = self._conn.execute(
            sa.update(t.runs)
            .where(
                sa.tuple_(_r.id, _r.claim_token).in_([(c.run_id, c.token) for c in claims]),
                _r.state == RunState.RUNNING.value,
            )
            .values(
                state=RunState.PENDING.value,
                attempts=_r.attempts - 1,
                claimed_by=None,
                claim_token=None,
                lease_until=None,
                claimed_at=None,
            )
        ).rowcount
        if given:
            notify(self._conn, RUNS_CHANNEL)
        return int(given)

    def flags(self, run_ids: Sequence[str]) -> list[RunFlags]:
        if not run_ids:
            return []
        query = sa.select(_r.id, _r.state, _r.cancel_requested, _r.claim_token).where(
            _r.id.in_(list(run_ids))
        )
        return [RunFlags(r[0], r[1], bool(r[2]), r[3]) for r in self._conn.execute(query)]

    def mark_started(self, claims: Sequence[RunClaim], at: datetime) -> set[str]:
        """Bodies began: ``started_at`` of runs still under these claims; the ids marked."""
        return self.mark_started_each([(c, at) for c in claims])

    def mark_started_each(self, started: Sequence[tuple[RunClaim, datetime]]) -> set[str]:
        rows = [{"id": c.run_id, "claim_token": c.token, "started_at": at} for c, at in started]
        return update_many(
            self._conn,
            t.runs,
            rows,
            match=["id", "claim_token"],
            columns=["started_at"],
        )

    def finish(
        self,
        run_id: str,
        worker_id: str,
        attempt: int,
        state: RunState,
        result: Any,
        error: dict[str, Any] | None,
        now: datetime,
        started_at: datetime | None = None,
    ) -> bool:
        """Record the outcome of this attempt (and when its body began, if given); False if
        the run moved on (terminated, lost, claimed again)."""
        began = {} if started_at is None else {"started_at": started_at}
        outcome = self._conn.execute(
            sa.update(t.runs)
            .where(
                _r.id == run_id,
                _r.claim_token == claim_token(worker_id, attempt),
                _r.state == RunState.RUNNING.value,
            )
            .values(
                state=state.value,
                result=result,
                error=error,
                ended_at=now,
                lease_until=None,
                **began,
            )
        )
        return outcome.rowcount == 1

    def finish_many(
        self, worker_id: str, outcomes: Sequence[AttemptOutcome], now: datetime
    ) -> set[str]:
        """Record many attempts' outcomes; on PostgreSQL in one ``UPDATE .. FROM unnest``
        (one round trip and one parse per batch instead of one per run), elsewhere one
        cached statement per run. Each row matches its own claim token, as ``finish``."""
        if not outcomes:
            return set()
        if self._conn.dialect.name != "postgresql":
            return {
                o.run_id
                for o in outcomes
                if self.finish(
                    o.run_id,
                    worker_id,
                    o.attempt,
                    RunState(o.state),
                    o.result,
                    o.error,
                    now,
                    o.started_at,
                )
            }
        dialect = self._conn.dialect
        result_type = t.runs.c.result.type
        assert isinstance(result_type, column_types.OutcomeJSON)

        def stored(value: Any) -> str:
            # What the column itself binds (its escaped envelope included), as JSON text.
            return json.dumps(result_type.process_bind_param(value, dialect))

        recorded = self._conn.execute(
            _FINISH_MANY,
            {
                "ids": [o.run_id for o in outcomes],
                "tokens": [claim_token(worker_id, o.attempt) for o in outcomes],
                "states": [o.state for o in outcomes],
                "results": [stored(o.result) for o in outcomes],
                "errors": [stored(o.error) for o in outcomes],
                "started": [o.started_at for o in outcomes],
                "now": now,
            },
        )
        return set(recorded.scalars())

    def release_lost(self, now: datetime, max_attempts: int) -> tuple[int, list[StoreEndedRun]]:
        """Runs whose worker's lease expired: retry as a new attempt, or fail after too many.

        Returns how many were requeued, and the runs failed.
        """
        expired = sa.and_(
            _r.state == RunState.RUNNING.value, _r.lease_until < store_now(self._conn, now)
        )
        failed = self._end(
            [expired, _r.attempts >= max_attempts],
            RunState.FAILED,
            RunErrorCode.WORKER_LOST,
            f"its worker was lost {max_attempts} times (the lease of every attempt "
            "ran out before an outcome was recorded)",
            now,
        )
        requeued = self._conn.execute(
            sa.update(t.runs)
            .where(expired)
            .values(
                state=RunState.PENDING.value,
                claimed_by=None,
                claim_token=None,
                lease_until=None,
                queued_at=now,
            )
        ).rowcount
        return requeued, failed

    def time_out_running(self, now: datetime, grace_seconds: float) -> list[StoreEndedRun]:
        """Backstop of WF-7: running runs claimed more than their execution timeout plus
        ``grace_seconds`` ago end ``timed_out``, whoever still renews their lease (a lost
        hand-off, a worker that stopped enforcing). Their worker sees the state in its
        flags and stops the body. On PostgreSQL "now" is the database's clock, as for the
        claim's ``claimed_at``, so a reaper host whose clock runs ahead ends nothing early."""
        overdue = passed(
            self._conn, _r.claimed_at, _r.timeout_seconds + sa.literal(grace_seconds), now
        )
        return self._end(
            [_r.state == RunState.RUNNING.value, _r.claimed_at.is_not(None), overdue],
            RunState.TIMED_OUT,
            RunErrorCode.TIMED_OUT,
            f"still running {grace_seconds:g} s after its execution timeout, so the "
            "store ended it (its worker did not)",
            now,
        )

    def time_out_pending(
        self, queued_before: datetime, now: datetime, timeout: float
    ) -> list[StoreEndedRun]:
        """Runs waiting in the queue since before ``queued_before`` end ``timed_out`` (WF-7),
        including runs requeued after a lost worker that no worker picks up again."""
        return self._end(
            [_r.state == RunState.PENDING.value, _r.queued_at < queued_before],
            RunState.TIMED_OUT,
            RunErrorCode.TIMED_OUT,
            f"no worker picked it up within {timeout:g} s",
            now,
        )

    def _end(
        self,
        where: Sequence[sa.ColumnElement[bool]],
        state: RunState,
        code: RunErrorCode,
        message: str,
        now: datetime,
    ) -> list[StoreEndedRun]:
        """End the runs ``where`` matches as the store decided, no worker having recorded
        an outcome: why in their error, no lease left (a pending run holds none); which."""
        ended = (
            sa.update(t.runs)
            .where(*where)
            .values(
                state=state.value, ended_at=now, lease_until=None, error=run_error(code, message)
            )
            .returning(_r.tenant, _r.id, _r.workflow, _r.attempts)
        )
        runs = [
            StoreEndedRun(row.tenant, row.id, row.workflow, row.attempts, state.value)
            for row in self._conn.execute(ended)
        ]
        if runs:
            notify(self._conn, ENDED_CHANNEL)  # the follow-through, in whichever process
        return runs
