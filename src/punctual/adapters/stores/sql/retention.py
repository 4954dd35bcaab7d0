"""Retention sweeps in SQL (RT-1): what may go, one tenant, one kind and one batch at a time.

Every batch first takes the lock hold placements take (``holds.RETENTION_LOCK``), so a
hold placed after its subject was checked is seen by every later batch, and removes
nothing of a tenant under a tenant hold. Candidates are read through the partial indexes
of terminal rows (``tables``, "the sweep's indexes"), oldest first, locked with ``SKIP
LOCKED`` on PostgreSQL so that a batch never waits for a row another transaction holds,
and deleted by key in the same statement. Predicates on an index's condition repeat it term
by term, with constants rather than parameters, so both databases see that the index
applies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import constants, for_update, lock_name
from punctual.adapters.stores.sql.holds import RETENTION_LOCK
from punctual.domain.retention import HoldKind, RecordKind, RetentionWindow
from punctual.domain.starts import PENDING_STATES, StartState

_r = t.runs.c
_s = t.starts.c
_k = t.idempotency_keys.c
_c = t.schedules.c

Where = list[sa.ColumnElement[bool]]
Subjects = list[tuple[HoldKind | None, sa.ColumnElement[Any]]]


_TERMINAL_STARTS = constants("failed", "canceled", "skipped")  # tables.TERMINAL_STARTS
_ENDED_DELIVERIES = constants("delivered", "failed")  # tables.ENDED_DELIVERIES
_COMPLETED: sa.ColumnElement[str] = sa.literal_column("'completed'")
_PENDING_OCCURRENCES = constants(*sorted({*PENDING_STATES, StartState.BUFFERED}))
_DISPATCHED: sa.ColumnElement[str] = sa.literal_column("'dispatched'")
_FOLLOWED_THROUGH: sa.ColumnElement[int] = sa.literal_column("2")


def _held(
    tenant: sa.ColumnElement[Any], *subjects: tuple[HoldKind | None, sa.ColumnElement[Any]]
) -> sa.ColumnElement[bool]:
    """An active hold of the row's tenant on one of ``subjects`` (a kind of None: any).
    The ids are matched with one ``IN`` so the lookup stays on ``ix_holds_active``."""
    hold = t.holds.alias("hold")
    kinds = [
        sa.true()
        if kind is None
        else sa.and_(
            hold.c.subject_kind == sa.literal_column(f"'{kind.value}'"),
            hold.c.subject_id == subject,
        )
        for kind, subject in subjects
    ]
    return sa.exists().where(
        hold.c.tenant == tenant,
        hold.c.released_at.is_(None),
        hold.c.subject_id.in_([subject for _, subject in subjects]),
        sa.or_(*kinds),
    )


def _held_with_lineage(
    tenant: sa.ColumnElement[Any],
    *,
    direct: Sequence[sa.ColumnElement[Any]] = (),
    runs: Sequence[sa.ColumnElement[Any]] = (),
    starts: Sequence[sa.ColumnElement[Any]] = (),
) -> sa.ColumnElement[bool]:
    """A hold covers a record that names something it holds: the ids in ``direct``
    (any kind), a run named in ``runs`` (with its start or occurrence and its schedule),
    or a start or occurrence named in ``starts`` (with its run and its schedule). So a
    schedule hold keeps the audit entries, notifications, findings and deliveries about
    its runs, as it keeps the runs. A named run or start that is gone has no lineage
    left to follow: only the direct ids still count for it."""
    clauses = [_held(tenant, *((None, subject) for subject in direct))] if direct else []
    named = (
        (t.runs.alias("named_run"), runs, _run_lineage),
        (t.starts.alias("named_start"), starts, _start_lineage),
    )
    for table, ids, lineage in named:
        clauses.extend(
            sa.exists().where(table.c.id == named_id, _held(tenant, *lineage(table)))
            for named_id in ids
        )
    return sa.or_(*clauses)


def _run_lineage(run: sa.FromClause) -> Subjects:
    """A run is held by a hold on it, on its start or occurrence, or on its schedule."""
    return [
        (HoldKind.RUN, run.c.id),
        (HoldKind.START, run.c.origin_id),
        (HoldKind.SCHEDULE, run.c.schedule_id),
    ]


def _start_lineage(start: sa.FromClause) -> Subjects:
    """A start or occurrence is held by a hold on it, on its run, or on its schedule."""
    return [
        (HoldKind.START, start.c.id),
        (HoldKind.RUN, start.c.run_id),
        (HoldKind.SCHEDULE, start.c.schedule_id),
    ]


def _past(ended: sa.ColumnElement[Any], before: datetime) -> Where:
    """Ended before ``before``: ``ended`` is set (for a table whose sweep index holds only
    rows with it set, the index's condition, repeated so that the index applies)."""
    return [ended.is_not(None), ended < before]


def _removable_runs(window: RetentionWindow) -> Where:
    """Terminal runs past the window, except a run awaiting its follow-through, the run a
    live schedule shows as ``last_run_id``, a completed run some follow-through of a live
    schedule may still compare with (its baseline, below), and held ones. A deleted
    schedule keeps neither: its history goes, then the schedule with its status."""
    status = t.schedule_status.alias("status")
    schedule = t.schedules.alias("live_schedule")
    live = sa.exists().where(schedule.c.id == _r.schedule_id, schedule.c.deleted_at.is_(None))
    shown = sa.exists().where(status.c.schedule_id == _r.schedule_id, status.c.last_run_id == _r.id)
    baseline = sa.and_(_r.state == _COMPLETED, _a_baseline_still())
    return [
        _r.tenant == window.tenant,
        *_past(_r.ended_at, window.removable_before),
        sa.or_(
            _r.schedule_id.is_(None),
            sa.and_(_r.follow_up == _FOLLOWED_THROUGH, sa.or_(~live, sa.and_(~shown, ~baseline))),
        ),
        ~_held(_r.tenant, *_run_lineage(t.runs)),
    ]


def _a_baseline_still() -> sa.ColumnElement[bool]:
    """The completed run's occurrence is the baseline of some occurrence that may still be
    followed through (CR-4 compares an ended run with the completed run of the latest
    earlier occurrence): either no later occurrence completed (every future one compares
    with it), or one between it and the next completed one is unfinished: pending, or its
    run not yet followed through (under ``allow_all`` a newer occurrence can complete
    while an older one still runs). Both walk the schedule's (schedule_id, occurrence_at)
    index from the run's occurrence up to the next completed one."""
    own = t.starts.alias("own_occurrence")
    later = t.starts.alias("later_occurrence")
    later_run = t.runs.alias("later_run")
    between = t.starts.alias("between_occurrence")
    between_run = t.runs.alias("between_run")
    next_completed_at = (
        sa.select(later.c.occurrence_at)
        .select_from(later.join(later_run, later_run.c.id == later.c.run_id))
        .where(
            later.c.schedule_id == own.c.schedule_id,
            later.c.occurrence_at > own.c.occurrence_at,
            later_run.c.state == _COMPLETED,
        )
        .order_by(later.c.occurrence_at)
        .limit(1)
        .scalar_subquery()
    )
    not_followed_through = sa.exists().where(
        between_run.c.id == between.c.run_id, between_run.c.follow_up < _FOLLOWED_THROUGH
    )
    unfinished_between = sa.exists().where(
        between.c.schedule_id == own.c.schedule_id,
        between.c.occurrence_at > own.c.occurrence_at,
        between.c.occurrence_at < next_completed_at,
        sa.or_(between.c.state.in_(_PENDING_OCCURRENCES), not_followed_through),
    )
    return sa.exists().where(
        own.c.id == _r.origin_id, sa.or_(next_completed_at.is_(None), unfinished_between)
    )


def _removable_starts(window: RetentionWindow) -> Where:
    """Failed, canceled and skipped starts and occurrences past the window, unheld
    (dispatched ones go with their run)."""
    return [
        _s.tenant == window.tenant,
        _s.state.in_(_TERMINAL_STARTS),
        _s.updated_at < window.removable_before,
        ~_held(_s.tenant, (HoldKind.START, _s.id), (HoldKind.SCHEDULE, _s.schedule_id)),
    ]


def _removable_keys(window: RetentionWindow) -> Where:
    """Keys of the tenant whose resource is no start, occurrence or run that exists, nor
    a held subject: a retry replays for as long as what it created or changed exists."""
    return [
        _k.tenant == window.tenant,
        _absent(t.starts.c.id, _k.resource_id),
        _absent(t.runs.c.id, _k.resource_id),
        ~_held(_k.tenant, (None, _k.resource_id)),
    ]


def _absent(indexed: sa.Column[Any], value: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
    """No row has ``value`` in the ``indexed`` column, probed row by row through its index.
    The ``OFFSET 0`` keeps PostgreSQL from turning the ``NOT EXISTS`` into an anti-join,
    which it may plan as a read of the whole other table per batch of 500 (it does so
    right after a sweep, while its statistics still count the rows that went)."""
    return ~sa.select(sa.literal(1)).where(indexed == value).offset(0).exists()


def _removable_schedules(window: RetentionWindow) -> Where:
    """Deleted schedules past the window once none of their occurrences or runs is left
    (the history stays readable until then), unheld."""
    return [
        _c.tenant == window.tenant,
        *_past(_c.deleted_at, window.removable_before),
        _absent(t.starts.c.schedule_id, _c.id),
        _absent(t.runs.c.schedule_id, _c.id),
        ~_held(_c.tenant, (HoldKind.SCHEDULE, _c.id)),
    ]


@dataclass(frozen=True)
class _Simple:
    """A kind removed row by row, with nothing going with it."""

    table: sa.Table
    key: str
    """The unique column rows are deleted by."""
    order: str
    """The terminal time, oldest first (the index's second column)."""
    where: Callable[[RetentionWindow], Where]
    """What makes a row of the window's tenant removable."""

    def removable(self, window: RetentionWindow) -> Where:
        return [self.table.c.tenant == window.tenant, *self.where(window)]


def _named_held(table: sa.Table) -> sa.ColumnElement[bool]:
    """A row that names a schedule, an occurrence or start, and a run (a notification, a
    webhook delivery) is held through any of them."""
    c = table.c
    return _held_with_lineage(
        c.tenant,
        direct=[c.schedule_id, c.occurrence_id, c.run_id],
        runs=[c.run_id],
        starts=[c.occurrence_id],
    )


def _subject_held(
    tenant: sa.ColumnElement[Any], subject: sa.ColumnElement[Any]
) -> sa.ColumnElement[bool]:
    """A row about one subject (an audit entry, a finding) is held through the subject
    and, when the subject is a run or a start, through its lineage."""
    return _held_with_lineage(tenant, direct=[subject], runs=[subject], starts=[subject])


def _n_read(w: RetentionWindow) -> Where:
    n = t.notifications.c
    return [*_past(n.read_at, w.removable_before), ~_named_held(t.notifications)]


def _n_unread(w: RetentionWindow) -> Where:
    n = t.notifications.c
    return [n.read_at.is_(None), n.created_at < w.unread_before, ~_named_held(t.notifications)]


def _findings(w: RetentionWindow) -> Where:
    f = t.findings.c
    return [*_past(f.acknowledged_at, w.removable_before), ~_subject_held(f.tenant, f.subject_id)]


def _deliveries(w: RetentionWindow) -> Where:
    d = t.webhook_deliveries.c
    return [
        d.status.in_(_ENDED_DELIVERIES),
        d.updated_at < w.removable_before,
        ~_named_held(t.webhook_deliveries),
    ]


def _webhooks(w: RetentionWindow) -> Where:
    h = t.webhooks.c
    return [
        *_past(h.deleted_at, w.removable_before),
        _absent(t.webhook_deliveries.c.webhook_id, h.id),
    ]


def _tokens(w: RetentionWindow) -> Where:
    return _past(t.tokens.c.revoked_at, w.removable_before)


def _holds(w: RetentionWindow) -> Where:
    return _past(t.holds.c.released_at, w.removable_before)


def _audit(w: RetentionWindow) -> Where:
    a = t.audit_log.c
    return [a.at < w.audit_before, ~_subject_held(a.tenant, a.subject_id)]


_SIMPLE: dict[RecordKind, tuple[_Simple, ...]] = {
    RecordKind.FINDINGS: (_Simple(t.findings, "id", "acknowledged_at", _findings),),
    RecordKind.NOTIFICATIONS: (
        _Simple(t.notifications, "seq", "read_at", _n_read),
        _Simple(t.notifications, "seq", "created_at", _n_unread),
    ),
    RecordKind.WEBHOOK_DELIVERIES: (
        _Simple(t.webhook_deliveries, "seq", "updated_at", _deliveries),
    ),
    RecordKind.WEBHOOKS: (_Simple(t.webhooks, "seq", "seq", _webhooks),),
    RecordKind.TOKENS: (_Simple(t.tokens, "seq", "revoked_at", _tokens),),
    RecordKind.HOLDS: (_Simple(t.holds, "seq", "seq", _holds),),
    RecordKind.AUDIT_ENTRIES: (_Simple(t.audit_log, "seq", "at", _audit),),
}


_TABLES: dict[RecordKind, tuple[sa.Table, ...]] = {
    RecordKind.RUNS: (t.runs, t.starts, t.follow_throughs),
    RecordKind.STARTS: (t.starts, t.follow_throughs),
    RecordKind.OCCURRENCES: (t.starts, t.follow_throughs),
    RecordKind.IDEMPOTENCY_RECORDS: (t.idempotency_keys,),
    RecordKind.FINDINGS: (t.findings,),
    RecordKind.NOTIFICATIONS: (t.notifications,),
    RecordKind.WEBHOOK_DELIVERIES: (t.webhook_deliveries,),
    RecordKind.WEBHOOKS: (t.webhooks,),
    RecordKind.SCHEDULES: (t.schedules, t.schedule_status, t.follow_throughs, t.schedule_events),
    RecordKind.TOKENS: (t.tokens,),
    RecordKind.HOLDS: (t.holds,),
    RecordKind.AUDIT_ENTRIES: (t.audit_log,),
}


def tables_swept(removed: Mapping[RecordKind, int]) -> list[str]:
    """The tables a sweep deleted rows from, given what it removed of each kind (what to
    vacuum after it)."""
    names = {table.name for kind, count in removed.items() if count for table in _TABLES[kind]}
    return sorted(names)


class SqlRetention:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def tenants(self) -> list[str]:
        query = sa.select(t.tenants.c.id).order_by(t.tenants.c.id)
        return list(self._conn.execute(query).scalars())

    def _tenant_held(self, tenant: str) -> bool:
        hold = t.holds.c
        query = sa.select(sa.literal(1)).where(
            hold.tenant == tenant,
            hold.released_at.is_(None),
            hold.subject_kind == HoldKind.TENANT.value,
        )
        return self._conn.execute(query.limit(1)).first() is not None

    def remove(
        self, kind: RecordKind, window: RetentionWindow, limit: int
    ) -> dict[RecordKind, int]:
        lock_name(self._conn, RETENTION_LOCK)
        if limit <= 0 or self._tenant_held(window.tenant):
            return {}
        if kind is RecordKind.RUNS:
            return self._remove_runs(window, limit)
        if kind in (RecordKind.STARTS, RecordKind.OCCURRENCES):
            return self._remove_starts(window, limit)
        if kind is RecordKind.IDEMPOTENCY_RECORDS:
            return {kind: self._remove_keys(window, limit)}
        if kind is RecordKind.SCHEDULES:
            return self._remove_schedules(window, limit)
        removed = 0
        for target in _SIMPLE[kind]:
            removed += self._remove_simple(target, window, limit - removed)
        return {kind: removed}

    def count(self, kind: RecordKind, window: RetentionWindow) -> dict[RecordKind, int]:
        if self._tenant_held(window.tenant):
            return {}
        if kind is RecordKind.RUNS:
            total, of_schedules = self._conn.execute(
                sa.select(sa.func.count(), sa.func.count(_r.schedule_id)).where(
                    *_removable_runs(window)
                )
            ).one()
            # Each run takes its dispatched start or occurrence along.
            return {
                RecordKind.RUNS: total,
                RecordKind.STARTS: total - of_schedules,
                RecordKind.OCCURRENCES: of_schedules,
            }
        if kind in (RecordKind.STARTS, RecordKind.OCCURRENCES):
            total, of_schedules = self._conn.execute(
                sa.select(sa.func.count(), sa.func.count(_s.schedule_id)).where(
                    *_removable_starts(window)
                )
            ).one()
            return {RecordKind.STARTS: total - of_schedules, RecordKind.OCCURRENCES: of_schedules}
        if kind is RecordKind.IDEMPOTENCY_RECORDS:
            decided = self._count(t.idempotency_keys, [*_removable_keys(window), *_decided(window)])
            abandoned = self._count(
                t.idempotency_keys, [*_removable_keys(window), *_abandoned(window)]
            )
            return {kind: decided + abandoned}
        if kind is RecordKind.SCHEDULES:
            return {kind: self._count(t.schedules, _removable_schedules(window))}
        return {kind: sum(self._count(s.table, s.removable(window)) for s in _SIMPLE[kind])}

    def _count(self, table: sa.Table, where: Where) -> int:
        query = sa.select(sa.func.count()).select_from(table).where(*where)
        return int(self._conn.execute(query).scalar_one())

    def _delete_oldest(
        self,
        table: sa.Table,
        keys: Sequence[sa.ColumnElement[Any]],
        where: Where,
        order: sa.ColumnElement[Any],
        limit: int,
        returning: Sequence[sa.ColumnElement[Any]],
        scope: Sequence[sa.ColumnElement[bool]] = (),
    ) -> list[sa.Row[Any]]:
        """Delete the oldest ``limit`` rows that qualify, in one statement; rows another
        transaction holds locked are skipped (the next batch or sweep takes them). The
        rows are picked by a locking select materialized once (a ``WITH``), then deleted
        by their key, ``scope`` narrowing the match to the key's index; returns
        ``returning`` of each row deleted."""
        picked = sa.select(*keys).where(*where).order_by(order).limit(limit)
        doomed = (
            for_update(picked, self._conn, of=table, skip_locked=True)
            .cte("doomed")
            .prefix_with("MATERIALIZED")
        )
        match = (
            keys[0].in_(sa.select(doomed.c[0]))
            if len(keys) == 1
            else sa.tuple_(*keys).in_(sa.select(*doomed.c))
        )
        deleted = sa.delete(table).where(*scope, match).returning(*returning)
        return list(self._conn.execute(deleted))

    def _remove_runs(self, window: RetentionWindow, limit: int) -> dict[RecordKind, int]:
        rows = self._delete_oldest(
            t.runs, [_r.id], _removable_runs(window), _r.ended_at, limit, [_r.id]
        )
        if not rows:
            return {RecordKind.RUNS: 0}
        run_ids = sorted(row.id for row in rows)
        origins = self._conn.execute(
            sa.delete(t.starts)
            .where(_s.run_id.in_(run_ids), _s.state == _DISPATCHED)
            .returning(_s.id, _s.schedule_id)
        ).all()
        occurrences = sorted(row.id for row in origins if row.schedule_id is not None)
        self._forget_follow_through(occurrences)
        return {
            RecordKind.RUNS: len(run_ids),
            RecordKind.STARTS: len(origins) - len(occurrences),
            RecordKind.OCCURRENCES: len(occurrences),
        }

    def _remove_starts(self, window: RetentionWindow, limit: int) -> dict[RecordKind, int]:
        rows = self._delete_oldest(
            t.starts,
            [_s.id],
            _removable_starts(window),
            _s.updated_at,
            limit,
            [_s.id, _s.schedule_id],
        )
        occurrences = sorted(row.id for row in rows if row.schedule_id is not None)
        self._forget_follow_through(occurrences)
        return {
            RecordKind.STARTS: len(rows) - len(occurrences),
            RecordKind.OCCURRENCES: len(occurrences),
        }

    def _forget_follow_through(self, occurrence_ids: Sequence[str]) -> None:
        if occurrence_ids:
            f = t.follow_throughs.c
            self._conn.execute(
                sa.delete(t.follow_throughs).where(f.occurrence_id.in_(occurrence_ids))
            )

    def _remove_keys(self, window: RetentionWindow, limit: int) -> int:
        removed = 0
        for extra, order in (
            (_decided(window), _k.decided_at),
            (_abandoned(window), _k.lease_until),
        ):
            if removed >= limit:
                break
            rows = self._delete_oldest(
                t.idempotency_keys,
                [_k.principal, _k.key],
                [*_removable_keys(window), *extra],
                order,
                limit - removed,
                [_k.key],
                scope=[_k.tenant == window.tenant],
            )
            removed += len(rows)
        return removed

    def _remove_schedules(self, window: RetentionWindow, limit: int) -> dict[RecordKind, int]:
        rows = self._delete_oldest(
            t.schedules, [_c.id], _removable_schedules(window), _c.deleted_at, limit, [_c.id]
        )
        if rows:
            ids = sorted(row.id for row in rows)
            self._conn.execute(
                sa.delete(t.schedule_status).where(t.schedule_status.c.schedule_id.in_(ids))
            )
            self._conn.execute(
                sa.delete(t.follow_throughs).where(t.follow_throughs.c.schedule_id.in_(ids))
            )
            # Its history goes with it: nothing is left for an audit to account for.
            self._conn.execute(
                sa.delete(t.schedule_events).where(t.schedule_events.c.schedule_id.in_(ids))
            )
        return {RecordKind.SCHEDULES: len(rows)}

    def _remove_simple(self, target: _Simple, window: RetentionWindow, limit: int) -> int:
        if limit <= 0:
            return 0
        key = target.table.c[target.key]
        order = target.table.c[target.order]
        return len(
            self._delete_oldest(target.table, [key], target.removable(window), order, limit, [key])
        )


def _decided(window: RetentionWindow) -> Where:
    return [_k.decided_at < window.removable_before]


def _abandoned(window: RetentionWindow) -> Where:
    """A key left in flight by a process that died: nobody can adopt it any more."""
    return [_k.decided_at.is_(None), _k.lease_until < window.removable_before]
