"""delivery subjects: the schedule, occurrence and run a webhook delivery is about (RT-1)

A hold on a schedule, a start or a run keeps every record about what it holds, webhook
deliveries included; the sweep asks that of columns, not of the payload. The payload
already names them (``data.schedule_id``, ``data.occurrence_id``, ``data.run_id``):
existing rows are filled from it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_SUBJECTS = ("schedule_id", "occurrence_id", "run_id")


def upgrade() -> None:
    with op.batch_alter_table("webhook_deliveries") as batch:
        for column in _SUBJECTS:
            batch.add_column(sa.Column(column, sa.String(40), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        named = {column: f"payload -> 'data' ->> '{column}'" for column in _SUBJECTS}
    else:
        named = {column: f"json_extract(payload, '$.data.{column}')" for column in _SUBJECTS}
    assignments = ", ".join(f"{column} = {value}" for column, value in named.items())
    op.execute(f"UPDATE webhook_deliveries SET {assignments}")


def downgrade() -> None:
    with op.batch_alter_table("webhook_deliveries") as batch:
        for column in reversed(_SUBJECTS):
            batch.drop_column(column)
