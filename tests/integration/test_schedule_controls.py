"""Schedule controls at runtime on both stores, with time driven by hand (RS-9a..RS-9e).

Trigger, backfill, end and count, jitter and the upsert by name are called through their
use cases (under the idempotency mechanism, as the HTTP edge calls them); the generation
pass, the release of waiting occurrences and the dispatch pass are called as the runner's
loop calls them, on a system built with a ``FakeClock``; runs are ended through the
worker's own use cases, then followed through as the runner does.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.domain.permissions import Principal, Role
from punctual.domain.runs import DefinitionState, RunState
from punctual.domain.schedules import jitter_delay
from punctual.domain.timeutil import to_rfc3339
from punctual.embedded import Scheduler
from punctual.errors import Conflict, Forbidden, InvalidRequest, PunctualError, QuotaExceeded
from punctual.ports.records import WorkerRecord
from punctual.usecases.kernel.idempotency import IdempotentRequest, Mutation, Outcome, RecordedError
from punctual.usecases.recurring import schedule_controls, schedule_fields, schedules
from punctual.usecases.recurring.generation import generate
from punctual.usecases.running import execution
from punctual.usecases.running.definitions import register_worker, set_lifecycle
from punctual.usecases.running.followthrough import follow_through
from punctual.usecases.scheduled import starts
from punctual.usecases.scheduled.dispatch import DispatchReport, dispatch_due
from punctual.worker.definitions import declared_definitions
from punctual.workflows import load_app
from tests.conftest import FakeClock, make_settings

WORKER = "wrk_controls"
MINUTE = timedelta(minutes=1)
TICK = {"message": "tick"}
LIVE = ("scheduled", "buffered", "dispatching", "dispatched")


class Rig:
    """A punctual on a fake clock with a live worker record; alice created the schedules,
    bob is another member, root the admin."""

    def __init__(self, system: bootstrap.Punctual, clock: FakeClock) -> None:
        self.system = system
        self.clock = clock
        app = load_app("punctual.demo:app")
        self.loaded = [(d.name, d.version, d.artifact) for d in app.definitions]
        now = clock.now()
        record = WorkerRecord(WORKER, "local", "test", ["standard"], self.loaded, 4, now, now, None)
        register_worker(self.services, record, declared_definitions(app))
        self.alice = Scheduler(system, "acme", "alice", Role.MEMBER)
        self.bob = Scheduler(system, "acme", "bob", Role.MEMBER)
        self.admin = Scheduler(system, "acme", "root", Role.ADMIN)

    @property
    def services(self) -> Any:
        return self.system.services

    @property
    def now(self) -> datetime:
        return self.clock.now()

    def advance(self, delta: timedelta) -> datetime:
        now = self.clock.advance(delta.total_seconds())
        with self.system.store.transaction() as tx:
            tx.definitions.heartbeat_worker(WORKER, now)
        return now

    # -- the use cases, as the edge runs them -------------------------------------------

    def run(self, mutation: Mutation, who: Scheduler | None = None, key: str | None = None) -> Any:
        principal = (who or self.alice).principal
        request = None
        if key is not None:
            request = IdempotentRequest(principal.tenant, principal.subject, key, key)
        outcome: Outcome = self.system.mutations.run(request, mutation)
        return outcome

    def trigger(self, sid: str, who: Scheduler | None = None, **options: Any) -> Any:
        key = options.pop("key", None)
        principal = (who or self.alice).principal
        command = schedule_controls.TriggerSchedule(sid, **options)
        return self.run(schedule_controls.trigger(self.services, principal, command), who, key)

    def backfill(
        self,
        sid: str,
        start: datetime | str,
        end: datetime | str,
        who: Scheduler | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        principal = (who or self.alice).principal
        command = schedule_controls.BackfillSchedule(sid, start, end, **options)
        body: dict[str, Any] = self.run(
            schedule_controls.backfill(self.services, principal, command), who
        ).body
        return body

    def put(self, path_name: str, /, who: Scheduler | None = None, **fields: Any) -> Outcome:
        version = fields.pop("version", None)
        principal = (who or self.alice).principal
        command = schedule_fields.decode_upsert(path_name, fields, version)
        outcome: Outcome = self.run(
            schedule_controls.upsert_by_name(self.services, principal, command), who
        )
        return outcome

    def plan(
        self, path_name: str, /, who: Scheduler | None = None, **fields: Any
    ) -> dict[str, Any]:
        principal = (who or self.alice).principal
        command = schedule_fields.decode_upsert(path_name, fields)
        return schedule_controls.plan_by_name(self.services, principal, command)

    def edit(self, sid: str, version: int, who: Scheduler | None = None, **changes: Any) -> Any:
        principal = (who or self.alice).principal
        command = schedule_fields.decode_update(sid, version, changes)
        return self.run(schedules.update(self.services, principal, command), who).body

    def every(self, name: str, **options: Any) -> dict[str, Any]:
        options.setdefault("overlap", "allow_all")
        options.setdefault("missed", "catch_up")
        interval = options.pop("interval", MINUTE)
        return self.alice.schedule_every("echo", TICK, interval, name=name, **options)

    def get(self, sid: str) -> dict[str, Any]:
        return self.admin.get_schedule(sid)

    # -- the runner ---------------------------------------------------------------------

    def generate(self) -> int:
        return generate(self.services, 100).generated

    def dispatch(self) -> DispatchReport:
        """One turn of the runner's dispatch loop: release waiting occurrences, dispatch."""
        with self.system.store.transaction() as tx:
            tx.starts.release_buffered(self.now)
        return dispatch_due(self.services, "runner-test", 100)

    def finish_runs(self, state: RunState = RunState.COMPLETED) -> list[str]:
        loaded = [(name, version) for name, version, _ in self.loaded]
        claimed = execution.claim_runs(self.services, WORKER, ["standard"], loaded, 100)
        error = None if state is RunState.COMPLETED else {"message": "ended by the test"}
        finished = [execution.Finished(work.run, state, {}, error) for work in claimed]
        assert all(execution.finish_runs(self.services, WORKER, finished))
        follow_through(self.services)
        return [work.run.id for work in claimed]

    # -- what is stored -----------------------------------------------------------------

    def rows(self, sid: str) -> list[dict[str, Any]]:
        s = t.starts.c
        with self.system.store.engine.connect() as conn:
            found = conn.execute(
                sa.select(
                    s.id,
                    s.occurrence_at,
                    s.rerun,
                    s.state,
                    s.reason,
                    s.origin,
                    s.overlap,
                    s.due_at,
                    s.run_id,
                    s.range_count,
                )
                .where(s.schedule_id == sid)
                .order_by(s.occurrence_at, s.rerun)
            ).mappings()
            return [dict(row) for row in found]

    def runs(self, sid: str) -> list[dict[str, Any]]:
        r = t.runs.c
        with self.system.store.engine.connect() as conn:
            found = conn.execute(
                sa.select(r.id, r.origin_id, r.state, r.origin, r.seq)
                .where(r.schedule_id == sid)
                .order_by(r.seq)
            ).mappings()
            return [dict(row) for row in found]


@pytest.fixture
def build_rig(database_url: str, tmp_path: Path, clock: FakeClock) -> Iterator[Any]:
    systems: list[bootstrap.Punctual] = []

    def build(**overrides: Any) -> Rig:
        system = bootstrap.build(make_settings(database_url, tmp_path, **overrides), clock=clock)
        systems.append(system)
        return Rig(system, clock)

    yield build
    for system in systems:
        system.close()


@pytest.fixture
def rig(build_rig: Any) -> Rig:
    built: Rig = build_rig()
    return built


def live_per_instant(rows: list[dict[str, Any]]) -> Counter[datetime]:
    return Counter(row["occurrence_at"] for row in rows if row["state"] in LIVE)


# --------------------------------------------------------------------------- trigger (RS-9a)


def test_trigger_fires_now_with_origin_trigger_and_leaves_the_version(rig: Rig) -> None:
    schedule = rig.every("nightly")
    outcome = rig.trigger(schedule["id"])
    occurrence = outcome.body
    assert outcome.status == 201
    assert occurrence["origin"] == "trigger"
    assert occurrence["occurrence_at"] == to_rfc3339(rig.now)
    assert occurrence["scheduled_at"] == to_rfc3339(rig.now)
    assert occurrence["state"] == "scheduled"
    assert rig.get(schedule["id"])["version"] == schedule["version"]

    report = rig.dispatch()
    assert report.dispatched == [occurrence["id"]]
    (run,) = rig.runs(schedule["id"])
    assert run["origin"]["occurrence_origin"] == "trigger"
    assert run["origin"]["id"] == occurrence["id"]
    listed = rig.alice.list_occurrences(schedule["id"])["items"]
    assert [(o["id"], o["origin"]) for o in listed] == [(occurrence["id"], "trigger")]


def test_two_triggers_in_one_millisecond_take_the_next_free_one(rig: Rig) -> None:
    sid = rig.every("twice")["id"]
    first = rig.trigger(sid).body
    second = rig.trigger(sid).body
    assert first["occurrence_at"] == to_rfc3339(rig.now)
    assert second["occurrence_at"] == to_rfc3339(rig.now + timedelta(milliseconds=1))


def test_trigger_is_idempotent_by_key(rig: Rig) -> None:
    sid = rig.every("keyed")["id"]
    first = rig.trigger(sid, key="trigger-1")
    again = rig.trigger(sid, key="trigger-1")
    assert again.replayed and again.body == first.body
    assert len(rig.rows(sid)) == 1


def test_trigger_under_overlap_skip_is_skipped_while_a_run_is_unfinished(rig: Rig) -> None:
    sid = rig.every("busy", overlap="skip")["id"]
    rig.trigger(sid)
    assert len(rig.dispatch().dispatched) == 1  # its run is pending: unfinished
    rig.advance(timedelta(seconds=1))
    second = rig.trigger(sid).body
    report = rig.dispatch()
    assert report.skipped == [second["id"]]
    stored = {row["id"]: row for row in rig.rows(sid)}
    assert (stored[second["id"]]["state"], stored[second["id"]]["reason"]) == (
        "skipped",
        "overlap",
    )
    rig.finish_runs()
    rig.advance(timedelta(seconds=1))
    third = rig.trigger(sid).body
    assert rig.dispatch().dispatched == [third["id"]]


def test_trigger_with_its_own_overlap_policy_is_dispatched_under_it(rig: Rig) -> None:
    sid = rig.every("busy", overlap="skip")["id"]
    rig.trigger(sid)
    rig.dispatch()
    rig.advance(timedelta(seconds=1))
    forced = rig.trigger(sid, overlap="allow_all").body
    assert rig.dispatch().dispatched == [forced["id"]]


def test_trigger_is_allowed_while_paused_and_after_the_end(rig: Rig) -> None:
    schedule = rig.every("bounded", max_occurrences=1)
    sid = schedule["id"]
    rig.advance(MINUTE)
    assert rig.generate() == 1
    ended = rig.get(sid)
    assert (ended["state"], ended["remaining_occurrences"]) == ("ended", 0)
    assert rig.trigger(sid).status == 201
    paused = rig.alice.pause(sid, ended["version"])
    assert paused["state"] == "ended", "ended wins over paused"
    rig.advance(timedelta(seconds=1))
    assert rig.trigger(sid).status == 201
    assert len(rig.dispatch().dispatched) == 3
    after = rig.get(sid)
    assert after["remaining_occurrences"] == 0, "triggers are not the spec's fires"
    assert after["version"] == paused["version"]


def test_a_member_may_trigger_and_a_viewer_may_not(rig: Rig) -> None:
    sid = rig.every("shared")["id"]
    assert rig.trigger(sid, who=rig.bob).status == 201
    viewer = Scheduler(rig.system, "acme", "vera", Role.VIEWER)
    with pytest.raises(Forbidden):
        rig.trigger(sid, who=viewer)
    with pytest.raises(InvalidRequest):
        rig.trigger(sid, overlap="sometimes")


# --------------------------------------------------------------------------- backfill (RS-9b)


def test_a_missed_range_after_downtime_is_backfilled_and_runs_one_after_another(
    rig: Rig,
) -> None:
    t0 = rig.now
    sid = rig.every("nightly", missed="skip")["id"]
    rig.advance(20 * MINUTE + timedelta(seconds=5))  # the runner was down for 20 fires
    rig.generate()
    missed = [row for row in rig.rows(sid) if row["reason"] == "missed"]
    assert [row["range_count"] for row in missed] == [19]

    body = rig.backfill(sid, t0, t0 + 20 * MINUTE)
    assert (body["generated"], body["existing"]) == (19, 1)
    expected = [to_rfc3339(t0 + n * MINUTE) for n in range(1, 21)]
    assert [item["occurrence_at"] for item in body["items"]] == expected
    assert [item["origin"] for item in body["items"]] == ["backfill"] * 19 + ["schedule"]
    assert live_per_instant(rig.rows(sid)).most_common(1)[0][1] == 1
    assert [row["range_count"] for row in rig.rows(sid) if row["reason"] == "missed"] == [19]

    # The live occurrence runs on its own; the backfilled ones go one at a time, in order.
    started: list[datetime] = []
    for _ in range(25):
        report = rig.dispatch()
        by_id = {row["id"]: row for row in rig.rows(sid)}
        backfilled = [by_id[i] for i in report.dispatched if by_id[i]["origin"] == "backfill"]
        assert len(backfilled) <= 1, "one after another"
        started += [row["occurrence_at"] for row in backfilled]
        rig.finish_runs()
    assert started == [t0 + n * MINUTE for n in range(1, 20)]


def test_skipped_and_failed_occurrences_are_generated_again_and_kept_as_history(
    rig: Rig,
) -> None:
    t0 = rig.now
    sid = rig.every("flaky", overlap="skip")["id"]
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()  # 1st: its run stays unfinished
    rig.advance(MINUTE)
    rig.generate()
    assert len(rig.dispatch().skipped) == 1  # 2nd: skipped for overlap
    rig.finish_runs()
    set_lifecycle(rig.services, "echo", "1", DefinitionState.DEPRECATED)
    rig.advance(MINUTE)
    rig.generate()
    assert len(rig.dispatch().failed) == 1  # 3rd: no active version, and auto-disabled
    set_lifecycle(rig.services, "echo", "1", DefinitionState.ACTIVE)

    body = rig.backfill(sid, t0, t0 + 3 * MINUTE)
    assert (body["generated"], body["existing"]) == (2, 1)
    states = [(row["occurrence_at"], row["rerun"], row["state"]) for row in rig.rows(sid)]
    assert states == [
        (t0 + MINUTE, 0, "dispatched"),
        (t0 + 2 * MINUTE, 0, "skipped"),
        (t0 + 2 * MINUTE, 1, "scheduled"),
        (t0 + 3 * MINUTE, 0, "failed"),
        (t0 + 3 * MINUTE, 1, "buffered"),
    ]
    assert rig.get(sid)["enabled"] is False, "a backfill does not resume the schedule"
    for _ in range(2):
        rig.dispatch()
        rig.finish_runs()
    assert [r["origin"]["occurrence_at"] for r in rig.runs(sid)] == [
        to_rfc3339(t0 + n * MINUTE) for n in (1, 2, 3)
    ]


def test_a_second_backfill_generates_only_what_is_missing(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("twice", missed="skip")["id"]
    rig.advance(10 * MINUTE + timedelta(seconds=5))
    rig.generate()
    first = rig.backfill(sid, t0, t0 + 5 * MINUTE)
    assert (first["generated"], first["existing"]) == (5, 0)
    again = rig.backfill(sid, t0, t0 + 5 * MINUTE)
    assert (again["generated"], again["existing"]) == (0, 5)
    assert [i["id"] for i in again["items"]] == [i["id"] for i in first["items"]]
    wider = rig.backfill(sid, t0, t0 + 8 * MINUTE)
    assert (wider["generated"], wider["existing"]) == (3, 5)
    assert max(live_per_instant(rig.rows(sid)).values()) == 1


def test_backfill_with_an_overlap_policy_dispatches_them_together(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("parallel", missed="skip")["id"]
    rig.advance(10 * MINUTE)
    body = rig.backfill(sid, t0 - 5 * MINUTE, t0 + 4 * MINUTE, overlap="allow_all")
    assert body["generated"] == 4, "only the spec's fires from its first one on"
    assert {item["state"] for item in body["items"]} == {"scheduled"}
    assert len(rig.dispatch().dispatched) == 4


def test_backfill_overlap_policy_overrides_the_schedules(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("parallel", overlap="skip")["id"]
    rig.advance(10 * MINUTE)
    rig.backfill(sid, t0, t0 + 4 * MINUTE, overlap="allow_all")
    assert len(rig.dispatch().dispatched) == 4


def test_backfilled_occurrences_count_against_the_pending_start_quota(build_rig: Any) -> None:
    rig: Rig = build_rig(tenant_defaults={"max_pending_starts": 3})
    t0 = rig.now
    sid = rig.every("quota", missed="skip")["id"]
    rig.advance(10 * MINUTE)
    with pytest.raises(QuotaExceeded) as refused:
        rig.backfill(sid, t0, t0 + 4 * MINUTE)
    assert (refused.value.details["limit"], refused.value.details["count"]) == (3, 0)
    assert rig.rows(sid) == [], "all or nothing"
    assert rig.backfill(sid, t0, t0 + 3 * MINUTE)["generated"] == 3
    with rig.system.store.transaction() as tx:
        assert tx.starts.count_pending("acme") == 3
        assert sum(tx.starts.pending_by_class("acme").values()) == 3
    start = starts.CreateStart(
        workflow="echo",
        input=TICK,
        business_request_id="one-off",
        start_at=rig.now + MINUTE,
        workload_class="standard",
    )
    with pytest.raises(QuotaExceeded):
        rig.run(starts.create(rig.services, rig.alice.principal, start))
    rig.dispatch()  # the first starts: two still wait
    with rig.system.store.transaction() as tx:
        assert sum(tx.starts.pending_by_class("acme").values()) == 2


def test_backfill_refuses_bad_ranges_and_too_many_fires(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("ranges", starts_at=t0 - 2000 * MINUTE)["id"]
    for start, end in [(t0, t0), (t0, t0 - MINUTE), (t0 - MINUTE, t0 + timedelta(seconds=1))]:
        with pytest.raises(InvalidRequest) as refused:
            rig.backfill(sid, start, end)
        assert refused.value.code == "backfill_range_invalid"
    with pytest.raises(InvalidRequest) as naive:
        rig.backfill(sid, "2026-11-01T00:00:00", to_rfc3339(t0))
    assert naive.value.code == "backfill_range_invalid"
    with pytest.raises(InvalidRequest) as large:
        rig.backfill(sid, t0 - 1001 * MINUTE, t0)
    assert large.value.code == "backfill_too_large"
    assert rig.rows(sid) == []


def test_backfill_is_for_the_creator_or_an_admin(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("owned", starts_at=t0 - 10 * MINUTE)["id"]
    with pytest.raises(Forbidden):
        rig.backfill(sid, t0 - 5 * MINUTE, t0, who=rig.bob)
    assert rig.backfill(sid, t0 - 5 * MINUTE, t0, who=rig.admin)["generated"] == 5


@pytest.mark.parametrize(
    ("zone", "cron", "dst_overlap", "start", "end"),
    [
        pytest.param(
            "Europe/Berlin",
            "30 2 * * *",
            "first",
            datetime(2026, 3, 27, tzinfo=UTC),
            datetime(2026, 3, 31, tzinfo=UTC),
            id="berlin_spring_forward",
        ),
        pytest.param(
            "Europe/Berlin",
            "*/30 2 * * *",
            "first",
            datetime(2026, 10, 24, 22, tzinfo=UTC),
            datetime(2026, 10, 25, 4, tzinfo=UTC),
            id="berlin_fall_back_wildcard",
        ),
        pytest.param(
            "America/New_York",
            "30 2 * * *",
            "first",
            datetime(2026, 3, 7, tzinfo=UTC),
            datetime(2026, 3, 10, tzinfo=UTC),
            id="new_york_spring_forward",
        ),
        pytest.param(
            "America/New_York",
            "30 1 * * *",
            "both",
            datetime(2026, 10, 31, tzinfo=UTC),
            datetime(2026, 11, 3, tzinfo=UTC),
            id="new_york_fall_back_both",
        ),
    ],
)
def test_a_backfill_across_a_dst_night_stores_what_the_preview_shows(
    rig: Rig, zone: str, cron: str, dst_overlap: str, start: datetime, end: datetime
) -> None:
    spec = {"cron": cron, "time_zone": zone, "dst_overlap": dst_overlap}
    sid = rig.alice.schedule_cron(
        "echo",
        TICK,
        cron,
        name=f"dst-{secrets.token_hex(3)}",
        overlap="allow_all",
        missed="skip",
        time_zone=zone,
        dst_overlap=dst_overlap,
    )["id"]
    previewed = [
        (item["fire_at"], item["nominal"], item["dst_adjustment"])
        for item in schedules.preview({"spec": spec}, start, 100)["items"]
        if item["fire_at"] <= to_rfc3339(end)
    ]
    body = rig.backfill(sid, start, end)
    stored = [(i["occurrence_at"], i["nominal"], i["dst_adjustment"]) for i in body["items"]]
    assert stored == previewed
    assert any(adjustment is not None for _, _, adjustment in stored)


# --------------------------------------------------------------------------- end and count (RS-9c)


def test_end_at_ends_the_schedule_which_stays_readable_and_a_patch_extends_it(
    rig: Rig,
) -> None:
    t0 = rig.now
    schedule = rig.every("ending", end_at=t0 + 3 * MINUTE)
    sid = schedule["id"]
    assert schedule["state"] == "active"
    assert schedule["end_at"] == to_rfc3339(t0 + 3 * MINUTE)
    assert len(schedule["next_fire_times"]) == 3
    rig.advance(10 * MINUTE)
    rig.generate()
    assert [row["occurrence_at"] for row in rig.rows(sid)] == [t0 + n * MINUTE for n in (1, 2, 3)]
    ended = rig.get(sid)
    assert (ended["state"], ended["next_fire_times"], ended["enabled"]) == ("ended", [], True)
    assert rig.generate() == 0

    paused = rig.alice.pause(sid, ended["version"])
    with pytest.raises(Conflict) as refused:
        rig.alice.resume(sid, paused["version"])
    assert refused.value.code == "invalid_state"

    extended = rig.edit(sid, paused["version"], end_at=t0 + 20 * MINUTE, enabled=True)
    assert extended["state"] == "active"
    rig.generate()  # the fires that passed meanwhile follow the missed policy (catch-up)
    assert len(rig.rows(sid)) == 3 + 7


def test_end_at_in_the_past_is_refused(rig: Rig) -> None:
    with pytest.raises(InvalidRequest) as refused:
        rig.every("late", end_at=rig.now - MINUTE)
    assert refused.value.code == "end_at_in_past"
    sid = rig.every("fine")["id"]
    with pytest.raises(InvalidRequest) as patched:
        rig.edit(sid, 1, end_at=to_rfc3339(rig.now - MINUTE))
    assert patched.value.code == "end_at_in_past"


def test_max_occurrences_counts_the_specs_fires_in_any_state_not_triggers_or_backfills(
    rig: Rig,
) -> None:
    t0 = rig.now
    schedule = rig.every("counted", missed="skip", max_occurrences=5)
    sid = schedule["id"]
    assert schedule["remaining_occurrences"] == 5
    rig.trigger(sid)
    rig.advance(2 * MINUTE + timedelta(seconds=1))
    rig.generate()  # the first fire is missed (a range of 1), the second generated
    assert rig.get(sid)["remaining_occurrences"] == 3
    rig.backfill(sid, t0 - 10 * MINUTE, t0 + MINUTE)
    assert rig.get(sid)["remaining_occurrences"] == 3
    rig.advance(10 * MINUTE)  # downtime: a missed range, cut at the 3 that remain
    rig.generate()
    ranges = [row["range_count"] for row in rig.rows(sid) if row["reason"] == "missed"]
    assert ranges == [1, 3]
    ended = rig.get(sid)
    assert (ended["state"], ended["remaining_occurrences"]) == ("ended", 0)
    more = rig.edit(sid, ended["version"], max_occurrences=7)
    assert (more["state"], more["remaining_occurrences"]) == ("active", 2)


def test_a_schedule_without_limits_shows_none(rig: Rig) -> None:
    schedule = rig.every("open")
    assert (schedule["end_at"], schedule["max_occurrences"]) == (None, None)
    assert (schedule["remaining_occurrences"], schedule["jitter_ms"]) == (None, 0)


# --------------------------------------------------------------------------- jitter (RS-9d)


def test_jitter_delays_scheduled_at_and_leaves_occurrence_at(rig: Rig) -> None:
    t0 = rig.now
    sid = rig.every("spread", jitter_ms=30_000)["id"]
    for _ in range(3):  # each fire generated on time, a second ahead of it
        rig.advance(MINUTE)
        rig.generate()
    listed = rig.alice.list_occurrences(sid, order="oldest")["items"]
    assert [o["occurrence_at"] for o in listed] == [to_rfc3339(t0 + n * MINUTE) for n in (1, 2, 3)]
    for occurrence, n in zip(listed, (1, 2, 3), strict=True):
        at = t0 + n * MINUTE
        delay = jitter_delay(sid, at, timedelta(milliseconds=30_000))
        assert occurrence["scheduled_at"] == to_rfc3339(at + delay)
    assert len({o["scheduled_at"] for o in listed}) == 3


def test_jitter_must_be_shorter_than_the_smallest_gap(rig: Rig) -> None:
    with pytest.raises(InvalidRequest) as refused:
        rig.every("too-much", jitter_ms=60_000)
    assert refused.value.code == "jitter_too_large"
    assert refused.value.details["max_jitter_ms"] == 59_999
    sid = rig.every("fine", jitter_ms=59_999)["id"]
    with pytest.raises(InvalidRequest) as edited:
        rig.edit(sid, 1, spec={"interval_ms": 30_000})
    assert edited.value.details["max_jitter_ms"] == 29_999


# --------------------------------------------------------------------------- one live per instant


_OPERATIONS = st.lists(
    st.sampled_from(
        ["advance", "downtime", "generate", "dispatch", "finish", "fail", "trigger", "backfill"]
    ),
    min_size=4,
    max_size=14,
)


@settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(operations=_OPERATIONS, overlap=st.sampled_from(["skip", "buffer_one", "allow_all"]))
def test_backfill_trigger_and_generation_never_make_two_live_occurrences_of_an_instant(
    rig: Rig, operations: list[str], overlap: str
) -> None:
    t0 = rig.now
    sid = rig.every(f"prop-{secrets.token_hex(4)}", overlap=overlap, missed="skip")["id"]
    for operation in operations:
        if operation == "advance":
            rig.advance(MINUTE)
        elif operation == "downtime":
            rig.advance(7 * MINUTE)
        elif operation == "generate":
            rig.generate()
        elif operation == "dispatch":
            rig.dispatch()
        elif operation in ("finish", "fail"):
            rig.finish_runs(RunState.COMPLETED if operation == "finish" else RunState.FAILED)
        elif operation == "trigger":
            rig.trigger(sid)
        elif rig.now > t0:
            rig.backfill(sid, t0, rig.now)
        rows = rig.rows(sid)
        assert max(live_per_instant(rows).values(), default=0) <= 1, rows
        run_instants = Counter(run["origin"]["occurrence_at"] for run in rig.runs(sid))
        assert max(run_instants.values(), default=0) <= 1


# --------------------------------------------------------------------------- by name (RS-9e)

NIGHTLY = {
    "workflow": "echo",
    "input": {"message": "nightly"},
    "spec": {"cron": "30 2 * * *", "time_zone": "Europe/Berlin"},
    "overlap": "skip",
    "missed": "catch_up",
    "source": "deploy/schedules.toml",
}


def test_put_by_name_creates_then_changes_nothing_then_updates(rig: Rig) -> None:
    created = rig.put("team/nightly", **NIGHTLY)
    assert created.status == 201
    assert (created.body["name"], created.body["changed"]) == ("team/nightly", True)
    assert created.body["source"] == "deploy/schedules.toml"

    again = rig.put("team/nightly", **NIGHTLY)
    assert (again.status, again.body["changed"]) == (200, False)
    assert again.body["version"] == created.body["version"]
    assert again.body["revision"] == created.body["revision"]

    changed = rig.put("team/nightly", **{**NIGHTLY, "input": {"message": "other"}})
    assert (changed.status, changed.body["changed"]) == (200, True)
    assert changed.body["version"] == created.body["version"] + 1
    assert changed.body["revision"] == created.body["revision"] + 1
    assert schedule_controls.get_by_name(rig.services, rig.admin.principal, "team/nightly") == {
        key: value for key, value in changed.body.items() if key != "changed"
    }


def test_the_dry_run_tells_what_an_apply_would_do_and_stores_nothing(rig: Rig) -> None:
    assert rig.plan("dry", **NIGHTLY) == {"action": "create", "changed_fields": []}
    with pytest.raises(PunctualError):
        schedule_controls.get_by_name(rig.services, rig.alice.principal, "dry")
    rig.put("dry", **NIGHTLY)
    assert rig.plan("dry", **NIGHTLY) == {"action": "unchanged", "changed_fields": []}
    edited = {**NIGHTLY, "input": {"message": "new"}, "overlap": "allow_all", "jitter_ms": 1000}
    assert rig.plan("dry", **edited) == {
        "action": "update",
        "changed_fields": ["input", "jitter_ms", "overlap"],
    }
    assert rig.plan("dry", **NIGHTLY)["action"] == "unchanged", "nothing was stored"


def test_an_omitted_enabled_never_re_enables_a_paused_schedule(rig: Rig) -> None:
    created = rig.put("paused", **NIGHTLY).body
    paused = rig.alice.pause(created["id"], created["version"])
    applied = rig.put("paused", **NIGHTLY)
    assert (applied.body["changed"], applied.body["enabled"]) == (False, False)
    resumed = rig.put("paused", **NIGHTLY, enabled=True)
    assert (resumed.body["enabled"], resumed.body["version"]) == (True, paused["version"] + 1)


def test_put_by_name_checks_a_given_version_and_the_owner(rig: Rig) -> None:
    created = rig.put("versioned", **NIGHTLY).body
    with pytest.raises(Conflict) as stale:
        rig.put("versioned", **NIGHTLY, version=created["version"] + 1)
    assert stale.value.code == "version_conflict"
    assert rig.put("versioned", **NIGHTLY, version=created["version"]).body["changed"] is False
    with pytest.raises(Forbidden):
        rig.put("versioned", who=rig.bob, **{**NIGHTLY, "input": {"message": "bob's"}})
    with pytest.raises(InvalidRequest):
        rig.put("versioned", **NIGHTLY, name="another-name")


def test_an_interval_without_starts_at_is_unchanged_when_applied_again(rig: Rig) -> None:
    body = {**NIGHTLY, "spec": {"interval_ms": 60_000}}
    created = rig.put("every-minute", **body).body
    rig.advance(MINUTE)
    again = rig.put("every-minute", **body)
    assert again.body["changed"] is False
    assert again.body["spec"] == created["spec"]
    assert rig.plan("every-minute", **{**body, "spec": {"interval_ms": 30_000}}) == {
        "action": "update",
        "changed_fields": ["spec"],
    }


def test_schedules_are_listed_by_the_source_they_were_applied_from(rig: Rig) -> None:
    rig.put("a", **NIGHTLY)
    rig.put("b", **{**NIGHTLY, "source": "other.toml"})
    rig.every("by-hand")
    page = schedules.list_schedules(
        rig.services, rig.alice.principal, 50, None, source="deploy/schedules.toml"
    )
    assert [item["name"] for item in page["items"]] == ["a"]


def test_recorded_errors_replay_for_control_requests(rig: Rig) -> None:
    sid = rig.every("replayed")["id"]
    with pytest.raises(InvalidRequest):
        rig.trigger(sid, overlap="sometimes", key="bad-trigger")
    with pytest.raises(RecordedError) as replay:
        rig.trigger(sid, overlap="sometimes", key="bad-trigger")
    assert replay.value.status == 422


def test_principal_of_another_tenant_sees_no_schedule(rig: Rig) -> None:
    sid = rig.every("private")["id"]
    stranger = Principal("other", "mallory", Role.ADMIN)
    with pytest.raises(PunctualError) as hidden:
        rig.run(
            schedule_controls.trigger(
                rig.services, stranger, schedule_controls.TriggerSchedule(sid)
            )
        )
    assert hidden.value.code == "not_found"
