"""A schedule's occurrences, in either order, are read down ``ix_starts_schedule_seq`` on
PostgreSQL even when the schedule's rows are the oldest of a long table. Asked as
``schedule_id = …`` the planner walks the primary key backwards and filters instead,
which reads the whole later history (a tenant's first schedule, months on)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

from punctual.adapters.stores.sql.store import SqlStore
from punctual.ports.records import OccurrenceFilter, Order, Seek

pytestmark = pytest.mark.postgres

OLD_ROWS = 20_000
LATER_ROWS = 60_000
FILL = """
INSERT INTO starts (id, tenant, workflow, business_request_id, start_at, workload_class,
    attributes, input, input_key_id, state, version, attempts, due_at, created_by,
    created_at, updated_at, run_id, schedule_id, occurrence_at)
SELECT 'occ_' || lpad(g::text, 24, '0'), 'acme', 'report', 'r', now(), 'standard', '{}',
    '\\x00'::bytea, 'k1', 'dispatched', 1, 0, now(), 'alice', now(), now(),
    'run_' || lpad(g::text, 24, '0'),
    CASE WHEN g <= :old THEN 'sch_old' ELSE 'sch_' || (g % 50) END,
    timestamp '2026-01-01' + g * interval '1 minute'
FROM generate_series(1, :total) AS g
"""


@contextmanager
def selects(engine: sa.Engine) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def test_a_schedule_s_old_occurrences_are_read_down_its_index(pg_url: str) -> None:
    store = SqlStore(pg_url)
    try:
        with store.engine.begin() as conn:
            conn.execute(sa.text(FILL), {"old": OLD_ROWS, "total": OLD_ROWS + LATER_ROWS})
            conn.exec_driver_sql("ANALYZE starts")
        for order in Order:
            with selects(store.engine) as seen, store.transaction(readonly=True) as tx:
                rows = tx.starts.find_occurrences(
                    "sch_old", OccurrenceFilter(), Seek(51, None, order)
                )
            assert {row.schedule_id for _, row in rows} == {"sch_old"}
            seqs = [seq for seq, _ in rows]
            assert seqs == sorted(seqs, reverse=order is Order.NEWEST) and len(seqs) == 51
            (statement, parameters) = next((q, p) for q, p in seen if "FROM starts" in q)
            with store.engine.connect() as conn:
                plan = "\n".join(
                    str(row[0]) for row in conn.exec_driver_sql(f"EXPLAIN {statement}", parameters)
                )
            assert "ix_starts_schedule_seq" in plan, (order, plan)
    finally:
        store.dispose()
