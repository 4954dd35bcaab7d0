"""schedule controls: trigger, backfill, end and count, jitter, declarative schedules (RS-9)

- ``starts.origin`` (``schedule``, ``trigger``, ``backfill``; null for one-off starts) and
  ``starts.overlap`` (the policy a trigger or backfill request named). Existing
  occurrences are the spec's own: ``origin = 'schedule'``.
- ``starts.rerun``: a backfill generates an instant again when only skipped or failed rows
  hold it, and those rows stay as history, so the unique key of an occurrence becomes
  ``(schedule_id, occurrence_at, rerun)`` (0 for the first row of an instant).
- ``schedules``: ``end_at``, ``max_occurrences``, ``fires_counted`` (the spec's fires
  decided so far), ``jitter_ms``, ``source`` (the file of schedules last applied).
- Backfilled occurrences count against the tenant's pending-start quota while unstarted
  (``scheduled``, ``dispatching`` or waiting their turn, ``buffered``): the triggers of
  0008 that keep ``pending_start_counts`` count them too. No backfilled occurrence exists
  before this revision, so the counts stay as they are.

SQLite cannot drop a constraint in place: the table is rebuilt (its indexes are recreated
from the reflected ones), which also drops its triggers; they are created again after.

The downgrade refuses while an instant holds more than one row (``rerun > 0``): the old
unique key could not hold them, and removing history is not a migration's choice.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from punctual.adapters.stores.sql import column_types
from punctual.adapters.stores.sql.migrations import pending_counter

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_ONE_OFF = "{row}.schedule_id IS NULL AND {row}.state IN ('scheduled', 'dispatching')"
_BACKFILLED = (
    "{row}.origin = 'backfill' AND {row}.state IN ('scheduled', 'dispatching', 'buffered')"
)


def _pending(row: str, with_backfill: bool) -> str:
    one_off = _ONE_OFF.format(row=row)
    if not with_backfill:
        return one_off
    return f"(({one_off}) OR ({_BACKFILLED.format(row=row)}))"


def _pg_function(with_backfill: bool) -> str:
    """0008's statement-level counter, with the pending predicate of this revision."""
    return pending_counter.pg_function(lambda rows: _pending(rows, with_backfill), replace=True)


def _sqlite_triggers(with_backfill: bool) -> list[str]:
    """0008's row-level counter triggers, with the pending predicate of this revision."""
    return pending_counter.sqlite_triggers(lambda row: _pending(row, with_backfill))


def _drop_sqlite_triggers() -> None:
    for name in pending_counter.SQLITE_TRIGGER_NAMES:
        op.execute(f"DROP TRIGGER IF EXISTS {name}")


def _is_postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    postgres = _is_postgres()
    if postgres:
        # No start may change while the counter's predicate is replaced.
        op.execute("LOCK TABLE starts IN SHARE ROW EXCLUSIVE MODE")
    else:
        _drop_sqlite_triggers()
    with op.batch_alter_table("starts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("origin", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("overlap", sa.String(length=16), nullable=True))
        batch_op.add_column(
            sa.Column("rerun", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
        batch_op.drop_constraint("uq_starts_schedule_id_occurrence_at", type_="unique")
        batch_op.create_unique_constraint(
            "uq_starts_schedule_id_occurrence_at_rerun", ["schedule_id", "occurrence_at", "rerun"]
        )
    op.execute("UPDATE starts SET origin = 'schedule' WHERE schedule_id IS NOT NULL")
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.add_column(sa.Column("end_at", column_types.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("max_occurrences", sa.BigInteger(), nullable=True))
        batch_op.add_column(
            sa.Column("fires_counted", sa.BigInteger(), server_default=sa.text("0"), nullable=False)
        )
        batch_op.add_column(
            sa.Column("jitter_ms", sa.BigInteger(), server_default=sa.text("0"), nullable=False)
        )
        batch_op.add_column(sa.Column("source", sa.String(length=200), nullable=True))
    if postgres:
        op.execute(_pg_function(with_backfill=True))
    else:
        for statement in _sqlite_triggers(with_backfill=True):
            op.execute(statement)


def downgrade() -> None:
    reruns = op.get_bind().execute(sa.text("SELECT count(*) FROM starts WHERE rerun > 0"))
    count = reruns.scalar_one()
    if count:
        raise RuntimeError(
            f"{count} occurrence(s) were generated again by a backfill; the schema before "
            "0012 holds one occurrence per instant, so this downgrade would have to delete "
            "history. Remove those rows deliberately first if that is intended."
        )
    postgres = _is_postgres()
    if postgres:
        op.execute("LOCK TABLE starts IN SHARE ROW EXCLUSIVE MODE")
        op.execute(_pg_function(with_backfill=False))
    else:
        _drop_sqlite_triggers()
    # Backfilled occurrences no longer count once the column that marks them is gone.
    op.execute(
        "INSERT INTO pending_start_counts (tenant, workload_class, delta) "
        "SELECT tenant, workload_class, -count(*) FROM starts "
        "WHERE origin = 'backfill' AND state IN ('scheduled', 'dispatching', 'buffered') "
        "GROUP BY tenant, workload_class"
    )
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_column("source")
        batch_op.drop_column("jitter_ms")
        batch_op.drop_column("fires_counted")
        batch_op.drop_column("max_occurrences")
        batch_op.drop_column("end_at")
    with op.batch_alter_table("starts", schema=None) as batch_op:
        batch_op.drop_constraint("uq_starts_schedule_id_occurrence_at_rerun", type_="unique")
        batch_op.create_unique_constraint(
            "uq_starts_schedule_id_occurrence_at", ["schedule_id", "occurrence_at"]
        )
        batch_op.drop_column("rerun")
        batch_op.drop_column("overlap")
        batch_op.drop_column("origin")
    if not postgres:
        for statement in _sqlite_triggers(with_backfill=False):
            op.execute(statement)
