"""The Store contract of recording a driver's own skips (RS-4 under CR-6).

``Starts.latest_fired_before`` and ``ScheduleSync.skip_marks``/``record_skip_mark`` as
named tests, over a real SQLite file and a fresh PostgreSQL database (``database_url``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from punctual.adapters.stores.sql.store import SqlStore
from punctual.domain.ids import new_id
from punctual.domain.recurrence import IntervalSpec
from punctual.domain.schedules import MissedPolicy, OverlapPolicy, SchedulePolicy, ScheduleSettings
from punctual.ports.driver import SkipMark, SyncRecord, SyncState
from punctual.ports.records import EncryptedInput, NewOccurrence, NewSchedule

T0 = datetime(2026, 12, 8, 12, 0, tzinfo=UTC)
TENANT = "acme"
INPUT = EncryptedInput("k1", b"\x00sealed\xff")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def insert_schedule(store: SqlStore) -> str:
    schedule_id = new_id("sch")
    with store.transaction() as tx:
        tx.schedules.insert(
            NewSchedule(
                id=schedule_id,
                tenant=TENANT,
                settings=ScheduleSettings(
                    name=f"every-second-{schedule_id}",
                    workflow="report",
                    specs=(IntervalSpec(interval_ms=1000, starts_at=T0),),
                    policy=SchedulePolicy(OverlapPolicy.SKIP, MissedPolicy.SKIP),
                    workload_class="default",
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


def occurrence(
    schedule_id: str, seconds: float, *, state: str = "scheduled", origin: str = "schedule"
) -> NewOccurrence:
    return NewOccurrence(
        id=new_id("occ"),
        tenant=TENANT,
        schedule_id=schedule_id,
        revision=1,
        workflow="report",
        workload_class="default",
        input=INPUT,
        created_by="alice",
        business_request_id=f"{schedule_id}@{seconds}",
        occurrence_at=at(seconds),
        due_at=at(seconds),
        nominal=None,
        dst_adjustment=None,
        run_id=new_id("run"),
        state=state,
        reason="overlap" if state == "skipped" else None,
        origin=origin,
    )


def test_latest_fired_before_is_the_latest_own_fire_not_skipped_strictly_before(
    store: SqlStore,
) -> None:
    schedule_id = insert_schedule(store)
    other_id = insert_schedule(store)
    failed = occurrence(schedule_id, 0, state="failed")
    fired = occurrence(schedule_id, 1)
    with store.transaction() as tx:
        tx.starts.insert_occurrences(
            [
                failed,
                fired,
                occurrence(schedule_id, 2, state="skipped"),
                occurrence(schedule_id, 3, origin="trigger"),
                occurrence(schedule_id, 4, origin="backfill"),
                occurrence(schedule_id, 5),
                occurrence(other_id, 4),
            ],
            T0,
        )
    with store.transaction(readonly=True) as tx:
        found = tx.starts.latest_fired_before(schedule_id, at(5))
        assert found is not None and found.occurrence.id == fired.id
        assert found.rerun == 0
        earlier = tx.starts.latest_fired_before(schedule_id, at(1))
        assert earlier is not None and earlier.occurrence.id == failed.id
        assert tx.starts.latest_fired_before(schedule_id, at(0)) is None
        assert tx.starts.latest_fired_before(new_id("sch"), at(9)) is None


def test_a_skip_mark_lives_on_the_sync_record_and_survives_its_rewrites(store: SqlStore) -> None:
    schedule_id = insert_schedule(store)
    mark = SkipMark(schedule_id, at(30), 3)
    with store.transaction() as tx:
        tx.schedule_sync.record_skip_mark(mark)  # no sync record yet: nothing kept
        assert tx.schedule_sync.skip_marks([schedule_id]) == {}
        tx.schedule_sync.record(SyncRecord(schedule_id, SyncState.IN_SYNC, T0, [], "d1"))
        assert tx.schedule_sync.skip_marks([schedule_id]) == {}
        tx.schedule_sync.record_skip_mark(mark)
    with store.transaction() as tx:
        assert tx.schedule_sync.skip_marks([schedule_id]) == {schedule_id: mark}
        # The sweep rewrites the sync record every time: the mark stays.
        tx.schedule_sync.record(SyncRecord(schedule_id, SyncState.DRIFTED, at(60), [], None))
    with store.transaction() as tx:
        assert tx.schedule_sync.skip_marks([schedule_id, new_id("sch")]) == {schedule_id: mark}
        later = SkipMark(schedule_id, at(90), 4)
        tx.schedule_sync.record_skip_mark(later)
        assert tx.schedule_sync.skip_marks([schedule_id]) == {schedule_id: later}
        tx.schedule_sync.forget(schedule_id)
        assert tx.schedule_sync.skip_marks([schedule_id]) == {}
        assert tx.schedule_sync.skip_marks([]) == {}
