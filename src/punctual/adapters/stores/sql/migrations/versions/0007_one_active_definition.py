"""one active definition version per name (a partial unique index)

Two workers registering the first versions of a new workflow at once could both make
theirs active on PostgreSQL. Where that happened, the version registered first stays
active and the others become deprecated, as a registration that had waited would have
left them; then the index makes a second active version impossible.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

from punctual.adapters.stores.sql.migrations.shared import create_partial_index

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "UPDATE definitions SET state = 'deprecated' WHERE state = 'active' AND seq > ("
        "SELECT MIN(earliest.seq) FROM definitions earliest "
        "WHERE earliest.name = definitions.name AND earliest.state = 'active')"
    )
    with op.batch_alter_table("definitions", schema=None) as batch_op:
        create_partial_index(
            batch_op, "uq_definitions_active_name", ["name"], "state = 'active'", unique=True
        )


def downgrade() -> None:
    with op.batch_alter_table("definitions", schema=None) as batch_op:
        batch_op.drop_index("uq_definitions_active_name")
