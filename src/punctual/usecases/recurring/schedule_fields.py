"""A schedule's fields from JSON-shaped input into domain values (RS-*, API.md "Schedules").

One decoder for every way in (HTTP, the operator page, the CLI's files, the embedded
API): each field's limits and the contract's error code for breaking them live here, so no
caller can skip them. Checks that need the store (the workflow's input schema, the name
being free) stay with the use cases.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from punctual.domain.recurrence import IntervalSpec, RecurrenceError, RecurrenceSpec
from punctual.domain.schedules import (
    MAX_CATCH_UP_LIMIT,
    MissedPolicy,
    OverlapPolicy,
    SchedulePolicy,
    VersionPolicy,
    max_jitter_ms,
    spec_from_json,
)
from punctual.domain.timeutil import parse_rfc3339, require_aware, to_rfc3339
from punctual.errors import InvalidRequest


def parse_spec(data: dict[str, Any], now: datetime) -> RecurrenceSpec:
    """A spec from the API; an interval without ``starts_at`` starts one interval from now."""
    if not isinstance(data, dict) or ("cron" in data) == ("interval_ms" in data):
        raise InvalidRequest(
            "spec must have either 'cron' (with an optional 'time_zone') or 'interval_ms'",
            errors=[{"loc": ["body", "spec"], "msg": "cron or interval_ms", "type": "spec"}],
        )
    allowed = (
        {"cron", "time_zone", "dst_gap", "dst_overlap"}
        if "cron" in data
        else {"interval_ms", "starts_at"}
    )
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InvalidRequest(
            f"spec does not take {', '.join(unknown)}",
            errors=[
                {"loc": ["body", "spec", k], "msg": "unknown field", "type": "extra"}
                for k in unknown
            ],
        )
    try:
        spec = spec_from_json(data)
    except RecurrenceError as exc:
        raise InvalidRequest(exc.message, code=exc.code, **exc.details) from exc
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(
            f"invalid spec: {exc}",
            errors=[{"loc": ["body", "spec"], "msg": str(exc), "type": "value_error"}],
        ) from exc
    if isinstance(spec, IntervalSpec) and spec.starts_at is None:
        spec = IntervalSpec(spec.interval_ms, now + timedelta(milliseconds=spec.interval_ms))
    return spec


def _choice(name: str, value: Any, enum: type[Any]) -> Any:
    if value is None:
        raise InvalidRequest(
            f"{name} is required: choose what happens "
            + ("when a run is still going" if name == "overlap" else "after downtime")
            + f" ({', '.join(e.value for e in enum)})",
            code="policy_required",
            field=name,
        )
    try:
        return enum(value)
    except ValueError:
        raise InvalidRequest(
            f"{name} must be one of {', '.join(e.value for e in enum)}",
            errors=[{"loc": ["body", name], "msg": "not an allowed value", "type": "enum"}],
        ) from None


def parse_policy(values: dict[str, Any]) -> SchedulePolicy:
    overlap = _choice("overlap", values.get("overlap"), OverlapPolicy)
    missed = _choice("missed", values.get("missed"), MissedPolicy)
    max_catch_up = values.get("max_catch_up", 10)
    window = values.get("catch_up_window")
    grace = values.get("misfire_grace_ms", 60_000)
    problems = []
    if not isinstance(max_catch_up, int) or not 1 <= max_catch_up <= MAX_CATCH_UP_LIMIT:
        problems.append(("max_catch_up", f"must be a whole number from 1 to {MAX_CATCH_UP_LIMIT}"))
    if window is not None and (not isinstance(window, int | float) or window <= 0):
        problems.append(("catch_up_window", "must be a positive number of seconds"))
    if not isinstance(grace, int) or grace < 0:
        problems.append(("misfire_grace_ms", "must be a whole number of milliseconds >= 0"))
    if problems:
        raise InvalidRequest(
            "; ".join(f"{name} {msg}" for name, msg in problems),
            errors=[{"loc": ["body", n], "msg": m, "type": "value_error"} for n, m in problems],
        )
    return SchedulePolicy(
        overlap=overlap,
        missed=missed,
        max_catch_up=max_catch_up,
        catch_up_window=timedelta(seconds=window) if window is not None else None,
        misfire_grace=timedelta(milliseconds=grace),
    )


def parse_regression(value: Any) -> dict[str, Any] | None:
    """``{"metrics": [{"path", "better": higher|lower, "tolerance" >= 0}]}`` or null."""
    if value is None:
        return None
    try:
        metrics = value["metrics"]
        assert isinstance(metrics, list) and metrics
        cleaned = []
        for metric in metrics:
            assert isinstance(metric["path"], str) and metric["path"]
            assert metric["better"] in ("higher", "lower")
            tolerance = float(metric.get("tolerance", 0.0))
            assert tolerance >= 0
            cleaned.append(
                {"path": metric["path"], "better": metric["better"], "tolerance": tolerance}
            )
    except (AssertionError, KeyError, TypeError, ValueError):
        raise InvalidRequest(
            "regression must be {'metrics': [{'path': 'metrics.score', 'better': 'higher' or "
            "'lower', 'tolerance': number >= 0}, ...]}",
            errors=[{"loc": ["body", "regression"], "msg": "invalid policy", "type": "value"}],
        ) from None
    return {"metrics": cleaned}


def parse_version_policy(value: Any) -> VersionPolicy:
    try:
        return VersionPolicy(value)
    except ValueError:
        raise InvalidRequest(
            "version_policy must be active_at_fire or pinned",
            errors=[{"loc": ["body", "version_policy"], "msg": "enum", "type": "enum"}],
        ) from None


def parse_end_at(value: Any, now: datetime | None) -> datetime | None:
    """``end_at`` (RS-9c): an RFC 3339 instant with an offset, not before ``now`` (when
    given: a new or changed end)."""
    if value is None:
        return None
    try:
        end_at = parse_rfc3339(value) if isinstance(value, str) else require_aware(value)
    except (TypeError, ValueError, AttributeError, OverflowError):
        raise InvalidRequest(
            "end_at must be an RFC 3339 timestamp with an offset, e.g. 2027-01-01T00:00:00Z",
            errors=[
                {"loc": ["body", "end_at"], "msg": "timestamp with offset", "type": "datetime"}
            ],
        ) from None
    if now is not None and end_at < now:
        raise InvalidRequest(
            f"end_at {to_rfc3339(end_at)} is in the past; a schedule ends in the future",
            code="end_at_in_past",
            end_at=to_rfc3339(end_at),
        )
    return end_at


def parse_max_occurrences(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequest(
            "max_occurrences must be a whole number of at least 1 (or null for no limit)",
            errors=[{"loc": ["body", "max_occurrences"], "msg": ">= 1", "type": "value_error"}],
        )
    return value


def parse_jitter(value: Any, spec: RecurrenceSpec, now: datetime) -> timedelta:
    """``jitter_ms`` (RS-9d): shorter than the smallest gap between the spec's fires."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequest(
            "jitter_ms must be a whole number of milliseconds >= 0",
            errors=[{"loc": ["body", "jitter_ms"], "msg": ">= 0", "type": "value_error"}],
        )
    if value == 0:
        return timedelta(0)
    largest = max_jitter_ms(spec, now)
    if value > largest:
        raise InvalidRequest(
            f"jitter_ms {value} is not shorter than the smallest gap between this spec's "
            f"fires over the next 366 days; at most {largest}",
            code="jitter_too_large",
            max_jitter_ms=largest,
            jitter_ms=value,
        )
    return timedelta(milliseconds=value)


def parse_source(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= 200:
        raise InvalidRequest(
            "source must be 1 to 200 characters (the name of a file of schedules)",
            errors=[{"loc": ["body", "source"], "msg": "1..200 characters", "type": "value"}],
        )
    return value


def whole_second(now: datetime) -> datetime:
    """What a spec's defaults count from (an interval's first fire is this plus the
    interval): whole seconds, as Temporal Schedules place interval fires, so a schedule
    fires at the same instants whichever driver fires it."""
    return now.replace(microsecond=0)


def parse_name(name: Any) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 200:
        raise InvalidRequest("name must be 1 to 200 characters")
    return name
