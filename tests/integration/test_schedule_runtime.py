"""Recurring schedules at runtime on both stores, with time driven by hand (RS-3..RS-7, CR-1, CR-3).

The generation pass (``generation.generate``) and the dispatch pass (``dispatch_due``)
are called directly, as the runner's loop calls them, on a system built with a
``FakeClock``; a live worker record makes the demo versions count as loaded, and runs
are ended through the worker's own use cases (``claim_runs`` then ``finish_runs``),
followed by the runner's follow-through pass, which records ``last_status`` (CR-4).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.schedules import SqlSchedules
from punctual.domain.permissions import Role
from punctual.domain.runs import DefinitionState, RunState
from punctual.domain.timeutil import to_rfc3339
from punctual.embedded import Scheduler
from punctual.errors import InvalidRequest, PunctualError
from punctual.ports.records import CursorMove, WorkerRecord
from punctual.usecases.recurring import schedules
from punctual.usecases.recurring.generation import GenerationReport, generate
from punctual.usecases.recurring.schedule_fields import decode_update
from punctual.usecases.running import execution
from punctual.usecases.running.definitions import DeclaredDefinition, register_worker, set_lifecycle
from punctual.usecases.running.followthrough import follow_through
from punctual.usecases.scheduled.dispatch import DispatchReport, dispatch_due
from punctual.worker.definitions import declared_definitions
from punctual.workflows import load_app
from tests.conftest import FakeClock, make_settings
from tests.support.api import in_process, member_api

WORKER = "wrk_live_test"
MINUTE = 60.0
TICK = {"message": "tick"}
ECHO_V2_INCOMPATIBLE = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}
ECHO_V2_COMPATIBLE = {
    "type": "object",
    "properties": {"message": {"type": "string"}},
    "required": ["message"],
    "additionalProperties": False,
}


@dataclass
class Occurrence:
    """One row of the starts table that belongs to a schedule, as stored."""

    id: str
    occurrence_at: datetime
    state: str
    reason: str | None
    revision: int | None
    run_id: str
    due_at: datetime
    range_last: datetime | None
    range_count: int | None
    attempts: int
    last_error: Any


class Rig:
    """A punctual on a fake clock, alice's embedded handle, and a worker record that can
    be kept alive (heartbeat at every clock move) or left dead."""

    def __init__(self, system: bootstrap.Punctual, clock: FakeClock, live: bool) -> None:
        self.system = system
        self.clock = clock
        self.live = live
        self.loaded: list[tuple[str, str, str]] = []
        self.workers = [WORKER]
        app = load_app("punctual.demo:app")
        self.declare(
            declared_definitions(app), [(d.name, d.version, d.artifact) for d in app.definitions]
        )
        self.alice = Scheduler(system, "acme", "alice", Role.MEMBER)
        self.admin = Scheduler(system, "acme", "root", Role.ADMIN)

    @property
    def services(self) -> Any:
        return self.system.services

    @property
    def now(self) -> datetime:
        return self.clock.now()

    def declare(
        self, declared: list[DeclaredDefinition], loaded: list[tuple[str, str, str]]
    ) -> None:
        """Register definitions as a worker does; ``loaded`` joins what the worker reports."""
        self.loaded += loaded
        now = self.now
        record = WorkerRecord(
            id=WORKER,
            engine="local",
            host="test",
            task_queues=["interactive", "standard", "batch"],
            loaded=list(self.loaded),
            slots=4,
            started_at=now,
            heartbeat_at=now,
            stopped_at=None if self.live else now,
        )
        register_worker(self.services, record, declared)

    def add_worker(
        self, worker_id: str, declared: list[DeclaredDefinition], loaded: list[tuple[str, str, str]]
    ) -> None:
        """Another live worker, with only ``loaded``."""
        now = self.now
        record = WorkerRecord(worker_id, "local", "test", ["standard"], loaded, 1, now, now, None)
        register_worker(self.services, record, declared)
        self.workers.append(worker_id)

    def advance(self, seconds: float) -> datetime:
        """Move the clock; live workers heartbeat (a stopped one stays stopped)."""
        now = self.clock.advance(seconds)
        with self.system.store.transaction() as tx:
            for worker_id in self.workers:
                tx.definitions.heartbeat_worker(worker_id, now)
        return now

    def generate(self, budget: int = 100) -> GenerationReport:
        return generate(self.services, budget)

    def dispatch(self) -> DispatchReport:
        return dispatch_due(self.services, "runner-test", 100)

    def release_buffered(self) -> int:
        with self.system.store.transaction() as tx:
            return tx.starts.release_buffered(self.now)

    def every(self, name: str, seconds: float = MINUTE, **options: Any) -> dict[str, Any]:
        options.setdefault("overlap", "allow_all")
        options.setdefault("missed", "catch_up")
        payload = options.pop("input", TICK)
        workflow = options.pop("workflow", "echo")
        return self.alice.schedule_every(
            workflow, payload, timedelta(seconds=seconds), name=name, **options
        )

    def get(self, schedule_id: str) -> dict[str, Any]:
        return self.admin.get_schedule(schedule_id)

    def row(self, schedule_id: str) -> dict[str, Any]:
        with self.system.store.engine.connect() as conn:
            found = conn.execute(
                sa.select(t.schedules).where(t.schedules.c.id == schedule_id)
            ).mappings()
            return dict(found.one())

    def occurrences(self, schedule_id: str) -> list[Occurrence]:
        s = t.starts.c
        with self.system.store.engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    s.id,
                    s.occurrence_at,
                    s.state,
                    s.reason,
                    s.revision,
                    s.run_id,
                    s.due_at,
                    s.range_last,
                    s.range_count,
                    s.attempts,
                    s.last_error,
                )
                .where(s.schedule_id == schedule_id)
                .order_by(s.occurrence_at)
            ).all()
        return [Occurrence(*row) for row in rows]

    def runs_of(self, schedule_id: str) -> list[dict[str, Any]]:
        r = t.runs.c
        with self.system.store.engine.connect() as conn:
            rows = conn.execute(
                sa.select(r.id, r.origin_id, r.state, r.definition_version, r.started_by, r.origin)
                .where(r.schedule_id == schedule_id)
                .order_by(r.seq)
            ).mappings()
            return [dict(row) for row in rows]

    def finish_runs(self, state: RunState = RunState.COMPLETED) -> dict[str, Any]:
        """Claim every pending run as the live worker and end it, then follow through as
        the runner's pass does (it writes ``last_status``, CR-4); run id -> its input."""
        loaded = [(name, version) for name, version, _ in self.loaded]
        claimed = execution.claim_runs(self.services, WORKER, ["standard"], loaded, 100)
        error = None if state is RunState.COMPLETED else {"message": "ended by the test"}
        finished = [execution.Finished(work.run, state, {}, error) for work in claimed]
        assert all(execution.finish_runs(self.services, WORKER, finished))
        follow_through(self.services)
        return {work.run.id: work.payload for work in claimed}

    def edit(self, schedule_id: str, version: int, who: Scheduler, **changes: Any) -> Any:
        mutation = schedules.update(
            self.services, who.principal, decode_update(schedule_id, version, changes)
        )
        return self.system.mutations.run(None, mutation).body

    def until_caught_up(self, budget: int = 100, passes: int = 100) -> list[int]:
        """Generation passes at a fixed time until one generates nothing; per-pass counts."""
        counts = []
        for _ in range(passes):
            counts.append(self.generate(budget).generated)
            if counts[-1] == 0:
                return counts
        raise AssertionError(f"generation did not converge: {counts}")


@pytest.fixture
def build_rig(database_url: str, tmp_path: Path, clock: FakeClock) -> Iterator[Any]:
    systems: list[bootstrap.Punctual] = []

    def build(live: bool = True, **overrides: Any) -> Rig:
        settings = make_settings(database_url, tmp_path, **overrides)
        system = bootstrap.build(settings, clock=clock)
        systems.append(system)
        return Rig(system, clock, live)

    yield build
    for system in systems:
        system.close()


@pytest.fixture
def rig(build_rig: Any) -> Rig:
    built: Rig = build_rig()
    return built


def seconds_after(base: datetime, *offsets: float) -> list[datetime]:
    return [base + timedelta(seconds=s) for s in offsets]


def assert_contiguous(occurrence_ats: list[datetime], first: datetime, step: float) -> None:
    assert len(set(occurrence_ats)) == len(occurrence_ats), "an occurrence_at generated twice"
    expected = [first + timedelta(seconds=step * i) for i in range(len(occurrence_ats))]
    assert sorted(occurrence_ats) == expected


# --------------------------------------------------------------------------- (1) downtime


def test_catch_up_after_downtime_is_bounded_per_pass_and_converges(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("catch-up", max_catch_up=3)["id"]
    rig.advance(20 * MINUTE + 5)  # 20 fires happened while no runner was up

    counts: list[int] = []
    seen: list[datetime] = []
    for _ in range(20):
        before = {o.id for o in rig.occurrences(sid)}
        report = rig.generate()
        new = [o for o in rig.occurrences(sid) if o.id not in before]
        assert report.generated == len(new)
        assert len(new) <= 3, "max_catch_up bounds every pass"
        seen += [o.occurrence_at for o in new]
        counts.append(len(new))
        if not new:
            break
    # 19 fires are late (3 per pass); the 20th is within the grace and comes with the last.
    assert counts == [3, 3, 3, 3, 3, 3, 2, 0], counts
    assert_contiguous(seen, t0 + timedelta(minutes=1), MINUTE)
    assert len(seen) == 20
    occurrences = rig.occurrences(sid)
    assert all(o.state == "scheduled" and o.reason is None for o in occurrences)
    assert all(o.due_at >= o.occurrence_at for o in occurrences)
    # Late occurrences are due now, not in the past they were meant for; none is skipped.
    assert all(o.due_at == rig.now for o in occurrences[:-1])
    row = rig.row(sid)
    assert row["cursor"] == t0 + timedelta(minutes=20)
    assert row["next_fire_at"] == t0 + timedelta(minutes=21)
    assert rig.get(sid)["version"] == 1

    dispatched = rig.dispatch()
    assert len(dispatched.dispatched) == 20
    assert len(rig.runs_of(sid)) == 20


def test_missed_skip_after_downtime_records_one_range_and_moves_on(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("skipper", missed="skip")["id"]
    rig.advance(20 * MINUTE + 5)

    report = rig.generate()
    assert report.generated == 1
    assert report.missed == 19
    occurrences = rig.occurrences(sid)
    skipped = [o for o in occurrences if o.state == "skipped"]
    assert len(skipped) == 1, "one item for the whole downtime, not one row each"
    (missed,) = skipped
    assert missed.reason == "missed"
    assert (missed.occurrence_at, missed.range_last, missed.range_count) == (
        t0 + timedelta(minutes=1),
        t0 + timedelta(minutes=19),
        19,
    )
    fired = [o for o in occurrences if o.state != "skipped"]
    assert [o.occurrence_at for o in fired] == [t0 + timedelta(minutes=20)]
    row = rig.row(sid)
    assert row["cursor"] == t0 + timedelta(minutes=20)
    assert row["next_fire_at"] == t0 + timedelta(minutes=21)
    assert row["next_fire_at"] > rig.now, "the cursor moved to the next future time"

    assert rig.generate().generated == 0
    assert len(rig.occurrences(sid)) == 2
    listed = rig.alice.list_occurrences(sid, state="skipped")["items"]
    assert [item["range"] for item in listed] == [
        {
            "first": to_rfc3339(t0 + timedelta(minutes=1)),
            "last": to_rfc3339(t0 + timedelta(minutes=19)),
            "count": 19,
        }
    ]


def test_catch_up_window_bounds_how_far_back_catch_up_reaches(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("windowed", max_catch_up=3, catch_up_window=300)["id"]
    assert rig.get(sid)["catch_up_window"] == 300
    rig.advance(20 * MINUTE + 5)
    counts = rig.until_caught_up()
    assert counts == [3, 2, 0], counts
    occurrences = rig.occurrences(sid)
    missed = [o for o in occurrences if o.reason == "missed"]
    assert len(missed) == 1
    # Older than 5 minutes: one range; the 5 fires inside the window are caught up.
    assert (missed[0].occurrence_at, missed[0].range_last, missed[0].range_count) == (
        t0 + timedelta(minutes=1),
        t0 + timedelta(minutes=15),
        15,
    )
    fired = [o.occurrence_at for o in occurrences if o.state == "scheduled"]
    assert fired == [t0 + timedelta(minutes=m) for m in range(16, 21)]
    assert rig.row(sid)["next_fire_at"] == t0 + timedelta(minutes=21), "a window never stops it"


def test_a_dst_skip_never_takes_the_place_of_a_real_fire(rig: Rig) -> None:
    """``0 2,3 * * *`` with ``dst_gap: skip`` in Berlin on 28 March 2027: 02:00 does not
    exist (recorded as skipped by DST at the end of the gap, 01:00Z) and 03:00+02:00, the
    same instant, fires (docs/dst-policy.md). When a catch-up pass stops at its cap right
    between the skip and the fire, the skip row is inserted first and the fire of the
    next pass collides with it on (schedule_id, occurrence_at): the real fire is lost."""
    rig.advance((datetime(2027, 3, 26, 12, tzinfo=UTC) - rig.now).total_seconds())
    sid = rig.alice.schedule_cron(
        "echo",
        TICK,
        "0 2,3 * * *",
        name="two-and-three",
        overlap="allow_all",
        missed="catch_up",
        time_zone="Europe/Berlin",
        dst_gap="skip",
        max_catch_up=2,
    )["id"]
    rig.advance(3 * 24 * 3600)  # to 29 March 12:00Z: six wall times named, one did not exist
    rig.until_caught_up()
    fired = {o.occurrence_at: o for o in rig.occurrences(sid) if o.state == "scheduled"}
    expected = [
        datetime(2027, 3, 27, 1, tzinfo=UTC),
        datetime(2027, 3, 27, 2, tzinfo=UTC),
        datetime(2027, 3, 28, 1, tzinfo=UTC),  # 03:00+02:00, nominal 03:00
        datetime(2027, 3, 29, 0, tzinfo=UTC),
        datetime(2027, 3, 29, 1, tzinfo=UTC),
    ]
    seen = [f"{o.occurrence_at:%d %H:%M}Z {o.state} {o.reason}" for o in rig.occurrences(sid)]
    assert sorted(fired) == expected, seen


# --------------------------------------------------------------------------- (2) many schedules


def test_many_schedules_far_behind_respect_the_batch_budget(rig: Rig) -> None:
    t0 = rig.now
    count = 300
    ids = [rig.every(f"bulk-{i:03d}", max_catch_up=2)["id"] for i in range(count)]
    rig.advance(5 * MINUTE + 5)  # each schedule: 4 late fires and 1 within the grace

    def total() -> int:
        with rig.system.store.engine.connect() as conn:
            query = sa.select(sa.func.count()).select_from(t.starts)
            return int(conn.execute(query.where(t.starts.c.schedule_id.is_not(None))).scalar_one())

    per_pass = []
    for _ in range(60):
        before = total()
        report = rig.generate(budget=100)
        added = total() - before
        assert report.generated <= 100 and added <= 100, (report, added)
        assert added == report.generated
        per_pass.append(added)
        if added == 0:
            break
    assert per_pass[-1] == 0, f"catch-up did not converge: {per_pass}"
    assert sum(per_pass) == count * 5
    assert len(per_pass) <= (count * 5) // 100 + 10, per_pass

    with rig.system.store.engine.connect() as conn:
        s = t.starts.c
        rows = conn.execute(
            sa.select(s.schedule_id, s.occurrence_at).where(s.schedule_id.is_not(None))
        ).all()
    by_schedule: dict[str, list[datetime]] = {sid: [] for sid in ids}
    for schedule_id, at in rows:
        by_schedule[schedule_id].append(at)
    for sid in ids:
        assert_contiguous(by_schedule[sid], t0 + timedelta(minutes=1), MINUTE)
        assert len(by_schedule[sid]) == 5


# --------------------------------------------------------------------------- (3) overlap


def test_overlap_skip_records_a_skipped_occurrence_while_the_run_is_unfinished(rig: Rig) -> None:
    sid = rig.every("no-overlap", overlap="skip")["id"]
    rig.advance(MINUTE)
    rig.generate()
    assert len(rig.dispatch().dispatched) == 1

    rig.advance(MINUTE)
    rig.generate()
    report = rig.dispatch()
    assert report.dispatched == [] and len(report.skipped) == 1
    first, second = rig.occurrences(sid)
    assert (first.state, second.state, second.reason) == ("dispatched", "skipped", "overlap")
    assert len(rig.runs_of(sid)) == 1

    rig.finish_runs()
    rig.advance(MINUTE)
    rig.generate()
    assert len(rig.dispatch().dispatched) == 1, "a finished run frees the schedule"
    assert [o.state for o in rig.occurrences(sid)] == ["dispatched", "skipped", "dispatched"]


def test_a_run_is_created_no_earlier_than_the_end_of_the_run_it_waited_for(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RS-3 as the history shows it: the next run of a ``skip`` schedule is stamped after
    the run it waited for ended, even when that run ends while the dispatch waits for the
    schedule's lock (another transaction held it). Found by the chaos harness: a run
    created 2 ms before its predecessor's end, docs/reliability.md."""
    sid = rig.every("no-overlap", overlap="skip")["id"]
    rig.advance(MINUTE)
    rig.generate()
    assert len(rig.dispatch().dispatched) == 1
    rig.advance(MINUTE)
    rig.generate()
    locking = SqlSchedules.lock_for_dispatch

    def lock_while_the_previous_run_ends(self: SqlSchedules, schedule_id: str) -> Any:
        locked = locking(self, schedule_id)
        # The wait for the lock: meanwhile the previous run ended and its end committed.
        ended = rig.clock.advance(0.5)
        self._conn.execute(
            sa.update(t.runs)
            .where(t.runs.c.schedule_id == schedule_id)
            .values(state=RunState.COMPLETED.value, ended_at=ended)
        )
        return locked

    monkeypatch.setattr(SqlSchedules, "lock_for_dispatch", lock_while_the_previous_run_ends)
    assert len(rig.dispatch().dispatched) == 1, "the ended run freed the schedule"
    with rig.system.store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(t.runs.c.created_at, t.runs.c.ended_at)
            .where(t.runs.c.schedule_id == sid)
            .order_by(t.runs.c.seq)
        ).all()
    (_, previous_end), (created, _) = rows
    assert created >= previous_end, (
        f"created {created}, before the end it waited for {previous_end}"
    )


def test_overlap_buffer_one_waits_for_the_previous_run(rig: Rig) -> None:
    sid = rig.every("buffered", overlap="buffer_one")["id"]
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()
    for _ in range(2):
        rig.advance(MINUTE)
        rig.generate()
        rig.dispatch()
    first, second, third = rig.occurrences(sid)
    assert first.state == "dispatched"
    assert second.state == "buffered" and second.reason is None
    assert (third.state, third.reason) == ("skipped", "overlap"), "at most one waits"
    assert rig.release_buffered() == 0, "the previous run is still unfinished"

    rig.finish_runs()
    rig.advance(1)
    assert rig.release_buffered() == 1
    report = rig.dispatch()
    assert report.dispatched == [second.id]
    states = [o.state for o in rig.occurrences(sid)]
    assert states == ["dispatched", "dispatched", "skipped"]
    runs = rig.runs_of(sid)
    assert [r["origin_id"] for r in runs] == [first.id, second.id]
    assert runs[1]["id"] == second.run_id


def test_overlap_allow_all_starts_every_occurrence(rig: Rig) -> None:
    sid = rig.every("overlapping", overlap="allow_all")["id"]
    for _ in range(3):
        rig.advance(MINUTE)
        rig.generate()
        rig.dispatch()
    assert [o.state for o in rig.occurrences(sid)] == ["dispatched"] * 3
    runs = rig.runs_of(sid)
    assert len(runs) == 3 and all(r["state"] == "pending" for r in runs)


def test_overlap_is_decided_per_occurrence_within_one_dispatch_pass(rig: Rig) -> None:
    """Catch-up makes several occurrences due at once; overlap still holds between them."""
    sid = rig.every("burst", overlap="skip", max_catch_up=5)["id"]
    rig.advance(5 * MINUTE + 5)
    rig.until_caught_up()
    report = rig.dispatch()
    assert len(report.dispatched) == 1 and len(report.skipped) == 4
    assert len(rig.runs_of(sid)) == 1


# --------------------------------------------------------------------------- (4) pause, resume


def test_pause_keeps_the_cursor_and_queued_occurrences_still_run(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("pausable", missed="skip")["id"]
    rig.advance(MINUTE - 1)
    rig.generate()  # the fire at t0+60 is within the lookahead: generated ahead of time
    (queued,) = rig.occurrences(sid)
    cursor = rig.row(sid)["cursor"]
    assert cursor == t0 + timedelta(minutes=1)

    paused = rig.alice.pause(sid, 1)
    assert (paused["enabled"], paused["version"], paused["next_fire_times"]) == (False, 2, [])
    assert rig.row(sid)["cursor"] == cursor, "pause keeps the cursor"

    rig.advance(1)
    assert rig.dispatch().dispatched == [queued.id], "a queued occurrence still runs"

    rig.advance(5 * MINUTE + 5)
    assert rig.generate().generated == 0, "a paused schedule generates nothing"
    assert len(rig.occurrences(sid)) == 1
    assert rig.row(sid)["cursor"] == cursor

    resumed = rig.alice.resume(sid, 2)
    assert (resumed["enabled"], resumed["version"]) == (True, 3)
    rig.generate()
    # Resume applies missed=skip: one range for the paused time, then the next fire.
    occurrences = rig.occurrences(sid)
    missed = [o for o in occurrences if o.reason == "missed"]
    assert len(missed) == 1
    assert (missed[0].occurrence_at, missed[0].range_last, missed[0].range_count) == (
        t0 + timedelta(minutes=2),
        t0 + timedelta(minutes=5),
        4,
    )
    assert [o.occurrence_at for o in occurrences if o.state == "scheduled"] == [
        t0 + timedelta(minutes=6)
    ]
    assert rig.get(sid)["version"] == 3


def test_resume_with_catch_up_catches_up_within_its_bounds(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("resumable", max_catch_up=2)["id"]
    rig.alice.pause(sid, 1)
    rig.advance(6 * MINUTE + 5)
    assert rig.generate().generated == 0
    rig.alice.resume(sid, 2)
    assert rig.generate().generated == 2
    assert [o.occurrence_at for o in rig.occurrences(sid)] == seconds_after(t0, 60, 120)
    rig.until_caught_up()
    assert_contiguous(
        [o.occurrence_at for o in rig.occurrences(sid)], t0 + timedelta(minutes=1), MINUTE
    )
    assert len(rig.occurrences(sid)) == 6


# --------------------------------------------------------------------------- (5) edits


def test_a_spec_edit_neither_reruns_nor_duplicates_nor_silently_drops(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("editable")["id"]
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()
    (first,) = rig.occurrences(sid)
    assert first.revision == 1

    rig.advance(3 * MINUTE)  # t0+4min: fires at +2, +3, +4 min not reached by any pass
    edit_time = rig.now
    edited = rig.edit(sid, 1, rig.alice, spec={"interval_ms": 120_000})
    assert (edited["version"], edited["revision"]) == (2, 2)
    row = rig.row(sid)
    assert row["cursor"] == max(first.occurrence_at, edit_time)

    occurrences = rig.occurrences(sid)
    dropped = [o for o in occurrences if o.reason == "schedule_edited"]
    assert len(dropped) == 1, occurrences
    assert dropped[0].state == "skipped"
    assert (dropped[0].occurrence_at, dropped[0].range_last, dropped[0].range_count) == (
        t0 + timedelta(minutes=2),
        t0 + timedelta(minutes=4),
        3,
    )

    rig.advance(2 * MINUTE)  # the new spec's first fire: edit time + 120 s
    rig.generate()
    rig.dispatch()
    occurrences = rig.occurrences(sid)
    ats = [o.occurrence_at for o in occurrences]
    assert len(set(ats)) == len(ats)
    new = [o for o in occurrences if o.occurrence_at > edit_time]
    assert [(o.occurrence_at, o.revision, o.state) for o in new] == [
        (edit_time + timedelta(minutes=2), 2, "dispatched")
    ]
    kept = next(o for o in occurrences if o.id == first.id)
    assert (kept.revision, kept.state, kept.run_id) == (1, "dispatched", first.run_id)
    runs = rig.runs_of(sid)
    assert [r["origin_id"] for r in runs] == [first.id, new[0].id], "nothing re-ran"


def test_generated_occurrences_keep_the_snapshot_they_were_made_with(rig: Rig) -> None:
    sid = rig.every("snapshot")["id"]
    rig.advance(MINUTE - 1)
    rig.generate()  # generated ahead of time with the first input
    (queued,) = rig.occurrences(sid)
    edited = rig.edit(sid, 1, rig.admin, input={"message": "second"})
    assert (edited["revision"], edited["created_by"]) == (2, "alice")
    rig.advance(1)
    rig.dispatch()
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()
    first, second = rig.occurrences(sid)
    assert (first.id, first.revision, second.revision) == (queued.id, 1, 2)
    payloads = rig.finish_runs()
    assert payloads == {first.run_id: TICK, second.run_id: {"message": "second"}}


# --------------------------------------------------------------------------- (6) bookkeeping


def test_runner_bookkeeping_never_changes_the_version(rig: Rig) -> None:
    sid = rig.every("bookkept")["id"]
    before = rig.get(sid)
    assert (before["version"], before["last_fired_at"], before["last_run_id"]) == (1, None, None)

    rig.advance(MINUTE)
    rig.generate()
    assert rig.get(sid)["version"] == 1
    rig.dispatch()
    fired = rig.get(sid)
    (occurrence,) = rig.occurrences(sid)
    assert fired["version"] == 1
    assert fired["last_fired_at"] == to_rfc3339(rig.now)
    assert fired["last_run_id"] == occurrence.run_id
    assert fired["last_status"] is not None

    rig.finish_runs()
    done = rig.get(sid)
    assert done["version"] == 1
    assert done["last_status"] == "completed"
    assert done["updated_at"] == before["updated_at"], "bookkeeping is not a user update"

    paused = rig.alice.pause(sid, 1)
    assert paused["version"] == 2, "a user mutation does change it"


def test_last_run_is_the_latest_occurrence_dispatched_in_a_pass(rig: Rig) -> None:
    behind = rig.every("behind", 10.0)["id"]
    other = rig.every("other", 30.0)["id"]
    rig.advance(35.0)
    rig.generate()
    report = rig.dispatch()

    assert len(report.dispatched) == 4, "three of `behind` and one of `other` in one page"
    for sid in (behind, other):
        latest = [o for o in rig.occurrences(sid) if o.state == "dispatched"][-1]
        schedule = rig.get(sid)
        assert (schedule["last_run_id"], schedule["last_status"]) == (latest.run_id, "fired")
        assert schedule["last_fired_at"] == to_rfc3339(rig.now)
        assert schedule["version"] == 1


# --------------------------------------------------------------------------- (7) auto-disable


def activate_echo_v2(rig: Rig, schema: dict[str, Any]) -> None:
    declared = DeclaredDefinition("echo", "2", "echo-v2-artifact", schema, 60.0)
    rig.declare([declared], [("echo", "2", "echo-v2-artifact")])
    set_lifecycle(rig.services, "echo", "2", DefinitionState.ACTIVE)


def assert_auto_disabled(rig: Rig, sid: str, version: int) -> str:
    schedule = rig.get(sid)
    assert schedule["enabled"] is False
    status = schedule["last_status"]
    assert isinstance(status, str) and status.startswith("Auto-disabled: "), status
    assert len(status) <= 300
    assert schedule["version"] == version, "auto-disable is a versioned change"
    assert schedule["next_fire_times"] == []
    return status


def test_input_rejected_at_fire_auto_disables_the_schedule(rig: Rig) -> None:
    sid = rig.every("rejected")["id"]
    activate_echo_v2(rig, ECHO_V2_INCOMPATIBLE)
    rig.advance(MINUTE)
    rig.generate()
    report = rig.dispatch()
    assert len(report.failed) == 1
    (occurrence,) = rig.occurrences(sid)
    assert occurrence.state == "failed"
    assert occurrence.last_error["code"] == "input_rejected"
    status = assert_auto_disabled(rig, sid, version=2)
    assert "input" in status
    assert rig.runs_of(sid) == []

    rig.advance(10 * MINUTE)
    assert rig.generate().generated == 0, "a disabled schedule stops firing"
    # A human re-enables after fixing the cause (here: the old version back).
    set_lifecycle(rig.services, "echo", "1", DefinitionState.ACTIVE)
    resumed = rig.alice.resume(sid, 2)
    assert resumed["enabled"] is True


def test_no_active_version_at_fire_auto_disables_the_schedule(rig: Rig) -> None:
    sid = rig.every("inactive")["id"]
    set_lifecycle(rig.services, "echo", "1", DefinitionState.DEPRECATED)
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()
    (occurrence,) = rig.occurrences(sid)
    assert (occurrence.state, occurrence.last_error["code"]) == ("failed", "workflow_inactive")
    assert_auto_disabled(rig, sid, version=2)


def test_a_very_long_reason_is_cut_to_300_characters(rig: Rig) -> None:
    sid = rig.every("long-reason")["id"]
    schema = {
        "type": "object",
        "properties": {f"field_{i:03d}_with_a_long_name": {"type": "string"} for i in range(40)},
        "required": [f"field_{i:03d}_with_a_long_name" for i in range(40)],
    }
    activate_echo_v2(rig, schema)
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()
    status = assert_auto_disabled(rig, sid, version=2)
    assert len(status) == 300


def test_a_removed_workload_class_auto_disables_at_fire(rig: Rig, build_rig: Any) -> None:
    sid = rig.every("batchy", workload_class="batch")["id"]
    narrowed: Rig = build_rig(
        live=True, tenant_defaults={"allowed_workload_classes": ["interactive", "standard"]}
    )
    narrowed.advance(MINUTE)
    narrowed.generate()
    report = narrowed.dispatch()
    assert len(report.failed) == 1
    (occurrence,) = narrowed.occurrences(sid)
    assert occurrence.last_error["code"] == "workload_class_not_allowed"
    assert_auto_disabled(narrowed, sid, version=2)


def test_removing_the_creator_auto_disables_their_schedules(rig: Rig) -> None:
    mine = [rig.every(f"alice-{i}")["id"] for i in range(2)]
    paused = rig.every("alice-paused", enabled=False)["id"]
    bobs = Scheduler(rig.system, "acme", "bob", Role.MEMBER)
    theirs = bobs.schedule_every(
        "echo", TICK, timedelta(minutes=1), name="bob-1", overlap="skip", missed="skip"
    )["id"]
    with in_process(rig.system) as client:
        admin = member_api(rig.system, client, "acme", "root", Role.ADMIN)
        response = admin.delete("/members/alice")
        assert response.status_code == 204, response.text
    for sid in mine:
        status = assert_auto_disabled(rig, sid, version=2)
        assert "alice" in status
    assert rig.get(paused)["enabled"] is False
    assert bobs.get_schedule(theirs)["enabled"] is True
    rig.advance(MINUTE)
    rig.generate()
    assert all(rig.occurrences(sid) == [] for sid in mine)
    assert len(rig.occurrences(theirs)) == 1


def test_a_removed_creators_generated_occurrence_and_start_do_not_run(rig: Rig) -> None:
    """CR-3 at fire time: what a removed member created before leaving (an occurrence already
    generated, a one-off start) never runs under their identity."""
    sid = rig.every("generated-before-leaving")["id"]
    rig.advance(MINUTE)
    assert rig.generate().generated == 1
    start = rig.alice.schedule_at(
        "echo", TICK, rig.now - timedelta(seconds=1), business_request_id="left-behind"
    )
    with rig.system.store.transaction() as tx:
        tx.identity.remove_member("acme", "alice")  # as DELETE /members does, minus auto-disable
    report = rig.dispatch()
    assert report.dispatched == []
    assert sorted(report.failed) == sorted([rig.occurrences(sid)[0].id, start["id"]])
    (occurrence,) = rig.occurrences(sid)
    assert (occurrence.state, occurrence.last_error["code"]) == (
        "failed",
        "creator_access_revoked",
    )
    assert rig.admin.get_start(start["id"])["last_error"]["code"] == "creator_access_revoked"
    status = assert_auto_disabled(rig, sid, version=2)
    assert "alice" in status
    assert rig.runs_of(sid) == []


def test_a_creator_downgraded_to_viewer_auto_disables_at_fire(rig: Rig) -> None:
    sid = rig.every("downgraded")["id"]
    with rig.system.store.transaction() as tx:
        tx.identity.upsert_member("acme", "alice", Role.VIEWER, rig.now)
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()
    (occurrence,) = rig.occurrences(sid)
    assert occurrence.last_error["code"] == "creator_access_revoked"
    assert_auto_disabled(rig, sid, version=2)


def test_a_transient_failure_never_disables(build_rig: Any) -> None:
    rig: Rig = build_rig(live=False)  # definitions registered, no live worker has them
    t0 = rig.now
    sid = rig.every("patient")["id"]
    rig.advance(MINUTE)
    rig.generate()
    for attempt in range(1, 13):
        report = rig.dispatch()
        assert len(report.retried) + len(report.failed) == 1, (attempt, report)
        (occurrence,) = rig.occurrences(sid)
        assert occurrence.attempts == attempt
        # RS-5: the logical time stays; only the attempt's due time moves with backoff.
        assert occurrence.occurrence_at == t0 + timedelta(minutes=1)
        assert occurrence.due_at > rig.now or occurrence.state == "failed"
        assert occurrence.last_error["code"] == "version_not_loaded"
        schedule = rig.get(sid)
        assert schedule["enabled"] is True, f"disabled after attempt {attempt}"
        assert not (schedule["last_status"] or "").startswith("Auto-disabled")
        rig.clock.advance(301)  # past the longest backoff; the worker stays dead
    (occurrence,) = rig.occurrences(sid)
    assert occurrence.state == "failed", "retries end, the schedule goes on"
    schedule = rig.get(sid)
    assert (schedule["enabled"], schedule["version"]) == (True, 1)
    assert rig.generate().generated > 0


# --------------------------------------------------------------------------- (8) version policy


def test_pinned_runs_the_version_active_at_creation(rig: Rig) -> None:
    pinned = rig.every("pinned", version_policy="pinned")["id"]
    floating = rig.every("floating")["id"]
    activate_echo_v2(rig, ECHO_V2_COMPATIBLE)
    rig.advance(MINUTE)
    rig.generate()
    assert len(rig.dispatch().dispatched) == 2
    assert [r["definition_version"] for r in rig.runs_of(pinned)] == ["1"]
    assert [r["definition_version"] for r in rig.runs_of(floating)] == ["2"]
    assert rig.get(pinned)["version_policy"] == "pinned"


def test_pinned_waits_for_a_worker_with_its_version(build_rig: Any) -> None:
    rig: Rig = build_rig(live=False)
    sid = rig.every("pinned-unloaded", version_policy="pinned")["id"]
    declared = DeclaredDefinition("echo", "2", "echo-v2-artifact", ECHO_V2_COMPATIBLE, 60.0)
    rig.add_worker("wrk_v2_only", [declared], [("echo", "2", "echo-v2-artifact")])
    set_lifecycle(rig.services, "echo", "2", DefinitionState.ACTIVE)
    rig.advance(MINUTE)
    rig.generate()
    report = rig.dispatch()
    assert len(report.retried) == 1
    (occurrence,) = rig.occurrences(sid)
    assert (occurrence.state, occurrence.last_error["code"]) == ("scheduled", "version_not_loaded")
    assert rig.get(sid)["enabled"] is True


# --------------------------------------------------------------------------- (9) identity


def test_runs_carry_the_occurrence_origin_and_the_creator(rig: Rig) -> None:
    sid = rig.every("identity")["id"]
    rig.alice.pause(sid, 1)
    rig.admin.resume(sid, 2)  # someone else operating it does not change who runs it
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()
    (occurrence,) = rig.occurrences(sid)
    run = rig.admin.get_run(occurrence.run_id)
    assert run["origin"] == {
        "source": "schedule",
        "id": occurrence.id,
        "schedule_id": sid,
        "occurrence_at": to_rfc3339(occurrence.occurrence_at),
        # What its body's ctx.occurrence also says (RS-10): when it was due (never
        # retried, so its due_at), and the schedule's run that completed before it (none:
        # this is the first).
        "scheduled_at": to_rfc3339(occurrence.due_at),
        "previous_completed_run_id": None,
    }
    assert run["started_by"] == "alice"
    assert run["definition_version"] == "1"
    listed = rig.alice.list_occurrences(sid)["items"]
    assert [item["run_id"] for item in listed] == [occurrence.run_id]


def test_generating_the_same_window_twice_inserts_nothing_new(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("idempotent")["id"]
    rig.advance(3 * MINUTE + 1)
    rig.generate()
    rig.dispatch()
    before = rig.occurrences(sid)
    assert [o.occurrence_at for o in before] == seconds_after(t0, 60, 120, 180)

    with rig.system.store.transaction() as tx:  # as if the cursor commit had been lost
        tx.schedules.move_cursors([CursorMove(sid, t0, t0 + timedelta(minutes=1))])
    rig.generate()
    after = rig.occurrences(sid)
    assert [(o.id, o.occurrence_at, o.run_id) for o in after] == [
        (o.id, o.occurrence_at, o.run_id) for o in before
    ]
    assert rig.dispatch().dispatched == []
    assert len(rig.runs_of(sid)) == 3


# --------------------------------------------------------------------------- (10) health


def test_health_counts_skipped_missed_and_failed_per_schedule(rig: Rig) -> None:
    busy = rig.every("busy", workflow="score", input={"score": 1}, overlap="skip", missed="skip")[
        "id"
    ]
    broken = rig.every("broken")["id"]
    quiet = rig.every("quiet", enabled=False)["id"]
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()  # busy and broken: their first runs, left unfinished
    rig.advance(MINUTE)
    activate_echo_v2(rig, ECHO_V2_INCOMPATIBLE)
    rig.generate()
    rig.dispatch()  # busy: skipped for overlap; broken: input rejected, auto-disabled
    rig.advance(7 * MINUTE + 5)  # busy misses 6 fires (+3 .. +8 min); +9 is within grace
    rig.generate()
    rig.dispatch()  # busy's +9 min: overlap again

    with in_process(rig.system) as client:
        api = member_api(rig.system, client, "acme", "vera", Role.VIEWER)
        response = api.get("/health")
    assert response.status_code == 200, response.text
    report = response.json()
    entries = {entry["id"]: entry for entry in report["schedules"]}
    for entry in entries.values():
        assert {"id", "skipped_count", "missed_count", "failed_count"} <= set(entry)
    # Skipped counts every skipped decision: the missed range in full (6) and 2 overlaps.
    assert (entries[busy]["skipped_count"], entries[busy]["missed_count"]) == (8, 6)
    assert entries[busy]["failed_count"] == 0
    assert (entries[broken]["failed_count"], entries[broken]["missed_count"]) == (1, 0)
    assert entries[broken]["skipped_count"] == 0
    assert (entries[quiet]["skipped_count"], entries[quiet]["failed_count"]) == (0, 0)
    assert report["status"] == "degraded", "a failed occurrence is a finding"


def test_the_embedded_api_meets_the_limits_of_http(rig: Rig) -> None:
    """Every way in decodes through one table of fields (decision 0012): the embedded API
    refuses what HTTP refuses, with the same codes, and creates nothing."""
    with pytest.raises(InvalidRequest) as grace:
        rig.every("too-graceful", misfire_grace_ms=10 * 366 * 86_400_000 + 1)
    assert grace.value.code == "validation_error"
    with pytest.raises(InvalidRequest) as unknown:
        rig.every("misspelt", max_catchup=3)
    assert [e["loc"][-1] for e in unknown.value.details["errors"]] == ["max_catchup"]
    with pytest.raises(InvalidRequest) as required:
        rig.every("no-policy", overlap=None)
    assert required.value.code == "policy_required"
    assert rig.admin.list_schedules()["items"] == []


def test_an_embedded_refusal_is_decided_under_its_key(rig: Rig) -> None:
    """The embedded API decodes inside the mutation, as HTTP does: a refused create is
    recorded under its key, so the same key with another request is a reuse, not a create."""
    for _ in range(2):
        with pytest.raises(PunctualError) as refused:
            rig.every("graceless", misfire_grace_ms=-1, idempotency_key="k-1")
        assert refused.value.code == "validation_error"
    with pytest.raises(PunctualError) as reused:
        rig.every("graceful", idempotency_key="k-1")
    assert reused.value.code == "idempotency_key_reused"
    assert rig.admin.list_schedules()["items"] == []


def test_a_grace_of_any_millisecond_is_stored_as_sent(rig: Rig) -> None:
    """1,001 ms was stored as 1,000 (a float product rounded down), so an apply of the same
    file never found the schedule unchanged."""
    created = rig.every("precise", misfire_grace_ms=1001, catch_up_window=0.001)
    assert rig.row(created["id"])["misfire_grace_ms"] == 1001
    again = rig.alice.put_schedule_by_name(
        "precise",
        workflow="echo",
        input=TICK,
        spec={"interval_ms": 60_000},
        overlap="allow_all",
        missed="catch_up",
        misfire_grace_ms=1001,
        catch_up_window=0.001,
    )
    assert again["changed"] is False
