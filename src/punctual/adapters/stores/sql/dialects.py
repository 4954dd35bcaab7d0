"""Everything that differs between SQLite and PostgreSQL, in one place.

SQLite has one writer at a time: write transactions start with ``BEGIN IMMEDIATE`` so
they queue on the busy timeout instead of failing when a reader upgrades, and row
locks are not needed (the database lock serializes writers). PostgreSQL claims with
``FOR UPDATE SKIP LOCKED`` so any number of runners and workers share the work.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine, RowMapping, make_url

from punctual.adapters.stores.sql.column_types import UTCDateTime

SQLITE_BUSY_TIMEOUT_MS = 30_000
_PG_CONNECT_TIMEOUT = {"connect_timeout": 10}
PG_BURST_CONNECTIONS = 4
"""Connections a PostgreSQL pool opens beyond its size in a burst, and closes after it."""
"""Seconds a PostgreSQL connect may take (libpq's own setting)."""


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
    # (retried by runners and workers, ``503`` to API clients). A server that never answers
    # (a dropped route, a stopped process) fails a connect after a bounded wait instead of
    # hanging it; a ``connect_timeout`` in the URL has the last word.
    connect_args = {} if "connect_timeout" in make_url(url).query else _PG_CONNECT_TIMEOUT
    return sa.create_engine(
        url,
        pool_size=pool_size,
        max_overflow=PG_BURST_CONNECTIONS,
        pool_recycle=1800,
        connect_args=connect_args,
    )


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

    The SQL is the same text however many rows a call carries, so it is compiled once and
    the driver parses it once: on PostgreSQL the rows travel as one array per column
    (``INSERT .. SELECT .. FROM unnest(..)``); on SQLite as the parameters of one cached
    statement. Inserted rows are counted with RETURNING, as an executemany's rowcount is
    not reliable on every driver.
    """
    if not rows:
        return 0
    if conn.dialect.name == "postgresql":
        names = list(rows[0])
        batch = _Unnest(table, names)
        stmt = (
            postgresql.insert(table)
            .from_select(names, sa.select(*[batch.column(n) for n in names]))
            .on_conflict_do_nothing(index_elements=key)
            .returning(table.c[key[0]])
        )
        return len(conn.execute(stmt, batch.params(rows)).all())
    lite_stmt = (
        sqlite.insert(table).on_conflict_do_nothing(index_elements=key).returning(table.c[key[0]])
    )
    return len(conn.execute(lite_stmt, [dict(row) for row in rows]).all())


_Shape = tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]
_INSERT_STATEMENTS: dict[_Shape, Any] = {}


def insert_returning(
    conn: sa.Connection,
    table: sa.Table,
    rows: Sequence[Mapping[str, Any]],
    returning: Sequence[str],
    *,
    ignore_conflicts_on: Sequence[str] = (),
) -> list[RowMapping]:
    """Insert rows in one statement and return the ``returning`` columns of those inserted
    (in no particular order); with ``ignore_conflicts_on``, a row whose key exists is
    skipped and not returned.

    The hot path of creates: the statement is built once per shape and reused, so a call
    costs no statement construction or cache-key generation, and the SQL text is the same
    however many rows travel (PostgreSQL: one array per column through ``unnest``; SQLite:
    one cached statement with many parameter sets).
    """
    if not rows:
        return []
    names = tuple(rows[0])
    dialect = conn.dialect.name
    shape = (dialect, table.name, names, tuple(returning), tuple(ignore_conflicts_on))
    stmt = _INSERT_STATEMENTS.get(shape)
    if stmt is None:
        stmt = _build_insert(dialect, table, names, returning, ignore_conflicts_on)
        _INSERT_STATEMENTS[shape] = stmt
    if dialect == "postgresql":
        return list(conn.execute(stmt, _Unnest(table, names).params(rows)).mappings())
    return list(conn.execute(stmt, [dict(row) for row in rows]).mappings())


def _build_insert(
    dialect: str,
    table: sa.Table,
    names: Sequence[str],
    returning: Sequence[str],
    ignore_conflicts_on: Sequence[str],
) -> Any:
    columns = [table.c[n] for n in returning]
    if dialect == "postgresql":
        batch = _Unnest(table, names)
        pg = postgresql.insert(table).from_select(
            list(names), sa.select(*[batch.column(n) for n in names])
        )
        if ignore_conflicts_on:
            pg = pg.on_conflict_do_nothing(index_elements=list(ignore_conflicts_on))
        return pg.returning(*columns)
    lite = sqlite.insert(table)
    if ignore_conflicts_on:
        lite = lite.on_conflict_do_nothing(index_elements=list(ignore_conflicts_on))
    return lite.returning(*columns)


def upsert(
    conn: sa.Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]], key: list[str]
) -> None:
    """Insert rows or, on a conflict of ``key``, overwrite the other columns they carry.

    Rows must have distinct keys; pass them in key order, so that concurrent upserts of
    overlapping rows lock them in the same order and cannot deadlock.
    """
    if not rows:
        return
    names = list(rows[0])
    if conn.dialect.name == "postgresql":
        batch = _Unnest(table, names)
        pg_insert = postgresql.insert(table).from_select(
            names, sa.select(*[batch.column(n) for n in names])
        )
        pg_stmt = pg_insert.on_conflict_do_update(
            index_elements=key,
            set_={n: pg_insert.excluded[n] for n in names if n not in key},
        )
        conn.execute(pg_stmt, batch.params(rows))
        return
    lite_insert = sqlite.insert(table)
    lite_stmt = lite_insert.on_conflict_do_update(
        index_elements=key, set_={n: lite_insert.excluded[n] for n in names if n not in key}
    )
    conn.execute(lite_stmt, [dict(row) for row in rows])


class _Unnest:
    """``unnest(:b_a, :b_b, ..) AS batch(a, b, ..)``: rows passed as one array per column.

    JSON values travel as text and are cast back: a JSON list inside an array parameter
    would otherwise be read as one more array dimension.
    """

    def __init__(self, table: sa.Table, names: Sequence[str]) -> None:
        self._json = {n for n in names if isinstance(table.c[n].type, sa.JSON)}
        self.names = names
        types = {n: sa.Text() if n in self._json else table.c[n].type for n in names}
        arrays = [sa.bindparam(f"b_{n}", type_=postgresql.ARRAY(types[n])) for n in names]
        self._alias = (
            sa.func.unnest(*arrays)
            .table_valued(*[sa.column(n, types[n]) for n in names])
            .render_derived(name="batch")
        )

    def column(self, name: str) -> sa.ColumnElement[Any]:
        column = self._alias.c[name]
        return sa.cast(column, postgresql.JSONB) if name in self._json else column

    def params(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
        return {
            f"b_{n}": [json.dumps(row[n]) if n in self._json else row[n] for row in rows]
            for n in self.names
        }


def update_many(
    conn: sa.Connection,
    table: sa.Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    match: Sequence[str],
    columns: Sequence[str],
    fixed: Mapping[str, Any] | None = None,
    where: Sequence[sa.ColumnElement[bool]] = (),
) -> set[Any]:
    """Update many rows, each with its own values, in one statement; returns the value of
    the first ``match`` column of every row that matched (and every ``where`` condition).

    On PostgreSQL the rows travel as one array per column and are joined with
    ``UPDATE .. FROM unnest(..)``: fixed SQL text, compiled and parsed once however many
    rows a call carries. SQLite runs one cached statement per row (in-process, cheap).
    """
    if not rows:
        return set()
    names = [*match, *columns]
    key = table.c[match[0]]
    if conn.dialect.name == "postgresql":
        batch = _Unnest(table, names)
        pg_stmt = (
            sa.update(table)
            .where(*[table.c[n] == batch.column(n) for n in match], *where)
            .values({**{n: batch.column(n) for n in columns}, **(fixed or {})})
            .returning(key)
        )
        return set(conn.execute(pg_stmt, batch.params(rows)).scalars())
    row_stmt = (
        sa.update(table)
        .where(*[table.c[n] == sa.bindparam(f"b_{n}") for n in match], *where)
        .values({**{n: sa.bindparam(f"b_{n}") for n in columns}, **(fixed or {})})
    )
    matched = set()
    for row in rows:
        if conn.execute(row_stmt, {f"b_{n}": row[n] for n in names}).rowcount == 1:
            matched.add(row[match[0]])
    return matched


_UPDATE_STATEMENTS: dict[tuple[str, str, tuple[str, ...], tuple[str, ...], str], Any] = {}


def update_rows(
    conn: sa.Connection,
    table: sa.Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    match: Sequence[str],
    columns: Sequence[str],
    shape: str,
    constant: Mapping[str, Any] | None = None,
    where: Sequence[sa.ColumnElement[bool]] = (),
) -> set[Any]:
    """``update_many`` for hot paths: the statement is built once per ``shape`` (a name the
    caller gives to its fixed ``constant`` values and ``where`` conditions, which must
    therefore not vary between calls) and reused without being rebuilt."""
    if not rows:
        return set()
    names = (*match, *columns)
    dialect = conn.dialect.name
    cache_key = (dialect, table.name, names, tuple(columns), shape)
    stmt = _UPDATE_STATEMENTS.get(cache_key)
    key = table.c[match[0]]
    if dialect == "postgresql":
        batch = _Unnest(table, names)
        if stmt is None:
            stmt = (
                sa.update(table)
                .where(*[table.c[n] == batch.column(n) for n in match], *where)
                .values({**{n: batch.column(n) for n in columns}, **(constant or {})})
                .returning(key)
            )
            _UPDATE_STATEMENTS[cache_key] = stmt
        return set(conn.execute(stmt, batch.params(rows)).scalars())
    if stmt is None:
        stmt = (
            sa.update(table)
            .where(*[table.c[n] == sa.bindparam(f"b_{n}") for n in match], *where)
            .values({**{n: sa.bindparam(f"b_{n}") for n in columns}, **(constant or {})})
        )
        _UPDATE_STATEMENTS[cache_key] = stmt
    matched = set()
    for row in rows:
        if conn.execute(stmt, {f"b_{n}": row[n] for n in names}).rowcount == 1:
            matched.add(row[match[0]])
    return matched


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


def for_update(
    select: sa.Select[Any],
    conn: sa.Connection,
    *,
    of: sa.Table | None = None,
    skip_locked: bool = False,
) -> sa.Select[Any]:
    """Lock the selected rows (of table ``of`` only, in a join) until commit; SQLite's
    write lock already serializes.

    The rows such a select returns are the versions it locked: a row changed by a
    transaction that committed after the statement began is returned as changed, unlike
    a row read through an ``IN (locking subquery)``, which comes from the statement's
    older snapshot.
    """
    if conn.dialect.name == "postgresql":
        return select.with_for_update(of=of, skip_locked=skip_locked)
    return select


def lock_name(conn: sa.Connection, name: str) -> None:
    """Hold a lock on ``name`` until this transaction ends, so that check-then-write
    decisions about one name (a tenant's schedule count, a workflow's active version)
    are taken one at a time across processes (PostgreSQL: a transaction-scoped advisory
    lock, bounded by ``lock_timeout``). SQLite's write lock already serializes writers."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:name, 0))"), {"name": name}
        )


def is_unique_violation(error: sa.exc.IntegrityError, index: sa.Index) -> bool:
    """The insert or update broke the unique ``index`` (and not another constraint)."""
    orig = error.orig
    if orig is None:
        return False
    diag = getattr(orig, "diag", None)
    if diag is not None:  # psycopg names the index that refused the row
        return bool(getattr(diag, "constraint_name", None) == index.name)
    table = index.table
    assert table is not None
    columns = ", ".join(f"{table.name}.{column.name}" for column in index.columns)
    return str(orig) == f"UNIQUE constraint failed: {columns}"


def constants(*values: str) -> list[sa.ColumnElement[Any]]:
    """Text values written into the statement, not bound: SQLite uses a partial index only
    for a query whose terms repeat its ``WHERE`` literally, never through a parameter.
    For fixed values of the code's own (states), never for input."""
    return [sa.literal_column(f"'{value}'") for value in values]


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


def store_now(conn: sa.Connection, now: datetime) -> sa.ColumnElement[datetime]:
    """The instant leases are measured against: PostgreSQL's clock (``now()``), so that
    hosts with skewed clocks agree on who holds a lease; SQLite serves one machine and
    takes the process clock ``now`` (FT-2)."""
    if conn.dialect.name == "postgresql":
        return sa.func.now()
    return sa.literal(now, type_=UTCDateTime())


def store_stamp(conn: sa.Connection, now: datetime) -> sa.ColumnElement[datetime]:
    """The instant to record as when something happened (a claim, a heartbeat): on
    PostgreSQL the clock as the statement runs (``clock_timestamp()``), never the
    transaction's start (``now()``), which can precede a row the statement reads and so
    record a run as claimed before it was created. ``now`` on SQLite."""
    if conn.dialect.name == "postgresql":
        return sa.func.clock_timestamp()
    return sa.literal(now, type_=UTCDateTime())


def lease_expiry(conn: sa.Connection, seconds: float, now: datetime) -> sa.ColumnElement[datetime]:
    """``seconds`` after ``store_now``: the end of a lease taken or renewed now."""
    if conn.dialect.name == "postgresql":
        return sa.func.now() + sa.literal(timedelta(seconds=seconds), type_=sa.Interval())
    return sa.literal(now + timedelta(seconds=seconds), type_=UTCDateTime())


def passed(
    conn: sa.Connection,
    since: sa.ColumnElement[datetime],
    seconds: sa.ColumnElement[float],
    now: datetime,
) -> sa.ColumnElement[bool]:
    """``since`` + ``seconds`` (a per-row amount) lies before ``store_now``: the database's
    clock on PostgreSQL (FT-2), ``now`` on SQLite."""
    if conn.dialect.name == "postgresql":
        return since + sa.func.make_interval(0, 0, 0, 0, 0, 0, seconds) < sa.func.now()
    day = 86400.0
    return sa.func.julianday(since) + seconds / day < sa.func.julianday(
        sa.literal(now, type_=since.type)
    )


def reclaim_space(engine: Engine, tables: Sequence[str]) -> None:
    """After a retention sweep: on PostgreSQL, ``VACUUM`` the tables it deleted from, so
    their freed space is reused at once rather than when autovacuum comes by (which a
    host may have turned off); ``SKIP_LOCKED`` never waits for a busy table. SQLite reuses
    freed pages of its file by itself, so nothing is done there."""
    if is_sqlite(engine) or not tables:
        return
    names = ", ".join(engine.dialect.identifier_preparer.quote(name) for name in tables)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"VACUUM (SKIP_LOCKED) {names}")
