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

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_PENDING_OLD = "OLD.schedule_id IS NULL AND OLD.state IN ('scheduled', 'dispatching')"
_PENDING_NEW = "NEW.schedule_id IS NULL AND NEW.state IN ('scheduled', 'dispatching')"
_SAME_BUCKET = "NEW.tenant = OLD.tenant AND NEW.workload_class = OLD.workload_class"

# PostgreSQL: statement-level triggers with transition tables, one aggregated delta row
# per (tenant, class) and statement (a dispatch page of 500 adds one row, not 500).
_PG_FUNCTION = """
CREATE FUNCTION punctual_pending_start_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pending_start_counts (tenant, workload_class, delta)
        SELECT tenant, workload_class, count(*) FROM new_rows
        WHERE schedule_id IS NULL AND state IN ('scheduled', 'dispatching')
        GROUP BY tenant, workload_class;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO pending_start_counts (tenant, workload_class, delta)
        SELECT tenant, workload_class, -count(*) FROM old_rows
        WHERE schedule_id IS NULL AND state IN ('scheduled', 'dispatching')
        GROUP BY tenant, workload_class;
    ELSE
        INSERT INTO pending_start_counts (tenant, workload_class, delta)
        SELECT tenant, workload_class, sum(d) FROM (
            SELECT tenant, workload_class, -1 AS d FROM old_rows
            WHERE schedule_id IS NULL AND state IN ('scheduled', 'dispatching')
            UNION ALL
            SELECT tenant, workload_class, 1 AS d FROM new_rows
            WHERE schedule_id IS NULL AND state IN ('scheduled', 'dispatching')
        ) AS changes
        GROUP BY tenant, workload_class
        HAVING sum(d) <> 0;
    END IF;
    RETURN NULL;
END
$$
"""
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

# SQLite: row-level triggers (one writer at a time, in process: cheap).
_INSERT_DELTA = "INSERT INTO pending_start_counts (tenant, workload_class, delta) VALUES "
_SQLITE_TRIGGERS = [
    f"CREATE TRIGGER starts_pending_insert AFTER INSERT ON starts WHEN {_PENDING_NEW} "
    f"BEGIN {_INSERT_DELTA}(NEW.tenant, NEW.workload_class, 1); END",
    f"CREATE TRIGGER starts_pending_leave AFTER UPDATE ON starts "
    f"WHEN {_PENDING_OLD} AND NOT ({_PENDING_NEW} AND {_SAME_BUCKET}) "
    f"BEGIN {_INSERT_DELTA}(OLD.tenant, OLD.workload_class, -1); END",
    f"CREATE TRIGGER starts_pending_enter AFTER UPDATE ON starts "
    f"WHEN {_PENDING_NEW} AND NOT ({_PENDING_OLD} AND {_SAME_BUCKET}) "
    f"BEGIN {_INSERT_DELTA}(NEW.tenant, NEW.workload_class, 1); END",
    f"CREATE TRIGGER starts_pending_delete AFTER DELETE ON starts WHEN {_PENDING_OLD} "
    f"BEGIN {_INSERT_DELTA}(OLD.tenant, OLD.workload_class, -1); END",
]


def upgrade() -> None:
    op.create_table(
        "pending_start_counts",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
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
        op.execute(_PG_FUNCTION)
        for statement in _PG_TRIGGERS:
            op.execute(statement)
    else:
        for statement in _SQLITE_TRIGGERS:
            op.execute(statement)
    op.execute(
        "INSERT INTO pending_start_counts (tenant, workload_class, delta) "
        "SELECT tenant, workload_class, count(*) FROM starts "
        "WHERE schedule_id IS NULL AND state IN ('scheduled', 'dispatching') "
        "GROUP BY tenant, workload_class"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in ("starts_pending_insert", "starts_pending_update", "starts_pending_delete"):
            op.execute(f"DROP TRIGGER {name} ON starts")
        op.execute("DROP FUNCTION punctual_pending_start_deltas()")
    else:
        for name in (
            "starts_pending_insert",
            "starts_pending_leave",
            "starts_pending_enter",
            "starts_pending_delete",
        ):
            op.execute(f"DROP TRIGGER {name}")
    op.drop_table("pending_start_counts")
