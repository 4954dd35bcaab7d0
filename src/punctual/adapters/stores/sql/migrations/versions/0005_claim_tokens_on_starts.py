"""claim tokens on starts (FT-5)

Claims no longer bump a start's ``version`` (they are not user-visible transitions); a
claim is fenced by ``(claimed_by, claim_seq)`` instead. Rows that may already have been
claimed start at 1, so their next dispatch knows an earlier attempt may have left an
engine execution behind.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("starts", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("claim_seq", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
    op.execute(
        "UPDATE starts SET claim_seq = 1 WHERE state = 'dispatching' OR version > 1 OR attempts > 0"
    )


def downgrade() -> None:
    with op.batch_alter_table("starts", schema=None) as batch_op:
        batch_op.drop_column("claim_seq")
