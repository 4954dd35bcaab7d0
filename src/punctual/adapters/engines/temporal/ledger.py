"""The store operations the Temporal engine needs on runs, by run id.

The local engine's worker talks to runs through claims (``claim_pending`` hands it *some*
runs of its queues, ``finish`` needs its claim). A Temporal worker is handed *one* run by
Temporal, and the sync sees what Temporal decided, so both need to read and update a run
by its id. That is a port-level need; until the Store port's ``Runs`` grows these
methods (see docs/decisions/0003, "Store"), ``SqlRunLedger`` implements them over the
SQL store's ``runs`` table, inside the store's own transactions.

Every update is guarded to runs that are still ``pending`` or ``running``: a terminal
state (a terminate recorded by the run use case, a timeout by the reaper, an outcome the
worker already wrote) is never overwritten, so the worker's fast path and the sync can
both write and converge (WF-5, WF-8).

Temporal runs are marked ``claimed_by = 'temporal'`` once they run, with no lease: the
local reaper's lease recovery (``release_lost``) never touches them, since Temporal
retries lost workers itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.store import SqlTx
from punctual.domain.runs import RunState
from punctual.errors import ConfigurationError
from punctual.ports.records import EncryptedInput
from punctual.ports.store import Store, Tx

TEMPORAL_CLAIM = "temporal"
"""``claimed_by`` of a run that Temporal executes (it holds no store lease)."""

_ACTIVE = (RunState.PENDING.value, RunState.RUNNING.value)
_r = t.runs.c


@dataclass(frozen=True)
class RunRecord:
    """A run as the Temporal engine needs it (input still encrypted)."""

    id: str
    seq: int
    tenant: str
    workflow: str
    definition_version: str
    state: RunState
    attempts: int
    origin: dict[str, Any]
    input: EncryptedInput
    task_queue: str
    priority: int
    timeout_seconds: float
    cancel_requested: bool
    created_at: datetime
    result: Any
    error: dict[str, Any] | None

    @property
    def active(self) -> bool:
        return self.state in (RunState.PENDING, RunState.RUNNING)


class RunLedger(Protocol):
    def load(self, run_id: str) -> RunRecord | None: ...

    def start_state(self, run_id: str) -> str | None:
        """State of the start that owns ``run_id`` (``None`` when there is none)."""

    def active(self, after_seq: int, limit: int) -> list[RunRecord]:
        """Pending or running runs that Temporal executes, by row order."""

    def flags(self, run_id: str) -> tuple[RunState, bool] | None:
        """(state, cancel_requested) of a run."""

    def mark_running(self, run_id: str, attempts: int, now: datetime) -> bool:
        """``running`` with at least ``attempts``; False unless the run is still active."""

    def finish(
        self,
        run_id: str,
        state: RunState,
        attempts: int,
        result: Any,
        error: dict[str, Any] | None,
        now: datetime,
    ) -> bool:
        """Record the outcome; False (and no change) unless the run is still active."""


def _conn(tx: Tx) -> sa.Connection:
    if not isinstance(tx, SqlTx):
        raise ConfigurationError(
            "the temporal engine needs punctual's SQL store (SQLite or PostgreSQL)"
        )
    return tx.conn


def _record(row: sa.RowMapping) -> RunRecord:
    return RunRecord(
        id=row["id"],
        seq=row["seq"],
        tenant=row["tenant"],
        workflow=row["workflow"],
        definition_version=row["definition_version"],
        state=RunState(row["state"]),
        attempts=row["attempts"],
        origin=dict(row["origin"] or {}),
        input=EncryptedInput(row["input_key_id"], row["input"]),
        task_queue=row["task_queue"],
        priority=row["priority"],
        timeout_seconds=row["timeout_seconds"],
        cancel_requested=bool(row["cancel_requested"]),
        created_at=row["created_at"],
        result=row["result"],
        error=row["error"],
    )


def _at_least(attempts: int) -> sa.Case[Any]:
    return sa.case((_r.attempts < attempts, attempts), else_=_r.attempts)


class SqlRunLedger:
    def __init__(self, store: Store) -> None:
        self._store = store

    def load(self, run_id: str) -> RunRecord | None:
        with self._store.transaction(readonly=True) as tx:
            row = _conn(tx).execute(sa.select(t.runs).where(_r.id == run_id)).mappings().first()
        return _record(row) if row is not None else None

    def start_state(self, run_id: str) -> str | None:
        with self._store.transaction(readonly=True) as tx:
            state = (
                _conn(tx)
                .execute(sa.select(t.starts.c.state).where(t.starts.c.run_id == run_id))
                .scalar()
            )
        return str(state) if state is not None else None

    def active(self, after_seq: int, limit: int) -> list[RunRecord]:
        query = (
            sa.select(t.runs)
            .where(
                _r.seq > after_seq,
                _r.state.in_(_ACTIVE),
                sa.or_(_r.claimed_by.is_(None), _r.claimed_by == TEMPORAL_CLAIM),
            )
            .order_by(_r.seq)
            .limit(limit)
        )
        with self._store.transaction(readonly=True) as tx:
            return [_record(row) for row in _conn(tx).execute(query).mappings()]

    def flags(self, run_id: str) -> tuple[RunState, bool] | None:
        query = sa.select(_r.state, _r.cancel_requested).where(_r.id == run_id)
        with self._store.transaction(readonly=True) as tx:
            row = _conn(tx).execute(query).first()
        return (RunState(row[0]), bool(row[1])) if row is not None else None

    def mark_running(self, run_id: str, attempts: int, now: datetime) -> bool:
        update = (
            sa.update(t.runs)
            .where(_r.id == run_id, _r.state.in_(_ACTIVE))
            .values(
                state=RunState.RUNNING.value,
                attempts=_at_least(attempts),
                started_at=sa.func.coalesce(_r.started_at, now),
                claimed_by=TEMPORAL_CLAIM,
                lease_until=None,
            )
        )
        with self._store.transaction() as tx:
            return _conn(tx).execute(update).rowcount == 1

    def finish(
        self,
        run_id: str,
        state: RunState,
        attempts: int,
        result: Any,
        error: dict[str, Any] | None,
        now: datetime,
    ) -> bool:
        update = (
            sa.update(t.runs)
            .where(_r.id == run_id, _r.state.in_(_ACTIVE))
            .values(
                state=state.value,
                attempts=_at_least(attempts),
                result=result,
                error=error,
                ended_at=now,
                claimed_by=TEMPORAL_CLAIM,
                lease_until=None,
            )
            .returning(_r.schedule_id)
        )
        with self._store.transaction() as tx:
            ended = _conn(tx).execute(update).first()
            if ended is None:
                return False
            if ended.schedule_id is not None:
                # Follow-through bookkeeping (CR-4), as the local worker does.
                tx.schedules.note_status({ended.schedule_id: state.value})
            return True
