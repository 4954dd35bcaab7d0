"""Crash points for fault-injection tests: die with SIGKILL at a named point of the code.

``PUNCTUAL_CRASH_AT=after_claim:3`` kills the process the third time it reaches the
``after_claim`` point (``:1`` by default). Several points may be given, comma-separated.
Unset, every point is a no-op. Only the composition root reads the variable.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

CRASH_POINTS = frozenset(
    {
        "after_claim",  # dispatch: starts claimed and committed, nothing started
        "after_engine_start",  # dispatch: the engine accepted the runs, the store has not recorded
        "during_record",  # dispatch: inside the recording transaction, before commit
        "after_record",  # dispatch: recorded, events not yet emitted
        "after_run_claim",  # worker: runs claimed, bodies not started
        "during_generation",  # generation: occurrences written, cursor moved, not committed
        "after_create_stored",  # create saga: record committed, Temporal Schedule not ensured
        "after_fire_recorded",  # Temporal fire: occurrence committed, activity not answered
    }
)


class CrashPoints:
    def __init__(self, spec: str) -> None:
        self._targets: dict[str, int] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, _, nth = item.partition(":")
            if name not in CRASH_POINTS:
                raise ValueError(f"unknown crash point {name!r}; known: {sorted(CRASH_POINTS)}")
            self._targets[name] = int(nth or "1")
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, name: str) -> None:
        if name not in self._targets:
            return
        with self._lock:
            self._seen[name] += 1
            hit = self._seen[name] == self._targets[name]
        if hit:
            os.kill(os.getpid(), signal.SIGKILL)
