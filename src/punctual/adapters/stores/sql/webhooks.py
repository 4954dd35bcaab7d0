"""Webhooks and their deliveries: the transactional outbox of CR-4.

A delivery row is written in the transaction that decided its event and leased to one
deliverer at a time through ``next_attempt_at`` (a claim moves it a lease ahead, so a
deliverer that dies mid-send leaves the row due again) and a ``claim_token`` that every
claim replaces: an attempt is recorded only under the token it was claimed with.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import for_update, insert_ignore, notify, update_many
from punctual.adapters.stores.sql.listener import DELIVERIES_CHANNEL
from punctual.adapters.stores.sql.reads import first_record, paged
from punctual.adapters.stores.sql.rows import (
    encrypted_columns,
    encrypted_from_row,
    record_columns,
    record_from_row,
)
from punctual.ports.records import (
    ClaimedDelivery,
    Delivery,
    DeliveryOutcome,
    EncryptedInput,
    NewDelivery,
    NewWebhook,
    Seek,
    WebhookRecord,
)

_w = t.webhooks.c
_d = t.webhook_deliveries.c

_PENDING = "pending"
_OUTCOMES = frozenset({"delivered", "pending", "failed"})
_LAST_ERROR_LENGTH = 500
_WEBHOOK_DELETED = "the webhook was deleted"
_CHANGEABLE = frozenset({"url", "url_display", "secret", "events"})
_PENDING_LITERAL: sa.ColumnElement[str] = sa.literal_column("'pending'")
"""The due index's predicate as a constant, so both databases see the index applies."""


def _secret(row: RowMapping) -> EncryptedInput | None:
    return None if row["secret"] is None else encrypted_from_row(row, "secret")


def _webhook(row: RowMapping) -> WebhookRecord:
    return record_from_row(
        WebhookRecord,
        row,
        url=encrypted_from_row(row, "url"),
        secret=_secret(row),
        events=list(row["events"] or []),
    )


def _delivery(row: RowMapping) -> Delivery:
    return record_from_row(Delivery, row)


class SqlWebhooks:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def insert(self, new: NewWebhook, now: datetime) -> WebhookRecord:
        columns = record_columns(
            new,
            **encrypted_columns("url", new.url),
            **encrypted_columns("secret", new.secret),
            events=list(new.events),
            created_at=now,
            updated_at=now,
        )
        self._conn.execute(sa.insert(t.webhooks).values(columns))
        created = self.get(new.tenant, new.id)
        assert created is not None
        return created

    def get(self, tenant: str, webhook_id: str) -> WebhookRecord | None:
        query = sa.select(t.webhooks).where(
            _w.tenant == tenant, _w.id == webhook_id, _w.deleted_at.is_(None)
        )
        return first_record(self._conn, query, _webhook)

    def find(self, tenant: str, at: Seek[int]) -> list[WebhookRecord]:
        query = sa.select(t.webhooks).where(_w.tenant == tenant, _w.deleted_at.is_(None))
        query = paged(query, _w.seq, at)
        return [_webhook(row) for row in self._conn.execute(query).mappings()]

    def update(
        self, tenant: str, webhook_id: str, now: datetime, **changes: Any
    ) -> WebhookRecord | None:
        unknown = set(changes) - _CHANGEABLE
        if unknown:
            raise ValueError(f"a webhook has no changeable field {sorted(unknown)}")
        values: dict[str, Any] = {"updated_at": now}
        if "url" in changes:
            values.update(encrypted_columns("url", changes["url"]))
        if "secret" in changes:
            values.update(encrypted_columns("secret", changes["secret"]))
        if "url_display" in changes:
            values["url_display"] = changes["url_display"]
        if "events" in changes:
            values["events"] = list(changes["events"])
        self._conn.execute(
            sa.update(t.webhooks)
            .where(_w.tenant == tenant, _w.id == webhook_id, _w.deleted_at.is_(None))
            .values(values)
        )
        return self.get(tenant, webhook_id)

    def delete(self, tenant: str, webhook_id: str, now: datetime) -> bool:
        deleted = self._conn.execute(
            sa.update(t.webhooks)
            .where(_w.tenant == tenant, _w.id == webhook_id, _w.deleted_at.is_(None))
            .values(deleted_at=now, updated_at=now)
        ).rowcount
        if deleted != 1:
            return False
        self._conn.execute(
            sa.update(t.webhook_deliveries)
            .where(_d.webhook_id == webhook_id, _d.status == _PENDING)
            .values(
                status="failed",
                last_error=_WEBHOOK_DELETED,
                next_attempt_at=None,
                claim_token=None,
                updated_at=now,
            )
        )
        return True

    def subscribed(self, tenant: str, kind: str) -> list[WebhookRecord]:
        """A tenant has a handful of webhooks: their ``events`` are filtered here, the
        same way on both databases."""
        query = (
            sa.select(t.webhooks)
            .where(_w.tenant == tenant, _w.deleted_at.is_(None))
            .order_by(_w.seq)
        )
        hooks = [_webhook(row) for row in self._conn.execute(query).mappings()]
        return [hook for hook in hooks if not hook.events or kind in hook.events]

    def enqueue(self, deliveries: Sequence[NewDelivery], now: datetime) -> None:
        rows = [
            record_columns(
                d, status=_PENDING, attempts=0, next_attempt_at=now, created_at=now, updated_at=now
            )
            for d in deliveries
        ]
        queued = sum(
            insert_ignore(self._conn, t.webhook_deliveries, rows[i : i + 500], ["id"])
            for i in range(0, len(rows), 500)
        )
        if queued:
            notify(self._conn, DELIVERIES_CHANNEL)  # the deliverer, in whichever process

    def claim_due(self, now: datetime, lease_seconds: float, limit: int) -> list[ClaimedDelivery]:
        """A deleted webhook's deliveries are never claimed (its delete failed them, and
        the join keeps a delete committing mid-claim from sending one)."""
        if limit <= 0:
            return []
        due = (
            sa.select(
                _d.id,
                _d.tenant,
                _d.webhook_id,
                _d.event_id,
                _d.kind,
                _d.payload,
                _d.attempts,
                _d.created_at,
                _w.url,
                _w.url_key_id,
                _w.secret,
                _w.secret_key_id,
            )
            .select_from(t.webhook_deliveries.join(t.webhooks, _w.id == _d.webhook_id))
            .where(
                _d.status == _PENDING_LITERAL,
                _d.next_attempt_at <= now,
                _w.deleted_at.is_(None),
            )
            .order_by(_d.next_attempt_at, _d.seq)
            .limit(limit)
        )
        locked = for_update(due, self._conn, of=t.webhook_deliveries, skip_locked=True)
        rows = list(self._conn.execute(locked).mappings())
        if not rows:
            return []
        lease_end = now + timedelta(seconds=lease_seconds)
        tokens = {row["id"]: secrets.token_hex(16) for row in rows}
        update_many(
            self._conn,
            t.webhook_deliveries,
            [
                {"id": delivery_id, "claim_token": token, "next_attempt_at": lease_end}
                for delivery_id, token in sorted(tokens.items())
            ],
            match=["id"],
            columns=["claim_token", "next_attempt_at"],
            fixed={"updated_at": now},
        )
        return [
            record_from_row(
                ClaimedDelivery,
                row,
                payload=dict(row["payload"]),
                url=encrypted_from_row(row, "url"),
                secret=_secret(row),
                claim_token=tokens[row["id"]],
            )
            for row in rows
        ]

    def settle(self, outcomes: Sequence[DeliveryOutcome], now: datetime) -> set[str]:
        """Only a pending row still under the outcome's token is recorded; the token is
        spent (a second settle of one claim records nothing)."""
        rows: list[dict[str, Any]] = []
        for outcome in sorted(outcomes, key=lambda o: o.delivery_id):
            if outcome.status not in _OUTCOMES:
                raise ValueError(f"a delivery outcome is one of {sorted(_OUTCOMES)}")
            retry = outcome.status == _PENDING
            if retry and outcome.next_attempt_at is None:
                raise ValueError("a delivery left pending needs its next_attempt_at")
            rows.append(
                {
                    "id": outcome.delivery_id,
                    "claim_token": outcome.claim_token,
                    "status": outcome.status,
                    "last_status_code": outcome.status_code,
                    "last_error": outcome.error[:_LAST_ERROR_LENGTH] if outcome.error else None,
                    "next_attempt_at": outcome.next_attempt_at if retry else None,
                    "delivered_at": now if outcome.status == "delivered" else None,
                }
            )
        return update_many(
            self._conn,
            t.webhook_deliveries,
            rows,
            match=["id", "claim_token"],
            columns=["status", "last_status_code", "last_error", "next_attempt_at", "delivered_at"],
            fixed={"attempts": _d.attempts + 1, "claim_token": None, "updated_at": now},
            where=[_d.status == _PENDING],
        )

    def deliveries(self, tenant: str, webhook_id: str, at: Seek[int]) -> list[Delivery]:
        query = sa.select(t.webhook_deliveries).where(
            _d.tenant == tenant, _d.webhook_id == webhook_id
        )
        query = paged(query, _d.seq, at)
        return [_delivery(row) for row in self._conn.execute(query).mappings()]

    def get_delivery(self, tenant: str, webhook_id: str, delivery_id: str) -> Delivery | None:
        query = sa.select(t.webhook_deliveries).where(
            _d.tenant == tenant, _d.webhook_id == webhook_id, _d.id == delivery_id
        )
        return first_record(self._conn, query, _delivery)

    def redeliver(
        self, tenant: str, webhook_id: str, delivery_id: str, new_id: str, now: datetime
    ) -> Delivery | None:
        """Only to a live webhook: a deleted one has nobody to send to."""
        original = (
            self._conn.execute(
                sa.select(
                    _d.event_id, _d.kind, _d.payload, _d.schedule_id, _d.occurrence_id, _d.run_id
                )
                .select_from(t.webhook_deliveries.join(t.webhooks, _w.id == _d.webhook_id))
                .where(
                    _d.tenant == tenant,
                    _d.webhook_id == webhook_id,
                    _d.id == delivery_id,
                    _w.deleted_at.is_(None),
                )
            )
            .mappings()
            .first()
        )
        if original is None:
            return None
        again = record_from_row(
            NewDelivery,
            original,
            id=new_id,
            tenant=tenant,
            webhook_id=webhook_id,
            payload=dict(original["payload"]),
        )
        self.enqueue([again], now)
        return self.get_delivery(tenant, webhook_id, new_id)

    def count_failed(self, tenant: str) -> int:
        """Failed deliveries of the tenant's live webhooks (a deleted webhook's failures
        need nobody's attention)."""
        query = (
            sa.select(sa.func.count())
            .select_from(t.webhook_deliveries.join(t.webhooks, _w.id == _d.webhook_id))
            .where(_d.tenant == tenant, _d.status == "failed", _w.deleted_at.is_(None))
        )
        return int(self._conn.execute(query).scalar_one())
