"""The triggers that keep ``pending_start_counts`` (0008), which 0012 makes again with a wider
predicate: one text, so the two revisions cannot drift apart.

Revisions already applied emit these statements, so they are history too: the text they
build must never change (a later predicate is an argument, not an edit).
"""

from __future__ import annotations

from collections.abc import Callable

SQLITE_TRIGGER_NAMES = (
    "starts_pending_insert",
    "starts_pending_leave",
    "starts_pending_enter",
    "starts_pending_delete",
)


def pg_function(pending: Callable[[str], str], *, replace: bool = False) -> str:
    """PostgreSQL's statement-level counter: one aggregated delta row per (tenant, class)
    and statement; ``pending(rows)`` says which rows of a transition table count."""
    create = "CREATE OR REPLACE FUNCTION" if replace else "CREATE FUNCTION"
    return f"""
{create} punctual_pending_start_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pending_start_counts (tenant, workload_class, delta)
        SELECT tenant, workload_class, count(*) FROM new_rows
        WHERE {pending("new_rows")}
        GROUP BY tenant, workload_class;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO pending_start_counts (tenant, workload_class, delta)
        SELECT tenant, workload_class, -count(*) FROM old_rows
        WHERE {pending("old_rows")}
        GROUP BY tenant, workload_class;
    ELSE
        INSERT INTO pending_start_counts (tenant, workload_class, delta)
        SELECT tenant, workload_class, sum(d) FROM (
            SELECT tenant, workload_class, -1 AS d FROM old_rows
            WHERE {pending("old_rows")}
            UNION ALL
            SELECT tenant, workload_class, 1 AS d FROM new_rows
            WHERE {pending("new_rows")}
        ) AS changes
        GROUP BY tenant, workload_class
        HAVING sum(d) <> 0;
    END IF;
    RETURN NULL;
END
$$
"""


def sqlite_triggers(pending: Callable[[str], str]) -> list[str]:
    """SQLite's row-level triggers (one writer at a time, in process: cheap), named as in
    ``SQLITE_TRIGGER_NAMES``; ``pending("OLD")`` and ``pending("NEW")`` say whether a row
    counts."""
    old, new = pending("OLD"), pending("NEW")
    same_bucket = "NEW.tenant = OLD.tenant AND NEW.workload_class = OLD.workload_class"
    insert = "INSERT INTO pending_start_counts (tenant, workload_class, delta) VALUES "
    return [
        f"CREATE TRIGGER starts_pending_insert AFTER INSERT ON starts WHEN {new} "
        f"BEGIN {insert}(NEW.tenant, NEW.workload_class, 1); END",
        f"CREATE TRIGGER starts_pending_leave AFTER UPDATE ON starts "
        f"WHEN {old} AND NOT ({new} AND {same_bucket}) "
        f"BEGIN {insert}(OLD.tenant, OLD.workload_class, -1); END",
        f"CREATE TRIGGER starts_pending_enter AFTER UPDATE ON starts "
        f"WHEN {new} AND NOT ({old} AND {same_bucket}) "
        f"BEGIN {insert}(NEW.tenant, NEW.workload_class, 1); END",
        f"CREATE TRIGGER starts_pending_delete AFTER DELETE ON starts WHEN {old} "
        f"BEGIN {insert}(OLD.tenant, OLD.workload_class, -1); END",
    ]
