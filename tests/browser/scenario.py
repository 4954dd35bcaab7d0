"""A tenant with a history worth looking at, made by punctual's own passes on a clock the
test moves: fires, a skip for overlap, a DST-shifted fire, a missed range, follow-through
results (a regression among them), a start with protected input and an open finding.

Schedules and starts are created over HTTP; generation, dispatch, the worker's outcome
and follow-through are the runner's and the worker's own use cases, called as their loops
call them, so every row the page shows was written the way production writes it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.domain.runs import RunState
from punctual.ports.records import WorkerRecord
from punctual.usecases.recurring.generation import generate
from punctual.usecases.running import execution
from punctual.usecases.running.definitions import register_worker
from punctual.usecases.running.followthrough import follow_through
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.usecases.tenancy import identity
from punctual.worker.definitions import declared_definitions
from punctual.workflows import load_app
from tests.conftest import FakeClock

TENANT = "acme"
WORKER = "wrk_browser_scenario"
SCENARIO_START = datetime(2026, 3, 8, 5, 0, tzinfo=UTC)
"""Midnight in New York on the night its clocks spring forward (07:00 UTC)."""
PROTECTED_MESSAGE = "protected-input-never-shown-7f3a"
FINDING_MESSAGE = "start st_x failed: <script>alert('finding')</script>"


@dataclass
class Scenario:
    url: str
    member_token: str
    viewer_token: str
    timeline_schedule_id: str
    dst_schedule_id: str
    start_id: str
    finding_id: str
    run_ids: list[str]

    def api(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/v1/tenants/{TENANT}",
            headers={"Authorization": f"Bearer {token or self.member_token}"},
            timeout=CLIENT_SECONDS,
        )


class _Passes:
    """The runner's and the worker's steps, on the scenario's clock."""

    def __init__(self, system: bootstrap.Punctual, clock: FakeClock) -> None:
        self.system = system
        self.clock = clock
        self.app = load_app("punctual.demo:app")
        self.loaded = [(d.name, d.version, d.artifact) for d in self.app.definitions]

    def start_worker(self) -> None:
        record = WorkerRecord(
            id=WORKER,
            engine="local",
            host="browser-test",
            task_queues=["interactive", "standard", "batch"],
            loaded=self.loaded,
            slots=4,
            started_at=self.clock.now(),
            heartbeat_at=self.clock.now(),
            stopped_at=None,
        )
        register_worker(self.system.services, record, declared_definitions(self.app))

    def at(self, moment: datetime) -> None:
        """Move the clock to ``moment``; the worker heartbeats, as a live one does."""
        self.clock.current = moment
        with self.system.store.transaction() as tx:
            tx.definitions.heartbeat_worker(WORKER, moment)

    def fire(self) -> None:
        generate(self.system.services, 100)
        dispatch_due(self.system.services, "runner-browser", 100)

    def finish(self, state: RunState, result: Any = None) -> list[str]:
        """The worker ends every pending run; the runner's follow-through pass follows."""
        loaded = [(name, version) for name, version, _ in self.loaded]
        claimed = execution.claim_runs(self.system.services, WORKER, ["standard"], loaded, 100)
        error = None if state is RunState.COMPLETED else {"message": "the score could not be read"}
        finished = [execution.Finished(work.run, state, result, error) for work in claimed]
        assert all(execution.finish_runs(self.system.services, WORKER, finished))
        follow_through(self.system.services)
        return [work.run.id for work in claimed]


def _created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


CLIENT_SECONDS = 30.0
"""Longer than the server's bounded wait (10 s in the tests), as a client's should be: on a
loaded machine an answer that waited its bound must not look like a dead server."""


def _key() -> dict[str, str]:
    return {"Idempotency-Key": secrets.token_hex(8)}


def build(system: bootstrap.Punctual, clock: FakeClock, url: str) -> Scenario:
    """Write the scenario's history through a running server at ``url``."""
    passes = _Passes(system, clock)
    passes.start_worker()
    passes.at(SCENARIO_START)
    services = system.services
    member = identity.ensure_member_token(services, TENANT, "olga", Role.MEMBER).token
    viewer = identity.ensure_member_token(services, TENANT, "vic", Role.VIEWER).token
    api = httpx.Client(
        base_url=f"{url}/v1/tenants/{TENANT}",
        headers={"Authorization": f"Bearer {member}"},
        timeout=CLIENT_SECONDS,
    )
    with api:
        hourly = _created(
            api.post(
                "/schedules",
                headers=_key(),
                json={
                    "name": "hourly-scores <b>&amp;</b>",
                    "workflow": "score",
                    "input": {"score": 1},
                    "spec": {"cron": "30 0-23 * * *", "time_zone": "America/New_York"},
                    "overlap": "skip",
                    "missed": "skip",
                    "regression": {
                        "metrics": [{"path": "metrics.score", "better": "higher", "tolerance": 0}]
                    },
                },
            )
        )
        run_ids: list[str] = []
        # 00:30 EST fires; 01:30 EST finds its run unfinished and is skipped for overlap.
        passes.at(datetime(2026, 3, 8, 5, 30, 1, tzinfo=UTC))
        passes.fire()
        passes.at(datetime(2026, 3, 8, 6, 30, 1, tzinfo=UTC))
        passes.fire()
        run_ids += passes.finish(RunState.COMPLETED, {"metrics": {"score": 0.9}})
        # 02:30 does not exist tonight: the fire moves to the end of the gap, 03:00 EDT.
        passes.at(datetime(2026, 3, 8, 7, 0, 1, tzinfo=UTC))
        passes.fire()
        run_ids += passes.finish(RunState.COMPLETED, {"metrics": {"score": 0.5}})
        passes.at(datetime(2026, 3, 8, 7, 30, 1, tzinfo=UTC))
        passes.fire()
        run_ids += passes.finish(RunState.FAILED)
        # The runner is down for four hours; with missed=skip they become one missed range.
        passes.at(datetime(2026, 3, 8, 11, 45, tzinfo=UTC))
        passes.fire()
        passes.at(datetime(2026, 3, 8, 12, 30, 1, tzinfo=UTC))
        passes.fire()
        run_ids += passes.finish(RunState.COMPLETED, {"metrics": {"score": 0.95}})
        # The last fire's run is still going: no follow-through yet.
        passes.at(datetime(2026, 3, 8, 13, 30, 1, tzinfo=UTC))
        passes.fire()
        # Created now, so it has not fired tonight: its next fires cross next year's gap.
        sundays = _created(
            api.post(
                "/schedules",
                headers=_key(),
                json={
                    "name": "march-sundays",
                    "workflow": "echo",
                    "input": {"message": "spring"},
                    "spec": {"cron": "30 2 * 3 0", "time_zone": "America/New_York"},
                    "overlap": "skip",
                    "missed": "catch_up",
                },
            )
        )
        start = _created(
            api.post(
                "/scheduled-starts",
                headers=_key(),
                json={
                    "workflow": "echo",
                    "input": {"message": PROTECTED_MESSAGE},
                    "business_request_id": "appt-<42>",
                    "start_at": "2026-03-09T14:00:00Z",
                    "workload_class": "standard",
                    "attributes": {"customer": "c-17"},
                },
            )
        )
    with system.store.transaction() as tx:
        tx.findings.raise_finding(
            TENANT, "start_failed", "st_x", "error", FINDING_MESSAGE, clock.now()
        )
        finding = next(f for f in tx.findings.latest(TENANT, 10) if f.subject_id == "st_x")
    passes.at(clock.now() + timedelta(minutes=1))
    return Scenario(
        url=url,
        member_token=member,
        viewer_token=viewer,
        timeline_schedule_id=hourly["id"],
        dst_schedule_id=sundays["id"],
        start_id=start["id"],
        finding_id=finding.id,
        run_ids=run_ids,
    )


def raise_finding(system: bootstrap.Punctual, subject: str, message: str) -> str:
    with system.store.transaction() as tx:
        tx.findings.raise_finding(
            TENANT, "occurrence_failed", subject, "error", message, system.services.clock.now()
        )
        return next(f.id for f in tx.findings.latest(TENANT, 20) if f.subject_id == subject)


def every_second(
    system: bootstrap.Punctual, clock: FakeClock, data: Scenario, seconds: int = 45
) -> str:
    """A schedule that fires every second, run by the runner's and the worker's passes
    for ``seconds`` of the clock: a run ends every fifth second, so the fires while one
    runs are skipped for overlap."""
    with data.api() as api:
        made = _created(
            api.post(
                "/schedules",
                headers=_key(),
                json={
                    "name": "every-second",
                    "workflow": "echo",
                    "input": {"message": "tick"},
                    "spec": {"interval_ms": 1000},
                    "overlap": "skip",
                    "missed": "skip",
                },
            )
        )
    passes = _Passes(system, clock)
    for second in range(1, seconds + 1):
        passes.at(clock.now() + timedelta(seconds=1))
        passes.fire()
        if second % 5 == 0:
            passes.finish(RunState.COMPLETED, {"message": "tick"})
    return str(made["id"])
