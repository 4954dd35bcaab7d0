"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from punctual.adapters.stores.sql import column_types
from punctual.adapters.stores.sql.migrations.shared import create_partial_index, seq_column

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "definitions",
        seq_column(),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("artifact", sa.String(length=200), nullable=False),
        sa.Column("input_schema", column_types.JSONType, nullable=False),
        sa.Column("execution_timeout_seconds", sa.Float(), nullable=False),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_definitions")),
        sa.UniqueConstraint("name", "version", name=op.f("uq_definitions_name_version")),
    )
    op.create_table(
        "findings",
        seq_column(),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("subject_id", sa.String(length=200), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("message", sa.String(length=1000), nullable=False),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("acknowledged_at", column_types.UTCDateTime(), nullable=True),
        sa.Column("acknowledged_by", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_findings")),
        sa.UniqueConstraint("id", name=op.f("uq_findings_id")),
        sa.UniqueConstraint(
            "tenant", "kind", "subject_id", name=op.f("uq_findings_tenant_kind_subject_id")
        ),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("principal", sa.String(length=200), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=40), nullable=False),
        sa.Column("lease_until", column_types.UTCDateTime(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("response", column_types.JSONType, nullable=True),
        sa.Column("resource_id", sa.String(length=40), nullable=True),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("decided_at", column_types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("tenant", "principal", "key", name=op.f("pk_idempotency_keys")),
    )
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_idempotency_keys_decided_at"), ["decided_at"], unique=False
        )

    op.create_table(
        "members",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "subject", name=op.f("pk_members")),
    )
    op.create_table(
        "runs",
        seq_column(),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("workflow", sa.String(length=200), nullable=False),
        sa.Column("definition_version", sa.String(length=100), nullable=False),
        sa.Column("artifact", sa.String(length=200), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("origin", column_types.JSONType, nullable=False),
        sa.Column("origin_id", sa.String(length=40), nullable=False),
        sa.Column("started_by", sa.String(length=200), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("result", column_types.JSONType, nullable=True),
        sa.Column("error", column_types.JSONType, nullable=True),
        sa.Column("input", sa.LargeBinary(), nullable=False),
        sa.Column("input_key_id", sa.String(length=64), nullable=False),
        sa.Column("task_queue", sa.String(length=200), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("traceparent", sa.String(length=55), nullable=True),
        sa.Column("timeout_seconds", sa.Float(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("claimed_by", sa.String(length=40), nullable=True),
        sa.Column("lease_until", column_types.UTCDateTime(), nullable=True),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("started_at", column_types.UTCDateTime(), nullable=True),
        sa.Column("ended_at", column_types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_runs")),
        sa.UniqueConstraint("id", name=op.f("uq_runs_id")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        create_partial_index(
            batch_op, "ix_runs_active", ["claimed_by"], "state IN ('pending', 'running')"
        )
        batch_op.create_index(batch_op.f("ix_runs_origin_id"), ["origin_id"], unique=False)
        create_partial_index(
            batch_op, "ix_runs_pending", ["task_queue", "priority", "seq"], "state = 'pending'"
        )
        batch_op.create_index(batch_op.f("ix_runs_tenant_seq"), ["tenant", "seq"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_runs_tenant_workflow"), ["tenant", "workflow"], unique=False
        )

    op.create_table(
        "starts",
        seq_column(),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("workflow", sa.String(length=200), nullable=False),
        sa.Column("business_request_id", sa.String(length=200), nullable=False),
        sa.Column("start_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("time_zone", sa.String(length=64), nullable=True),
        sa.Column("workload_class", sa.String(length=64), nullable=False),
        sa.Column("attributes", column_types.JSONType, nullable=False),
        sa.Column("traceparent", sa.String(length=55), nullable=True),
        sa.Column("input", sa.LargeBinary(), nullable=False),
        sa.Column("input_key_id", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("due_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("next_attempt_at", column_types.UTCDateTime(), nullable=True),
        sa.Column("last_error", column_types.JSONType, nullable=True),
        sa.Column("reason", sa.String(length=300), nullable=True),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("updated_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("definition_version", sa.String(length=100), nullable=True),
        sa.Column("artifact", sa.String(length=200), nullable=True),
        sa.Column("dispatched_at", column_types.UTCDateTime(), nullable=True),
        sa.Column("claimed_by", sa.String(length=40), nullable=True),
        sa.Column("lease_until", column_types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_starts")),
        sa.UniqueConstraint("id", name=op.f("uq_starts_id")),
        sa.UniqueConstraint("run_id", name=op.f("uq_starts_run_id")),
    )
    with op.batch_alter_table("starts", schema=None) as batch_op:
        create_partial_index(
            batch_op, "ix_starts_due", ["due_at"], "state IN ('scheduled', 'dispatching')"
        )
        batch_op.create_index(
            batch_op.f("ix_starts_tenant_business_request_id"),
            ["tenant", "business_request_id"],
            unique=False,
        )
        batch_op.create_index(batch_op.f("ix_starts_tenant_seq"), ["tenant", "seq"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_starts_tenant_state"), ["tenant", "state"], unique=False
        )

    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
    )
    op.create_table(
        "tokens",
        seq_column(),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=200), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("expires_at", column_types.UTCDateTime(), nullable=True),
        sa.Column("revoked_at", column_types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_tokens")),
        sa.UniqueConstraint("digest", name=op.f("uq_tokens_digest")),
        sa.UniqueConstraint("id", name=op.f("uq_tokens_id")),
    )
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_tokens_tenant_subject"), ["tenant", "subject"], unique=False
        )

    op.create_table(
        "workers",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("engine", sa.String(length=16), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("task_queues", column_types.JSONType, nullable=False),
        sa.Column("loaded", column_types.JSONType, nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("started_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("heartbeat_at", column_types.UTCDateTime(), nullable=False),
        sa.Column("stopped_at", column_types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
    )


def downgrade() -> None:

    op.drop_table("workers")
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tokens_tenant_subject"))

    op.drop_table("tokens")
    op.drop_table("tenants")
    with op.batch_alter_table("starts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_starts_tenant_state"))
        batch_op.drop_index(batch_op.f("ix_starts_tenant_seq"))
        batch_op.drop_index(batch_op.f("ix_starts_tenant_business_request_id"))
        batch_op.drop_index("ix_starts_due")

    op.drop_table("starts")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_tenant_workflow"))
        batch_op.drop_index(batch_op.f("ix_runs_tenant_seq"))
        batch_op.drop_index("ix_runs_pending")
        batch_op.drop_index(batch_op.f("ix_runs_origin_id"))
        batch_op.drop_index("ix_runs_active")

    op.drop_table("runs")
    op.drop_table("members")
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_idempotency_keys_decided_at"))

    op.drop_table("idempotency_keys")
    op.drop_table("findings")
    op.drop_table("definitions")
