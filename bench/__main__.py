"""punctual's benchmarks: run by hand, they print figures (never asserted in tests).

    .venv/bin/python -m bench                 # this list
    .venv/bin/python -m bench export [REF]    # export a commit to measure it (see below)
    .venv/bin/python -m bench all             # every benchmark with its defaults (~15 min)

See bench/README.md and docs/performance.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.common import PYTHON, REPO

BENCHMARKS = [
    ("create_throughput", "creates/s through the HTTP API, 1 and 16 clients, SQLite + PostgreSQL"),
    ("dispatch_lag", "due -> dispatched and due -> run started, bursts of 500/2,000 and a spread"),
    ("dispatch_throughput", "dispatches/s from a 100,000 backlog, 1 and 2 runner processes"),
    ("claim_scale", "EXPLAIN of the claim at 1,000,000 pending starts, runner RSS for 60 s"),
    ("worker_throughput", "trivial runs/s executed by one worker process, default slots"),
]


def export(ref: str) -> Path:
    """Export ``ref`` (read-only ``git archive``) so it can be measured while src/ changes."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", ref],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    target = Path("/tmp") / f"punctual-bench-src-{commit}"
    if not (target / "COMMIT").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.Popen(
            ["git", "-C", str(REPO), "archive", "--format=tar", commit], stdout=subprocess.PIPE
        )
        subprocess.run(["tar", "-x", "-C", str(target)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise SystemExit(f"git archive {commit} failed")
        (target / "COMMIT").write_text(commit + "\n")
    return target


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["export"]:
        target = export(args[1] if len(args) > 1 else "HEAD")
        print(f"exported to {target}; measure it with:")
        print(f"  PYTHONPATH={target}/src .venv/bin/python -m bench.<name>")
        return
    if args[:1] == ["all"]:
        for name, _ in BENCHMARKS:
            subprocess.run([str(PYTHON), "-m", f"bench.{name}"], cwd=REPO, check=False)
        return
    print(__doc__)
    for name, what in BENCHMARKS:
        print(f"  .venv/bin/python -m bench.{name:<20} {what}")
    print("\nEach takes --help. Measure a fixed commit while src/ is being edited:")
    print("  .venv/bin/python -m bench export HEAD")
    print("  PYTHONPATH=/tmp/punctual-bench-src-<commit>/src .venv/bin/python -m bench.<name>")


if __name__ == "__main__":
    main()
