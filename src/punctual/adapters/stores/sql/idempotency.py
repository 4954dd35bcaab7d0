"""Idempotency keys: one row per (tenant, principal, key), in flight or decided."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import insert_ignore
from punctual.ports.records import IdempotencyRecord

_k = t.idempotency_keys.c


class SqlIdempotency:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def _where(self, tenant: str, principal: str, key: str) -> sa.ColumnElement[bool]:
        return sa.and_(_k.tenant == tenant, _k.principal == principal, _k.key == key)

    def try_claim(
        self,
        tenant: str,
        principal: str,
        key: str,
        fingerprint: str,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> bool:
        """Record the key as in flight for ``owner``; False if the key already has a row."""
        row = {
            "tenant": tenant,
            "principal": principal,
            "key": key,
            "fingerprint": fingerprint,
            "state": "in_flight",
            "owner": owner,
            "lease_until": lease_until,
            "created_at": now,
        }
        return (
            insert_ignore(self._conn, t.idempotency_keys, [row], ["tenant", "principal", "key"]) > 0
        )

    def take_over(
        self,
        tenant: str,
        principal: str,
        key: str,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> bool:
        """Adopt an in-flight key whose owner's lease ran out (its process died)."""
        result = self._conn.execute(
            sa.update(t.idempotency_keys)
            .where(
                self._where(tenant, principal, key),
                _k.state == "in_flight",
                _k.lease_until < now,
            )
            .values(owner=owner, lease_until=lease_until)
        )
        return result.rowcount > 0

    def get(self, tenant: str, principal: str, key: str) -> IdempotencyRecord | None:
        row = (
            self._conn.execute(
                sa.select(t.idempotency_keys).where(self._where(tenant, principal, key))
            )
            .mappings()
            .first()
        )
        if row is None:
            return None
        return IdempotencyRecord(
            tenant=row["tenant"],
            principal=row["principal"],
            key=row["key"],
            fingerprint=row["fingerprint"],
            state=row["state"],
            owner=row["owner"],
            lease_until=row["lease_until"],
            status_code=row["status_code"],
            response=row["response"],
        )

    def complete(
        self,
        tenant: str,
        principal: str,
        key: str,
        owner: str,
        status_code: int,
        response: Any,
        resource_id: str | None,
        now: datetime,
    ) -> bool:
        """Record the decided outcome; False if ``owner`` no longer holds the key."""
        result = self._conn.execute(
            sa.update(t.idempotency_keys)
            .where(self._where(tenant, principal, key), _k.owner == owner, _k.state == "in_flight")
            .values(
                state="done",
                status_code=status_code,
                response=response,
                resource_id=resource_id,
                decided_at=now,
            )
        )
        return result.rowcount > 0

    def release(self, tenant: str, principal: str, key: str, owner: str) -> None:
        """Forget an in-flight key whose outcome was not decided, so a retry can run."""
        self._conn.execute(
            sa.delete(t.idempotency_keys).where(
                self._where(tenant, principal, key), _k.owner == owner, _k.state == "in_flight"
            )
        )
