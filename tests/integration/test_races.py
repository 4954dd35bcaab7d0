"""Concurrent writers that must not both win (issue 11, scenario 12).

Each test releases its contenders at one barrier from separate threads, each with its own
connection (two assembled systems stand for two processes), repeats the race a few times
and checks the one allowed outcome: one active version per workflow name, an exact
``max_schedules``, ``409 name_taken`` for a name two creates want, and a generation pass
that plans from an edit that committed while the pass was claiming. The first three run
on both stores (SQLite serializes writers, so they hold there by construction); the
generation race needs PostgreSQL's row locks.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.schedules import SqlSchedules
from punctual.domain.ids import new_id
from punctual.domain.permissions import Principal, Role
from punctual.domain.runs import DefinitionState
from punctual.errors import Conflict, QuotaExceeded, RaceLost
from punctual.ports.records import DueSchedule, NewSchedule, WorkerRecord
from punctual.usecases.kernel.idempotency import IdempotentRequest, Outcome
from punctual.usecases.recurring import schedule_fields, schedules
from punctual.usecases.recurring.generation import generate
from punctual.usecases.running.definitions import DeclaredDefinition, register_worker, set_lifecycle
from tests.conftest import FakeClock, make_settings
from tests.support.api import Api, in_process, member_api, register_demo

ROUNDS = 4
CONTENDERS = 4


def _race(actions: list[Callable[[], Any]]) -> list[Any]:
    """Run every action at once on its own thread; exceptions are returned, not raised."""
    barrier = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = actions[index]()
        except Exception as exc:  # collected and asserted on by the caller
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


@pytest.fixture
def processes(database_url: str, tmp_path: Path) -> Iterator[list[bootstrap.Punctual]]:
    """Two systems on one database, each with its own pool: two API or worker processes."""
    settings = make_settings(database_url, tmp_path, tenant_defaults={"max_schedules": 3})
    with ExitStack() as stack:
        systems = []
        for _ in range(2):
            system = bootstrap.build(settings)
            stack.callback(system.close)
            systems.append(system)
        register_demo(systems[0])
        yield systems


def _registrant(
    system: bootstrap.Punctual, worker_id: str, names: list[str]
) -> Callable[[], WorkerRecord]:
    """A worker that has the first version (its own id) of each of ``names`` loaded."""
    now = system.services.clock.now()
    loaded = [(name, worker_id, "artifact") for name in names]
    record = WorkerRecord(worker_id, "local", "test", ["standard"], loaded, 1, now, now, None)
    declared = [
        DeclaredDefinition(name, worker_id, "artifact", {"type": "object"}, 60.0) for name in names
    ]
    return lambda: register_worker(system.services, record, declared)


def test_first_registrations_of_a_new_workflow_leave_one_active_version(
    processes: list[bootstrap.Punctual],
) -> None:
    # Each worker declares many new workflows, so the two transactions overlap for their
    # whole length: every name is counted by one before the other commits. The second
    # worker declares them in reverse order: registration must not deadlock either.
    for round_ in range(ROUNDS):
        names = [f"fresh-{round_}-{i}" for i in range(20)]
        results = _race(
            [
                _registrant(processes[0], f"wrk_{round_}_a", names),
                _registrant(processes[1], f"wrk_{round_}_b", names[::-1]),
            ]
        )
        # Neither registration failed, and each worker serves every version it loaded:
        # its code is the registered artifact of each (OP-3).
        served = [sorted(name for name, _, _ in record.loaded) for record in results]
        assert served == [sorted(names), sorted(names)], results
        with processes[0].store.transaction(readonly=True) as tx:
            found = [d for _, d in tx.definitions.find(limit=10_000) if d.name in names]
        assert len(found) == 2 * len(names)
        for name in names:
            states = sorted(d.state for d in found if d.name == name)
            assert states == [DefinitionState.ACTIVE, DefinitionState.DEPRECATED], (name, states)


def test_concurrent_activations_of_one_workflow_leave_one_active_version(
    processes: list[bootstrap.Punctual],
) -> None:
    names = [f"switch-{round_}" for round_ in range(ROUNDS)]
    versions = [f"v{i}" for i in range(CONTENDERS)]
    for name in names:
        for version in versions:
            _registrant(processes[0], version, [name])()
    for name in names:
        results = _race(
            [
                lambda system=processes[i % 2], name=name, version=version: set_lifecycle(
                    system.services, name, version, DefinitionState.ACTIVE
                )
                for i, version in enumerate(versions)
            ]
        )
        assert not [r for r in results if isinstance(r, Exception)], results
        with processes[0].store.transaction(readonly=True) as tx:
            active = [
                d.version
                for _, d in tx.definitions.find()
                if d.name == name and d.state == DefinitionState.ACTIVE
            ]
        assert len(active) == 1, (name, active)


def _create(system: bootstrap.Punctual, tenant: str, name: str) -> Callable[[], Any]:
    command = schedule_fields.decode_create(_body(name))
    principal = Principal(tenant, "alice", Role.MEMBER)
    mutation = schedules.create(system.services, principal, command)
    return lambda: system.mutations.run(None, mutation)


def test_max_schedules_is_exact_when_creates_race(processes: list[bootstrap.Punctual]) -> None:
    for round_ in range(ROUNDS):
        tenant = f"tenant-{round_}"
        for name in ("one", "two"):
            _create(processes[0], tenant, name)()
        # The limit is 3: of the contenders exactly one gets the last place.
        results = _race(
            [_create(processes[i % 2], tenant, f"contender-{i}") for i in range(CONTENDERS)]
        )
        created = [r for r in results if not isinstance(r, Exception)]
        refused = [r for r in results if isinstance(r, QuotaExceeded)]
        assert (len(created), len(refused)) == (1, CONTENDERS - 1), results
        assert all(r.details["limit"] == 3 for r in refused)
        with processes[0].store.transaction(readonly=True) as tx:
            assert tx.schedules.count_live(tenant) == 3


def _post(api: Api, body: dict[str, Any]) -> Callable[[], tuple[int, Any]]:
    def call() -> tuple[int, Any]:
        response = api.post("/schedules", body)
        return response.status_code, response.json()

    return call


def _patch(api: Api, sid: str, changes: dict[str, Any]) -> Callable[[], tuple[int, Any]]:
    def call() -> tuple[int, Any]:
        response = api.client.patch(
            api.path(f"/schedules/{sid}"),
            headers=api.headers(f"rename-{sid}"),
            json={"version": 1, **changes},
        )
        return response.status_code, response.json()

    return call


def _body(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "workflow": "echo",
        "input": {"message": "tick"},
        "spec": {"interval_ms": 60_000},
        "overlap": "skip",
        "missed": "catch_up",
    }


def _clients(processes: list[bootstrap.Punctual], stack: ExitStack) -> list[TestClient]:
    """One client per process, each with its routes used once before any race: FastAPI
    builds a route's parameters on first use under ``warnings.catch_warnings``, which is
    not thread-safe, and two apps doing it at once in one test process can let a pydantic
    warning escape (an error under ``filterwarnings = error``), which no server sees."""
    clients = [stack.enter_context(in_process(system)) for system in processes]
    for index, client in enumerate(clients):
        api = member_api(processes[0], client, f"warm-up-{index}", "alice")
        created = api.post("/schedules", _body("warm-up"))
        assert created.status_code == 201, created.text
        renamed = _patch(api, created.json()["id"], {"name": "warmed-up"})()
        assert renamed[0] == 200, renamed
        assert api.get("/schedules").status_code == 200
    return clients


def _assert_one_winner(results: list[tuple[int, Any]], winner_status: int) -> None:
    statuses = sorted(status for status, _ in results)
    assert statuses == [winner_status] + [409] * (len(results) - 1), results
    for status, body in results:
        if status == 409:
            assert body["error"]["code"] == "name_taken", body


def test_creates_of_one_name_race_to_one_201_and_409_name_taken(
    processes: list[bootstrap.Punctual],
) -> None:
    with ExitStack() as stack:
        clients = _clients(processes, stack)
        for round_ in range(ROUNDS):
            tenant = f"naming-{round_}"
            apis = [member_api(processes[0], client, tenant, "alice") for client in clients]
            results = _race([_post(apis[i % 2], _body("nightly")) for i in range(CONTENDERS)])
            _assert_one_winner(results, 201)
            listed = apis[0].get("/schedules").json()["items"]
            assert [s["name"] for s in listed] == ["nightly"]


def test_a_rename_racing_a_create_of_the_same_name_gives_409_name_taken(
    processes: list[bootstrap.Punctual],
) -> None:
    # A rename does not take the tenant's create lock: the unique index decides, and the
    # loser must hear name_taken, not a server error.
    with ExitStack() as stack:
        clients = _clients(processes, stack)
        for round_ in range(ROUNDS):
            tenant = f"renaming-{round_}"
            apis = [member_api(processes[0], client, tenant, "alice") for client in clients]
            created = apis[0].post("/schedules", _body("draft"))
            assert created.status_code == 201, created.text
            sid = created.json()["id"]
            results = _race(
                [_post(apis[0], _body("final")), _patch(apis[1], sid, {"name": "final"})]
            )
            _assert_one_winner(results, min(status for status, _ in results))
            assert sorted(status for status, _ in results)[0] in (200, 201), results
            listed = apis[0].get("/schedules").json()["items"]
            assert sorted(s["name"] for s in listed).count("final") == 1


def _put(api: Api, name: str, key: str, body: dict[str, Any]) -> Callable[[], tuple[int, Any]]:
    def call() -> tuple[int, Any]:
        response = api.client.put(
            api.path(f"/schedules/by-name/{name}"), headers=api.headers(key), json=body
        )
        return response.status_code, response.json()

    return call


def test_puts_of_one_new_name_converge_and_each_key_replays_its_own_answer(
    processes: list[bootstrap.Punctual],
) -> None:
    """Schedules as code applied from several places at once (OS-4): one PUT creates the
    name, every other one answers as an update of it or as unchanged, none hears
    ``name_taken``, and a retry with each key answers exactly what that key was answered."""
    body = {key: value for key, value in _body("nightly").items() if key != "name"}
    with ExitStack() as stack:
        clients = _clients(processes, stack)
        for round_ in range(ROUNDS):
            tenant = f"applying-{round_}"
            apis = [member_api(processes[0], client, tenant, "alice") for client in clients]
            puts = [
                _put(apis[i % 2], "nightly", f"apply-{round_}-{i}", body) for i in range(CONTENDERS)
            ]
            results = _race(puts)

            statuses = sorted(status for status, _ in results)
            assert statuses == [200] * (CONTENDERS - 1) + [201], results
            assert len({answer["id"] for _, answer in results}) == 1, results
            assert [answer["changed"] for _, answer in results].count(True) == 1, results
            assert [put() for put in puts] == results
            listed = apis[0].get("/schedules").json()["items"]
            assert [s["name"] for s in listed] == ["nightly"]


def test_a_mutation_that_lost_a_race_runs_again_and_its_answer_is_never_recorded(
    processes: list[bootstrap.Punctual],
) -> None:
    """A race lost at the unique index depends on timing, not on the request: the runner
    runs the mutation again (it then decides on what won), and when it keeps losing, the
    caller hears ``409 name_taken`` but the key stays free, so a retry runs it again."""
    system = processes[0]
    runs: list[int] = []

    def losing_once(tx: Any, now: Any) -> Outcome:
        runs.append(1)
        if len(runs) == 1:
            raise RaceLost("lost", code="name_taken")
        return Outcome(201, {"id": "sch_won"}, resource_id="sch_won")

    request = IdempotentRequest("acme", "alice", "race-once", "fingerprint")
    assert system.mutations.run(request, losing_once).body == {"id": "sch_won"}
    assert len(runs) == 2
    replayed = system.mutations.run(request, losing_once)
    assert (replayed.replayed, len(runs)) == (True, 2)

    def always_losing(tx: Any, now: Any) -> Outcome:
        runs.append(1)
        raise RaceLost("lost", code="name_taken")

    runs.clear()
    keep_losing = IdempotentRequest("acme", "alice", "race-always", "fingerprint")
    with pytest.raises(RaceLost):
        system.mutations.run(keep_losing, always_losing)
    tried = len(runs)
    assert tried > 1
    assert system.mutations.run(keep_losing, losing_once).status == 201
    assert len(runs) > tried


# -- the generation pass against a concurrent edit (PostgreSQL only) ------------------------

FILLERS = 20_000
"""Due schedules that another transaction holds locked, ahead of the raced schedule in the
claim's order: skipping them keeps the claim busy for a while after it took its snapshot,
so the edit reliably commits inside that window."""
EDIT_COMMITS_AFTER = 0.005


@pytest.fixture
def pg_clocked(pg_url: str, tmp_path: Path) -> Iterator[tuple[bootstrap.Punctual, FakeClock]]:
    clock = FakeClock()
    system = bootstrap.build(make_settings(pg_url, tmp_path), clock=clock)
    try:
        register_demo(system)
        yield system, clock
    finally:
        system.close()


def _add_fillers(system: bootstrap.Punctual, template_id: str) -> None:
    with system.store.transaction() as tx:
        row = dict(
            tx.conn.execute(sa.select(t.schedules).where(t.schedules.c.id == template_id))
            .mappings()
            .one()
        )
        row.pop("seq")
        # Due before every raced schedule, so the claim reaches them first.
        assert row["next_fire_at"] is not None
        due = row["next_fire_at"] - timedelta(seconds=30)
        tx.conn.execute(
            sa.insert(t.schedules),
            [
                row
                | {
                    "id": f"sch_fill_{i}",
                    "tenant": "fillers",
                    "name": f"fill-{i}",
                    "next_fire_at": due,
                }
                for i in range(FILLERS)
            ],
        )


def _edit_then_commit_at_the_barrier(
    system: bootstrap.Punctual, edit: Any, now: Any, barrier: threading.Barrier
) -> None:
    """Hold the edit (and the schedule's row lock) until both sides are at the barrier,
    then commit a moment after the generation pass set off."""
    with system.store.transaction() as tx:
        edit(tx, now)
        barrier.wait()
        time.sleep(EDIT_COMMITS_AFTER)


@pytest.mark.postgres
@pytest.mark.slow
def test_generation_plans_from_an_edit_that_committed_while_it_claimed(
    pg_clocked: tuple[bootstrap.Punctual, FakeClock],
) -> None:
    system, clock = pg_clocked
    alice = Principal("acme", "alice", Role.MEMBER)
    raced_rounds = 0
    for round_ in range(ROUNDS):
        outcome = _create(system, "acme", f"raced-{round_}")()
        sid = outcome.body["id"]
        if round_ == 0:
            _add_fillers(system, sid)
        now = clock.advance(120)  # the raced schedule and the fillers are due
        # The edit keeps the schedule due (its new spec fires in a second) but moves its
        # cursor, spec and revision: a plan from the older row would fire the old spec.
        new_first = now + timedelta(seconds=1)
        edit = schedules.update(
            system.services,
            alice,
            schedule_fields.decode_update(
                sid,
                1,
                {"spec": {"interval_ms": 600_000, "starts_at": new_first.isoformat()}},
            ),
        )
        with system.store.engine.connect() as locker, locker.begin():
            locker.execute(
                sa.select(t.schedules.c.id)
                .where(t.schedules.c.id.like("sch_fill_%"))
                .with_for_update()
            ).all()
            barrier = threading.Barrier(2)
            editor = threading.Thread(
                target=_edit_then_commit_at_the_barrier, args=(system, edit, now, barrier)
            )
            editor.start()
            barrier.wait()
            generate(system.services, FILLERS + 10)
            editor.join(30)

        with system.store.transaction(readonly=True) as tx:
            schedule = tx.schedules.get("acme", sid)
            rows = tx.conn.execute(
                sa.select(t.starts.c.occurrence_at, t.starts.c.revision)
                .where(t.starts.c.schedule_id == sid, t.starts.c.state == "scheduled")
                .order_by(t.starts.c.occurrence_at)
            ).all()
        assert schedule is not None
        assert (schedule.version, schedule.revision) == (2, 2)
        if rows:
            # The pass claimed the raced schedule after the edit committed (it was locked
            # when the pass set off): what it planned, and where it left the cursor, follow
            # the edit.
            raced_rounds += 1
            assert [(r.occurrence_at, r.revision) for r in rows] == [(new_first, 2)], rows
            assert schedule.cursor == new_first
            assert schedule.next_fire_at == new_first + timedelta(minutes=10)
        else:
            # The edit committed after the claim passed the locked schedule: skipped, and
            # the edit stands untouched.
            assert (schedule.cursor, schedule.next_fire_at) == (now, new_first)
    assert raced_rounds >= 1, "the claim never met the committed edit; widen the window"


def test_a_plan_from_an_older_read_of_a_schedule_writes_nothing(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cursor move is conditional on the version the plan read: should a pass ever
    plan from an older row than the one it locked, it writes neither the cursor nor the
    occurrences of that plan, and the next pass plans from the current row."""
    clock = FakeClock()
    system = bootstrap.build(make_settings(database_url, tmp_path), clock=clock)
    try:
        register_demo(system)
        outcome = _create(system, "acme", "stale")()
        sid = outcome.body["id"]
        edited = schedules.update(
            system.services,
            Principal("acme", "alice", Role.MEMBER),
            schedule_fields.decode_update(sid, 1, {"overlap": "allow_all"}),
        )
        system.mutations.run(None, edited)
        clock.advance(61)
        honest = SqlSchedules.claim_due_for_generation

        def older_read(self: SqlSchedules, horizon: Any, limit: int) -> list[DueSchedule]:
            return [
                DueSchedule(
                    dataclasses.replace(d.schedule, version=d.schedule.version - 1), d.input
                )
                for d in honest(self, horizon, limit)
            ]

        monkeypatch.setattr(SqlSchedules, "claim_due_for_generation", older_read)
        stale = generate(system.services, 10)
        with system.store.transaction(readonly=True) as tx:
            unmoved = tx.schedules.get("acme", sid)
            assert tx.starts.count_pending("acme") == 0
        assert (stale.schedules, stale.generated) == (0, 0)
        assert unmoved is not None and unmoved.cursor == clock.now() - timedelta(seconds=61)

        monkeypatch.setattr(SqlSchedules, "claim_due_for_generation", honest)
        current = generate(system.services, 10)
        assert (current.schedules, current.generated) == (1, 1)
    finally:
        system.close()


def test_the_store_answers_name_taken_when_the_unique_index_refuses_a_name(
    processes: list[bootstrap.Punctual],
) -> None:
    """The index is the last word on both stores: an insert or rename that reaches it with
    a taken name (the use case's check having lost a race) is ``Conflict`` ``name_taken``,
    and any other integrity error is not mistaken for it."""
    system = processes[0]
    first = _create(system, "acme", "taken")().body
    second = _create(system, "acme", "free")().body
    with system.store.transaction(readonly=True) as tx:
        template = tx.schedules.get("acme", first["id"])
        sealed = tx.schedules.input_of(first["id"])
    assert template is not None
    clash = NewSchedule(
        id=new_id("sch"),
        tenant="acme",
        settings=dataclasses.replace(template.settings, name="taken"),
        input=sealed,
        pinned_version=None,
        created_by="alice",
        cursor=template.cursor,
        next_fire_at=template.next_fire_at,
    )
    now = system.services.clock.now()
    with pytest.raises(Conflict) as inserted, system.store.transaction() as tx:
        tx.schedules.insert(clash, now)
    assert inserted.value.code == "name_taken"
    with pytest.raises(Conflict) as renamed, system.store.transaction() as tx:
        tx.schedules.compare_and_set(second["id"], 1, now, name="taken")
    assert renamed.value.code == "name_taken"
    # The same id again breaks another unique constraint: that stays an integrity error.
    with pytest.raises(sa.exc.IntegrityError), system.store.transaction() as tx:
        other = dataclasses.replace(clash.settings, name="other")
        tx.schedules.insert(dataclasses.replace(clash, id=first["id"], settings=other), now)
