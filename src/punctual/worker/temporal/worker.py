"""The Temporal worker process: executes punctual runs that Temporal hands it.

A worker of engine ``temporal`` is two things at once:

* towards the **store**, a punctual worker like a local one: it registers its app's
  definitions and a ``WorkerRecord`` (engine ``temporal``) and heartbeats it, which is
  what ``TemporalEngine.loaded`` and dispatch's version resolution read (WF-2);
* towards **Temporal**, one ``temporalio.worker.Worker`` per task queue, all running the
  generic ``PunctualRun`` workflow and the ``RunExecutor`` activity, sharing one client and
  one pool of child processes that run the bodies.

The store heartbeat is tied to the Temporal workers: if one of them dies, heartbeats stop
and the worker's versions stop counting as loaded, so dispatch does not send runs to a
queue nobody serves.

Temporal hands a queue's tasks to any of its pollers, whatever they loaded. A worker takes
only runs of the versions it serves, those whose code its registration found to be the
registered artifact (OP-3); it refuses any other before the body begins, and the workflow
asks again later, for another poller (``PunctualRun``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from punctual.adapters.engines.temporal.engine import ENGINE_NAME
from punctual.adapters.engines.temporal.ledger import RunLedger, StoreRunLedger
from punctual.adapters.engines.temporal.workflow import PunctualRun
from punctual.domain.ids import new_id
from punctual.errors import Unavailable
from punctual.ports.engine import EngineUnavailable
from punctual.ports.records import WorkerRecord
from punctual.usecases.kernel.context import Services
from punctual.usecases.running import execution
from punctual.worker.definitions import declared_definitions
from punctual.worker.temporal.activity import RunExecutor
from punctual.workflows import App, load_app

log = logging.getLogger("punctual.worker.temporal")

HEARTBEAT_THROTTLE = timedelta(seconds=1)
"""Most time between two activity heartbeats sent to Temporal; a Temporal cancel or
terminate reaches a running body at most about this late."""


def run_temporal_worker(
    services: Services,
    app_ref: str,
    task_queues: Sequence[str],
    address: str,
    namespace: str,
    stop_event: threading.Event,
    *,
    slots: int = 4,
    heartbeat_seconds: float = 5.0,
    shutdown_grace_seconds: float = 5.0,
    ledger: RunLedger | None = None,
    ready: threading.Event | None = None,
    worker_id: str | None = None,
) -> None:
    """Serve ``task_queues`` until ``stop_event`` is set (blocking; run it in its own thread
    or as a process's main loop). ``ready`` is set once runs can be taken."""
    if not task_queues:
        raise ValueError("a Temporal worker needs at least one task queue")
    serve = _Serve(
        services,
        app_ref,
        list(task_queues),
        address,
        namespace,
        stop_event,
        slots=slots,
        heartbeat_seconds=heartbeat_seconds,
        shutdown_grace_seconds=shutdown_grace_seconds,
        ledger=ledger or StoreRunLedger(services.store),
        id=worker_id or new_id("wrk"),
    )
    asyncio.run(serve.run(ready))


@dataclass(frozen=True)
class _Serve:
    """One serving of ``run_temporal_worker``: its arguments, defaults resolved."""

    services: Services
    app_ref: str
    task_queues: list[str]
    address: str
    namespace: str
    stop_event: threading.Event
    slots: int
    heartbeat_seconds: float
    shutdown_grace_seconds: float
    ledger: RunLedger
    id: str

    async def run(self, ready: threading.Event | None) -> None:
        app = load_app(self.app_ref)
        executor = RunExecutor(self.services, self.app_ref, self.slots, self.ledger)
        await asyncio.to_thread(executor.start, asyncio.get_running_loop())
        workers: list[Worker] = []
        tasks: list[asyncio.Task[None]] = []
        registered = False
        try:
            client = await self._connect()
            restrictions = SandboxRestrictions.default.with_passthrough_modules("punctual")
            for queue in self.task_queues:
                workers.append(
                    Worker(
                        client,
                        task_queue=queue,
                        workflows=[PunctualRun],
                        activities=[executor.execute],
                        workflow_runner=SandboxedWorkflowRunner(restrictions=restrictions),
                        max_concurrent_activities=self.slots,
                        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
                        default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
                        graceful_shutdown_timeout=timedelta(seconds=self.shutdown_grace_seconds),
                        identity=f"punctual-{self.id}@{socket.gethostname()}",
                    )
                )
            # Registered before polling: the executor knows from the first task which
            # versions it serves (OP-3); a run dispatched meanwhile waits in its queue.
            served = await asyncio.to_thread(self._register, app)
            registered = True
            executor.serve(self.id, [(name, version) for name, version, _ in served.loaded])
            tasks = [
                asyncio.create_task(w.run(), name=f"temporal-worker-{w.task_queue}")
                for w in workers
            ]
            log.info(
                "event=worker_started engine=temporal worker=%s queues=%s slots=%d",
                self.id,
                ",".join(self.task_queues),
                self.slots,
            )
            if ready is not None:
                ready.set()
            await self._heartbeat_until_stopped(tasks)
        finally:
            if registered:
                await asyncio.to_thread(self._unregister)
            for worker in workers:
                with contextlib.suppress(Exception):
                    await worker.shutdown()
            for task in tasks:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.to_thread(executor.close, 0.0)
            log.info("event=worker_stopped engine=temporal worker=%s", self.id)

    async def _connect(self) -> Client:
        try:
            return await Client.connect(
                self.address,
                namespace=self.namespace,
                identity=f"punctual-{self.id}@{socket.gethostname()}",
            )
        except RuntimeError as exc:
            raise EngineUnavailable(
                f"the Temporal worker cannot reach {self.address} "
                f"(namespace {self.namespace!r}): {exc}",
                code="engine_unavailable",
            ) from exc

    def _register(self, app: App) -> WorkerRecord:
        now = self.services.clock.now()
        record = WorkerRecord(
            id=self.id,
            engine=ENGINE_NAME,
            host=socket.gethostname(),
            task_queues=list(self.task_queues),
            loaded=[(d.name, d.version, d.artifact) for d in app.definitions],
            slots=self.slots,
            started_at=now,
            heartbeat_at=now,
            stopped_at=None,
        )
        return execution.start_worker(
            self.services, record, declared_definitions(app), pid=os.getpid()
        )

    def _unregister(self) -> None:
        try:
            execution.stop_worker(self.services, self.id)
        except Unavailable:
            log.warning("event=worker_stop_unrecorded worker=%s", self.id)

    async def _heartbeat_until_stopped(self, tasks: Sequence[asyncio.Task[None]]) -> None:
        next_beat = time.monotonic() + self.heartbeat_seconds
        while not self.stop_event.is_set():
            finished = [t for t in tasks if t.done()]
            if finished:
                error = finished[0].exception()
                raise EngineUnavailable(
                    f"the Temporal worker for queue {finished[0].get_name()} stopped: {error}",
                    code="engine_unavailable",
                )
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self.heartbeat_seconds
                try:
                    await asyncio.to_thread(execution.heartbeat, self.services, self.id, [])
                except Unavailable as exc:
                    log.warning("event=worker_heartbeat_failed worker=%s error=%s", self.id, exc)
            await asyncio.sleep(min(0.1, self.heartbeat_seconds))


class TemporalWorker:
    """``run_temporal_worker`` in a background thread, with start/stop like ``LocalWorker``."""

    def __init__(
        self,
        services: Services,
        app_ref: str,
        task_queues: Sequence[str],
        address: str,
        namespace: str,
        *,
        slots: int = 4,
        heartbeat_seconds: float = 5.0,
        shutdown_grace_seconds: float = 5.0,
        ledger: RunLedger | None = None,
    ) -> None:
        self.id = new_id("wrk")
        self._grace = shutdown_grace_seconds
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._serve = partial(
            run_temporal_worker,
            services,
            app_ref,
            list(task_queues),
            address,
            namespace,
            self._stop,
            slots=slots,
            heartbeat_seconds=heartbeat_seconds,
            shutdown_grace_seconds=shutdown_grace_seconds,
            ledger=ledger,
            ready=self._ready,
            worker_id=self.id,
        )
        """What the worker's thread runs."""

    def start(self, timeout: float = 60.0) -> None:
        """Return once the worker takes runs; raise what kept it from starting."""
        self._thread = threading.Thread(
            target=self._main, name=f"temporal-worker-{self.id}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                if self._error is not None:
                    raise self._error
                raise EngineUnavailable(
                    f"the Temporal worker did not start within {timeout:g} s",
                    code="engine_unavailable",
                )

    def stop(self, grace_seconds: float | None = None) -> None:
        """Stop taking runs; running bodies get the grace given at construction, then are
        killed and retried elsewhere (``grace_seconds`` is accepted for ``LocalWorker``
        compatibility and bounds only how long this call waits beyond that grace)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._grace + (grace_seconds or 0.0) + 30)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _main(self) -> None:
        try:
            self._serve()
        except BaseException as exc:
            self._error = exc
            log.exception("event=worker_failed engine=temporal worker=%s", self.id)
