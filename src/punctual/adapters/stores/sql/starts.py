"""Scheduled starts: insert, read, compare-and-set, and the runner's claims."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import claimable, for_update, notify
from punctual.adapters.stores.sql.listener import DUE_CHANNEL
from punctual.adapters.stores.sql.rows import last_error_to_json, start_from_row
from punctual.domain.starts import LastError, ScheduledStart, StartState
from punctual.ports.records import ClaimedStart, EncryptedInput, NewStart, StartFilter

_s = t.starts.c
_PENDING = (StartState.SCHEDULED.value, StartState.DISPATCHING.value)


class SqlStarts:
    def __init__(self, conn: sa.Connection) -> None:
        self._conn = conn

    def insert(self, new: NewStart, now: datetime) -> ScheduledStart:
        values = {
            "id": new.id,
            "tenant": new.tenant,
            "workflow": new.workflow,
            "business_request_id": new.business_request_id,
            "start_at": new.start_at,
            "time_zone": new.time_zone,
            "workload_class": new.workload_class,
            "attributes": new.attributes,
            "traceparent": new.traceparent,
            "input": new.input.ciphertext,
            "input_key_id": new.input.key_id,
            "state": StartState.SCHEDULED.value,
            "version": 1,
            "attempts": 0,
            "due_at": new.start_at,
            "created_by": new.created_by,
            "created_at": now,
            "updated_at": now,
            "run_id": new.run_id,
        }
        self._conn.execute(sa.insert(t.starts).values(**values))
        row = {**values, "next_attempt_at": None, "last_error": None, "dispatched_at": None}
        row.update(reason=None)
        row.update(definition_version=None, artifact=None)
        return start_from_row(row)  # type: ignore[arg-type]

    def notify_due(self) -> None:
        notify(self._conn, DUE_CHANNEL)

    def get(self, tenant: str, start_id: str, *, lock: bool = False) -> ScheduledStart | None:
        query = sa.select(t.starts).where(_s.tenant == tenant, _s.id == start_id)
        if lock:
            query = for_update(query, self._conn)
        row = self._conn.execute(query).mappings().first()
        return start_from_row(row) if row else None

    def find(
        self, tenant: str, where: StartFilter, after_seq: int, limit: int
    ) -> list[tuple[int, ScheduledStart]]:
        query = sa.select(t.starts).where(_s.tenant == tenant, _s.seq > after_seq)
        if where.state:
            query = query.where(_s.state == where.state)
        if where.workflow:
            query = query.where(_s.workflow == where.workflow)
        if where.business_request_id:
            query = query.where(_s.business_request_id == where.business_request_id)
        query = query.order_by(_s.seq).limit(limit)
        return [(r["seq"], start_from_row(r)) for r in self._conn.execute(query).mappings()]

    def count_pending(self, tenant: str, workload_class: str | None = None) -> int:
        query = sa.select(sa.func.count()).where(_s.tenant == tenant, _s.state.in_(_PENDING))
        if workload_class is not None:
            query = query.where(_s.workload_class == workload_class)
        return int(self._conn.execute(query).scalar_one())

    def count_in_state(self, tenant: str, state: StartState) -> int:
        query = sa.select(sa.func.count()).where(_s.tenant == tenant, _s.state == state.value)
        return int(self._conn.execute(query).scalar_one())

    def stalled(self, tenant: str, lease_expired_before: datetime, limit: int) -> list[str]:
        """Starts still claimed although their lease ran out: no runner is recovering them."""
        query = (
            sa.select(_s.id)
            .where(
                _s.tenant == tenant,
                _s.state == StartState.DISPATCHING.value,
                _s.lease_until < lease_expired_before,
            )
            .order_by(_s.due_at)
            .limit(limit)
        )
        return list(self._conn.execute(query).scalars())

    def count_pending_of_workflow(self, workflow: str) -> int:
        query = sa.select(sa.func.count()).where(_s.workflow == workflow, _s.state.in_(_PENDING))
        return int(self._conn.execute(query).scalar_one())

    def compare_and_set(
        self, start_id: str, expected_version: int, now: datetime, **changes: Any
    ) -> bool:
        """Apply ``changes`` and bump the version iff the start is still at ``expected_version``.

        This is the arbiter of OS-7: dispatch, reschedule and cancel all go through it, so
        exactly one of them owns each version.
        """
        if "last_error" in changes and isinstance(changes["last_error"], LastError):
            changes["last_error"] = last_error_to_json(changes["last_error"])
        result = self._conn.execute(
            sa.update(t.starts)
            .where(_s.id == start_id, _s.version == expected_version)
            .values(version=_s.version + 1, updated_at=now, **changes)
        )
        return result.rowcount == 1

    def claim_due(
        self, now: datetime, limit: int, runner_id: str, lease_until: datetime
    ) -> list[ClaimedStart]:
        """Claim up to ``limit`` due starts, oldest first, and those whose lease expired.

        A claim is itself a versioned transition (scheduled -> dispatching), so a
        reschedule or cancel racing it loses cleanly with a conflict.
        """
        due = (
            sa.select(_s.id)
            .where(
                _s.state.in_(_PENDING),
                _s.due_at <= now,
                sa.or_(_s.state == StartState.SCHEDULED.value, _s.lease_until < now),
            )
            .order_by(_s.due_at)
            .limit(limit)
        )
        claimed = self._conn.execute(
            sa.update(t.starts)
            .where(_s.id.in_(claimable(due, self._conn)))
            .values(
                state=StartState.DISPATCHING.value,
                claimed_by=runner_id,
                lease_until=lease_until,
                version=_s.version + 1,
                updated_at=now,
            )
            .returning(
                _s.id,
                _s.tenant,
                _s.workflow,
                _s.workload_class,
                _s.traceparent,
                _s.input,
                _s.input_key_id,
                _s.created_by,
                _s.run_id,
                _s.version,
                _s.attempts,
            )
        )
        return [
            ClaimedStart(
                id=r["id"],
                tenant=r["tenant"],
                workflow=r["workflow"],
                workload_class=r["workload_class"],
                traceparent=r["traceparent"],
                input=EncryptedInput(r["input_key_id"], r["input"]),
                created_by=r["created_by"],
                run_id=r["run_id"],
                version=r["version"],
                attempts=r["attempts"],
                origin={"source": "scheduled_start", "id": r["id"]},
            )
            for r in claimed.mappings()
        ]

    def earliest_due(self) -> datetime | None:
        """When the next pending start comes due (a lease expiry counts as due)."""
        query = sa.select(sa.func.min(_s.due_at)).where(_s.state == StartState.SCHEDULED.value)
        scheduled: datetime | None = self._conn.execute(query).scalar_one_or_none()
        query = sa.select(sa.func.min(_s.lease_until)).where(
            _s.state == StartState.DISPATCHING.value
        )
        lease: datetime | None = self._conn.execute(query).scalar_one_or_none()
        candidates = [c for c in (scheduled, lease) if c is not None]
        return min(candidates) if candidates else None
