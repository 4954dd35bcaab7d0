"""A schedule's fields: JSON-shaped input into typed commands, and back (RS-*, API.md
"Schedules").

One table, ``FIELDS``, declares every field an author sets: its name in the API, its
default on a create, its decoder (the field's limits and the contract's error code for
breaking them) and where ``ScheduleSettings`` keeps it. Every way in (HTTP, the CLI's
files over HTTP, the embedded API) decodes through it into ``CreateSchedule``,
``UpdateSchedule`` or ``UpsertByName``, and every way out (the schedule's view, an
upsert's comparison) reads through it: a new field is one entry here and one attribute of
the domain's ``ScheduleSettings``.

Checks that need the store (the workflow's input schema, the name being free) or the
mutation's clock (``check_end_at``, ``check_jitter``, ``settle_spec``) stay with the use
cases, which call the helpers below.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any

from annotated_types import Le, MaxLen, MinLen

from punctual.domain.calendar_timeline import MAX_SPECS, ScheduleSpec, Timing
from punctual.domain.calendars import BusinessCalendar
from punctual.domain.recurrence import IntervalSpec, RecurrenceError
from punctual.domain.schedules import (
    MAX_BLACKOUTS,
    MAX_CATCH_UP_LIMIT,
    Blackout,
    MissedPolicy,
    OverlapPolicy,
    SchedulePolicy,
    ScheduleSettings,
    VersionPolicy,
    blackouts_to_json,
    calendar_from_json,
    calendar_to_json,
    max_jitter_ms,
    spec_from_json,
    spec_to_json,
)
from punctual.domain.timeutil import parse_rfc3339, require_aware, to_rfc3339
from punctual.errors import InvalidRequest
from punctual.usecases.kernel.paging import BIGINT_MAX

MAX_SPAN_MS = 10 * 366 * 86_400_000
"""Ten years: the longest interval, grace or catch-up window (a longer one would overflow
a ``timedelta`` or a column, SPEC FT-7)."""
MAX_SPAN_SECONDS = MAX_SPAN_MS // 1000
NAME_MAX = 200
WORKLOAD_CLASS_MAX = 64
INPUT = "input"
"""The one field outside the table: it is stored encrypted and judged by the workflow's
input schema, so the use cases handle it."""


def _problem(name: str, message: str, kind: str = "value_error") -> InvalidRequest:
    """A refusal of the field ``name`` (``calendar.weekend`` is placed in ``calendar``)."""
    return InvalidRequest(
        f"{name} {message}", errors=[{"loc": ["body", *_place(name)], "msg": message, "type": kind}]
    )


def _text(name: str, value: Any, maximum: int) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= maximum:
        raise _problem(name, f"must be 1 to {maximum} characters", "value")
    return value


def _optional_text(name: str, value: Any, maximum: int) -> str | None:
    return None if value is None else _text(name, value, maximum)


def _whole(name: str, value: Any, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise _problem(name, f"must be a whole number from {minimum} to {maximum}")
    return value


_SPEC_KEYS = {
    "cron": {"cron", "time_zone", "dst_gap", "dst_overlap"},
    "interval_ms": {"interval_ms", "starts_at"},
    "business_day": {"business_day", "at", "time_zone", "dst_gap", "dst_overlap"},
}


def decode_spec(data: Any, name: str = "spec") -> ScheduleSpec:
    """A spec from the API (``name`` is where the body has it, ``specs[1]``); an interval
    without ``starts_at`` keeps it unset until ``settle_timing`` fixes it at the
    mutation's time."""
    loc = ["body", *_place(name)]
    kinds = [kind for kind in _SPEC_KEYS if isinstance(data, Mapping) and kind in data]
    if len(kinds) != 1:
        raise InvalidRequest(
            f"{name} must have exactly one of 'cron' (with an optional 'time_zone'), "
            "'interval_ms', or 'business_day' (with 'at' and 'time_zone')",
            errors=[{"loc": loc, "msg": "cron, interval_ms or business_day", "type": "spec"}],
        )
    unknown = sorted(set(data) - _SPEC_KEYS[kinds[0]])
    if unknown:
        raise InvalidRequest(
            f"{name} does not take {', '.join(unknown)}",
            errors=[{"loc": [*loc, k], "msg": "unknown field", "type": "extra"} for k in unknown],
        )
    interval = data.get("interval_ms")
    if isinstance(interval, int) and interval > MAX_SPAN_MS:
        raise _problem(f"{name}.interval_ms", f"must be whole milliseconds up to {MAX_SPAN_MS}")
    try:
        return spec_from_json(dict(data))
    except RecurrenceError as exc:
        raise _refusal(exc, name) from exc
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(
            f"invalid {name}: {exc}",
            errors=[{"loc": loc, "msg": str(exc), "type": "value_error"}],
        ) from exc


def _place(name: str) -> list[str | int]:
    """``specs[1].at`` as a location: ``["specs", 1, "at"]``."""
    parts: list[str | int] = []
    for part in name.replace("[", ".").replace("]", "").split("."):
        parts.append(int(part) if part.isdigit() else part)
    return parts


def _refusal(exc: RecurrenceError, name: str) -> InvalidRequest:
    """A domain refusal as the API's: a field it names is placed under ``name``."""
    details = dict(exc.details)
    if exc.code == InvalidRequest.code and isinstance(details.get("field"), str):
        place = details["field"]
        if not place.startswith("calendar"):
            place = f"{name}.{place}"
        message = exc.message.split(": ", 1)[-1]
        return InvalidRequest(
            f"{place}: {message}",
            errors=[{"loc": ["body", *_place(place)], "msg": message, "type": "value_error"}],
        )
    return InvalidRequest(exc.message, code=exc.code, **details)


def decode_specs(value: Any) -> tuple[ScheduleSpec, ...]:
    """``specs``: 1 to ``MAX_SPECS`` specs, each judged by ``decode_spec`` in its place."""
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_SPECS:
        raise _problem("specs", f"must be a list of 1 to {MAX_SPECS} specs")
    return tuple(decode_spec(item, f"specs[{index}]") for index, item in enumerate(value))


def decode_calendar(value: Any) -> BusinessCalendar | None:
    """``calendar`` (RS-10), or null for none."""
    if value is None:
        return None
    known = {"holidays", "weekend", "extra_holidays", "extra_workdays", "on_closed_day"}
    if not isinstance(value, Mapping) or set(value) - known:
        raise _problem(
            "calendar",
            "must be {holidays?, weekend?, extra_holidays?, extra_workdays?, on_closed_day?}",
        )
    try:
        return calendar_from_json(value)
    except RecurrenceError as exc:
        raise _refusal(exc, "calendar") from exc
    except ValueError as exc:  # on_closed_day
        raise _problem(
            "calendar.on_closed_day", "must be skip, next_open_day or previous_open_day"
        ) from exc


def _settled(spec: ScheduleSpec, now: datetime) -> ScheduleSpec:
    """An interval without ``starts_at`` starts one interval after ``now`` (RS-1)."""
    if isinstance(spec, IntervalSpec) and spec.starts_at is None:
        return IntervalSpec(spec.interval_ms, now + timedelta(milliseconds=spec.interval_ms))
    return spec


def settle_timing(settings: ScheduleSettings, now: datetime) -> ScheduleSettings:
    """The specs settled at the mutation's time, and the timing they make with the
    calendar walked once, so what only the whole can refuse is refused now (a business
    day with no calendar, a move of an interval, a calendar never open)."""
    settled = replace(settings, specs=tuple(_settled(spec, now) for spec in settings.specs))
    check_timing(settled.timing, now)
    return settled


def check_timing(timing: Timing, now: datetime) -> None:
    """Walk the timing once: what only specs and calendar together can refuse is
    refused by name now, not at the first generation pass."""
    try:
        fires = timing.first_fire_after(now) is not None
    except RecurrenceError as exc:
        raise _refusal(exc, "specs" if len(timing.specs) > 1 else "spec") from exc
    if not fires and timing.calendar is not None:
        raise InvalidRequest(
            "with this calendar the schedule never fires: every instant its specs name falls "
            "on a closed day (open a day they name, or change on_closed_day)",
            code="calendar_never_open",
            year=None,
        )


def decode_timing(body: Mapping[str, Any], now: datetime) -> Timing:
    """``spec`` or ``specs``, and ``calendar``, as a preview takes them: settled at
    ``now`` and checked."""
    _refuse_spec_and_specs(body)
    if "specs" in body:
        specs = decode_specs(body["specs"])
    elif "spec" in body:
        specs = (decode_spec(body["spec"]),)
    else:
        raise InvalidRequest(
            "a preview needs a spec: cron, interval_ms or business_day (or specs)",
            errors=[{"loc": ["query", "spec"], "msg": "required", "type": "missing"}],
        )
    timing = Timing(
        tuple(_settled(spec, now) for spec in specs), decode_calendar(body.get("calendar"))
    )
    check_timing(timing, now)
    return timing


def whole_second(now: datetime) -> datetime:
    """What a spec's defaults count from (an interval's first fire is this plus the
    interval): whole seconds, as Temporal Schedules place interval fires, so a schedule
    fires at the same instants whichever driver fires it."""
    return now.replace(microsecond=0)


def _choice(name: str, enum: type[StrEnum]) -> Callable[[Any], Any]:
    choices = ", ".join(e.value for e in enum)

    def decode(value: Any) -> Any:
        if value is None:
            situation = "when a run is still going" if name == "overlap" else "after downtime"
            raise InvalidRequest(
                f"{name} is required: choose what happens {situation} ({choices})",
                code="policy_required",
                field=name,
            )
        try:
            return enum(value)
        except ValueError:
            raise InvalidRequest(
                f"{name} must be one of {choices}",
                errors=[{"loc": ["body", name], "msg": "not an allowed value", "type": "enum"}],
            ) from None

    return decode


def _version_policy(value: Any) -> VersionPolicy:
    try:
        return VersionPolicy(value)
    except ValueError:
        raise InvalidRequest(
            "version_policy must be active_at_fire or pinned",
            errors=[{"loc": ["body", "version_policy"], "msg": "enum", "type": "enum"}],
        ) from None


def decode_regression(value: Any) -> dict[str, Any] | None:
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


def _end_at(value: Any) -> datetime | None:
    """``end_at`` (RS-9c): an RFC 3339 instant with an offset; ``check_end_at`` judges it
    against the mutation's time."""
    if value is None:
        return None
    try:
        return parse_rfc3339(value) if isinstance(value, str) else require_aware(value)
    except (TypeError, ValueError, AttributeError, OverflowError):
        raise InvalidRequest(
            "end_at must be an RFC 3339 timestamp with an offset, e.g. 2027-01-01T00:00:00Z",
            errors=[
                {"loc": ["body", "end_at"], "msg": "timestamp with offset", "type": "datetime"}
            ],
        ) from None


def check_end_at(end_at: datetime | None, now: datetime) -> None:
    """A new or changed end is not in the past."""
    if end_at is not None and end_at < now:
        raise InvalidRequest(
            f"end_at {to_rfc3339(end_at)} is in the past; a schedule ends in the future",
            code="end_at_in_past",
            end_at=to_rfc3339(end_at),
        )


def _max_occurrences(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BIGINT_MAX:
        raise InvalidRequest(
            "max_occurrences must be a whole number of at least 1 (or null for no limit)",
            errors=[{"loc": ["body", "max_occurrences"], "msg": ">= 1", "type": "value_error"}],
        )
    return value


def _milliseconds(name: str, maximum: int = MAX_SPAN_MS) -> Callable[[Any], timedelta]:
    def decode(value: Any) -> timedelta:
        return timedelta(milliseconds=_whole(name, value, 0, maximum))

    return decode


def _catch_up_window(value: Any) -> timedelta | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _problem("catch_up_window", "must be a positive number of seconds")
    if not 0 < value <= MAX_SPAN_SECONDS:
        raise _problem("catch_up_window", f"must be positive and at most {MAX_SPAN_SECONDS}")
    return timedelta(seconds=value)


def check_jitter(jitter: timedelta, timing: Timing | ScheduleSpec, now: datetime) -> None:
    """``jitter_ms`` (RS-9d): shorter than the smallest gap between the schedule's fires."""
    if not jitter:
        return
    value = jitter // timedelta(milliseconds=1)
    largest = max_jitter_ms(timing, now)
    if value > largest:
        raise InvalidRequest(
            f"jitter_ms {value} is not shorter than the smallest gap between this spec's "
            f"fires over the next 366 days; at most {largest}",
            code="jitter_too_large",
            max_jitter_ms=largest,
            jitter_ms=value,
        )


def _enabled(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequest("enabled must be true or false")
    return value


def _same(value: Any) -> Any:
    return value


def _milliseconds_of(value: timedelta) -> int:
    return value // timedelta(milliseconds=1)


REQUIRED: Any = object()
"""The create default of a field a create must send."""
_TIMEDELTA_MS = timedelta.max // timedelta(milliseconds=1)


@dataclass(frozen=True)
class Field:
    """One field of a schedule as the API names it."""

    name: str
    decode: Callable[[Any], Any]
    """A JSON value into the domain's, or ``InvalidRequest`` with the contract's code."""
    read: Callable[[ScheduleSettings], Any]
    write: Callable[[ScheduleSettings, Any], ScheduleSettings]
    encode: Callable[[Any], Any] = _same
    """The domain's value back into JSON, as the schedule's view shows it."""
    default: Any = REQUIRED
    """What a create takes when the field is omitted."""
    revises: bool = False
    """A ``PATCH`` of it starts a new revision (RS-5b)."""
    kept: bool = False
    """A ``PUT`` that omits it keeps the schedule's own (RS-9e)."""
    json: Any = Any
    """The JSON value a body carries (a type with ``annotated_types`` bounds), as request
    bodies and OpenAPI declare it; ``decode`` stays the judge of what it means."""


def _attribute(name: str, decode: Callable[[Any], Any], **rest: Any) -> Field:
    def write(settings: ScheduleSettings, value: Any) -> ScheduleSettings:
        return replace(settings, **{name: value})

    return Field(name, decode, lambda s: getattr(s, name), write, **rest)


def _policy(name: str, attribute: str, decode: Callable[[Any], Any], **rest: Any) -> Field:
    def write(settings: ScheduleSettings, value: Any) -> ScheduleSettings:
        return replace(settings, policy=replace(settings.policy, **{attribute: value}))

    return Field(name, decode, lambda s: getattr(s.policy, attribute), write, **rest)


def _value(member: StrEnum) -> str:
    return member.value


def _seconds(window: timedelta | None) -> float | None:
    return window.total_seconds() if window is not None else None


def _instant(value: datetime | None) -> str | None:
    return to_rfc3339(value) if value is not None else None


def _pause_until(value: Any) -> datetime | None:
    """An instant with an offset, or null; ``check_pause_until`` holds it to the future."""
    if value is None:
        return None
    try:
        return parse_rfc3339(value) if isinstance(value, str) else require_aware(value)
    except (TypeError, ValueError, AttributeError, OverflowError):
        raise _problem(
            "pause_until", "must be an instant with a UTC offset or Z, or null", "datetime"
        ) from None


def check_pause_until(pause_until: datetime | None, now: datetime) -> None:
    """A pause that would already be over is a mistake, refused by name."""
    if pause_until is not None and pause_until <= now:
        raise _problem(
            "pause_until",
            f"must be in the future (it is {to_rfc3339(pause_until)}, now is "
            f"{to_rfc3339(now)}); to resume now, resume the schedule",
        )


def _start_deadline(value: Any) -> timedelta | None:
    """At least a second: a deadline shorter than that would refuse runs a worker is
    about to begin."""
    if value is None:
        return None
    return timedelta(milliseconds=_whole("start_deadline_ms", value, 1000, MAX_SPAN_MS))


BLACKOUT_REASON_MAX = 200


def _blackout_problem(
    where: tuple[str | int, ...], message: str, kind: str = "value_error"
) -> InvalidRequest:
    """A refusal naming the place in ``blackouts`` (``blackouts[2].to``) and its path."""
    name = "blackouts" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where)
    return InvalidRequest(
        f"{name} {message}",
        errors=[{"loc": ["body", "blackouts", *where], "msg": message, "type": kind}],
    )


def decode_blackouts(value: Any) -> tuple[Blackout, ...]:
    """Up to ``MAX_BLACKOUTS`` windows ``{"from", "to", "reason"?}``: instants with an
    offset, ``from`` before ``to``; sorted here, and two that overlap are refused."""
    if not isinstance(value, list) or len(value) > MAX_BLACKOUTS:
        raise _blackout_problem((), f"must be a list of at most {MAX_BLACKOUTS} windows")
    windows: list[Blackout] = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping) or set(item) - {"from", "to", "reason"}:
            raise _blackout_problem(
                (index,), 'must be {"from": instant, "to": instant, "reason"?: text}'
            )
        bounds: list[datetime] = []
        for bound in ("from", "to"):
            text = item.get(bound)
            try:
                if not isinstance(text, str):
                    raise ValueError(bound)
                bounds.append(require_aware(parse_rfc3339(text)))
            except ValueError:
                raise _blackout_problem(
                    (index, bound), "must be an instant with a UTC offset or Z", "datetime"
                ) from None
        start, end = bounds
        if end <= start:
            raise _blackout_problem((index, "to"), "must be after its from (not reversed)")
        reason = item.get("reason")
        if reason is not None and (
            not isinstance(reason, str) or not 1 <= len(reason) <= BLACKOUT_REASON_MAX
        ):
            raise _blackout_problem(
                (index, "reason"), f"must be 1 to {BLACKOUT_REASON_MAX} characters", "value"
            )
        windows.append(Blackout(start, end, reason))
    windows.sort(key=lambda b: b.start)
    for earlier, later in itertools.pairwise(windows):
        if later.start < earlier.end:
            raise _blackout_problem(
                (),
                f"must not overlap: {to_rfc3339(earlier.start)} to {to_rfc3339(earlier.end)} "
                f"and {to_rfc3339(later.start)} to {to_rfc3339(later.end)}; join them into one",
            )
    return tuple(windows)


Name = Annotated[str, MinLen(1), MaxLen(NAME_MAX)]
Count = Annotated[int, Le(BIGINT_MAX)]

FIELDS: tuple[Field, ...] = (
    _attribute("name", lambda v: _text("name", v, NAME_MAX), json=Name),
    _attribute("workflow", lambda v: _text("workflow", v, NAME_MAX), revises=True, json=Name),
    Field(
        "spec",
        decode_spec,
        lambda s: s.spec,
        lambda s, spec: replace(s, specs=(spec,)),
        encode=spec_to_json,
        default=None,  # required unless ``specs`` is sent (``decode_create``)
        revises=True,
        json=dict[str, Any],
    ),
    Field(
        "specs",
        decode_specs,
        lambda s: s.specs,
        lambda s, specs: replace(s, specs=specs),
        encode=lambda specs: [spec_to_json(spec) for spec in specs],
        default=None,  # not sent: ``spec`` says
        revises=True,
        json=Annotated[list[dict[str, Any]], MinLen(1), MaxLen(MAX_SPECS)],
    ),
    _attribute(
        "calendar",
        decode_calendar,
        encode=calendar_to_json,
        default=None,
        revises=True,
        json=dict[str, Any],
    ),
    _policy(
        "overlap",
        "overlap",
        _choice("overlap", OverlapPolicy),
        encode=_value,
        default=None,
        json=str,
    ),
    _policy(
        "missed", "missed", _choice("missed", MissedPolicy), encode=_value, default=None, json=str
    ),
    _policy(
        "max_catch_up",
        "max_catch_up",
        lambda v: _whole("max_catch_up", v, 1, MAX_CATCH_UP_LIMIT),
        default=10,
        json=Count,
    ),
    _policy(
        "catch_up_window",
        "catch_up_window",
        _catch_up_window,
        encode=_seconds,
        default=None,
        json=Annotated[float, Le(MAX_SPAN_SECONDS)],
    ),
    _policy(
        "misfire_grace_ms",
        "misfire_grace",
        _milliseconds("misfire_grace_ms"),
        encode=_milliseconds_of,
        default=60_000,
        json=Annotated[int, Le(MAX_SPAN_MS)],
    ),
    _attribute("enabled", _enabled, default=True, kept=True, json=bool),
    _attribute(
        "version_policy", _version_policy, encode=_value, default="active_at_fire", json=str
    ),
    _attribute(
        "workload_class",
        lambda v: _text("workload_class", v, WORKLOAD_CLASS_MAX),
        default="standard",
        json=Annotated[str, MinLen(1), MaxLen(WORKLOAD_CLASS_MAX)],
    ),
    _attribute("regression", decode_regression, default=None, json=dict[str, Any]),
    _attribute("end_at", _end_at, encode=_instant, default=None, json=datetime),
    _attribute("max_occurrences", _max_occurrences, default=None, json=Count),
    _policy(
        "jitter_ms",
        "jitter",
        _milliseconds("jitter_ms", _TIMEDELTA_MS),  # check_jitter holds it to the spec's gaps
        encode=_milliseconds_of,
        default=0,
        json=Count,
    ),
    _policy(
        "start_deadline_ms",
        "start_deadline",
        _start_deadline,
        encode=lambda d: None if d is None else _milliseconds_of(d),
        default=None,
        json=Annotated[int, Le(MAX_SPAN_MS)],
    ),
    _policy(
        "blackouts",
        "blackouts",
        decode_blackouts,
        encode=blackouts_to_json,
        default=[],
        json=Annotated[list[dict[str, Any]], MaxLen(MAX_BLACKOUTS)],
    ),
    _attribute(
        "pause_until",
        _pause_until,
        encode=_instant,
        default=None,
        kept=True,
        json=datetime,
    ),
    _attribute(
        "source",
        lambda v: _optional_text("source", v, NAME_MAX),
        default=None,
        kept=True,
        json=Name,
    ),
)
BY_NAME = {f.name: f for f in FIELDS}


def in_body_order() -> Iterator[tuple[str, Any, Any]]:
    """Each field a request body carries as (name, JSON type, create default), in the
    contract's order: ``input`` follows the workflow it feeds."""
    for f in FIELDS:
        yield f.name, f.json, f.default
        if f.name == "workflow":
            yield INPUT, Any, REQUIRED


EDITABLE = frozenset(BY_NAME) | {INPUT}
REVISING = frozenset(f.name for f in FIELDS if f.revises) | {INPUT}
_UNSET = ScheduleSettings(
    name="",
    workflow="",
    specs=(IntervalSpec(60_000),),
    policy=SchedulePolicy(OverlapPolicy.SKIP, MissedPolicy.SKIP),
)
"""Where a create's settings are written into: the table writes every field over it."""


def view_of(settings: ScheduleSettings) -> dict[str, Any]:
    """The settings as the schedule's view shows them (the request's JSON form)."""
    return {f.name: f.encode(f.read(settings)) for f in FIELDS}


@dataclass(frozen=True)
class CreateSchedule:
    settings: ScheduleSettings
    input: Any


@dataclass(frozen=True)
class UpdateSchedule:
    """An edit: the fields it sends, decoded (``input`` as sent)."""

    schedule_id: str
    version: int
    changes: Mapping[str, Any] = field(default_factory=dict)

    def apply(self, settings: ScheduleSettings) -> ScheduleSettings:
        for name, value in self.changes.items():
            if name in BY_NAME:
                settings = BY_NAME[name].write(settings, value)
        return settings


@dataclass(frozen=True)
class UpsertByName:
    """``PUT …/schedules/by-name/{name}``: the schedule as a create of it would make it,
    the fields the body sent (an omitted ``kept`` field keeps the schedule's own), and the
    version the schedule must still be at."""

    create: CreateSchedule
    sent: frozenset[str]
    version: int | None = None


def _refuse_unknown(body: Mapping[str, Any], known: frozenset[str], verb: str) -> None:
    unknown = sorted(set(body) - known)
    if unknown:
        raise InvalidRequest(
            f"these fields cannot be {verb}: {', '.join(unknown)}",
            errors=[{"loc": ["body", k], "msg": "not editable", "type": "extra"} for k in unknown],
        )


def _refuse_spec_and_specs(body: Mapping[str, Any]) -> None:
    """``spec`` means ``specs: [spec]``: a body sends one or the other."""
    if "spec" in body and "specs" in body:
        raise InvalidRequest(
            "send either spec or specs, not both (spec means specs: [spec])",
            errors=[{"loc": ["body", "specs"], "msg": "spec and specs", "type": "value_error"}],
        )


def _decoded(sent: Mapping[str, Any]) -> dict[str, Any]:
    """Each sent field's domain value, in the table's order whatever the body's, so a body
    with several problems always gets the same answer: the first field whose refusal has a
    code of its own (``policy_required``, ``invalid_cron``…) stops it, and plain validation
    problems before it are answered together, each in ``errors``."""
    values: dict[str, Any] = {}
    problems: list[InvalidRequest] = []
    for f in FIELDS:
        if f.name not in sent:
            continue
        try:
            values[f.name] = f.decode(sent[f.name])
        except InvalidRequest as refusal:
            if refusal.code != InvalidRequest.code:
                if not problems:
                    raise
                break
            problems.append(refusal)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise InvalidRequest(
            "; ".join(p.message for p in problems),
            errors=[e for p in problems for e in p.details.get("errors", [])],
        )
    return values


def decode_create(body: Mapping[str, Any]) -> CreateSchedule:
    """A create from the fields sent; an omitted field takes its default, and ``name``,
    ``workflow``, ``input`` and ``spec`` (or ``specs``) are required."""
    missing = [name for name in ("name", "workflow", INPUT) if name not in body]
    if "spec" not in body and "specs" not in body:
        missing.append("spec")
    if missing:
        raise InvalidRequest(
            f"a schedule needs {', '.join(missing)}",
            errors=[{"loc": ["body", f], "msg": "required", "type": "missing"} for f in missing],
        )
    _refuse_unknown(body, EDITABLE, "set")
    _refuse_spec_and_specs(body)
    sent = {f.name: body.get(f.name, f.default) for f in FIELDS}
    del sent["spec" if "specs" in body else "specs"]
    values = _decoded(sent)
    settings = _UNSET
    for f in FIELDS:
        if f.name in values:
            settings = f.write(settings, values[f.name])
    return CreateSchedule(settings, body[INPUT])


def decode_update(schedule_id: str, version: int, body: Mapping[str, Any]) -> UpdateSchedule:
    """An edit of the fields sent; one the table does not know is refused by name."""
    _refuse_unknown(body, EDITABLE, "changed")
    _refuse_spec_and_specs(body)
    changes = _decoded(body)
    if INPUT in body:
        changes[INPUT] = body[INPUT]
    return UpdateSchedule(schedule_id, version, changes)


def decode_upsert(name: str, body: Mapping[str, Any], version: int | None = None) -> UpsertByName:
    """The path names the schedule: a body's ``name`` may only repeat it."""
    sent_name = body.get("name")
    if sent_name is not None and sent_name != name:
        raise InvalidRequest(
            "the body's name differs from the name in the path; omit it or send the same",
            errors=[{"loc": ["body", "name"], "msg": "differs from the path", "type": "value"}],
        )
    return UpsertByName(decode_create({**body, "name": name}), frozenset(body), version)
