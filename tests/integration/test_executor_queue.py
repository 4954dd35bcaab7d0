"""Slots with a queue of assignments behind the running body (docs/decisions/0005).

Terminating, timing out or crashing one body never disturbs another run: the runs queued
behind it in the same process are taken back before the kill (``on_returned``), never
begun, never reported finished; a queued run that is terminated never begins; runs
queued behind a slow body are taken back. Every body that begins appends its name to a
file, so the tests see exactly which ran.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from punctual.adapters.executor import Assignment, SlotPool
from punctual.adapters.executor import pool as pool_module
from tests.integration.test_executor import APP_REF, WAIT, Recorder, assignment


class Returned:
    def __init__(self) -> None:
        self.runs: list[str] = []
        self._changed = threading.Condition()

    def __call__(self, assignments: list[Assignment]) -> None:
        with self._changed:
            self.runs += [a.run_id for a in assignments]
            self._changed.notify_all()

    def wait_for(self, count: int) -> list[str]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.runs) >= count, WAIT), self.runs
            return list(self.runs)


@pytest.fixture
def queued_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SlotPool, Recorder, Returned]]:
    """One slot, a queue of 8. A busy slot still takes runs and none is taken back for
    waiting, unless a test says otherwise: on a loaded machine the tests' own pace must
    not decide what they see."""
    monkeypatch.setattr(pool_module, "BUSY_AFTER_SECONDS", 60.0)
    monkeypatch.setattr(pool_module, "REQUEUE_AFTER_SECONDS", 60.0)
    recorder, returned = Recorder(), Returned()
    pool = SlotPool(
        APP_REF,
        1,
        recorder.on_started,
        recorder.on_finished,
        queue_depth=8,
        on_returned=returned,
    )
    pool.start()
    yield pool, recorder, returned
    pool.close(grace_seconds=0)
    recorder.assert_each_finished_once()


def notes(path: Path, count: int) -> list[Assignment]:
    return [
        assignment("note", {"file": str(path), "name": f"n{i}"}, run_id=f"note-{i}")
        for i in range(count)
    ]


def began(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_one_slot_runs_its_queue_in_order_each_once(
    queued_pool: tuple[SlotPool, Recorder, Returned], tmp_path: Path
) -> None:
    pool, recorder, returned = queued_pool
    marks = tmp_path / "began.txt"
    jobs = notes(marks, 8)
    assert pool.free_capacity() == 8
    for job in jobs:
        pool.submit(job)
    outcomes = [recorder.wait_finished(job.run_id) for job in jobs]
    assert [(o.state, o.result) for o in outcomes] == [("completed", f"n{i}") for i in range(8)]
    assert began(marks) == [f"n{i}" for i in range(8)]
    assert returned.runs == []


def test_a_full_queue_refuses_more(queued_pool: tuple[SlotPool, Recorder, Returned]) -> None:
    pool, _, _ = queued_pool
    blocker = assignment("hang", {})
    pool.submit(blocker)
    for _ in range(7):
        pool.submit(assignment("add", {"a": 1, "b": 1}))
    assert pool.free_capacity() == 0
    with pytest.raises(RuntimeError, match="no free slot"):
        pool.submit(assignment("add", {"a": 1, "b": 1}))
    pool.terminate(blocker.run_id)


def test_terminating_the_running_body_takes_back_the_runs_queued_behind_it(
    queued_pool: tuple[SlotPool, Recorder, Returned], tmp_path: Path
) -> None:
    pool, recorder, returned = queued_pool
    marks = tmp_path / "began.txt"
    hung = assignment("hang", {})
    pool.submit(hung)
    recorder.wait_started(hung.run_id)
    queued = notes(marks, 3)
    for job in queued:
        pool.submit(job)
    pool.terminate(hung.run_id)
    outcome = recorder.wait_finished(hung.run_id)
    assert outcome.state == "terminated"
    assert sorted(returned.wait_for(3)) == sorted(j.run_id for j in queued)
    assert began(marks) == [], "no queued body began in the killed process"
    assert all(j.run_id not in recorder.outcomes for j in queued), "returned, not finished"
    assert pool.running() == set()
    # The slot is replaced and the runs taken back can be run again, once.
    assert pool.wait_for_free_slot(WAIT)
    again = notes(marks, 1)[0]
    pool.submit(again)
    assert recorder.wait_finished(again.run_id).state == "completed"
    assert began(marks) == ["n0"]


def test_terminating_a_queued_run_never_begins_it_and_spares_the_running_body(
    queued_pool: tuple[SlotPool, Recorder, Returned], tmp_path: Path
) -> None:
    pool, recorder, returned = queued_pool
    marks = tmp_path / "began.txt"
    napping = assignment("nap", {"seconds": 1.0})
    pool.submit(napping)
    recorder.wait_started(napping.run_id)
    first, second = notes(marks, 2)
    pool.submit(first)
    pool.submit(second)
    pool.terminate(first.run_id)
    terminated = recorder.wait_finished(first.run_id)
    assert terminated.state == "terminated"
    assert terminated.error is not None and "before its body began" in terminated.error["message"]
    assert recorder.wait_finished(napping.run_id).state == "completed", "not disturbed"
    # The other queued run was taken back with it (the epoch covers every run not
    # begun); it never began and is the caller's to hand out again.
    assert returned.wait_for(1) == [second.run_id]
    assert began(marks) == []


def test_a_timed_out_body_takes_back_the_runs_queued_behind_it(
    queued_pool: tuple[SlotPool, Recorder, Returned], tmp_path: Path
) -> None:
    pool, recorder, returned = queued_pool
    marks = tmp_path / "began.txt"
    hung = assignment("hang", {}, timeout=0.3)
    pool.submit(hung)
    queued = notes(marks, 2)
    for job in queued:
        pool.submit(job)
    # Queued runs wait longer than REQUEUE_AFTER_SECONDS only if the hang began first.
    outcome = recorder.wait_finished(hung.run_id)
    assert outcome.state == "timed_out"
    assert sorted(returned.wait_for(2)) == sorted(j.run_id for j in queued)
    assert began(marks) == []


def test_a_crashing_body_takes_back_the_runs_queued_behind_it(
    queued_pool: tuple[SlotPool, Recorder, Returned], tmp_path: Path
) -> None:
    pool, recorder, returned = queued_pool
    marks = tmp_path / "began.txt"
    done, crash, *queued = [notes(marks, 1)[0], assignment("exit3", {}), *notes(marks, 4)[1:]]
    for job in (done, crash, *queued):
        pool.submit(job)
    assert recorder.wait_finished(done.run_id).state == "completed"
    died = recorder.wait_finished(crash.run_id)
    assert died.state == "failed" and died.error is not None
    assert died.error["type"] == "WorkerProcessDied"
    assert sorted(returned.wait_for(3)) == sorted(j.run_id for j in queued)
    assert began(marks) == ["n0"]


def test_runs_queued_behind_a_slow_body_are_taken_back(
    queued_pool: tuple[SlotPool, Recorder, Returned],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pool_module, "REQUEUE_AFTER_SECONDS", 0.2)
    pool, recorder, returned = queued_pool
    marks = tmp_path / "began.txt"
    slow = assignment("nap", {"seconds": 1.0})
    queued = notes(marks, 2)
    for job in (slow, *queued):
        pool.submit(job)
    recorder.wait_started(slow.run_id)
    assert sorted(returned.wait_for(2)) == sorted(j.run_id for j in queued)
    assert recorder.wait_finished(slow.run_id).state == "completed", "not disturbed"
    assert began(marks) == []


def test_a_frozen_pool_s_slot_never_begins_what_waited_past_its_bound(
    queued_pool: tuple[SlotPool, Recorder, Returned],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chaos seed 102: the worker was frozen (SIGSTOP) while its slot was running A with B
    queued behind it. On thaw the slot finished A and began B before the pool could take B
    back, although B's claim had gone to another worker meanwhile. Holding the pool's lock
    freezes its monitor the same way while the slot process runs on."""
    monkeypatch.setattr(pool_module, "REQUEUE_AFTER_SECONDS", 0.2)
    pool, recorder, returned = queued_pool
    marks = tmp_path / "began.txt"
    slow = assignment("nap", {"seconds": 0.6})
    (queued,) = notes(marks, 1)
    pool.submit(slow)
    recorder.wait_started(slow.run_id)
    pool.submit(queued)
    with pool._lock:  # the monitor can neither take B back nor read A's end: frozen
        time.sleep(1.5)  # meanwhile A ends in the slot and B's bound passes
    assert returned.wait_for(1) == [queued.run_id]
    assert recorder.wait_finished(slow.run_id).state == "completed", "not disturbed"
    assert began(marks) == [], "B waited past its bound: the slot must not begin it"
    assert queued.run_id not in recorder.outcomes


def test_a_slot_whose_body_runs_long_offers_no_queue(
    queued_pool: tuple[SlotPool, Recorder, Returned], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool_module, "BUSY_AFTER_SECONDS", 0.02)
    pool, recorder, _ = queued_pool
    slow = assignment("nap", {"seconds": 0.5})
    pool.submit(slow)
    recorder.wait_started(slow.run_id)
    assert pool.wait_for_capacity(8, timeout=0) is False
    threading.Event().wait(pool_module.BUSY_AFTER_SECONDS * 2)
    assert pool.free_capacity() == 0
    with pytest.raises(RuntimeError, match="no free slot"):
        pool.submit(assignment("add", {"a": 1, "b": 1}))
    assert recorder.wait_finished(slow.run_id).state == "completed"
    assert pool.free_capacity() == 8


def test_close_gives_back_queued_runs_that_never_began(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool_module, "BUSY_AFTER_SECONDS", 60.0)
    monkeypatch.setattr(pool_module, "REQUEUE_AFTER_SECONDS", 60.0)
    recorder, returned = Recorder(), Returned()
    pool = SlotPool(
        APP_REF, 1, recorder.on_started, recorder.on_finished, queue_depth=4, on_returned=returned
    )
    pool.start()
    marks = tmp_path / "began.txt"
    napping = assignment("nap", {"seconds": 0.3})
    pool.submit(napping)
    recorder.wait_started(napping.run_id)
    queued = notes(marks, 2)
    for job in queued:
        pool.submit(job)
    pool.close(grace_seconds=5)
    assert [o.state for o in recorder.outcomes[napping.run_id]] == ["completed"]
    assert sorted(returned.runs) == sorted(j.run_id for j in queued)
    assert began(marks) == []


def test_a_queue_depth_above_one_needs_somewhere_to_return_runs() -> None:
    recorder = Recorder()
    with pytest.raises(ValueError, match="on_returned"):
        SlotPool(APP_REF, 1, recorder.on_started, recorder.on_finished, queue_depth=2)
