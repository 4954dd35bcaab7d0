"""A chaos run by hand: ``python -m tests.chaos --minutes 30 --seed N --variant postgres``.

Prints the seed and the command that reruns it first and last; exits 1 when the checker
found a violation, 0 otherwise. The run's records stay in ``--dir`` (a new temporary
directory by default) for reading.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

from tests.chaos.deployment import VARIANTS
from tests.chaos.run import execute, long_plan, short_plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument(
        "--minutes", type=float, default=10.0, help="how long the load and faults last"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="default: a new random seed (printed)"
    )
    parser.add_argument("--variant", choices=VARIANTS, default="postgres")
    parser.add_argument("--dir", type=Path, default=None, help="where the run's records go")
    parser.add_argument(
        "--short", action="store_true", help="the test suite's short run (ignores --minutes)"
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**9)
    directory = args.dir or Path(tempfile.mkdtemp(prefix=f"punctual-chaos-{args.variant}-{seed}-"))
    plan = (
        short_plan(args.variant, seed)
        if args.short
        else long_plan(args.variant, seed, args.minutes)
    )
    report = execute(plan, directory)
    print(f"records and report in {directory}")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
