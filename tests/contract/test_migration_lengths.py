"""Migration 0018: the columns that were narrower than what the API accepts into them.

Rows written before it keep their values; afterwards a 200-character ``resource_id`` (a
member's subject) and a long ``url_display`` fit on PostgreSQL too, which enforces widths;
the downgrade gives back exactly 0017's schema, cutting longer values to the old widths.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from alembic import command

from punctual.adapters.stores.sql import migrate
from punctual.adapters.stores.sql.store import SqlStore
from tests.contract.test_migrations import (
    _differences,
    _fresh_database,
    _migrate_to,
    _schema,
    database_kind,
    empty_store,
    empty_url,
)

__all__ = ["database_kind", "empty_store", "empty_url"]  # fixtures shared with test_migrations

BEFORE = "0017"
AT = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
SUBJECT = "s" * 200
LONG_DISPLAY = "http://" + "a" * 1000 + "/…"


def _key_row(key: str, resource_id: str) -> dict[str, object]:
    return {
        "tenant": "acme",
        "principal": "root",
        "key": key,
        "fingerprint": "f" * 64,
        "state": "done",
        "owner": "o",
        "lease_until": AT,
        "status_code": 204,
        "resource_id": resource_id,
        "created_at": AT,
        "decided_at": AT,
    }


def _webhook_row(webhook_id: str, url_display: str) -> dict[str, object]:
    return {
        "id": webhook_id,
        "tenant": "acme",
        "url": b"sealed",
        "url_key_id": "k1",
        "url_display": url_display,
        "events": [],
        "created_by": "root",
        "created_at": AT,
        "updated_at": AT,
    }


def _insert(store: SqlStore, keys: list[dict[str, object]], hooks: list[dict[str, object]]) -> None:
    with store.engine.begin() as conn:
        found = sa.MetaData()
        conn.execute(sa.Table("idempotency_keys", found, autoload_with=conn).insert(), keys)
        conn.execute(sa.Table("webhooks", found, autoload_with=conn).insert(), hooks)


def _stored(store: SqlStore) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    with store.engine.connect() as conn:
        keys = conn.execute(sa.text("SELECT key, resource_id FROM idempotency_keys ORDER BY key"))
        hooks = conn.execute(sa.text("SELECT id, url_display FROM webhooks ORDER BY id"))
        return [tuple(row) for row in keys], [tuple(row) for row in hooks]


def test_0018_widens_the_columns_and_keeps_existing_rows(empty_store: SqlStore) -> None:
    _migrate_to(empty_store, BEFORE)
    _insert(empty_store, [_key_row("k-old", "sta_1")], [_webhook_row("whk_old", "http://a/…")])

    migrate.upgrade(empty_store)
    assert _differences(empty_store) == []
    _insert(empty_store, [_key_row("k-new", SUBJECT)], [_webhook_row("whk_new", LONG_DISPLAY)])

    assert _stored(empty_store) == (
        [("k-new", SUBJECT), ("k-old", "sta_1")],
        [("whk_new", LONG_DISPLAY), ("whk_old", "http://a/…")],
    )


def test_0018_downgrades_to_0017s_schema_and_cuts_longer_values(
    empty_store: SqlStore, database_kind: str, tmp_path: Path
) -> None:
    with _fresh_database(database_kind, tmp_path) as url:
        reference = SqlStore(url)
        try:
            _migrate_to(reference, BEFORE)
            expected = _schema(reference)
        finally:
            reference.dispose()
    migrate.upgrade(empty_store)
    _insert(empty_store, [_key_row("k-new", SUBJECT)], [_webhook_row("whk_new", LONG_DISPLAY)])

    with empty_store.engine.begin() as conn:
        conn.info["readonly"] = False
        command.downgrade(migrate._config(conn), BEFORE)

    assert _schema(empty_store) == expected
    keys, hooks = _stored(empty_store)
    if database_kind == "postgres":
        assert (keys, hooks) == ([("k-new", SUBJECT[:40])], [("whk_new", LONG_DISPLAY[:400])])
    else:  # SQLite keeps any length whatever the declared width
        assert (keys, hooks) == ([("k-new", SUBJECT)], [("whk_new", LONG_DISPLAY)])
    migrate.upgrade(empty_store)
    assert _differences(empty_store) == []
