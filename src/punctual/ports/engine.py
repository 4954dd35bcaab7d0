"""The Engine port: where runs execute (``local`` or ``temporal``).

The store creates the run record at dispatch; the engine then makes it execute. Its
promises, each pinned by the engine contract suite:

* ``start`` is idempotent on the run id: a repeated call (retry, second runner, crash
  between engine and store) converges on one execution (WF-6, DP-2), except that an
  order marked ``replaces_unrecorded`` starts anew over an execution that closed without
  its run record (a leftover of an earlier dispatch, which must not win later);
* ``cancel`` is cooperative and ``terminate`` immediate; both idempotent (WF-5);
* ``loaded`` answers which (workflow, version, artifact) live workers have loaded;
* an engine that cannot be reached raises ``EngineUnavailable``, never a start-specific
  error, so outages are not charged to starts (DP-3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from punctual.errors import Unavailable


class EngineUnavailable(Unavailable):
    code = "engine_unavailable"


@dataclass(frozen=True)
class RunOrder:
    """What an engine needs to start a run; the input is still encrypted."""

    run_id: str
    tenant: str
    workflow: str
    definition_version: str
    task_queue: str
    priority: int
    timeout_seconds: float
    origin: dict[str, Any]
    replaces_unrecorded: bool = False
    """The start was claimed before: an earlier dispatch may have left an execution of this
    run id that never got its run record. The engine converges on such an execution while
    it still waits, and starts a new one over it once it has closed, instead of reporting
    "already started"; safe because the caller holds the start's claim, so no run record
    exists and no body has run."""
    traceparent: str | None = None
    """The start's W3C trace context, for an engine that carries it on (OS-1)."""


class Engine(Protocol):
    name: str

    def start(self, orders: Sequence[RunOrder]) -> None:
        """Make each run execute; idempotent per run id."""

    def on_recorded(self, orders: Sequence[RunOrder]) -> None:
        """Called once the store has committed the runs (an engine may wake workers)."""

    def cancel(self, tenant: str, run_id: str) -> None:
        """Ask the run to stop cooperatively; idempotent."""

    def terminate(self, tenant: str, run_id: str) -> None:
        """Stop the run now; idempotent."""

    def available(self) -> bool:
        """A cheap probe: can the engine accept starts right now?"""

    def loaded(self) -> set[tuple[str, str, str]]:
        """(workflow, version, artifact) that at least one live worker has loaded."""
