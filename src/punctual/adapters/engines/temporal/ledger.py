"""The store operations the Temporal engine needs on runs, by run id, over the Store port.

The local engine's worker talks to runs through claims (``claim_pending`` hands it *some*
runs of its queues, ``finish`` needs its claim). A Temporal worker is handed *one* run by
Temporal, and the sync sees what Temporal decided, so both need to read and update a run
by its id: the Store port's ``RunLedgerStore`` (``tx.run_ledger``). ``StoreRunLedger``
gives each call its own transaction and adds what is the engine's to decide: the claim
name its runs carry and the health finding of an unreadable input.

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

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from punctual.domain.runs import RunErrorCode, RunState, run_error
from punctual.domain.starts import StartState
from punctual.errors import Unavailable
from punctual.ports.records import RunRecord, RunSignal
from punctual.ports.store import OutcomeRefused, Store

__all__ = [
    "RUN_FAILED_FINDING",
    "TEMPORAL_CLAIM",
    "OutcomeRefused",
    "RunLedger",
    "StoreRunLedger",
    "unstorable_error",
]

TEMPORAL_CLAIM = "temporal"
"""``claimed_by`` of a run that Temporal executes (it holds no store lease)."""
RUN_FAILED_FINDING = "run_failed"
"""The health finding of a run that failed for a reason its body cannot fix (the local
worker raises the same kind)."""
_FINDING_CODES = frozenset({RunErrorCode.INPUT_UNDECRYPTABLE, RunErrorCode.INPUT_KEY_UNKNOWN})
"""Run error codes that raise ``RUN_FAILED_FINDING``: the input cannot be read."""


def unstorable_error(run_id: str) -> dict[str, Any]:
    """The error of a run whose outcome the store refused (its values are not repeated)."""
    return run_error(
        RunErrorCode.RESULT_NOT_STORABLE,
        f"the store refused the result or error of run {run_id}; the body is not run "
        "again (a value the database cannot hold?)",
    )


class RunLedger(Protocol):
    def load(self, run_id: str) -> RunRecord | None: ...

    def start_state(self, run_id: str) -> StartState | None:
        """State of the start that owns ``run_id`` (``None`` when there is none)."""

    def active(self, after_seq: int, limit: int) -> list[RunRecord]:
        """Pending or running runs that Temporal executes, by row order."""

    def flags(self, run_id: str) -> tuple[RunState, bool] | None:
        """(state, cancel_requested) of a run."""

    def signals(self, run_ids: Sequence[str]) -> dict[str, RunSignal]:
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


class StoreRunLedger:
    """``RunLedger`` over any Store: one transaction per call."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def load(self, run_id: str) -> RunRecord | None:
        with self._store.transaction(readonly=True) as tx:
            return tx.run_ledger.load(run_id)

    def start_state(self, run_id: str) -> StartState | None:
        with self._store.transaction(readonly=True) as tx:
            return tx.run_ledger.start_state(run_id)

    def active(self, after_seq: int, limit: int) -> list[RunRecord]:
        with self._store.transaction(readonly=True) as tx:
            return tx.run_ledger.active(TEMPORAL_CLAIM, after_seq, limit)

    def flags(self, run_id: str) -> tuple[RunState, bool] | None:
        with self._store.transaction(readonly=True) as tx:
            return tx.run_ledger.flags(run_id)

    def signals(self, run_ids: Sequence[str]) -> dict[str, RunSignal]:
        with self._store.transaction(readonly=True) as tx:
            return tx.run_ledger.signals(run_ids)

    def mark_running(self, run_id: str, attempts: int, now: datetime) -> bool:
        with self._store.transaction() as tx:
            return tx.run_ledger.mark_running(run_id, attempts, TEMPORAL_CLAIM, now)

    def mark_started(self, run_id: str, attempts: int, now: datetime) -> bool:
        with self._store.transaction() as tx:
            return tx.run_ledger.mark_started(run_id, attempts, now)

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
        except (Unavailable, OutcomeRefused):
            raise
        except Exception as exc:
            # A store reports an outage as ``Unavailable`` (the Store port's rule), so
            # whatever else recording an outcome raises is about the values: the same
            # write would fail again, and the body must not run again for it (FT-3).
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
        with self._store.transaction() as tx:
            tenant = tx.run_ledger.finish(
                run_id, state, attempts, result, error, TEMPORAL_CLAIM, now
            )
            if tenant is None:
                return False
            if state is RunState.FAILED and error and error.get("code") in _FINDING_CODES:
                tx.findings.raise_finding(
                    tenant,
                    RUN_FAILED_FINDING,
                    run_id,
                    "error",
                    f"run {run_id} failed: {error.get('message', '')}",
                    now,
                )
            return True
