"""request lengths: columns as wide as what the API accepts into them (FT-3, FT-7)

``idempotency_keys.resource_id`` held 40 characters, but a member's add and removal record
the member's subject there (up to 200): on PostgreSQL such a request was a 500, and the
member could not be removed. ``webhooks.url_display`` held 400 characters, but it is the
URL cut after its host, and a URL of up to 2,048 characters may be nearly all host (more
once an internationalised name is spelt in punycode): it becomes text. SQLite does not
enforce these lengths; batch mode rebuilds its tables so the schema says the same.

The downgrade cuts longer values to the old widths on PostgreSQL.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.alter_column(
            "resource_id", existing_type=sa.String(40), type_=sa.String(200), existing_nullable=True
        )
    with op.batch_alter_table("webhooks") as batch:
        batch.alter_column(
            "url_display", existing_type=sa.String(400), type_=sa.Text(), existing_nullable=False
        )


def downgrade() -> None:
    with op.batch_alter_table("webhooks") as batch:
        batch.alter_column(
            "url_display",
            existing_type=sa.Text(),
            type_=sa.String(400),
            existing_nullable=False,
            postgresql_using="left(url_display, 400)",
        )
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.alter_column(
            "resource_id",
            existing_type=sa.String(200),
            type_=sa.String(40),
            existing_nullable=True,
            postgresql_using="left(resource_id, 40)",
        )
