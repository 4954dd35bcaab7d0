"""Runs by id for an engine that executes them without a store lease (``RunLedgerStore``).

The guards live in each statement's ``WHERE``, so the engine's worker and its sync can
both write and converge (WF-5, WF-8): a run no longer ``pending`` or ``running`` matches
no update, and neither does an attempt older than the recorded one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import is_lock_timeout, notify
from punctual.adapters.stores.sql.listener import ENDED_CHANNEL
from punctual.adapters.stores.sql.reads import first_record
from punctual.adapters.stores.sql.rows import encrypted_from_row, record_from_row, run_converted
from punctual.domain.runs import RunState
from punctual.domain.starts import StartState
from punctual.ports.records import RunRecord, RunSignal
from punctual.ports.store import OutcomeRefused

_r = t.runs.c
_ACTIVE = (RunState.PENDING.value, RunState.RUNNING.value)
_IDS_PER_QUERY = 500
"""Bound of one ``IN (...)`` list (SQLite limits the parameters of a statement)."""


def _record(row: RowMapping) -> RunRecord:
    return record_from_row(
        RunRecord, row, **run_converted(row), input=encrypted_from_row(row, "input")
    )


def _at_least(attempts: int) -> sa.Case[Any]:
    return sa.case((_r.attempts < attempts, attempts), else_=_r.attempts)


def _newer(attempts: int) -> sa.ColumnElement[bool]:
    """``attempts`` is a later attempt than the recorded one (a pending run has none)."""
    return _r.attempts < attempts


def _current(run_id: str, attempts: int) -> list[sa.ColumnElement[bool]]:
    """Still active, and ``attempts`` is not older than the newest recorded attempt."""
    return [_r.id == run_id, _r.state.in_(_ACTIVE), _r.attempts <= attempts]


def _outage(error: sa.exc.SQLAlchemyError) -> bool:
    """The database cannot answer now (the transaction reports it ``Unavailable``), as
    opposed to refusing the values themselves."""
    if isinstance(error, sa.exc.OperationalError):
        return True
    return isinstance(error, sa.exc.DBAPIError) and (
        error.connection_invalidated or is_lock_timeout(error)
    )


class SqlRunLedgerStore:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def load(self, run_id: str) -> RunRecord | None:
        return first_record(self._conn, sa.select(t.runs).where(_r.id == run_id), _record)

    def start_state(self, run_id: str) -> StartState | None:
        query = sa.select(t.starts.c.state).where(t.starts.c.run_id == run_id)
        state = self._conn.execute(query).scalar()
        return StartState(state) if state is not None else None

    def active(self, claimed_by: str, after_seq: int, limit: int) -> list[RunRecord]:
        query = (
            sa.select(t.runs)
            .where(
                _r.seq > after_seq,
                _r.state.in_(_ACTIVE),
                sa.or_(_r.claimed_by.is_(None), _r.claimed_by == claimed_by),
            )
            .order_by(_r.seq)
            .limit(limit)
        )
        return [_record(row) for row in self._conn.execute(query).mappings()]

    def flags(self, run_id: str) -> tuple[RunState, bool] | None:
        query = sa.select(_r.state, _r.cancel_requested).where(_r.id == run_id)
        row = self._conn.execute(query).first()
        return (RunState(row[0]), bool(row[1])) if row is not None else None

    def signals(self, run_ids: Sequence[str]) -> dict[str, RunSignal]:
        found: dict[str, RunSignal] = {}
        columns = (_r.id, _r.tenant, _r.state, _r.cancel_requested)
        for at in range(0, len(run_ids), _IDS_PER_QUERY):
            chunk = run_ids[at : at + _IDS_PER_QUERY]
            for row in self._conn.execute(sa.select(*columns).where(_r.id.in_(chunk))):
                found[row[0]] = RunSignal(row[1], RunState(row[2]), bool(row[3]))
        return found

    def mark_running(self, run_id: str, attempts: int, claimed_by: str, now: datetime) -> bool:
        update = (
            sa.update(t.runs)
            .where(*_current(run_id, attempts))
            .values(
                state=RunState.RUNNING.value,
                attempts=_at_least(attempts),
                # A newer attempt is taken now and its body has not begun; marking the
                # same attempt again (the sync and its worker both) keeps its times.
                claimed_at=sa.case(
                    (sa.or_(_newer(attempts), _r.claimed_at.is_(None)), now),
                    else_=_r.claimed_at,
                ),
                started_at=sa.case((_newer(attempts), sa.null()), else_=_r.started_at),
                claimed_by=claimed_by,
                lease_until=None,
            )
        )
        return self._conn.execute(update).rowcount == 1

    def mark_started(self, run_id: str, attempts: int, now: datetime) -> bool:
        update = (
            sa.update(t.runs)
            .where(_r.id == run_id, _r.state.in_(_ACTIVE), _r.attempts == attempts)
            .values(started_at=now)
        )
        return self._conn.execute(update).rowcount == 1

    def finish(
        self,
        run_id: str,
        state: RunState,
        attempts: int,
        result: Any,
        error: dict[str, Any] | None,
        claimed_by: str,
        now: datetime,
    ) -> str | None:
        update = (
            sa.update(t.runs)
            .where(*_current(run_id, attempts))
            .values(
                state=state.value,
                attempts=_at_least(attempts),
                result=result,
                error=error,
                ended_at=now,
                # Times of an older attempt would be wrong; this attempt's are not known.
                claimed_at=sa.case((_newer(attempts), sa.null()), else_=_r.claimed_at),
                started_at=sa.case((_newer(attempts), sa.null()), else_=_r.started_at),
                claimed_by=claimed_by,
                lease_until=None,
            )
            .returning(_r.tenant)
        )
        try:
            tenant = self._conn.execute(update).scalar()
        except sa.exc.SQLAlchemyError as exc:
            if _outage(exc):
                raise
            # The values themselves were refused (e.g. a character the database cannot
            # hold, a value JSON cannot encode); the same write would be refused again.
            raise OutcomeRefused(run_id, exc) from exc
        if tenant is None:
            return None
        notify(self._conn, ENDED_CHANNEL)  # the follow-through, in whichever process
        return str(tenant)
