"""pending one-off starts per tenant and workload class, kept by triggers

The exact quota used to count a tenant's pending starts on every create, a cost that
grew with the backlog. ``pending_start_counts`` holds signed deltas whose sum per
(tenant, workload class) is that count: triggers on ``starts`` add one for every insert,
update or delete that moves a one-off start into or out of ``scheduled``/``dispatching``,
in the changing transaction. Deltas are only ever inserted (never updated), so dispatch
and creates never wait on one another's counter row. Initialised from the current rows.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from punctual.adapters.stores.sql.migrations import pending_counter
from punctual.adapters.stores.sql.migrations.shared import seq_column

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_PENDING = "schedule_id IS NULL AND state IN ('scheduled', 'dispatching')"
"""A one-off start that counts, as the PostgreSQL function reads it from either transition
table (its columns unqualified)."""


def _pending_row(row: str) -> str:
    """The same of the row ``OLD`` or ``NEW``, for SQLite's row-level triggers."""
    return f"{row}.schedule_id IS NULL AND {row}.state IN ('scheduled', 'dispatching')"


# PostgreSQL: statement-level triggers with transition tables, one aggregated delta row
# per (tenant, class) and statement (a dispatch page of 500 adds one row, not 500).
_PG_TRIGGERS = [
    "CREATE TRIGGER starts_pending_insert AFTER INSERT ON starts "
    "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION punctual_pending_start_deltas()",
    "CREATE TRIGGER starts_pending_update AFTER UPDATE ON starts "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION punctual_pending_start_deltas()",
    "CREATE TRIGGER starts_pending_delete AFTER DELETE ON starts "
    "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION punctual_pending_start_deltas()",
]


def upgrade() -> None:
    op.create_table(
        "pending_start_counts",
        seq_column(),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("workload_class", sa.String(length=64), nullable=False),
        sa.Column("delta", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_pending_start_counts")),
    )
    with op.batch_alter_table("pending_start_counts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_pending_start_counts_tenant"), ["tenant"], unique=False
        )
    if op.get_bind().dialect.name == "postgresql":
        # No start may change between the initial count and the triggers taking over.
        op.execute("LOCK TABLE starts IN SHARE ROW EXCLUSIVE MODE")
        op.execute(pending_counter.pg_function(lambda _rows: _PENDING))
        for statement in _PG_TRIGGERS:
            op.execute(statement)
    else:
        for statement in pending_counter.sqlite_triggers(_pending_row):
            op.execute(statement)
    op.execute(
        "INSERT INTO pending_start_counts (tenant, workload_class, delta) "
        "SELECT tenant, workload_class, count(*) FROM starts "
        f"WHERE {_PENDING} GROUP BY tenant, workload_class"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in ("starts_pending_insert", "starts_pending_update", "starts_pending_delete"):
            op.execute(f"DROP TRIGGER {name} ON starts")
        op.execute("DROP FUNCTION punctual_pending_start_deltas()")
    else:
        for name in pending_counter.SQLITE_TRIGGER_NAMES:
            op.execute(f"DROP TRIGGER {name}")
    op.drop_table("pending_start_counts")
