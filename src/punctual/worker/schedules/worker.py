"""The Temporal worker of the fire workflow, on its own task queue, in a thread of its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from punctual.adapters.drivers.temporal_schedules.messages import FIRE_TASK_QUEUE
from punctual.adapters.drivers.temporal_schedules.workflow import PunctualFire
from punctual.usecases.kernel.context import Services
from punctual.worker.schedules.activities import FireActivities

log = logging.getLogger("punctual.driver.temporal_schedules")


class FireWorker:
    """Serves ``punctual.fire`` until stopped; started by every process with a runner."""

    def __init__(
        self, services: Services, address: str, namespace: str, task_queue: str = FIRE_TASK_QUEUE
    ) -> None:
        self._services = services
        self._address = address
        self._namespace = namespace
        self.task_queue = task_queue
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="fire-worker", daemon=True)

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            raise RuntimeError(f"the fire worker did not start: {self._error}")

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout=15)

    def _serve(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # reported to start(); logged for a later failure
            self._error = exc
            self._ready.set()
            log.error("event=fire_worker_failed error_type=%s", type(exc).__name__)

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        client = await Client.connect(
            self._address,
            namespace=self._namespace,
            identity=f"punctual-fire@{socket.gethostname()}",
        )
        restrictions = SandboxRestrictions.default.with_passthrough_modules(
            "punctual", "pydantic", "pydantic_core"
        )
        activities = FireActivities(self._services)
        worker = Worker(
            client,
            task_queue=self.task_queue,
            workflows=[PunctualFire],
            activities=[activities.fire, activities.await_follow_through],
            workflow_runner=SandboxedWorkflowRunner(restrictions=restrictions),
            graceful_shutdown_timeout=timedelta(seconds=2),
        )
        task = asyncio.create_task(worker.run())
        self._ready.set()
        log.info("event=fire_worker_started queue=%s", self.task_queue)
        await self._stopping.wait()
        with contextlib.suppress(Exception):
            await worker.shutdown()
        await asyncio.gather(task, return_exceptions=True)
