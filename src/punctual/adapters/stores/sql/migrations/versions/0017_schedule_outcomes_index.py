"""schedule outcomes index: a schedule's last runs to end completed, failed or timed out

The follow-through pass judges, per schedule whose run ended, whether its last three runs
to end failed or timed out (OP-2's ``schedule_failing`` finding). The partial index holds
only runs with such an outcome, by schedule and end, so that read takes three index
entries however long the schedule's history is.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-09
"""

from __future__ import annotations

from alembic import op

from punctual.adapters.stores.sql.migrations.shared import create_partial_index

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_OUTCOMES = "state IN ('completed', 'failed', 'timed_out')"


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        create_partial_index(
            batch, "ix_runs_schedule_outcomes", ["schedule_id", "ended_at", "seq"], _OUTCOMES
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_schedule_outcomes")
