"""Scheduled starts: insert, read, compare-and-set, and the runner's claims."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import (
    claimable,
    constants,
    for_update,
    insert_ignore,
    lease_expiry,
    notify,
    store_now,
    update_many,
)
from punctual.adapters.stores.sql.keys import key_usage
from punctual.adapters.stores.sql.listener import DUE_CHANNEL
from punctual.adapters.stores.sql.pending_counts import pending_by_class
from punctual.adapters.stores.sql.reads import first_record, paged, paged_within
from punctual.adapters.stores.sql.rows import (
    encrypted_columns,
    encrypted_from_row,
    last_error_to_json,
    record_columns,
    record_from_row,
    start_from_row,
)
from punctual.adapters.stores.sql.start_inserts import insert_starts
from punctual.domain.runs import RunState
from punctual.domain.schedule_audit import AuditRow
from punctual.domain.schedules import OccurrenceOrigin
from punctual.domain.starts import LastError, ScheduledStart, StartState
from punctual.domain.timeutil import to_rfc3339
from punctual.ports.records import (
    ClaimedStart,
    ClaimToken,
    DispatchedStart,
    NewOccurrence,
    NewStart,
    OccurrenceFilter,
    Seek,
    StartFilter,
    StoredOccurrence,
)

_s = t.starts.c
_PENDING = (StartState.SCHEDULED.value, StartState.DISPATCHING.value)
_TOKEN = ["id", "version", "claimed_by", "claim_seq"]
"""The columns a claim token matches on (FT-5), in the order of ``ClaimToken``'s fields."""


def _token_row(claim: ClaimToken) -> dict[str, Any]:
    return dict(zip(_TOKEN, astuple(claim), strict=True))


def _held(conn: sa.Connection, now: datetime) -> list[sa.ColumnElement[bool]]:
    """Still dispatching under a lease that has not run out by the store's clock (the
    database's on PostgreSQL, the process clock ``now`` on SQLite, FT-2)."""
    return [_s.state == StartState.DISPATCHING.value, _s.lease_until >= store_now(conn, now)]


def _transition(now: datetime, **changes: Any) -> dict[str, Any]:
    """The values of a user-visible transition (OS-7): ``changes`` (a ``LastError`` as its
    JSON), the next version and ``updated_at``."""
    if isinstance(changes.get("last_error"), LastError):
        changes["last_error"] = last_error_to_json(changes["last_error"])
    return {"version": _s.version + 1, "updated_at": now, **changes}


def _origin(row: RowMapping) -> dict[str, Any]:
    """The origin a run carries (CR-1); a triggered or backfilled occurrence's run says so."""
    if row["schedule_id"] is None:
        return {"source": "scheduled_start", "id": row["id"]}
    origin = {
        "source": "schedule",
        "id": row["id"],
        "schedule_id": row["schedule_id"],
        "occurrence_at": to_rfc3339(row["occurrence_at"]),
    }
    if row["origin"] not in (None, OccurrenceOrigin.SCHEDULE.value):
        origin["occurrence_origin"] = row["origin"]
    return origin


# Written out: an UPDATE's RETURNING names the updated row's columns unqualified, so the
# correlation to it is spelt with the table's name.
_PREVIOUS_COMPLETED_RUN: sa.Label[str | None] = sa.literal_column(
    "(SELECT earlier_run.id FROM starts AS earlier "
    "JOIN runs AS earlier_run ON earlier_run.id = earlier.run_id "
    "WHERE earlier.schedule_id = starts.schedule_id "
    "AND earlier.occurrence_at < starts.occurrence_at "
    f"AND earlier_run.state = '{RunState.COMPLETED.value}' "
    "ORDER BY earlier.occurrence_at DESC LIMIT 1)"
).label("previous_completed_run_id")
"""An occurrence's schedule's latest run that completed before it, as its claim sees it:
down the schedule's (schedule_id, occurrence_at) index from the occurrence. Null for a
one-off start, whose schedule_id matches nothing."""


def _occurrence_context(row: RowMapping) -> dict[str, Any]:
    """What a claimed occurrence's run is told about it beyond its origin (``ctx.occurrence``):
    when it was scheduled (jitter and lateness included) and the schedule's previous run
    that completed, at the time of the claim."""
    if row["schedule_id"] is None:
        return {}
    context = {
        "scheduled_at": to_rfc3339(row["start_at"]),
        "previous_completed_run_id": row["previous_completed_run_id"],
    }
    if row["start_deadline_at"] is not None:  # the worker never begins the body after it
        context["start_deadline_at"] = to_rfc3339(row["start_deadline_at"])
    return context


def _occurrence_from_row(row: RowMapping) -> ScheduledStart:
    return replace(start_from_row(row), origin=_origin(row))


def _stored_occurrence(row: RowMapping) -> StoredOccurrence:
    return StoredOccurrence(_occurrence_from_row(row), row["rerun"])


_QUEUED_BACKFILL = sa.and_(
    _s.state == StartState.BUFFERED.value,
    _s.origin == OccurrenceOrigin.BACKFILL.value,
    _s.overlap.is_(None),
)
"""Backfilled occurrences waiting their turn: they dispatch one after another (RS-9b)."""


class SqlStarts:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def insert(self, new: NewStart, now: datetime) -> ScheduledStart:
        return insert_starts(self._conn, [new], now)[0]

    def insert_many(self, new: Sequence[NewStart], now: datetime) -> list[ScheduledStart]:
        return insert_starts(self._conn, new, now)

    def pending_by_class(self, tenant: str) -> dict[str, int]:
        return pending_by_class(self._conn, tenant)

    def insert_occurrences(self, occurrences: Sequence[NewOccurrence], now: datetime) -> int:
        """Insert occurrences; one already present for (schedule, occurrence_at) is kept
        as it is (RS-5: after a commit the same occurrence is retried, never regenerated)."""
        rows = [
            record_columns(
                o,
                **encrypted_columns("input", o.input),
                # What ``scheduled_at`` shows: jitter and a catch-up's lateness included.
                start_at=o.due_at,
                attributes={},
                version=1,
                attempts=0,
                created_at=now,
                updated_at=now,
            )
            for o in occurrences
        ]
        return insert_ignore(self._conn, t.starts, rows, ["schedule_id", "occurrence_at", "rerun"])

    def occurrences_between(
        self, schedule_id: str, after: datetime, until: datetime
    ) -> list[StoredOccurrence]:
        """Every row of the schedule with ``occurrence_at`` in ``(after, until]``, history
        included, in instant order."""
        query = (
            sa.select(t.starts)
            .where(
                _s.schedule_id == schedule_id,
                _s.occurrence_at > after,
                _s.occurrence_at <= until,
            )
            .order_by(_s.occurrence_at, _s.rerun)
        )
        return [_stored_occurrence(row) for row in self._conn.execute(query).mappings()]

    def latest_fired_before(self, schedule_id: str, before: datetime) -> StoredOccurrence | None:
        # Walks the (schedule_id, occurrence_at, rerun) key backwards from ``before``.
        query = (
            sa.select(t.starts)
            .where(
                _s.schedule_id == schedule_id,
                _s.occurrence_at < before,
                sa.or_(_s.origin.is_(None), _s.origin == OccurrenceOrigin.SCHEDULE.value),
                _s.state != StartState.SKIPPED.value,
            )
            .order_by(_s.occurrence_at.desc(), _s.rerun.desc())
            .limit(1)
        )
        return first_record(self._conn, query, _stored_occurrence)

    def get_occurrence(
        self, tenant: str, schedule_id: str, occurrence_id: str, *, lock: bool = False
    ) -> ScheduledStart | None:
        query = sa.select(t.starts).where(
            _s.tenant == tenant, _s.schedule_id == schedule_id, _s.id == occurrence_id
        )
        if lock:
            query = for_update(query, self._conn)
        return first_record(self._conn, query, _occurrence_from_row)

    def find_occurrences(
        self, schedule_id: str, where: OccurrenceFilter, at: Seek[int]
    ) -> list[tuple[int, ScheduledStart]]:
        query = sa.select(t.starts)
        if where.state:
            query = query.where(_s.state == where.state)
        if where.origin == OccurrenceOrigin.SCHEDULE.value:
            query = query.where(sa.or_(_s.origin.is_(None), _s.origin == where.origin))
        elif where.origin:
            query = query.where(_s.origin == where.origin)
        if where.end is not None:
            query = query.where(_s.occurrence_at < where.end)
        if where.start is not None:
            # A skipped range counts when any of its instants is in [start, end).
            last = sa.func.coalesce(_s.range_last, _s.occurrence_at)
            query = query.where(last >= where.start)
        query = paged_within(query, _s.schedule_id, schedule_id, _s.seq, at)
        return [(r["seq"], _occurrence_from_row(r)) for r in self._conn.execute(query).mappings()]

    def occurrences_since(
        self, schedule_id: str, since: datetime, limit: int
    ) -> list[ScheduledStart]:
        # Down the (schedule_id, occurrence_at, rerun) key from the newest instant, and the
        # partial index of ranges for a skipped stretch that began before the window.
        inside = (
            sa.select(t.starts)
            .where(_s.schedule_id == schedule_id, _s.occurrence_at >= since)
            .order_by(_s.occurrence_at.desc(), _s.rerun.desc())
            .limit(limit)
        )
        reaching = sa.select(t.starts).where(
            _s.schedule_id == schedule_id,
            _s.range_last.is_not(None),
            _s.range_last >= since,
            _s.occurrence_at < since,
        )
        rows = [*self._conn.execute(inside).mappings(), *self._conn.execute(reaching).mappings()]
        return [_occurrence_from_row(row) for row in rows]

    def cancel_unstarted(self, schedule_id: str, reason: str, now: datetime) -> int:
        """Cancel a schedule's occurrences that have not been claimed (delete, RS-5b)."""
        return self._conn.execute(
            sa.update(t.starts)
            .where(
                _s.schedule_id == schedule_id,
                _s.state.in_([StartState.SCHEDULED.value, StartState.BUFFERED.value]),
            )
            .values(_transition(now, state=StartState.CANCELED.value, reason=reason))
        ).rowcount

    def buffered_of(self, schedule_id: str) -> int:
        """The ``buffer_one`` occurrence waiting, if any (queued backfills are not it)."""
        query = sa.select(sa.func.count()).where(
            _s.schedule_id == schedule_id,
            _s.state == StartState.BUFFERED.value,
            ~_QUEUED_BACKFILL,
        )
        return int(self._conn.execute(query).scalar_one())

    def release_buffered(self, now: datetime) -> int:
        """Buffered occurrences whose schedule has no unfinished run any more become due now.

        Queued backfilled occurrences go one at a time: the earliest of a schedule, once
        it has no unfinished run and nothing else due or being dispatched."""
        active = (
            sa.select(t.runs.c.id)
            .where(
                t.runs.c.schedule_id == _s.schedule_id,
                t.runs.c.state.in_(["pending", "running"]),
            )
            .exists()
        )
        released = self._conn.execute(
            sa.update(t.starts)
            .where(_s.state == StartState.BUFFERED.value, ~_QUEUED_BACKFILL, ~active)
            .values(_transition(now, state=StartState.SCHEDULED.value, due_at=now))
        ).rowcount
        return released + self._release_queued_backfills(now)

    def _release_queued_backfills(self, now: datetime) -> int:
        heads = self._conn.execute(
            sa.select(_s.schedule_id, sa.func.min(_s.occurrence_at))
            .where(_QUEUED_BACKFILL)
            .group_by(_s.schedule_id)
        ).all()
        if not heads:
            return 0
        runs = t.runs.c
        busy = set(
            self._conn.execute(
                sa.select(runs.schedule_id).where(
                    runs.schedule_id.in_([sid for sid, _ in heads]),
                    runs.state.in_(["pending", "running"]),
                )
            ).scalars()
        )
        busy |= set(
            self._conn.execute(
                sa.select(_s.schedule_id).where(
                    _s.schedule_id.in_([sid for sid, _ in heads]),
                    sa.or_(
                        _s.state == StartState.DISPATCHING.value,
                        sa.and_(_s.state == StartState.SCHEDULED.value, _s.due_at <= now),
                    ),
                )
            ).scalars()
        )
        ids = []
        for schedule_id, occurrence_at in sorted((s, a) for s, a in heads if s not in busy):
            head = self._conn.execute(
                sa.select(_s.id)
                .where(
                    _QUEUED_BACKFILL,
                    _s.schedule_id == schedule_id,
                    _s.occurrence_at == occurrence_at,
                )
                .order_by(_s.rerun)
                .limit(1)
            ).scalar_one_or_none()
            if head is not None:
                ids.append(head)
        if not ids:
            return 0
        return self._conn.execute(
            sa.update(t.starts)
            .where(_s.id.in_(ids), _QUEUED_BACKFILL)
            .values(_transition(now, state=StartState.SCHEDULED.value, due_at=now))
        ).rowcount

    def occurrence_counts(self, tenant: str) -> dict[str, dict[str, int]]:
        """Per schedule: skipped (any reason), missed (occurrences, ranges counted in full)
        and failed, for the health report."""
        count = sa.func.coalesce(_s.range_count, 1)
        query = (
            sa.select(
                _s.schedule_id,
                sa.func.sum(sa.case((_s.state == StartState.SKIPPED.value, count), else_=0)),
                sa.func.sum(sa.case((_s.reason == "missed", count), else_=0)),
                sa.func.sum(sa.case((_s.state == StartState.FAILED.value, 1), else_=0)),
            )
            .where(_s.tenant == tenant, _s.schedule_id.is_not(None))
            .group_by(_s.schedule_id)
        )
        return {
            row[0]: {
                "skipped_count": int(row[1]),
                "missed_count": int(row[2]),
                "failed_count": int(row[3]),
            }
            for row in self._conn.execute(query)
        }

    def notify_due(self) -> None:
        notify(self._conn, DUE_CHANNEL)

    def get(self, tenant: str, start_id: str, *, lock: bool = False) -> ScheduledStart | None:
        """A one-off start (occurrences are reached through their schedule)."""
        query = sa.select(t.starts).where(
            _s.tenant == tenant, _s.id == start_id, _s.schedule_id.is_(None)
        )
        if lock:
            query = for_update(query, self._conn)
        return first_record(self._conn, query, start_from_row)

    def allocation_of_run(self, tenant: str, run_id: str) -> tuple[StartState, str] | None:
        query = sa.select(_s.state, _s.created_by).where(_s.tenant == tenant, _s.run_id == run_id)
        row = self._conn.execute(query).first()
        return (StartState(row[0]), str(row[1])) if row is not None else None

    def find(
        self, tenant: str, where: StartFilter, at: Seek[int]
    ) -> list[tuple[int, ScheduledStart]]:
        query = sa.select(t.starts).where(_s.tenant == tenant, _s.schedule_id.is_(None))
        if where.state:
            query = query.where(_s.state == where.state)
        if where.workflow:
            query = query.where(_s.workflow == where.workflow)
        if where.business_request_id:
            query = query.where(_s.business_request_id == where.business_request_id)
        query = paged(query, _s.seq, at)
        return [(r["seq"], start_from_row(r)) for r in self._conn.execute(query).mappings()]

    def count_pending(self, tenant: str, workload_class: str | None = None) -> int:
        """Pending one-off starts and unstarted backfilled occurrences (RS-9b); the spec's
        own and triggered occurrences count against ``max_schedules`` instead (QA-1)."""
        query = sa.select(sa.func.count()).where(
            _s.tenant == tenant,
            sa.or_(
                sa.and_(_s.state.in_(_PENDING), _s.schedule_id.is_(None)),
                sa.and_(
                    _s.origin == OccurrenceOrigin.BACKFILL.value,
                    _s.state.in_([*_PENDING, StartState.BUFFERED.value]),
                ),
            ),
        )
        if workload_class is not None:
            query = query.where(_s.workload_class == workload_class)
        return int(self._conn.execute(query).scalar_one())

    def count_in_state(self, tenant: str, state: StartState) -> int:
        query = sa.select(sa.func.count()).where(
            _s.tenant == tenant, _s.state == state.value, _s.schedule_id.is_(None)
        )
        return int(self._conn.execute(query).scalar_one())

    def stalled(self, tenant: str, grace_seconds: float, now: datetime, limit: int) -> list[str]:
        """Starts still claimed although their lease ran out more than ``grace_seconds``
        ago by the store's clock, the one leases are taken with: no runner is recovering
        them."""
        # An instant ``grace_seconds`` before the store's clock.
        expired_before = lease_expiry(self._conn, -grace_seconds, now)
        query = (
            sa.select(_s.id)
            .where(
                _s.tenant == tenant,
                _s.state == StartState.DISPATCHING.value,
                _s.lease_until < expired_before,
            )
            .order_by(_s.due_at)
            .limit(limit)
        )
        return list(self._conn.execute(query).scalars())

    def count_pending_of_workflow(self, workflow: str) -> int:
        query = sa.select(sa.func.count()).where(_s.workflow == workflow, _s.state.in_(_PENDING))
        return int(self._conn.execute(query).scalar_one())

    def last_decided(self, schedule_id: str) -> datetime | None:
        query = sa.select(sa.func.max(sa.func.coalesce(_s.range_last, _s.occurrence_at))).where(
            _s.schedule_id == schedule_id,
            sa.or_(_s.origin.is_(None), _s.origin == OccurrenceOrigin.SCHEDULE.value),
        )
        value: datetime | None = self._conn.execute(query).scalar_one_or_none()
        return value

    def audit_rows(self, schedule_id: str, start: datetime, end: datetime) -> list[AuditRow]:
        # Occurrences in the range, and the ranges that start before it and reach into it
        # (on the partial index of ranges: a schedule's ranges, not its whole history).
        r = t.runs.c
        columns = (
            _s.id,
            _s.occurrence_at,
            _s.state,
            _s.reason,
            _s.range_last,
            _s.rerun,
            sa.case((_s.dispatched_at.is_not(None), _s.run_id), else_=None).label("run"),
            r.state.label("run_state"),
        )
        joined = t.starts.outerjoin(t.runs, r.id == _s.run_id)
        inside = (
            sa.select(*columns)
            .select_from(joined)
            .where(_s.schedule_id == schedule_id, _s.occurrence_at >= start, _s.occurrence_at < end)
        )
        before = (
            sa.select(*columns)
            .select_from(joined)
            .where(
                _s.schedule_id == schedule_id,
                _s.range_last.is_not(None),
                _s.range_last >= start,
                _s.occurrence_at < start,
            )
        )
        rows = [*self._conn.execute(inside).mappings(), *self._conn.execute(before).mappings()]
        return [
            AuditRow(
                occurrence_id=row["id"],
                occurrence_at=row["occurrence_at"],
                state=row["state"],
                reason=row["reason"],
                range_last=row["range_last"],
                run_id=row["run"],
                run_state=row["run_state"],
                rerun=row["rerun"],
            )
            for row in rows
        ]

    def compare_and_set(
        self, start_id: str, expected_version: int, now: datetime, **changes: Any
    ) -> bool:
        """Apply ``changes`` and bump the version iff the start is still at ``expected_version``.

        This is the arbiter of OS-7: dispatch, reschedule and cancel all go through it, so
        exactly one of them owns each version.
        """
        return self._apply([_s.id == start_id, _s.version == expected_version], now, changes)

    def _apply(
        self, where: Sequence[sa.ColumnElement[bool]], now: datetime, changes: dict[str, Any]
    ) -> bool:
        """``changes`` as a transition of the one start ``where`` matches; False if none."""
        update = sa.update(t.starts).where(*where).values(_transition(now, **changes))
        return self._conn.execute(update).rowcount == 1

    def mark_dispatched_many(self, rows: Sequence[DispatchedStart], now: datetime) -> set[str]:
        """Record many claims dispatched at once, each only under its claim token and while
        its lease runs (the arbiter of OS-7, batched); returns the ids that were still held."""
        if not rows:
            return set()
        fixed = _transition(
            now,
            state=StartState.DISPATCHED.value,
            dispatched_at=now,
            next_attempt_at=None,
            claimed_by=None,
            lease_until=None,
        )
        return self._update_claimed(
            [
                {
                    **_token_row(r.claim),
                    "attempts": r.attempts,
                    "definition_version": r.definition_version,
                    "artifact": r.artifact,
                }
                for r in rows
            ],
            columns=["attempts", "definition_version", "artifact"],
            fixed=fixed,
            where=_held(self._conn, now),
        )

    def settle_claim(self, claim: ClaimToken, now: datetime, **changes: Any) -> bool:
        """A dispatch outcome other than "dispatched", applied only under ``claim``."""
        under_claim = [_s[name] == value for name, value in _token_row(claim).items()]
        return self._apply([*under_claim, *_held(self._conn, now)], now, changes)

    def renew_claims(
        self, claims: Sequence[ClaimToken], lease_seconds: float, now: datetime
    ) -> set[str]:
        """Leases of the claims still held, extended to ``lease_seconds`` after the store's
        clock; not a transition, so no version bump."""
        return self._update_claimed(
            [_token_row(c) for c in claims],
            fixed={"lease_until": lease_expiry(self._conn, lease_seconds, now)},
            where=_held(self._conn, now),
        )

    def release_claims(self, claims: Sequence[ClaimToken], now: datetime) -> set[str]:
        """Claims given back untouched: version, attempts and due time stay as they were."""
        return self._update_claimed(
            [_token_row(c) for c in claims],
            fixed={
                "state": StartState.SCHEDULED.value,
                "claimed_by": None,
                "lease_until": None,
                "updated_at": now,
            },
            where=[_s.state == StartState.DISPATCHING.value],
        )

    def _update_claimed(
        self,
        rows: Sequence[dict[str, Any]],
        *,
        fixed: dict[str, Any],
        where: Sequence[sa.ColumnElement[bool]],
        columns: Sequence[str] = (),
    ) -> set[str]:
        """Update each start still under the claim token its row carries (``_token_row``),
        with the row's ``columns`` and the ``fixed`` values; the ids updated."""
        return update_many(
            self._conn, t.starts, rows, match=_TOKEN, columns=columns, fixed=fixed, where=where
        )

    def states_of(self, start_ids: Sequence[str]) -> dict[str, StartState]:
        if not start_ids:
            return {}
        query = sa.select(_s.id, _s.state).where(_s.id.in_(list(start_ids)))
        return {row[0]: StartState(row[1]) for row in self._conn.execute(query)}

    def claim_due(
        self, now: datetime, limit: int, runner_id: str, lease_seconds: float
    ) -> list[ClaimedStart]:
        """Claim up to ``limit`` starts due at ``now``, oldest first, and those whose lease
        expired.

        Leases are taken and judged by the store's clock (the database's on PostgreSQL, so
        a runner whose host clock is off neither steals a live claim nor keeps an expired
        one, FT-2); due times are the caller's ``now``. A claim is not a user-visible
        transition: ``version`` stays (a cancel or reschedule read before the claim still
        applies, FT-5) and the claim takes the next ``claim_seq``; with ``claimed_by`` that
        is the token every outcome is recorded under.
        """
        due = (
            sa.select(_s.id)
            .where(
                _s.state.in_(_PENDING),
                _s.due_at <= now,
                sa.or_(
                    _s.state == StartState.SCHEDULED.value,
                    _s.lease_until < store_now(self._conn, now),
                ),
            )
            .order_by(_s.due_at)
            .limit(limit)
        )
        claimed = self._conn.execute(
            sa.update(t.starts)
            .where(_s.id.in_(claimable(due, self._conn)))
            .values(
                state=StartState.DISPATCHING.value,
                claimed_by=runner_id,
                lease_until=lease_expiry(self._conn, lease_seconds, now),
                claim_seq=_s.claim_seq + 1,
                updated_at=now,
            )
            .returning(
                _s.id,
                _s.tenant,
                _s.workflow,
                _s.workload_class,
                _s.traceparent,
                _s.input,
                _s.input_key_id,
                _s.created_by,
                _s.run_id,
                _s.version,
                _s.attempts,
                _s.schedule_id,
                _s.occurrence_at,
                _s.due_at,
                _s.claim_seq,
                _s.origin,
                _s.overlap,
                _s.start_at,
                _s.start_deadline_at,
                _PREVIOUS_COMPLETED_RUN,
            )
        )
        return [
            record_from_row(
                ClaimedStart,
                r,
                input=encrypted_from_row(r, "input"),
                origin=_origin(r) | _occurrence_context(r),
                claimed_by=runner_id,
                occurrence_origin=r["origin"],
            )
            for r in sorted(claimed.mappings(), key=lambda r: (r["due_at"], r["id"]))
        ]

    def key_usage(self) -> dict[str, dict[str, int]]:
        """Which codec keys stored values still need: key id -> {kind: count}, over every
        table that holds sealed values (webhook URLs and secrets included)."""
        return key_usage(self._conn)

    def count_due(self, now: datetime) -> int:
        """Starts and occurrences due and waiting for dispatch (the backlog gauge)."""
        query = sa.select(sa.func.count()).where(*_due_waiting(now))
        return int(self._conn.execute(query).scalar_one())

    def due_backlog(self, now: datetime) -> tuple[int, datetime | None]:
        """``count_due`` and the earliest due time among those starts, on ``ix_starts_due``."""
        query = sa.select(sa.func.count(), sa.func.min(_s.due_at)).where(*_due_waiting(now))
        count, earliest = self._conn.execute(query).one()
        return int(count), earliest

    def earliest_due(self, now: datetime) -> datetime | None:
        """When, on the caller's clock (``now`` is its present), the next pending start
        comes due; a lease expiry counts as due. Leases run on the store's clock, so their
        expiry is moved by the difference between the two clocks."""
        query = sa.select(sa.func.min(_s.due_at)).where(_s.state == StartState.SCHEDULED.value)
        scheduled: datetime | None = self._conn.execute(query).scalar_one_or_none()
        lease_query = sa.select(sa.func.min(_s.lease_until), store_now(self._conn, now)).where(
            _s.state == StartState.DISPATCHING.value
        )
        lease, store_time = self._conn.execute(lease_query).one()
        expiry = None if lease is None else now + (lease - store_time)
        candidates = [c for c in (scheduled, expiry) if c is not None]
        return min(candidates) if candidates else None


_DUE_INDEX_STATES = constants("scheduled", "dispatching")
"""``ix_starts_due``'s predicate, written as its ``WHERE`` is."""


def _due_waiting(now: datetime) -> list[sa.ColumnElement[bool]]:
    """Due and not claimed yet, in terms that reach ``ix_starts_due`` on both dialects
    (a read of the waiting rows, not of the history)."""
    return [
        _s.state.in_(_DUE_INDEX_STATES),
        _s.state == StartState.SCHEDULED.value,
        _s.due_at <= now,
    ]
