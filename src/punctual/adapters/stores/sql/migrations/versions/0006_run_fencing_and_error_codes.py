"""run fencing by claim token, claim and start times, run errors with stable codes (FT-2, FT-3)

- ``runs.claim_token`` (``"<worker id>/<attempt>"``): whose claim a run is under; renewal,
  flags and the outcome record match it (FT-2).
- ``runs.claimed_at``: when a worker took the current attempt; ``started_at`` now means
  when its body began. Before this revision ``started_at`` was stamped at the claim, so
  existing rows take it as their ``claimed_at``.
- ``runs.error`` is rewritten to the one shape ``{"code", "message", ...}`` (API.md
  "Runs"); see docs/api.md "Migration notes" for the mapping.
- Validation messages stored before it could quote input values or name input keys that
  the schema does not name (FT-4): they are replaced by a fixed text in starts'
  ``last_error``, in findings, and in recorded ``422 input_invalid`` answers.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

from punctual.adapters.stores.sql import column_types

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
    "NotRecorded": "engine_execution_lost",
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


def _coded_run_error(row: sa.Row[Any]) -> dict[str, Any] | None:
    """A run's error in the 0006 shape, where it is not in it yet."""
    if isinstance(row.error, dict) and "code" not in row.error:
        return coded_error(row.state, row.error)
    return None


_SCRUBBED_VALIDATION = (
    "the input did not validate; the validation message was removed by migration 0006 "
    "because it could quote the input"
)


def _rewrite_in_pages(
    conn: sa.Connection,
    table_name: str,
    column: sa.ColumnClause[Any],
    rewrite: Callable[[sa.Row[Any]], dict[str, Any] | None],
    *,
    reading: tuple[str, ...] = (),
) -> None:
    """Stores what ``rewrite`` makes of each row whose ``column`` is set (None: keep it), a
    page of rows at a time in ``seq`` order; it reads ``id``, ``column`` and the text columns
    named in ``reading``."""
    table = sa.table(
        table_name,
        sa.column("seq", sa.BigInteger()),
        sa.column("id", sa.String()),
        *(sa.column(name, sa.String()) for name in reading),
        column,
    )
    after = 0
    while page := conn.execute(
        sa.select(table)
        .where(table.c.seq > after, column.is_not(None))
        .order_by(table.c.seq)
        .limit(_BATCH)
    ).all():
        after = page[-1].seq
        changed = [
            {"b_id": row.id, "b_value": value}
            for row in page
            if (value := rewrite(row)) is not None
        ]
        if changed:
            conn.execute(
                sa.update(table)
                .where(table.c.id == sa.bindparam("b_id"))
                .values({column: sa.bindparam("b_value")}),
                changed,
            )


def _scrubbed_start_error(row: sa.Row[Any]) -> dict[str, Any] | None:
    """A start's ``input_rejected`` error without its old message."""
    error = row.last_error
    if isinstance(error, dict) and error.get("code") == "input_rejected":
        return {**error, "message": _SCRUBBED_VALIDATION}
    return None


def _scrub_validation_messages(conn: sa.Connection) -> None:
    """FT-4 for what was stored before it: the old messages are replaced, the facts kept."""
    last_error = sa.column("last_error", column_types.JSONType)
    _rewrite_in_pages(conn, "starts", last_error, _scrubbed_start_error)
    findings = sa.table(
        "findings",
        sa.column("kind", sa.String()),
        sa.column("subject_id", sa.String()),
        sa.column("message", sa.String()),
    )
    conn.execute(
        sa.update(findings)
        .where(
            findings.c.kind.in_(["start_failed", "occurrence_failed"]),
            findings.c.message.like("%no longer validates%"),
        )
        .values(
            message=sa.literal("start or occurrence ")
            + findings.c.subject_id
            + sa.literal(" failed: " + _SCRUBBED_VALIDATION)
        )
    )
    keys = sa.table(
        "idempotency_keys",
        sa.column("tenant", sa.String()),
        sa.column("principal", sa.String()),
        sa.column("key", sa.String()),
        sa.column("status_code", sa.Integer()),
        sa.column("response", column_types.JSONType),
    )
    scrubbed = {"error": {"code": "input_invalid", "message": _SCRUBBED_VALIDATION, "details": {}}}
    rows = conn.execute(
        sa.select(keys.c.tenant, keys.c.principal, keys.c.key, keys.c.response).where(
            keys.c.status_code == 422
        )
    ).all()
    changed_keys = [
        {"b_tenant": r.tenant, "b_principal": r.principal, "b_key": r.key}
        for r in rows
        if isinstance(r.response, dict)
        and isinstance(r.response.get("error"), dict)
        and r.response["error"].get("code") == "input_invalid"
    ]
    if changed_keys:
        conn.execute(
            sa.update(keys)
            .where(
                keys.c.tenant == sa.bindparam("b_tenant"),
                keys.c.principal == sa.bindparam("b_principal"),
                keys.c.key == sa.bindparam("b_key"),
            )
            .values(response=scrubbed),
            changed_keys,
        )


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claim_token", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("claimed_at", column_types.UTCDateTime(), nullable=True))
    op.execute("UPDATE runs SET claimed_at = started_at WHERE started_at IS NOT NULL")
    op.execute(
        "UPDATE runs SET claim_token = claimed_by || '/' || CAST(attempts AS VARCHAR(20)) "
        "WHERE state = 'running' AND claimed_by IS NOT NULL"
    )
    conn = op.get_bind()
    _scrub_validation_messages(conn)
    error = sa.column("error", column_types.OutcomeJSON())
    _rewrite_in_pages(conn, "runs", error, _coded_run_error, reading=("state",))


def downgrade() -> None:
    # Errors keep the coded shape: it carries every field the old shapes had but the key.
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("claimed_at")
        batch_op.drop_column("claim_token")
