"""A schedule create killed between its two steps, under the Temporal Schedules driver (CR-6).

The create saga stores the record, then ensures the Temporal Schedule. The API process is
killed (SIGKILL, ``PUNCTUAL_CRASH_AT=after_create_stored``) right after the record
committed: the record is left ``creating`` with no Temporal Schedule and no answer was
given. Reconciliation leaves it alone while a saga could still be running, then settles it:
the record is removed, Temporal holds nothing, and the name is free again.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.settings import load_settings
from punctual.usecases.firing.reconcile import reconcile
from punctual.usecases.tenancy import identity
from tests.e2e.harness import DEMO_APP, Managed, free_port, fresh_database, wait_for
from tests.e2e.temporal_harness import RestartableTemporal, TemporalProcesses
from tests.support.api import register_demo
from tests.support.temporal import NAMESPACE

pytestmark = [pytest.mark.e2e, pytest.mark.temporal, pytest.mark.postgres]

KILLED = -9
API_LISTENING = re.compile(r"Uvicorn running on \S+:(\d+)")
BODY = {
    "workflow": "echo",
    "input": {"message": "nightly"},
    "spec": {"cron": "30 2 * * 1-5", "time_zone": "America/New_York"},
    "overlap": "skip",
    "missed": "skip",
}


class DriverProcesses(TemporalProcesses):
    """Punctual processes firing schedules through Temporal Schedules."""

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = super().env(crash_at)
        env["PUNCTUAL_DRIVER"] = "temporal_schedules"
        return env


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[RestartableTemporal, DriverProcesses]]:
    with (
        RestartableTemporal(tmp_path / "temporal") as temporal,
        fresh_database(tmp_path) as url,
    ):
        procs = DriverProcesses(tmp_path, url, temporal.address)
        with procs:
            procs.extras.append(temporal.log_tail)
            yield temporal, procs


def in_process(procs: DriverProcesses) -> bootstrap.Punctual:
    settings = load_settings(
        None,
        database_url=procs.database_url,
        codec={"key_file": str(procs.key_file)},
        engine="temporal",
        driver="temporal_schedules",
        temporal={"address": procs.address, "namespace": NAMESPACE},
    )
    return bootstrap.build(settings)


def temporal_has(address: str, schedule_id: str) -> bool:
    async def describe() -> bool:
        client = await Client.connect(address, namespace=NAMESPACE)
        try:
            await client.get_schedule_handle(schedule_id).describe()
        except RPCError:
            return False
        return True

    return asyncio.run(describe())


def test_an_api_killed_between_store_and_ensure_is_settled_by_reconcile(
    stack: tuple[RestartableTemporal, DriverProcesses],
) -> None:
    temporal, procs = stack
    system = in_process(procs)
    try:
        register_demo(system)
        token = identity.ensure_member_token(system.services, "acme", "alice", Role.MEMBER)
        port = free_port()
        args = ["serve", "--components", "api", "--port", str(port), "--app", DEMO_APP]
        api = procs.start(Managed("api", args, API_LISTENING), crash_at="after_create_stored")
        base = f"http://127.0.0.1:{port}/v1/tenants/acme"
        headers = {"Authorization": f"Bearer {token.token}"}

        def listening() -> bool | None:
            assert api.alive(), api.log_text()[-4000:]
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).is_success
            except httpx.HTTPError:
                return None

        wait_for("the API to listen", listening, timeout=30)
        name = f"killed-{uuid.uuid4().hex[:6]}"
        with pytest.raises(httpx.HTTPError):  # the process dies before it answers
            httpx.post(
                f"{base}/schedules",
                json=BODY | {"name": name},
                headers=headers | {"Idempotency-Key": f"k-{name}"},
                timeout=30,
            )
        assert procs.wait_exit(api, timeout=30) == KILLED

        with system.services.store.transaction(readonly=True) as tx:
            stored = tx.schedules.by_name("acme", name)
            assert stored is not None, "the first step committed before the kill"
            record = tx.schedule_sync.get_many([stored.id])[stored.id]
        assert record.unfinished_create
        assert not temporal_has(temporal.address, stored.id)

        reconcile(system.services)  # within the grace: a saga may still be running
        with system.services.store.transaction(readonly=True) as tx:
            assert tx.schedules.by_name("acme", name) is not None

        report = reconcile(system.services, orphan_grace=timedelta(0))
        assert report.removed == 1, report
        with system.services.store.transaction(readonly=True) as tx:
            assert tx.schedules.by_name("acme", name) is None
            assert tx.schedule_sync.get_many([stored.id]) == {}
        assert not temporal_has(temporal.address, stored.id)
    finally:
        system.close()
