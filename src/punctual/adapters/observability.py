"""Events out: in-process subscribers, structured log lines, Prometheus metrics (DP-5,
SPEC OP-4).

* ``Metrics``: one registry per process (never the global one, so tests can build many
  apps), with the process and runtime collectors, punctual's counters, the HTTP request
  histogram the API's middleware observes, and the queue gauges read at scrape time.
* ``EventHub``: each event to its metrics, to one log line ``event=<name> key=value …``
  and to in-process subscribers.
* ``configure_logging``: the host's ``[logging]``: level, ``text`` or ``json`` lines,
  uvicorn's access log on or off.
* ``MetricsServer``: the registry on a port of its own (``--metrics-port``), for a
  process that serves no API.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from typing import IO, TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    MetricsHandler,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from punctual.ports.events import Event

if TYPE_CHECKING:
    from punctual.usecases.running.queues import QueueDepths

log = logging.getLogger("punctual.events")

Subscriber = Callable[[Event], None]

HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 7.5, 10, 30)
"""Seconds. A mutation waits for its outcome up to ``api_wait_seconds`` (5 s by default)
before it answers ``202``: the buckets reach past that."""


class Metrics:
    """One registry per process (never the global one, so tests can build many apps)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # The runtime's own: CPU, memory, open files, start time (process_*), the
        # interpreter (python_info) and its garbage collector (python_gc_*).
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.http_requests = Histogram(
            "punctual_http_request_duration_seconds",
            "HTTP requests served, by method, route template (never the raw path) and status.",
            ["method", "route", "status"],
            buckets=HTTP_BUCKETS,
            registry=self.registry,
        )
        self.events = Counter(
            "punctual_events", "Events emitted, by name.", ["event"], registry=self.registry
        )
        self.starts_dispatched = Counter(
            "punctual_starts_dispatched", "Starts turned into runs.", registry=self.registry
        )
        self.starts_failed = Counter(
            "punctual_starts_failed", "Starts that failed for good.", registry=self.registry
        )
        self.starts_retried = Counter(
            "punctual_starts_retried",
            "Dispatch attempts that will be retried after backoff.",
            registry=self.registry,
        )
        self.dispatch_lag = Histogram(
            "punctual_dispatch_lag_seconds",
            "From a start's due time to its dispatch.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=self.registry,
        )
        self.occurrences_skipped = Counter(
            "punctual_occurrences_skipped",
            "Occurrences not run, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.follow_through = Counter(
            "punctual_follow_through",
            "Occurrences' follow-through recorded, by status (CR-4).",
            ["status"],
            registry=self.registry,
        )
        self.notifications = Counter(
            "punctual_notifications",
            "Notification events recorded (feeds and webhook outbox), by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.webhook_deliveries = Counter(
            "punctual_webhook_deliveries",
            "Webhook deliveries that ended: delivered, or failed after their retries.",
            ["outcome"],
            registry=self.registry,
        )
        self.retention_removed = Counter(
            "punctual_retention_removed",
            "Records removed by retention sweeps, by kind (RT-1).",
            ["kind"],
            registry=self.registry,
        )

    def watch_queues(self, read: Callable[[], QueueDepths]) -> None:
        """Report the queue gauges, read by ``read`` whenever the registry is collected."""
        self.registry.register(QueueGauges(read))


class QueueGauges(Collector):
    """The queue gauges, read from the store at scrape time: every process reports the
    same installation-wide values (aggregate them with ``max``, not ``sum``). When the
    store cannot be read, they are absent from that scrape and the rest is served.

    One read at a time per process: a scrape that comes while another still reads leaves
    the gauges out rather than wait, so scrapers that retry against a slow database never
    hold more than one of the pool's connections."""

    def __init__(self, read: Callable[[], QueueDepths]) -> None:
        self._read = read
        self._reading = threading.Lock()

    def describe(self) -> Iterator[Metric]:
        # The names only: registering must not read the store.
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        if not self._reading.acquire(blocking=False):
            log.debug("event=queue_gauges_unread error=another scrape is reading them")
            return iter(())
        try:
            depths = self._read()
        except Exception as exc:
            log.debug("event=queue_gauges_unread error=%s", exc)
            return iter(())
        finally:
            self._reading.release()
        due, due_age, pending, pending_age = self._families()
        due.add_metric([], depths.due_starts)
        due_age.add_metric([], depths.due_oldest_seconds)
        for queue, count in depths.pending_runs.items():
            pending.add_metric([queue], count)
            pending_age.add_metric([queue], depths.pending_oldest_seconds.get(queue, 0.0))
        return iter((due, due_age, pending, pending_age))

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(
                "punctual_due_backlog",
                "Starts and occurrences that are due and not yet claimed by a runner.",
            ),
            GaugeMetricFamily(
                "punctual_due_oldest_age_seconds",
                "How long the oldest due, unclaimed start has been due (0: none): dispatch lag.",
            ),
            GaugeMetricFamily(
                "punctual_runs_pending",
                "Runs dispatched and waiting for a worker, by task queue.",
                labels=["task_queue"],
            ),
            GaugeMetricFamily(
                "punctual_runs_pending_oldest_age_seconds",
                "How long the oldest pending run of the task queue has waited (0: none).",
                labels=["task_queue"],
            ),
        )


QUIET_WHEN_UNCHANGED = frozenset({"dispatch.backlog"})
"""Events emitted on a timer: their line is at INFO when what they say changed, at DEBUG
when it is the same as last time (an idle runner says nothing every 5 s)."""


class EventHub:
    """Fans events out; a subscriber that raises is logged and never breaks dispatch."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()
        self._last_said: dict[str, tuple[Any, ...]] = {}

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            with self._lock:
                if subscriber in self._subscribers:
                    self._subscribers.remove(subscriber)

        return unsubscribe

    def emit(self, event: Event) -> None:
        self._metrics.events.labels(event.name).inc()
        if event.name == "start.dispatched":
            self._metrics.starts_dispatched.inc()
            lag_ms = event.data.get("lag_ms")
            if isinstance(lag_ms, int | float):
                self._metrics.dispatch_lag.observe(max(0.0, lag_ms / 1000))
        elif event.name == "occurrence.skipped":
            reason = str(event.data.get("reason", "unknown"))
            self._metrics.occurrences_skipped.labels(reason).inc(float(event.data.get("count", 1)))
        elif event.name == "start.failed":
            self._metrics.starts_failed.inc()
        elif event.name == "start.retried":
            self._metrics.starts_retried.inc()
        elif event.name == "follow_through.recorded":
            self._metrics.follow_through.labels(str(event.data.get("status"))).inc()
        elif event.name == "notification.created":
            self._metrics.notifications.labels(str(event.data.get("kind"))).inc()
        elif event.name in ("webhook.delivered", "webhook.failed"):
            self._metrics.webhook_deliveries.labels(event.name.split(".")[1]).inc()
        elif event.name == "retention.swept":
            removed = float(event.data.get("removed", 0))
            self._metrics.retention_removed.labels(str(event.data.get("kind"))).inc(removed)
        fields = " ".join(f"{key}={value}" for key, value in sorted(event.data.items()))
        log.log(
            self._level_of(event),
            "event=%s tenant=%s subject=%s %s",
            event.name,
            event.tenant,
            event.subject_id,
            fields,
        )
        with self._lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            try:
                subscriber(event)
            except Exception:
                log.exception("event=subscriber_failed subscriber=%r", subscriber)

    def _level_of(self, event: Event) -> int:
        if event.name not in QUIET_WHEN_UNCHANGED:
            return logging.INFO
        said = (event.tenant, event.subject_id, sorted(event.data.items()))
        key = f"{event.name} {event.subject_id}"
        with self._lock:
            if self._last_said.get(key) == said:
                return logging.DEBUG
            self._last_said[key] = said
        return logging.INFO


# --------------------------------------------------------------------------- logging

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
_FIELD = re.compile(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_.]*)=")
_RESERVED = frozenset({"time", "level", "logger", "message", "exception"})
_INT = re.compile(r"-?\d+")
_FLOAT = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")


_NAMES = frozenset(
    {
        "event", "tenant", "subject", "run", "start", "schedule", "occurrence", "worker",
        "runner", "process", "engine", "workflow", "version", "key", "delivery", "webhook",
        "queue", "task_queue", "driver", "host", "method", "path", "artifact", "name",
    }
)  # fmt: skip
"""Fields that name something: always text in JSON, whatever they look like (a tenant
called ``2024`` is a string in every line, so a log store maps the field once)."""


def event_fields(message: str) -> dict[str, Any]:
    """The ``key=value`` fields of an event line (``event=name key=value …``): a value runs
    to the next `` key=``, so it may hold spaces (``note=back this file up``). Numbers,
    booleans and ``None`` become JSON's, except in fields that name something. The first
    field of a name wins: text inside a later value (an error's message that reads
    ``tenant=x``) never replaces the line's own. A line that is not an event's gives
    nothing."""
    if not message.startswith("event="):
        return {}
    kept: list[tuple[str, re.Match[str]]] = []
    for match in _FIELD.finditer(message):
        key = match.group(1)
        key = f"{key}_" if key in _RESERVED else key
        if key not in {name for name, _ in kept}:
            kept.append((key, match))
    fields: dict[str, Any] = {}
    for i, (key, match) in enumerate(kept):
        end = kept[i + 1][1].start() if i + 1 < len(kept) else len(message)
        value = message[match.end() : end].strip()
        fields[key] = value if _names_something(key) else _typed(value)
    return fields


def _names_something(key: str) -> bool:
    return key in _NAMES or key.endswith("_id")


def _typed(value: str) -> Any:
    if _INT.fullmatch(value):
        return int(value)
    if _FLOAT.fullmatch(value):
        return float(value)
    return {"True": True, "False": False, "None": None}.get(value, value)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, RFC 3339 with milliseconds), ``level``,
    ``logger``, ``message``, the event's fields as keys of their own, ``exception`` with
    the traceback when there is one. An access line carries ``client``, ``method``,
    ``path`` and ``status``."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        entry.update(event_fields(message))
        if record.name == "uvicorn.access" and isinstance(record.args, tuple):
            entry.update(_access_fields(record.args))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def _access_fields(args: tuple[Any, ...]) -> dict[str, Any]:
    """uvicorn's access line is ``'%s - "%s %s HTTP/%s" %d'`` over these five."""
    if len(args) != 5:
        return {}
    client, method, path, _, status = args
    return {"client": client, "method": method, "path": path, "status": status}


def configure_logging(
    level: str = "INFO",
    format: str = "text",
    access_log: bool = False,
    stream: IO[str] | None = None,
) -> None:
    """Every line of the process to ``stream`` (stderr) in the chosen format, replacing
    any handler configured before. ``level`` is punctual's; other libraries say INFO and
    above at most (at DEBUG their own debug lines would bury punctual's), and uvicorn and
    Alembic WARNING and above. The access log (``uvicorn.access``) is at INFO whatever
    ``level`` is, or off."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    wanted = logging.getLevelName(level)
    root.setLevel(max(wanted, logging.INFO))
    logging.getLogger("punctual").setLevel(wanted)
    quiet = max(wanted, logging.WARNING)
    # Alembic's own INFO lines (plugins, each migration step) are noise beside punctual's
    # event=schema_created; uvicorn's (started, waiting for startup) beside its own lines.
    for name in ("alembic", "uvicorn", "uvicorn.error", "uvicorn.asgi"):
        logging.getLogger(name).setLevel(quiet)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        # Their lines go to the handler above, in the same format: uvicorn is started
        # without a logging configuration of its own.
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
    access = logging.getLogger("uvicorn.access")
    access.setLevel(logging.INFO if access_log else logging.CRITICAL + 1)
    access.propagate = access_log
    # A library's warning (``warnings.warn``) is a line like the others, not raw stderr.
    logging.captureWarnings(True)


# --------------------------------------------------------------------------- /metrics alone


class MetricsServer:
    """Serves a registry over HTTP on an already bound socket (``cli.startup.listen``),
    in a thread of its own: a scrape never waits on the process's work."""

    def __init__(self, sock: socket.socket, registry: CollectorRegistry) -> None:
        server = ThreadingHTTPServer(
            sock.getsockname()[:2], MetricsHandler.factory(registry), bind_and_activate=False
        )
        server.socket.close()
        server.socket = sock
        server.daemon_threads = True
        server.server_activate()
        self.address: tuple[str, int] = sock.getsockname()[:2]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="punctual-metrics", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
