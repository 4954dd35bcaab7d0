"""A create in one round trip on PostgreSQL: one call of ``punctual_create_start``
(migration 0019), sent in autocommit so that no ``BEGIN`` or ``COMMIT`` travels with it.

The statement is built once; psycopg prepares it on the server after a few executions, so
a create costs neither compilation here nor planning there. Every argument is cast to its
declared type, so the call resolves whatever types the driver gives its parameters.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from punctual.adapters.stores.sql.column_types import UTCDateTime
from punctual.adapters.stores.sql.idempotency import recorded_response, stored_response
from punctual.adapters.stores.sql.listener import DUE_CHANNEL
from punctual.adapters.stores.sql.pending_counts import FOLD_AFTER_ROWS
from punctual.ports.store import OneTripAnswer, OneTripCreate, OneTripOutcome

_PARAMETERS = [
    ("p_tenant", "text"),
    ("p_principal", "text"),
    ("p_key", "text"),
    ("p_fingerprint", "text"),
    ("p_owner", "text"),
    ("p_lease_until", "timestamptz"),
    ("p_response", "jsonb"),
    ("p_id", "text"),
    ("p_workflow", "text"),
    ("p_definition_version", "text"),
    ("p_business_request_id", "text"),
    ("p_start_at", "timestamptz"),
    ("p_time_zone", "text"),
    ("p_workload_class", "text"),
    ("p_attributes", "jsonb"),
    ("p_traceparent", "text"),
    ("p_input", "bytea"),
    ("p_input_key_id", "text"),
    ("p_created_by", "text"),
    ("p_run_id", "text"),
    ("p_now", "timestamptz"),
    ("p_max_pending", "bigint"),
    ("p_max_pending_in_class", "bigint"),
    ("p_lock_quota", "boolean"),
    ("p_fold_after", "bigint"),
    ("p_audit_id", "text"),
    ("p_audit_actor", "text"),
    ("p_audit_token_id", "text"),
    ("p_audit_token_digest", "text"),
    ("p_audit_action", "text"),
    ("p_audit_method", "text"),
    ("p_audit_path", "text"),
    ("p_audit_subject_kind", "text"),
    ("p_audit_subject_id", "text"),
    ("p_audit_status", "integer"),
    ("p_notify_channel", "text"),
    ("p_lock_timeout", "text"),
]
_TYPES: dict[str, Any] = {
    "timestamptz": UTCDateTime(),
    "jsonb": postgresql.JSONB(),
    "bytea": sa.LargeBinary(),
}
_CALL = (
    sa.text(
        "SELECT outcome, status_code, response, fingerprint, state FROM punctual_create_start("
        + ", ".join(f"CAST(:{name} AS {sql_type})" for name, sql_type in _PARAMETERS)
        + ")"
    )
    .bindparams(
        *(
            sa.bindparam(name, type_=_TYPES[sql_type])
            for name, sql_type in _PARAMETERS
            if sql_type in _TYPES
        )
    )
    .columns(
        outcome=sa.String(),
        status_code=sa.Integer(),
        response=postgresql.JSONB(),
        fingerprint=sa.String(),
        state=sa.String(),
    )
)


def create_in_one_trip(engine: sa.Engine, request: OneTripCreate) -> OneTripAnswer | None:
    """Call the function once, in autocommit: the call is its own transaction. None when
    it answered nothing: a key it found taken was gone again before it could read it (a
    release, a sweep), which the transaction path knows how to wait out."""
    dialect = engine.dialect
    with engine.connect() as conn:
        autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
        row = autocommit.execute(_CALL, _arguments(request, dialect)).one_or_none()
    if row is None:
        return None
    outcome = OneTripOutcome(row.outcome)
    if outcome is not OneTripOutcome.KEY_TAKEN:
        return OneTripAnswer(outcome)
    return OneTripAnswer(
        outcome,
        status_code=row.status_code,
        response=recorded_response(row.response, dialect),
        fingerprint=row.fingerprint,
        state=row.state,
    )


def _arguments(request: OneTripCreate, dialect: sa.Dialect) -> dict[str, Any]:
    start, audit = request.start, request.audit
    arguments: dict[str, Any] = {
        "p_tenant": start.tenant,
        "p_principal": request.principal,
        "p_key": request.key,
        "p_fingerprint": request.fingerprint,
        "p_owner": request.owner,
        "p_lease_until": request.lease_until,
        "p_response": stored_response(request.response, dialect),
        "p_id": start.id,
        "p_workflow": start.workflow,
        "p_definition_version": request.definition_version,
        "p_business_request_id": start.business_request_id,
        "p_start_at": start.start_at,
        "p_time_zone": start.time_zone,
        "p_workload_class": start.workload_class,
        "p_attributes": start.attributes,
        "p_traceparent": start.traceparent,
        "p_input": start.input.ciphertext,
        "p_input_key_id": start.input.key_id,
        "p_created_by": start.created_by,
        "p_run_id": start.run_id,
        "p_now": request.now,
        "p_max_pending": request.max_pending,
        "p_max_pending_in_class": request.max_pending_in_class,
        "p_lock_quota": request.lock_quota,
        "p_fold_after": FOLD_AFTER_ROWS,
        "p_notify_channel": DUE_CHANNEL if request.notify_due else None,
        "p_lock_timeout": f"{max(1, int(request.lock_timeout * 1000))}ms",
    }
    for field in (
        "id",
        "actor",
        "token_id",
        "token_digest",
        "action",
        "method",
        "path",
        "subject_kind",
        "subject_id",
        "status",
    ):
        arguments[f"p_audit_{field}"] = getattr(audit, field) if audit is not None else None
    return arguments
