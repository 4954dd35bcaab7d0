"""Retention (RT-1): sweep what expired, in bounded batches, and say what a sweep would take.

A sweep walks every tenant with that tenant's window and removes, kind after kind
(``domain.retention.SWEEP_ORDER``), batches of at most ``batch_size`` records, each batch
its own short transaction: dispatch, which never waits for a sweep's locks (they are
taken with ``SKIP LOCKED``), interleaves with it. The store decides row by row what may
go (the ``Retention`` port's specification); this module only drives it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from punctual.domain.retention import SWEEP_ORDER, RecordKind, RetentionWindow, window_for
from punctual.ports.events import Event
from punctual.usecases.kernel.context import Services

log = logging.getLogger("punctual.retention")

SWEEP_LOCK_TIMEOUT_SECONDS = 5.0
"""A batch that waits longer than this for a lock gives up; the next sweep retries."""


@dataclass(frozen=True)
class RetentionPolicy:
    """The host's retention settings (``[retention]``, ``[tenants.NAME]``)."""

    keep_seconds: float = 2_592_000.0
    tenant_keep_seconds: Mapping[str, float] = field(default_factory=dict)
    audit_keep_seconds: float = 31_536_000.0
    batch_size: int = 500

    def keep_for(self, tenant: str) -> float:
        return self.tenant_keep_seconds.get(tenant, self.keep_seconds)

    def window(self, tenant: str, now: datetime) -> RetentionWindow:
        return window_for(tenant, now, self.keep_for(tenant), self.audit_keep_seconds)


@dataclass
class SweepReport:
    removed: Counter[RecordKind] = field(default_factory=Counter)
    batches: int = 0
    tenants: int = 0
    complete: bool = True
    """False when the sweep stopped early (asked to); the next one carries on."""

    def as_dict(self) -> dict[str, int]:
        return {kind.value: self.removed[kind] for kind in RecordKind}


Pause = Callable[[], bool]
"""Called between batches; returns False to stop the sweep there."""


def _keep_going() -> bool:
    return True


def sweep(
    services: Services,
    policy: RetentionPolicy,
    now: datetime | None = None,
    *,
    pause: Pause = _keep_going,
) -> SweepReport:
    """Remove everything expired at ``now`` (default: the clock's now), tenant by tenant
    and kind by kind; emits ``retention.swept`` per tenant and kind that lost records."""
    at = now if now is not None else services.clock.now()
    report = SweepReport()
    with services.store.transaction(readonly=True) as tx:
        tenants = tx.retention.tenants()
    for tenant in tenants:
        report.tenants += 1
        window = policy.window(tenant, at)
        removed: Counter[RecordKind] = Counter()
        try:
            for kind in SWEEP_ORDER:
                if not _sweep_kind(
                    services, kind, window, policy.batch_size, removed, report, pause
                ):
                    report.complete = False
                    return report
        finally:
            report.removed.update(removed)
            _emit(services, tenant, removed)
    return report


def _sweep_kind(
    services: Services,
    kind: RecordKind,
    window: RetentionWindow,
    batch_size: int,
    removed: Counter[RecordKind],
    report: SweepReport,
    pause: Pause,
) -> bool:
    """Batches of ``kind`` until one comes back short; False if told to stop."""
    while True:
        with services.store.transaction(lock_timeout=SWEEP_LOCK_TIMEOUT_SECONDS) as tx:
            batch = tx.retention.remove(kind, window, batch_size)
        report.batches += 1
        removed.update({k: n for k, n in batch.items() if n})
        if batch.get(kind, 0) < batch_size:
            return True
        if not pause():  # more to come: let other writers in first
            return False


def _emit(services: Services, tenant: str, removed: Counter[RecordKind]) -> None:
    for kind, count in sorted(removed.items()):
        if count:
            services.events.emit(
                Event("retention.swept", tenant, kind.value, {"kind": kind.value, "removed": count})
            )


def plan(
    services: Services,
    policy: RetentionPolicy,
    tenant: str | None = None,
    now: datetime | None = None,
) -> dict[str, dict[str, int]]:
    """The dry run: per tenant, how many records of each kind a sweep at ``now`` would
    remove, removing nothing. Each kind is counted as the store stands: what a sweep frees
    on its way (the keys of the starts it removes, a deleted schedule whose last
    occurrences it removes) shows in the plan after it."""
    at = now if now is not None else services.clock.now()
    result: dict[str, dict[str, int]] = {}
    with services.store.transaction(readonly=True) as tx:
        tenants = [tenant] if tenant is not None else tx.retention.tenants()
        for name in tenants:
            window = policy.window(name, at)
            counts: Counter[RecordKind] = Counter()
            for kind in SWEEP_ORDER:
                counts.update(tx.retention.count(kind, window))
            result[name] = {kind.value: counts[kind] for kind in RecordKind}
    return result
