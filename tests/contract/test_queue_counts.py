"""The store's reads behind the queue gauges (SPEC OP-4), on SQLite and PostgreSQL:
``Starts.due_backlog`` and ``Runs.pending_by_queue``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.stores.sql.store import SqlStore
from tests.conftest import make_settings
from tests.contract.test_store_contract import (
    T0,
    at,
    claim_runs,
    insert_runs,
    insert_starts,
    new_run,
    new_start,
)


def test_due_backlog_counts_the_due_scheduled_starts_and_tells_the_earliest(
    store: SqlStore,
) -> None:
    with store.transaction(readonly=True) as tx:
        assert tx.starts.due_backlog(T0) == (0, None)
    first, _, _ = insert_starts(
        store,
        new_start(start_at=at(-30), business_request_id="a"),
        new_start(start_at=at(-10), business_request_id="b"),
        new_start(start_at=at(60), business_request_id="later"),
    )
    with store.transaction(readonly=True) as tx:
        assert tx.starts.due_backlog(T0) == (2, at(-30))
        assert tx.starts.due_backlog(T0) == (tx.starts.count_due(T0), at(-30))
        assert tx.starts.due_backlog(at(-20)) == (1, at(-30))
    with store.transaction() as tx:
        claimed = tx.starts.claim_due(T0, 1, "runner-a", 30)
    assert [c.id for c in claimed] == [first], "the earliest due first"
    with store.transaction(readonly=True) as tx:
        assert tx.starts.due_backlog(T0) == (1, at(-10)), "a claimed start is not waiting"


def test_pending_by_queue_counts_pending_runs_per_queue_with_the_oldest(
    store: SqlStore,
) -> None:
    with store.transaction(readonly=True) as tx:
        assert tx.runs.pending_by_queue() == {}
    insert_runs(store, new_run(), new_run(), now=at(-20))
    insert_runs(store, new_run(queue="batch"), now=at(-5))
    insert_runs(store, new_run(), now=at(-1))
    with store.transaction(readonly=True) as tx:
        assert tx.runs.pending_by_queue() == {"default": (3, at(-20)), "batch": (1, at(-5))}
    assert len(claim_runs(store, limit=2)) == 2, "the two oldest of the queue"
    with store.transaction(readonly=True) as tx:
        assert tx.runs.pending_by_queue() == {"default": (1, at(-1)), "batch": (1, at(-5))}


@contextmanager
def statements(engine: sa.Engine) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def test_the_gauges_read_only_the_waiting_rows_on_sqlite(sqlite_url: str, tmp_path: Path) -> None:
    """Every scrape of every process runs these reads: on partial indexes of the waiting
    rows, never a scan of the history (SQLite uses a partial index only when the query
    repeats its predicate as constants)."""
    system = bootstrap.build(make_settings(sqlite_url, tmp_path))
    try:
        engine = system.store.engine
        with statements(engine) as seen, system.store.transaction(readonly=True) as tx:
            tx.starts.due_backlog(T0)
            tx.starts.count_due(T0)
            tx.runs.pending_by_queue()
        assert len(seen) == 3
        with engine.connect() as conn:
            plans = [
                " ".join(
                    str(row[-1])
                    for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", params)
                )
                for sql, params in seen
            ]
        # A scan of a partial index reads the waiting rows only; a table scan reads all.
        assert not any(re.search(r"SCAN (starts|runs)(?! USING)", plan) for plan in plans), plans
        assert ["ix_starts_due" in plan for plan in plans] == [True, True, False], plans
        assert "ix_runs_pending" in plans[2], plans
    finally:
        system.close()
