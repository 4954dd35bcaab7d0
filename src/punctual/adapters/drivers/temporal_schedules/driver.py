"""The Driver port over Temporal Schedules (see ``ports.driver`` and docs/temporal.md).

The Schedule ID is the punctual schedule id. Its memo carries this installation's id (the
mark: punctual never changes or removes a Temporal Schedule without it), its note the
digest of what was ensured, so a sweep tells a copy that differs from the record from one
that matches by listing alone. The SDK is asyncio and punctual's callers are threads: the
driver owns one event loop in a daemon thread, and every call waits for it with a bound.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio.api.schedule.v1 import ScheduleInfo
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.exceptions import TemporalError
from temporalio.service import RetryConfig, RPCError, RPCStatusCode

from punctual.adapters.drivers.temporal_schedules.messages import (
    FIRE_TASK_QUEUE,
    FIRE_WORKFLOW,
    MARK_KEY,
    WORKFLOW_ID_PREFIX,
    FireArgs,
)
from punctual.adapters.drivers.temporal_schedules.translate import policy_of, spec_of, state_of
from punctual.ports.driver import FIRE_TIMES_LIMIT, DriverAction, DriverSchedule, DriverView
from punctual.ports.engine import EngineUnavailable

T = TypeVar("T")
U = TypeVar("U")

DRIVER_NAME = "temporal_schedules"
NEXT_FIRE_TIMES = 5
RECENT_ACTIONS_KEPT = 10
"""How many recent actions a Temporal Schedule's description lists at most."""
END_FIRES_ROUNDS = 5
END_FIRES_PAUSE_SECONDS = 1.0
"""A switch lists open fire workflows again this long after ending some (visibility lags)."""
_NOTE_PREFIX = "punctual digest="
_REACH_ERRORS = (RPCError, RuntimeError, OSError, TimeoutError, TemporalError)
_UNMATCHABLE = (
    RPCStatusCode.NOT_FOUND,
    RPCStatusCode.INVALID_ARGUMENT,
    RPCStatusCode.FAILED_PRECONDITION,
)
"""Answers about one schedule (gone, or a spec Temporal cannot match), not about Temporal."""


class NotOwned(EngineUnavailable):
    """A Temporal Schedule with this id exists without this installation's mark."""


def _note(digest: str) -> str:
    return f"{_NOTE_PREFIX}{digest} at={datetime.now(UTC).isoformat()}"


def _parse_note(note: str | None) -> tuple[str | None, datetime | None]:
    """(digest, ensured at) from a note punctual wrote; (None, None) from any other."""
    if not note or not note.startswith(_NOTE_PREFIX):
        return None, None
    digest, _, rest = note[len(_NOTE_PREFIX) :].partition(" at=")
    try:
        return digest, datetime.fromisoformat(rest)
    except ValueError:
        return digest, None


def _actions_of(info: ScheduleInfo) -> list[DriverAction]:
    """The recent actions and every running one: a running action older than those is
    known by the fire time Temporal appends to its workflow id (``<id>-<RFC 3339 time>``).
    Temporal tracks running actions under ``skip`` and ``buffer_one`` only, not under
    ``allow_all``, where ``running`` is False for all of them."""
    running = {execution.workflow_id for execution in info.running_workflows}
    actions = [
        DriverAction(
            scheduled_at=result.schedule_time.ToDatetime(tzinfo=UTC),
            started_at=result.actual_time.ToDatetime(tzinfo=UTC),
            running=result.start_workflow_result.workflow_id in running,
        )
        for result in info.recent_actions
    ]
    known = {result.start_workflow_result.workflow_id for result in info.recent_actions}
    for workflow_id in sorted(running - known):
        at = _fire_time_in(workflow_id)
        if at is not None:
            actions.append(DriverAction(scheduled_at=at, started_at=None, running=True))
    return sorted(actions, key=lambda action: action.scheduled_at)


def _actions_since(info: ScheduleInfo) -> datetime | None:
    """Temporal keeps only its last ``RECENT_ACTIONS_KEPT`` actions: once that many are
    listed, an older one may have been dropped from the list."""
    if len(info.recent_actions) < RECENT_ACTIONS_KEPT:
        return None
    return min(result.schedule_time.ToDatetime(tzinfo=UTC) for result in info.recent_actions)


_STAMP = "2000-01-01T00:00:00Z"
"""The shape of the fire time Temporal appends to an action's workflow id, after a dash."""


def _fire_time_in(workflow_id: str) -> datetime | None:
    stamp = workflow_id[-len(_STAMP) :]
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _schedule_of(workflow_id: str) -> str | None:
    """The schedule id in a fire action's workflow id (``fire-<schedule id>-<fire time>``)."""
    if not workflow_id.startswith(WORKFLOW_ID_PREFIX) or _fire_time_in(workflow_id) is None:
        return None
    return workflow_id[len(WORKFLOW_ID_PREFIX) : -len(_STAMP) - 1] or None


class TemporalSchedulesDriver:
    name = DRIVER_NAME

    def __init__(
        self,
        address: str,
        namespace: str,
        installation_id: str,
        *,
        task_queue: str = FIRE_TASK_QUEUE,
        rpc_timeout_seconds: float = 5.0,
        max_concurrent_calls: int = 32,
    ) -> None:
        self.address = address
        self.namespace = namespace
        self.installation_id = installation_id
        self.task_queue = task_queue
        self._rpc_timeout = timedelta(seconds=rpc_timeout_seconds)
        self._concurrency = max_concurrent_calls
        self._client: Client | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.name = "temporal-schedules-driver"
        self._thread.start()

    # ---- the Driver port -------------------------------------------------------------

    def ensure(self, schedule: DriverSchedule) -> list[datetime]:
        return self._call(self._ensure(schedule), f"ensuring schedule {schedule.schedule_id}")

    def remove(self, schedule_id: str) -> None:
        self._call(self._remove(schedule_id), f"removing schedule {schedule_id}")

    def describe_many(self, schedule_ids: Sequence[str]) -> dict[str, DriverView]:
        if not schedule_ids:
            return {}

        views = self._call_each(
            self._describe, schedule_ids, f"describing {len(schedule_ids)} schedule(s)"
        )
        return {view.schedule_id: view for view in views}

    def list_marked(self) -> list[str]:
        async def listing() -> list[str]:
            client = await self._connected()
            found = await client.list_schedules(rpc_timeout=self._rpc_timeout)
            marked = []
            async for entry in found:
                memo = await entry.memo()
                if memo.get(MARK_KEY) == self.installation_id:
                    marked.append(entry.id)
            return marked

        return self._call(listing(), "listing schedules", 4)

    def fire_times(
        self, windows: Mapping[str, tuple[datetime, datetime]]
    ) -> dict[str, list[datetime]]:
        if not windows:
            return {}

        async def one(client: Client, schedule_id: str) -> tuple[str, list[datetime]]:
            start, end = windows[schedule_id]
            try:
                found = await self._matching(client, schedule_id, start, end)
            except RPCError as exc:
                if exc.status not in _UNMATCHABLE:
                    raise
                return schedule_id, []  # this one alone: the others are answered
            inside = [at for at in found if start < at <= end]
            return schedule_id, inside[:FIRE_TIMES_LIMIT]

        what = f"matching fire times of {len(windows)} schedule(s)"
        return dict(self._call_each(one, list(windows), what))

    def end_fires(self, schedule_ids: Sequence[str]) -> int:
        """Temporal's list of workflows lags behind (a fire started just before its
        Schedule was removed may not be listed yet, a terminated one may still be listed
        running): list and terminate again, a little later, until a second or later
        listing finds nothing left to end, at most ``END_FIRES_ROUNDS`` times."""
        wanted = set(schedule_ids)
        ended = 0
        for round_number in range(END_FIRES_ROUNDS if wanted else 0):
            if round_number:
                time.sleep(END_FIRES_PAUSE_SECONDS)
            open_fires = self._open_fires(wanted)
            done = self._terminate(open_fires) if open_fires else 0
            ended += done
            if not done and round_number:
                break
        return ended

    def _open_fires(self, wanted: set[str]) -> list[tuple[str, str | None]]:
        query = f'WorkflowType = "{FIRE_WORKFLOW}" AND ExecutionStatus = "Running"'

        async def listing() -> list[tuple[str, str | None]]:
            client = await self._connected()
            found = client.list_workflows(query, rpc_timeout=self._rpc_timeout)
            # Only these schedules' fires: never another installation's or schedule's.
            return [(e.id, e.run_id) async for e in found if _schedule_of(e.id) in wanted]

        return self._call(listing(), "listing open fire workflows", 4)

    def _terminate(self, open_fires: Sequence[tuple[str, str | None]]) -> int:
        async def one(client: Client, fire: tuple[str, str | None]) -> bool:
            workflow_id, run_id = fire
            try:
                await client.get_workflow_handle(workflow_id, run_id=run_id).terminate(
                    reason="punctual switched this schedule to the sql driver",
                    rpc_timeout=self._rpc_timeout,
                )
            except RPCError as exc:
                if exc.status is not RPCStatusCode.NOT_FOUND:
                    raise
                return False  # it had closed already
            return True

        what = f"ending {len(open_fires)} open fire workflow(s)"
        return sum(self._call_each(one, open_fires, what))

    # ---- for tests and operators -----------------------------------------------------

    def matching_times(self, schedule_id: str, start: datetime, end: datetime) -> list[datetime]:
        """The instants Temporal's own spec matching yields in ``[start, end]``."""

        async def matching() -> list[datetime]:
            return await self._matching(await self._connected(), schedule_id, start, end)

        return self._call(matching(), f"matching times of {schedule_id}")

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self._loop.close()

    # ---- internals -------------------------------------------------------------------

    def _schedule(self, schedule: DriverSchedule) -> Schedule:
        args = FireArgs(schedule_id=schedule.schedule_id, tenant=schedule.tenant)
        return Schedule(
            action=ScheduleActionStartWorkflow(
                FIRE_WORKFLOW,
                args.model_dump(mode="json"),
                id=f"{WORKFLOW_ID_PREFIX}{schedule.schedule_id}",
                task_queue=self.task_queue,
            ),
            spec=spec_of(schedule),
            policy=policy_of(schedule),
            state=state_of(schedule, _note(schedule.digest)),
        )

    async def _ensure(self, schedule: DriverSchedule) -> list[datetime]:
        client = await self._connected()
        wanted = self._schedule(schedule)
        handle = client.get_schedule_handle(schedule.schedule_id)
        try:
            await client.create_schedule(
                schedule.schedule_id,
                wanted,
                memo={MARK_KEY: self.installation_id},
                rpc_timeout=self._rpc_timeout,
            )
        except ScheduleAlreadyRunningError:
            current = await handle.describe(rpc_timeout=self._rpc_timeout)
            memo = await current.memo()
            if memo.get(MARK_KEY) != self.installation_id:
                raise NotOwned(
                    f"Temporal Schedule {schedule.schedule_id} exists without this "
                    "installation's mark; punctual leaves it alone",
                    code="engine_unavailable",
                ) from None

            def replace(_: ScheduleUpdateInput) -> ScheduleUpdate:
                return ScheduleUpdate(schedule=wanted)

            await handle.update(replace, rpc_timeout=self._rpc_timeout)
        described = await handle.describe(rpc_timeout=self._rpc_timeout)
        if described.schedule.state.paused:
            return []
        return list(described.info.next_action_times[:NEXT_FIRE_TIMES])

    async def _remove(self, schedule_id: str) -> None:
        client = await self._connected()
        view = await self._describe(client, schedule_id)
        if not view.present or not view.marked:
            return  # gone already, or not ours to remove
        try:
            await client.get_schedule_handle(schedule_id).delete(rpc_timeout=self._rpc_timeout)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise

    async def _describe(self, client: Client, schedule_id: str) -> DriverView:
        try:
            described = await client.get_schedule_handle(schedule_id).describe(
                rpc_timeout=self._rpc_timeout
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return DriverView(schedule_id, present=False)
            raise
        memo = await described.memo()
        state = described.schedule.state
        digest, ensured_at = _parse_note(state.note)
        return DriverView(
            schedule_id,
            present=True,
            marked=memo.get(MARK_KEY) == self.installation_id,
            paused=state.paused,
            digest=digest,
            next_fire_times=[] if state.paused else list(described.info.next_action_times[:5]),
            ensured_at=ensured_at,
            created_at=described.info.created_at,
            decided_before=next(iter(described.info.next_action_times), None),
            actions=_actions_of(described.raw_description.info),
            actions_since=_actions_since(described.raw_description.info),
            buffered=described.raw_description.info.buffer_size,
        )

    async def _matching(
        self, client: Client, schedule_id: str, start: datetime, end: datetime
    ) -> list[datetime]:
        """Temporal's ``ListScheduleMatchingTimes``: at most 1,000 instants, strictly after
        ``start`` up to ``end``, in the zone of ``start``."""
        from google.protobuf.timestamp_pb2 import Timestamp
        from temporalio.api.workflowservice.v1 import ListScheduleMatchingTimesRequest

        begin, until = Timestamp(), Timestamp()
        begin.FromDatetime(start)
        until.FromDatetime(end)
        answer = await client.workflow_service.list_schedule_matching_times(
            ListScheduleMatchingTimesRequest(
                namespace=self.namespace,
                schedule_id=schedule_id,
                start_time=begin,
                end_time=until,
            ),
            timeout=self._rpc_timeout,
        )
        return [t.ToDatetime(tzinfo=start.tzinfo) for t in answer.start_time]

    async def _connected(self) -> Client:
        if self._client is None:
            self._client = await Client.connect(
                self.address,
                namespace=self.namespace,
                identity=f"punctual-driver@{socket.gethostname()}",
                retry_config=RetryConfig(
                    max_retries=3,
                    max_elapsed_time_millis=int(self._rpc_timeout.total_seconds() * 1000),
                ),
            )
        return self._client

    def _call_each(
        self,
        one: Callable[[Client, U], Awaitable[T]],
        items: Sequence[U],
        what: str,
    ) -> list[T]:
        """``one`` for every item, at most ``max_concurrent_calls`` at a time, the wait
        bounded by the rounds that takes."""

        async def each() -> list[T]:
            client = await self._connected()
            limit = asyncio.Semaphore(self._concurrency)

            async def bounded(item: U) -> T:
                async with limit:
                    return await one(client, item)

            return list(await asyncio.gather(*(bounded(item) for item in items)))

        return self._call(each(), what, 1 + len(items) // self._concurrency)

    def _call(self, coro: Coroutine[Any, Any, T], what: str, rounds: int = 1) -> T:
        if self._loop.is_closed():
            coro.close()
            raise EngineUnavailable("the Temporal Schedules driver was closed")
        bound = 3.0 + self._rpc_timeout.total_seconds() * (2 + rounds)
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(bound)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise EngineUnavailable(f"Temporal did not answer {what} within {bound:g} s") from None
        except EngineUnavailable:
            raise
        except _REACH_ERRORS as exc:
            raise EngineUnavailable(
                f"Temporal at {self.address} (namespace {self.namespace!r}) failed {what}: {exc}"
            ) from exc
