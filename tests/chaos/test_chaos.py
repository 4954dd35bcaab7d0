"""The short chaos run of the suite: a real deployment on PostgreSQL under a seeded mix of
faults and a client load, judged by the invariant checker (docs/reliability.md).

In under two minutes: two API processes, two runners and two workers on a PostgreSQL
cluster of the test's own, 25 s of load and faults from a fixed seed, a quiet period, and
the checker over the history and the store.
It asserts invariants only — no timing: a loaded machine makes fewer operations, never a
failure. Then the checker is shown a violation planted in this very record (a second
completed execution of a run, an accepted start that does not exist) and must name it.

A failure prints the seed and the command that reruns it (``python -m tests.chaos
--short --seed N --variant postgres``); the records stay in the test's directory.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.chaos.checker import check
from tests.chaos.record import BODIES, FAULTS, HISTORY, STORE, append_line, read_records
from tests.chaos.run import execute, short_plan

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

SEED = 20261202


@pytest.mark.timeout(300)
def test_a_short_chaos_run_on_postgresql_keeps_every_promise(tmp_path: Path) -> None:
    plan = short_plan("postgres", SEED)
    directory = tmp_path / "run"
    report = execute(plan, directory)
    rerun = f"seed {plan.seed}; rerun with: {plan.command()}; records in {directory}"
    assert not report.violations, f"{report.text(limit=40)}\n{rerun}"
    # The run did what it is for: faults happened, bodies executed, clients were answered.
    assert sum(report.counts["faults"].values()) > 0, rerun
    assert report.counts["bodies"].get("end", 0) > 0, rerun
    assert report.counts["answers"].get("201", 0) > 0, rerun

    planted = tmp_path / "planted"
    shutil.copytree(directory, planted)
    store = json.loads((planted / STORE).read_text())
    completed = {r["id"] for r in store["tenants"]["chaos"]["runs"] if r["state"] == "completed"}
    fault_times = [f["t"] for f in read_records(planted / FAULTS) if f.get("type") == "fault"]
    # A completed execution with no fault near it: nothing could explain a second one.
    first = next(
        b
        for b in read_records(planted / BODIES)
        if b["run_id"] in completed
        and b["event"] == "end"
        and not any(b["t"] - 5 <= t <= b["t"] + 5 for t in fault_times)
    )
    again = {**first, "nonce": "planted", "t": first["t"] + 0.001}
    append_line(planted / BODIES, {**again, "event": "begin"})
    append_line(planted / BODIES, again)
    ghost = "st_" + "0" * 22 + "ff"
    append_line(
        planted / HISTORY,
        {
            "type": "op",
            "op": 10**9,
            "kind": "create",
            "tenant": "chaos",
            "method": "POST",
            "path": "/v1/tenants/chaos/scheduled-starts",
            "body": {},
            "key": "planted-key",
            "t": 0,
        },
    )
    append_line(
        planted / HISTORY,
        {
            "type": "answer",
            "op": 10**9,
            "n": 1,
            "status": 201,
            "body": {"id": ghost},
            "error": None,
            "t0": 0,
            "t1": 0,
        },
    )
    append_line(planted / HISTORY, {"type": "end", "op": 10**9, "status": 201, "t": 0})
    found = {(v.rule, tuple(sorted(v.ids.items()))) for v in check(planted).violations}
    # The planted copy repeats the first body's attempt: when that attempt ran once, it is
    # an attempt executed twice; either way the violation names the run.
    twice = {
        ("run_twice", (("run", first["run_id"]),)),
        ("attempt_executed_twice", (("run", first["run_id"]),)),
    }
    assert twice & found, found
    assert (
        "accepted_start_lost",
        (("key", "planted-key"), ("op", 10**9), ("start", ghost)),
    ) in found, found
