"""schedule bookkeeping (last fire, last status) in a table of its own

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from punctual.adapters.stores.sql import column_types

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedule_status",
        sa.Column("schedule_id", sa.String(length=40), nullable=False),
        sa.Column("last_fired_at", column_types.UTCDateTime(), nullable=True),
        sa.Column("last_run_id", sa.String(length=40), nullable=True),
        sa.Column("last_status", sa.String(length=300), nullable=True),
        sa.PrimaryKeyConstraint("schedule_id", name=op.f("pk_schedule_status")),
    )
    op.execute(
        "INSERT INTO schedule_status (schedule_id, last_fired_at, last_run_id, last_status) "
        "SELECT id, last_fired_at, last_run_id, last_status FROM schedules "
        "WHERE last_fired_at IS NOT NULL OR last_run_id IS NOT NULL OR last_status IS NOT NULL"
    )
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_column("last_status")
        batch_op.drop_column("last_run_id")
        batch_op.drop_column("last_fired_at")


def downgrade() -> None:
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_fired_at", column_types.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("last_run_id", sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column("last_status", sa.String(length=300), nullable=True))
    for column in ("last_fired_at", "last_run_id", "last_status"):
        op.execute(
            f"UPDATE schedules SET {column} = (SELECT s.{column} FROM schedule_status s "
            "WHERE s.schedule_id = schedules.id)"
        )
    op.drop_table("schedule_status")
