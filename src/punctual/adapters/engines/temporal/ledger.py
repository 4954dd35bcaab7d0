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
both write and converge (WF-5, WF-8). Updates are guarded by attempt too: once attempt
N+1 of a run has been recorded, attempt N (a worker Temporal gave up on that lives on)
can neither mark the run running nor record its outcome.

An outcome the store refuses deterministically (``OutcomeRefused``: a value the database
cannot hold) is never a reason to run the body again: the caller records the run
``failed`` with ``result_not_storable`` through ``fail_unstorable`` instead (FT-3).

Temporal runs are marked ``claimed_by = 'temporal'`` once they run, with no lease: the
local reaper's lease recovery (``release_lost``) never touches them, since Temporal
retries lost workers itself.

``claimed_at`` and ``started_at`` describe the current attempt (API.md "Runs"):
``mark_running`` of a newer attempt sets ``claimed_at`` (a worker took that attempt) and
clears ``started_at``, which ``mark_started`` sets once that attempt's body began. An
outcome of an attempt newer than the recorded one (the sync learning it from Temporal
after the worker could not write) clears both: the times of an older attempt would be
wrong, and the newer one's are not known.

A run that ends ``failed`` because its input cannot be read (``input_undecryptable``, or
``input_key_unknown`` once Temporal's attempts are used up) raises a ``run_failed`` health
finding in the same transaction, as the local worker does, so the tenant's health report
is degraded until someone acknowledges it, whoever recorded the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.store import SqlTx
from punctual.domain.runs import RunErrorCode, RunState, run_error
from punctual.errors import ConfigurationError, Unavailable
from punctual.ports.records import EncryptedInput
from punctual.ports.store import Store, Tx

TEMPORAL_CLAIM = "temporal"
"""``claimed_by`` of a run that Temporal executes (it holds no store lease)."""
RUN_FAILED_FINDING = "run_failed"
"""The health finding of a run that failed for a reason its body cannot fix (the local
worker raises the same kind)."""
_FINDING_CODES = frozenset({RunErrorCode.INPUT_UNDECRYPTABLE, RunErrorCode.INPUT_KEY_UNKNOWN})
"""Run error codes that raise ``RUN_FAILED_FINDING``: the input cannot be read."""

_ACTIVE = (RunState.PENDING.value, RunState.RUNNING.value)
_IDS_PER_QUERY = 500
"""Bound of one ``IN (...)`` list (SQLite limits the parameters of a statement)."""
_r = t.runs.c


class OutcomeRefused(Exception):
    """The store refused to record a run's outcome for a reason retrying cannot change."""

    def __init__(self, run_id: str, cause: BaseException) -> None:
        super().__init__(f"the store refused the outcome of run {run_id} ({type(cause).__name__})")
        self.run_id = run_id


def unstorable_error(run_id: str) -> dict[str, Any]:
    """The error of a run whose outcome the store refused (its values are not repeated)."""
    return run_error(
        RunErrorCode.RESULT_NOT_STORABLE,
        f"the store refused the result or error of run {run_id}; the body is not run "
        "again (a value the database cannot hold?)",
    )


@dataclass(frozen=True)
class RunSignal:
    """What the store asks of a run's execution: its state and whether cancel is asked."""

    tenant: str
    state: RunState
    cancel_requested: bool


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

    def signals(self, run_ids: list[str]) -> dict[str, RunSignal]:
        """State and cancel request of each run of ``run_ids`` the store knows."""

    def mark_running(self, run_id: str, attempts: int, now: datetime) -> bool:
        """``running`` with at least ``attempts``; False unless the run is still active and
        no later attempt than ``attempts`` was recorded. A newer attempt than the recorded
        one is claimed at ``now`` and has not started its body yet."""

    def mark_started(self, run_id: str, attempts: int, now: datetime) -> bool:
        """The body of attempt ``attempts`` began at ``now`` (``started_at``); False unless
        the run is still active at exactly that attempt."""

    def finish(
        self,
        run_id: str,
        state: RunState,
        attempts: int,
        result: Any,
        error: dict[str, Any] | None,
        now: datetime,
    ) -> bool:
        """Record the outcome of attempt ``attempts``; False (and no change) unless the run
        is still active and no later attempt was recorded. Raises ``OutcomeRefused`` when
        the store refuses the values, ``Unavailable`` when it cannot be reached."""

    def fail_unstorable(self, run_id: str, attempts: int, now: datetime) -> bool:
        """Record the run ``failed`` with ``result_not_storable`` and no result (FT-3)."""


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


def _newer(attempts: int) -> sa.ColumnElement[bool]:
    """``attempts`` is a later attempt than the recorded one (a pending run has none)."""
    return _r.attempts < attempts


def _current(run_id: str, attempts: int) -> list[sa.ColumnElement[bool]]:
    """Still active, and ``attempts`` is not older than the newest recorded attempt."""
    return [_r.id == run_id, _r.state.in_(_ACTIVE), _r.attempts <= attempts]


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

    def signals(self, run_ids: list[str]) -> dict[str, RunSignal]:
        found: dict[str, RunSignal] = {}
        columns = (_r.id, _r.tenant, _r.state, _r.cancel_requested)
        with self._store.transaction(readonly=True) as tx:
            for at in range(0, len(run_ids), _IDS_PER_QUERY):
                chunk = run_ids[at : at + _IDS_PER_QUERY]
                for row in _conn(tx).execute(sa.select(*columns).where(_r.id.in_(chunk))):
                    found[row[0]] = RunSignal(row[1], RunState(row[2]), bool(row[3]))
        return found

    def mark_running(self, run_id: str, attempts: int, now: datetime) -> bool:
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
                claimed_by=TEMPORAL_CLAIM,
                lease_until=None,
            )
        )
        with self._store.transaction() as tx:
            return _conn(tx).execute(update).rowcount == 1

    def mark_started(self, run_id: str, attempts: int, now: datetime) -> bool:
        update = (
            sa.update(t.runs)
            .where(_r.id == run_id, _r.state.in_(_ACTIVE), _r.attempts == attempts)
            .values(started_at=now)
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
        try:
            return self._end(run_id, state, attempts, result, error, now)
        except Unavailable:
            raise
        except sa.exc.OperationalError as exc:  # the store cannot answer now: retry later
            raise Unavailable(
                f"the store could not record the outcome of run {run_id} now",
                code="store_unavailable",
            ) from exc
        except sa.exc.SQLAlchemyError as exc:
            # The values themselves were refused (e.g. a character the database cannot
            # hold); the same write would be refused again.
            raise OutcomeRefused(run_id, exc) from exc

    def fail_unstorable(self, run_id: str, attempts: int, now: datetime) -> bool:
        error = unstorable_error(run_id)
        return self._end(run_id, RunState.FAILED, attempts, None, error, now)

    def _end(
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
                claimed_by=TEMPORAL_CLAIM,
                lease_until=None,
            )
            .returning(_r.tenant)
        )
        with self._store.transaction() as tx:
            ended = _conn(tx).execute(update).first()
            if ended is None:
                return False
            if state is RunState.FAILED and error and error.get("code") in _FINDING_CODES:
                tx.findings.raise_finding(
                    ended.tenant,
                    RUN_FAILED_FINDING,
                    run_id,
                    "error",
                    f"run {run_id} failed: {error.get('message', '')}",
                    now,
                )
            return True
