"""The audit log (CR-8): one row per decided user mutation, appended in its transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.adapters.stores.sql import column_types
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.reads import paged
from punctual.adapters.stores.sql.rows import record_columns, record_from_row
from punctual.ports.records import AuditEntry, NewAuditEntry, Seek

_a = t.audit_log.c


def _entry(row: RowMapping) -> AuditEntry:
    return record_from_row(AuditEntry, row)


_RECORD = sa.insert(t.audit_log).values(
    id=sa.bindparam("id"),
    tenant=sa.bindparam("tenant"),
    at=sa.bindparam("at", type_=column_types.UTCDateTime()),
    actor=sa.bindparam("actor"),
    # The token's id as given, else looked up by its digest inside the insert (an indexed
    # equality on ``tokens.digest``): no extra round trip on the hot path of creates.
    token_id=sa.func.coalesce(
        sa.bindparam("token_id", type_=sa.String()),
        sa.select(t.tokens.c.id)
        .where(t.tokens.c.digest == sa.bindparam("token_digest", type_=sa.String()))
        .limit(1)
        .scalar_subquery(),
    ),
    action=sa.bindparam("action"),
    method=sa.bindparam("method"),
    path=sa.bindparam("path"),
    subject_kind=sa.bindparam("subject_kind", type_=sa.String()),
    subject_id=sa.bindparam("subject_id", type_=sa.String()),
    status=sa.bindparam("status", type_=sa.Integer()),
)
"""Built once: a mutation's entry costs one execution of a cached statement."""


class SqlAudit:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def record(self, entries: Sequence[NewAuditEntry], now: datetime) -> None:
        if not entries:
            return
        self._conn.execute(_RECORD, [record_columns(entry, at=now) for entry in entries])

    def find(
        self,
        tenant: str,
        *,
        subject_id: str | None,
        actor: str | None,
        at: Seek[int],
    ) -> list[AuditEntry]:
        query = sa.select(t.audit_log).where(_a.tenant == tenant)
        if subject_id is not None:
            query = query.where(_a.subject_id == subject_id)
        if actor is not None:
            query = query.where(_a.actor == actor)
        query = paged(query, _a.seq, at)
        return [_entry(row) for row in self._conn.execute(query).mappings()]
