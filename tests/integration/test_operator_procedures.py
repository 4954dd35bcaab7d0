"""DP-6: the operator procedures of docs/operations.md, done the way an operator would."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.stores.sql.tables import starts
from punctual.domain.permissions import Role
from punctual.domain.runs import DefinitionState
from punctual.usecases.running.definitions import set_lifecycle
from punctual.usecases.scheduled.dispatch import dispatch_due
from tests.support.api import echo_start, in_process, live_worker, member_api


def test_replacing_a_failed_start(system: bootstrap.Punctual) -> None:
    """A failed start degrades health until acknowledged; the fix is a new start."""
    live_worker(system)
    with in_process(system) as client:
        api = member_api(system, client, role=Role.ADMIN)
        failed = api.create_due(echo_start()).json()
        # The cause: the workflow lost its active version before the start came due.
        set_lifecycle(system.services, "echo", "1", DefinitionState.DEPRECATED)
        dispatch_due(system.services, "runner", 10)
        start = api.get(f"/scheduled-starts/{failed['id']}").json()
        assert start["state"] == "failed"
        assert start["last_error"]["code"] == "workflow_inactive"

        report = api.get("/health").json()
        assert report["status"] == "degraded"
        assert [s["id"] for s in report["starts"]["failed"]] == [failed["id"]]
        [finding] = [f for f in report["findings"] if f["subject_id"] == failed["id"]]
        assert finding["kind"] == "start_failed" and finding["acknowledged"] is False

        # Step 2: fix the cause. Step 3: a new start (new key) for the same business request.
        set_lifecycle(system.services, "echo", "1", DefinitionState.ACTIVE)
        replacement = api.create_due(echo_start()).json()
        dispatch_due(system.services, "runner", 10)
        assert api.get(f"/scheduled-starts/{replacement['id']}").json()["state"] == "dispatched"
        assert api.get(f"/scheduled-starts/{failed['id']}").json()["state"] == "failed"

        # Step 4: acknowledge; the report is ok again.
        acked = api.post(f"/health/findings/{finding['id']}/acknowledge")
        assert acked.status_code == 200, acked.text
        assert acked.json()["acknowledged"] is True
        assert api.post(f"/health/findings/{finding['id']}/acknowledge").status_code == 200
        assert api.get("/health").json()["status"] == "ok"


def test_recovering_a_stalled_dispatch(system: bootstrap.Punctual) -> None:
    """A claim whose runner died shows as stalled; the next runner pass dispatches it once."""
    live_worker(system)
    with in_process(system) as client:
        api = member_api(system, client)
        start = api.create_due(echo_start()).json()
        now = system.services.clock.now()
        with system.store.transaction() as tx:
            [claim] = tx.starts.claim_due(now, 10, "runner-that-died", 30)
        # The dead runner's lease ran out two minutes ago and nobody picked the start up.
        with system.store.engine.begin() as conn:
            conn.execute(
                sa.update(starts)
                .where(starts.c.id == start["id"])
                .values(lease_until=now - timedelta(minutes=2))
            )
        report = api.get("/health").json()
        assert report["status"] == "degraded"
        assert report["starts"]["stalled"] == [start["id"]]

        dispatch_due(system.services, "a-live-runner", 10)
        current = api.get(f"/scheduled-starts/{start['id']}").json()
        assert current["state"] == "dispatched"
        assert current["dispatch"]["run_id"] == claim.run_id
        assert len(api.get("/runs", origin_id=start["id"]).json()["items"]) == 1
        report = api.get("/health").json()
        assert report["starts"]["stalled_count"] == 0
        assert report["status"] == "ok"


def test_health_sees_a_new_failure_behind_a_long_history(system: bootstrap.Punctual) -> None:
    """A tenant with over a thousand acknowledged findings still sees a new failure, and it
    makes the report degraded (the report used to read only the oldest 1,000)."""
    now = system.services.clock.now()
    with system.store.transaction() as tx:
        for i in range(1_050):
            tx.findings.raise_finding("acme", "start_failed", f"old-{i}", "error", "old", now)
        for finding in tx.findings.find("acme", limit=2_000):
            tx.findings.acknowledge("acme", finding.id, "admin", now)
        tx.findings.raise_finding("acme", "start_failed", "new-one", "error", "new", now)
    with in_process(system) as client:
        report = member_api(system, client, role=Role.ADMIN).get("/health").json()
    assert report["status"] == "degraded"
    assert report["open_findings_count"] == 1
    assert report["findings"][0]["subject_id"] == "new-one"
