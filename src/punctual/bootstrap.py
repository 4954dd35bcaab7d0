"""The composition root: the only module that reads settings and wires every layer.

``build`` turns validated settings into a running object graph; the CLI, the tests and
embedded users call it, and nothing else constructs adapters.
"""

from __future__ import annotations

import logging
import os
import random
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from punctual.adapters.clock import SystemClock
from punctual.adapters.crypto import KeyRingCodec, generate_key_file, load_key_file
from punctual.adapters.engines.local.engine import LocalEngine
from punctual.adapters.faults import CrashPoints
from punctual.adapters.http.status import body_for, status_for
from punctual.adapters.observability import EventHub, Metrics
from punctual.adapters.quota import LocalQuota, NoQuota, PostgresQuota
from punctual.adapters.stores.sql import migrate
from punctual.adapters.stores.sql.listener import (
    DELIVERIES_CHANNEL,
    DUE_CHANNEL,
    ENDED_CHANNEL,
    RUNS_CHANNEL,
    PgListener,
)
from punctual.adapters.stores.sql.retention import tables_swept
from punctual.adapters.stores.sql.store import SqlStore, SqlTx
from punctual.adapters.webhooks import HttpWebhookSender, default_allowed_cidrs
from punctual.errors import ConfigurationError, HostUnavailable, Unavailable
from punctual.ports.clock import Clock
from punctual.ports.doorbell import Doorbell
from punctual.ports.engine import Engine
from punctual.ports.quota import QuotaController
from punctual.ports.store import Store, Tx
from punctual.runner.deliverer import Deliverer
from punctual.runner.keys import KeyWatch
from punctual.runner.loop import Runner, RunnerOptions
from punctual.runner.sweeper import Sweeper
from punctual.settings import Settings
from punctual.usecases.firing import driver_switch, schedule_driver
from punctual.usecases.kernel.context import HostPolicy, Services, TenantPolicy, WorkloadClass
from punctual.usecases.kernel.idempotency import MutationRunner
from punctual.usecases.kernel.principals import PrincipalCache
from punctual.usecases.running import queues
from punctual.usecases.running.definitions import check_keys
from punctual.usecases.tenancy import keys as codec_keys
from punctual.usecases.tenancy.retention import RetentionPolicy
from punctual.worker.local import LocalWorker, WorkerOptions
from punctual.workflows import load_app

if TYPE_CHECKING:  # temporalio is an optional extra: import the adapter only when used
    from fastapi import FastAPI

    from punctual.runner.reconciler import Reconciler
    from punctual.worker.schedules.worker import FireWorker
    from punctual.worker.temporal.sync import SyncLoop
    from punctual.worker.temporal.worker import TemporalWorker

log = logging.getLogger("punctual")

TEMPORAL_SYNC_SECONDS = 2.0
"""How often the runner copies Temporal's view of unfinished runs into the store (WF-8)."""
RECONCILE_SECONDS = 60.0
"""How often the runner sweeps schedules against Temporal Schedules (CR-6)."""
TEMPORAL_CHECK_SECONDS = 3.0
"""How long a runner or worker on Temporal waits, at its start, for the server to answer."""


@contextmanager
def temporal_extra() -> Iterator[None]:
    """Around an import of a Temporal adapter: without the optional ``temporalio`` package
    the host cannot start, which is one line naming the extra (SPEC OP-1), not a bug."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "temporalio":
            raise
        raise HostUnavailable(
            'engine = "temporal" needs the temporal extra, which is not installed: '
            "pip install 'punctual[temporal]', or set engine = \"local\"",
            code="extra_missing",
        ) from exc


def check_engine(settings: Settings) -> None:
    """Before a process starts a runner or a worker on the Temporal engine: the extra is
    installed and the server accepts a connection within ``TEMPORAL_CHECK_SECONDS``, or
    the start is refused naming what to fix (SPEC OP-1). An outage after the start is
    the engine's to ride out (FT-6)."""
    if settings.engine != "temporal":
        return
    with temporal_extra():
        from punctual.adapters.engines.temporal.engine import check_reachable

    check_reachable(settings.temporal.address, TEMPORAL_CHECK_SECONDS)


def build_engine(settings: Settings, store: SqlStore, clock: Clock) -> Engine:
    """``settings.engine`` decides where runs execute; one engine per host."""
    if settings.engine == "temporal":
        with temporal_extra():
            from punctual.adapters.engines.temporal.engine import TemporalEngine, TemporalOptions

        return TemporalEngine(
            store,
            clock,
            liveness_seconds=settings.worker.liveness_seconds,
            pending_timeout_seconds=settings.worker.pending_timeout_seconds,
            max_attempts=host_policy(settings).max_run_attempts,
            options=TemporalOptions(
                address=settings.temporal.address, namespace=settings.temporal.namespace
            ),
        )
    return LocalEngine(store, clock, settings.worker.liveness_seconds)


def host_policy(settings: Settings) -> HostPolicy:
    def tenant_policy(tenant: str) -> TenantPolicy:
        limits = settings.limits_for(tenant)
        return TenantPolicy(
            allowed_workload_classes=frozenset(limits.allowed_workload_classes),
            max_input_bytes=limits.max_input_bytes,
            max_pending_starts=limits.max_pending_starts,
            max_schedules=limits.max_schedules,
            max_pending_by_class=dict(limits.max_pending_by_class),
        )

    return HostPolicy(
        workload_classes={
            name: WorkloadClass(cls.task_queue, cls.priority)
            for name, cls in settings.workload_classes.items()
        },
        tenant_policy=tenant_policy,
        api_wait_seconds=settings.api_wait_seconds,
        lease_seconds=settings.runner.lease_seconds,
        worker_liveness_seconds=settings.worker.liveness_seconds,
        pending_timeout_seconds=settings.worker.pending_timeout_seconds,
        max_execution_timeout_seconds=settings.worker.max_execution_timeout_seconds,
        wake_horizon_seconds=settings.runner.max_idle_seconds,
        follow_through_deadline_seconds=settings.schedules.follow_through_deadline_seconds,
    )


def sqlite_path(database_url: str) -> Path | None:
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def prepare_schema(settings: Settings, store: SqlStore) -> None:
    """Local profile on SQLite: create and migrate an absent or empty database.

    Anything else must already be at the current schema; an older one is refused with a
    message naming ``punctual db upgrade`` (an upgrade is an operator's decision).
    """
    if settings.profile == "local" and store.dialect == "sqlite" and migrate.is_empty(store):
        migrate.upgrade(store)
        log.info("event=schema_created database=%s", store.engine.url.database)
        return
    migrate.check_current(store)


@contextmanager
def current_store(settings: Settings) -> Iterator[Store]:
    """The store alone, reachable and at this version's schema, for the host commands that
    need no key ring (key activation, checks, retirement)."""
    store = SqlStore(settings.database_url, pool_size=settings.database_pool_size)
    try:
        store.check_connection()
        migrate.check_current(store)
        yield store
    finally:
        store.dispose()


def upgrade_schema(settings: Settings) -> tuple[str | None, str]:
    """Migrate the database to this version's schema: ``(before, after)`` revisions."""
    store = SqlStore(settings.database_url, pool_size=settings.database_pool_size)
    try:
        store.check_connection()
        return migrate.upgrade(store)
    finally:
        store.dispose()


def build_codec(settings: Settings) -> KeyRingCodec:
    configured = settings.codec.key_file
    if configured is not None:
        path = Path(configured)
    else:
        db = sqlite_path(settings.database_url)
        path = (db.parent if db is not None else Path()) / "punctual.keys"
    if not path.exists():
        if settings.profile == "production":
            raise ConfigurationError(
                f"codec.key_file {path} does not exist; the production profile needs a key ring "
                "(see docs/operations.md, 'Keys')"
            )
        generate_key_file(path)
        log.warning(
            "event=codec_key_generated key_file=%s note=back this file up with the database", path
        )
    return load_key_file(path, settings.codec.active_key)


def build_quota(settings: Settings, store: SqlStore) -> QuotaController:
    """The local profile defaults to the best-effort controller; production has no default."""
    controller = settings.quota.controller
    if controller is None:
        controller = "local" if settings.profile == "local" else "none"
    if controller == "local":
        return LocalQuota()
    if controller == "none":
        return NoQuota()
    if store.dialect != "postgresql":
        raise ConfigurationError("quota.controller = 'postgres' needs a PostgreSQL database_url")

    def connection_of(tx: Tx) -> sa.Connection:
        assert isinstance(tx, SqlTx)
        return tx.conn

    return PostgresQuota(connection_of)


def retention_policy(settings: Settings) -> RetentionPolicy:
    """The host's ``[retention]`` and per-tenant windows as the sweep reads them."""
    return RetentionPolicy(
        keep_seconds=settings.retention.keep_seconds,
        tenant_keep_seconds=settings.retention_overrides(),
        audit_keep_seconds=settings.retention.audit_keep_seconds,
        batch_size=settings.retention.batch_size,
    )


def build_webhook_sender(settings: Settings) -> HttpWebhookSender:
    """Deliveries and the check at webhook create share one policy: the host's
    ``[webhooks] allowed_cidrs``, or the profile's default when unset."""
    allowed = settings.webhooks.allowed_cidrs
    return HttpWebhookSender(
        allowed if allowed is not None else default_allowed_cidrs(settings.profile)
    )


def check_profile(settings: Settings) -> None:
    if settings.profile == "production":
        if settings.quota.controller == "local":
            raise ConfigurationError(
                "quota.controller = 'local' is best-effort and is refused in the production "
                "profile; use 'postgres'"
            )
        if settings.database_url.startswith("sqlite"):
            raise ConfigurationError(
                "database_url: the production profile needs PostgreSQL (SQLite is one machine)"
            )


class _Stoppable(Protocol):
    """A part of a process that runs until told to stop."""

    def stop(self) -> None: ...


@dataclass
class Punctual:
    """An assembled punctual: services plus the processes' parts that can be started."""

    settings: Settings
    store: SqlStore
    services: Services
    engine: Engine
    metrics: Metrics
    events: EventHub
    mutations: MutationRunner
    due_doorbell: Doorbell
    runner: Runner | None = None
    deliverer: Deliverer | None = None
    sweeper: Sweeper | None = None
    key_watch: KeyWatch | None = None
    workers: list[LocalWorker | TemporalWorker] = field(default_factory=list)
    sync: SyncLoop | None = None
    fire_worker: FireWorker | None = None
    reconciler: Reconciler | None = None
    listener: PgListener | None = None
    ended_doorbell: Doorbell = field(default_factory=Doorbell)
    """Rung when a schedule's run ended: the runner's follow-through has work."""
    deliveries_doorbell: Doorbell = field(default_factory=Doorbell)
    """Rung when webhook deliveries were queued: the runner's deliverer has work."""
    _idle_doorbell: Doorbell = field(default_factory=Doorbell)

    @property
    def runs_doorbell(self) -> Doorbell:
        """Rung when runs may wait for local workers (Temporal pushes its own work)."""
        if isinstance(self.engine, LocalEngine):
            return self.engine.doorbell
        return self._idle_doorbell

    def _listen(self) -> None:
        """On PostgreSQL, wake this process's runner and workers on other processes' commits."""
        if self.listener is not None or self.store.dialect != "postgresql":
            return
        dsn = self.store.engine.url.set(drivername="postgresql").render_as_string(
            hide_password=False
        )
        self.listener = PgListener(
            dsn,
            {
                DUE_CHANNEL: self.due_doorbell.ring,
                RUNS_CHANNEL: self.runs_doorbell.ring,
                ENDED_CHANNEL: self.ended_doorbell.ring,
                DELIVERIES_CHANNEL: self.deliveries_doorbell.ring,
            },
        )
        self.listener.start()

    def _runs(self, component: str) -> None:
        if self.key_watch is not None:
            self.key_watch.add_component(component)

    def http_app(self) -> FastAPI:
        # The web stack is imported by what serves HTTP only: a host command or a process
        # that only runs bodies or fires starts does without it (SPEC OP-1, a fast start).
        from punctual.adapters.http.app import create_app
        from punctual.adapters.http.edge import Edge

        self._runs("api")
        edge = Edge(self.services, self.mutations)
        token = self.settings.internal_token
        # With internal_listen the /internal tree is served on that address only.
        shared = token is not None and self.settings.internal_listen is None
        return create_app(
            edge,
            self.metrics.registry,
            max_body_bytes=self.settings.max_body_bytes,
            internal_token=token.get_secret_value() if shared and token is not None else None,
            request_durations=self.metrics.http_requests,
        )

    def internal_app(self) -> FastAPI | None:
        """The ``/internal`` tree alone, for ``internal_listen`` (None when it is not set)."""
        token = self.settings.internal_token
        if token is None or self.settings.internal_listen is None:
            return None
        from punctual.adapters.http.app import create_internal_app
        from punctual.adapters.http.edge import Edge

        edge = Edge(self.services, self.mutations)
        return create_internal_app(
            edge,
            token.get_secret_value(),
            max_body_bytes=self.settings.max_body_bytes,
            request_durations=self.metrics.http_requests,
        )

    def start_runner(self) -> Runner:
        self._runs("runner")
        idle = self.settings.runner.max_idle_seconds
        # The follow-through's and the deliverer's backstops follow the runner's idle cap;
        # a recorded end and a queued delivery wake them at once.
        options = RunnerOptions(
            page_size=self.settings.runner.page_size,
            max_idle_seconds=idle,
            follow_through_every_seconds=idle / 2,
        )
        # Webhook deliveries leave from the runner process, off the dispatch thread; the
        # follow-through pass rings the deliverer when it queued some.
        self.deliverer = Deliverer(
            self.services, doorbell=self.deliveries_doorbell, max_idle_seconds=idle
        )
        self.runner = Runner(
            self.services,
            options,
            self.due_doorbell,
            on_notified=self.deliverer.wake,
            ended=self.ended_doorbell,
        )
        self._listen()
        self.runner.start()
        self.deliverer.start()
        # Retention (RT-1): bounded batches on a thread of its own, yielding to dispatch.
        self.sweeper = Sweeper(
            self.services,
            retention_policy(self.settings),
            interval_seconds=self.settings.retention.sweep_interval_seconds,
            after_pass=lambda report: self.store.reclaim_space(tables_swept(report.removed)),
        )
        self.sweeper.start()
        if self.settings.engine == "temporal" and self.sync is None:
            from punctual.adapters.engines.temporal.engine import TemporalEngine
            from punctual.worker.temporal.sync import SyncLoop

            assert isinstance(self.engine, TemporalEngine)
            self.sync = SyncLoop(self.services, self.engine, TEMPORAL_SYNC_SECONDS)
            self.sync.start()
        if self.settings.driver == "temporal_schedules" and self.fire_worker is None:
            self._start_schedules_driver()
        if self._left_schedules_driver():
            self._leave_schedules_driver()
        return self.runner

    def _start_schedules_driver(self) -> None:
        """The fire workflow's worker, and the reconciliation sweep (at once, then on a
        timer): the runner process is where Temporal Schedules' fires are taken."""
        from punctual.runner.reconciler import Reconciler
        from punctual.worker.schedules.worker import FireWorker

        self.fire_worker = FireWorker(
            self.services, self.settings.temporal.address, self.settings.temporal.namespace
        )
        self.fire_worker.start()
        self.reconciler = Reconciler(self.services, RECONCILE_SECONDS)
        self.reconciler.start()

    def _left_schedules_driver(self) -> bool:
        """Under sql on the Temporal engine, the store still holds the Temporal Schedules
        driver's sync records (a plain sql installation never has any)."""
        settings = self.settings
        return (
            settings.driver == "sql"
            and settings.engine == "temporal"
            and driver_switch.was_driven(self.services)
        )

    def _leave_schedules_driver(self) -> None:
        """Back on the sql driver after temporal_schedules: the one-shot sweep that removes
        this installation's Temporal Schedules (docs/temporal.md, "Switching drivers")."""
        from punctual.adapters.drivers.temporal_schedules.driver import TemporalSchedulesDriver

        former = TemporalSchedulesDriver(
            self.settings.temporal.address,
            self.settings.temporal.namespace,
            schedule_driver.installation_id(self.services),
        )
        try:
            driver_switch.switch_to_sql(self.services, former)
        except Unavailable as exc:
            log.warning("event=driver_switch_paused error=%s note=the next start retries", exc)
        finally:
            former.close()

    def start_worker(
        self, app_ref: str, task_queues: list[str] | None = None, slots: int | None = None
    ) -> LocalWorker | TemporalWorker:
        app = load_app(app_ref)
        self._runs("worker")
        queues = task_queues or sorted(
            {cls.task_queue for cls in self.settings.workload_classes.values()}
        )
        if self.settings.engine == "temporal":
            from punctual.worker.temporal.worker import TemporalWorker

            temporal_worker = TemporalWorker(
                self.services,
                app_ref,
                queues,
                self.settings.temporal.address,
                self.settings.temporal.namespace,
                slots=slots or self.settings.worker.slots,
                heartbeat_seconds=self.settings.worker.heartbeat_seconds,
            )
            temporal_worker.start()
            self.workers.append(temporal_worker)
            return temporal_worker
        options = WorkerOptions(
            app_ref=app_ref,
            task_queues=queues,
            slots=slots or self.settings.worker.slots,
            heartbeat_seconds=self.settings.worker.heartbeat_seconds,
        )
        worker = LocalWorker(self.services, app, options, self.runs_doorbell)
        self._listen()
        worker.start()
        self.workers.append(worker)
        return worker

    def close(self) -> None:
        loops = (self.runner, self.deliverer, self.sweeper, self.sync, self.reconciler)
        parts: list[_Stoppable | None] = [*loops, self.fire_worker, *self.workers, self.key_watch]
        for part in parts:
            if part is not None:
                part.stop()
        close_engine = getattr(self.engine, "close", None)  # the Temporal engine's loop thread
        if close_engine is not None:
            close_engine()
        close_driver = getattr(self.services.driver, "close", None)
        if close_driver is not None:
            close_driver()
        if self.listener is not None:
            self.listener.stop()
        self.mutations.close()
        self.store.dispose()


def build(
    settings: Settings,
    *,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    prepare: bool = True,
) -> Punctual:
    check_profile(settings)
    store = SqlStore(settings.database_url, pool_size=settings.database_pool_size)
    try:
        return _assemble(settings, store, clock or SystemClock(), rng or random.Random(), prepare)
    except BaseException:
        store.dispose()  # a refused start must not leave connections open
        raise


def _assemble(
    settings: Settings, store: SqlStore, clock: Clock, rng: random.Random, prepare: bool
) -> Punctual:
    store.check_connection()
    if prepare:
        prepare_schema(settings, store)
    codec = build_codec(settings)
    engine = build_engine(settings, store, clock)
    metrics = Metrics()
    events = EventHub(metrics)
    due, ended, deliveries = Doorbell(), Doorbell(), Doorbell()
    services = Services(
        store=store,
        codec=codec,
        engine=engine,
        clock=clock,
        policy=host_policy(settings),
        quota=build_quota(settings, store),
        events=events,
        webhooks=build_webhook_sender(settings),
        rng=rng,
        on_due_change=due.ring,
        on_runs_ended=ended.ring,
        on_deliveries_queued=deliveries.ring,
        crash_point=CrashPoints(os.environ.get("PUNCTUAL_CRASH_AT", "")),
        principals=PrincipalCache(settings.auth_cache_seconds),
        retention_keep_for=retention_policy(settings).keep_for,
    )
    key_watch = None
    if prepare:
        check_keys(services)
        # Last, as nothing after it may refuse: a process that joined counts as live.
        process = codec_keys.join(
            services,
            codec_keys.new_process(socket.gethostname(), os.getpid(), clock.now()),
            settings.codec.active_key,
            settings.codec.liveness_seconds,
        )
        key_watch = KeyWatch(services, process, settings.codec.refresh_seconds)
    if settings.driver == "temporal_schedules":
        from punctual.adapters.drivers.temporal_schedules.driver import TemporalSchedulesDriver

        services.driver = TemporalSchedulesDriver(
            settings.temporal.address,
            settings.temporal.namespace,
            schedule_driver.installation_id(services),
        )
    # The queue gauges are read from the store whenever this process is scraped.
    metrics.watch_queues(partial(queues.queue_depths, services))
    mutations = MutationRunner(services, status_for, body_for)
    system = Punctual(
        settings,
        store,
        services,
        engine,
        metrics,
        events,
        mutations,
        due,
        ended_doorbell=ended,
        deliveries_doorbell=deliveries,
    )
    if key_watch is not None:
        system.key_watch = key_watch
        key_watch.start()
    return system
