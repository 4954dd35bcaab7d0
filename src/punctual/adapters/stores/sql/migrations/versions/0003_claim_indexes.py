"""partial indexes for expired claims and buffered occurrences

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

from punctual.adapters.stores.sql.migrations.shared import create_partial_index

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("starts", schema=None) as batch_op:
        create_partial_index(
            batch_op, "ix_starts_claim_lease", ["lease_until"], "state = 'dispatching'"
        )
        create_partial_index(batch_op, "ix_starts_buffered", ["schedule_id"], "state = 'buffered'")


def downgrade() -> None:
    with op.batch_alter_table("starts", schema=None) as batch_op:
        batch_op.drop_index("ix_starts_buffered")
        batch_op.drop_index("ix_starts_claim_lease")
