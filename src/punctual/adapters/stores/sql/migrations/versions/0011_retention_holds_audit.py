"""retention sweeps, holds and the audit log (RT-1, CR-8)

- New tables ``holds`` (what a sweep must keep) and ``audit_log`` (one row per decided
  user mutation).
- The sweep's partial indexes: each holds only terminal rows, per tenant and by the time
  they became terminal (starts and occurrences, runs, acknowledged findings, read and
  unread notifications, ended webhook deliveries, deleted schedules, revoked tokens), so
  a sweep batch reads what it removes and nothing else.
- ``idempotency_keys``: the index on ``decided_at`` (read by nothing) becomes one on
  ``(tenant, decided_at)``, what the sweep reads; a create still writes one index entry.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from punctual.adapters.stores.sql import column_types
from punctual.adapters.stores.sql.migrations.shared import create_partial_index, seq_column

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_TERMINAL_STARTS = "state IN ('failed', 'canceled', 'skipped')"
_ENDED_DELIVERIES = "status IN ('delivered', 'failed')"

# (table, index name, columns, predicate) of the sweep's partial indexes.
_SWEEP_INDEXES = [
    ("starts", "ix_starts_terminal", ["tenant", "updated_at"], _TERMINAL_STARTS),
    ("runs", "ix_runs_ended", ["tenant", "ended_at"], "ended_at IS NOT NULL"),
    (
        "findings",
        "ix_findings_acknowledged",
        ["tenant", "acknowledged_at"],
        "acknowledged_at IS NOT NULL",
    ),
    ("notifications", "ix_notifications_read", ["tenant", "read_at"], "read_at IS NOT NULL"),
    (
        "notifications",
        "ix_notifications_unread_age",
        ["tenant", "created_at"],
        "read_at IS NULL",
    ),
    (
        "webhook_deliveries",
        "ix_webhook_deliveries_ended",
        ["tenant", "updated_at"],
        _ENDED_DELIVERIES,
    ),
    ("schedules", "ix_schedules_deleted", ["tenant", "deleted_at"], "deleted_at IS NOT NULL"),
    ("tokens", "ix_tokens_revoked", ["tenant", "revoked_at"], "revoked_at IS NOT NULL"),
]


def upgrade() -> None:
    op.create_table(
        "holds",
        seq_column(),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("subject_kind", sa.String(length=16), nullable=False),
        sa.Column("subject_id", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.String(length=1000), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("released_at", column_types.UTCDateTime(), nullable=True),
        sa.Column("released_by", sa.String(length=200), nullable=True),
        sa.Column("placed_by_host", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_holds")),
        sa.UniqueConstraint("id", name=op.f("uq_holds_id")),
    )
    with op.batch_alter_table("holds", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_holds_tenant_seq"), ["tenant", "seq"], unique=False)
        create_partial_index(
            batch_op, "ix_holds_active", ["tenant", "subject_id"], "released_at IS NULL"
        )

    op.create_table(
        "audit_log",
        seq_column(),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("at", column_types.UTCDateTime(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("token_id", sa.String(length=40), nullable=True),
        sa.Column("action", sa.String(length=100), nullable=False),
        sa.Column("method", sa.String(length=10), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("subject_kind", sa.String(length=32), nullable=True),
        sa.Column("subject_id", sa.String(length=200), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_audit_log")),
    )
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_audit_log_tenant_seq"), ["tenant", "seq"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_audit_log_tenant_subject_id_seq"),
            ["tenant", "subject_id", "seq"],
            unique=False,
        )
        batch_op.create_index(
            batch_op.f("ix_audit_log_tenant_actor_seq"), ["tenant", "actor", "seq"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_audit_log_tenant_at"), ["tenant", "at"], unique=False)

    for table, name, columns, predicate in _SWEEP_INDEXES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            create_partial_index(batch_op, name, columns, predicate)

    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.drop_index("ix_idempotency_keys_decided_at")
        batch_op.create_index(
            batch_op.f("ix_idempotency_keys_tenant_decided_at"),
            ["tenant", "decided_at"],
            unique=False,
        )


def downgrade() -> None:
    # Holds and audit entries go with their tables: the older code has no reader.
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_idempotency_keys_tenant_decided_at"))
        batch_op.create_index(
            batch_op.f("ix_idempotency_keys_decided_at"), ["decided_at"], unique=False
        )
    for table, name, _columns, _predicate in reversed(_SWEEP_INDEXES):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(name)
    op.drop_table("audit_log")
    op.drop_table("holds")
