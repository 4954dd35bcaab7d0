"""calendars and several specs: when a schedule fires, which specs made an occurrence (RS-10)

``schedules.more_specs`` holds the specs after the first (``spec``) as a JSON list (null:
one spec), ``schedules.calendar`` the business calendar (null: none);
``starts.spec_indexes`` the specs that yielded an occurrence (null: a one-off start, a
trigger, or a row from before this revision) and ``starts.calendar_moved_from`` the
instant a calendar moved it from.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from punctual.adapters.stores.sql import column_types

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("more_specs", _JSON, nullable=True))
        batch.add_column(sa.Column("calendar", _JSON, nullable=True))
    # Plain ADD COLUMN on both: a batch would copy ``starts`` on SQLite and lose its
    # counter triggers (0008).
    op.add_column("starts", sa.Column("spec_indexes", _JSON, nullable=True))
    op.add_column(
        "starts", sa.Column("calendar_moved_from", column_types.UTCDateTime(), nullable=True)
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE starts DROP COLUMN calendar_moved_from")
        op.execute("ALTER TABLE starts DROP COLUMN spec_indexes")
    else:
        op.drop_column("starts", "calendar_moved_from")
        op.drop_column("starts", "spec_indexes")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("calendar")
        batch.drop_column("more_specs")
