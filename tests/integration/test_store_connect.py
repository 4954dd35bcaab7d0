"""A PostgreSQL server that never answers fails a connect after a bounded wait (OP-1):
startup prints its one line instead of hanging, and a process already running sees
``Unavailable`` and retries. The silent server is a loopback socket that accepts and says
nothing, as a stopped process behind a live listener or a dropped route looks to libpq."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.stores.sql.store import SqlStore
from punctual.errors import HostUnavailable
from tests.conftest import make_settings


@pytest.fixture
def silent_port() -> Iterator[int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


@pytest.mark.parametrize(
    ("query", "bound"), [("", 10.0), ("?connect_timeout=1", 1.0)], ids=["default", "url"]
)
def test_a_connect_to_a_silent_server_gives_up_after_its_timeout(
    silent_port: int, query: str, bound: float
) -> None:
    store = SqlStore(f"postgresql://punctual@127.0.0.1:{silent_port}/punctual{query}")
    began = time.monotonic()
    try:
        with pytest.raises(HostUnavailable) as refused:
            store.check_connection()
    finally:
        store.dispose()
    waited = time.monotonic() - began
    assert refused.value.code == "database_unavailable"
    # It waited for the timeout (it did not fail at once), and then gave up.
    assert waited >= bound * 0.9


@pytest.mark.postgres
def test_the_pool_holds_database_pool_size_connections_and_4_more_in_a_burst(
    pg_url: str, tmp_path: Path
) -> None:
    settings = make_settings(pg_url, tmp_path, database_pool_size=7)
    system = bootstrap.build(settings)
    try:
        pool = system.store.engine.pool
        assert isinstance(pool, sa.QueuePool)
        assert (pool.size(), pool._max_overflow) == (7, 4)
    finally:
        system.close()
