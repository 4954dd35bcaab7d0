"""schedule driver: the installation id and each schedule's sync with Temporal (CR-6)

- ``driver_installation``: one row, the id this store's punctual marks its Temporal
  Schedules with (made on first use), so reconciliation never touches others.
- ``schedule_sync``: per schedule the state of its Temporal copy (``in_sync``,
  ``drifted``, ``orphaned``), when it was checked, Temporal's next fire times (cached:
  reads never call Temporal) and the digest of what was ensured.

Both tables are empty under the SQL driver.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from punctual.adapters.stores.sql import column_types

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "driver_installation",
        sa.Column("id", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("installation_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_driver_installation")),
    )
    op.create_table(
        "schedule_sync",
        sa.Column("schedule_id", sa.String(length=40), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("checked_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("next_fire_times", column_types.JSONType, nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("schedule_id", name=op.f("pk_schedule_sync")),
    )
    op.create_index("ix_schedule_sync_state", "schedule_sync", ["state", "checked_at"])


def downgrade() -> None:
    op.drop_index("ix_schedule_sync_state", table_name="schedule_sync")
    op.drop_table("schedule_sync")
    op.drop_table("driver_installation")
