"""Code drift is refused, never hidden (OP-3, OP-2's ``artifact_mismatch``).

A worker whose code for a (workflow, version) differs from the artifact registered for it
takes none of that version's runs (they wait, as for a worker that does not have the
version, DP-3), and health shows an ``artifact_mismatch`` finding naming the workflow,
the version, both artifacts and the process, for as long as that worker lives. A worker
with the registered code takes the runs, and a run's artifact is that code's.

The first test runs real workers of both engines (bodies in child processes; a Temporal
dev server for ``temporal``); the others drive the use cases on a fake clock, on both
stores.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from punctual import bootstrap
from punctual.domain.permissions import Principal, Role
from punctual.domain.runs import Run, RunState
from punctual.domain.starts import StartState
from punctual.ports.records import WorkerRecord
from punctual.usecases.running import execution
from punctual.usecases.running.definitions import register_worker
from punctual.usecases.scheduled import starts
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.usecases.tenancy import health, identity
from punctual.worker.definitions import declared_definitions
from punctual.workflows import load_app
from tests.conftest import FakeClock, make_settings

REGISTERED = "tests.integration.drift_app:app"
DRIFTED = "tests.integration.drift_app:drifted"
TENANT = "acme"
ADMIN = Principal(tenant=TENANT, subject="alice", role=Role.ADMIN)
MISMATCH = "artifact_mismatch"
LIVENESS_SECONDS = 300.0
"""Generous: the registrant record below stands for a fleet with the registered code for
the whole test, however slowly a loaded machine starts the workers."""


def artifact(app_ref: str, workflow: str) -> str:
    definition = load_app(app_ref).get(workflow, "1")
    assert definition is not None
    return definition.artifact


def mismatches(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["kind"] == MISMATCH]


@dataclass
class Drift:
    """A real system on one engine, and the workers a test starts on it."""

    kind: str
    system: bootstrap.Punctual
    queue: str
    address: str | None
    stops: dict[str, Callable[[], None]] = field(default_factory=dict)

    @property
    def services(self) -> Any:
        return self.system.services

    def register_fleet(self) -> None:
        """The registered code's definitions, and a live worker record that has them (it
        never takes a run): echo version 1's registered artifact is ``REGISTERED``'s."""
        app = load_app(REGISTERED)
        now = self.services.clock.now()
        record = WorkerRecord(
            id="wrk_registrant",
            engine=self.kind,
            host="fleet",
            task_queues=[self.queue],
            loaded=[(d.name, d.version, d.artifact) for d in app.definitions],
            slots=1,
            started_at=now,
            heartbeat_at=now,
            stopped_at=None,
        )
        register_worker(self.services, record, declared_definitions(app))

    def start(self, app_ref: str) -> str:
        """A worker of the engine with ``app_ref``'s code; its id."""
        if self.kind == "temporal":
            from punctual.worker.temporal.worker import TemporalWorker

            assert self.address is not None
            temporal = TemporalWorker(
                self.services,
                app_ref,
                [self.queue],
                self.address,
                "default",
                slots=2,
                heartbeat_seconds=0.5,
                shutdown_grace_seconds=0,
            )
            temporal.start()
            self.stops[temporal.id] = temporal.stop
            return temporal.id
        local = self.system.start_worker(app_ref, task_queues=[self.queue], slots=2)

        def stop() -> None:
            local.stop(grace_seconds=0)
            self.system.workers.remove(local)

        self.stops[local.id] = stop
        return local.id

    def stop(self, worker_id: str) -> None:
        self.stops.pop(worker_id)()

    def dispatch(self, workflow: str) -> str:
        """A start due now, dispatched as the runner would; its run id."""
        command = starts.CreateStart(
            workflow=workflow,
            input={"message": f"hello from {self.kind}"},
            business_request_id=f"drift-{workflow}",
            start_at=datetime.now(UTC) - timedelta(seconds=1),
            workload_class="standard",
        )
        outcome = self.system.mutations.run(None, starts.create(self.services, ADMIN, command))
        start_id: str = outcome.body["id"]
        report = dispatch_due(self.services, "drift-runner", 10)
        assert report.dispatched == [start_id], report
        with self.system.store.transaction(readonly=True) as tx:
            start = tx.starts.get(TENANT, start_id)
        assert start is not None
        return start.run_id

    def run(self, run_id: str) -> Run:
        with self.system.store.transaction(readonly=True) as tx:
            run = tx.runs.get(TENANT, run_id)
        assert run is not None
        return run

    def ended(self, run_id: str, timeout: float = 60) -> Run:
        deadline = time.monotonic() + timeout
        run = self.run(run_id)
        while run.state in (RunState.PENDING, RunState.RUNNING):
            assert time.monotonic() < deadline, f"run {run_id} did not end in {timeout} s: {run}"
            time.sleep(0.05)
            run = self.run(run_id)
        return run

    def health(self) -> dict[str, Any]:
        return health.report(self.services, ADMIN)


@contextmanager
def drifting(
    kind: str, sqlite_url: str, tmp_path: Path, address: str | None, pending_timeout: float
) -> Iterator[Drift]:
    prefix = f"drift-{uuid.uuid4().hex[:8]}"
    settings = make_settings(
        sqlite_url,
        tmp_path,
        worker={"heartbeat_seconds": 0.5, "liveness_seconds": LIVENESS_SECONDS},
        runner={"lease_seconds": 5},
        workload_classes={"standard": {"task_queue": f"{prefix}-standard", "priority": 2}},
    )
    system = bootstrap.build(settings)
    identity.ensure_member_token(system.services, TENANT, ADMIN.subject, Role.ADMIN)
    engine: Any = None
    if address is not None:
        from punctual.adapters.engines.temporal.engine import TemporalEngine, TemporalOptions

        engine = TemporalEngine(
            system.store,
            system.services.clock,
            liveness_seconds=LIVENESS_SECONDS,
            pending_timeout_seconds=pending_timeout,
            max_attempts=3,
            options=TemporalOptions(address=address, heartbeat_timeout_seconds=5),
        )
        system.services.engine = engine
    harness = Drift(kind, system, f"{prefix}-standard", address)
    try:
        yield harness
    finally:
        for stop in list(harness.stops.values()):
            stop()
        system.close()
        if engine is not None:
            engine.close()


@pytest.fixture(params=["local", pytest.param("temporal", marks=pytest.mark.temporal)])
def drift(request: pytest.FixtureRequest, sqlite_url: str, tmp_path: Path) -> Iterator[Drift]:
    kind: str = request.param
    address: str | None = (
        request.getfixturevalue("temporal_address") if kind == "temporal" else None
    )
    with drifting(kind, sqlite_url, tmp_path, address, pending_timeout=120) as harness:
        yield harness


def test_a_worker_with_edited_code_takes_none_of_that_versions_runs(drift: Drift) -> None:
    registered, edited = artifact(REGISTERED, "echo"), artifact(DRIFTED, "echo")
    assert registered != edited
    drift.register_fleet()
    drifted = drift.start(DRIFTED)

    report = drift.health()
    assert report["status"] == "degraded"
    (finding,) = mismatches(report)
    assert finding["subject_id"] == drifted
    for named in (
        "echo version 1",
        registered,
        edited,
        f"host {socket.gethostname()}",
        f"pid {os.getpid()}",
    ):
        assert named in finding["message"], (named, finding["message"])
    (worker,) = [w for w in report["workers"] if w["id"] == drifted]
    assert [(item["workflow"], item["version"]) for item in worker["loaded"]] == [("tick", "1")]

    echo_run = drift.dispatch("echo")
    tick_run = drift.dispatch("tick")
    assert drift.ended(tick_run).state is RunState.COMPLETED, "it serves what it has unchanged"
    waiting = drift.run(echo_run)
    assert (waiting.state, waiting.attempts) == (RunState.PENDING, 0), "echo 1 was not taken"

    drift.start(REGISTERED)
    drift.stop(drifted)

    done = drift.ended(echo_run)
    assert done.state is RunState.COMPLETED, done
    assert done.result == {"message": f"hello from {drift.kind}", "code": "registered"}
    assert done.artifact == registered, "the run records the code that ran"
    assert done.attempts == 1, "a refusal is not an attempt"
    report = drift.health()
    assert (report["status"], mismatches(report)) == ("ok", []), "gone with its worker"


@pytest.mark.temporal
def test_on_temporal_a_run_no_worker_serves_ends_at_the_pending_timeout(
    sqlite_url: str, tmp_path: Path, temporal_address: str
) -> None:
    """Refused by every poller of its queue, the run's workflow asks again until the
    pending timeout from its dispatch, then ends ``timed_out`` saying why."""
    from punctual.worker.temporal.sync import sync_runs

    with drifting("temporal", sqlite_url, tmp_path, temporal_address, 3) as drift:
        drift.register_fleet()
        drift.start(DRIFTED)
        run_id = drift.dispatch("echo")
        engine = drift.services.engine
        deadline = time.monotonic() + 60
        while (observed := engine.observe([run_id])[run_id]).state in ("pending", "running"):
            assert time.monotonic() < deadline, observed
            time.sleep(0.1)

        assert observed.state == "timed_out", observed
        assert observed.error is not None
        assert observed.error["code"] == "timed_out"
        assert "no worker serving echo version 1" in observed.error["message"]
        sync_runs(drift.services, engine)
        ended = drift.run(run_id)
        assert (ended.state, ended.attempts) == (RunState.TIMED_OUT, 0), "never taken"


# --------------------------------------------------------------------------- fake clock


@pytest.fixture
def system(database_url: str, tmp_path: Path, clock: FakeClock) -> Iterator[bootstrap.Punctual]:
    settings = make_settings(
        database_url, tmp_path, worker={"heartbeat_seconds": 5, "liveness_seconds": 20}
    )
    built = bootstrap.build(settings, clock=clock)
    identity.ensure_member_token(built.services, TENANT, ADMIN.subject, Role.ADMIN)
    yield built
    built.close()


def register(
    system: bootstrap.Punctual, worker_id: str, app_ref: str, pid: int | None = None
) -> WorkerRecord:
    app = load_app(app_ref)
    now = system.services.clock.now()
    record = WorkerRecord(
        id=worker_id,
        engine="local",
        host=f"{worker_id}-host",
        task_queues=["standard"],
        loaded=[(d.name, d.version, d.artifact) for d in app.definitions],
        slots=1,
        started_at=now,
        heartbeat_at=now,
        stopped_at=None,
    )
    return register_worker(system.services, record, declared_definitions(app), pid=pid)


def beat(system: bootstrap.Punctual, *worker_ids: str) -> None:
    with system.store.transaction() as tx:
        for worker_id in worker_ids:
            tx.definitions.heartbeat_worker(worker_id, system.services.clock.now())


def stored_mismatches(system: bootstrap.Punctual) -> list[str]:
    with system.store.transaction(readonly=True) as tx:
        found = tx.findings.latest(health.HOST, health.FINDING_LIST_LIMIT)
    return [f.subject_id for f in found if f.kind == MISMATCH]


def test_a_mismatch_is_shown_while_its_worker_lives(
    system: bootstrap.Punctual, clock: FakeClock
) -> None:
    register(system, "wrk_registrant", REGISTERED)
    recorded = register(system, "wrk_drifted", DRIFTED, pid=4242)
    assert [(n, v) for n, v, _ in recorded.loaded] == [("tick", "1")]
    (finding,) = mismatches(health.report(system.services, ADMIN))
    assert "host wrk_drifted-host" in finding["message"]
    assert "pid 4242" in finding["message"]
    assert health.host_report(system.services)["status"] == "degraded"
    assert health.report(system.services, ADMIN)["open_findings_count"] == 1

    clock.advance(30)  # the drifted worker went silent (killed): no longer live
    beat(system, "wrk_registrant")

    report = health.report(system.services, ADMIN)
    assert (report["status"], mismatches(report)) == ("ok", [])
    assert health.host_report(system.services)["status"] == "ok"
    clock.advance(86400 + 1)
    execution.reap(system.services)
    assert stored_mismatches(system) == [], "forgotten with the worker"


def test_a_stopped_worker_takes_its_finding_with_it(system: bootstrap.Punctual) -> None:
    register(system, "wrk_registrant", REGISTERED)
    register(system, "wrk_drifted", DRIFTED)
    assert stored_mismatches(system) == ["wrk_drifted"]

    execution.stop_worker(system.services, "wrk_drifted")

    assert stored_mismatches(system) == []
    assert health.report(system.services, ADMIN)["status"] == "ok"


def test_runs_wait_for_a_worker_with_the_registered_code(
    system: bootstrap.Punctual, clock: FakeClock
) -> None:
    register(system, "wrk_registrant", REGISTERED)
    clock.advance(30)  # only the drifted worker is live from here on
    register(system, "wrk_drifted", DRIFTED)
    command = starts.CreateStart(
        workflow="echo",
        input={"message": "hi"},
        business_request_id="drift-wait",
        start_at=clock.now(),
        workload_class="standard",
    )
    start_id = system.mutations.run(None, starts.create(system.services, ADMIN, command)).body["id"]

    assert dispatch_due(system.services, "drift-runner", 10).dispatched == []

    with system.store.transaction(readonly=True) as tx:
        start = tx.starts.get(TENANT, start_id)
    assert start is not None
    assert start.state is StartState.SCHEDULED
    assert start.last_error is not None
    assert start.last_error.code == "version_not_loaded"
