"""driver skip marks: how far Temporal's own skips were recorded as occurrences (RS-4)

Under the Temporal Schedules driver, Temporal's overlap policy and catch-up window decide
that some fire times start nothing. The reconciliation sweep records those as skipped
occurrences and keeps, on each schedule's ``schedule_sync`` row, the instant up to which it
has done so and the schedule version it saw then (a later version means the schedule may
have been paused or edited in between). Both stay null under the SQL driver.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from punctual.adapters.stores.sql import column_types

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("schedule_sync") as batch:
        batch.add_column(
            sa.Column("skips_checked_through", column_types.UTCDateTime(), nullable=True)
        )
        batch.add_column(sa.Column("skips_version", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedule_sync") as batch:
        batch.drop_column("skips_version")
        batch.drop_column("skips_checked_through")
