"""DP-3: an engine outage is not charged to starts. Dispatch pauses behind the runner's
circuit breaker, health shows ``engine_unavailable``, and everything due meanwhile is
dispatched once the engine answers again.

The engine is the real local engine with a switch in front of ``start`` that answers
as an unreachable engine does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from punctual import bootstrap
from punctual.adapters.engines.local.engine import LocalEngine
from punctual.domain.permissions import Principal, Role
from punctual.ports.engine import EngineUnavailable, RunOrder
from punctual.usecases.scheduled import starts
from punctual.usecases.tenancy import health
from tests.conftest import make_settings
from tests.support.api import enroll, register_demo


class SwitchableEngine:
    """Delegates to a real engine unless switched off, when it raises like a lost engine."""

    def __init__(self, inner: LocalEngine) -> None:
        self.inner = inner
        self.name = inner.name
        self.down = False
        self.start_calls = 0
        self.loaded = inner.loaded
        self.cancel = inner.cancel
        self.terminate = inner.terminate
        self.on_recorded = inner.on_recorded

    def available(self) -> bool:
        return not self.down

    def start(self, orders: Sequence[RunOrder]) -> None:
        self.start_calls += 1
        if self.down and orders:
            raise EngineUnavailable("connection refused (switched off by the test)")
        self.inner.start(orders)


def test_an_outage_pauses_dispatch_and_charges_nothing(database_url: str, tmp_path: Path) -> None:
    settings = make_settings(database_url, tmp_path, runner={"max_idle_seconds": 0.1})
    system = bootstrap.build(settings)
    engine = SwitchableEngine(system.engine)
    system.services.engine = engine  # type: ignore[assignment]
    try:
        register_demo(system)
        engine.loaded = lambda: {("echo", "1", "x")}  # type: ignore[method-assign]
        engine.down = True
        alice = Principal("acme", "alice", Role.MEMBER)
        enroll(system, alice)
        ids = []
        for n in range(5):
            command = starts.CreateStart(
                workflow="echo",
                input={"message": f"m{n}"},
                business_request_id=f"outage-{n}",
                start_at=datetime.now(UTC) - timedelta(seconds=1),
                workload_class="standard",
            )
            ids.append(
                system.mutations.run(None, starts.create(system.services, alice, command)).body[
                    "id"
                ]
            )
        runner = system.start_runner()
        deadline = time.monotonic() + 30
        while runner.status.engine_available:
            assert time.monotonic() < deadline, "the runner never noticed the outage"
            time.sleep(0.02)
        calls_when_open = engine.start_calls
        time.sleep(1.0)  # several probes of the dead engine
        assert engine.start_calls == calls_when_open, "the open breaker still claimed pages"
        report = health.report(system.services, alice)
        assert report["status"] == "degraded"
        assert report["engine"]["available"] is False
        assert any(f["kind"] == "engine_unavailable" for f in report["findings"])
        for start_id in ids:
            current = starts.get(system.services, alice, start_id)
            assert current["state"] == "scheduled"
            assert current["attempts"] == 0
            assert current["last_error"] is None
        engine.down = False
        deadline = time.monotonic() + 30
        while not all(
            starts.get(system.services, alice, start_id)["state"] == "dispatched"
            for start_id in ids
        ):
            assert time.monotonic() < deadline, "dispatch did not resume"
            time.sleep(0.05)
        for start_id in ids:
            assert starts.get(system.services, alice, start_id)["attempts"] == 1
        deadline = time.monotonic() + 10  # the runner clears its finding after the pass
        while not health.report(system.services, alice)["engine"]["available"]:
            assert time.monotonic() < deadline, "the engine_unavailable finding stayed"
            time.sleep(0.05)
        report = health.report(system.services, alice)
        assert not any(f["kind"] == "engine_unavailable" for f in report["findings"])
    finally:
        system.close()
