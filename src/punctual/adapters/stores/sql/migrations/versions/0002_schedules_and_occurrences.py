"""schedules and occurrences

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from punctual.adapters.stores.sql import column_types
from punctual.adapters.stores.sql.migrations.shared import create_partial_index, seq_column

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        seq_column(),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("workflow", sa.String(length=200), nullable=False),
        sa.Column("input", sa.LargeBinary(), nullable=False),
        sa.Column("input_key_id", sa.String(length=64), nullable=False),
        sa.Column("spec", column_types.JSONType, nullable=False),
        sa.Column("overlap", sa.String(length=16), nullable=False),
        sa.Column("missed", sa.String(length=16), nullable=False),
        sa.Column("max_catch_up", sa.Integer(), nullable=False),
        sa.Column("catch_up_window_seconds", sa.Float(), nullable=True),
        sa.Column("misfire_grace_ms", sa.Integer(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("version_policy", sa.String(length=16), nullable=False),
        sa.Column("pinned_version", sa.String(length=100), nullable=True),
        sa.Column("workload_class", sa.String(length=64), nullable=False),
        sa.Column("regression", column_types.JSONType, nullable=True),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("cursor", column_types.UTCDateTime(), nullable=False),
        sa.Column("next_fire_at", column_types.UTCDateTime(), nullable=True),
        sa.Column("last_fired_at", column_types.UTCDateTime(), nullable=True),
        sa.Column("last_run_id", sa.String(length=40), nullable=True),
        sa.Column("last_status", sa.String(length=300), nullable=True),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("updated_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("deleted_at", column_types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_schedules")),
        sa.UniqueConstraint("id", name=op.f("uq_schedules_id")),
    )
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        create_partial_index(
            batch_op, "ix_schedules_next_fire", ["next_fire_at"], "enabled AND deleted_at IS NULL"
        )
        batch_op.create_index(
            batch_op.f("ix_schedules_tenant_created_by"), ["tenant", "created_by"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_schedules_tenant_seq"), ["tenant", "seq"], unique=False
        )
        create_partial_index(
            batch_op,
            "uq_schedules_live_name",
            ["tenant", "name"],
            "deleted_at IS NULL",
            unique=True,
        )

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("schedule_id", sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column("queued_at", column_types.UTCDateTime(), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_runs_schedule_id_state"), ["schedule_id", "state"], unique=False
        )
    # A run waits in the queue since it was created, unless a lost worker requeued it.
    op.execute("UPDATE runs SET queued_at = created_at")

    with op.batch_alter_table("starts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("schedule_id", sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column("occurrence_at", column_types.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("nominal", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("dst_adjustment", sa.String(length=20), nullable=True))
        batch_op.add_column(sa.Column("revision", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("range_last", column_types.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("range_count", sa.Integer(), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_starts_schedule_id_state"), ["schedule_id", "state"], unique=False
        )
        batch_op.create_unique_constraint(
            batch_op.f("uq_starts_schedule_id_occurrence_at"), ["schedule_id", "occurrence_at"]
        )


def downgrade() -> None:
    with op.batch_alter_table("starts", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_starts_schedule_id_occurrence_at"), type_="unique")
        batch_op.drop_index(batch_op.f("ix_starts_schedule_id_state"))
        batch_op.drop_column("range_count")
        batch_op.drop_column("range_last")
        batch_op.drop_column("revision")
        batch_op.drop_column("dst_adjustment")
        batch_op.drop_column("nominal")
        batch_op.drop_column("occurrence_at")
        batch_op.drop_column("schedule_id")

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_schedule_id_state"))
        batch_op.drop_column("queued_at")
        batch_op.drop_column("schedule_id")

    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_index("uq_schedules_live_name")
        batch_op.drop_index(batch_op.f("ix_schedules_tenant_seq"))
        batch_op.drop_index(batch_op.f("ix_schedules_tenant_created_by"))
        batch_op.drop_index("ix_schedules_next_fire")

    op.drop_table("schedules")
