"""Fixtures of the API suites: a real Temporal dev server for the API-on-Temporal tests.

pytest's conftest scope is per directory, so ``tests/contract/conftest.py``'s fixture of
the same name is not visible here; this one starts its own server the same way, once per
session and only when a test asks for it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.temporal import dev_server


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a Temporal dev server started for this test session."""
    with dev_server(tmp_path_factory.mktemp("temporal-api")) as address:
        yield address
