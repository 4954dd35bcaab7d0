"""Faults during dispatch (FT-1, FT-2, FT-5), on both stores.

* One start whose input cannot be decrypted is handled alone; the rest of the page
  dispatches in the same pass.
* A pass whose engine calls take longer than the claims' lease keeps its claims.
* On PostgreSQL leases run on the database's clock: a runner whose host clock is minutes
  off neither steals a live claim nor records under an expired one.
* Claims and releases leave ``version`` alone; a cancel or reschedule of a start that is
  only claimed takes effect, and the dispatch then cannot record.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.domain.permissions import Principal, Role
from punctual.embedded import Scheduler
from punctual.ports.engine import Engine, EngineUnavailable, RunOrder
from punctual.ports.records import RunFilter, Seek
from punctual.usecases.recurring.generation import generate
from punctual.usecases.scheduled import starts
from punctual.usecases.scheduled.dispatch import START_CHUNK, dispatch_due
from tests.conftest import FakeClock, make_settings
from tests.support.api import enroll, live_worker, register_demo

ALICE = Principal("acme", "alice", Role.MEMBER)


class HookedEngine:
    """The real engine with a hook run inside every ``start`` (and a record of terminates)."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.name = inner.name
        self.loaded = inner.loaded
        self.cancel = inner.cancel
        self.on_recorded = inner.on_recorded
        self.available = inner.available
        self.on_start: Callable[[Sequence[RunOrder]], None] = lambda orders: None
        self.started: list[list[str]] = []
        self.terminated: list[str] = []

    def start(self, orders: Sequence[RunOrder]) -> None:
        self.started.append([order.run_id for order in orders])
        self.on_start(orders)
        self.inner.start(orders)

    def terminate(self, tenant: str, run_id: str) -> None:
        self.terminated.append(run_id)
        self.inner.terminate(tenant, run_id)


SHORT_LEASE_SECONDS = 1.5
"""For the test whose pass must outlive a lease; the others keep the default lease, which a
loaded machine cannot run out between a claim and the engine call."""


def _assembled(
    database_url: str, tmp_path: Path, clock: FakeClock | None = None, **overrides: Any
) -> Iterator[bootstrap.Punctual]:
    settings = make_settings(database_url, tmp_path, **overrides)
    built = bootstrap.build(settings, clock=clock)
    try:
        register_demo(built)
        enroll(built, ALICE)
        live_worker(built)
        yield built
    finally:
        built.close()


@pytest.fixture
def system(database_url: str, tmp_path: Path) -> Iterator[bootstrap.Punctual]:
    yield from _assembled(database_url, tmp_path)


@pytest.fixture
def short_lease(database_url: str, tmp_path: Path) -> Iterator[bootstrap.Punctual]:
    yield from _assembled(
        database_url,
        tmp_path,
        runner={"lease_seconds": SHORT_LEASE_SECONDS},
        worker={"heartbeat_seconds": SHORT_LEASE_SECONDS / 3},
    )


@pytest.fixture
def clocked(database_url: str, tmp_path: Path) -> Iterator[tuple[bootstrap.Punctual, FakeClock]]:
    """The same system on a clock the test moves: an occurrence is generated ahead of its
    time and falls due when the test says so, however long the steps between take."""
    clock = FakeClock(datetime.now(UTC))
    for built in _assembled(database_url, tmp_path, clock):
        yield built, clock


def _hooked(system: bootstrap.Punctual) -> HookedEngine:
    engine = HookedEngine(system.services.engine)
    system.services = dataclasses.replace(system.services, engine=engine)
    return engine


def _create(system: bootstrap.Punctual, count: int, start_at: datetime | None = None) -> list[str]:
    ids = []
    for n in range(count):
        command = starts.CreateStart(
            workflow="echo",
            input={"message": f"m{n}"},
            business_request_id=f"fault-{n}",
            start_at=start_at or datetime.now(UTC) - timedelta(seconds=1),
            workload_class="standard",
        )
        outcome = system.mutations.run(None, starts.create(system.services, ALICE, command))
        ids.append(outcome.body["id"])
    return ids


def _update_start(system: bootstrap.Punctual, start_id: str, **values: Any) -> None:
    url = system.store.url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.update(t.starts).where(t.starts.c.id == start_id).values(**values))
    engine.dispose()


def _ciphertext(system: bootstrap.Punctual, start_id: str) -> bytes:
    url = system.store.url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        value = conn.execute(
            sa.select(t.starts.c.input).where(t.starts.c.id == start_id)
        ).scalar_one()
    engine.dispose()
    return bytes(value)


def _start(system: bootstrap.Punctual, start_id: str) -> dict[str, Any]:
    return starts.get(system.services, ALICE, start_id)


# ---- FT-1 -----------------------------------------------------------------------------


def test_an_undecryptable_input_fails_alone_and_the_rest_of_the_page_dispatches(
    system: bootstrap.Punctual,
) -> None:
    damaged, unknown_key, *fine = _create(system, 5)
    sealed = bytearray(_ciphertext(system, damaged))
    sealed[-1] ^= 0x01  # the authentication tag no longer matches
    _update_start(system, damaged, input=bytes(sealed))
    _update_start(system, unknown_key, input_key_id="k-held-elsewhere")

    report = dispatch_due(system.services, "runner-a", 500)

    assert sorted(report.dispatched) == sorted(fine)
    assert report.failed == [damaged]
    assert report.retried == [unknown_key]
    failed = _start(system, damaged)
    assert failed["state"] == "failed"
    assert failed["last_error"]["code"] == "input_undecryptable"
    assert "m0" not in failed["last_error"]["message"]
    retried = _start(system, unknown_key)
    assert retried["state"] == "scheduled"
    assert retried["last_error"]["code"] == "input_key_unknown"
    assert retried["next_attempt_at"] is not None
    with system.store.transaction(readonly=True) as tx:
        findings = tx.findings.find(ALICE.tenant)
    assert [(f.kind, f.subject_id) for f in findings] == [("start_failed", damaged)]


def test_an_unexpected_error_deciding_one_start_is_retried_alone(
    system: bootstrap.Punctual, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad, *fine = _create(system, 3)
    codec = system.services.codec
    real = codec.decrypt

    def decrypt(encrypted: Any, aad: str) -> Any:
        value = real(encrypted, aad)
        if value == {"message": "m0"}:
            raise RuntimeError("a bug that quotes the input: m0")
        return value

    monkeypatch.setattr(codec, "decrypt", decrypt)
    report = dispatch_due(system.services, "runner-a", 500)

    assert sorted(report.dispatched) == sorted(fine)
    assert report.retried == [bad]
    retried = _start(system, bad)
    assert retried["last_error"]["code"] == "dispatch_error"
    assert "m0" not in retried["last_error"]["message"]


# ---- FT-2 -----------------------------------------------------------------------------


def test_a_pass_keeps_its_claims_while_a_slow_engine_outlives_the_lease(
    short_lease: bootstrap.Punctual,
) -> None:
    system = short_lease
    lease = system.services.policy.lease_seconds
    assert lease == SHORT_LEASE_SECONDS
    count = 3 * START_CHUNK
    ids = _create(system, count)
    engine = _hooked(system)
    stolen: list[str] = []
    # A chunk takes well under the lease (slack for a loaded machine); the page does not.
    per_order = lease * 0.6 / START_CHUNK

    def slow(orders: Sequence[RunOrder]) -> None:
        time.sleep(per_order * len(orders))
        now = datetime.now(UTC)
        with system.store.transaction() as tx:
            stolen.extend(c.id for c in tx.starts.claim_due(now, 500, "runner-b", 0))

    engine.on_start = slow
    began = time.monotonic()
    report = dispatch_due(system.services, "runner-a", 500)

    assert time.monotonic() - began > lease, "the pass must outlive one lease to prove this"
    assert stolen == []
    assert sorted(report.dispatched) == sorted(ids)
    assert report.lost == 0


SKEW = timedelta(minutes=10)
"""How far a skewed runner host's clock is off the database's."""


@pytest.fixture
def on_postgresql(
    pg_url: str, tmp_path: Path
) -> Iterator[Callable[[timedelta | None], bootstrap.Punctual]]:
    """Systems sharing one PostgreSQL database, each on its own host clock: the real one
    (``None``, which the database server on this machine shares) or one ``skew`` off it."""
    built: list[bootstrap.Punctual] = []

    def build(skew: timedelta | None) -> bootstrap.Punctual:
        settings = make_settings(pg_url, tmp_path)
        clock = None if skew is None else FakeClock(datetime.now(UTC) + skew)
        system = (
            bootstrap.build(settings) if clock is None else bootstrap.build(settings, clock=clock)
        )
        built.append(system)
        return system

    yield build
    for system in built:
        system.close()


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("claimer_skew", "thief_skew"),
    [(None, SKEW), (-SKEW, None)],
    ids=["thief_clock_ahead", "claimer_clock_behind"],
)
def test_on_postgresql_a_runner_with_a_skewed_clock_cannot_steal_a_live_claim(
    on_postgresql: Callable[[timedelta | None], bootstrap.Punctual],
    claimer_skew: timedelta | None,
    thief_skew: timedelta | None,
) -> None:
    claimer, thief = on_postgresql(claimer_skew), on_postgresql(thief_skew)
    register_demo(claimer)
    enroll(claimer, ALICE)
    live_worker(thief)  # heartbeats on the later of the two clocks are live on both
    [start_id] = _create(claimer, 1, claimer.services.clock.now() - timedelta(seconds=1))
    engine = _hooked(claimer)
    stolen: list[int] = []
    # While the claimer asks the engine, its claim is minutes from running out.
    engine.on_start = lambda orders: stolen.append(
        dispatch_due(thief.services, "runner-thief", 500).claimed
    )

    report = dispatch_due(claimer.services, "runner-claimer", 500)

    assert stolen == [0]
    assert (report.dispatched, report.lost) == ([start_id], 0)


@pytest.mark.postgres
def test_on_postgresql_a_runner_whose_clock_runs_behind_does_not_record_under_an_expired_lease(
    on_postgresql: Callable[[timedelta | None], bootstrap.Punctual],
) -> None:
    honest, behind = on_postgresql(None), on_postgresql(-SKEW)
    register_demo(honest)
    enroll(honest, ALICE)
    live_worker(honest)
    [start_id] = _create(behind, 1, behind.services.clock.now() - timedelta(seconds=1))
    engine = _hooked(behind)

    def lease_runs_out(orders: Sequence[RunOrder]) -> None:
        # By the database's clock; the runner's own clock says its lease has ten minutes left.
        _update_start(behind, start_id, lease_until=sa.func.now() - timedelta(seconds=1))

    engine.on_start = lease_runs_out

    report = dispatch_due(behind.services, "runner-behind", 500)

    assert (report.dispatched, report.lost) == ([], 1)
    assert _start(honest, start_id)["state"] == "dispatching"
    recovered = dispatch_due(honest.services, "runner-honest", 500)
    assert recovered.dispatched == [start_id]
    with honest.store.transaction(readonly=True) as tx:
        runs = tx.runs.find(ALICE.tenant, RunFilter(origin_id=start_id), Seek(10))
    assert len(runs) == 1


# ---- FT-5 -----------------------------------------------------------------------------


def test_an_outage_release_leaves_the_version_so_a_cancel_still_applies(
    system: bootstrap.Punctual,
) -> None:
    [start_id] = _create(system, 1)
    engine = _hooked(system)

    def down(orders: Sequence[RunOrder]) -> None:
        raise EngineUnavailable("connection refused (switched off by the test)")

    engine.on_start = down
    for _ in range(3):
        with pytest.raises(EngineUnavailable):
            dispatch_due(system.services, "runner-a", 500)
    released = _start(system, start_id)
    assert (released["state"], released["version"], released["attempts"]) == ("scheduled", 1, 0)
    outcome = system.mutations.run(
        None, starts.cancel(system.services, ALICE, starts.CancelStart(start_id, 1))
    )
    assert outcome.status == 200
    assert outcome.body["state"] == "canceled"


def _during_the_engine_start(
    system: bootstrap.Punctual, engine: HookedEngine, mutate: Callable[[], Any]
) -> list[Any]:
    """Run ``mutate`` on another thread while dispatch is inside the engine's start (the
    start is claimed, not yet recorded), as an API request would."""
    answers: list[Any] = []

    def hook(orders: Sequence[RunOrder]) -> None:
        def call() -> None:
            try:
                answers.append(mutate())
            except Exception as exc:
                answers.append(exc)

        thread = threading.Thread(target=call)
        thread.start()
        thread.join(10)

    engine.on_start = hook
    return answers


def test_a_cancel_while_dispatching_wins_and_the_dispatch_withdraws_its_run(
    system: bootstrap.Punctual,
) -> None:
    [start_id] = _create(system, 1)
    version = _start(system, start_id)["version"]
    engine = _hooked(system)
    cancel = starts.cancel(system.services, ALICE, starts.CancelStart(start_id, version))
    answers = _during_the_engine_start(system, engine, lambda: system.mutations.run(None, cancel))

    report = dispatch_due(system.services, "runner-a", 500)

    [answer] = answers
    assert not isinstance(answer, Exception), answer
    assert (answer.status, answer.body["state"]) == (200, "canceled")
    assert report.dispatched == []
    assert report.lost == 1
    start = _start(system, start_id)
    assert (start["state"], start["dispatch"]) == ("canceled", None)
    [[run_id]] = engine.started
    assert engine.terminated == [run_id]  # the execution it may have started is withdrawn
    with system.store.transaction(readonly=True) as tx:
        assert tx.runs.get(ALICE.tenant, run_id) is None


def test_a_reschedule_while_dispatching_takes_effect(system: bootstrap.Punctual) -> None:
    [start_id] = _create(system, 1)
    version = _start(system, start_id)["version"]
    engine = _hooked(system)
    later = datetime.now(UTC) + timedelta(hours=1)
    move = starts.reschedule(
        system.services, ALICE, starts.RescheduleStart(start_id, version, later)
    )
    answers = _during_the_engine_start(system, engine, lambda: system.mutations.run(None, move))

    report = dispatch_due(system.services, "runner-a", 500)

    [answer] = answers
    assert not isinstance(answer, Exception), answer
    assert (answer.status, answer.body["state"]) == (200, "scheduled")
    assert report.dispatched == []
    start = _start(system, start_id)
    assert start["state"] == "scheduled"
    assert start["version"] == version + 1
    assert engine.terminated == []  # a later dispatch takes the run over


# ---- overlap-policy occurrences: decided under the schedule's lock, started after it ----


def test_an_overlap_policy_occurrence_is_recorded_before_the_engine_is_asked(
    clocked: tuple[bootstrap.Punctual, FakeClock],
) -> None:
    """The schedule's row lock is never held across an engine call: when the engine is
    asked, the run is already committed (another connection reads it), so a slow engine
    delays neither edits of the schedule nor other runners' decisions."""
    system, clock = clocked
    engine = _hooked(system)
    seen: list[tuple[str | None, str | None]] = []

    def look_from_another_connection(orders: Sequence[RunOrder]) -> None:
        url = system.store.url.replace("postgresql://", "postgresql+psycopg://", 1)
        other = sa.create_engine(url)
        with other.connect() as conn:
            for order in orders:
                run = conn.execute(
                    sa.select(t.runs.c.state).where(t.runs.c.id == order.run_id)
                ).scalar_one_or_none()
                start = conn.execute(
                    sa.select(t.starts.c.state).where(t.starts.c.run_id == order.run_id)
                ).scalar_one_or_none()
                seen.append((run, start))
        other.dispose()

    engine.on_start = look_from_another_connection
    clock_now = clock.now()
    scheduler = Scheduler(system, "acme", "alice", Role.MEMBER)
    schedule = scheduler.schedule_every(
        "echo",
        {"message": "tick"},
        timedelta(seconds=1),
        name="one-at-a-time",
        overlap="skip",
        missed="skip",
        starts_at=clock_now + timedelta(seconds=0.3),
    )
    assert generate(system.services, 10).generated >= 1  # generated ahead of its time
    clock.advance(0.5)  # now it is due
    dispatched = dispatch_due(system.services, "runner-overlap", 10)
    assert len(dispatched.dispatched) == 1, dispatched
    assert seen == [("pending", "dispatched")], seen
    runs = system.services.store
    with runs.transaction(readonly=True) as tx:
        found = tx.runs.find("acme", RunFilter(), Seek(10))
    assert [run.origin.get("schedule_id") for _, run in found] == [schedule["id"]]


def test_an_error_deciding_one_overlap_policy_occurrence_leaves_the_others(
    clocked: tuple[bootstrap.Punctual, FakeClock], monkeypatch: pytest.MonkeyPatch
) -> None:
    """FT-1 for the serialized path: one occurrence whose overlap decision raises is left
    to its lease; the others of the page dispatch, and the pass reports them."""
    from punctual.usecases.scheduled import dispatch

    system, clock = clocked
    scheduler = Scheduler(system, "acme", "alice", Role.MEMBER)
    soon = clock.now() + timedelta(seconds=0.3)
    for name in ("first", "second", "third"):
        scheduler.schedule_every(
            "echo",
            {"message": name},
            timedelta(seconds=1),
            name=name,
            overlap="skip",
            missed="skip",
            starts_at=soon,
        )
    assert generate(system.services, 10).generated >= 3  # ahead of their time
    clock.advance(0.5)  # the first of each is due
    real = dispatch.occurrence_overlap_decision
    calls = {"n": 0}

    def first_one_raises(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug deciding one occurrence")
        return real(*args, **kwargs)

    monkeypatch.setattr(dispatch, "occurrence_overlap_decision", first_one_raises)
    report = dispatch_due(system.services, "runner-overlap", 10)
    assert (report.claimed, len(report.dispatched)) == (3, 2), report
