"""How a runner thread of its own starts, stops and repeats its pass: an outage is waited
out, a defect is logged, and neither ends the thread (DP-3: an outage is never charged to
the work)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from punctual.errors import Unavailable

_MAX_OUTAGE_BACKOFF = 10.0


class RunnerThread:
    """A thread that runs ``_loop`` from ``start`` until ``stop``: at most one at a time,
    and again after a stop. ``_loop`` ends once ``_stop`` is set; ``_wake`` ends its pause."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def _start_thread(self) -> bool:
        """Start ``_loop`` unless it runs already; whether it was started."""
        if self._thread is not None:
            return False
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()
        return True

    def _stop_thread(self, timeout: float) -> None:
        """Ask ``_loop`` to stop, end its pause, and wait for it up to ``timeout``."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        raise NotImplementedError


def longer_backoff(backoff: float) -> float:
    """The pause after one more pass in a row that found the store or engine unavailable:
    from 0.2 s, doubling, up to ``_MAX_OUTAGE_BACKOFF``."""
    return min(_MAX_OUTAGE_BACKOFF, max(0.2, backoff * 2))


def repeat_passes(
    stop: threading.Event,
    one_pass: Callable[[], int],
    full: int,
    rest: Callable[[], object],
    log: logging.Logger,
    name: str,
    context: str = "",
) -> None:
    """Run ``one_pass`` until ``stop`` is set: again at once after a pass that handled
    ``full`` items or more (more is probably due), after ``rest`` otherwise. Outages and
    defects are logged as ``event=<name>_paused`` and ``event=<name>_pass_failed``, each
    followed by ``context`` (such as " runner=<id>")."""
    backoff = 0.0
    while not stop.is_set():
        try:
            handled = one_pass()
            backoff = 0.0
        except Unavailable as exc:
            backoff = longer_backoff(backoff)
            log.debug("event=%s_paused%s error=%s", name, context, exc)
            stop.wait(backoff)
            continue
        except Exception:
            log.exception("event=%s_pass_failed%s", name, context)
            stop.wait(1.0)
            continue
        if handled < full:
            rest()
