"""How much work waits, for the queue gauges of ``/metrics`` (SPEC OP-4).

Read when the metrics are scraped, on any process: one read-only transaction of two
statements (due starts, pending runs per task queue), each on a partial index that holds
only the waiting rows, so a scrape costs the same however long the history is. The read
gives up after ``QUEUE_READ_LOCK_TIMEOUT`` behind a lock, and the gauges are then left out
of that scrape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from punctual.usecases.kernel.context import Services


@dataclass(frozen=True)
class QueueDepths:
    """What waits, as of one read."""

    due_starts: int
    """Starts and occurrences whose due time has come and that no runner has claimed yet
    (``scheduled``, due): dispatch's backlog."""
    due_oldest_seconds: float
    """How long the oldest of those has been due (0 when there are none): dispatch lag."""
    pending_runs: dict[str, int] = field(default_factory=dict)
    """Task queue -> runs dispatched and waiting for a worker (``pending``); every
    configured queue is present, at 0 when nothing waits on it."""
    pending_oldest_seconds: dict[str, float] = field(default_factory=dict)
    """Task queue -> how long its oldest pending run has waited (0 when none): pickup lag."""


QUEUE_READ_LOCK_TIMEOUT = 1.0
"""How long a scrape's read waits behind a lock (a migration's, an operator's) before it
gives up: a scrape must answer within the scraper's timeout, gauges or not."""


def queue_depths(services: Services) -> QueueDepths:
    now = services.clock.now()
    with services.store.transaction(readonly=True, lock_timeout=QUEUE_READ_LOCK_TIMEOUT) as tx:
        due, earliest = tx.starts.due_backlog(now)
        pending = tx.runs.pending_by_queue()
    queues = {cls.task_queue for cls in services.policy.workload_classes.values()} | set(pending)
    counts = {queue: 0 for queue in sorted(queues)}
    ages = dict.fromkeys(counts, 0.0)
    for queue, (count, oldest) in pending.items():
        counts[queue] = count
        ages[queue] = max(0.0, (now - oldest).total_seconds())
    return QueueDepths(
        due_starts=due,
        due_oldest_seconds=0.0 if earliest is None else max(0.0, (now - earliest).total_seconds()),
        pending_runs=counts,
        pending_oldest_seconds=ages,
    )
