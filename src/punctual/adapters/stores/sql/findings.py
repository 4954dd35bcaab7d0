"""Health findings: one row per (tenant, kind, subject), acknowledged by a human."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import insert_ignore
from punctual.adapters.stores.sql.reads import first_record
from punctual.adapters.stores.sql.rows import record_from_row
from punctual.domain.ids import new_id
from punctual.ports.records import Finding

_f = t.findings.c


def _finding(row: RowMapping) -> Finding:
    return record_from_row(Finding, row)


class SqlFindings:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def raise_finding(
        self, tenant: str, kind: str, subject_id: str, severity: str, message: str, now: datetime
    ) -> bool:
        """Record a finding once per (tenant, kind, subject); True if it is new."""
        row = {
            "id": new_id("fnd"),
            "tenant": tenant,
            "kind": kind,
            "subject_id": subject_id,
            "severity": severity,
            "message": message[:1000],
            "created_at": now,
        }
        return insert_ignore(self._conn, t.findings, [row], ["tenant", "kind", "subject_id"]) > 0

    def clear(self, tenant: str, kind: str, subject_id: str) -> None:
        """Remove a finding whose cause went away by itself (an outage that ended)."""
        self._conn.execute(
            sa.delete(t.findings).where(
                _f.tenant == tenant, _f.kind == kind, _f.subject_id == subject_id
            )
        )

    def clear_each(self, kind: str, subjects: Collection[tuple[str, str]]) -> None:
        if not subjects:
            return
        self._conn.execute(
            sa.delete(t.findings).where(
                _f.kind == kind, sa.tuple_(_f.tenant, _f.subject_id).in_(sorted(set(subjects)))
            )
        )

    def find(self, tenant: str, after_seq: int = 0, limit: int = 100) -> list[Finding]:
        query = (
            sa.select(t.findings)
            .where(_f.tenant == tenant, _f.seq > after_seq)
            .order_by(_f.seq)
            .limit(limit)
        )
        return [_finding(r) for r in self._conn.execute(query).mappings()]

    def latest(self, tenant: str, limit: int) -> list[Finding]:
        query = (
            sa.select(t.findings)
            .where(_f.tenant == tenant)
            .order_by(_f.acknowledged_at.is_not(None), _f.seq.desc())
            .limit(limit)
        )
        return [_finding(r) for r in self._conn.execute(query).mappings()]

    def count_open(self, tenant: str, severity: str) -> int:
        query = sa.select(sa.func.count()).where(
            _f.tenant == tenant, _f.severity == severity, _f.acknowledged_at.is_(None)
        )
        return int(self._conn.execute(query).scalar_one())

    def get(self, tenant: str, finding_id: str) -> Finding | None:
        query = sa.select(t.findings).where(_f.tenant == tenant, _f.id == finding_id)
        return first_record(self._conn, query, _finding)

    def acknowledge(
        self, tenant: str, finding_id: str, subject: str, now: datetime
    ) -> Finding | None:
        """Idempotent: acknowledging twice keeps the first acknowledgement."""
        self._conn.execute(
            sa.update(t.findings)
            .where(_f.tenant == tenant, _f.id == finding_id, _f.acknowledged_at.is_(None))
            .values(acknowledged_at=now, acknowledged_by=subject)
        )
        return self.get(tenant, finding_id)
