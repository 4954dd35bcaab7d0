"""The slot executor with real child processes: outcomes, cancel, terminate, timeouts, crashes.

Every test drives a real ``SlotPool`` whose children import ``executor_app`` (next to this
file) or the demo app. Waiting is done on events with timeouts, never by polling.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from punctual.adapters.executor import Assignment, Outcome, SlotPool
from punctual.errors import ConfigurationError

# The slot processes import the helper app by reference, under the same name this module
# got: "executor_app" when pytest put this directory on sys.path, or a dotted name when
# tests/ is a package.
_PACKAGE = __name__.rpartition(".")[0]
APP_REF = f"{_PACKAGE + '.' if _PACKAGE else ''}executor_app:app"
DEMO_REF = "punctual.demo:app"
WAIT = 10.0  # generous upper bound for any single wait; tests finish far sooner


class Recorder:
    """Collects callbacks and lets a test wait for them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started_at: dict[str, float] = {}
        self.finished_at: dict[str, float] = {}
        self.outcomes: dict[str, list[Outcome]] = defaultdict(list)
        self.threads: set[str] = set()
        self._started: dict[str, threading.Event] = defaultdict(threading.Event)
        self._finished: dict[str, threading.Event] = defaultdict(threading.Event)
        self.after_finish: Callable[[Outcome], None] | None = None

    def on_started(self, run_id: str) -> None:
        with self._lock:
            self.started_at[run_id] = time.perf_counter()
            self.threads.add(threading.current_thread().name)
            event = self._started[run_id]
        event.set()

    def on_finished(self, outcome: Outcome) -> None:
        with self._lock:
            self.finished_at.setdefault(outcome.run_id, time.perf_counter())
            self.outcomes[outcome.run_id].append(outcome)
            self.threads.add(threading.current_thread().name)
            event = self._finished[outcome.run_id]
        event.set()
        if self.after_finish is not None:
            self.after_finish(outcome)

    def wait_started(self, run_id: str, timeout: float = WAIT) -> float:
        with self._lock:
            event = self._started[run_id]
        assert event.wait(timeout), f"{run_id} did not start within {timeout} s"
        return self.started_at[run_id]

    def wait_finished(self, run_id: str, timeout: float = WAIT) -> Outcome:
        with self._lock:
            event = self._finished[run_id]
        assert event.wait(timeout), f"{run_id} did not finish within {timeout} s"
        return self.outcomes[run_id][0]

    def assert_each_finished_once(self) -> None:
        with self._lock:
            duplicates = {r: o for r, o in self.outcomes.items() if len(o) != 1}
        assert not duplicates, f"on_finished not called exactly once: {duplicates}"


PoolFactory = Callable[..., tuple[SlotPool, Recorder]]


@pytest.fixture
def make_pool() -> Iterator[PoolFactory]:
    pools: list[tuple[SlotPool, Recorder]] = []

    def factory(app_ref: str = APP_REF, slots: int = 1) -> tuple[SlotPool, Recorder]:
        recorder = Recorder()
        pool = SlotPool(app_ref, slots, recorder.on_started, recorder.on_finished)
        pool.start()
        pools.append((pool, recorder))
        return pool, recorder

    yield factory
    for pool, recorder in pools:
        pool.close(grace_seconds=0)
        recorder.assert_each_finished_once()
        assert recorder.threads <= {"punctual-slot-monitor"}


_counter = iter(range(1_000_000))


def assignment(
    workflow: str,
    payload: Any = None,
    *,
    version: str = "1",
    timeout: float = 60.0,
    run_id: str | None = None,
) -> Assignment:
    return Assignment(
        run_id=run_id or f"run-{workflow}-{next(_counter)}",
        workflow=workflow,
        version=version,
        payload={} if payload is None else payload,
        attempt=1,
        origin={"kind": "test"},
        timeout_seconds=timeout,
    )


def run(pool: SlotPool, recorder: Recorder, job: Assignment) -> Outcome:
    assert pool.wait_for_free_slot(WAIT)
    pool.submit(job)
    return recorder.wait_finished(job.run_id)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, or exiting as we read
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def gone_soon(pid: int, timeout: float = 2.0) -> bool:
    """SIGKILL is delivered asynchronously; give the kernel a moment."""
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def wait_for_file(path: Path, timeout: float = WAIT) -> str:
    """The body writes its pid right after it starts; on_started has already fired."""
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.005)
    return path.read_text()


# ---- outcomes ------------------------------------------------------------------------


def test_sync_and_async_bodies_complete_with_their_result(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool()
    sync = run(pool, recorder, assignment("add", {"a": 2, "b": 3}))
    asynchronous = run(pool, recorder, assignment("add_async", {"a": 4, "b": 5}))
    assert (sync.state, sync.result, sync.error) == ("completed", {"sum": 5}, None)
    assert asynchronous.state == "completed"
    assert asynchronous.result == {"sum": 9, "async": True}
    assert sync.run_id in recorder.started_at
    assert pool.running() == set()
    assert pool.free_slots() == 1


def test_a_raising_body_fails_with_type_message_and_traceback(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool()
    outcome = run(pool, recorder, assignment("boom", {"n": 7}))
    assert outcome.state == "failed"
    assert outcome.result is None
    assert outcome.error is not None
    assert outcome.error["code"] == "workflow_error"
    assert outcome.error["type"] == "ValueError"
    assert outcome.error["message"] == "boom: 7"
    assert "executor_app.py" in outcome.error["traceback"]
    assert "raise ValueError" in outcome.error["traceback"]
    # The slot survives a failing body.
    assert run(pool, recorder, assignment("add", {"a": 1, "b": 1})).result == {"sum": 2}


def test_a_result_that_is_not_json_fails_clearly(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool()
    outcome = run(pool, recorder, assignment("weird"))
    assert outcome.state == "failed"
    assert outcome.error is not None
    assert outcome.error["type"] == "ResultNotSerializable"
    assert "not JSON-serializable" in outcome.error["message"]
    assert "'weird'" in outcome.error["message"]


def test_an_unknown_workflow_version_fails_as_not_loaded(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool()
    outcome = run(pool, recorder, assignment("add", {"a": 1, "b": 2}, version="9"))
    assert outcome.state == "failed"
    assert outcome.error is not None
    assert outcome.error["type"] == "WorkflowNotLoaded"
    assert "'add' version '9'" in outcome.error["message"]
    assert outcome.run_id not in recorder.started_at  # the body never began


# ---- cancel --------------------------------------------------------------------------


def test_cancel_lets_the_body_clean_up_and_finish(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool()
    job = assignment("patient", {"seconds": 30})
    pool.submit(job)
    recorder.wait_started(job.run_id)
    asked = time.perf_counter()
    pool.cancel(job.run_id)
    pool.cancel(job.run_id)  # idempotent
    outcome = recorder.wait_finished(job.run_id)
    assert time.perf_counter() - asked < 1.0
    # The workflow chose to return: that is a completed run, not a canceled one.
    assert outcome.state == "completed"
    assert outcome.result == {"canceled_early": True, "cancel_requested": True}


def test_cancel_raising_canceled_ends_the_run_canceled(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool()
    job = assignment("strict", {"seconds": 30})
    pool.submit(job)
    pool.cancel(job.run_id)  # before the child even acknowledged the assignment
    outcome = recorder.wait_finished(job.run_id)
    assert outcome.state == "canceled"
    assert outcome.error == {"code": "canceled", "message": "stopped at the user's request"}


def test_cancel_and_terminate_of_unknown_runs_are_no_ops(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool()
    pool.cancel("nobody")
    pool.terminate("nobody")
    assert pool.free_slots() == 1
    assert recorder.outcomes == {}


# ---- terminate -----------------------------------------------------------------------


def test_terminate_kills_a_hung_body_at_once_and_the_slot_is_reused(
    make_pool: PoolFactory, tmp_path: Path
) -> None:
    pool, recorder = make_pool()
    pid_file = tmp_path / "pid"
    job = assignment("hang", {"pid_file": str(pid_file)})
    pool.submit(job)
    recorder.wait_started(job.run_id)
    body_pid = int(wait_for_file(pid_file))
    pool.cancel(job.run_id)  # the body ignores it

    asked = time.perf_counter()
    pool.terminate(job.run_id)
    outcome = recorder.wait_finished(job.run_id)
    latency = recorder.finished_at[job.run_id] - asked

    assert outcome.state == "terminated"
    assert outcome.result is None
    assert outcome.error is not None and outcome.error["code"] == "terminated"
    assert "killed" in outcome.error["message"]
    assert latency < 1.0
    assert job.run_id not in pool.running()

    # A fresh process takes the slot and runs the next assignment.
    after = run(pool, recorder, assignment("pid"))
    assert after.state == "completed"
    assert after.result != body_pid
    assert not alive(body_pid)


def test_terminate_also_kills_processes_the_body_started(
    make_pool: PoolFactory, tmp_path: Path
) -> None:
    pool, recorder = make_pool()
    pid_file = tmp_path / "helper"
    job = assignment("spawner", {"pid_file": str(pid_file)})
    pool.submit(job)
    helper_pid = int(wait_for_file(pid_file))
    assert alive(helper_pid)
    pool.terminate(job.run_id)
    assert recorder.wait_finished(job.run_id).state == "terminated"
    assert gone_soon(helper_pid)


def test_terminate_is_idempotent_and_loses_to_an_earlier_finish(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool()
    job = assignment("hang")
    pool.submit(job)
    recorder.wait_started(job.run_id)
    pool.terminate(job.run_id)
    pool.terminate(job.run_id)
    assert recorder.wait_finished(job.run_id).state == "terminated"
    pool.terminate(job.run_id)

    done = run(pool, recorder, assignment("add", {"a": 1, "b": 1}))
    pool.terminate(done.run_id)  # already finished: nothing to do, nothing reported
    # Callbacks arrive in order on one thread, so a stray outcome would precede this one.
    assert run(pool, recorder, assignment("add", {"a": 2, "b": 2})).state == "completed"
    assert len(recorder.outcomes[job.run_id]) == 1
    assert len(recorder.outcomes[done.run_id]) == 1


def test_terminate_racing_a_finishing_body_reports_exactly_one_outcome(
    make_pool: PoolFactory,
) -> None:
    pool, recorder = make_pool(slots=2)
    states = set()
    for _ in range(8):
        job = assignment("add", {"a": 1, "b": 2})
        assert pool.wait_for_free_slot(WAIT)
        pool.submit(job)
        pool.terminate(job.run_id)
        states.add(recorder.wait_finished(job.run_id).state)
    assert states <= {"completed", "terminated"}
    assert run(pool, recorder, assignment("add", {"a": 0, "b": 0})).state == "completed"
    recorder.assert_each_finished_once()


# ---- timeouts and crashes ------------------------------------------------------------


def test_a_body_past_its_execution_timeout_is_killed_and_timed_out(
    make_pool: PoolFactory, tmp_path: Path
) -> None:
    pool, recorder = make_pool()
    pid_file = tmp_path / "pid"
    job = assignment("hang", {"pid_file": str(pid_file)}, timeout=0.5)
    submitted = time.perf_counter()
    pool.submit(job)
    body_pid = int(wait_for_file(pid_file))
    outcome = recorder.wait_finished(job.run_id)
    elapsed = recorder.finished_at[job.run_id] - submitted
    assert outcome.state == "timed_out"
    assert outcome.error == {"code": "timed_out", "message": "execution timeout of 0.5 s exceeded"}
    assert 0.5 <= elapsed < 1.5
    assert run(pool, recorder, assignment("add", {"a": 1, "b": 1})).state == "completed"
    assert not alive(body_pid)


def test_a_child_that_dies_fails_the_run_and_is_replaced(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool()
    outcome = run(pool, recorder, assignment("exit3"))
    assert outcome.state == "failed"
    assert outcome.error is not None
    assert outcome.error["type"] == "WorkerProcessDied"
    assert outcome.error["exit_code"] == 3
    assert "exit code 3" in outcome.error["message"]
    assert run(pool, recorder, assignment("add", {"a": 3, "b": 4})).result == {"sum": 7}


# ---- concurrency, callbacks, latency -------------------------------------------------


def test_slots_run_concurrently(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool(slots=2)
    jobs = [assignment("nap", {"seconds": 0.5}) for _ in range(2)]
    began = time.perf_counter()
    for job in jobs:
        pool.submit(job)
    assert pool.free_slots() == 0
    with pytest.raises(RuntimeError, match="no free slot"):
        pool.submit(assignment("add", {"a": 1, "b": 1}))
    outcomes = [recorder.wait_finished(job.run_id) for job in jobs]
    assert time.perf_counter() - began < 0.9
    assert all(o.state == "completed" for o in outcomes)
    assert len({o.result["pid"] for o in outcomes if o.result}) == 2


def test_callbacks_may_call_back_into_the_pool(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool()
    chain = [assignment("add", {"a": i, "b": i}) for i in range(10)]
    done = threading.Event()

    def submit_next(outcome: Outcome) -> None:
        assert pool.running() == set()
        index = next(i for i, job in enumerate(chain) if job.run_id == outcome.run_id)
        if index + 1 < len(chain):
            pool.submit(chain[index + 1])
        else:
            done.set()

    recorder.after_finish = submit_next
    pool.submit(chain[0])
    assert done.wait(WAIT)
    assert [recorder.outcomes[j.run_id][0].result for j in chain] == [
        {"sum": 2 * i} for i in range(10)
    ]


def test_submit_reaches_a_warm_process_within_milliseconds(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool()
    latencies = []
    for _ in range(20):
        job = assignment("add", {"a": 1, "b": 1})
        sent = time.perf_counter()
        pool.submit(job)
        latencies.append(recorder.wait_started(job.run_id) - sent)
        recorder.wait_finished(job.run_id)
    print(
        f"submit -> on_started: median {statistics.median(latencies) * 1000:.2f} ms, "
        f"max {max(latencies) * 1000:.2f} ms"
    )
    assert statistics.median(latencies) < 0.05


def test_a_duplicate_run_id_is_refused(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool(slots=2)
    job = assignment("hang")
    pool.submit(job)
    with pytest.raises(ValueError, match="already running"):
        pool.submit(job)
    pool.terminate(job.run_id)
    assert recorder.wait_finished(job.run_id).state == "terminated"


# ---- the demo app --------------------------------------------------------------------


def test_the_demo_app_runs_echo_fail_and_a_canceled_sleep(make_pool: PoolFactory) -> None:
    pool, recorder = make_pool(DEMO_REF)
    echo = run(pool, recorder, assignment("echo", {"message": "hello"}))
    assert (echo.state, echo.result) == ("completed", {"message": "hello"})

    invalid = run(pool, recorder, assignment("echo", {"message": "x", "extra": 1}))
    assert invalid.state == "failed"
    # The schema judges in the slot too (decision 0004); the message names no unknown key.
    assert invalid.error is not None and invalid.error["code"] == "input_rejected", invalid
    assert "additionalProperties" in invalid.error["message"], invalid
    assert "extra" not in json.dumps(invalid.error), invalid

    failed = run(pool, recorder, assignment("fail"))
    assert failed.error is not None and failed.error["type"] == "DemoFailure"

    sleep = assignment("sleep", {"seconds": 30})
    pool.submit(sleep)
    recorder.wait_started(sleep.run_id)
    pool.cancel(sleep.run_id)
    assert recorder.wait_finished(sleep.run_id, timeout=2).state == "canceled"


# ---- start and close -----------------------------------------------------------------


def test_an_app_that_cannot_load_fails_start() -> None:
    recorder = Recorder()
    pool = SlotPool("no_such_module_anywhere:app", 2, recorder.on_started, recorder.on_finished)
    with pytest.raises(ConfigurationError, match="no_such_module_anywhere"):
        pool.start()
    with pytest.raises(RuntimeError):
        pool.submit(assignment("add", {"a": 1, "b": 1}))


def test_close_kills_busy_children_without_outcomes_and_stops_idle_ones(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    pool = SlotPool(APP_REF, 3, recorder.on_started, recorder.on_finished)
    pool.start()
    busy = [assignment("hang", {"pid_file": str(tmp_path / f"pid{i}")}) for i in range(2)]
    for job in busy:
        pool.submit(job)
    busy_pids = [int(wait_for_file(tmp_path / f"pid{i}")) for i in range(2)]
    idle_pid = run(pool, recorder, assignment("pid")).result  # the third slot, now idle
    assert isinstance(idle_pid, int)
    pids = {idle_pid, *busy_pids}
    assert len(pids) == 3

    began = time.perf_counter()
    pool.close(grace_seconds=0.2)
    assert time.perf_counter() - began < 2.0

    assert [pid for pid in pids if alive(pid)] == []
    assert pool.running() == set()
    assert all(job.run_id not in recorder.outcomes for job in busy)  # left to lease expiry
    assert pool.free_slots() == 0
    with pytest.raises(RuntimeError):
        pool.submit(assignment("add", {"a": 1, "b": 1}))
    pool.close()  # idempotent


def test_close_reports_runs_that_finish_within_the_grace_period() -> None:
    recorder = Recorder()
    pool = SlotPool(APP_REF, 1, recorder.on_started, recorder.on_finished)
    pool.start()
    job = assignment("nap", {"seconds": 0.3})
    pool.submit(job)
    pool.close(grace_seconds=5)
    outcome = recorder.outcomes[job.run_id]  # delivered before close returned
    assert [o.state for o in outcome] == ["completed"]
    assert isinstance(outcome[0].result, dict)
    assert not alive(outcome[0].result["pid"])


def test_a_slot_process_imports_neither_the_web_stack_nor_the_store() -> None:
    """The fork server imports the slot protocol and the CLI (a child re-runs the parent's
    ``__main__``, for ``punctual serve`` the CLI), nothing else the parent has loaded: a
    body needs neither the store nor the HTTP app nor an engine's SDK, and importing them
    cost every worker start ~2 s of CPU."""
    import fastapi  # noqa: F401
    import sqlalchemy  # noqa: F401

    import punctual.bootstrap
    import punctual.cli.main  # noqa: F401
    from punctual.adapters.executor import child, pool

    heavy = ["fastapi", "sqlalchemy", "alembic", "punctual.bootstrap", "temporalio"]
    preload = pool._preload()
    assert preload[:2] == ["__main__", child.__name__]
    assert "punctual.cli.main" in preload  # what a child's re-run of ``punctual``'s main imports
    assert all(m == "punctual.cli" or m.startswith("punctual.cli.") for m in preload[2:]), preload
    recorder = Recorder()
    slots = SlotPool(APP_REF, 1, recorder.on_started, recorder.on_finished)
    slots.start()
    try:
        job = assignment("loaded", {"modules": heavy})
        slots.submit(job)
        outcome = recorder.wait_finished(job.run_id)
    finally:
        slots.close(grace_seconds=5)
    assert outcome.state == "completed", outcome
    assert outcome.result == [], outcome.result
