"""The suite's Temporal dev server holds on a loaded machine (SPEC OP-6): a port chosen free
and taken by someone else before the server binds it makes the server exit ``address
already in use``; the harness starts it again on new ports instead of failing the module."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import temporal
from tests.support.temporal import _answers, dev_server


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_port_taken_before_the_server_binds_it_is_chosen_again(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen: list[int] = []
    real_free_port = temporal.free_port

    def free_port() -> int:
        """The first start's HTTP port (its second choice) is one another process holds."""
        port = taken_port if len(chosen) == 1 else real_free_port()
        chosen.append(port)
        return port

    monkeypatch.setattr(temporal, "free_port", free_port)
    with dev_server(tmp_path) as address:
        assert asyncio.run(_answers(address))
    assert chosen.count(taken_port) == 1
    assert len(chosen) == 6, "two starts of three ports each"
