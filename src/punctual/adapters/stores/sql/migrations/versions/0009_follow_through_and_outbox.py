"""follow-through of occurrences, notifications and the webhook outbox (CR-4, CR-5)

- ``runs.follow_up``: 0 while a schedule's run awaits its follow-through, 1 once
  ``finalize_timed_out`` was recorded for a live run, 2 when done; two partial indexes keep
  the follow-through pass's reads to the awaiting runs. Runs that exist before this
  revision are history: they are set to 2, so the upgrade notifies nobody about them.
- ``schedule_status.status_occurrence_at``: the occurrence that ``last_run_id`` and
  ``last_status`` describe, so that they only move forward; taken from the start of the
  run ``last_run_id`` names.
- New tables ``follow_throughs``, ``notifications``, ``webhooks`` and
  ``webhook_deliveries``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from punctual.adapters.stores.sql import column_types
from punctual.adapters.stores.sql.migrations.shared import create_partial_index, seq_column

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_FOLLOW_UP_ENDED = "schedule_id IS NOT NULL AND follow_up < 2 AND ended_at IS NOT NULL"
_FOLLOW_UP_OVERDUE = "schedule_id IS NOT NULL AND follow_up = 0 AND ended_at IS NULL"


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("follow_up", sa.SmallInteger(), server_default=sa.text("0"), nullable=False)
        )
    op.execute("UPDATE runs SET follow_up = 2")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        create_partial_index(batch_op, "ix_runs_follow_up_ended", ["ended_at"], _FOLLOW_UP_ENDED)
        create_partial_index(
            batch_op, "ix_runs_follow_up_overdue", ["created_at"], _FOLLOW_UP_OVERDUE
        )

    with op.batch_alter_table("schedule_status", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("status_occurrence_at", column_types.UTCDateTime(), nullable=True)
        )
    op.execute(
        "UPDATE schedule_status SET status_occurrence_at = (SELECT s.occurrence_at FROM starts s "
        "WHERE s.run_id = schedule_status.last_run_id) WHERE last_run_id IS NOT NULL"
    )

    op.create_table(
        "follow_throughs",
        sa.Column("occurrence_id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("schedule_id", sa.String(length=40), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("previous_run_id", sa.String(length=40), nullable=True),
        sa.Column("regressions", column_types.JSONType, nullable=False),
        sa.Column("recorded_at", column_types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("occurrence_id", name=op.f("pk_follow_throughs")),
    )

    op.create_table(
        "notifications",
        seq_column(),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("recipient", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("schedule_id", sa.String(length=40), nullable=True),
        sa.Column("occurrence_id", sa.String(length=40), nullable=True),
        sa.Column("run_id", sa.String(length=40), nullable=True),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("details", column_types.JSONType, nullable=False),
        sa.Column("event_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("read_at", column_types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_notifications")),
        sa.UniqueConstraint("id", name=op.f("uq_notifications_id")),
    )
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_notifications_tenant_recipient_seq"),
            ["tenant", "recipient", "seq"],
            unique=False,
        )
        create_partial_index(
            batch_op, "ix_notifications_unread", ["tenant", "recipient", "seq"], "read_at IS NULL"
        )

    op.create_table(
        "webhooks",
        seq_column(),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("url", sa.LargeBinary(), nullable=False),
        sa.Column("url_key_id", sa.String(length=64), nullable=False),
        sa.Column("url_display", sa.String(length=400), nullable=False),
        sa.Column("secret", sa.LargeBinary(), nullable=True),
        sa.Column("secret_key_id", sa.String(length=64), nullable=True),
        sa.Column("events", column_types.JSONType, nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("updated_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("deleted_at", column_types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_webhooks")),
        sa.UniqueConstraint("id", name=op.f("uq_webhooks_id")),
    )
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_webhooks_tenant_seq"), ["tenant", "seq"], unique=False)

    op.create_table(
        "webhook_deliveries",
        seq_column(),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("webhook_id", sa.String(length=40), nullable=False),
        sa.Column("event_id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("payload", column_types.JSONType, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.Column("next_attempt_at", column_types.UTCDateTime(), nullable=True),
        sa.Column("delivered_at", column_types.UTCDateTime(), nullable=True),
        sa.Column("claim_token", sa.String(length=64), nullable=True),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("updated_at", column_types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint("id", name=op.f("uq_webhook_deliveries_id")),
    )
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        create_partial_index(
            batch_op, "ix_webhook_deliveries_due", ["next_attempt_at"], "status = 'pending'"
        )
        batch_op.create_index(
            batch_op.f("ix_webhook_deliveries_webhook_id_seq"),
            ["webhook_id", "seq"],
            unique=False,
        )
        batch_op.create_index(
            batch_op.f("ix_webhook_deliveries_tenant_status"), ["tenant", "status"], unique=False
        )


def downgrade() -> None:
    # Notifications and deliveries go with their tables: the older code has no reader.
    op.drop_table("webhook_deliveries")
    op.drop_table("webhooks")
    op.drop_table("notifications")
    op.drop_table("follow_throughs")
    with op.batch_alter_table("schedule_status", schema=None) as batch_op:
        batch_op.drop_column("status_occurrence_at")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_follow_up_overdue")
        batch_op.drop_index("ix_runs_follow_up_ended")
        batch_op.drop_column("follow_up")
