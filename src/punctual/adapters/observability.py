"""Events out: in-process subscribers, structured log lines, Prometheus metrics (DP-5)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from punctual.ports.events import Event

log = logging.getLogger("punctual.events")

Subscriber = Callable[[Event], None]


class Metrics:
    """One registry per process (never the global one, so tests can build many apps)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
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
        self.due_backlog = Gauge(
            "punctual_due_backlog",
            "Starts that are due and not yet dispatched, as last counted by this runner.",
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


class EventHub:
    """Fans events out; a subscriber that raises is logged and never breaks dispatch."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()

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
        elif event.name == "dispatch.backlog":
            self._metrics.due_backlog.set(float(event.data.get("due", 0)))
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
        log.info(
            "event=%s tenant=%s subject=%s %s", event.name, event.tenant, event.subject_id, fields
        )
        with self._lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            try:
                subscriber(event)
            except Exception:
                log.exception("event=subscriber_failed subscriber=%r", subscriber)
