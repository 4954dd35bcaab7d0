"""Follow-through: how a run's result compares with the previous completed run (CR-4).

Pure rules, decided here once for both engines and every path that ends a run:

- A metric is read from the run's result by a dotted path (``metrics.score``; a segment
  of digits indexes a list). It must be a finite number; ``true``/``false`` are not numbers.
- ``tolerance`` is absolute, in the metric's own unit. With ``better = "higher"`` the run
  regressed when ``current < previous - tolerance``; with ``"lower"`` when
  ``current > previous + tolerance``. A change of exactly the tolerance is not a
  regression. The arithmetic is decimal on the numbers as written, so ``0.9 → 0.85`` with
  tolerance ``0.05`` is exactly at the tolerance (binary floating point would call it a
  hair more).
- Either run not comparable (the run did not complete, no earlier completed run, a metric
  missing or not a number in either result) means no alert, and the reason is recorded.
  Every metric that regressed is reported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any


class FollowThroughStatus(StrEnum):
    OK = "ok"
    REGRESSED = "regressed"
    NOT_COMPARABLE = "not_comparable"
    NO_POLICY = "no_policy"
    FINALIZE_TIMED_OUT = "finalize_timed_out"


@dataclass(frozen=True)
class MetricRule:
    path: str
    better: str  # "higher" | "lower"
    tolerance: float


@dataclass(frozen=True)
class Regression:
    path: str
    previous: float
    current: float
    better: str
    tolerance: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    status: FollowThroughStatus
    reason: str | None = None
    regressions: list[Regression] = field(default_factory=list)
    previous_run_id: str | None = None
    """The baseline compared with, when there was one."""


def policy_rules(policy: Mapping[str, Any] | None) -> list[MetricRule]:
    """The rules of a stored policy (validated when the schedule was written)."""
    if not policy:
        return []
    return [
        MetricRule(str(m["path"]), str(m["better"]), float(m.get("tolerance", 0.0)))
        for m in policy.get("metrics", [])
    ]


_MISSING = object()


def metric_value(result: Any, path: str) -> float | None:
    """The finite number at ``path`` in ``result``, or None when absent or not a number."""
    value: Any = result
    for segment in path.split("."):
        if isinstance(value, Mapping):
            value = value.get(segment, _MISSING)
        elif isinstance(value, Sequence) and not isinstance(value, str) and segment.isdigit():
            index = int(segment)
            value = value[index] if index < len(value) else _MISSING
        else:
            return None
        if value is _MISSING:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _exact(number: float) -> Decimal:
    """The decimal a person wrote: ``0.85`` is 0.85, not its binary neighbour."""
    return Decimal(repr(number)) if isinstance(number, float) else Decimal(number)


def regressed(rule: MetricRule, previous: float, current: float) -> bool:
    """Strictly worse than ``previous`` by more than the tolerance."""
    worsening = _exact(previous) - _exact(current)
    if rule.better == "lower":
        worsening = -worsening
    return worsening > _exact(rule.tolerance)


def judge(
    rules: Sequence[MetricRule],
    run_state: str,
    result: Any,
    baseline_result: Any,
    *,
    has_baseline: bool,
) -> Verdict:
    """The follow-through of a run that ended in ``run_state`` with ``result``, against the
    previous completed run's result (``has_baseline`` False when there is none)."""
    if not rules:
        return Verdict(FollowThroughStatus.NO_POLICY)
    if run_state != "completed":
        return Verdict(
            FollowThroughStatus.NOT_COMPARABLE, f"the run ended {run_state}, not completed"
        )
    if not has_baseline:
        return Verdict(
            FollowThroughStatus.NOT_COMPARABLE,
            "no earlier occurrence of this schedule has a completed run to compare with",
        )
    found: list[Regression] = []
    for rule in rules:
        current = metric_value(result, rule.path)
        previous = metric_value(baseline_result, rule.path)
        for value, which in ((current, "this run's"), (previous, "the previous run's")):
            if value is None:
                return Verdict(
                    FollowThroughStatus.NOT_COMPARABLE,
                    f"metric {rule.path!r} is missing from {which} result or is not a number",
                )
        assert current is not None and previous is not None
        if regressed(rule, previous, current):
            found.append(Regression(rule.path, previous, current, rule.better, rule.tolerance))
    if found:
        return Verdict(FollowThroughStatus.REGRESSED, None, found)
    return Verdict(FollowThroughStatus.OK)


def regression_text(schedule_name: str, regressions: Sequence[Regression]) -> str:
    """One line a person can read in a chat channel."""
    parts = [
        f"{r.path} {_number(r.previous)} → {_number(r.current)} "
        f"({r.better} is better, tolerance {_number(r.tolerance)})"
        for r in regressions
    ]
    return f"Schedule {schedule_name} regressed: " + "; ".join(parts)


def _number(value: float) -> str:
    return repr(value) if isinstance(value, float) else str(value)
