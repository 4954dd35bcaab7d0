"""Notifications: each person's feed, written with the decision that caused it (CR-4)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import insert_ignore
from punctual.adapters.stores.sql.reads import first_record, paged
from punctual.adapters.stores.sql.rows import record_columns, record_from_row
from punctual.ports.records import NewNotification, Notification, Seek

_n = t.notifications.c


def _notification(row: RowMapping) -> Notification:
    return record_from_row(Notification, row, details=dict(row["details"] or {}))


class SqlNotifications:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def insert(self, notes: Sequence[NewNotification], now: datetime) -> None:
        """Notes keep the order given (their ``seq``); an id already stored is kept."""
        rows = [record_columns(note, created_at=now) for note in notes]
        for i in range(0, len(rows), 500):
            insert_ignore(self._conn, t.notifications, rows[i : i + 500], ["id"])

    def find(
        self,
        tenant: str,
        recipient: str,
        *,
        unread_only: bool,
        at: Seek[int],
    ) -> list[Notification]:
        query = sa.select(t.notifications).where(_n.tenant == tenant, _n.recipient == recipient)
        if unread_only:
            query = query.where(_n.read_at.is_(None))
        query = paged(query, _n.seq, at)
        return [_notification(row) for row in self._conn.execute(query).mappings()]

    def get(self, tenant: str, recipient: str, notification_id: str) -> Notification | None:
        query = sa.select(t.notifications).where(
            _n.tenant == tenant, _n.recipient == recipient, _n.id == notification_id
        )
        return first_record(self._conn, query, _notification)

    def mark_read(
        self, tenant: str, recipient: str, notification_id: str, now: datetime
    ) -> Notification | None:
        self._conn.execute(
            sa.update(t.notifications)
            .where(
                _n.tenant == tenant,
                _n.recipient == recipient,
                _n.id == notification_id,
                _n.read_at.is_(None),
            )
            .values(read_at=now)
        )
        return self.get(tenant, recipient, notification_id)
