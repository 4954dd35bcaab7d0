"""The Temporal engine's run ledger guards outcomes by attempt, on both stores.

Temporal retries an attempt whose worker stopped heartbeating as a new attempt, while the
old worker may live on; the store must take the word of the newest attempt only: an
outcome of attempt N is refused once attempt N+1 was recorded, and no outcome is accepted
for a run already terminal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.engines.temporal.ledger import OutcomeRefused, SqlRunLedger
from punctual.domain.runs import RunState
from punctual.usecases import runs
from tests.conftest import make_settings
from tests.integration.test_run_operations_faults import ALICE, dispatched_run
from tests.support.api import live_worker


def test_an_outcome_of_a_superseded_attempt_is_refused(database_url: str, tmp_path: Path) -> None:
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        live_worker(system)
        run_id = dispatched_run(system)
        ledger = SqlRunLedger(system.store)
        now = datetime.now(UTC)
        assert ledger.mark_running(run_id, 1, now)
        assert ledger.mark_running(run_id, 2, now)  # Temporal retried: attempt 2 runs
        assert not ledger.mark_running(run_id, 1, now), "attempt 1 came back to life"

        late = ledger.finish(run_id, RunState.COMPLETED, 1, {"from": 1}, None, now)

        assert late is False
        record = ledger.load(run_id)
        assert record is not None
        assert (record.state, record.attempts, record.result) == (RunState.RUNNING, 2, None)
        assert ledger.finish(run_id, RunState.COMPLETED, 2, {"from": 2}, None, now)
        record = ledger.load(run_id)
        assert record is not None
        assert (record.state, record.result) == (RunState.COMPLETED, {"from": 2})
    finally:
        system.close()


def test_no_outcome_is_accepted_for_a_terminal_run(database_url: str, tmp_path: Path) -> None:
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        live_worker(system)
        run_id = dispatched_run(system)
        ledger = SqlRunLedger(system.store)
        now = datetime.now(UTC)
        assert ledger.mark_running(run_id, 1, now)
        system.mutations.run(None, runs.terminate(system.services, ALICE, run_id))

        assert not ledger.finish(run_id, RunState.COMPLETED, 1, {"late": True}, None, now)
        assert not ledger.finish(run_id, RunState.COMPLETED, 5, {"late": True}, None, now)
        assert not ledger.fail_unstorable(run_id, 5, now)
        view = runs.get(system.services, ALICE, run_id)
        assert (view["state"], view["result"]) == ("terminated", None)
    finally:
        system.close()


class RefusingLedger(SqlRunLedger):
    """Refuses, as a database refuses a value it cannot hold, the outcomes of some runs."""

    def __init__(self, store: Any, refused: set[str]) -> None:
        super().__init__(store)
        self.refused = refused

    def _end(self, run_id: str, state: RunState, attempts: int, result: Any, *rest: Any) -> bool:
        if run_id in self.refused and (result is not None or state is not RunState.FAILED):
            raise sa.exc.DataError("UPDATE runs ...", {}, ValueError("unsupported value"))
        return super()._end(run_id, state, attempts, result, *rest)


def test_a_refused_outcome_is_recorded_as_result_not_storable(
    database_url: str, tmp_path: Path
) -> None:
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        live_worker(system)
        run_id = dispatched_run(system)
        ledger = RefusingLedger(system.store, {run_id})
        now = datetime.now(UTC)
        assert ledger.mark_running(run_id, 1, now)
        try:
            ledger.finish(run_id, RunState.COMPLETED, 1, {"big": "value"}, None, now)
        except OutcomeRefused as refused:
            assert refused.run_id == run_id
        else:
            raise AssertionError("the refusal was not reported")
        assert ledger.fail_unstorable(run_id, 1, now)
        view = runs.get(system.services, ALICE, run_id)
        assert view["state"] == "failed"
        assert view["result"] is None
        assert view["error"]["code"] == "result_not_storable"
    finally:
        system.close()
