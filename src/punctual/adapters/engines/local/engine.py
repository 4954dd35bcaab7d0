"""The local engine: runs execute on punctual's own workers, which claim them from the store.

The run record that dispatch writes *is* the work item, so starting a run needs no
second system and is idempotent by the run id's uniqueness. Cancel and terminate are
flags on the record that the worker holding the run acts on.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from punctual.ports.clock import Clock
from punctual.ports.doorbell import Doorbell
from punctual.ports.engine import RunOrder
from punctual.ports.store import Store


class LocalEngine:
    name = "local"

    def __init__(self, store: Store, clock: Clock, liveness_seconds: float) -> None:
        self._store = store
        self._clock = clock
        self._liveness = timedelta(seconds=liveness_seconds)
        self.doorbell = Doorbell()
        """Rung when runs may be waiting, so in-process workers claim at once."""

    def start(self, orders: Sequence[RunOrder]) -> None:
        """Nothing to do: the run record written by dispatch is the work item."""

    def on_recorded(self, orders: Sequence[RunOrder]) -> None:
        if orders:
            self.doorbell.ring()

    def cancel(self, tenant: str, run_id: str) -> None:
        self.doorbell.ring()

    def terminate(self, tenant: str, run_id: str) -> None:
        self.doorbell.ring()

    def available(self) -> bool:
        """Runs live in the store, so the engine is up whenever the store is."""
        return True

    def loaded(self) -> set[tuple[str, str, str]]:
        since = self._clock.now() - self._liveness
        with self._store.transaction(readonly=True) as tx:
            workers = tx.definitions.live_workers(since)
        return {item for worker in workers for item in worker.loaded}
