"""Faults of a chaos run, mixed at random from the run's seed, and the process supervisor.

The injector draws every decision from one ``random.Random(seed)``: when the next fault
comes, which kind, which target, how long it lasts. Each is recorded in ``faults.jsonl``
(``fault`` when it begins, with the pids it reached; ``fault_end`` when it is over), so a
violation can be laid beside the faults that preceded it. Kinds:

* ``kill_<kind>``: SIGKILL of an API, runner, worker or embedded ``serve`` process; it
  stays down for a moment and the harness starts it again (the same arguments and port);
* ``kill_slot``: SIGKILL of one of a worker's slot processes (the body it runs dies; the
  worker's pool starts another);
* ``pause_<kind>``: SIGSTOP of a process and all its descendants for longer than a lease
  (a frozen VM or container), then SIGCONT;
* ``pg_restart_fast`` / ``pg_restart_immediate``: the run's own PostgreSQL cluster stopped
  (``pg_ctl -m fast|immediate``) and started again;
* ``pg_terminate``: ``pg_terminate_backend`` of punctual's connections that are inside a
  statement or a transaction (a connection cut mid-transaction);
* ``temporal_kill``: SIGKILL of the Temporal dev server, started again on the same
  address and database file;
* ``receiver_down``: the webhook receiver stops listening for a while.

Constraints keep the deployment able to recover and the checker able to judge: one fault
at a time per process, at most one worker and one API out at once, one database or engine
fault at a time. The supervisor restarts any process that died without a fault (that is
recorded too, as ``process`` ``exit``).
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tests.chaos.deployment import LEASE_SECONDS, Deployment, Member, descendants, signal_all
from tests.chaos.receiver import ChaosReceiver
from tests.chaos.record import Journal


@dataclass(frozen=True)
class Pace:
    """How often faults come and how long they last, for a run's length."""

    gap: tuple[float, float]
    down: tuple[float, float]
    pause_extra: tuple[float, float]
    pg_down: tuple[float, float]
    receiver_down: tuple[float, float]
    temporal_down: tuple[float, float]


SHORT_PACE = Pace(
    gap=(1.0, 3.5),
    down=(0.2, 1.5),
    pause_extra=(1.0, 2.5),
    pg_down=(0.3, 2.0),
    receiver_down=(2.0, 6.0),
    temporal_down=(0.5, 3.0),
)
LONG_PACE = Pace(
    gap=(1.5, 6.0),
    down=(0.2, 3.0),
    pause_extra=(1.0, 4.0),
    pg_down=(0.5, 5.0),
    receiver_down=(5.0, 90.0),
    temporal_down=(1.0, 8.0),
)

WEIGHTS: dict[str, dict[str, int]] = {
    "postgres": {
        "kill_api": 4,
        "kill_runner": 5,
        "kill_worker": 5,
        "kill_slot": 4,
        "pause_api": 2,
        "pause_runner": 3,
        "pause_worker": 3,
        "pg_restart_fast": 2,
        "pg_restart_immediate": 2,
        "pg_terminate": 4,
        "receiver_down": 2,
    },
    "temporal": {
        "kill_api": 3,
        "kill_runner": 5,
        "kill_worker": 5,
        "kill_slot": 3,
        "pause_runner": 2,
        "pause_worker": 3,
        "pg_restart_fast": 2,
        "pg_restart_immediate": 1,
        "pg_terminate": 3,
        "temporal_kill": 3,
        "receiver_down": 2,
    },
    "sqlite": {
        # One process does everything: each kill stops the API, the runner and the worker
        # for the seconds a start takes, so kills are rarer than with a fleet.
        "kill_serve": 2,
        "kill_slot": 3,
        "pause_serve": 2,
        "receiver_down": 2,
    },
}
SHARED_RESOURCES = {"pg", "temporal", "receiver"}


class Injector:
    """Draws faults from the seed and carries them out, each in a thread of its own."""

    def __init__(
        self,
        deployment: Deployment,
        receiver: ChaosReceiver,
        journal: Journal,
        seed: int,
        pace: Pace,
    ) -> None:
        self.deployment = deployment
        self.receiver = receiver
        self.journal = journal
        self.rng = random.Random(f"{seed}/faults")
        self.pace = pace
        self.weights = WEIGHTS[deployment.variant]
        self._lock = threading.Lock()
        self._busy: set[str] = set()
        """Processes (by name) and shared resources a fault holds right now."""
        self._held_down: set[str] = set()
        """Processes a fault killed and will start again itself."""
        self._receiver_rests_until = 0.0
        """The receiver stays up at least twice as long as it was last down, so deliveries'
        backoff (5 s doubling to 1 h) stays within what a quiet period can wait for."""
        self._stop = threading.Event()
        self._ids = iter(range(1, 1_000_000))
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._loop, name="faults", daemon=True)
        self.errors: list[str] = []

    # --- the loop ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """No new faults; wait until every fault under way is over (all restored)."""
        self._stop.set()
        self._thread.join(60)
        for thread in self._threads:
            thread.join(120)

    def take(self, name: str) -> bool:
        """Hold a dead process for the supervisor to start again; False if a fault holds it."""
        with self._lock:
            if name in self._busy:
                return False
            self._busy.add(name)
            self._held_down.add(name)
            return True

    def give_back(self, name: str) -> None:
        with self._lock:
            self._busy.discard(name)
            self._held_down.discard(name)

    def _loop(self) -> None:
        while not self._stop.wait(self.rng.uniform(*self.pace.gap)):
            kinds = list(self.weights)
            kind = self.rng.choices(kinds, [self.weights[k] for k in kinds])[0]
            plan = self._plan(kind)
            if plan is None:
                self.journal.write({"type": "fault_skipped", "kind": kind, "t": time.time()})
                continue
            action, held = plan
            number = next(self._ids)
            thread = threading.Thread(
                target=self._carry_out, args=(number, kind, action, held), daemon=True
            )
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def _carry_out(
        self, number: int, kind: str, action: Callable[[int], None], held: set[str]
    ) -> None:
        try:
            action(number)
        except Exception as exc:
            self.errors.append(f"fault {number} ({kind}): {type(exc).__name__}: {exc}")
            self.journal.write(
                {
                    "type": "fault_error",
                    "id": number,
                    "kind": kind,
                    "error": repr(exc),
                    "t": time.time(),
                }
            )
        finally:
            with self._lock:
                self._busy -= held
                self._held_down -= held

    def _plan(self, kind: str) -> tuple[Callable[[int], None], set[str]] | None:
        """What to do and what it holds, or None when no target is free now."""
        with self._lock:
            if kind in ("pg_restart_fast", "pg_restart_immediate", "pg_terminate"):
                if "pg" in self._busy:
                    return None
                self._busy.add("pg")
                if kind == "pg_terminate":
                    return self._pg_terminate, {"pg"}
                mode = kind.removeprefix("pg_restart_")
                return (lambda n: self._pg_restart(n, kind, mode)), {"pg"}
            if kind == "temporal_kill":
                if "temporal" in self._busy:
                    return None
                self._busy.add("temporal")
                return self._temporal_kill, {"temporal"}
            if kind == "receiver_down":
                if "receiver" in self._busy or time.monotonic() < self._receiver_rests_until:
                    return None
                self._busy.add("receiver")
                return self._receiver_down, {"receiver"}
            verb, target_kind = kind.split("_", 1)
            if kind == "kill_slot":
                target_kind = "worker" if self.deployment.variant != "sqlite" else "serve"
            # A dead process is the supervisor's to start again, not a target.
            candidates = [
                m
                for m in self.deployment.of_kind(target_kind)
                if m.managed.name not in self._busy and m.managed.alive()
            ]
            # At most one worker and one API process out at a time.
            out = {m.kind for m in self.deployment.members if m.managed.name in self._busy}
            if target_kind in out and target_kind in ("worker", "api") and kind != "kill_slot":
                return None
            if not candidates:
                return None
            member = self.rng.choice(candidates)
            name = member.managed.name
            self._busy.add(name)
            if kind == "kill_slot":
                return (lambda n: self._kill_slot(n, member)), {name}
            if verb == "kill":
                self._held_down.add(name)
                return (lambda n: self._kill(n, kind, member)), {name}
            return (lambda n: self._pause(n, kind, member)), {name}

    # --- carrying faults out ----------------------------------------------------------

    def _begin(self, number: int, kind: str, target: str, **detail: Any) -> None:
        self.journal.write(
            {
                "type": "fault",
                "id": number,
                "kind": kind,
                "target": target,
                "t": time.time(),
                **detail,
            }
        )

    def _end(self, number: int, kind: str, **detail: Any) -> None:
        self.journal.write(
            {"type": "fault_end", "id": number, "kind": kind, "t": time.time(), **detail}
        )

    def _kill(self, number: int, kind: str, member: Member) -> None:
        managed = member.managed
        pid = managed.current.process.pid
        reached = [pid, *descendants(pid)]
        down = self.rng.uniform(*self.pace.down)
        self._begin(number, kind, managed.name, pids=reached, down=down)
        with contextlib.suppress(ProcessLookupError):
            managed.current.process.send_signal(signal.SIGKILL)
        managed.current.process.wait(timeout=30)
        time.sleep(down)
        restart_and_journal(self.deployment, self.journal, member)
        self._end(number, kind)

    def _kill_slot(self, number: int, member: Member) -> None:
        pid = member.managed.current.process.pid
        children = descendants(pid)
        direct = set(_children_of(pid, children))
        slots = [p for p in children if p not in direct]
        if not slots:
            self._begin(number, "kill_slot", member.managed.name, pids=[], missed=True)
            self._end(number, "kill_slot")
            return
        victim = self.rng.choice(sorted(slots))
        self._begin(number, "kill_slot", member.managed.name, pids=[victim])
        signal_all([victim], signal.SIGKILL)
        self._end(number, "kill_slot")

    def _pause(self, number: int, kind: str, member: Member) -> None:
        managed = member.managed
        pid = managed.current.process.pid
        seconds = LEASE_SECONDS + self.rng.uniform(*self.pace.pause_extra)
        reached = signal_all([pid], signal.SIGSTOP)
        reached += signal_all(descendants(pid), signal.SIGSTOP)
        self._begin(number, kind, managed.name, pids=reached, seconds=seconds)
        time.sleep(seconds)
        signal_all(list(reversed(reached)), signal.SIGCONT)
        self._end(number, kind)

    def _pg_restart(self, number: int, kind: str, mode: str) -> None:
        pg = self.deployment.pg
        assert pg is not None
        down = self.rng.uniform(*self.pace.pg_down)
        self._begin(number, kind, "postgres", down=down)
        try:
            pg.stop(mode)
            time.sleep(down)
        finally:
            pg.start()
        self._end(number, kind)

    def _pg_terminate(self, number: int) -> None:
        pg = self.deployment.pg
        assert pg is not None
        everything = self.rng.random() < 0.3
        where = "" if everything else " AND state IN ('active', 'idle in transaction')"
        query = (
            "SELECT pid, state, pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = 'punctual' AND pid <> pg_backend_pid()" + where
        )
        with psycopg.connect(pg.server_url, autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(query).fetchall()
        self._begin(
            number,
            "pg_terminate",
            "postgres",
            backends=len(rows),
            states=sorted({str(state) for _, state, _ in rows}),
            all_connections=everything,
        )
        self._end(number, "pg_terminate")

    def _temporal_kill(self, number: int) -> None:
        temporal = self.deployment.temporal
        assert temporal is not None
        down = self.rng.uniform(*self.pace.temporal_down)
        pid = temporal.process.pid if temporal.process is not None else None
        self._begin(number, "temporal_kill", "temporal", pids=[pid], down=down)
        try:
            temporal.stop(signal.SIGKILL)
            time.sleep(down)
        finally:
            temporal.start()
        self._end(number, "temporal_kill")

    def _receiver_down(self, number: int) -> None:
        down = self.rng.uniform(*self.pace.receiver_down)
        self._begin(number, "receiver_down", "receiver", down=down)
        self.receiver.down()
        try:
            self._stop.wait(down)  # the quiet period brings it back at once
        finally:
            self.receiver.up()
            with self._lock:
                self._receiver_rests_until = time.monotonic() + 2 * down
        self._end(number, "receiver_down")


def restart_and_journal(deployment: Deployment, journal: Journal, member: Member) -> None:
    """Start the member again and journal its new pid, so the checker can tell its lives apart."""
    deployment.restart(member)
    managed = member.managed
    journal.write(
        {
            "type": "process",
            "event": "start",
            "name": managed.name,
            "pid": managed.current.process.pid,
            "t": time.time(),
        }
    )


def _children_of(pid: int, candidates: list[int]) -> list[int]:
    found = []
    for child in candidates:
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{child}/stat").read_text()
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
                found.append(child)
    return found


class Supervisor:
    """Starts again any process that died without a fault holding it down (recorded)."""

    def __init__(self, deployment: Deployment, injector: Injector, journal: Journal) -> None:
        self.deployment = deployment
        self.injector = injector
        self.journal = journal
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)
        self.unexpected: list[dict[str, Any]] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            for member in self.deployment.members:
                managed = member.managed
                if managed.alive() or not self.injector.take(managed.name):
                    continue
                try:
                    self._start_again(member)
                finally:
                    self.injector.give_back(managed.name)

    def _start_again(self, member: Member) -> None:
        managed = member.managed
        if managed.alive():
            return  # a fault started it again between the look and the hold
        event = {
            "type": "process",
            "event": "exit",
            "name": managed.name,
            "pid": managed.current.process.pid,
            "code": managed.current.process.poll(),
            "log": str(managed.current.log),
            "t": time.time(),
        }
        self.unexpected.append(event)
        self.journal.write(event)
        if self._stop.wait(1.0):
            return
        with contextlib.suppress(Exception):
            restart_and_journal(self.deployment, self.journal, member)
