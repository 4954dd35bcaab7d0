"""The Temporal engine's run ledger guards outcomes by attempt, on both stores.

Temporal retries an attempt whose worker stopped heartbeating as a new attempt, while the
old worker may live on; the store must take the word of the newest attempt only: an
outcome of attempt N is refused once attempt N+1 was recorded, and no outcome is accepted
for a run already terminal. ``claimed_at`` and ``started_at`` are the current attempt's
(API.md "Runs"), and a run failed for unreadable input raises a health finding (FT-1).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.engines.temporal.ledger import OutcomeRefused, StoreRunLedger
from punctual.domain.runs import RunErrorCode, RunState, run_error
from punctual.usecases.kernel.projections import ts
from punctual.usecases.running import runs
from punctual.usecases.tenancy import health
from tests.conftest import make_settings
from tests.integration.test_run_operations_faults import ALICE, dispatched_run
from tests.support.api import live_worker


def test_an_outcome_of_a_superseded_attempt_is_refused(database_url: str, tmp_path: Path) -> None:
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        live_worker(system)
        run_id = dispatched_run(system)
        ledger = StoreRunLedger(system.store)
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
        ledger = StoreRunLedger(system.store)
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


class RefusingLedger(StoreRunLedger):
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


def _times(system: bootstrap.Punctual, run_id: str) -> tuple[str | None, str | None]:
    view = runs.get(system.services, ALICE, run_id)
    return view["claimed_at"], view["started_at"]


def test_claimed_at_and_started_at_are_the_current_attempts(
    database_url: str, tmp_path: Path
) -> None:
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        live_worker(system)
        run_id = dispatched_run(system)
        ledger = StoreRunLedger(system.store)
        at = datetime(2030, 1, 1, tzinfo=UTC)
        second = timedelta(seconds=1)
        assert ledger.mark_running(run_id, 1, at)
        assert _times(system, run_id) == (ts(at), None)  # taken; the body has not begun
        assert ledger.mark_started(run_id, 1, at + second)
        assert _times(system, run_id) == (ts(at), ts(at + second))
        # The sync marking the same attempt later changes neither.
        assert ledger.mark_running(run_id, 1, at + 5 * second)
        assert _times(system, run_id) == (ts(at), ts(at + second))

        assert ledger.mark_running(run_id, 2, at + 10 * second)  # Temporal retried
        assert _times(system, run_id) == (ts(at + 10 * second), None)
        assert not ledger.mark_started(run_id, 1, at + 11 * second), "a superseded attempt"
        assert ledger.mark_started(run_id, 2, at + 12 * second)
        assert _times(system, run_id) == (ts(at + 10 * second), ts(at + 12 * second))

        assert ledger.finish(run_id, RunState.COMPLETED, 2, {"ok": True}, None, at + 20 * second)
        assert _times(system, run_id) == (ts(at + 10 * second), ts(at + 12 * second))
        assert not ledger.mark_started(run_id, 2, at + 21 * second), "the run has ended"
    finally:
        system.close()


def test_an_outcome_of_a_newer_attempt_clears_the_older_attempts_times(
    database_url: str, tmp_path: Path
) -> None:
    """The sync records attempt 2's outcome from Temporal, its worker never wrote: attempt
    1's times are not attempt 2's, and attempt 2's are not known."""
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        live_worker(system)
        run_id = dispatched_run(system)
        ledger = StoreRunLedger(system.store)
        at = datetime(2030, 1, 1, tzinfo=UTC)
        assert ledger.mark_running(run_id, 1, at)
        assert ledger.mark_started(run_id, 1, at)
        assert ledger.finish(run_id, RunState.COMPLETED, 2, {"ok": True}, None, at)
        assert _times(system, run_id) == (None, None)
    finally:
        system.close()


def test_a_run_failed_for_unreadable_input_degrades_health_until_acknowledged(
    database_url: str, tmp_path: Path
) -> None:
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        live_worker(system)
        unreadable, key_unknown, raising = (dispatched_run(system) for _ in range(3))
        ledger = StoreRunLedger(system.store)
        now = datetime.now(UTC)
        for run_id, code in (
            (unreadable, RunErrorCode.INPUT_UNDECRYPTABLE),
            (key_unknown, RunErrorCode.INPUT_KEY_UNKNOWN),
            (raising, RunErrorCode.WORKFLOW_ERROR),
        ):
            error = run_error(code, f"run {run_id}: the reason")
            assert ledger.finish(run_id, RunState.FAILED, 1, None, error, now)

        report = health.report(system.services, ALICE)
        assert report["status"] == "degraded"
        found = {f["subject_id"]: f for f in report["findings"] if f["kind"] == "run_failed"}
        assert set(found) == {unreadable, key_unknown}  # a body raising is no finding
        assert found[unreadable]["severity"] == "error"
        assert (
            found[unreadable]["message"] == f"run {unreadable} failed: run {unreadable}: the reason"
        )
        for finding in found.values():
            system.mutations.run(None, health.acknowledge(system.services, ALICE, finding["id"]))
        assert health.report(system.services, ALICE)["status"] == "ok"
    finally:
        system.close()
