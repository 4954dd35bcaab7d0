"""The health report (DP-4): what is failed, stuck or down, per tenant."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from punctual.domain.calendars import holidays_version
from punctual.domain.permissions import Action, Principal, require
from punctual.domain.recurrence import tzdata_version
from punctual.domain.starts import StartState
from punctual.errors import not_found
from punctual.ports.records import Finding, Order, Seek, StartFilter, WorkerRecord
from punctual.ports.store import Tx
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import Answer, Mutation, Outcome
from punctual.usecases.kernel.projections import finding_view, record_view, start_view

HOST = "*"
"""The tenant of host-wide findings (an engine outage), shown in every tenant's report."""
ARTIFACT_MISMATCH = "artifact_mismatch"
"""The host-wide finding of a worker whose code for a version is not the registered code
(OP-3); its subject is the worker, and it is shown, and degrades, while that worker lives."""
FAILED_LIST_LIMIT = 100
FINDING_LIST_LIMIT = 200
"""Findings shown per report; the status counts every open one (the list is a window)."""
SCHEDULE_LIST_LIMIT = 1000
_NO_COUNTS = {"skipped_count": 0, "missed_count": 0, "failed_count": 0}
STALL_GRACE = timedelta(seconds=60)


def host_finding_ids(services: Services) -> set[str]:
    """The ids of the current host-wide findings (an engine outage): they appear in every
    tenant's report, but no tenant acknowledges them."""
    with services.store.transaction(readonly=True) as tx:
        return {f.id for f in tx.findings.latest(HOST, FINDING_LIST_LIMIT)}


def store_ready(services: Services) -> None:
    """Reach the store with one read (the readiness probe); raises whatever reaching it
    raised."""
    with services.store.transaction(readonly=True) as tx:
        tx.identity.tenant_exists("default")


def report(services: Services, principal: Principal) -> dict[str, Any]:
    now = services.clock.now()
    engine_up = services.engine.available()
    since = now - timedelta(seconds=services.policy.worker_liveness_seconds)
    with services.store.transaction(readonly=True) as tx:
        findings = tx.findings.latest(HOST, FINDING_LIST_LIMIT) + tx.findings.latest(
            principal.tenant, FINDING_LIST_LIMIT
        )
        open_failures = tx.findings.count_open(HOST, "error") + tx.findings.count_open(
            principal.tenant, "error"
        )
        failed_count = tx.starts.count_in_state(principal.tenant, StartState.FAILED)
        failed = tx.starts.find(
            principal.tenant, StartFilter(state=StartState.FAILED.value), Seek(FAILED_LIST_LIMIT)
        )
        stalled = tx.starts.stalled(
            principal.tenant, STALL_GRACE.total_seconds(), now, FAILED_LIST_LIMIT
        )
        workers = tx.definitions.live_workers(since)
        counts = tx.starts.occurrence_counts(principal.tenant)
        live = tx.schedules.find(principal.tenant, Seek(SCHEDULE_LIST_LIMIT, order=Order.OLDEST))
    findings = current(findings, workers)
    open_failures += drifting(findings)
    outage = any(f.kind == "engine_unavailable" for f in findings)
    engine_up = engine_up and not outage
    degraded = bool(open_failures) or not engine_up or bool(stalled)
    return {
        "status": "degraded" if degraded else "ok",
        "findings": [finding_view(f) for f in findings],
        "open_findings_count": open_failures,
        "starts": {
            "failed_count": failed_count,
            "failed": [start_view(start) for _, start in failed],
            "stalled_count": len(stalled),
            "stalled": stalled,
        },
        "schedules": [
            {
                "id": schedule.id,
                "name": schedule.name,
                "enabled": schedule.enabled,
                "last_status": schedule.last_status,
                **counts.get(schedule.id, _NO_COUNTS),
            }
            for _, schedule in live
        ],
        "engine": {"name": services.engine.name, "available": engine_up},
        "workers": [worker_view(w) for w in workers],
        "tzdata_version": tzdata_version(),
        "holidays_version": holidays_version(),
    }


def current(findings: list[Finding], workers: list[WorkerRecord]) -> list[Finding]:
    """The findings without the ``artifact_mismatch`` of workers no longer live: a worker
    killed without stopping leaves its row until the reaper forgets the worker."""
    live = {worker.id for worker in workers}
    return [f for f in findings if f.kind != ARTIFACT_MISMATCH or f.subject_id in live]


def drifting(findings: list[Finding]) -> int:
    """Live workers with drifted code: each is an open failure until it stops (OP-2)."""
    return sum(1 for f in findings if f.kind == ARTIFACT_MISMATCH)


def worker_view(worker: WorkerRecord) -> dict[str, Any]:
    """A worker as the health report lists it, each loaded version as a named triple."""
    view = record_view(worker, hidden=("started_at", "stopped_at"))
    view["loaded"] = [{"workflow": n, "version": v, "artifact": a} for n, v, a in worker.loaded]
    return view


ORPHANED_SCHEDULE = "orphaned_schedule"
"""The finding of a schedule whose firing driver and record disagree (SPEC CR-6)."""


def host_report(services: Services) -> dict[str, Any]:
    """Host-wide health for the host's operators (``GET /internal/health``): every tenant's
    status by the rule of its own report, the live workers, the engine, and the open
    ``orphaned_schedule`` findings of every tenant. Counts per tenant, not lists: the
    tenant's own report has the details."""
    now = services.clock.now()
    engine_up = services.engine.available()
    since = now - timedelta(seconds=services.policy.worker_liveness_seconds)
    tenants: list[dict[str, Any]] = []
    orphans: list[dict[str, Any]] = []
    with services.store.transaction(readonly=True) as tx:
        workers = tx.definitions.live_workers(since)
        host_findings = current(tx.findings.latest(HOST, FINDING_LIST_LIMIT), workers)
        engine_up = engine_up and not any(f.kind == "engine_unavailable" for f in host_findings)
        host_failures = tx.findings.count_open(HOST, "error") + drifting(host_findings)
        for tenant in tx.retention.tenants():
            failures = host_failures + tx.findings.count_open(tenant, "error")
            stalled = tx.starts.stalled(tenant, STALL_GRACE.total_seconds(), now, FAILED_LIST_LIMIT)
            degraded = bool(failures) or not engine_up or bool(stalled)
            tenants.append(
                {
                    "tenant": tenant,
                    "status": "degraded" if degraded else "ok",
                    "open_findings_count": failures,
                    "failed_starts_count": tx.starts.count_in_state(tenant, StartState.FAILED),
                    "stalled_count": len(stalled),
                }
            )
            orphans += [
                {"tenant": tenant, **finding_view(f)}
                for f in tx.findings.latest(tenant, FINDING_LIST_LIMIT)
                if f.kind == ORPHANED_SCHEDULE and f.acknowledged_at is None
            ]
    degraded = (
        not engine_up
        or bool(orphans)
        or bool(drifting(host_findings))
        or any(t["status"] == "degraded" for t in tenants)
    )
    return {
        "status": "degraded" if degraded else "ok",
        "tenants": tenants,
        "engine": {"name": services.engine.name, "available": engine_up},
        "workers": [worker_view(w) for w in workers],
        "orphans": orphans,
        "tzdata_version": tzdata_version(),
        "holidays_version": holidays_version(),
    }


def acknowledge(services: Services, principal: Principal, finding_id: str) -> Mutation:
    del services

    def mutation(tx: Tx, now: datetime) -> Outcome:
        if tx.findings.get(principal.tenant, finding_id) is None:
            raise not_found("finding", finding_id)
        require(principal, Action.OPERATE)
        finding = tx.findings.acknowledge(principal.tenant, finding_id, principal.subject, now)
        assert finding is not None
        return Outcome(Answer.DONE, finding_view(finding), resource_id=finding_id)

    return mutation
