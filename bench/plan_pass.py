"""The pure cost of one generation pass (``plan_occurrences``) for the timings a schedule
may have: a plain interval and a plain cron (the hot path of thousands of one-second
schedules), and several specs with a business calendar (RS-10). No store, no process:
what the planning itself costs a runner per due schedule.

Each case plans ``--passes`` consecutive passes one second apart, as a runner does for a
schedule due every second, ``--runs`` times; the figure is microseconds per pass, median
[min-max]. Compare commits side by side with ``python -m bench export REV``::

    .venv/bin/python -m bench.plan_pass
    PYTHONPATH=/tmp/punctual-bench-src-<commit>/src .venv/bin/python -m bench.plan_pass
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import Spread, print_machine, print_table
from punctual.domain import schedules
from punctual.domain.recurrence import CronSpec, IntervalSpec
from punctual.domain.schedules import MissedPolicy, OverlapPolicy, SchedulePolicy

T0 = datetime(2026, 12, 1, tzinfo=UTC)
POLICY = SchedulePolicy(OverlapPolicy.ALLOW_ALL, MissedPolicy.CATCH_UP)
LOOKAHEAD = timedelta(seconds=2)


def _cases() -> dict[str, Any]:
    cases: dict[str, Any] = {
        "1 s interval": IntervalSpec(1000, T0),
        "minutely cron": CronSpec("* * * * *"),
    }
    timing = getattr(schedules, "Timing", None)  # absent in commits before several specs
    if timing is not None:
        from punctual.domain.calendar_timeline import BusinessDaySpec
        from punctual.domain.calendars import BusinessCalendar

        calendar = BusinessCalendar.of(holidays=[("DE", "BY")])
        payroll = BusinessDaySpec(-1, datetime(2026, 1, 1, 17, 30).time(), "Europe/Berlin")
        cases["2 specs + calendar"] = timing((CronSpec("* * * * *"), payroll), calendar)
    return cases


def _per_pass(when: Any, passes: int) -> float:
    cursor = T0
    started = time.perf_counter()
    for second in range(1, passes + 1):
        now = T0 + timedelta(seconds=second)
        plan = schedules.plan_occurrences(when, POLICY, cursor, now, 100, LOOKAHEAD)
        cursor = plan.cursor
    return (time.perf_counter() - started) / passes * 1e6


def main(argv: list[str] | None = None) -> dict[str, Spread]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    print_machine("plan_occurrences, µs per pass")
    measure: Callable[[Any], float] = lambda when: _per_pass(when, args.passes)  # noqa: E731
    figures = {
        name: Spread.of([measure(when) for _ in range(args.runs)])
        for name, when in _cases().items()
    }
    print_table(["timing", "µs per pass"], [[name, s.fmt(1)] for name, s in figures.items()])
    return figures


if __name__ == "__main__":
    main()
