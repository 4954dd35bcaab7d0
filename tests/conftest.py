"""Shared fixtures: real stores (a SQLite file, a fresh PostgreSQL database), a controllable
clock, and assembled punctual systems.

PostgreSQL: each test session creates its own database on the server at
``PUNCTUAL_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``), migrates it
once, and truncates every table before each test. Locally an unreachable server skips
the PostgreSQL half; with ``CI=true`` it fails instead.

Temporal: ``temporal_address`` is a dev server of the test module's own (the API and
contract suites share one per session instead, in their conftests).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import socket
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.stores.sql import migrate
from punctual.adapters.stores.sql.store import SqlStore
from punctual.adapters.stores.sql.tables import metadata
from punctual.settings import Settings, load_settings
from tests.support.temporal import dev_server

_real_getaddrinfo = socket.getaddrinfo


def _loopback_only_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    """Tests never look names up off this machine: webhook URLs with made-up hosts (the
    fuzzer writes many) would otherwise send DNS queries out. Address literals and
    ``localhost`` resolve as usual; any other name is unknown."""
    text = host.decode() if isinstance(host, bytes) else host
    if text is None or text == "localhost" or text.endswith(".localhost"):
        return _real_getaddrinfo(host, *args, **kwargs)
    try:
        ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        offline = "tests resolve no names off this machine"
        raise socket.gaierror(socket.EAI_NONAME, offline) from None
    return _real_getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = _loopback_only_getaddrinfo

if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    # The processes the tests start (punctual serve, worker and CLI, slot processes) would
    # each compile punctual afresh: they share one bytecode cache, in the virtual
    # environment (this user's own, unlike a fixed name under /tmp).
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(Path(sys.prefix) / "test-bytecode"))

PG_SERVER = os.environ.get("PUNCTUAL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
DEV_TOKEN = "test-admin-token-0123456789abcdef0123456789"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """How ``make test`` shares the work out (``--dist loadgroup``): a test file is one unit,
    so its module fixtures (a server, a Temporal dev server) start once, except that each
    case of a test marked ``spread`` is a unit of its own; those go first, then the suites
    that start real processes, so the longest units do not begin last and leave the other
    processes idle. Runs before pytest-xdist reads the groups."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            unit = item.nodeid if item.get_closest_marker("spread") else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(unit))

    def turn(item: pytest.Item) -> int:
        if item.get_closest_marker("spread"):
            return 0
        return 1 if item.nodeid.startswith(("tests/e2e/", "tests/chaos/")) else 2

    items.sort(key=turn)


class FakeClock:
    """A clock the test moves by hand; time never passes on its own."""

    def __init__(self, start: datetime | None = None) -> None:
        self.current = start or datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> datetime:
        self.current += timedelta(seconds=seconds)
        return self.current


def _pg_reachable() -> str | None:
    try:
        with psycopg.connect(PG_SERVER, connect_timeout=3, autocommit=True):
            return None
    except psycopg.Error as exc:
        return str(exc)


@pytest.fixture(scope="session")
def pg_session_url() -> Iterator[str]:
    problem = _pg_reachable()
    if problem is not None:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required in CI but unreachable at {PG_SERVER}: {problem}")
        pytest.skip(f"PostgreSQL unreachable at {PG_SERVER}: {problem}")
    name = f"punctual_test_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(PG_SERVER).set(database=name).render_as_string(hide_password=False)
    store = SqlStore(url)
    migrate.upgrade(store)
    store.dispose()
    yield url
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _truncate(url: str) -> None:
    """Empty every table and restart every sequence. TRUNCATE rewrites each table it names
    (some 10 ms apiece), so it names only the tables the last test left rows in; a sequence
    drawn from without leaving a row (a rolled-back insert) is restarted on its own."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    probe = " UNION ALL ".join(
        f"SELECT '{table.name}' FROM (SELECT FROM {table.name} LIMIT 1) AS probe"
        for table in metadata.sorted_tables
    )
    with engine.begin() as conn:
        filled = [name for (name,) in conn.exec_driver_sql(probe)]
        if filled:
            conn.exec_driver_sql(f"TRUNCATE {', '.join(filled)} RESTART IDENTITY CASCADE")
        drawn = (
            "SELECT sequencename FROM pg_sequences "
            "WHERE schemaname = current_schema() AND last_value IS NOT NULL"
        )
        for (sequence,) in conn.exec_driver_sql(drawn).all():
            conn.exec_driver_sql(f'ALTER SEQUENCE "{sequence}" RESTART')
    engine.dispose()


@pytest.fixture(scope="module")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a Temporal dev server started for this test module."""
    with dev_server(tmp_path_factory.mktemp("temporal")) as address:
        yield address


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.db"
    store = SqlStore(f"sqlite:///{path}")
    migrate.upgrade(store)
    store.dispose()
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "punctual.db"
    shutil.copy(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def pg_url(pg_session_url: str) -> str:
    _truncate(pg_session_url)
    return pg_session_url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """Every test that takes this runs once on SQLite and once on PostgreSQL."""
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    url: str = request.getfixturevalue(fixture)
    return url


def make_settings(database_url: str, tmp_path: Path, **overrides: Any) -> Settings:
    key_file = tmp_path / "test.keys"
    return load_settings(
        None,
        database_url=database_url,
        codec={"key_file": str(key_file)},
        # Generous: only the bounded-wait tests want a 202, and they set their own wait.
        api_wait_seconds=overrides.pop("api_wait_seconds", 10),
        **overrides,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return make_settings(database_url, tmp_path)


@pytest.fixture
def system(settings: Settings) -> Iterator[bootstrap.Punctual]:
    """An assembled punctual on the real clock, with no runner or worker started."""
    built = bootstrap.build(settings)
    yield built
    built.close()
