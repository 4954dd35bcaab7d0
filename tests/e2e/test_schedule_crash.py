"""A runner killed with SIGKILL at random moments while schedules fire (RS-5, CR-7, DP-2).

``punctual serve --components runner,worker`` runs on a fresh PostgreSQL database while
20 one-second interval schedules fire for about 15 s. The process is killed (SIGKILL to
its process group) at random moments several times and started again each time; there
is no crash point inside the generation pass, so the kills land wherever they land
(generation, dispatch, a run). Afterwards, per schedule: every ``occurrence_at`` exists
once, they are contiguous from the first fire (a gap only where a skipped item records
it), every dispatched occurrence has exactly one run (its preallocated run id), and no
occurrence ran twice.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.embedded import Scheduler
from punctual.settings import load_settings
from tests.e2e.harness import Managed, Processes, fresh_database, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

SCHEDULES = 20
FIRING_SECONDS = 15.0
KILLS = 4
MIN_KILLS = 3
INTERVAL = timedelta(seconds=1)
DRAIN_SECONDS = 30.0


@dataclass(frozen=True)
class OccurrenceRow:
    id: str
    schedule_id: str
    occurrence_at: datetime
    state: str
    reason: str | None
    run_id: str
    range_last: datetime | None
    range_count: int | None


def kill_hard(managed: Managed) -> None:
    """SIGKILL to the whole process group: runner, worker and their run bodies die at once."""
    process = managed.current.process
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=15)


def read_rows(url: str) -> tuple[list[OccurrenceRow], list[tuple[str, str, str]]]:
    with psycopg.connect(url, connect_timeout=5) as conn:
        occurrences = [
            OccurrenceRow(*row)
            for row in conn.execute(
                "SELECT id, schedule_id, occurrence_at, state, reason, run_id, range_last, "
                "range_count FROM starts WHERE schedule_id IS NOT NULL"
            )
        ]
        runs = [
            (row[0], row[1], row[2])
            for row in conn.execute("SELECT id, origin_id, state FROM runs")
        ]
    return occurrences, runs


def settled(url: str) -> tuple[list[OccurrenceRow], list[tuple[str, str, str]]] | None:
    """The rows once nothing is pending and every run has ended; None until then."""
    occurrences, runs = read_rows(url)
    if any(o.state in ("scheduled", "dispatching", "buffered") for o in occurrences):
        return None
    if any(state in ("pending", "running") for _, _, state in runs):
        return None
    return occurrences, runs


def problems_of(
    occurrences: list[OccurrenceRow],
    runs: list[tuple[str, str, str]],
    first_fires: dict[str, datetime],
) -> list[str]:
    problems: list[str] = []
    runs_by_origin: dict[str, list[tuple[str, str, str]]] = {}
    for run in runs:
        runs_by_origin.setdefault(run[1], []).append(run)
    by_schedule: dict[str, list[OccurrenceRow]] = {sid: [] for sid in first_fires}
    for row in occurrences:
        by_schedule.setdefault(row.schedule_id, []).append(row)

    for sid, rows in by_schedule.items():
        ats = Counter(row.occurrence_at for row in rows)
        twice = [at for at, n in ats.items() if n > 1]
        if twice:
            problems.append(f"{sid}: occurrence_at generated more than once: {twice}")
        covered: list[datetime] = []
        for row in rows:
            if row.range_count is not None:
                assert row.range_last is not None
                covered += [row.occurrence_at + INTERVAL * i for i in range(row.range_count)]
                if covered[-1] != row.range_last:
                    problems.append(f"{sid}: range {row} does not end at its last")
            else:
                covered.append(row.occurrence_at)
        covered.sort()
        expected = [first_fires[sid] + INTERVAL * i for i in range(len(covered))]
        if covered != expected:
            missing = sorted(set(expected) - set(covered))[:5]
            problems.append(
                f"{sid}: not contiguous from {first_fires[sid]}: {len(covered)} fires, "
                f"first missing {missing}"
            )
        if len(covered) < FIRING_SECONDS / 2:
            problems.append(f"{sid}: only {len(covered)} fires in about {FIRING_SECONDS} s")
        for row in rows:
            ran = runs_by_origin.get(row.id, [])
            if row.state == "dispatched":
                if len(ran) != 1:
                    problems.append(f"{sid}: occurrence {row.id} has {len(ran)} runs: {ran}")
                elif ran[0][0] != row.run_id:
                    problems.append(
                        f"{sid}: occurrence {row.id} ran as {ran[0][0]}, not {row.run_id}"
                    )
                elif ran[0][2] != "completed":
                    problems.append(f"{sid}: run {ran[0]} did not complete")
            elif row.state == "skipped":
                if ran:
                    problems.append(f"{sid}: skipped occurrence {row.id} has runs {ran}")
            else:
                problems.append(f"{sid}: occurrence {row.id} ended {row.state} ({row.reason})")
    known = {row.id for row in occurrences}
    strays = [run for run in runs if run[1] not in known]
    if strays:
        problems.append(f"runs of no occurrence: {strays[:5]}")
    return problems


def test_runner_killed_during_generation_never_loses_or_repeats_an_occurrence(
    tmp_path: Path,
) -> None:
    seed = random.randrange(1_000_000)
    rng = random.Random(seed)
    print(f"kill moments seed: {seed}")
    with fresh_database() as url, Processes(tmp_path, url) as procs:
        serving = procs.serve("runner", "runner,worker")
        procs.wait_ready(serving)  # it has registered the demo definitions

        settings = load_settings(None, database_url=url, codec={"key_file": str(procs.key_file)})
        scheduler = Scheduler(bootstrap.build(settings), "default", "e2e", Role.ADMIN)
        try:
            created: list[dict[str, Any]] = [
                scheduler.schedule_every(
                    "echo",
                    {"message": f"tick-{i}"},
                    INTERVAL,
                    name=f"tick-{i:02d}",
                    overlap="allow_all",
                    missed="catch_up",
                    max_catch_up=100,
                )
                for i in range(SCHEDULES)
            ]
            first_fires = {
                s["id"]: datetime.fromisoformat(s["spec"]["starts_at"].replace("Z", "+00:00"))
                for s in created
            }

            began = time.monotonic()
            kills = 0
            # A restart takes a few seconds (more on a loaded machine): kill at random
            # moments of each incarnation's life until the window is over, but at least
            # MIN_KILLS times.
            while kills < KILLS and (
                time.monotonic() - began < FIRING_SECONDS - 1.0 or kills < MIN_KILLS
            ):
                time.sleep(rng.uniform(0.3, 2.0))
                kill_hard(serving)
                kills += 1
                procs.restart(serving)
                procs.wait_ready(serving)
            time.sleep(max(0.0, FIRING_SECONDS - (time.monotonic() - began)))

            for schedule in created:
                current = scheduler.get_schedule(schedule["id"])
                scheduler.pause(schedule["id"], current["version"])
        finally:
            scheduler.close()

        occurrences, runs = wait_for(
            "every generated occurrence to be dispatched and its run to end",
            lambda: settled(url),
            DRAIN_SECONDS,
            step=0.3,
        )
        assert serving.killed_count() == kills >= MIN_KILLS, serving.exit_codes()
        assert serving.alive(), "the last incarnation died"

    problems = problems_of(occurrences, runs, first_fires)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:30])
    assert len(occurrences) >= SCHEDULES * FIRING_SECONDS / 2
