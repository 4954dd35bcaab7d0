"""blackouts, pause_until, start deadlines: windows without fires, a timed pause, lateness (RS-10)

``schedules.blackouts`` holds a schedule's windows as JSON (``[]`` for every existing
schedule), ``schedules.pause_until`` the end of a timed pause (null: none);
``schedules.start_deadline_ms`` how late an occurrence's body may begin (null: any);
``starts.reason_detail`` what a skipped occurrence's decision names beyond its reason (a
blackout's own reason) and ``starts.start_deadline_at`` an occurrence's deadline.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from punctual.adapters.stores.sql import column_types

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(
            sa.Column("blackouts", _JSON, nullable=False, server_default=sa.text("'[]'"))
        )
        batch.add_column(sa.Column("pause_until", column_types.UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("start_deadline_ms", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("starts") as batch:
        batch.add_column(sa.Column("reason_detail", sa.String(300)))
        batch.add_column(sa.Column("start_deadline_at", column_types.UTCDateTime(), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # In place: a batch would copy ``starts`` and lose its counter triggers (0008).
        op.execute("ALTER TABLE starts DROP COLUMN start_deadline_at")
        op.execute("ALTER TABLE starts DROP COLUMN reason_detail")
    else:
        op.drop_column("starts", "start_deadline_at")
        op.drop_column("starts", "reason_detail")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("start_deadline_ms")
        batch.drop_column("pause_until")
        batch.drop_column("blackouts")
