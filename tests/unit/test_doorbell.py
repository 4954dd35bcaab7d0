"""The doorbell wakes every waiting thread (the runner's two loops share one)."""

from __future__ import annotations

import threading
import time

from punctual.ports.doorbell import Doorbell


def _waiters(
    bell: Doorbell, count: int, timeout: float
) -> tuple[list[bool], list[threading.Thread]]:
    results: list[bool] = []
    ready = threading.Barrier(count + 1)

    def wait() -> None:
        bell.wait(0)  # a first wait returns at once; the next one really waits
        ready.wait()
        results.append(bell.wait(timeout))

    threads = [threading.Thread(target=wait) for _ in range(count)]
    for thread in threads:
        thread.start()
    ready.wait()
    return results, threads


def test_one_ring_wakes_every_waiting_thread() -> None:
    bell = Doorbell()
    results, threads = _waiters(bell, 2, timeout=10)
    time.sleep(0.1)
    began = time.monotonic()
    bell.ring()
    for thread in threads:
        thread.join(5)
    assert results == [True, True]
    assert time.monotonic() - began < 5


def test_without_a_ring_a_wait_times_out() -> None:
    bell = Doorbell()
    assert bell.wait(0) is True, "a thread's first wait is not allowed to miss an earlier ring"
    assert bell.wait(0.05) is False


def test_a_ring_is_kept_until_the_thread_waits_and_consumed_by_it() -> None:
    bell = Doorbell()
    bell.wait(0)
    bell.ring()
    assert bell.wait(0) is True
    assert bell.wait(0) is False


def test_threads_that_ended_leave_no_signal_behind() -> None:
    bell = Doorbell()
    for _ in range(5):  # a loop stopped and started again, each time on a new thread
        waiter = threading.Thread(target=bell.wait, args=(0,))
        waiter.start()
        waiter.join()
    bell.wait(0)  # this thread's first wait: the ended threads' signals are dropped
    assert len(bell._signals) == 1
