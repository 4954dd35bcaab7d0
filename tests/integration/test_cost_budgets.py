"""Cost budgets (SPEC OP-5): what the hot path's operations cost the database, counted in
statements and round trips on both stores, held to the budgets written in
docs/performance.md ("Cost budgets"). Counts, not timings: a feature that makes a create
dearer fails here at once, on any machine, and raises its budget visibly in the same change.

Each figure is per operation. Where operations go in pages (a batch, a dispatch pass, a
worker's claim, a follow-through pass) two page sizes are counted, so the cost splits into
a part per item and a part per page, each with its own budget.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.domain.permissions import Principal, Role
from punctual.domain.runs import RunState
from punctual.settings import load_settings
from punctual.usecases.recurring import generation, schedules
from punctual.usecases.recurring.schedule_fields import decode_create
from punctual.usecases.running import execution
from punctual.usecases.running.followthrough import follow_through
from punctual.usecases.scheduled import starts
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.workflows import load_app
from tests.conftest import FakeClock
from tests.support.api import echo_start, enroll, live_worker, member_api
from tests.support.cost import Cost, counting

BUDGETS = Path(__file__).parents[2] / "docs" / "performance.md"
ALICE = Principal("acme", "alice", Role.MEMBER)
SMALL, LARGE = 5, 25
"""The two page sizes; the part per item is the difference over ``LARGE - SMALL``."""
WORKER = "wrk_live_support"  # the worker live_worker records


@dataclass(frozen=True)
class Budget:
    statements: float
    round_trips: float


def budgets(store: str) -> dict[str, Budget]:
    """The table under "Cost budgets" in docs/performance.md, a row an operation: its
    name, what it counts, then statements and round trips on SQLite, then on PostgreSQL."""
    section = BUDGETS.read_text(encoding="utf-8").split("## Cost budgets", 1)[1]
    number = r" (\d+(?:\.\d+)?) \|"
    rows = re.findall(rf"^\| `([a-z -]+)` \|[^|]*\|{number * 4}$", section, re.M)
    column = 0 if store == "sqlite" else 2
    return {
        name: Budget(float(figures[column]), float(figures[column + 1])) for name, *figures in rows
    }


def within(store: str, figures: dict[str, tuple[float, float]], log: list[str]) -> None:
    """Every figure within its budget; a failure shows them all and what was sent."""
    table = budgets(store)
    over = [
        f"{name}: {s:g} statements, {r:g} round trips (budget {table[name].statements:g}, "
        f"{table[name].round_trips:g})"
        for name, (s, r) in figures.items()
        if s > table[name].statements or r > table[name].round_trips
    ]
    shown = "\n  ".join(log)
    assert not over, (
        f"over the budget of docs/performance.md on {store}: {'; '.join(over)}. "
        f"Every figure: {figures}. What the largest count sent:\n  {shown}"
    )


@pytest.fixture
def system(database_url: str, tmp_path: Path) -> Iterator[bootstrap.Punctual]:
    """A punctual on a clock that only the test moves, its key watch stopped: nothing but
    the counted operation talks to the database."""
    settings = load_settings(
        None,
        database_url=database_url,
        codec={"key_file": str(tmp_path / "test.keys")},
        api_wait_seconds=10,
    )
    built = bootstrap.build(settings, clock=FakeClock(datetime.now(UTC).replace(microsecond=0)))
    live_worker(built)
    enroll(built, ALICE)
    try:
        yield built
    finally:
        built.close()


def quiet(system: bootstrap.Punctual) -> None:
    if system.key_watch is not None:
        system.key_watch.stop()


def per_item(name: str, store: str, count: Callable[[int, str], Cost]) -> None:
    """Hold ``name`` (the part per item) and ``name page`` (the part per page) to their
    budgets, from pages of SMALL and of LARGE items; ``count(size, tag)`` makes and counts
    one page, ``tag`` keeping its names apart. A first page, not held, fills the caches."""
    count(SMALL, "warm")
    small, large = count(SMALL, "small"), count(LARGE, "large")
    span = LARGE - SMALL
    statements = (large.statements - small.statements) / span
    round_trips = (large.round_trips - small.round_trips) / span
    page = (small.statements - SMALL * statements, small.round_trips - SMALL * round_trips)
    within(store, {name: (statements, round_trips), f"{name} page": page}, large.log)


def due_starts(system: bootstrap.Punctual, count: int, tag: str) -> None:
    now = system.services.clock.now()
    for n in range(count):
        command = starts.CreateStart(
            workflow="echo",
            input={"message": f"m{n}"},
            business_request_id=f"{tag}-{n}",
            start_at=now - timedelta(seconds=1),
            workload_class="standard",
        )
        system.mutations.run(None, starts.create(system.services, ALICE, command))


def loaded() -> list[tuple[str, str]]:
    return [(d.name, d.version) for d in load_app("punctual.demo:app").definitions]


def claim_and_record(system: bootstrap.Punctual, limit: int) -> int:
    """What the worker does with a page of short runs: claim them, record their outcomes
    with when their bodies began (a body that runs longer has its start recorded alone:
    a page of those costs one more transaction, see docs/performance.md)."""
    services = system.services
    work = execution.claim_runs(services, WORKER, ["standard"], loaded(), limit)
    began = services.clock.now()
    execution.finish_runs(
        services,
        WORKER,
        [execution.Finished(w.run, RunState.COMPLETED, {"ok": True}, None, began) for w in work],
    )
    return len(work)


def test_a_create_over_http(system: bootstrap.Punctual) -> None:
    with TestClient(system.http_app()) as client:
        api = member_api(system, client)
        for n in range(2):  # the first requests fill the process's caches
            assert (
                api.post(
                    "/scheduled-starts", echo_start(business_request_id=f"warm-{n}")
                ).status_code
                == 201
            )
        quiet(system)
        for n in range(3):
            with counting(system.store.engine) as cost:
                response = api.post("/scheduled-starts", echo_start(business_request_id=f"c-{n}"))
            assert response.status_code == 201, response.text
            within(system.store.dialect, {"create": (cost.statements, cost.round_trips)}, cost.log)


def test_a_batch_item_over_http(system: bootstrap.Punctual) -> None:
    with TestClient(system.http_app()) as client:
        api = member_api(system, client)
        quiet(system)

        def batch(size: int, page: str) -> Cost:
            items = [
                {
                    "idempotency_key": f"b{page}-{n}",
                    **echo_start(business_request_id=f"b{page}-{n}"),
                }
                for n in range(size)
            ]
            headers = api.headers()
            with counting(system.store.engine) as cost:
                response = client.post(
                    api.path("/scheduled-starts/batch"), headers=headers, json={"items": items}
                )
            assert response.status_code == 200, response.text
            assert [i["status"] for i in response.json()["items"]] == [201] * size
            return cost

        per_item("batch item", system.store.dialect, batch)


def test_a_dispatched_start(system: bootstrap.Punctual) -> None:
    quiet(system)

    def dispatch(size: int, tag: str) -> Cost:
        due_starts(system, size, f"d-{tag}")
        with counting(system.store.engine) as cost:
            report = dispatch_due(system.services, "runner-test", 100)
        assert len(report.dispatched) == size, report
        return cost

    per_item("dispatched start", system.store.dialect, dispatch)


def test_a_claimed_and_recorded_run(system: bootstrap.Punctual) -> None:
    quiet(system)

    def run(size: int, tag: str) -> Cost:
        due_starts(system, size, f"r-{tag}")
        assert len(dispatch_due(system.services, "runner-test", 100).dispatched) == size
        with counting(system.store.engine) as cost:
            assert claim_and_record(system, 100) == size
        return cost

    per_item("claimed and recorded run", system.store.dialect, run)


def test_a_follow_through(system: bootstrap.Punctual) -> None:
    """Each run of a schedule, once ended, is judged and noted on its schedule."""
    clock = system.services.clock
    assert isinstance(clock, FakeClock)
    body: dict[str, Any] = {
        "name": "every-second",
        "workflow": "echo",
        "input": {"message": "tick"},
        "spec": {"interval_ms": 1000},
        "overlap": "allow_all",
        "missed": "catch_up",
        "max_catch_up": 100,
    }
    system.mutations.run(None, schedules.create(system.services, ALICE, decode_create(body)))
    quiet(system)

    def judged(size: int, tag: str) -> Cost:
        del tag  # each page is the schedule's next fires
        clock.advance(size)
        live_worker(system)  # its heartbeat, as time moved on
        generation.generate(system.services, 1000)
        assert len(dispatch_due(system.services, "runner-test", 100).dispatched) == size
        assert claim_and_record(system, 100) == size
        with counting(system.store.engine) as cost:
            assert follow_through(system.services).recorded == size
        return cost

    per_item("follow-through", system.store.dialect, judged)


def test_the_counter_sees_each_statement_and_the_transaction_around_them(
    system: bootstrap.Punctual,
) -> None:
    """BEGIN, two statements, COMMIT: four of each on either store, so a budget above
    cannot pass because nothing was counted."""
    quiet(system)
    with counting(system.store.engine) as cost, system.store.engine.begin() as conn:
        conn.execute(sa.text("SELECT 1"))
        conn.execute(sa.text("SELECT 2"))
    assert (cost.statements, cost.round_trips, cost.transactions) == (4, 4, 1), cost.log
