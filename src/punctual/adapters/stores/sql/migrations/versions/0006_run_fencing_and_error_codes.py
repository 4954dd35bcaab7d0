"""run fencing by claim token, claim and start times, run errors with stable codes (FT-2, FT-3)

- ``runs.claim_token`` (``"<worker id>/<attempt>"``): whose claim a run is under; renewal,
  flags and the outcome record match it (FT-2).
- ``runs.claimed_at``: when a worker took the current attempt; ``started_at`` now means
  when its body began. Before this revision ``started_at`` was stamped at the claim, so
  existing rows take it as their ``claimed_at``.
- ``runs.error`` is rewritten to the one shape ``{"code", "message", ...}`` (API.md
  "Runs"); see docs/api.md "Migration notes" for the mapping.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from punctual.adapters.stores.sql import tables

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_BATCH = 500

_CODE_OF_STATE = {"canceled": "canceled", "terminated": "terminated", "timed_out": "timed_out"}
_CODE_OF_TYPE = {
    "WorkerLost": "worker_lost",
    "InputUndecryptable": "input_undecryptable",
    "EngineExecutionLost": "engine_execution_lost",
}
_SCRUBBED = (
    "the validation message was removed by migration 0006 because it could quote the "
    "run's input; the run's input did not validate"
)


def coded_error(state: str, error: dict[str, Any]) -> dict[str, Any]:
    """The 0006 shape of an error stored before it (frozen here: the data's history)."""
    if "code" in error:
        return error
    extra = {k: v for k, v in error.items() if k not in ("type", "message", "reason")}
    message = str(error.get("message") or error.get("reason") or state)
    kind = error.get("type")
    code = _CODE_OF_STATE.get(state) or _CODE_OF_TYPE.get(str(kind), "workflow_error")
    if "input_value=" in message or "input_value=" in str(extra.get("traceback", "")):
        # pydantic's text quotes the input (FT-4): keep the fact, not the words.
        message = _SCRUBBED
        extra.pop("traceback", None)
        code = "input_rejected"
    coded: dict[str, Any] = {"code": code, "message": message}
    if kind is not None:
        coded["type"] = kind
    return {**coded, **extra}


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claim_token", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("claimed_at", tables.UTCDateTime(), nullable=True))
    op.execute("UPDATE runs SET claimed_at = started_at WHERE started_at IS NOT NULL")
    op.execute(
        "UPDATE runs SET claim_token = claimed_by || '/' || CAST(attempts AS VARCHAR(20)) "
        "WHERE state = 'running' AND claimed_by IS NOT NULL"
    )
    runs = sa.table(
        "runs",
        sa.column("seq", sa.BigInteger()),
        sa.column("id", sa.String()),
        sa.column("state", sa.String()),
        sa.column("error", tables.OutcomeJSON()),
    )
    conn = op.get_bind()
    after = 0
    while True:
        page = conn.execute(
            sa.select(runs.c.seq, runs.c.id, runs.c.state, runs.c.error)
            .where(runs.c.seq > after, runs.c.error.is_not(None))
            .order_by(runs.c.seq)
            .limit(_BATCH)
        ).all()
        if not page:
            return
        after = page[-1].seq
        changed = [
            {"b_id": row.id, "b_error": coded_error(row.state, row.error)}
            for row in page
            if isinstance(row.error, dict) and "code" not in row.error
        ]
        if changed:
            conn.execute(
                sa.update(runs)
                .where(runs.c.id == sa.bindparam("b_id"))
                .values(error=sa.bindparam("b_error")),
                changed,
            )


def downgrade() -> None:
    # Errors keep the coded shape: it carries every field the old shapes had but the key.
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("claimed_at")
        batch_op.drop_column("claim_token")
