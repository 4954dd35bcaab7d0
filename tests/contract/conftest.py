"""Fixtures of the contract suites: the store under test over each database, and a real
Temporal dev server for the Engine contract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from punctual.adapters.stores.sql.store import SqlStore
from tests.support.temporal import dev_server


@pytest.fixture
def store(database_url: str) -> Iterator[SqlStore]:
    """The SQL store over SQLite, then over PostgreSQL."""
    built = SqlStore(database_url)
    yield built
    built.dispose()


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a Temporal dev server started for this test session."""
    with dev_server(tmp_path_factory.mktemp("temporal")) as address:
        yield address
