"""Schema migrations: ``punctual db upgrade`` and the startup check that refuses old schemas."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from punctual.adapters.stores.sql.store import SqlStore
from punctual.errors import ConfigurationError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
_REVISION_FILE = re.compile(r"(\d{4})_\w+\.py")
"""A migration is ``versions/NNNN_what.py`` whose revision is ``NNNN`` and whose
``down_revision`` is the one before (tests hold every file to it)."""


def _config(connection: sa.Connection | None = None, location: Path | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(location or MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """This version's schema revision."""
    return max(known_revisions())


def known_revisions() -> frozenset[str]:
    """Every revision this version ships."""
    return _revisions_in(MIGRATIONS)


@functools.cache
def _revisions_in(location: Path) -> frozenset[str]:
    """From the file names, without Alembic: the check at every start of a process reads
    them, and Alembic's import and its compiling of every migration cost more than the
    rest of the check (the files ship with the code, so once per process)."""
    found = (_REVISION_FILE.fullmatch(path.name) for path in (location / "versions").iterdir())
    return frozenset(match.group(1) for match in found if match is not None)


def current_revision(store: SqlStore) -> str | None:
    with store.engine.connect() as conn:
        if not sa.inspect(conn).has_table("alembic_version"):
            return None
        rows = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars()
        return next(iter(rows), None)


def upgrade(store: SqlStore) -> tuple[str | None, str]:
    """Migrate to head; returns (revision before, revision after)."""
    from alembic import command

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
    if current not in known_revisions():
        raise ConfigurationError(
            f"the database schema {current} is newer than this punctual ({head}); "
            "upgrade punctual before starting it"
        )
    raise ConfigurationError(
        f"the database schema {current} is older than this punctual ({head}); "
        "run 'punctual db upgrade' first"
    )
