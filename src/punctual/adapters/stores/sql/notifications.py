"""Notifications: each person's feed, written with the decision that caused it (CR-4)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import insert_ignore
from punctual.ports.records import NewNotification, Notification

_n = t.notifications.c


def _notification(row: RowMapping) -> Notification:
    return Notification(
        id=row["id"],
        tenant=row["tenant"],
        recipient=row["recipient"],
        kind=row["kind"],
        schedule_id=row["schedule_id"],
        occurrence_id=row["occurrence_id"],
        run_id=row["run_id"],
        title=row["title"],
        text=row["text"],
        details=dict(row["details"] or {}),
        event_id=row["event_id"],
        created_at=row["created_at"],
        read_at=row["read_at"],
        seq=row["seq"],
    )


class SqlNotifications:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def insert(self, notes: Sequence[NewNotification], now: datetime) -> None:
        """Notes keep the order given (their ``seq``); an id already stored is kept."""
        rows = [
            {
                "id": note.id,
                "tenant": note.tenant,
                "recipient": note.recipient,
                "kind": note.kind,
                "schedule_id": note.schedule_id,
                "occurrence_id": note.occurrence_id,
                "run_id": note.run_id,
                "title": note.title,
                "text": note.text,
                "details": note.details,
                "event_id": note.event_id,
                "created_at": now,
            }
            for note in notes
        ]
        for i in range(0, len(rows), 500):
            insert_ignore(self._conn, t.notifications, rows[i : i + 500], ["id"])

    def find(
        self,
        tenant: str,
        recipient: str,
        *,
        unread_only: bool,
        before_seq: int | None,
        limit: int,
    ) -> list[Notification]:
        query = sa.select(t.notifications).where(_n.tenant == tenant, _n.recipient == recipient)
        if unread_only:
            query = query.where(_n.read_at.is_(None))
        if before_seq is not None:
            query = query.where(_n.seq < before_seq)
        query = query.order_by(_n.seq.desc()).limit(limit)
        return [_notification(row) for row in self._conn.execute(query).mappings()]

    def get(self, tenant: str, recipient: str, notification_id: str) -> Notification | None:
        row = (
            self._conn.execute(
                sa.select(t.notifications).where(
                    _n.tenant == tenant, _n.recipient == recipient, _n.id == notification_id
                )
            )
            .mappings()
            .first()
        )
        return _notification(row) if row else None

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
