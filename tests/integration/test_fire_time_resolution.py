"""Fire-time resolution on both stores (SPEC OS-2, OS-6, DP-3, WF-3, §2 "configuration
current at dispatch time"; API.md "Scheduled starts").

Acceptance validates the input against the then-active definition and pins nothing; at
dispatch the active definition, a worker that has it loaded, the workload class and its
task queue and priority are all resolved again from what is current *then*. Retiring a
version that something still needs is refused, naming the users.

Time is a ``FakeClock``; a start is made due by moving its ``due_at`` into the past in the
table, and dispatch passes are called directly (no runner thread), so nothing here waits.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.domain import backoff
from punctual.domain.permissions import Role
from punctual.domain.runs import DefinitionState
from punctual.errors import Conflict
from punctual.ports.engine import RunOrder
from punctual.ports.events import Event
from punctual.ports.records import EncryptedInput, WorkerRecord
from punctual.usecases.running.definitions import DeclaredDefinition, register_worker, set_lifecycle
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.conftest import FakeClock, make_settings
from tests.support.api import Api, in_process, member_api

WORKFLOW = "greet"
LENIENT = DeclaredDefinition(
    name=WORKFLOW,
    version="1",
    artifact="greet-artifact-1",
    input_schema={
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}},
    },
    execution_timeout_seconds=60,
)
STRICT = DeclaredDefinition(
    name=WORKFLOW,
    version="2",
    artifact="greet-artifact-2",
    input_schema={
        "type": "object",
        "required": ["name", "lang"],
        "properties": {"name": {"type": "string"}, "lang": {"type": "string"}},
    },
    execution_timeout_seconds=60,
)
COMPATIBLE = DeclaredDefinition(
    name=WORKFLOW,
    version="2",
    artifact="greet-artifact-2",
    input_schema={
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}, "lang": {"type": "string"}},
    },
    execution_timeout_seconds=60,
)
_s = t.starts.c


# --------------------------------------------------------------------------- helpers


class Host:
    """One assembled system on the shared database, with an HTTP client as tenant acme."""

    def __init__(self, system: bootstrap.Punctual, api: Api) -> None:
        self.system = system
        self.api = api

    @property
    def clock(self) -> FakeClock:
        clock = self.system.services.clock
        assert isinstance(clock, FakeClock)
        return clock

    def worker(self, *declared: DeclaredDefinition, live: bool = True) -> None:
        """Register ``declared`` as a worker would (live: it has them loaded right now)."""
        now = self.clock.now()
        record = WorkerRecord(
            id=f"wrk_{secrets.token_hex(4)}",
            engine="local",
            host="test",
            task_queues=["standard"],
            loaded=[(d.name, d.version, d.artifact) for d in declared],
            slots=1,
            started_at=now - timedelta(seconds=1),
            heartbeat_at=now,
            stopped_at=None if live else now - timedelta(seconds=1),
        )
        register_worker(self.system.services, record, declared)

    def create(self, payload: Any, **overrides: Any) -> dict[str, Any]:
        response = self.api.post("/scheduled-starts", self.body(payload, **overrides))
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    def body(self, payload: Any, **overrides: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "workflow": WORKFLOW,
            "input": payload,
            "business_request_id": f"fire-{secrets.token_hex(3)}",
            "start_at": (self.clock.now() + timedelta(hours=1)).isoformat(),
            "workload_class": "standard",
        }
        body.update(overrides)
        return body

    def get(self, start_id: str) -> dict[str, Any]:
        response = self.api.get(f"/scheduled-starts/{start_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def make_due(self, start_id: str) -> None:
        with self.system.store.engine.begin() as conn:
            conn.execute(
                sa.update(t.starts)
                .where(_s.id == start_id)
                .values(due_at=self.clock.now() - timedelta(seconds=1))
            )

    def dispatch(self) -> Any:
        return dispatch_due(self.system.services, f"runner-{secrets.token_hex(2)}", 50)

    def row(self, table: sa.Table, **where: Any) -> dict[str, Any] | None:
        query = sa.select(table).where(*[table.c[k] == v for k, v in where.items()])
        with self.system.store.engine.connect() as conn:
            found = conn.execute(query).mappings().first()
        return dict(found) if found is not None else None

    def start_row(self, start_id: str) -> dict[str, Any]:
        found = self.row(t.starts, id=start_id)
        assert found is not None
        return found

    def next_attempt_at(self, start_id: str) -> datetime:
        """Exact, from the table (the API shows it truncated to milliseconds)."""
        value = self.start_row(start_id)["next_attempt_at"]
        assert isinstance(value, datetime), value
        return value

    def lifecycle(self, version: str, state: DefinitionState) -> None:
        set_lifecycle(self.system.services, WORKFLOW, version, state)


@pytest.fixture
def hosts(database_url: str, tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Host]]:
    """Systems on one database and one clock; each may have its own host configuration."""
    with ExitStack() as stack:

        def make(**overrides: Any) -> Host:
            settings = make_settings(database_url, tmp_path, **overrides)
            system = bootstrap.build(settings, clock=clock)
            stack.callback(system.close)
            client = stack.enter_context(in_process(system))
            return Host(system, member_api(system, client, role=Role.ADMIN))

        yield make


@pytest.fixture
def host(hosts: Callable[..., Host]) -> Host:
    return hosts()


def assert_failed(start: dict[str, Any], code: str, attempts: int = 1) -> None:
    assert start["state"] == "failed", start
    assert start["last_error"] is not None, start
    assert start["last_error"]["code"] == code, start
    assert start["attempts"] == attempts, start
    assert start["dispatch"] is None, start


def runs_of(host: Host, start_id: str) -> list[dict[str, Any]]:
    query = sa.select(t.runs).where(t.runs.c.origin_id == start_id)
    with host.system.store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


# --------------------------------------------------------------------------- acceptance vs fire


def test_acceptance_validates_against_the_active_version_but_pins_nothing(host: Host) -> None:
    host.worker(LENIENT)
    invalid = host.api.post("/scheduled-starts", host.body({"nom": 7}))
    assert invalid.status_code == 422, invalid.text
    assert invalid.json()["error"]["code"] == "input_invalid"

    start = host.create({"name": "ada"})
    assert start["dispatch"] is None
    for hidden in ("definition_version", "artifact", "run_id", "input"):
        assert hidden not in start, (hidden, start)
    assert host.get(start["id"])["dispatch"] is None
    row = host.start_row(start["id"])
    assert row["definition_version"] is None
    assert row["artifact"] is None
    assert row["dispatched_at"] is None
    preallocated = row["run_id"]
    assert preallocated

    # A compatible version 2 is deployed and activated before the start is due.
    host.worker(LENIENT, COMPATIBLE)
    host.lifecycle("2", DefinitionState.ACTIVE)
    host.make_due(start["id"])
    report = host.dispatch()
    assert report.dispatched == [start["id"]], report

    after = host.get(start["id"])
    assert after["state"] == "dispatched"
    dispatch = after["dispatch"]
    assert dispatch is not None
    assert dispatch["definition_version"] == "2"
    assert dispatch["artifact"] == "greet-artifact-2"
    assert dispatch["run_id"] == preallocated
    assert dispatch["dispatched_at"] is not None
    row = host.start_row(start["id"])
    assert (row["definition_version"], row["artifact"]) == ("2", "greet-artifact-2")

    run = host.api.get(f"/runs/{preallocated}").json()
    assert run["definition_version"] == "2", run
    assert run["artifact"] == "greet-artifact-2", run
    assert run["origin"] == {"source": "scheduled_start", "id": start["id"]}


def test_input_that_no_longer_validates_fails_input_rejected_and_is_not_altered(
    host: Host,
) -> None:
    host.worker(LENIENT)
    payload = {"name": "grace"}
    start = host.create(payload)
    before = host.start_row(start["id"])

    host.worker(LENIENT, STRICT)
    host.lifecycle("2", DefinitionState.ACTIVE)
    host.make_due(start["id"])
    report = host.dispatch()
    assert report.failed == [start["id"]], report

    failed = host.get(start["id"])
    assert_failed(failed, "input_rejected")
    assert "lang" in failed["last_error"]["message"]
    assert runs_of(host, start["id"]) == []
    after = host.start_row(start["id"])
    assert bytes(after["input"]) == bytes(before["input"])
    assert after["input_key_id"] == before["input_key_id"]
    stored = EncryptedInput(after["input_key_id"], bytes(after["input"]))
    assert host.system.services.codec.decrypt(stored, "acme") == payload

    # Terminal: never retried automatically, even once a lenient version is active again.
    host.lifecycle("1", DefinitionState.ACTIVE)
    host.clock.advance(3600)
    host.worker(LENIENT, STRICT)
    assert host.dispatch().claimed == 0
    assert host.get(start["id"])["state"] == "failed"


def test_no_active_version_at_dispatch_fails_workflow_inactive(host: Host) -> None:
    host.worker(LENIENT)
    deprecated = host.create({"name": "deprecated"})
    host.lifecycle("1", DefinitionState.DEPRECATED)
    host.make_due(deprecated["id"])
    report = host.dispatch()
    assert report.failed == [deprecated["id"]], report
    assert_failed(host.get(deprecated["id"]), "workflow_inactive")
    assert runs_of(host, deprecated["id"]) == []
    # With no active version, new requests are refused at acceptance instead.
    refused = host.api.post("/scheduled-starts", host.body({"name": "late"}))
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "workflow_inactive"


def test_no_worker_with_the_version_loaded_retries_with_backoff_then_fails(host: Host) -> None:
    host.worker(LENIENT, live=False)  # registered, but no live worker has it loaded
    events: list[Event] = []
    host.system.events.subscribe(events.append)
    start = host.create({"name": "patient"})
    host.make_due(start["id"])

    delays: list[float] = []
    for attempt in range(1, backoff.MAX_ATTEMPTS):
        report = host.dispatch()
        assert report.retried == [start["id"]], (attempt, report)
        current = host.get(start["id"])
        assert current["state"] == "scheduled", current
        assert current["attempts"] == attempt
        assert current["last_error"]["code"] == "version_not_loaded"
        assert current["dispatch"] is None
        shown = datetime.fromisoformat(current["next_attempt_at"])
        next_at = host.next_attempt_at(start["id"])
        assert timedelta(0) <= next_at - shown < timedelta(milliseconds=1)
        delay = (next_at - host.clock.now()).total_seconds()
        delays.append(delay)
        nominal = min(5.0 * 2 ** (attempt - 1), 300.0)
        assert nominal / 2 <= delay <= nominal, (attempt, delay)
        # Not claimed again before its next attempt ...
        host.clock.advance(delay / 2)
        assert host.dispatch().claimed == 0
        # ... and claimed again when it comes.
        host.clock.current = next_at

    final = host.dispatch()
    assert final.failed == [start["id"]], final
    failed = host.get(start["id"])
    assert_failed(failed, "version_not_loaded", attempts=backoff.MAX_ATTEMPTS)
    assert max(delays) <= 300
    assert runs_of(host, start["id"]) == []
    names = [e.name for e in events if e.subject_id == start["id"]]
    assert names == ["start.retried"] * (backoff.MAX_ATTEMPTS - 1) + ["start.failed"], names

    # Terminal: a worker that shows up later changes nothing.
    host.clock.advance(3600)
    host.worker(LENIENT)
    assert host.dispatch().claimed == 0
    assert host.get(start["id"])["state"] == "failed"


def test_a_failed_start_does_not_advertise_a_next_attempt(host: Host) -> None:
    """API.md: ``next_attempt_at`` is when the next attempt happens; a terminal ``failed``
    start has none (DP-3: never retried automatically)."""
    host.worker(LENIENT, live=False)
    start = host.create({"name": "patient"})
    host.make_due(start["id"])
    for _ in range(backoff.MAX_ATTEMPTS):
        host.dispatch()
        current = host.get(start["id"])
        if current["state"] == "failed":
            break
        host.clock.current = host.next_attempt_at(start["id"])
    failed = host.get(start["id"])
    assert failed["state"] == "failed"
    assert failed["next_attempt_at"] is None, failed


def test_a_worker_that_appears_between_attempts_gets_the_start(host: Host) -> None:
    host.worker(LENIENT, live=False)
    start = host.create({"name": "transient"})
    host.make_due(start["id"])
    for _ in range(2):
        assert host.dispatch().retried == [start["id"]]
        host.clock.current = host.next_attempt_at(start["id"])
    host.worker(LENIENT)  # now live
    assert host.dispatch().dispatched == [start["id"]]
    after = host.get(start["id"])
    assert after["state"] == "dispatched"
    assert after["attempts"] == 3
    assert after["dispatch"]["definition_version"] == "1"


# --------------------------------------------------------------------------- host configuration


def test_a_workload_class_removed_before_dispatch_fails_the_start(
    hosts: Callable[..., Host],
) -> None:
    reports_class = {"reports": {"task_queue": "reports", "priority": 4}}
    before = hosts(
        workload_classes=reports_class,
        tenant_defaults={"allowed_workload_classes": ["standard", "reports"]},
    )
    before.worker(LENIENT)
    start = before.create({"name": "reporter"}, workload_class="reports")

    # The host redeploys without the class; the next dispatch uses the new configuration.
    after = hosts()
    after.worker(LENIENT)
    after.make_due(start["id"])
    report = after.dispatch()
    assert report.failed == [start["id"]], report
    failed = after.get(start["id"])
    assert_failed(failed, "workload_class_not_allowed")
    assert "reports" in failed["last_error"]["message"]
    assert runs_of(after, start["id"]) == []


def test_a_workload_class_no_longer_allowed_for_the_tenant_fails_the_start(
    hosts: Callable[..., Host],
) -> None:
    before = hosts()
    before.worker(LENIENT)
    start = before.create({"name": "batcher"}, workload_class="batch")
    after = hosts(tenants={"acme": {"allowed_workload_classes": ["standard"]}})
    after.worker(LENIENT)
    after.make_due(start["id"])
    assert after.dispatch().failed == [start["id"]]
    assert_failed(after.get(start["id"]), "workload_class_not_allowed")


def test_task_queue_and_priority_come_from_the_host_mapping_at_dispatch(
    hosts: Callable[..., Host], monkeypatch: pytest.MonkeyPatch
) -> None:
    accepted_by = hosts(workload_classes={"standard": {"task_queue": "std-old", "priority": 3}})
    accepted_by.worker(LENIENT)
    start = accepted_by.create({"name": "queued"})

    dispatcher = hosts(workload_classes={"standard": {"task_queue": "std-new", "priority": 1}})
    dispatcher.worker(LENIENT)
    orders: list[RunOrder] = []
    original = dispatcher.system.engine.start

    def recording(batch: Sequence[RunOrder]) -> None:
        orders.extend(batch)
        original(batch)

    monkeypatch.setattr(dispatcher.system.engine, "start", recording)
    dispatcher.make_due(start["id"])
    assert dispatcher.dispatch().dispatched == [start["id"]]

    run_id = dispatcher.get(start["id"])["dispatch"]["run_id"]
    assert [(o.run_id, o.task_queue, o.priority) for o in orders] == [(run_id, "std-new", 1)]
    run = dispatcher.row(t.runs, id=run_id)
    assert run is not None
    assert (run["task_queue"], run["priority"]) == ("std-new", 1)


@pytest.mark.parametrize(
    "owned",
    [
        {"task_queue": "vip"},
        {"priority": 1},
        {"task_queue": "vip", "priority": 1},
        {"run_id": "run_mine"},
        {"scope": "global"},
        {"temporal_workflow_id": "wf-mine"},
    ],
    ids=["task_queue", "priority", "both", "run_id", "scope", "temporal_workflow_id"],
)
def test_a_request_cannot_choose_host_owned_fields(host: Host, owned: dict[str, Any]) -> None:
    host.worker(LENIENT)
    response = host.api.post("/scheduled-starts", host.body({"name": "vip"}, **owned))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "host_owned_field", error
    assert sorted(error["details"]["fields"]) == sorted(owned), error
    with host.system.store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(t.starts)).scalar_one() == 0


# --------------------------------------------------------------------------- retire (WF-3)


def refused_retire(host: Host, version: str) -> list[str]:
    with pytest.raises(Conflict) as caught:
        host.lifecycle(version, DefinitionState.RETIRED)
    assert caught.value.code == "in_use"
    users: list[str] = caught.value.details["users"]
    assert users, caught.value
    for user in users:
        assert user in str(caught.value)
    definition = host.row(t.definitions, name=WORKFLOW, version=version)
    assert definition is not None
    assert definition["state"] != "retired"
    return users


def retired(host: Host, version: str) -> None:
    host.lifecycle(version, DefinitionState.RETIRED)
    definition = host.row(t.definitions, name=WORKFLOW, version=version)
    assert definition is not None
    assert definition["state"] == "retired"


def schedule_body(name: str, policy: str) -> dict[str, Any]:
    return {
        "name": name,
        "workflow": WORKFLOW,
        "input": {"name": "nightly"},
        "spec": {"cron": "30 2 * * *", "time_zone": "UTC"},
        "overlap": "skip",
        "missed": "skip",
        "version_policy": policy,
        "workload_class": "standard",
    }


def test_retire_is_refused_while_pending_starts_wait_for_the_active_version(host: Host) -> None:
    host.worker(LENIENT)
    start = host.create({"name": "waiting"})
    users = refused_retire(host, "1")
    assert any("pending start" in u and "1 " in u for u in users), users
    canceled = host.api.post(
        f"/scheduled-starts/{start['id']}/cancel", {"version": start["version"]}
    )
    assert canceled.status_code == 200, canceled.text
    retired(host, "1")


def test_pending_starts_do_not_hold_a_version_that_is_not_active(host: Host) -> None:
    """Unpinned pending starts resolve at dispatch: they need the active version only."""
    host.worker(LENIENT, COMPATIBLE)
    host.create({"name": "waiting"})
    host.lifecycle("2", DefinitionState.ACTIVE)
    retired(host, "1")
    refused_retire(host, "2")


def test_retire_is_refused_while_an_unfinished_run_uses_the_version(host: Host) -> None:
    host.worker(LENIENT, COMPATIBLE)
    start = host.create({"name": "running"})
    host.make_due(start["id"])
    assert host.dispatch().dispatched == [start["id"]]
    run_id = host.get(start["id"])["dispatch"]["run_id"]
    # Version 2 becomes active: nothing pending waits for version 1, but its run is unfinished.
    host.lifecycle("2", DefinitionState.ACTIVE)
    users = refused_retire(host, "1")
    assert any("unfinished run" in u for u in users), users
    terminated = host.api.post(f"/runs/{run_id}/terminate")
    assert terminated.status_code == 200, terminated.text
    assert terminated.json()["state"] == "terminated"
    retired(host, "1")


def test_retire_is_refused_while_a_pinned_schedule_uses_the_version(host: Host) -> None:
    host.worker(LENIENT, COMPATIBLE)
    created = host.api.post("/schedules", schedule_body("pinned-nightly", "pinned"))
    assert created.status_code == 201, created.text
    schedule = created.json()
    host.lifecycle("2", DefinitionState.ACTIVE)
    # Paused schedules still need their version.
    paused = host.api.post(f"/schedules/{schedule['id']}/pause", {"version": schedule["version"]})
    assert paused.status_code == 200, paused.text
    users = refused_retire(host, "1")
    assert any("pinned" in u for u in users), users
    deleted = host.api.delete(f"/schedules/{schedule['id']}", version=paused.json()["version"])
    assert deleted.status_code == 204, f"deleting the schedule failed: {deleted.text}"
    retired(host, "1")


def test_retire_is_refused_while_an_active_at_fire_schedule_follows_the_active_version(
    host: Host,
) -> None:
    host.worker(LENIENT, COMPATIBLE)
    created = host.api.post("/schedules", schedule_body("following", "active_at_fire"))
    assert created.status_code == 201, created.text
    schedule = created.json()
    users = refused_retire(host, "1")
    assert any("active_at_fire" in u for u in users), users
    # Once version 2 is active the schedule follows it, and version 1 is free.
    host.lifecycle("2", DefinitionState.ACTIVE)
    retired(host, "1")
    refused_retire(host, "2")
    deleted = host.api.delete(f"/schedules/{schedule['id']}", version=schedule["version"])
    assert deleted.status_code == 204, f"deleting the schedule failed: {deleted.text}"
    retired(host, "2")
