"""Everything that differs between SQLite and PostgreSQL, in one place.

SQLite has one writer at a time: write transactions start with ``BEGIN IMMEDIATE`` so
they queue on the busy timeout instead of failing when a reader upgrades, and row
locks are not needed (the database lock serializes writers). PostgreSQL claims with
``FOR UPDATE SKIP LOCKED`` so any number of runners and workers share the work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine, make_url

SQLITE_BUSY_TIMEOUT_MS = 30_000


def normalize_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` and use psycopg 3 for them."""
    parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def create_engine(url: str, *, pool_size: int = 10) -> Engine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = sa.create_engine(
            url,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
            pool_size=pool_size,
            max_overflow=pool_size,
        )
        _configure_sqlite(engine)
        return engine
    # No pre-ping: it costs a round trip per checkout. A connection found dead raises a
    # disconnect error, which invalidates the whole pool and surfaces as ``Unavailable``
    # (retried by runners and workers, ``503`` to API clients).
    return sa.create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_recycle=1800)


def _configure_sqlite(engine: Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control from pysqlite so BEGIN IMMEDIATE is ours to emit.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        mode = "DEFERRED" if connection.info.get("readonly") else "IMMEDIATE"
        connection.exec_driver_sql(f"BEGIN {mode}")


def is_sqlite(engine_or_conn: Engine | sa.Connection) -> bool:
    return engine_or_conn.dialect.name == "sqlite"


def insert_ignore(
    conn: sa.Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]], key: list[str]
) -> int:
    """Insert rows, silently keeping existing ones on a conflict of ``key``; rows inserted.

    The rows travel as parameters of one cached statement (SQLAlchemy batches them into
    multi-row VALUES), so the SQL is compiled once however many rows a call carries;
    inserted rows are counted with RETURNING, as an executemany's rowcount is not reliable
    on every driver.
    """
    if not rows:
        return 0
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    stmt = (
        dialect.insert(table).on_conflict_do_nothing(index_elements=key).returning(table.c[key[0]])
    )
    return len(conn.execute(stmt, [dict(row) for row in rows]).all())


def claimable(select: sa.Select[Any], conn: sa.Connection) -> sa.ScalarSelect[Any]:
    """The ids to claim, locked so that concurrent claimers skip them instead of waiting.

    On PostgreSQL the locking select is a MATERIALIZED CTE: written as a plain
    ``IN (subquery)`` the planner may run the subquery more than once, and with
    SKIP LOCKED each run locks different rows, so a claim could exceed its limit.
    """
    if conn.dialect.name != "postgresql":
        return select.scalar_subquery()
    locked = select.with_for_update(skip_locked=True).cte("claimable")
    locked = locked.prefix_with("MATERIALIZED")
    return sa.select(locked.c[0]).scalar_subquery()


def for_update(select: sa.Select[Any], conn: sa.Connection) -> sa.Select[Any]:
    """Lock the selected rows until commit (SQLite's write lock already serializes)."""
    if conn.dialect.name == "postgresql":
        return select.with_for_update()
    return select


def set_lock_timeout(conn: sa.Connection, seconds: float) -> None:
    """Bound how long this transaction waits for a row lock (PostgreSQL only)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = {max(1, int(seconds * 1000))}")


def is_lock_timeout(error: sa.exc.DBAPIError) -> bool:
    """A lock wait ran out: SQLite's busy timeout or PostgreSQL's ``lock_timeout``."""
    if error.orig is None:
        return False
    if type(error.orig).__module__.startswith("sqlite3"):
        return "database is locked" in str(error.orig)
    return type(error.orig).__name__ == "LockNotAvailable"


def notify(conn: sa.Connection, channel: str) -> None:
    """Wake listeners in other processes when this transaction commits (PostgreSQL only;
    SQLite serves one machine and its processes poll)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"NOTIFY {channel}")
