"""The SQL store: transactions over SQLite or PostgreSQL, with one repository per aggregate."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url

from punctual.adapters.stores.sql import dialects
from punctual.adapters.stores.sql.audit import SqlAudit
from punctual.adapters.stores.sql.definitions import SqlDefinitions
from punctual.adapters.stores.sql.dialects import (
    create_engine,
    is_lock_timeout,
    normalize_url,
    set_lock_timeout,
)
from punctual.adapters.stores.sql.findings import SqlFindings
from punctual.adapters.stores.sql.followthrough import SqlFollowThrough
from punctual.adapters.stores.sql.holds import SqlHolds
from punctual.adapters.stores.sql.idempotency import SqlIdempotency
from punctual.adapters.stores.sql.identity import SqlIdentity
from punctual.adapters.stores.sql.keys import SqlKeys
from punctual.adapters.stores.sql.ledger import SqlRunLedgerStore
from punctual.adapters.stores.sql.notifications import SqlNotifications
from punctual.adapters.stores.sql.one_trip import create_in_one_trip
from punctual.adapters.stores.sql.retention import SqlRetention
from punctual.adapters.stores.sql.runs import SqlRuns
from punctual.adapters.stores.sql.schedule_sync import SqlScheduleSync
from punctual.adapters.stores.sql.schedules import SqlSchedules
from punctual.adapters.stores.sql.starts import SqlStarts
from punctual.adapters.stores.sql.webhooks import SqlWebhooks
from punctual.errors import HostUnavailable, Unavailable
from punctual.ports.store import OneTripAnswer, OneTripCreate

POOL_SIZE = 16
"""Connections a process keeps open once it has needed them (PostgreSQL opens 4 more in a
burst, and closes those after it: 20 at most, as many as before). A create on PostgreSQL
holds one for a single round trip on the request's own thread, so 16 busy clients keep
about 16 in use: a pool smaller than that opens and closes a connection per request, and
each costs the server a new backend process (measured: a third fewer creates per second
with 10)."""


@dataclass
class SqlTx:
    """One open transaction and the repositories that work inside it."""

    conn: sa.Connection
    keys: SqlKeys
    identity: SqlIdentity
    definitions: SqlDefinitions
    idempotency: SqlIdempotency
    starts: SqlStarts
    runs: SqlRuns
    run_ledger: SqlRunLedgerStore
    findings: SqlFindings
    schedules: SqlSchedules
    follow_through: SqlFollowThrough
    notifications: SqlNotifications
    webhooks: SqlWebhooks
    retention: SqlRetention
    holds: SqlHolds
    audit: SqlAudit
    schedule_sync: SqlScheduleSync

    @classmethod
    def on(cls, conn: sa.Connection) -> SqlTx:
        return cls(
            conn=conn,
            keys=SqlKeys(conn),
            identity=SqlIdentity(conn),
            definitions=SqlDefinitions(conn),
            idempotency=SqlIdempotency(conn),
            starts=SqlStarts(conn),
            runs=SqlRuns(conn),
            run_ledger=SqlRunLedgerStore(conn),
            findings=SqlFindings(conn),
            schedules=SqlSchedules(conn),
            follow_through=SqlFollowThrough(conn),
            notifications=SqlNotifications(conn),
            webhooks=SqlWebhooks(conn),
            retention=SqlRetention(conn),
            holds=SqlHolds(conn),
            audit=SqlAudit(conn),
            schedule_sync=SqlScheduleSync(conn),
        )


class SqlStore:
    """Owns the connection pool; every unit of work is one ``transaction()``."""

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE) -> None:
        """Refuses a URL that names no database punctual runs on (``HostUnavailable``,
        ``database_url_unsupported``); connects only when first used."""
        self.url = url
        self.engine: Engine = _engine_for(url, pool_size)

    def check_connection(self) -> None:
        """Connect once: a database that cannot be reached or opened is refused at startup
        with one message naming it and what to fix (SPEC OP-1), never its password."""
        try:
            with self.engine.connect():
                pass
        except sa.exc.DBAPIError as exc:
            raise HostUnavailable(
                _cannot_connect(make_url(self.url), exc), code="database_unavailable"
            ) from exc

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def transaction(
        self, *, readonly: bool = False, lock_timeout: float | None = None
    ) -> Iterator[SqlTx]:
        """Commit on success, roll back on any exception.

        ``lock_timeout`` bounds row-lock waits on PostgreSQL; SQLite waits on its busy
        timeout. A store that cannot be reached raises ``Unavailable`` (never charged to
        a start, DP-3).
        """
        try:
            conn = self.engine.connect()
        except sa.exc.OperationalError as exc:
            raise Unavailable(
                f"the database is unavailable: {exc.orig}", code="store_unavailable"
            ) from exc
        try:
            conn.info["readonly"] = readonly
            with conn.begin():
                if lock_timeout is not None:
                    set_lock_timeout(conn, lock_timeout)
                yield SqlTx.on(conn)
        except sa.exc.DBAPIError as exc:
            if is_lock_timeout(exc):
                raise Unavailable(
                    "the data this request needs is locked by another operation; retry the "
                    "same request",
                    code="store_busy",
                ) from exc
            if exc.connection_invalidated:
                raise Unavailable(
                    f"the database connection was lost: {exc.orig}", code="store_unavailable"
                ) from exc
            if isinstance(exc, sa.exc.OperationalError):
                # A deadlock, a serialization failure, a statement timeout, a full or
                # failing disk: nothing wrong with the data, so the caller retries later
                # (a worker keeps the outcome; it is never a reason to give up on it).
                raise Unavailable(
                    "the database could not complete the transaction now; retry",
                    code="store_busy",
                ) from exc
            raise
        finally:
            if not conn.invalidated:  # .info on an invalidated connection reconnects
                conn.info.pop("readonly", None)
            conn.close()

    @property
    def creates_in_one_trip(self) -> bool:
        return self.dialect == "postgresql"

    def create_in_one_trip(self, request: OneTripCreate) -> OneTripAnswer | None:
        """PostgreSQL's create in one round trip; None on SQLite, and when the trip
        failed for want of the database (a lock wait ran out, the connection broke, the
        server is down): the transaction path then decides, and replays whatever this
        trip committed. Any other error is a defect and is raised as it would be there."""
        if not self.creates_in_one_trip:
            return None
        try:
            return create_in_one_trip(self.engine, request)
        except (sa.exc.OperationalError, sa.exc.TimeoutError):  # no connection in time too
            return None

    def reclaim_space(self, tables: Sequence[str]) -> None:
        """Vacuum what a retention sweep deleted from (PostgreSQL; nothing on SQLite)."""
        dialects.reclaim_space(self.engine, tables)

    def dispose(self) -> None:
        self.engine.dispose()


SUPPORTED_URLS = "sqlite:///PATH or postgresql://USER@HOST/DATABASE"


def _engine_for(url: str, pool_size: int) -> Engine:
    try:
        parsed = make_url(normalize_url(url))
    except sa.exc.ArgumentError:
        raise HostUnavailable(
            f"database_url is not a database URL; use {SUPPORTED_URLS}",
            code="database_url_unsupported",
        ) from None
    shown = _shown(make_url(url))
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise HostUnavailable(
            f"database_url {shown}: punctual runs on SQLite or PostgreSQL only; "
            f"use {SUPPORTED_URLS}",
            code="database_url_unsupported",
        )
    try:
        return create_engine(url, pool_size=pool_size)
    except (ImportError, sa.exc.NoSuchModuleError) as exc:
        raise HostUnavailable(
            f"database_url {shown}: the driver {parsed.drivername!r} is not installed; "
            f"use {SUPPORTED_URLS}",
            code="database_url_unsupported",
        ) from exc


def _shown(url: URL) -> str:
    """The URL as an operator may see it in a message: with its password masked."""
    return url.render_as_string(hide_password=True)


_MISSING_DATABASE = re.compile(r'database "([^"]+)" does not exist')


def _cannot_connect(url: URL, exc: sa.exc.DBAPIError) -> str:
    # The driver's first line says what failed (libpq adds a hint line after it).
    first_line = next((line for line in str(exc.orig).splitlines() if line.strip()), "")
    reason = " ".join(first_line.split()).removeprefix("connection failed: ")
    if url.get_backend_name() == "sqlite":
        return _cannot_open(Path(url.database or ""), reason)
    missing = _MISSING_DATABASE.search(reason)
    if missing is not None:
        where = f"{url.host or 'localhost'}:{url.port or 5432}"
        return (
            f"the database {missing.group(1)} does not exist on the PostgreSQL server at "
            f"{where}: create it (createdb {missing.group(1)}), or fix database_url"
        )
    return (
        f"cannot connect to the database {_shown(url)} ({reason}); start PostgreSQL, or "
        "fix database_url"
    )


def _cannot_open(path: Path, reason: str) -> str:
    if not path.parent.is_dir():
        return (
            f"the SQLite database {path} cannot be created: the directory {path.parent} "
            "does not exist; create it, or fix database_url"
        )
    if path.is_dir():
        return f"the SQLite database {path} is a directory; point database_url at a file"
    return (
        f"the SQLite database {path} cannot be opened ({reason}); check that it and "
        f"{path.parent} are writable, or fix database_url"
    )
