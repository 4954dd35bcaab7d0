"""The Temporal engine adapter: a run is a Temporal workflow execution whose id is the run id.

punctual's runner and API are synchronous and threaded; the Temporal SDK is asyncio. The
engine owns one event loop in a daemon thread and one client connection on it, and every
port call submits a coroutine to that loop and waits for it with a bound, so a caller
thread never blocks forever on Temporal.

Idempotency (WF-6, DP-2): a start uses the run id as workflow id with
``WorkflowIDConflictPolicy.USE_EXISTING`` (a retry while the execution runs returns the
same execution) and ``WorkflowIDReusePolicy.REJECT_DUPLICATE`` (a retry after it closed is
refused, and the refusal means "already started", not an error). So any number of
dispatch retries, from any number of runners, converge on one execution. A re-dispatch
of a start claimed before (``RunOrder.replaces_unrecorded``) may start anew over an
execution that closed without its run record, so a leftover of an earlier attempt that
gave up cannot win.

Outages (DP-3): every failure to reach Temporal is raised as ``EngineUnavailable`` (never
a start-specific error), so dispatch releases its claims uncharged and pauses.

``loaded`` answers from the store's worker heartbeats (workers of engine ``temporal``), not
from Temporal's poller list: pollers say which task queues are polled, not which workflow
*versions* a worker can run, and dispatch must not depend on Temporal to resolve versions.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

from temporalio.api.enums.v1 import IndexedValueType, PendingActivityState
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import (
    Priority,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, TemporalError, WorkflowAlreadyStartedError
from temporalio.service import RetryConfig, RPCError, RPCStatusCode

from punctual.adapters.engines.temporal.messages import (
    RUN_ERROR_OF_FAILURE,
    RUN_STATE_OF_FAILURE,
    WORKFLOW_TYPE,
    FailureType,
    RunArgs,
    coded_error,
)
from punctual.adapters.engines.temporal.trace import TraceContextInterceptor, starting_with
from punctual.domain.runs import RunErrorCode, run_error
from punctual.errors import HostUnavailable
from punctual.ports.clock import Clock
from punctual.ports.engine import EngineUnavailable, RunOrder
from punctual.ports.store import Store

log = logging.getLogger("punctual.engine.temporal")

T = TypeVar("T")

ENGINE_NAME = "temporal"

ObservedState = Literal[
    "missing", "pending", "running", "completed", "failed", "canceled", "terminated", "timed_out"
]

_STATE_OF_FAILURE: Mapping[str, ObservedState] = RUN_STATE_OF_FAILURE

_REACH_ERRORS = (RPCError, RuntimeError, OSError, TimeoutError, TemporalError)
"""What the SDK raises when the server cannot be reached or answers with an error."""


@dataclass(frozen=True)
class TemporalOptions:
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    heartbeat_timeout_seconds: float = 10.0
    """A worker that does not heartbeat an attempt for this long is lost (retried)."""
    rpc_timeout_seconds: float = 5.0
    """Bound of one call to Temporal, retries included."""
    connect_timeout_seconds: float = 3.0
    max_concurrent_calls: int = 32
    """Calls in flight at once for a batch (a dispatch page, a sync page)."""


@dataclass(frozen=True)
class Observation:
    """What Temporal says about one run (for ``sync_runs``)."""

    run_id: str
    state: ObservedState
    attempts: int = 0
    result: Any = None
    error: dict[str, Any] | None = None
    ended_at: datetime | None = None
    cancel_acknowledged: bool = False
    """Temporal has recorded a cancel request for the (still open) execution."""
    undecodable: bool = False
    """The execution closed with an outcome punctual cannot decode (see ``_closed``)."""
    never_recorded: bool = False
    """It gave up waiting for its run record (its start was released or ended): it never
    ran the body, so a run recorded since may still be started anew."""


class LoopThread:
    """An asyncio loop in a daemon thread; sync callers submit coroutines and wait, bounded."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float, what: str) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("LoopThread.call from its own loop would deadlock")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise EngineUnavailable(
                f"Temporal did not answer {what} within {timeout:g} s", code="engine_unavailable"
            ) from None

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()


def check_reachable(address: str, timeout_seconds: float) -> None:
    """Raise ``HostUnavailable`` (``engine_unavailable``) unless something accepts a
    connection at ``address`` within ``timeout_seconds``: a runner or worker checks once,
    at its start, so a wrong address or a server that is down is one line (SPEC OP-1).

    A plain TCP connection, not the SDK: the SDK's native threads can abort a process
    that exits right after one of its calls failed or timed out (temporalio/sdk-python
    #300), which is exactly what a refused start does. The namespace is the SDK's to
    check once the process runs."""
    fix = "start it, or set temporal.address"
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "/" in host:
        return  # not host:port: the SDK's to read (and to refuse)
    try:
        endpoint = (host.removeprefix("[").removesuffix("]"), int(port))
        socket.create_connection(endpoint, timeout_seconds).close()
    except TimeoutError:
        raise HostUnavailable(
            f"Temporal at {address} did not answer within {timeout_seconds:g} s; {fix}",
            code="engine_unavailable",
        ) from None
    except OSError as exc:
        raise HostUnavailable(
            f"cannot connect to Temporal at {address} "
            f"({exc.strerror or type(exc).__name__}); {fix}",
            code="engine_unavailable",
        ) from exc


class TemporalEngine:
    """The Engine port over a Temporal server (see the module docstring)."""

    name = ENGINE_NAME

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        liveness_seconds: float,
        pending_timeout_seconds: float = 3600.0,
        max_attempts: int = 10,
        options: TemporalOptions | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._liveness = timedelta(seconds=liveness_seconds)
        self._pending_timeout = pending_timeout_seconds
        self._max_attempts = max_attempts
        self.options = options or TemporalOptions()
        self._bridge = LoopThread(f"temporal-engine-{self.options.namespace}")
        self._client: Client | None = None
        self._connect_lock: asyncio.Lock | None = None
        self._closed = False
        self._indexed: tuple[float, frozenset[str]] = (-math.inf, frozenset())
        """When the namespace's search attributes were last read, and which of punctual's
        it has (RS-10): a namespace that registers them later is read again."""

    # ---- the Engine port ---------------------------------------------------------------

    def start(self, orders: Sequence[RunOrder]) -> None:
        """One execution per run id; a repeated start converges on it (WF-6)."""
        if not orders:
            return
        unique = list({order.run_id: order for order in orders}.values())
        now = time.time()

        async def start_all(client: Client) -> None:
            await self._gather(client, [self._start_one(client, o, now) for o in unique])

        self._call(start_all, f"starting {len(unique)} run(s)", len(unique))

    def on_recorded(self, orders: Sequence[RunOrder]) -> None:
        """Nothing to wake: Temporal pushes the work to the workers' pollers."""

    def cancel(self, tenant: str, run_id: str) -> None:
        """Request Temporal cancellation; the body sees it through its RunContext (WF-5).

        Idempotent: Temporal records one cancel request per execution, and a closed or
        unknown execution has nothing left to cancel. The run use case calls this after
        its store change committed; while Temporal is down, the sync sends it again
        (``sync.sync_runs``) until Temporal has it (FT-6)."""

        async def cancel(client: Client) -> None:
            try:
                await client.get_workflow_handle(run_id).cancel(rpc_timeout=self._rpc_timeout)
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
                # Already closed or never started here: nothing left to cancel.

        self._call(cancel, f"canceling run {run_id}")

    def terminate(self, tenant: str, run_id: str) -> None:
        """Terminate the execution; the worker kills the body when Temporal tells it.

        Idempotent; sent again by the sync for a run the store recorded ``terminated``
        while its execution is still open (FT-6)."""

        async def terminate(client: Client) -> None:
            try:
                await client.get_workflow_handle(run_id).terminate(
                    reason="terminated through punctual", rpc_timeout=self._rpc_timeout
                )
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise

        self._call(terminate, f"terminating run {run_id}")

    def available(self) -> bool:
        """Connect if needed and ask the frontend's health service; never raises."""

        async def probe(client: Client) -> bool:
            return await client.service_client.check_health(
                timeout=timedelta(seconds=self.options.connect_timeout_seconds)
            )

        try:
            return self._call(probe, "a health check")
        except EngineUnavailable:
            return False

    def loaded(self) -> set[tuple[str, str, str]]:
        since = self._clock.now() - self._liveness
        with self._store.transaction(readonly=True) as tx:
            workers = tx.definitions.live_workers(since)
        return {item for w in workers if w.engine == ENGINE_NAME for item in w.loaded}

    # ---- for the sync ------------------------------------------------------------------

    def observe(self, run_ids: Sequence[str]) -> dict[str, Observation]:
        """Temporal's view of each run: state, attempts, and result or error once closed.

        One run whose observation raises for any other reason than reaching Temporal is
        logged (its id and the exception type, never the text, which may quote a result)
        and left out, so the others are still observed (FT-1); an outage raises
        ``EngineUnavailable`` for the whole batch."""
        if not run_ids:
            return {}

        async def observe_all(client: Client) -> list[Observation | None]:
            return await self._gather(client, [self._observe_alone(client, r) for r in run_ids])

        found = self._call(observe_all, f"describing {len(run_ids)} run(s)", len(run_ids))
        return {observation.run_id: observation for observation in found if observation}

    def open_executions(self, limit: int) -> list[str]:
        """Run ids of open ``punctual.run`` executions, as Temporal's visibility lists them
        (it may lag a moment behind); at most ``limit``."""
        query = f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"

        async def listing(client: Client) -> list[str]:
            found = client.list_workflows(
                query, limit=limit, page_size=min(limit, 1000), rpc_timeout=self._rpc_timeout
            )
            return [execution.id async for execution in found]

        return self._call(listing, "listing open executions", max(1, limit // 1000))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._bridge.close()

    # ---- internals ---------------------------------------------------------------------

    @property
    def _rpc_timeout(self) -> timedelta:
        return timedelta(seconds=self.options.rpc_timeout_seconds)

    def _call(self, action: Callable[[Client], Awaitable[T]], what: str, batch: int = 1) -> T:
        if self._closed:
            raise EngineUnavailable("the Temporal engine was closed", code="engine_unavailable")
        opts = self.options
        rounds = math.ceil(batch / opts.max_concurrent_calls)
        bound = opts.connect_timeout_seconds + opts.rpc_timeout_seconds * (1 + rounds) + 1

        async def run() -> T:
            client = await self._connected()
            return await action(client)

        try:
            return self._bridge.call(run(), bound, what)
        except EngineUnavailable:
            raise
        except _REACH_ERRORS as exc:
            raise EngineUnavailable(
                f"Temporal at {opts.address} (namespace {opts.namespace!r}) failed {what}: {exc}",
                code="engine_unavailable",
            ) from exc

    async def _connected(self) -> Client:
        if self._client is not None:
            return self._client
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self._client is None:
                opts = self.options
                self._client = await Client.connect(
                    opts.address,
                    namespace=opts.namespace,
                    identity=f"punctual-engine@{socket.gethostname()}",
                    connect_timeout=timedelta(seconds=opts.connect_timeout_seconds),
                    retry_config=RetryConfig(
                        max_retries=3,
                        max_elapsed_time_millis=int(opts.rpc_timeout_seconds * 1000),
                    ),
                    interceptors=[TraceContextInterceptor()],
                )
                log.info("event=temporal_connected address=%s", opts.address)
            return self._client

    async def _gather(self, client: Client, calls: Sequence[Awaitable[T]]) -> list[T]:
        limit = asyncio.Semaphore(self.options.max_concurrent_calls)

        async def bounded(call: Awaitable[T]) -> T:
            async with limit:
                return await call

        return list(await asyncio.gather(*(bounded(c) for c in calls)))

    def run_args(self, order: RunOrder, ordered_at: float) -> RunArgs:
        return RunArgs(
            run_id=order.run_id,
            tenant=order.tenant,
            workflow=order.workflow,
            version=order.definition_version,
            timeout_seconds=order.timeout_seconds,
            pending_timeout_seconds=self._pending_timeout,
            heartbeat_timeout_seconds=self.options.heartbeat_timeout_seconds,
            max_attempts=self._max_attempts,
            ordered_at=ordered_at,
        )

    async def _start_one(self, client: Client, order: RunOrder, ordered_at: float) -> None:
        try:
            with starting_with(order.traceparent):
                await self._start_workflow(client, order, ordered_at)
        except WorkflowAlreadyStartedError:
            # A closed execution with this id exists: this run already started once.
            log.debug("event=temporal_start_converged run=%s", order.run_id)

    async def _start_workflow(self, client: Client, order: RunOrder, ordered_at: float) -> None:
        """One execution for the run; its trace context rides as the ``traceparent`` header."""
        await client.start_workflow(
            WORKFLOW_TYPE,
            self.run_args(order, ordered_at),
            id=order.run_id,
            task_queue=order.task_queue,
            **_id_policies(order),
            priority=Priority(priority_key=order.priority),
            memo={
                "tenant": order.tenant,
                "workflow": order.workflow,
                "version": order.definition_version,
            },
            static_summary=(
                f"{order.workflow} v{order.definition_version} for tenant {order.tenant}"
            ),
            search_attributes=_occurrence_attributes(order, await self._indexed_names(client)),
            rpc_timeout=self._rpc_timeout,
        )

    async def _indexed_names(self, client: Client) -> frozenset[str]:
        """Which of ``OCCURRENCE_ATTRIBUTES`` the namespace has registered, with the type
        punctual writes; read at most every ``_ATTRIBUTES_REREAD_SECONDS``. A namespace
        that cannot be asked (no operator service) gets none: the run starts as before."""
        read_at, names = self._indexed
        if time.monotonic() - read_at < _ATTRIBUTES_REREAD_SECONDS:
            return names
        try:
            listed = await client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace=self.options.namespace),
                timeout=self._rpc_timeout,
            )
            names = frozenset(
                name
                for name, kind in listed.custom_attributes.items()
                if OCCURRENCE_ATTRIBUTES.get(name) == kind
            )
        except RPCError as exc:
            log.info("event=temporal_search_attributes_unread error_type=%s", type(exc).__name__)
            names = frozenset()
        self._indexed = (time.monotonic(), names)
        return names

    async def _observe_alone(self, client: Client, run_id: str) -> Observation | None:
        try:
            return await self._observe_one(client, run_id)
        except _REACH_ERRORS:
            raise
        except Exception as exc:
            log.warning(
                "event=temporal_observe_failed run=%s error_type=%s", run_id, type(exc).__name__
            )
            return None

    async def _observe_one(self, client: Client, run_id: str) -> Observation:
        handle = client.get_workflow_handle(run_id)
        try:
            description = await handle.describe(rpc_timeout=self._rpc_timeout)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return Observation(run_id, "missing")
            raise
        if description.status == WorkflowExecutionStatus.RUNNING:
            raw = description.raw_description
            observed = _running(run_id, raw.pending_activities)
            acknowledged = raw.workflow_extended_info.cancel_requested or any(
                a.state == PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED
                for a in raw.pending_activities
            )
            return replace(observed, cancel_acknowledged=acknowledged)
        history = await handle.fetch_history(rpc_timeout=self._rpc_timeout)
        return await _closed(client, run_id, history.events)


def _id_policies(order: RunOrder) -> dict[str, Any]:
    """How a start meets an execution that already has the run id (see the module docstring).

    A running execution is always converged on: it is either live or a leftover still
    waiting for its record, which the record then serves. A re-dispatch
    (``replaces_unrecorded``) holds the start's claim, so no run record exists and no
    execution of the id has run the body: one that closed (it gave up waiting once its
    start was released, rescheduled or its pending timeout passed) is replaced by a new
    one, so the body really runs instead of the run ending "never recorded".
    """
    reuse = (
        WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY
        if order.replaces_unrecorded
        else WorkflowIDReusePolicy.REJECT_DUPLICATE
    )
    return {"id_conflict_policy": WorkflowIDConflictPolicy.USE_EXISTING, "id_reuse_policy": reuse}


def _running(run_id: str, pending: Sequence[Any]) -> Observation:
    if not pending:
        return Observation(run_id, "pending")
    activity = pending[0]
    started = activity.state != PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
    attempts = activity.attempt if started else activity.attempt - 1
    return Observation(run_id, "running" if attempts > 0 else "pending", attempts=attempts)


async def _closed(client: Client, run_id: str, events: Sequence[HistoryEvent]) -> Observation:
    """A closed execution's outcome. One punctual cannot decode (a payload encoding or
    shape its converter does not read: written by something else than punctual's worker)
    ends the run ``failed`` with ``engine_execution_lost``: the history of a closed
    execution never changes and the converter reads no outside state, so the next pass
    would fail the same way."""
    attempts = 0
    refused = _refused_starts(events)
    for event in events:
        started = event.HasField("activity_task_started_event_attributes")
        if started and event.event_id not in refused:
            attempts = max(attempts, event.activity_task_started_event_attributes.attempt)
    last = events[-1]
    ended_at = last.event_time.ToDatetime(tzinfo=UTC)
    try:
        return await _decoded(client, run_id, last, attempts, ended_at)
    except Exception as exc:
        kind = type(exc).__name__
        log.warning("event=temporal_outcome_undecodable run=%s error_type=%s", run_id, kind)
        error = run_error(
            RunErrorCode.ENGINE_EXECUTION_LOST,
            f"the outcome of run {run_id}'s Temporal execution cannot be decoded ({kind}); "
            "was the execution written by a worker other than punctual's?",
        )
        return Observation(run_id, "failed", attempts, None, error, ended_at, undecodable=True)


def _refused_starts(events: Sequence[HistoryEvent]) -> set[int]:
    """Started events of activity attempts a worker refused (``NOT_SERVED``, OP-3): they
    ran no body, so they are no attempt of the run."""
    refused: set[int] = set()
    for event in events:
        if event.HasField("activity_task_failed_event_attributes"):
            failed = event.activity_task_failed_event_attributes
            if failed.failure.application_failure_info.type == FailureType.NOT_SERVED:
                refused.add(failed.started_event_id)
    return refused


async def _decoded(
    client: Client, run_id: str, last: HistoryEvent, attempts: int, ended_at: datetime
) -> Observation:
    converter = client.data_converter
    if last.HasField("workflow_execution_completed_event_attributes"):
        payloads = last.workflow_execution_completed_event_attributes.result.payloads
        values = await converter.decode(payloads) if payloads else [None]
        return Observation(run_id, "completed", attempts, values[0], None, ended_at)
    if last.HasField("workflow_execution_failed_event_attributes"):
        failure = await converter.decode_failure(
            last.workflow_execution_failed_event_attributes.failure
        )
        state, error = _failure(failure)
        gave_up = isinstance(failure, ApplicationError) and (
            failure.type == FailureType.NOT_RECORDED
        )
        return Observation(run_id, state, attempts, None, error, ended_at, never_recorded=gave_up)
    if last.HasField("workflow_execution_canceled_event_attributes"):
        error = run_error(RunErrorCode.CANCELED, "canceled on request")
        return Observation(run_id, "canceled", attempts, None, error, ended_at)
    if last.HasField("workflow_execution_terminated_event_attributes"):
        reason = last.workflow_execution_terminated_event_attributes.reason
        error = run_error(RunErrorCode.TERMINATED, reason or "terminated in Temporal")
        return Observation(run_id, "terminated", attempts, None, error, ended_at)
    if last.HasField("workflow_execution_timed_out_event_attributes"):
        error = run_error(RunErrorCode.TIMED_OUT, "the Temporal workflow execution timed out")
        return Observation(run_id, "timed_out", attempts, None, error, ended_at)
    # Continued as new or reset outside punctual: this execution's outcome is gone.
    error = run_error(
        RunErrorCode.ENGINE_EXECUTION_LOST,
        f"the Temporal execution closed with event {last.event_type}, which punctual does "
        "not produce; its outcome is lost",
    )
    return Observation(run_id, "failed", attempts, None, error, ended_at)


def _failure(failure: BaseException) -> tuple[ObservedState, dict[str, Any]]:
    """A failed execution's run state and error, from the typed failure the workflow raised."""
    if not isinstance(failure, ApplicationError):
        kind = type(failure).__name__
        return "failed", run_error(RunErrorCode.WORKFLOW_ERROR, str(failure), type=kind)
    state = _STATE_OF_FAILURE.get(failure.type or "", "failed")
    code = RUN_ERROR_OF_FAILURE.get(failure.type or "", RunErrorCode.WORKFLOW_ERROR.value)
    detail = failure.details[0] if failure.details else None
    if isinstance(detail, dict):
        return state, coded_error(code, {str(key): value for key, value in detail.items()})
    return state, coded_error(code, {"type": failure.type or "ApplicationError"}, failure.message)


OCCURRENCE_ATTRIBUTES: Mapping[str, int] = {
    "PunctualScheduleId": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "PunctualOccurrenceId": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "PunctualOccurrenceAt": IndexedValueType.INDEXED_VALUE_TYPE_DATETIME,
}
"""Search attributes a schedule's run carries when its namespace has them registered, so
Temporal's own tools find a schedule's runs (RS-10, docs/temporal.md)."""
_ATTRIBUTES_REREAD_SECONDS = 300.0


def _occurrence_attributes(order: RunOrder, indexed: frozenset[str]) -> TypedSearchAttributes:
    """The registered ones of ``OCCURRENCE_ATTRIBUTES`` for a schedule's run; none for a
    one-off start."""
    origin = order.origin
    if origin.get("source") != "schedule" or not indexed:
        return TypedSearchAttributes.empty
    pairs: list[SearchAttributePair[Any]] = []
    if "PunctualScheduleId" in indexed:
        key = SearchAttributeKey.for_keyword("PunctualScheduleId")
        pairs.append(SearchAttributePair(key, str(origin["schedule_id"])))
    if "PunctualOccurrenceId" in indexed:
        key = SearchAttributeKey.for_keyword("PunctualOccurrenceId")
        pairs.append(SearchAttributePair(key, str(origin["id"])))
    if "PunctualOccurrenceAt" in indexed:
        at = datetime.fromisoformat(str(origin["occurrence_at"]).replace("Z", "+00:00"))
        pairs.append(
            SearchAttributePair(SearchAttributeKey.for_datetime("PunctualOccurrenceAt"), at)
        )
    return TypedSearchAttributes(pairs)
