"""What the schedule benchmarks share: bulk-inserted interval schedules and SQL helpers.

Schedules are inserted in bulk (one multi-row ``INSERT`` per 1,000) through the store's
own table definition and the same column mapping ``SqlSchedules.insert`` uses
(``spec_to_json``, ``policy_columns``), with each input encrypted by the codec of a built
punctual, as ``schedules.create`` stores it. Creating them through
``punctual.embedded.Scheduler.schedule_every`` is correct too but costs about 9 ms each
(idempotency record, quota count, name check: ~10 s per 1,000), and it cannot put a
cursor in the past, which the catch-up benchmark needs. ``verify_schedules`` reads every
inserted schedule back through the store port, so a mapping mistake fails loudly.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from bench.common import TENANT, Target, load_average, psycopg_url

CREATED_BY = "admin"
"""The member ``punctual serve`` bootstraps in tenant ``default`` (runs are started by it)."""
INSERT_CHUNK = 1000


@dataclass(frozen=True)
class IntervalSchedules:
    """``count`` schedules every ``interval_ms``, their first fires spread evenly over one
    interval from ``first_fire`` (schedule i first fires at ``first_fire + i * interval /
    count``), or all at ``first_fire`` when ``spread`` is False."""

    count: int
    interval_ms: int
    first_fire: datetime
    cursor: datetime
    """Where each schedule's generation cursor starts (``now`` for a new schedule; in the
    past for one that is behind)."""
    spread: bool = True
    """False: every schedule fires on the same instants (a burst each interval)."""
    overlap: str = "allow_all"
    missed: str = "catch_up"
    max_catch_up: int = 10
    name_prefix: str = "bench"
    workflow: str = "echo"
    workload_class: str = "standard"


def insert_schedules(system: Any, plan: IntervalSchedules) -> float:
    """Insert the schedules; returns the seconds it took."""
    import sqlalchemy as sa

    from punctual.adapters.stores.sql import tables
    from punctual.adapters.stores.sql.schedules import policy_columns
    from punctual.domain.ids import new_id
    from punctual.domain.recurrence import IntervalSpec
    from punctual.domain.schedules import (
        MissedPolicy,
        OverlapPolicy,
        SchedulePolicy,
        first_fire_after,
        spec_to_json,
    )

    began = time.monotonic()
    codec = system.services.codec
    policy = policy_columns(
        SchedulePolicy(
            overlap=OverlapPolicy(plan.overlap),
            missed=MissedPolicy(plan.missed),
            max_catch_up=plan.max_catch_up,
        )
    )
    now = system.services.clock.now()
    step = timedelta(milliseconds=plan.interval_ms) / plan.count if plan.spread else timedelta(0)
    rows: list[dict[str, Any]] = []
    for i in range(plan.count):
        spec = IntervalSpec(plan.interval_ms, plan.first_fire + step * i)
        fire = first_fire_after(spec, plan.cursor)
        sealed = codec.encrypt({"message": f"{plan.name_prefix} {i}"}, TENANT)
        rows.append(
            {
                "id": new_id("sch"),
                "tenant": TENANT,
                "name": f"{plan.name_prefix}-{i:06d}",
                "workflow": plan.workflow,
                "input": sealed.ciphertext,
                "input_key_id": sealed.key_id,
                "spec": spec_to_json(spec),
                **policy,
                "enabled": True,
                "version": 1,
                "revision": 1,
                "version_policy": "active_at_fire",
                "pinned_version": None,
                "workload_class": plan.workload_class,
                "regression": None,
                "created_by": CREATED_BY,
                "cursor": plan.cursor,
                "next_fire_at": fire.at if fire is not None else None,
                "created_at": now,
                "updated_at": now,
            }
        )
    engine: sa.Engine = system.store.engine
    with engine.begin() as conn:
        for first in range(0, len(rows), INSERT_CHUNK):
            conn.execute(sa.insert(tables.schedules), rows[first : first + INSERT_CHUNK])
    with psycopg.connect(psycopg_url(system.settings.database_url), autocommit=True) as conn:
        conn.execute("ANALYZE schedules")
    return time.monotonic() - began


def verify_schedules(system: Any, plan: IntervalSchedules) -> None:
    """Read every schedule back through the store port (spec, policy, cursor parse)."""
    from punctual.ports.records import Order, Seek

    seen, after = 0, None
    with system.services.store.transaction(readonly=True) as tx:
        while True:
            page = tx.schedules.find(TENANT, Seek(1000, after, Order.OLDEST))
            if not page:
                break
            for seq, schedule in page:
                assert schedule.policy.missed.value == plan.missed, schedule
                assert schedule.spec.interval_ms == plan.interval_ms, schedule
                assert schedule.cursor == plan.cursor, schedule
                seen += 1
                after = seq
    if seen != plan.count:
        raise AssertionError(f"inserted {plan.count} schedules, read back {seen}")
    # One input decrypts to what was sealed (the codec's associated data is the tenant).
    with system.services.store.transaction(readonly=True) as tx:
        first = tx.schedules.find(TENANT, Seek(1, order=Order.OLDEST))[0][1]
        sealed = tx.schedules.input_of(first.id)
    payload = system.services.codec.decrypt(sealed, TENANT)
    assert payload == {"message": f"{plan.name_prefix} 0"}, payload


def wait_for_quiet(max_load: float, timeout: float) -> None:
    """Wait (up to ``timeout`` s) until the 1-minute load average is at most ``max_load``.

    Other people's work on a small machine starves the processes under test; this does
    not make the figures clean, it only avoids starting a run in the middle of a storm.
    """
    if max_load <= 0:
        return
    deadline = time.monotonic() + timeout
    said = False
    while os.getloadavg()[0] > max_load and time.monotonic() < deadline:
        if not said:
            print(
                f"     waiting for the load average to drop to {max_load} "
                f"(now {load_average()}; at most {timeout:.0f} s)",
                flush=True,
            )
            said = True
        time.sleep(5)
    if said:
        print(f"     load average now {load_average()}", flush=True)


def scalar(target: Target, sql: str, params: Any = None) -> Any:
    with psycopg.connect(psycopg_url(target.url), autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
        return row[0] if row else None


def rows(target: Target, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(psycopg_url(target.url), autocommit=True) as conn:
        return list(conn.execute(sql, params).fetchall())
