"""The comparison rules of follow-through (SPEC CR-4; the rules are in domain/followthrough.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from punctual.domain.followthrough import (
    FollowThroughStatus,
    MetricRule,
    judge,
    metric_value,
    policy_rules,
    regressed,
    regression_text,
)

SCORE = MetricRule("metrics.score", "higher", 0.05)
LATENCY = MetricRule("latency_ms", "lower", 10)


def verdict(rules: list[MetricRule], current: Any, previous: Any, state: str = "completed"):
    return judge(rules, state, current, previous, has_baseline=True)


# ----------------------------------------------------------------------------- metric paths


@pytest.mark.parametrize(
    ("result", "path", "expected"),
    [
        ({"metrics": {"score": 0.9}}, "metrics.score", 0.9),
        ({"metrics": {"score": 3}}, "metrics.score", 3),
        ({"scores": [1, 2.5]}, "scores.1", 2.5),
        ({"a": {"b": {"c": -1}}}, "a.b.c", -1),
    ],
)
def test_a_metric_is_read_by_its_dotted_path(result: Any, path: str, expected: float) -> None:
    assert metric_value(result, path) == expected


@pytest.mark.parametrize(
    "result",
    [
        None,
        {},
        {"metrics": {}},
        {"metrics": {"score": "0.9"}},
        {"metrics": {"score": True}},
        {"metrics": {"score": None}},
        {"metrics": {"score": [0.9]}},
        {"metrics": {"score": float("nan")}},
        {"metrics": {"score": float("inf")}},
        {"metrics": 0.9},
        {"metrics": ["score"]},
        "metrics.score",
    ],
)
def test_a_missing_or_non_numeric_metric_has_no_value(result: Any) -> None:
    assert metric_value(result, "metrics.score") is None


def test_a_list_index_out_of_range_has_no_value() -> None:
    assert metric_value({"scores": [1]}, "scores.3") is None
    assert metric_value({"scores": [1]}, "scores.x") is None


# ----------------------------------------------------------------------------- tolerance


def test_exactly_at_the_tolerance_is_not_a_regression() -> None:
    # 0.9 - 0.85 is 0.05000000000000004 in binary floating point: decimal says 0.05.
    assert not regressed(SCORE, 0.9, 0.85)
    assert regressed(SCORE, 0.9, 0.8499)
    assert not regressed(LATENCY, 100, 110)
    assert regressed(LATENCY, 100, 110.001)


def test_higher_is_better_regresses_only_downwards() -> None:
    assert verdict([SCORE], {"metrics": {"score": 2.0}}, {"metrics": {"score": 0.1}}).status is (
        FollowThroughStatus.OK
    )
    bad = verdict([SCORE], {"metrics": {"score": 0.7}}, {"metrics": {"score": 0.9}})
    assert bad.status is FollowThroughStatus.REGRESSED
    assert [r.as_dict() for r in bad.regressions] == [
        {
            "path": "metrics.score",
            "previous": 0.9,
            "current": 0.7,
            "better": "higher",
            "tolerance": 0.05,
        }
    ]


def test_lower_is_better_regresses_only_upwards() -> None:
    assert verdict([LATENCY], {"latency_ms": 5}, {"latency_ms": 500}).status is (
        FollowThroughStatus.OK
    )
    assert verdict([LATENCY], {"latency_ms": 111}, {"latency_ms": 100}).status is (
        FollowThroughStatus.REGRESSED
    )


def test_several_metrics_report_every_regression() -> None:
    rules = [SCORE, LATENCY, MetricRule("recall", "higher", 0.0)]
    previous = {"metrics": {"score": 0.9}, "latency_ms": 100, "recall": 0.5}
    current = {"metrics": {"score": 0.5}, "latency_ms": 200, "recall": 0.5}
    found = verdict(rules, current, previous)
    assert found.status is FollowThroughStatus.REGRESSED
    assert [r.path for r in found.regressions] == ["metrics.score", "latency_ms"]
    text = regression_text("nightly-scores", found.regressions)
    assert text.startswith("Schedule nightly-scores regressed: metrics.score 0.9 → 0.5")
    assert "latency_ms 100 → 200" in text


# ----------------------------------------------------------------------------- not comparable


def test_no_policy_is_recorded_as_such() -> None:
    assert judge([], "failed", None, None, has_baseline=False).status is (
        FollowThroughStatus.NO_POLICY
    )
    assert policy_rules(None) == []
    assert policy_rules({"metrics": [{"path": "x", "better": "lower"}]}) == [
        MetricRule("x", "lower", 0.0)
    ]


@pytest.mark.parametrize("state", ["failed", "canceled", "terminated", "timed_out"])
def test_a_run_that_did_not_complete_is_not_comparable(state: str) -> None:
    found = verdict([SCORE], {"metrics": {"score": 0.1}}, {"metrics": {"score": 0.9}}, state)
    assert found.status is FollowThroughStatus.NOT_COMPARABLE
    assert found.reason == f"the run ended {state}, not completed"
    assert found.regressions == []


def test_without_an_earlier_completed_run_nothing_is_compared() -> None:
    found = judge([SCORE], "completed", {"metrics": {"score": 0.1}}, None, has_baseline=False)
    assert found.status is FollowThroughStatus.NOT_COMPARABLE
    assert found.reason is not None and "no earlier occurrence" in found.reason


@pytest.mark.parametrize(
    ("current", "previous", "which"),
    [
        ({}, {"metrics": {"score": 0.9}}, "this run's"),
        ({"metrics": {"score": 0.1}}, {"metrics": {"score": "high"}}, "the previous run's"),
    ],
)
def test_a_metric_missing_in_either_run_means_no_alert(
    current: Any, previous: Any, which: str
) -> None:
    found = verdict([LATENCY, SCORE], {**current, "latency_ms": 999}, {**previous, "latency_ms": 1})
    # latency regressed, but score cannot be compared: no alert at all (CR-4).
    assert found.status is FollowThroughStatus.NOT_COMPARABLE
    assert (
        found.reason == f"metric 'metrics.score' is missing from {which} result or is not a number"
    )


# ----------------------------------------------------------------------------- properties

numbers = st.one_of(
    st.integers(min_value=-(10**9), max_value=10**9),
    st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False),
)
tolerances = st.one_of(
    st.integers(min_value=0, max_value=10**6),
    st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False),
)


@given(previous=numbers, current=numbers, tolerance=tolerances)
def test_higher_and_lower_are_mirror_images(
    previous: float, current: float, tolerance: float
) -> None:
    higher = MetricRule("m", "higher", tolerance)
    lower = MetricRule("m", "lower", tolerance)
    assert regressed(higher, previous, current) == regressed(lower, -previous, -current)


@given(previous=numbers, tolerance=tolerances)
def test_no_change_never_regresses(previous: float, tolerance: float) -> None:
    for better in ("higher", "lower"):
        assert not regressed(MetricRule("m", better, tolerance), previous, previous)


@given(previous=numbers, current=numbers, tolerance=tolerances)
def test_a_regression_is_never_an_improvement(
    previous: float, current: float, tolerance: float
) -> None:
    if regressed(MetricRule("m", "higher", tolerance), previous, current):
        assert current < previous
    if regressed(MetricRule("m", "lower", tolerance), previous, current):
        assert current > previous


@given(previous=numbers, current=numbers, small=tolerances, extra=tolerances)
def test_a_larger_tolerance_never_adds_a_regression(
    previous: float, current: float, small: float, extra: float
) -> None:
    large = small + extra
    for better in ("higher", "lower"):
        if regressed(MetricRule("m", better, large), previous, current):
            assert regressed(MetricRule("m", better, small), previous, current)


@given(value=numbers, key=st.text(alphabet="abcxyz_", min_size=1, max_size=8))
def test_a_number_at_a_path_is_found_and_judged(value: float, key: str) -> None:
    result = {"outer": {key: value}}
    assert metric_value(result, f"outer.{key}") == value
    found = verdict([MetricRule(f"outer.{key}", "higher", 0)], result, result)
    assert found.status is FollowThroughStatus.OK
