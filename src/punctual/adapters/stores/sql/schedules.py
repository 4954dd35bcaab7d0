"""Schedules: insert, read, compare-and-set, and the generation pass's claims."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import (
    for_update,
    insert_ignore,
    is_unique_violation,
    lock_name,
    update_many,
    upsert,
)
from punctual.adapters.stores.sql.reads import first_record, paged
from punctual.domain.ids import new_id
from punctual.domain.schedule_audit import EventKind, ScheduleEvent
from punctual.domain.schedules import (
    SETTINGS,
    MissedPolicy,
    OverlapPolicy,
    Schedule,
    SchedulePolicy,
    VersionPolicy,
    blackouts_from_json,
    blackouts_to_json,
    calendar_from_json,
    calendar_to_json,
    spec_from_json,
    spec_to_json,
    timing_from_json,
    timing_to_json,
)
from punctual.errors import RaceLost
from punctual.ports.records import (
    CursorMove,
    DueSchedule,
    EncryptedInput,
    EndedStatus,
    Fired,
    NewSchedule,
    Seek,
)

_c = t.schedules.c
_MILLISECOND = timedelta(milliseconds=1)
_st = t.schedule_status.c
_LIVE_NAME = next(index for index in t.schedules.indexes if index.name == "uq_schedules_live_name")


def _name_taken() -> RaceLost:
    return RaceLost(
        "a live schedule of this tenant already has this name; choose another name or edit "
        "that schedule",
        code="name_taken",
    )


def _with_status() -> sa.Select[Any]:
    """Schedules with their bookkeeping (a row of ``schedule_status`` once they fired)."""
    return sa.select(t.schedules, _st.last_fired_at, _st.last_run_id, _st.last_status).select_from(
        t.schedules.outerjoin(t.schedule_status, _st.schedule_id == _c.id)
    )


def _event_timing(event: ScheduleEvent) -> dict[str, Any] | None:
    """An event's timing as JSON, the one it replaced under ``previous``."""
    if event.timing is None:
        return None
    data = timing_to_json(event.timing)
    if event.previous is not None:
        data["previous"] = timing_to_json(event.previous)
    return data


def _event(row: RowMapping) -> ScheduleEvent:
    data = row["timing"]
    previous = data.get("previous") if data is not None else None
    return ScheduleEvent(
        EventKind(row["kind"]),
        row["at"],
        row["by"],
        timing=timing_from_json(data) if data is not None else None,
        until=row["until"],
        previous=timing_from_json(previous) if previous is not None else None,
    )


def schedule_from_row(row: RowMapping) -> Schedule:
    window = row["catch_up_window_seconds"]
    return Schedule(
        id=row["id"],
        tenant=row["tenant"],
        name=row["name"],
        workflow=row["workflow"],
        specs=tuple(
            spec_from_json(dict(spec)) for spec in [row["spec"], *(row["more_specs"] or ())]
        ),
        policy=SchedulePolicy(
            overlap=OverlapPolicy(row["overlap"]),
            missed=MissedPolicy(row["missed"]),
            max_catch_up=row["max_catch_up"],
            catch_up_window=timedelta(seconds=window) if window is not None else None,
            misfire_grace=timedelta(milliseconds=row["misfire_grace_ms"]),
            jitter=timedelta(milliseconds=row["jitter_ms"]),
            blackouts=blackouts_from_json(row["blackouts"] or []),
            start_deadline=(
                timedelta(milliseconds=row["start_deadline_ms"])
                if row["start_deadline_ms"] is not None
                else None
            ),
        ),
        enabled=bool(row["enabled"]),
        version=row["version"],
        revision=row["revision"],
        version_policy=VersionPolicy(row["version_policy"]),
        pinned_version=row["pinned_version"],
        workload_class=row["workload_class"],
        regression=row["regression"],
        created_by=row["created_by"],
        cursor=row["cursor"],
        next_fire_at=row["next_fire_at"],
        last_fired_at=row["last_fired_at"],
        last_run_id=row["last_run_id"],
        last_status=row["last_status"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        deleted_at=row["deleted_at"],
        end_at=row["end_at"],
        max_occurrences=row["max_occurrences"],
        fires_counted=row["fires_counted"],
        source=row["source"],
        pause_until=row["pause_until"],
        calendar=calendar_from_json(row["calendar"]) if row["calendar"] is not None else None,
    )


def policy_columns(policy: SchedulePolicy) -> dict[str, Any]:
    window = policy.catch_up_window
    return {
        "overlap": policy.overlap.value,
        "missed": policy.missed.value,
        "max_catch_up": policy.max_catch_up,
        "catch_up_window_seconds": window.total_seconds() if window is not None else None,
        "misfire_grace_ms": policy.misfire_grace // _MILLISECOND,
        "jitter_ms": policy.jitter // _MILLISECOND,
        "blackouts": blackouts_to_json(policy.blackouts),
        "start_deadline_ms": (
            policy.start_deadline // _MILLISECOND if policy.start_deadline is not None else None
        ),
    }


def schedule_columns(values: dict[str, Any]) -> dict[str, Any]:
    """A schedule's attributes (settings or state) as its columns: the spec as JSON, the
    policy spread over its columns, the input and its key apart, enums as their values."""
    columns = dict(values)
    if "specs" in columns:
        # The first spec in ``spec`` (every schedule has it), the others in ``more_specs``.
        first, *more = (spec_to_json(spec) for spec in columns.pop("specs"))
        columns.update(spec=first, more_specs=more or None)
    if "calendar" in columns:
        columns["calendar"] = calendar_to_json(columns["calendar"])
    if "policy" in columns:
        columns.update(policy_columns(columns.pop("policy")))
    if "input" in columns and isinstance(columns["input"], EncryptedInput):
        encrypted = columns.pop("input")
        columns.update(input=encrypted.ciphertext, input_key_id=encrypted.key_id)
    return {k: v.value if isinstance(v, StrEnum) else v for k, v in columns.items()}


class SqlSchedules:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def insert(self, new: NewSchedule, now: datetime) -> Schedule:
        """Raises ``RaceLost`` ``name_taken`` when a concurrent create or rename took the
        name after the caller checked it (the unique index is the last word)."""
        settings = {name: getattr(new.settings, name) for name in SETTINGS}
        self._execute_naming(
            sa.insert(t.schedules).values(
                **schedule_columns(settings | {"input": new.input}),
                id=new.id,
                tenant=new.tenant,
                version=1,
                revision=1,
                pinned_version=new.pinned_version,
                created_by=new.created_by,
                cursor=new.cursor,
                next_fire_at=new.next_fire_at,
                created_at=now,
                updated_at=now,
            )
        )
        created = self.get(new.tenant, new.id)
        assert created is not None
        return created

    def get(
        self, tenant: str, schedule_id: str, *, lock: bool = False, deleted: bool = False
    ) -> Schedule | None:
        query = _with_status().where(_c.tenant == tenant, _c.id == schedule_id)
        if not deleted:
            query = query.where(_c.deleted_at.is_(None))
        if lock:
            query = for_update(query, self._conn, of=t.schedules)
        return first_record(self._conn, query, schedule_from_row)

    def _execute_naming(self, statement: sa.Executable) -> sa.CursorResult[Any]:
        """Run an insert or update that may set a name, mapping a lost race for the name."""
        try:
            return self._conn.execute(statement)
        except sa.exc.IntegrityError as exc:
            if is_unique_violation(exc, _LIVE_NAME):
                raise _name_taken() from exc
            raise

    def lock_for_create(self, tenant: str) -> None:
        """Creates of one tenant's schedules take turns until commit, so each one's count
        and name check see every earlier create (exact ``max_schedules`` across processes)."""
        lock_name(self._conn, f"punctual.schedules:{tenant}")

    def name_taken(self, tenant: str, name: str, other_than: str | None = None) -> bool:
        query = sa.select(_c.id).where(
            _c.tenant == tenant, _c.name == name, _c.deleted_at.is_(None)
        )
        if other_than is not None:
            query = query.where(_c.id != other_than)
        return self._conn.execute(query).first() is not None

    def count_live(self, tenant: str) -> int:
        query = sa.select(sa.func.count()).where(_c.tenant == tenant, _c.deleted_at.is_(None))
        return int(self._conn.execute(query).scalar_one())

    def find(
        self, tenant: str, at: Seek[int], source: str | None = None
    ) -> list[tuple[int, Schedule]]:
        query = _with_status().where(_c.tenant == tenant, _c.deleted_at.is_(None))
        if source is not None:
            query = query.where(_c.source == source)
        query = paged(query, _c.seq, at)
        return [(r["seq"], schedule_from_row(r)) for r in self._conn.execute(query).mappings()]

    def by_name(self, tenant: str, name: str, *, lock: bool = False) -> Schedule | None:
        query = _with_status().where(_c.tenant == tenant, _c.name == name, _c.deleted_at.is_(None))
        if lock:
            query = for_update(query, self._conn, of=t.schedules)
        return first_record(self._conn, query, schedule_from_row)

    def by_creator(self, tenant: str, subject: str) -> list[Schedule]:
        query = _with_status().where(
            _c.tenant == tenant, _c.created_by == subject, _c.deleted_at.is_(None)
        )
        return [schedule_from_row(r) for r in self._conn.execute(query).mappings()]

    def count_using(self, workflow: str, version: str) -> tuple[int, int]:
        """Live schedules (paused included) of ``workflow``: (pinned to ``version``,
        following the active version)."""
        live = sa.and_(_c.workflow == workflow, _c.deleted_at.is_(None))
        pinned = self._conn.execute(
            sa.select(sa.func.count()).where(
                live, _c.version_policy == "pinned", _c.pinned_version == version
            )
        ).scalar_one()
        following = self._conn.execute(
            sa.select(sa.func.count()).where(live, _c.version_policy == "active_at_fire")
        ).scalar_one()
        return int(pinned), int(following)

    def input_of(self, schedule_id: str) -> EncryptedInput:
        row = self._conn.execute(
            sa.select(_c.input, _c.input_key_id).where(_c.id == schedule_id)
        ).one()
        return EncryptedInput(row.input_key_id, row.input)

    def compare_and_set(
        self, schedule_id: str, expected_version: int, now: datetime, **changes: Any
    ) -> bool:
        """A user mutation (or auto-disable): applies and bumps ``version`` (RS-6)."""
        changes = schedule_columns(changes)
        status = changes.pop("last_status", None)
        result = self._execute_naming(
            sa.update(t.schedules)
            .where(_c.id == schedule_id, _c.version == expected_version)
            .values(version=_c.version + 1, updated_at=now, **changes)
        )
        if result.rowcount != 1:
            return False
        if status is not None:
            # Stamped with now, so the end of a run of an earlier occurrence cannot hide
            # why the schedule stopped (CR-3; forward-only, CR-4).
            upsert(
                self._conn,
                t.schedule_status,
                [{"schedule_id": schedule_id, "last_status": status, "status_occurrence_at": now}],
                ["schedule_id"],
            )
        return True

    def get_many(self, schedule_ids: Collection[str]) -> dict[str, Schedule]:
        if not schedule_ids:
            return {}
        query = _with_status().where(_c.id.in_(sorted(schedule_ids)))
        return {r["id"]: schedule_from_row(r) for r in self._conn.execute(query).mappings()}

    def claim_due_for_generation(self, horizon: datetime, limit: int) -> list[DueSchedule]:
        """Lock up to ``limit`` enabled schedules whose next fire is at or before ``horizon``.

        The row lock is the schedule lock of RS-5: the caller generates occurrences and
        moves the cursor in this same transaction; other runners skip locked schedules.
        The lock is taken by the select that returns the rows, so each row is the version
        that was locked: an edit that committed while the pass was on its way is planned
        from, never an older snapshot of the row.
        """
        due = (
            _with_status()
            .where(_c.enabled, _c.deleted_at.is_(None), _c.next_fire_at <= horizon)
            .order_by(_c.next_fire_at)
            .limit(limit)
        )
        rows = self._conn.execute(
            for_update(due, self._conn, of=t.schedules, skip_locked=True)
        ).mappings()
        claimed = [
            DueSchedule(schedule_from_row(r), EncryptedInput(r["input_key_id"], r["input"]))
            for r in rows
        ]
        return sorted(claimed, key=lambda d: d.schedule.next_fire_at or d.schedule.cursor)

    def move_cursors(self, moves: Sequence[CursorMove]) -> set[str]:
        """Moves with a ``planned_version`` apply only while the schedule is still at it,
        so a plan never overwrites an edit; returns the ids of the schedules moved. A move
        with ``fires_counted`` also sets the count (the caller holds the schedule)."""
        moved: set[str] = set()
        for planned in (True, False):
            for counted in (True, False):
                group = [
                    m
                    for m in moves
                    if (m.planned_version is not None) is planned
                    and (m.fires_counted is not None) is counted
                ]
                match = ["id", "version"] if planned else ["id"]
                columns = ["cursor", "next_fire_at", *(["fires_counted"] if counted else [])]
                rows = [
                    {
                        "id": m.schedule_id,
                        "version": m.planned_version,
                        "cursor": m.cursor,
                        "next_fire_at": m.next_fire_at,
                        "fires_counted": m.fires_counted,
                    }
                    for m in group
                ]
                moved |= update_many(
                    self._conn,
                    t.schedules,
                    [{k: row[k] for k in [*match, *columns]} for row in rows],
                    match=match,
                    columns=columns,
                )
        return moved

    def note_ended(self, ended: Sequence[EndedStatus]) -> None:
        """Of several ends of one schedule, the one of the latest occurrence is applied;
        an end of the occurrence already shown replaces it (``fired`` becomes the run's
        outcome)."""
        latest: dict[str, EndedStatus] = {}
        for end in ended:
            shown = latest.get(end.schedule_id)
            if shown is None or end.occurrence_at >= shown.occurrence_at:
                latest[end.schedule_id] = end
        if not latest:
            return
        order = sorted(latest)
        self._ensure_status_rows(order)
        self._conn.execute(
            sa.update(t.schedule_status)
            .where(
                _st.schedule_id == sa.bindparam("b_schedule_id"),
                sa.or_(
                    _st.status_occurrence_at.is_(None),
                    _st.status_occurrence_at <= sa.bindparam("b_occurrence_at"),
                ),
            )
            .values(
                last_run_id=sa.bindparam("b_run_id"),
                last_status=sa.bindparam("b_status"),
                status_occurrence_at=sa.bindparam("b_occurrence_at"),
            ),
            [
                {
                    "b_schedule_id": sid,
                    "b_run_id": latest[sid].run_id,
                    "b_status": latest[sid].status,
                    "b_occurrence_at": latest[sid].occurrence_at,
                }
                for sid in order
            ],
        )

    def note_fired(self, fired: Sequence[Fired], at: datetime) -> None:
        """``last_fired_at`` always moves; ``last_run_id``/``last_status`` only for an
        occurrence newer than the one shown (a catch-up of older occurrences, or a
        dispatch retried after its run ended, never hides a newer outcome). The
        occurrences' times are read from the starts that allocated the runs."""
        if not fired:
            return
        occurrence_at = self._occurrence_times([f.run_id for f in fired])
        latest: dict[str, tuple[str, datetime | None]] = {}
        for f in fired:
            when = occurrence_at.get(f.run_id)
            shown = latest.get(f.schedule_id)
            if shown is None or shown[1] is None or (when is not None and when >= shown[1]):
                latest[f.schedule_id] = (f.run_id, when)
        order = sorted(latest)
        self._ensure_status_rows(order)
        newer = sa.or_(
            _st.status_occurrence_at.is_(None),
            _st.status_occurrence_at < sa.bindparam("b_occurrence_at"),
        )
        self._conn.execute(
            sa.update(t.schedule_status)
            .where(_st.schedule_id == sa.bindparam("b_schedule_id"))
            .values(
                last_fired_at=sa.bindparam("b_fired_at"),
                last_run_id=sa.case((newer, sa.bindparam("b_run_id")), else_=_st.last_run_id),
                last_status=sa.case((newer, sa.literal("fired")), else_=_st.last_status),
                status_occurrence_at=sa.case(
                    (newer, sa.bindparam("b_occurrence_at")), else_=_st.status_occurrence_at
                ),
            ),
            [
                {
                    "b_schedule_id": sid,
                    "b_fired_at": at,
                    "b_run_id": latest[sid][0],
                    "b_occurrence_at": latest[sid][1],
                }
                for sid in order
            ],
        )

    def _occurrence_times(self, run_ids: Sequence[str]) -> dict[str, datetime]:
        query = sa.select(t.starts.c.run_id, t.starts.c.occurrence_at).where(
            t.starts.c.run_id.in_(sorted(set(run_ids))), t.starts.c.occurrence_at.is_not(None)
        )
        return {row.run_id: row.occurrence_at for row in self._conn.execute(query)}

    def _ensure_status_rows(self, schedule_ids: Sequence[str]) -> None:
        """A bookkeeping row for each schedule (in id order, so concurrent writers lock
        rows in one order); the conditional updates above then decide what moves."""
        insert_ignore(
            self._conn,
            t.schedule_status,
            [{"schedule_id": sid} for sid in schedule_ids],
            ["schedule_id"],
        )

    def earliest_generation(self) -> datetime | None:
        query = sa.select(sa.func.min(_c.next_fire_at)).where(_c.enabled, _c.deleted_at.is_(None))
        value: datetime | None = self._conn.execute(query).scalar_one_or_none()
        return value

    def record_event(self, tenant: str, schedule_id: str, event: ScheduleEvent) -> None:
        self._conn.execute(
            sa.insert(t.schedule_events).values(
                id=new_id("sev"),
                tenant=tenant,
                schedule_id=schedule_id,
                at=event.at,
                kind=event.kind.value,
                by=event.by[:200],
                timing=_event_timing(event),
                until=event.until,
            )
        )

    def events(self, schedule_id: str) -> list[ScheduleEvent]:
        e = t.schedule_events.c
        query = (
            sa.select(t.schedule_events).where(e.schedule_id == schedule_id).order_by(e.at, e.id)
        )
        return [_event(row) for row in self._conn.execute(query).mappings()]

    def lock_for_dispatch(self, schedule_id: str) -> Schedule | None:
        """Serialize overlap decisions of one schedule across runners (RS-3)."""
        query = for_update(_with_status().where(_c.id == schedule_id), self._conn, of=t.schedules)
        return first_record(self._conn, query, schedule_from_row)
