"""What every use case is handed: the ports and the host's policy, built by bootstrap."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from punctual.ports.clock import Clock
from punctual.ports.codec import Codec
from punctual.ports.driver import Driver, DriverSchedule, DriverView
from punctual.ports.engine import Engine
from punctual.ports.events import Event, EventSink
from punctual.ports.quota import QuotaController
from punctual.ports.store import Store
from punctual.ports.webhooks import SendResult, WebhookSender
from punctual.usecases.kernel.active_definitions import ActiveDefinitions
from punctual.usecases.kernel.principals import PrincipalCache


@dataclass(frozen=True)
class WorkloadClass:
    task_queue: str
    priority: int


@dataclass(frozen=True)
class TenantPolicy:
    allowed_workload_classes: frozenset[str]
    max_input_bytes: int
    max_pending_starts: int
    max_schedules: int
    max_pending_by_class: dict[str, int]


@dataclass(frozen=True)
class HostPolicy:
    """Host-owned settings that decide admission and dispatch (read at call time)."""

    workload_classes: dict[str, WorkloadClass]
    tenant_policy: Callable[[str], TenantPolicy]
    api_wait_seconds: float = 5.0
    lease_seconds: float = 30.0
    worker_liveness_seconds: float = 20.0
    pending_timeout_seconds: float = 3600.0
    max_execution_timeout_seconds: float = 86400.0
    max_run_attempts: int = 10
    wake_horizon_seconds: float = 1.0
    """Runners re-read the next due time at least this often; sooner work wakes them."""
    follow_through_deadline_seconds: float = 14_400.0
    """How long follow-through waits for an occurrence's run to end (CR-5)."""


class SqlDriver:
    """The default driver: the runner's generation pass fires schedules from the store, so
    there is no copy elsewhere to keep in step (every call is a no-op)."""

    name = "sql"

    def ensure(self, schedule: DriverSchedule) -> list[datetime]:
        return []

    def remove(self, schedule_id: str) -> None:
        pass

    def describe_many(self, schedule_ids: Sequence[str]) -> dict[str, DriverView]:
        return {}

    def list_marked(self) -> list[str]:
        return []

    def fire_times(
        self, windows: Mapping[str, tuple[datetime, datetime]]
    ) -> dict[str, list[datetime]]:
        return {}

    def end_fires(self, schedule_ids: Sequence[str]) -> int:
        return 0


class NullEvents:
    def emit(self, event: Event) -> None:
        pass


class NoWebhooks:
    """A process that delivers no webhooks (tests of other parts, the API-only role)."""

    def destination_problem(self, url: str) -> str | None:
        return None

    def send(self, url: str, body: bytes, headers: dict[str, str]) -> SendResult:
        return SendResult(False, None, "this process does not deliver webhooks")


@dataclass
class Services:
    store: Store
    codec: Codec
    engine: Engine
    clock: Clock
    policy: HostPolicy
    quota: QuotaController
    events: EventSink = field(default_factory=NullEvents)
    webhooks: WebhookSender = field(default_factory=NoWebhooks)
    rng: random.Random = field(default_factory=random.Random)
    driver: Driver = field(default_factory=SqlDriver)
    """What fires schedules (CR-6): the SQL runner, or Temporal Schedules."""
    on_due_change: Callable[[], None] = field(default=lambda: None)
    """Called after a commit that may make work due sooner (wakes the runner)."""
    on_runs_ended: Callable[[], None] = field(default=lambda: None)
    """Called after a commit that recorded how a schedule's run ended (wakes this
    process's follow-through; other processes hear it from the store)."""
    on_deliveries_queued: Callable[[], None] = field(default=lambda: None)
    """Called after a commit that queued webhook deliveries (wakes this process's
    deliverer; other processes hear it from the store)."""
    crash_point: Callable[[str], None] = field(default=lambda name: None)
    """Fault-injection seam: tests make the process die at a named point."""
    principals: PrincipalCache = field(default_factory=lambda: PrincipalCache(0))
    """Tokens this process checked lately (``auth_cache_seconds``; none by default)."""
    definitions: ActiveDefinitions = field(default_factory=ActiveDefinitions)
    """The active definitions this process last read, for creates in one round trip."""
    retention_keep_for: Callable[[str], float] = field(default=lambda tenant: math.inf)
    """A tenant's ``keep_seconds`` (RT-1): what is older may have been removed."""
