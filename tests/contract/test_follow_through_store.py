"""The Store contract of follow-through, notifications and webhooks (CR-4, CR-5).

Every promise of ``FollowThrough``, ``Notifications``, ``Webhooks``,
``Schedules.note_ended``/``note_fired`` and ``Identity.subjects_with_role`` as a named
test, over a real SQLite file and a fresh PostgreSQL database (``database_url``). Runs end
through the store's own paths (a worker's outcome, terminate, cancel), never by hand.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from punctual.adapters.stores.sql.store import SqlStore
from punctual.domain.ids import new_id
from punctual.domain.permissions import Role
from punctual.domain.recurrence import IntervalSpec
from punctual.domain.runs import RunState
from punctual.domain.schedules import MissedPolicy, OverlapPolicy, SchedulePolicy, ScheduleSettings
from punctual.ports.records import (
    DeliveryOutcome,
    EncryptedInput,
    EndedStatus,
    Fired,
    FollowThroughRecord,
    NewDelivery,
    NewNotification,
    NewOccurrence,
    NewRun,
    NewSchedule,
    NewWebhook,
    Order,
    Seek,
)

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
TENANT = "acme"
OTHER_TENANT = "globex"
INPUT = EncryptedInput("k1", b"\x00sealed\xff")
QUEUE = "default"
OLDEST = Order.OLDEST


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# --- helpers: schedules, occurrences and their runs ------------------------------------------


def insert_schedule(store: SqlStore, tenant: str = TENANT) -> str:
    schedule_id = new_id("sch")
    with store.transaction() as tx:
        tx.schedules.insert(
            NewSchedule(
                id=schedule_id,
                tenant=tenant,
                settings=ScheduleSettings(
                    name=f"nightly-{schedule_id}",
                    workflow="report",
                    specs=(IntervalSpec(interval_ms=3_600_000, starts_at=T0),),
                    policy=SchedulePolicy(OverlapPolicy.ALLOW_ALL, MissedPolicy.SKIP),
                    workload_class=QUEUE,
                ),
                input=INPUT,
                pinned_version=None,
                created_by="alice",
                cursor=T0,
                next_fire_at=T0,
            ),
            T0,
        )
    return schedule_id


class Occurrence:
    """An occurrence of a schedule and the run it allocated (inserted, pending)."""

    def __init__(self, store: SqlStore, schedule_id: str, occurrence_at: datetime) -> None:
        self.store = store
        self.schedule_id = schedule_id
        self.occurrence_at = occurrence_at
        self.id = new_id("occ")
        self.run_id = new_id("run")
        # Its own definition version, so a claim can take exactly this run.
        self.version = f"v-{self.run_id}"

    def insert(self, *, created: datetime = T0, with_run: bool = True) -> Occurrence:
        with self.store.transaction() as tx:
            tx.starts.insert_occurrences(
                [
                    NewOccurrence(
                        id=self.id,
                        tenant=TENANT,
                        schedule_id=self.schedule_id,
                        revision=1,
                        workflow="report",
                        workload_class=QUEUE,
                        input=INPUT,
                        created_by="alice",
                        business_request_id=f"{self.schedule_id}@{self.occurrence_at}",
                        occurrence_at=self.occurrence_at,
                        due_at=self.occurrence_at,
                        nominal=None,
                        dst_adjustment=None,
                        run_id=self.run_id,
                    )
                ],
                created,
            )
            if with_run:
                tx.runs.insert_new([self.new_run()], created)
        return self

    def new_run(self) -> NewRun:
        return NewRun(
            id=self.run_id,
            tenant=TENANT,
            workflow="report",
            definition_version=self.version,
            artifact="artifact-1",
            origin={"source": "schedule", "id": self.id, "schedule_id": self.schedule_id},
            started_by="alice",
            input=INPUT,
            task_queue=QUEUE,
            priority=3,
            traceparent=None,
            timeout_seconds=60.0,
        )

    def finish(self, state: RunState, result: object = None, *, when: datetime = T0) -> None:
        """The run's worker claims it and records its outcome (the local engine's path)."""
        with self.store.transaction() as tx:
            [claimed] = tx.runs.claim_pending(
                "wrk-a", [QUEUE], [("report", self.version)], 1, 60, when
            )
            assert claimed.id == self.run_id
        with self.store.transaction() as tx:
            error = None if state is RunState.COMPLETED else {"code": "workflow_error"}
            assert tx.runs.finish(self.run_id, "wrk-a", 1, state, result, error, when)

    def terminate(self, *, when: datetime = T0) -> None:
        with self.store.transaction() as tx:
            tx.runs.terminate(TENANT, self.run_id, when, "terminated by alice")


def occurrence(
    store: SqlStore, schedule_id: str, hour: int, *, created: datetime = T0
) -> Occurrence:
    return Occurrence(store, schedule_id, at(hour * 3600)).insert(created=created)


def claim_ended(store: SqlStore, limit: int = 100) -> list[str]:
    with store.transaction() as tx:
        return [ended.run_id for ended in tx.follow_through.claim_ended(limit)]


def claim_overdue(store: SqlStore, created_before: datetime, limit: int = 100) -> list[str]:
    with store.transaction() as tx:
        return [ended.run_id for ended in tx.follow_through.claim_overdue(created_before, limit)]


def mark(store: SqlStore, run_ids: list[str], stage: int) -> None:
    with store.transaction() as tx:
        tx.follow_through.mark_stage(run_ids, stage)


# --- awaiting runs and their claims ---------------------------------------------------------


def test_an_ended_run_of_an_occurrence_is_claimed_with_its_occurrence(store: SqlStore) -> None:
    schedule_id = insert_schedule(store)
    occ = occurrence(store, schedule_id, 1, created=at(10))
    occ.finish(RunState.COMPLETED, {"rows": 3, "nested": {"x": 1.5}}, when=at(20))

    with store.transaction() as tx:
        [ended] = tx.follow_through.claim_ended(10)

    assert ended.run_id == occ.run_id
    assert (ended.tenant, ended.schedule_id) == (TENANT, schedule_id)
    assert (ended.occurrence_id, ended.occurrence_at) == (occ.id, occ.occurrence_at)
    assert (ended.state, ended.result) == ("completed", {"rows": 3, "nested": {"x": 1.5}})
    assert (ended.created_at, ended.ended_at, ended.stage) == (at(10), at(20), 0)


def test_an_ended_run_is_claimed_until_it_is_marked_done(store: SqlStore) -> None:
    schedule_id = insert_schedule(store)
    occ = occurrence(store, schedule_id, 1)
    occ.terminate(when=at(5))

    assert claim_ended(store) == [occ.run_id]
    assert claim_ended(store) == [occ.run_id]  # a pass that rolled back leaves it awaiting
    mark(store, [occ.run_id], 2)
    assert claim_ended(store) == []


def test_every_end_of_a_run_is_seen_by_the_claim(store: SqlStore) -> None:
    """Completed, failed, terminated and canceled runs all set ``ended_at``."""
    schedule_id = insert_schedule(store)
    completed, failed, terminated, canceled = (
        occurrence(store, schedule_id, hour) for hour in (1, 2, 3, 4)
    )
    completed.finish(RunState.COMPLETED, {"ok": True}, when=at(1))
    failed.finish(RunState.FAILED, when=at(2))
    terminated.terminate(when=at(3))
    with store.transaction() as tx:
        tx.runs.request_cancel(TENANT, canceled.run_id, at(4))

    with store.transaction() as tx:
        states = {e.run_id: e.state for e in tx.follow_through.claim_ended(10)}
    assert states == {
        completed.run_id: "completed",
        failed.run_id: "failed",
        terminated.run_id: "terminated",
        canceled.run_id: "canceled",
    }


def test_claim_ended_ignores_live_runs_and_runs_of_no_schedule(store: SqlStore) -> None:
    schedule_id = insert_schedule(store)
    occurrence(store, schedule_id, 1)  # pending, never ends here
    one_off = NewRun(
        id=new_id("run"),
        tenant=TENANT,
        workflow="report",
        definition_version="v1",
        artifact="artifact-1",
        origin={"source": "scheduled_start", "id": new_id("st")},
        started_by="alice",
        input=INPUT,
        task_queue=QUEUE,
        priority=3,
        traceparent=None,
        timeout_seconds=60.0,
    )
    with store.transaction() as tx:
        tx.runs.insert_new([one_off], T0)
        tx.runs.terminate(TENANT, one_off.id, at(1), "terminated by alice")

    assert claim_ended(store) == []


def test_claim_ended_takes_the_oldest_ends_first_within_its_limit(store: SqlStore) -> None:
    schedule_id = insert_schedule(store)
    runs = [occurrence(store, schedule_id, hour) for hour in (1, 2, 3)]
    for occ, ended_at in zip(runs, (at(30), at(10), at(20)), strict=True):
        occ.terminate(when=ended_at)

    assert claim_ended(store, limit=2) == [runs[1].run_id, runs[2].run_id]
    assert claim_ended(store, limit=0) == []


def test_a_run_whose_deadline_was_recorded_is_claimed_again_when_it_ends(
    store: SqlStore,
) -> None:
    """Stage 1 (``finalize_timed_out`` recorded while live): its end is still claimed, so
    ``last_status`` can move, and its stage is reported."""
    schedule_id = insert_schedule(store)
    occ = occurrence(store, schedule_id, 1)
    mark(store, [occ.run_id], 1)
    assert claim_ended(store) == []
    occ.terminate(when=at(50))

    with store.transaction() as tx:
        [ended] = tx.follow_through.claim_ended(10)
    assert (ended.run_id, ended.stage) == (occ.run_id, 1)


def test_claim_overdue_takes_live_unrecorded_runs_created_before_the_cutoff(
    store: SqlStore,
) -> None:
    schedule_id = insert_schedule(store)
    old = occurrence(store, schedule_id, 1, created=at(0))
    older = occurrence(store, schedule_id, 2, created=at(-10))
    recent = occurrence(store, schedule_id, 3, created=at(100))
    recorded = occurrence(store, schedule_id, 4, created=at(0))
    ended = occurrence(store, schedule_id, 5, created=at(0))
    mark(store, [recorded.run_id], 1)
    ended.terminate(when=at(1))

    assert claim_overdue(store, at(50)) == [older.run_id, old.run_id]
    assert claim_overdue(store, at(50), limit=1) == [older.run_id]
    with store.transaction() as tx:
        [overdue] = tx.follow_through.claim_overdue(at(50), 1)
    assert (overdue.state, overdue.ended_at, overdue.stage) == ("pending", None, 0)
    assert recent.run_id not in claim_overdue(store, at(100))


def test_mark_stage_never_moves_a_run_back(store: SqlStore) -> None:
    schedule_id = insert_schedule(store)
    occ = occurrence(store, schedule_id, 1)
    mark(store, [occ.run_id], 2)
    mark(store, [occ.run_id], 1)
    occ.terminate(when=at(1))

    assert claim_ended(store) == []
    assert claim_overdue(store, at(3600)) == []


@pytest.mark.postgres
def test_concurrent_passes_skip_the_runs_another_pass_holds(pg_url: str) -> None:
    store = SqlStore(pg_url)
    try:
        schedule_id = insert_schedule(store)
        runs = [occurrence(store, schedule_id, hour) for hour in (1, 2, 3, 4)]
        for index, occ in enumerate(runs):
            occ.terminate(when=at(index))
        with store.transaction() as first:
            held = [e.run_id for e in first.follow_through.claim_ended(2)]
            with store.transaction(lock_timeout=2) as second:
                other = [e.run_id for e in second.follow_through.claim_ended(10)]
        assert held == [runs[0].run_id, runs[1].run_id]
        assert other == [runs[2].run_id, runs[3].run_id]
    finally:
        store.dispose()


# --- the baseline ---------------------------------------------------------------------------


def test_the_baseline_is_the_completed_run_of_the_latest_earlier_occurrence(
    store: SqlStore,
) -> None:
    schedule_id = insert_schedule(store)
    first, second, failed, current, later = (
        occurrence(store, schedule_id, hour) for hour in (1, 2, 3, 4, 5)
    )
    first.finish(RunState.COMPLETED, {"rows": 1})
    second.finish(RunState.COMPLETED, {"rows": 2})
    failed.finish(RunState.FAILED)
    current.finish(RunState.COMPLETED, {"rows": 4})
    later.finish(RunState.COMPLETED, {"rows": 5})

    with store.transaction(readonly=True) as tx:
        baseline = tx.follow_through.baseline(schedule_id, current.occurrence_at)
        of_the_first = tx.follow_through.baseline(schedule_id, first.occurrence_at)

    assert baseline is not None
    assert (baseline.run_id, baseline.occurrence_at) == (second.run_id, second.occurrence_at)
    assert baseline.result == {"rows": 2}
    assert of_the_first is None


def test_the_baseline_ignores_unfinished_runs_and_other_schedules(store: SqlStore) -> None:
    schedule_id, other_id = insert_schedule(store), insert_schedule(store)
    running = occurrence(store, schedule_id, 1)
    Occurrence(store, schedule_id, at(2 * 3600)).insert(with_run=False)  # not started yet
    foreign = occurrence(store, other_id, 1)
    foreign.finish(RunState.COMPLETED, {"rows": 9})
    current = occurrence(store, schedule_id, 3)

    with store.transaction(readonly=True) as tx:
        assert tx.follow_through.baseline(schedule_id, current.occurrence_at) is None
    running.finish(RunState.COMPLETED, {"rows": 1})
    with store.transaction(readonly=True) as tx:
        baseline = tx.follow_through.baseline(schedule_id, current.occurrence_at)
    assert baseline is not None and baseline.run_id == running.run_id


# --- recorded follow-throughs ---------------------------------------------------------------


def follow_through(occ: Occurrence, status: str, **overrides: Any) -> FollowThroughRecord:
    recorded = FollowThroughRecord(
        occurrence_id=occ.id,
        tenant=TENANT,
        schedule_id=occ.schedule_id,
        run_id=occ.run_id,
        status=status,
        reason=None,
        previous_run_id=None,
        regressions=[],
        recorded_at=T0,
    )
    return dataclasses.replace(recorded, **overrides)


def test_record_inserts_then_replaces_an_occurrences_follow_through(store: SqlStore) -> None:
    schedule_id = insert_schedule(store)
    first, second = occurrence(store, schedule_id, 1), occurrence(store, schedule_id, 2)
    regressed = follow_through(
        second,
        "regressed",
        previous_run_id=first.run_id,
        regressions=[{"path": "rows", "previous": 10, "current": 2, "better": "higher"}],
        recorded_at=at(60),
    )
    with store.transaction() as tx:
        written = tx.follow_through.record(
            [follow_through(first, "finalize_timed_out", reason="the run had not ended")]
        )
        written |= tx.follow_through.record([follow_through(second, "ok"), regressed])
    assert written == {first.id, second.id}

    with store.transaction(readonly=True) as tx:
        found = tx.follow_through.get_many([first.id, second.id, "occ_unknown"])
        assert tx.follow_through.get_many([]) == {}
    assert found == {
        first.id: follow_through(first, "finalize_timed_out", reason="the run had not ended"),
        second.id: regressed,
    }


# --- last_status and last_run_id move forward only ----------------------------------------


def status_of(store: SqlStore, schedule_id: str) -> tuple[str | None, str | None]:
    with store.transaction(readonly=True) as tx:
        schedule = tx.schedules.get(TENANT, schedule_id)
    assert schedule is not None
    return schedule.last_run_id, schedule.last_status


def note_ended(store: SqlStore, *ended: tuple[Occurrence, str]) -> None:
    with store.transaction() as tx:
        tx.schedules.note_ended(
            [EndedStatus(o.schedule_id, o.run_id, status, o.occurrence_at) for o, status in ended]
        )


def test_note_ended_moves_forward_in_occurrence_time(store: SqlStore) -> None:
    schedule_id = insert_schedule(store)
    older, newer = occurrence(store, schedule_id, 1), occurrence(store, schedule_id, 2)

    note_ended(store, (older, "completed"))
    assert status_of(store, schedule_id) == (older.run_id, "completed")
    note_ended(store, (newer, "failed"))
    assert status_of(store, schedule_id) == (newer.run_id, "failed")
    # A late end of the older run (allow_all overlap) never overwrites the newer one.
    note_ended(store, (older, "timed_out"))
    assert status_of(store, schedule_id) == (newer.run_id, "failed")


def test_note_ended_applies_the_latest_occurrence_of_a_schedule_in_one_call(
    store: SqlStore,
) -> None:
    schedule_id, other_id = insert_schedule(store), insert_schedule(store)
    first, second, third = (occurrence(store, schedule_id, hour) for hour in (1, 2, 3))
    other = occurrence(store, other_id, 1)

    note_ended(store, (first, "completed"), (third, "failed"), (other, "canceled"), (second, "x"))

    assert status_of(store, schedule_id) == (third.run_id, "failed")
    assert status_of(store, other_id) == (other.run_id, "canceled")


def test_note_ended_changes_no_schedule_version(store: SqlStore) -> None:
    schedule_id = insert_schedule(store)
    note_ended(store, (occurrence(store, schedule_id, 1), "completed"))
    with store.transaction(readonly=True) as tx:
        schedule = tx.schedules.get(TENANT, schedule_id)
    assert schedule is not None and schedule.version == 1


def test_note_fired_moves_forward_and_the_end_of_its_occurrence_replaces_it(
    store: SqlStore,
) -> None:
    schedule_id = insert_schedule(store)
    older, newer = occurrence(store, schedule_id, 1), occurrence(store, schedule_id, 2)

    with store.transaction() as tx:
        tx.schedules.note_fired([Fired(schedule_id, newer.run_id)], at(10))
    assert status_of(store, schedule_id) == (newer.run_id, "fired")
    # A catch-up fires the older occurrence later: the fire time moves, the run shown not.
    with store.transaction() as tx:
        tx.schedules.note_fired([Fired(schedule_id, older.run_id)], at(20))
    with store.transaction(readonly=True) as tx:
        schedule = tx.schedules.get(TENANT, schedule_id)
    assert schedule is not None
    assert (schedule.last_fired_at, schedule.last_run_id, schedule.last_status) == (
        at(20),
        newer.run_id,
        "fired",
    )
    note_ended(store, (newer, "completed"))
    assert status_of(store, schedule_id) == (newer.run_id, "completed")
    # A dispatch of the same occurrence recorded again does not hide its outcome.
    with store.transaction() as tx:
        tx.schedules.note_fired([Fired(schedule_id, newer.run_id)], at(30))
    assert status_of(store, schedule_id) == (newer.run_id, "completed")


def test_note_fired_shows_the_latest_occurrence_of_a_page(store: SqlStore) -> None:
    schedule_id = insert_schedule(store)
    first, second = occurrence(store, schedule_id, 1), occurrence(store, schedule_id, 2)
    with store.transaction() as tx:
        tx.schedules.note_fired(
            [Fired(schedule_id, second.run_id), Fired(schedule_id, first.run_id)], at(10)
        )
    assert status_of(store, schedule_id) == (second.run_id, "fired")
    note_ended(store, (first, "completed"))
    assert status_of(store, schedule_id) == (second.run_id, "fired")


# --- members with a role --------------------------------------------------------------------


def test_subjects_with_role_lists_the_tenants_members_of_that_role_sorted(
    store: SqlStore,
) -> None:
    with store.transaction() as tx:
        for tenant, subject, role in [
            (TENANT, "zoe", Role.ADMIN),
            (TENANT, "bob", Role.ADMIN),
            (TENANT, "carl", Role.MEMBER),
            (OTHER_TENANT, "amy", Role.ADMIN),
        ]:
            tx.identity.upsert_member(tenant, subject, role, T0)
    with store.transaction(readonly=True) as tx:
        assert tx.identity.subjects_with_role(TENANT, Role.ADMIN) == ["bob", "zoe"]
        assert tx.identity.subjects_with_role(TENANT, Role.VIEWER) == []


# --- notifications --------------------------------------------------------------------------


def note(
    recipient: str = "alice", tenant: str = TENANT, kind: str = "regression"
) -> NewNotification:
    return NewNotification(
        id=new_id("ntf"),
        tenant=tenant,
        recipient=recipient,
        kind=kind,
        schedule_id="sch_1",
        occurrence_id="occ_1",
        run_id="run_1",
        title="nightly regressed",
        text="nightly: rows fell from 10 to 2",
        details={"regressions": [{"path": "rows", "previous": 10, "current": 2}]},
        event_id=new_id("evt"),
    )


def test_notifications_are_the_recipients_own_newest_first(store: SqlStore) -> None:
    mine = [note() for _ in range(3)]
    with store.transaction() as tx:
        tx.notifications.insert(mine[:2], at(1))
        tx.notifications.insert([note("bob"), note(tenant=OTHER_TENANT), mine[2]], at(2))

    with store.transaction(readonly=True) as tx:
        found = tx.notifications.find(TENANT, "alice", unread_only=False, at=Seek(10))
        foreign = tx.notifications.get(TENANT, "bob", mine[0].id)
    assert [n.id for n in found] == [mine[2].id, mine[1].id, mine[0].id]
    assert foreign is None
    newest = found[0]
    assert (newest.kind, newest.title, newest.text, newest.event_id) == (
        "regression",
        mine[2].title,
        mine[2].text,
        mine[2].event_id,
    )
    assert (newest.schedule_id, newest.occurrence_id, newest.run_id) == ("sch_1", "occ_1", "run_1")
    assert newest.details == mine[2].details
    assert (newest.created_at, newest.read_at) == (at(2), None)


def test_notifications_page_with_a_cursor(store: SqlStore) -> None:
    notes = [note() for _ in range(5)]
    with store.transaction() as tx:
        tx.notifications.insert(notes, T0)
    with store.transaction(readonly=True) as tx:
        first = tx.notifications.find(TENANT, "alice", unread_only=False, at=Seek(2))
        second = tx.notifications.find(
            TENANT, "alice", unread_only=False, at=Seek(2, first[-1].seq)
        )
        last = tx.notifications.find(TENANT, "alice", unread_only=False, at=Seek(2, second[-1].seq))
        oldest = tx.notifications.find(TENANT, "alice", unread_only=False, at=Seek(3, None, OLDEST))
        rest = tx.notifications.find(
            TENANT, "alice", unread_only=False, at=Seek(3, oldest[-1].seq, OLDEST)
        )
    assert [n.id for n in first + second + last] == [n.id for n in reversed(notes)]
    assert [n.id for n in oldest + rest] == [n.id for n in notes]


def test_mark_read_is_idempotent_and_the_unread_filter_hides_read_ones(
    store: SqlStore,
) -> None:
    read, unread = note(), note()
    with store.transaction() as tx:
        tx.notifications.insert([read, unread], T0)
    with store.transaction() as tx:
        marked = tx.notifications.mark_read(TENANT, "alice", read.id, at(5))
        again = tx.notifications.mark_read(TENANT, "alice", read.id, at(9))
        assert tx.notifications.mark_read(TENANT, "bob", unread.id, at(9)) is None
    assert marked is not None and again is not None
    assert marked.read_at == again.read_at == at(5)

    with store.transaction(readonly=True) as tx:
        unread_only = tx.notifications.find(TENANT, "alice", unread_only=True, at=Seek(10))
        still_unread = tx.notifications.get(TENANT, "alice", unread.id)
    assert [n.id for n in unread_only] == [unread.id]
    assert still_unread is not None and still_unread.read_at is None


# --- webhooks -------------------------------------------------------------------------------

URL = EncryptedInput("k1", b"sealed-url")
SECRET = EncryptedInput("k1", b"sealed-secret")


def insert_webhook(
    store: SqlStore, events: list[str] | None = None, tenant: str = TENANT, secret: bool = True
) -> str:
    webhook_id = new_id("whk")
    with store.transaction() as tx:
        tx.webhooks.insert(
            NewWebhook(
                id=webhook_id,
                tenant=tenant,
                url=URL,
                url_display="https://hooks.example.com/…",
                secret=SECRET if secret else None,
                events=events or [],
                created_by="alice",
            ),
            T0,
        )
    return webhook_id


def test_a_webhook_is_stored_with_its_encrypted_url_and_secret(store: SqlStore) -> None:
    webhook_id = insert_webhook(store, ["regression"])
    plain = insert_webhook(store, secret=False)
    with store.transaction(readonly=True) as tx:
        hook = tx.webhooks.get(TENANT, webhook_id)
        without_secret = tx.webhooks.get(TENANT, plain)
        assert tx.webhooks.get(OTHER_TENANT, webhook_id) is None
    assert hook is not None and without_secret is not None
    assert (hook.url, hook.secret, hook.events) == (URL, SECRET, ["regression"])
    assert (hook.url_display, hook.created_by) == ("https://hooks.example.com/…", "alice")
    assert (hook.created_at, hook.updated_at) == (T0, T0)
    assert without_secret.secret is None


def test_update_changes_only_the_fields_given(store: SqlStore) -> None:
    webhook_id = insert_webhook(store, ["regression"])
    rotated = EncryptedInput("k2", b"new-secret")
    moved = EncryptedInput("k2", b"new-url")
    with store.transaction() as tx:
        after_secret = tx.webhooks.update(TENANT, webhook_id, at(5), secret=rotated)
        after_url = tx.webhooks.update(
            TENANT, webhook_id, at(6), url=moved, url_display="https://other.example/…", events=[]
        )
        cleared = tx.webhooks.update(TENANT, webhook_id, at(7), secret=None)
        assert tx.webhooks.update(OTHER_TENANT, webhook_id, at(8), events=[]) is None
        with pytest.raises(ValueError):
            tx.webhooks.update(TENANT, webhook_id, at(8), created_by="mallory")
    assert after_secret is not None and after_url is not None and cleared is not None
    assert (after_secret.secret, after_secret.url, after_secret.events) == (
        rotated,
        URL,
        ["regression"],
    )
    assert (after_url.url, after_url.url_display, after_url.events) == (
        moved,
        "https://other.example/…",
        [],
    )
    assert (cleared.secret, cleared.url, cleared.updated_at) == (None, moved, at(7))


def test_find_pages_live_webhooks_and_a_deleted_one_is_gone(store: SqlStore) -> None:
    ids = [insert_webhook(store) for _ in range(3)]
    insert_webhook(store, tenant=OTHER_TENANT)
    with store.transaction() as tx:
        assert tx.webhooks.delete(TENANT, ids[1], at(1))
        assert not tx.webhooks.delete(TENANT, ids[1], at(2))
        assert not tx.webhooks.delete(OTHER_TENANT, ids[0], at(2))
        assert tx.webhooks.update(TENANT, ids[1], at(3), events=[]) is None
    with store.transaction(readonly=True) as tx:
        first = tx.webhooks.find(TENANT, Seek(1, None, OLDEST))
        rest = tx.webhooks.find(TENANT, Seek(10, first[-1].seq, OLDEST))
        newest = tx.webhooks.find(TENANT, Seek(10))
        assert tx.webhooks.get(TENANT, ids[1]) is None
    assert [hook.id for hook in first + rest] == [ids[0], ids[2]]
    assert [hook.id for hook in newest] == [ids[2], ids[0]]


def test_subscribed_filters_by_event_and_an_empty_list_means_every_kind(
    store: SqlStore,
) -> None:
    every = insert_webhook(store)
    regressions = insert_webhook(store, ["regression"])
    failures = insert_webhook(store, ["start_failed", "finalize_timed_out"])
    deleted = insert_webhook(store, ["regression"])
    insert_webhook(store, tenant=OTHER_TENANT)
    with store.transaction() as tx:
        tx.webhooks.delete(TENANT, deleted, T0)
    with store.transaction(readonly=True) as tx:
        for_regression = [h.id for h in tx.webhooks.subscribed(TENANT, "regression")]
        for_failure = [h.id for h in tx.webhooks.subscribed(TENANT, "start_failed")]
    assert for_regression == [every, regressions]
    assert for_failure == [every, failures]


def enqueue(store: SqlStore, webhook_id: str, now: datetime = T0, kind: str = "regression") -> str:
    delivery_id = new_id("dlv")
    with store.transaction() as tx:
        tx.webhooks.enqueue(
            [
                NewDelivery(
                    id=delivery_id,
                    tenant=TENANT,
                    webhook_id=webhook_id,
                    event_id=new_id("evt"),
                    kind=kind,
                    payload={"text": "nightly regressed", "event": kind, "data": {"rows": 2}},
                )
            ],
            now,
        )
    return delivery_id


def claim_deliveries(
    store: SqlStore, now: datetime, lease: float = 30, limit: int = 10
) -> dict[str, str]:
    """Delivery id -> claim token."""
    with store.transaction() as tx:
        return {c.id: c.claim_token for c in tx.webhooks.claim_due(now, lease, limit)}


def outcome(
    delivery_id: str,
    token: str,
    status: str = "delivered",
    code: int | None = 200,
    error: str | None = None,
    retry_at: datetime | None = None,
) -> DeliveryOutcome:
    return DeliveryOutcome(delivery_id, token, status, code, error, retry_at)


def test_an_enqueued_delivery_is_claimed_with_what_it_needs_to_send(store: SqlStore) -> None:
    webhook_id = insert_webhook(store)
    delivery_id = enqueue(store, webhook_id, at(1))

    with store.transaction() as tx:
        assert tx.webhooks.claim_due(at(0), 30, 10) == []  # not due before it was written
        [claimed] = tx.webhooks.claim_due(at(1), 30, 10)
        stored = tx.webhooks.get_delivery(TENANT, webhook_id, delivery_id)
    assert (claimed.id, claimed.tenant, claimed.webhook_id, claimed.kind) == (
        delivery_id,
        TENANT,
        webhook_id,
        "regression",
    )
    assert claimed.payload == {
        "text": "nightly regressed",
        "event": "regression",
        "data": {"rows": 2},
    }
    assert (claimed.url, claimed.secret, claimed.attempts) == (URL, SECRET, 0)
    assert claimed.claim_token and claimed.created_at == at(1)
    assert stored is not None
    assert (stored.status, stored.attempts, stored.next_attempt_at) == ("pending", 0, at(31))


def test_a_claimed_delivery_is_leased_and_due_again_with_a_new_token(store: SqlStore) -> None:
    webhook_id = insert_webhook(store)
    delivery_id = enqueue(store, webhook_id)

    first = claim_deliveries(store, T0, lease=30)
    assert claim_deliveries(store, at(29)) == {}  # leased: nobody else sends it
    second = claim_deliveries(store, at(30))  # the deliverer died: due again
    assert set(first) == set(second) == {delivery_id}
    assert first[delivery_id] != second[delivery_id]

    with store.transaction() as tx:
        # The first deliverer comes back late: its token is outdated and records nothing.
        assert tx.webhooks.settle([outcome(delivery_id, first[delivery_id])], at(31)) == set()
        recorded = tx.webhooks.settle([outcome(delivery_id, second[delivery_id])], at(32))
        stored = tx.webhooks.get_delivery(TENANT, webhook_id, delivery_id)
    assert recorded == {delivery_id}
    assert stored is not None
    assert (stored.status, stored.attempts, stored.last_status_code, stored.delivered_at) == (
        "delivered",
        1,
        200,
        at(32),
    )
    assert stored.next_attempt_at is None
    assert claim_deliveries(store, at(3600)) == {}


def test_claim_due_takes_the_oldest_due_first_within_its_limit(store: SqlStore) -> None:
    webhook_id = insert_webhook(store)
    later = enqueue(store, webhook_id, at(2))
    earlier = enqueue(store, webhook_id, at(1))
    with store.transaction() as tx:
        claimed = [c.id for c in tx.webhooks.claim_due(at(5), 30, 1)]
        assert tx.webhooks.claim_due(at(5), 30, 0) == []
    assert claimed == [earlier]
    assert list(claim_deliveries(store, at(5))) == [later]


def test_a_retry_is_due_at_its_next_attempt_and_a_failure_is_final(store: SqlStore) -> None:
    webhook_id = insert_webhook(store)
    delivery_id = enqueue(store, webhook_id)

    token = claim_deliveries(store, T0)[delivery_id]
    with store.transaction() as tx:
        retried = tx.webhooks.settle(
            [outcome(delivery_id, token, "pending", 503, "the receiver answered 503", at(60))],
            at(1),
        )
        # A claim is settled once: the same token again records nothing.
        assert tx.webhooks.settle([outcome(delivery_id, token)], at(2)) == set()
    assert retried == {delivery_id}
    assert claim_deliveries(store, at(59)) == {}
    token = claim_deliveries(store, at(60))[delivery_id]
    with store.transaction() as tx:
        tx.webhooks.settle(
            [outcome(delivery_id, token, "failed", None, "connection refused")], at(61)
        )
        stored = tx.webhooks.get_delivery(TENANT, webhook_id, delivery_id)
        assert tx.webhooks.count_failed(TENANT) == 1
        assert tx.webhooks.count_failed(OTHER_TENANT) == 0
    assert stored is not None
    assert (stored.status, stored.attempts, stored.last_status_code, stored.last_error) == (
        "failed",
        2,
        None,
        "connection refused",
    )
    assert (stored.next_attempt_at, stored.delivered_at) == (None, None)
    assert claim_deliveries(store, at(7200)) == {}


def test_a_deleted_webhooks_pending_deliveries_fail_and_are_never_claimed(
    store: SqlStore,
) -> None:
    webhook_id, kept = insert_webhook(store), insert_webhook(store)
    claimed_before = enqueue(store, webhook_id)
    waiting = enqueue(store, webhook_id)
    other = enqueue(store, kept)
    token = claim_deliveries(store, T0, limit=1)[claimed_before]
    with store.transaction() as tx:
        assert tx.webhooks.delete(TENANT, webhook_id, at(1))
        # The deliverer that held one reports after the delete: nothing is recorded.
        assert tx.webhooks.settle([outcome(claimed_before, token)], at(2)) == set()
        found = {d.id: d for d in tx.webhooks.deliveries(TENANT, webhook_id, Seek(10))}
        assert tx.webhooks.count_failed(TENANT) == 0  # nobody needs to act on these
    assert {d.status for d in found.values()} == {"failed"}
    assert {d.last_error for d in found.values()} == {"the webhook was deleted"}
    assert set(found) == {claimed_before, waiting}
    assert list(claim_deliveries(store, at(3600))) == [other]


def test_deliveries_list_newest_first_with_a_cursor(store: SqlStore) -> None:
    webhook_id, other = insert_webhook(store), insert_webhook(store)
    ids = [enqueue(store, webhook_id, at(i)) for i in range(3)]
    enqueue(store, other)
    with store.transaction(readonly=True) as tx:
        first = tx.webhooks.deliveries(TENANT, webhook_id, Seek(2))
        rest = tx.webhooks.deliveries(TENANT, webhook_id, Seek(2, first[-1].seq))
        oldest = tx.webhooks.deliveries(TENANT, webhook_id, Seek(2, None, OLDEST))
        later = tx.webhooks.deliveries(TENANT, webhook_id, Seek(2, oldest[-1].seq, OLDEST))
        assert tx.webhooks.deliveries(OTHER_TENANT, webhook_id, Seek(10)) == []
        assert tx.webhooks.get_delivery(TENANT, other, ids[0]) is None
    assert [d.id for d in first + rest] == list(reversed(ids))
    assert [d.id for d in oldest + later] == ids


def test_redeliver_sends_the_same_event_again_as_a_new_pending_delivery(
    store: SqlStore,
) -> None:
    webhook_id = insert_webhook(store)
    original_id = enqueue(store, webhook_id)
    token = claim_deliveries(store, T0)[original_id]
    with store.transaction() as tx:
        tx.webhooks.settle([outcome(original_id, token, "failed", 500, "answered 500")], at(1))
        original = tx.webhooks.get_delivery(TENANT, webhook_id, original_id)
        again = tx.webhooks.redeliver(TENANT, webhook_id, original_id, new_id("dlv"), at(10))
        assert (
            tx.webhooks.redeliver(TENANT, webhook_id, "dlv_unknown", new_id("dlv"), at(10)) is None
        )
    assert original is not None and again is not None
    assert (again.event_id, again.kind) == (original.event_id, original.kind)
    assert (again.status, again.attempts, again.next_attempt_at) == ("pending", 0, at(10))
    assert again.id != original.id

    with store.transaction() as tx:
        [claimed] = tx.webhooks.claim_due(at(10), 30, 10)
        tx.webhooks.delete(TENANT, webhook_id, at(11))
        assert tx.webhooks.redeliver(TENANT, webhook_id, original_id, new_id("dlv"), at(12)) is None
    assert claimed.id == again.id
    assert claimed.payload == {
        "text": "nightly regressed",
        "event": "regression",
        "data": {"rows": 2},
    }


def test_settle_refuses_an_outcome_it_cannot_record(store: SqlStore) -> None:
    webhook_id = insert_webhook(store)
    delivery_id = enqueue(store, webhook_id)
    token = claim_deliveries(store, T0)[delivery_id]
    with store.transaction() as tx:
        with pytest.raises(ValueError):
            tx.webhooks.settle([outcome(delivery_id, token, "sent")], at(1))
        with pytest.raises(ValueError):
            tx.webhooks.settle([outcome(delivery_id, token, "pending", 503)], at(1))


@pytest.mark.postgres
def test_concurrent_deliverers_skip_the_deliveries_another_one_holds(pg_url: str) -> None:
    store = SqlStore(pg_url)
    try:
        webhook_id = insert_webhook(store)
        ids = [enqueue(store, webhook_id, at(i)) for i in range(4)]
        with store.transaction() as first:
            held = [c.id for c in first.webhooks.claim_due(at(10), 30, 2)]
            with store.transaction(lock_timeout=2) as second:
                other = [c.id for c in second.webhooks.claim_due(at(10), 30, 10)]
        assert held == ids[:2]
        assert other == ids[2:]
    finally:
        store.dispose()
