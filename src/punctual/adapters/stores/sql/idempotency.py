"""Idempotency keys: one row per (tenant, principal, key), in flight or decided."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from punctual.adapters.stores.sql import column_types
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import insert_returning, update_rows
from punctual.adapters.stores.sql.reads import first_record
from punctual.adapters.stores.sql.rows import record_from_row
from punctual.ports.records import IdempotencyRecord, KeyOutcome

_k = t.idempotency_keys.c
_KEY = ["tenant", "principal", "key"]
_IN_FLIGHT = [_k.state == "in_flight"]
_RESPONSE = column_types.OutcomeJSON()
"""A recorded answer is kept as the runs table keeps results and errors (FT-3): one whose
JSON holds U+0000 (a run view's result or error) is stored as its JSON text, so its replay
answers the same bytes on both stores instead of failing in PostgreSQL's JSONB."""


def stored_response(response: Any, dialect: sa.Dialect) -> Any:
    """What the response column holds for ``response`` (the escaped envelope included)."""
    return _RESPONSE.process_bind_param(response, dialect)


def recorded_response(stored: Any, dialect: sa.Dialect) -> Any:
    """The answer that the response column's ``stored`` value records."""
    return _RESPONSE.process_result_value(stored, dialect)


def _record(row: Any, dialect: sa.Dialect) -> IdempotencyRecord:
    return record_from_row(
        IdempotencyRecord, row, response=recorded_response(row["response"], dialect)
    )


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
        claimed = self.claim_many(tenant, principal, [(key, fingerprint)], owner, lease_until, now)
        return key in claimed

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
        query = sa.select(t.idempotency_keys).where(self._where(tenant, principal, key))
        return first_record(self._conn, query, lambda row: _record(row, self._conn.dialect))

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
                response=stored_response(response, self._conn.dialect),
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

    def claim_many(
        self,
        tenant: str,
        principal: str,
        keys: Sequence[tuple[str, str]],
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> set[str]:
        """``try_claim`` for many (key, fingerprint) pairs in one statement; the keys claimed.

        Keys are inserted in sorted order, so two requests claiming overlapping keys wait
        for each other in the same order and cannot deadlock.
        """
        rows = [
            {
                "tenant": tenant,
                "principal": principal,
                "key": key,
                "fingerprint": fingerprint,
                "state": "in_flight",
                "owner": owner,
                "lease_until": lease_until,
                "created_at": now,
            }
            for key, fingerprint in sorted(keys)
        ]
        inserted = insert_returning(
            self._conn, t.idempotency_keys, rows, ["key"], ignore_conflicts_on=_KEY
        )
        return {row["key"] for row in inserted}

    def get_many(
        self, tenant: str, principal: str, keys: Sequence[str]
    ) -> dict[str, IdempotencyRecord]:
        if not keys:
            return {}
        query = sa.select(t.idempotency_keys).where(
            _k.tenant == tenant, _k.principal == principal, _k.key.in_(list(keys))
        )
        dialect = self._conn.dialect
        return {row["key"]: _record(row, dialect) for row in self._conn.execute(query).mappings()}

    def complete_many(
        self,
        tenant: str,
        principal: str,
        owner: str,
        outcomes: Sequence[KeyOutcome],
        now: datetime,
    ) -> set[str]:
        """``complete`` for many keys in one statement; the keys recorded."""
        rows = [
            {
                "key": o.key,
                "tenant": tenant,
                "principal": principal,
                "owner": owner,
                "status_code": o.status_code,
                "response": stored_response(o.response, self._conn.dialect),
                "resource_id": o.resource_id,
                "decided_at": now,
            }
            for o in outcomes
        ]
        return update_rows(
            self._conn,
            t.idempotency_keys,
            rows,
            match=["key", "tenant", "principal", "owner"],
            columns=["status_code", "response", "resource_id", "decided_at"],
            shape="complete",
            constant={"state": "done"},
            where=_IN_FLIGHT,
        )

    def release_many(self, tenant: str, principal: str, keys: Sequence[str], owner: str) -> None:
        if not keys:
            return
        self._conn.execute(
            sa.delete(t.idempotency_keys).where(
                _k.tenant == tenant,
                _k.principal == principal,
                _k.key.in_(list(keys)),
                _k.owner == owner,
                _k.state == "in_flight",
            )
        )
