"""create saga: which request may resume a schedule's unfinished create (CR-6)

Under the Temporal Schedules driver a create stores the record, then ensures its Temporal
Schedule. ``schedule_sync.create_token`` is set between the two steps (the digest of the
request that began it): a retry of that request resumes the saga instead of meeting
``409 name_taken``, and reconciliation removes records whose saga never finished.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("schedule_sync") as batch:
        batch.add_column(sa.Column("create_token", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedule_sync") as batch:
        batch.drop_column("create_token")
