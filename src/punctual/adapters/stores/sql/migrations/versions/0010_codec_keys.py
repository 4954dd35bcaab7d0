"""codec key lifecycle: the store's active key id and the processes' key reports (RT-2)

- ``codec_state``: at most one row, the active key id ``punctual keys activate``
  recorded. A database upgraded to this revision has none, so every process keeps sealing
  with its key file's ``active`` until the first activation.
- ``processes``: one row per running punctual process with the key ids its ring holds and
  the one it seals with, refreshed by its heartbeat; activation is refused while a live
  one lacks the key.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from punctual.adapters.stores.sql import column_types

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "codec_state",
        sa.Column("id", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("active_key_id", sa.String(length=64), nullable=False),
        sa.Column("activated_at", column_types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_codec_state")),
    )
    op.create_table(
        "processes",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("components", column_types.JSONType, nullable=False),
        sa.Column("key_ids", column_types.JSONType, nullable=False),
        sa.Column("active_key_id", sa.String(length=64), nullable=True),
        sa.Column("started_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("heartbeat_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("stopped_at", column_types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_processes")),
    )


def downgrade() -> None:
    # The older code seals with each key file's own ``active``: that is what it reverts to.
    op.drop_table("processes")
    op.drop_table("codec_state")
