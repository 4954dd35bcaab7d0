"""``punctual serve --components api`` in-process, with every thread under cProfile.

The API does its work on several threads (the event loop, AnyIO's worker threads that
run the sync routes, the idempotency runner's pool), and cProfile only sees the thread
that enabled it. So each thread gets its own profiler (installed as the thread starts)
and the profiles are merged when the server stops. ``--timer cpu`` (default) measures
each thread's own CPU time, which is what is scarce on a 2-core machine that also runs
PostgreSQL and the load generator; ``--timer wall`` shows where a request waits.

It assembles the server exactly as ``punctual serve`` does (``bootstrap.build``, the
default tenant, ``system.http_app()`` under uvicorn with the same options). Used by
``python -m bench.create_throughput --profile``; stop it with SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_finished: list[cProfile.Profile] = []
_running: set[int] = set()


def _new_profile(timer: str) -> cProfile.Profile:
    return cProfile.Profile(time.thread_time) if timer == "cpu" else cProfile.Profile()


def install_thread_profiling(timer: str) -> None:
    """Profile every thread started from now on, until it ends.

    ``Thread._bootstrap_inner`` runs in the new thread for every ``Thread`` subclass
    (AnyIO's worker threads override ``run``), so that is where the profiler goes.
    """
    original: Callable[[threading.Thread], None] = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def bootstrap_inner(self: threading.Thread) -> None:
        profile = _new_profile(timer)
        with _lock:
            _running.add(id(profile))
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()
            with _lock:
                _running.discard(id(profile))
                _finished.append(profile)

    threading.Thread._bootstrap_inner = bootstrap_inner  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dev-token", required=True)
    parser.add_argument("--out", required=True, help="Where to write the merged pstats.")
    parser.add_argument("--timer", choices=["cpu", "wall"], default="cpu")
    args = parser.parse_args()

    import uvicorn

    from punctual import bootstrap
    from punctual.settings import load_settings
    from punctual.usecases.tenancy import identity

    main_profile = _new_profile(args.timer)
    system = bootstrap.build(load_settings(None, database_url=args.database_url))
    try:
        identity.bootstrap_default_tenant(system.services, args.dev_token)
        config = uvicorn.Config(
            system.http_app(), host="127.0.0.1", port=args.port, log_level="warning"
        )
        server = uvicorn.Server(config)
        # uvicorn re-raises the signal that stopped it once it has shut down; with a
        # handler of ours in place that re-raise is harmless and the profile gets written.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: None)
        # Imports and start-up are left out: only serving is profiled.
        install_thread_profiling(args.timer)
        print(f"profiling server on http://127.0.0.1:{args.port}", flush=True)
        main_profile.enable()
        try:
            server.run()
        finally:
            main_profile.disable()
    finally:
        system.close()
    for thread in threading.enumerate():
        if thread is not threading.main_thread():
            thread.join(timeout=15)
    with _lock:
        profiles: list[Any] = [main_profile, *_finished]
        skipped = len(_running)
    stats = pstats.Stats(profiles[0])
    for profile in profiles[1:]:
        stats.add(profile)
    stats.dump_stats(Path(args.out))
    print(f"profile written: {len(profiles)} thread(s), {skipped} still running", flush=True)


if __name__ == "__main__":
    main()
