"""Schema migrations: ``punctual db upgrade`` and the startup check that refuses old schemas."""

from __future__ import annotations

import functools
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from punctual.adapters.stores.sql.store import SqlStore
from punctual.errors import ConfigurationError

MIGRATIONS = Path(__file__).parent / "migrations"


def _config(connection: sa.Connection | None = None, location: Path | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(location or MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """This version's schema revision."""
    return _head_of(MIGRATIONS)


@functools.cache
def _head_of(location: Path) -> str:
    """Read once per process and location: Alembic compiles every migration file to find
    the head, and the files ship with the code."""
    head = ScriptDirectory.from_config(_config(location=location)).get_current_head()
    assert head is not None
    return head


def current_revision(store: SqlStore) -> str | None:
    with store.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(store: SqlStore) -> tuple[str | None, str]:
    """Migrate to head; returns (revision before, revision after)."""
    before = current_revision(store)
    with store.engine.begin() as conn:
        conn.info["readonly"] = False
        command.upgrade(_config(conn), "head")
    return before, head_revision()


def is_empty(store: SqlStore) -> bool:
    return not sa.inspect(store.engine).get_table_names()


def check_current(store: SqlStore) -> None:
    """Refuse to run on a schema other than the one this code was written for."""
    current, head = current_revision(store), head_revision()
    if current == head:
        return
    if current is None:
        raise ConfigurationError(
            "the database has no punctual schema yet; run 'punctual db upgrade' first"
        )
    script = ScriptDirectory.from_config(_config())
    known = {rev.revision for rev in script.walk_revisions()}
    if current not in known:
        raise ConfigurationError(
            f"the database schema {current} is newer than this punctual ({head}); "
            "upgrade punctual before starting it"
        )
    raise ConfigurationError(
        f"the database schema {current} is older than this punctual ({head}); "
        "run 'punctual db upgrade' first"
    )
