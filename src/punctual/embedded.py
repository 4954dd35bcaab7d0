"""The in-process Python API (IF-2): schedule and inspect starts without HTTP.

It runs the very use cases the HTTP API runs, under the same idempotency mechanism,
as one principal of one tenant::

    from datetime import datetime, timedelta
    from punctual.embedded import Scheduler

    with Scheduler.open("sqlite:///punctual.db", tenant="default", subject="billing") as s:
        start = s.schedule_at(
            "echo", {"message": "hi"}, datetime.fromisoformat("2026-12-01T07:00:00+01:00"),
            business_request_id="invoice-42", time_zone="Europe/Berlin",
        )
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from punctual import bootstrap
from punctual.domain.permissions import Principal, Role
from punctual.errors import PunctualError
from punctual.ports.store import Tx
from punctual.settings import load_settings
from punctual.usecases.kernel.idempotency import IdempotentRequest, Mutation, Outcome, RecordedError
from punctual.usecases.recurring import missed_runs, schedule_controls, schedule_fields, schedules
from punctual.usecases.running import runs
from punctual.usecases.scheduled import starts
from punctual.usecases.tenancy import health, identity


class Scheduler(AbstractContextManager["Scheduler"]):
    """One principal's handle on an assembled punctual (store, runner and workers optional)."""

    def __init__(self, system: bootstrap.Punctual, tenant: str, subject: str, role: Role) -> None:
        self.system = system
        self.principal = Principal(tenant=tenant, subject=subject, role=role)
        now = system.services.clock.now()
        with system.store.transaction() as tx:
            tx.identity.ensure_tenant(tenant, now)
            if tx.identity.member_role(tenant, subject) is None:
                tx.identity.upsert_member(tenant, subject, role, now)

    @classmethod
    def open(
        cls,
        database_url: str = "sqlite:///punctual.db",
        *,
        config: str | Path | None = None,
        tenant: str = "default",
        subject: str = "python",
        role: Role = Role.ADMIN,
        **settings: Any,
    ) -> Scheduler:
        loaded = load_settings(config, database_url=database_url, **settings)
        return cls(bootstrap.build(loaded), tenant, subject, role)

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.system.close()

    def run_in_background(self, app_ref: str | None = "punctual.demo:app") -> None:
        """Start the runner (and a worker for ``app_ref``) in this process."""
        if app_ref is not None:
            self.system.start_worker(app_ref)
        self.system.start_runner()

    def _mutate(
        self, mutation: Mutation, idempotency_key: str | None = None, fingerprint: str = ""
    ) -> dict[str, Any]:
        """The mutation's answer, run once per ``idempotency_key`` (``fingerprint`` tells a
        retry from another request under the same key)."""
        request = None
        if idempotency_key is not None:
            digest = hashlib.sha256(fingerprint.encode()).hexdigest()
            request = IdempotentRequest(
                self.principal.tenant, self.principal.subject, idempotency_key, digest
            )
        try:
            answer: dict[str, Any] = self.system.mutations.run(request, mutation).body
        except RecordedError as recorded:
            # A replayed decision comes back as the error it was, with its stable code.
            error = recorded.body.get("error", {}) if isinstance(recorded.body, dict) else {}
            raise PunctualError(
                str(error.get("message", "recorded error")),
                code=str(error.get("code", "error")),
                **dict(error.get("details") or {}),
            ) from None
        return answer

    def schedule_at(
        self,
        workflow: str,
        input: Any,
        at: datetime,
        *,
        business_request_id: str,
        workload_class: str = "standard",
        time_zone: str | None = None,
        attributes: Mapping[str, str] | None = None,
        traceparent: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Start ``workflow`` once at ``at`` (which must carry a UTC offset)."""
        command = starts.CreateStart(
            workflow=workflow,
            input=input,
            business_request_id=business_request_id,
            start_at=at,
            workload_class=workload_class,
            time_zone=time_zone,
            attributes=dict(attributes or {}),
            traceparent=traceparent,
        )
        mutation = starts.create(self.system.services, self.principal, command)
        return self._mutate(mutation, idempotency_key, repr(command))

    def get_start(self, start_id: str) -> dict[str, Any]:
        return starts.get(self.system.services, self.principal, start_id)

    def list_starts(self, **filters: Any) -> dict[str, Any]:
        """A page of one-off starts, newest first: ``state``, ``workflow``,
        ``business_request_id``, ``limit``, ``cursor``, ``order`` (``"oldest"``) as
        ``starts.ListStarts`` takes them."""
        return starts.list_starts(
            self.system.services, self.principal, starts.ListStarts(**filters)
        )

    def reschedule_start(
        self,
        start_id: str,
        version: int,
        at: datetime,
        *,
        time_zone: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        command = starts.RescheduleStart(start_id, version, at, time_zone)
        mutation = starts.reschedule(self.system.services, self.principal, command)
        return self._mutate(mutation, idempotency_key, repr(command))

    def cancel_start(
        self,
        start_id: str,
        version: int,
        *,
        reason: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        command = starts.CancelStart(start_id, version, reason)
        mutation = starts.cancel(self.system.services, self.principal, command)
        return self._mutate(mutation, idempotency_key, repr(command))

    def _create_schedule(
        self,
        idempotency_key: str | None,
        name: str,
        workflow: str,
        input: Any,
        spec: dict[str, Any],
        overlap: str,
        missed: str,
        workload_class: str,
        options: dict[str, Any],
    ) -> dict[str, Any]:
        body = {
            "name": name,
            "workflow": workflow,
            "input": input,
            "spec": spec,
            "overlap": overlap,
            "missed": missed,
            "workload_class": workload_class,
            **options,
        }
        services, principal = self.system.services, self.principal

        def mutation(tx: Tx, now: datetime) -> Outcome:
            # Decoded inside the mutation, as at the HTTP edge: a refusal is recorded
            # under the key like any other answer.
            command = schedule_fields.decode_create(body)
            return schedules.create(services, principal, command)(tx, now)

        fingerprint = repr(sorted(body.items(), key=lambda item: item[0]))
        return self._mutate(mutation, idempotency_key, fingerprint)

    def schedule_every(
        self,
        workflow: str,
        input: Any,
        interval: timedelta,
        *,
        name: str,
        overlap: str,
        missed: str,
        starts_at: datetime | None = None,
        workload_class: str = "standard",
        idempotency_key: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """A recurring schedule every ``interval`` of elapsed time (RS-1); the overlap and
        missed policies have no default (behaviour after downtime is a choice)."""
        spec: dict[str, Any] = {"interval_ms": interval // timedelta(milliseconds=1)}
        if starts_at is not None:
            spec["starts_at"] = starts_at
        return self._create_schedule(
            idempotency_key, name, workflow, input, spec, overlap, missed, workload_class, options
        )

    def schedule_cron(
        self,
        workflow: str,
        input: Any,
        cron: str,
        *,
        name: str,
        overlap: str,
        missed: str,
        time_zone: str = "UTC",
        dst_gap: str | None = None,
        dst_overlap: str | None = None,
        workload_class: str = "standard",
        idempotency_key: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """A recurring schedule on a five-field cron expression in ``time_zone`` (RS-1, RS-2)."""
        spec: dict[str, Any] = {"cron": cron, "time_zone": time_zone}
        spec.update({k: v for k, v in (("dst_gap", dst_gap), ("dst_overlap", dst_overlap)) if v})
        return self._create_schedule(
            idempotency_key, name, workflow, input, spec, overlap, missed, workload_class, options
        )

    def get_schedule(self, schedule_id: str) -> dict[str, Any]:
        return schedules.get(self.system.services, self.principal, schedule_id)

    def list_schedules(
        self,
        limit: int = 50,
        cursor: str | None = None,
        *,
        source: str | None = None,
        order: str | None = None,
    ) -> dict[str, Any]:
        """A page of live schedules, newest first unless ``order="oldest"``."""
        return schedules.list_schedules(
            self.system.services, self.principal, limit, cursor, source, order
        )

    def list_occurrences(self, schedule_id: str, **filters: Any) -> dict[str, Any]:
        """A page of the schedule's occurrences, newest first: ``state``, ``origin``,
        ``start`` and ``end`` (``[start, end)``), ``limit``, ``cursor``, ``order`` as
        ``schedules.ListOccurrences`` takes them."""
        query = schedules.ListOccurrences(schedule_id, **filters)
        return schedules.list_occurrences(self.system.services, self.principal, query)

    def pause(self, schedule_id: str, version: int) -> dict[str, Any]:
        mutation = schedules.set_enabled(
            self.system.services, self.principal, schedule_id, version, False
        )
        return self._mutate(mutation)

    def resume(self, schedule_id: str, version: int) -> dict[str, Any]:
        mutation = schedules.set_enabled(
            self.system.services, self.principal, schedule_id, version, True
        )
        return self._mutate(mutation)

    def trigger(
        self, schedule_id: str, overlap: str | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """One occurrence now (RS-9a); with a key, a repeated call returns the same one."""
        mutation = schedule_controls.trigger(
            self.system.services,
            self.principal,
            schedule_controls.TriggerSchedule(schedule_id, overlap),
        )
        return self._mutate(mutation, idempotency_key, f"trigger:{schedule_id}:{overlap}")

    def backfill(
        self,
        schedule_id: str,
        after: datetime | str,
        to: datetime | str,
        overlap: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """The fire times in ``(after, to]`` that have no live or finished occurrence yet
        (RS-9b); ``{"generated", "existing", "items"}``."""
        mutation = schedule_controls.backfill(
            self.system.services,
            self.principal,
            schedule_controls.BackfillSchedule(schedule_id, after, to, overlap),
        )
        return self._mutate(
            mutation, idempotency_key, f"backfill:{schedule_id}:{after}:{to}:{overlap}"
        )

    def audit_schedule(self, schedule_id: str, start: datetime, end: datetime) -> dict[str, Any]:
        """Every instant the schedule's specs yielded in ``[start, end)``, and what became
        of it (RS-10)."""
        command = missed_runs.AuditSchedule(schedule_id, start, end)
        return missed_runs.audit_schedule(self.system.services, self.principal, command)

    def get_schedule_by_name(self, name: str) -> dict[str, Any]:
        return schedule_controls.get_by_name(self.system.services, self.principal, name)

    def plan_schedule_by_name(self, name: str, **fields: Any) -> dict[str, Any]:
        """What ``put_schedule_by_name`` would do, storing nothing (RS-9e's dry run)."""
        cmd = schedule_fields.decode_upsert(name, fields)
        return schedule_controls.plan_by_name(self.system.services, self.principal, cmd)

    def put_schedule_by_name(
        self, name: str, version: int | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Create the schedule, or update it to ``fields`` (RS-9e)."""
        cmd = schedule_fields.decode_upsert(name, fields, version)
        mutation = schedule_controls.upsert_by_name(self.system.services, self.principal, cmd)
        return self._mutate(mutation)

    def get_run(self, run_id: str) -> dict[str, Any]:
        return runs.get(self.system.services, self.principal, run_id)

    def list_runs(self, **filters: Any) -> dict[str, Any]:
        """A page of runs, newest first: ``workflow``, ``state``, ``schedule_id``,
        ``origin``, ``origin_id``, ``limit``, ``cursor``, ``order`` as ``runs.ListRuns``
        takes them."""
        return runs.list_runs(self.system.services, self.principal, runs.ListRuns(**filters))

    def cancel_run(self, run_id: str) -> dict[str, Any]:
        return self._mutate(runs.cancel(self.system.services, self.principal, run_id))

    def terminate_run(self, run_id: str) -> dict[str, Any]:
        return self._mutate(runs.terminate(self.system.services, self.principal, run_id))

    def health_report(self) -> dict[str, Any]:
        return health.report(self.system.services, self.principal)

    def issue_token(self, subject: str, role: Role) -> str:
        """A bearer token for the HTTP API, for a member of this scheduler's tenant."""
        return identity.ensure_member_token(
            self.system.services, self.principal.tenant, subject, role
        ).token
