"""Bring Temporal's view of runs back into the store (WF-8: the store is the source of truth).

Workers record a run's start and outcome in the store themselves (the fast path), but
some ends happen where no punctual code runs: a terminate or cancel issued in Temporal
directly, a run canceled before any worker took it, a schedule-to-start timeout, every
attempt losing its worker, or a worker that could not write because the store was down.
``sync_runs`` closes those gaps: for every pending or running Temporal run in the store it
describes the execution and records state, attempts and result or error. Reads
(``GET /runs/{id}``) only ever read the store, so they keep working while Temporal is
down; the sync simply catches up when it is back.

It is idempotent and bounded (pages of ``page_size`` runs, a bounded number of calls in
flight), so the runner can call it on a timer; ``SyncLoop`` does exactly that in a
thread. A run Temporal has never heard of is started again when it never ran
(restoring after an engine outage lost its state, DP-6), or failed when it was running.

Records are handled one by one (FT-1): one whose observation or handling raises is logged
(run id and exception type only: the text may quote a result or input) and left for the
next pass, and the rest of the page syncs; an outcome the store refuses (FT-3) ends that
run ``failed`` with ``result_not_storable``; a closed execution whose outcome cannot be
decoded, which no later pass could decode either, ends it ``failed`` with
``engine_execution_lost``. Only an outage (``Unavailable``) stops the pass.

The store changes first and the engine follows (FT-6): run cancel and terminate are
recorded by the run use case, which then tells Temporal once; when Temporal did not get
it (it was down), the sync sends it again: ``cancel`` for an active run whose cancel was
requested and whose execution has not acknowledged it, ``terminate`` (or ``cancel``) for
an open execution whose run the store already recorded ``terminated`` (or ``canceled``).
Both calls are idempotent, so sending one twice is harmless.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from punctual.adapters.engines.temporal.engine import Observation, TemporalEngine
from punctual.adapters.engines.temporal.ledger import RunLedger, StoreRunLedger
from punctual.domain.runs import RunErrorCode, RunState, run_error
from punctual.errors import Unavailable
from punctual.ports.engine import RunOrder
from punctual.ports.records import RunRecord
from punctual.ports.store import OutcomeRefused
from punctual.usecases.kernel.context import Services
from punctual.usecases.running.execution import run_ended

log = logging.getLogger("punctual.sync.temporal")


@dataclass
class SyncReport:
    observed: int = 0
    started: list[str] = field(default_factory=list)
    """Runs the store now shows running (or with more attempts)."""
    finished: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    """Pending runs Temporal had no execution for, started again."""
    lost: list[str] = field(default_factory=list)
    """Running runs Temporal had no execution for, recorded failed."""
    unstorable: list[str] = field(default_factory=list)
    """Runs whose outcome the store refused, recorded failed (``result_not_storable``)."""
    signaled: list[str] = field(default_factory=list)
    """Runs whose cancel or terminate was sent to Temporal again (FT-6)."""
    undecodable: list[str] = field(default_factory=list)
    """Runs whose closed execution's outcome could not be decoded, recorded failed."""
    skipped: list[str] = field(default_factory=list)
    """Runs whose observation or handling raised; left for the next pass, the others went
    on."""


def sync_runs(
    services: Services,
    engine: TemporalEngine,
    *,
    ledger: RunLedger | None = None,
    page_size: int = 200,
    open_limit: int = 10_000,
) -> SyncReport:
    """One pass over every active Temporal run. Raises ``Unavailable`` on outages (the
    store's or, as ``EngineUnavailable``, Temporal's); nothing is lost by a failed pass."""
    ledger = ledger or StoreRunLedger(services.store)
    report = SyncReport()
    after = 0
    while True:
        page = ledger.active(after, page_size)
        if not page:
            break
        after = page[-1].seq
        observed = engine.observe([record.id for record in page])
        report.observed += len(page)
        restart: list[RunRecord] = []
        for record in page:
            observation = observed.get(record.id)
            if observation is None:  # its observation raised (logged by the engine)
                report.skipped.append(record.id)
                continue
            if (observation.state == "missing" or observation.never_recorded) and (
                record.state is RunState.PENDING and record.attempts == 0
            ):
                # Unknown to Temporal, or its execution gave up waiting for the record
                # just before a re-dispatch converged on it and recorded the run: the
                # body never ran, so the run is started anew (a new execution).
                restart.append(record)
                continue
            _isolated(services, engine, ledger, record, observation, report)
        if restart:
            engine.start([_order(record) for record in restart])
            report.restarted.extend(record.id for record in restart)
            log.warning(
                "event=temporal_runs_restarted count=%d runs=%s",
                len(restart),
                ",".join(r.id for r in restart),
            )
        if len(page) < page_size:
            break
    _resend_ended(engine, ledger, report, open_limit)
    return report


def _isolated(
    services: Services,
    engine: TemporalEngine,
    ledger: RunLedger,
    record: RunRecord,
    observation: Observation,
    report: SyncReport,
) -> None:
    """Handle one record alone: only an outage stops the pass (FT-1)."""
    try:
        if observation.state == "missing":
            _lose(services, ledger, record, report)
            return
        _apply(services, ledger, record, observation, report)
        if (
            observation.state in ("pending", "running")
            and record.cancel_requested
            and not observation.cancel_acknowledged
        ):
            engine.cancel(record.tenant, record.id)
            report.signaled.append(record.id)
    except Unavailable:
        raise
    except Exception as exc:
        # The type only: the text of an exception may quote the run's result or input.
        log.warning(
            "event=temporal_sync_record_failed run=%s error_type=%s",
            record.id,
            type(exc).__name__,
        )
        report.skipped.append(record.id)


def _resend_ended(
    engine: TemporalEngine, ledger: RunLedger, report: SyncReport, limit: int
) -> None:
    """Open executions of runs the store already ended terminated or canceled: tell
    Temporal again (the first call found it down, FT-6)."""
    open_ids = engine.open_executions(limit)
    for run_id, signal in ledger.signals(open_ids).items():
        if signal.state is RunState.TERMINATED:
            engine.terminate(signal.tenant, run_id)
        elif signal.state is RunState.CANCELED:
            engine.cancel(signal.tenant, run_id)
        else:
            continue
        report.signaled.append(run_id)
        log.info("event=temporal_signal_resent run=%s state=%s", run_id, signal.state.value)


def _apply(
    services: Services,
    ledger: RunLedger,
    record: RunRecord,
    observation: Observation,
    report: SyncReport,
) -> None:
    now = services.clock.now()
    if observation.state == "pending":
        return
    if observation.state == "running":
        behind = record.state is RunState.PENDING or observation.attempts > record.attempts
        if behind and ledger.mark_running(record.id, observation.attempts, now):
            report.started.append(record.id)
        return
    state = RunState(observation.state)
    ended_at = observation.ended_at or now
    attempts = max(observation.attempts, record.attempts)
    try:
        recorded = ledger.finish(
            record.id, state, attempts, observation.result, observation.error, ended_at
        )
    except OutcomeRefused:
        log.warning("event=run_result_not_storable run=%s attempt=%d", record.id, attempts)
        state = RunState.FAILED
        recorded = ledger.fail_unstorable(record.id, attempts, ended_at)
        if recorded:
            report.unstorable.append(record.id)
    if recorded:
        report.finished.append(record.id)
        if observation.undecodable:
            report.undecodable.append(record.id)
        services.events.emit(run_ended(record.tenant, record.id, state, attempts, record.workflow))


def _lose(services: Services, ledger: RunLedger, record: RunRecord, report: SyncReport) -> None:
    error = run_error(
        RunErrorCode.ENGINE_EXECUTION_LOST,
        f"Temporal has no execution for run {record.id} although it was running; its "
        "history was lost (namespace reset or restored from an older backup?)",
    )
    now = services.clock.now()
    if ledger.finish(record.id, RunState.FAILED, record.attempts, None, error, now):
        report.lost.append(record.id)
        services.events.emit(
            run_ended(record.tenant, record.id, RunState.FAILED, record.attempts, record.workflow)
        )


def _order(record: RunRecord) -> RunOrder:
    """A start that may replace a closed execution that never ran the body."""
    return RunOrder(
        run_id=record.id,
        tenant=record.tenant,
        workflow=record.workflow,
        definition_version=record.definition_version,
        task_queue=record.task_queue,
        priority=record.priority,
        timeout_seconds=record.timeout_seconds,
        origin=record.origin,
        replaces_unrecorded=True,
        traceparent=record.traceparent,
    )


class SyncLoop:
    """Calls ``sync_runs`` every ``interval_seconds`` in a daemon thread until stopped."""

    def __init__(
        self, services: Services, engine: TemporalEngine, interval_seconds: float = 2.0
    ) -> None:
        self._services = services
        self._engine = engine
        self._interval = interval_seconds
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_report: SyncReport | None = None
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="temporal-sync", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Sync now instead of at the next tick."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.last_report = sync_runs(self._services, self._engine)
                if self.last_error is not None:
                    log.info("event=temporal_sync_recovered")
                self.last_error = None
            except Unavailable as exc:
                if self.last_error is None:
                    log.warning("event=temporal_sync_unavailable error=%s", exc)
                self.last_error = str(exc)
            except Exception as exc:  # a defect: the type only, the text may quote values
                log.error("event=temporal_sync_failed error_type=%s", type(exc).__name__)
                self.last_error = type(exc).__name__
            self._wake.wait(self._interval)
            self._wake.clear()
