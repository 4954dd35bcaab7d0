"""When a recurring schedule fires: cron and interval arithmetic with punctual's DST policy.

A cron expression names *local wall-clock times*; a schedule fires at *instants*. Twice a
year in most zones the two disagree: a wall time does not exist (the spring gap) or exists
twice (the autumn overlap). This module is the one place that decides what happens then
(SPEC RS-2, ``docs/dst-policy.md``), so the answer does not depend on which library finds
candidate times. cronsim is used only to list the wall times an expression matches, in a
zone-less calendar; mapping each wall time to zero, one or two instants is done here:

- *fixed-time* expressions (neither the minute nor the hour field starts with ``*``):
  a wall time in a gap fires once at the first instant after the gap (``gap_shifted``) or,
  with ``dst_gap=skip``, not at all (``gap_skipped``); a repeated wall time fires at its
  first pass (``dst_overlap=first``), its second pass (``last``, ``overlap_second``) or
  both (``both``);
- *wildcard* expressions (minute or hour starts with ``*``) fire at every real instant
  whose wall time matches: both passes of a repeated hour, nothing for missing times;
- wall times that resolve to the same instant fire once;
- intervals count elapsed time and never look at a zone.

Everything here is pure: instants are passed in (timezone-aware) and come out in UTC.
Zones come from the packaged ``tzdata`` only, never the host's files, so every process
computes the same instants (``tzdata_version()`` says which data that is).

Errors, each with a stable ``code`` the HTTP edge turns into a 422::

    RecurrenceError (ValueError)
    ├── InvalidCron           invalid_cron        details: field
    ├── UnknownTimeZone       unknown_time_zone   details: time_zone
    └── IntervalTooShort      interval_too_short  details: interval_ms, minimum_ms
"""

from __future__ import annotations

import enum
import functools
import heapq
import importlib
import importlib.resources
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

__all__ = [
    "MIN_INTERVAL_MS",
    "CronSpec",
    "DstAdjustment",
    "DstGap",
    "DstOverlap",
    "DstSkip",
    "Fire",
    "IntervalSpec",
    "IntervalTooShort",
    "InvalidCron",
    "RecurrenceError",
    "RecurrenceSpec",
    "UnknownTimeZone",
    "count_fires_between",
    "fires_between",
    "iter_fires",
    "iter_timeline",
    "load_zone",
    "next_fires",
    "resolve_wall_time",
    "skipped_by_dst",
    "tzdata_version",
    "utc_instant",
    "utc_offset",
]

MIN_INTERVAL_MS = 1000

# ---------------------------------------------------------------------------------------
# Errors


class RecurrenceError(ValueError):
    """A schedule spec that cannot be accepted; ``code`` is the API error code."""

    code = "invalid_schedule_spec"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def __str__(self) -> str:
        return self.message


class InvalidCron(RecurrenceError):
    """The cron expression is outside the supported grammar; ``field`` says where."""

    code = "invalid_cron"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"invalid cron {field}: {message}", field=field)
        self.field = field


class UnknownTimeZone(RecurrenceError):
    """The name is not an IANA zone in the packaged tzdata."""

    code = "unknown_time_zone"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'",
            time_zone=name,
        )
        self.name = name


class IntervalTooShort(RecurrenceError):
    """An interval below the minimum (``MIN_INTERVAL_MS``)."""

    code = "interval_too_short"

    def __init__(self, interval_ms: int) -> None:
        super().__init__(
            f"interval_ms {interval_ms} is below the minimum of {MIN_INTERVAL_MS} ms",
            interval_ms=interval_ms,
            minimum_ms=MIN_INTERVAL_MS,
        )
        self.interval_ms = interval_ms


# ---------------------------------------------------------------------------------------
# Policies


class DstGap(enum.StrEnum):
    """What a fixed-time expression does when its wall time falls in a DST gap."""

    SHIFT_TO_GAP_END = "shift_to_gap_end"
    """Fire once at the first instant after the gap (cron lineage default)."""

    SKIP = "skip"
    """Do not fire for that wall time; the skip is reported as ``gap_skipped``."""


class DstOverlap(enum.StrEnum):
    """What a fixed-time expression does when its wall time occurs twice."""

    FIRST = "first"
    """Fire only at the first pass (the earlier instant, ``fold=0``); the default."""

    LAST = "last"
    """Fire only at the second pass (the later instant, ``fold=1``)."""

    BOTH = "both"
    """Fire at both passes (literal wall-clock matching)."""


class DstAdjustment(enum.StrEnum):
    """How an occurrence's instant relates to the wall time the expression named."""

    GAP_SHIFTED = "gap_shifted"
    """The wall time did not exist; the fire moved to the first instant after the gap."""

    GAP_SKIPPED = "gap_skipped"
    """The wall time did not exist and nothing fired for it (reported, never fired)."""

    OVERLAP_SECOND = "overlap_second"
    """The wall time occurred twice and this is its second pass (the later instant)."""


# ---------------------------------------------------------------------------------------
# Time zones from the packaged tzdata


@functools.cache
def _zone_names() -> frozenset[str]:
    listing = importlib.resources.files("tzdata").joinpath("zones").read_text("utf-8")
    return frozenset(line.strip() for line in listing.splitlines() if line.strip())


# A second guard besides the package's own listing: no path tricks can reach open().
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")


@functools.lru_cache(maxsize=512)
def load_zone(name: str) -> ZoneInfo:
    """The IANA zone ``name`` built from the packaged ``tzdata``, never the host's files.

    Raises ``UnknownTimeZone`` for anything that is not a zone listed by that package.
    The same object is returned for the same name.
    """
    if not _ZONE_NAME.fullmatch(name) or name not in _zone_names():
        raise UnknownTimeZone(name)
    resource = importlib.resources.files("tzdata.zoneinfo").joinpath(*name.split("/"))
    try:
        with resource.open("rb") as stream:
            return ZoneInfo.from_file(stream, key=name)
    except (OSError, ValueError) as exc:
        raise UnknownTimeZone(name) from exc


def tzdata_version() -> str:
    """The IANA release of the packaged time-zone data (e.g. ``2025b``), for health."""
    version = getattr(importlib.import_module("tzdata"), "IANA_VERSION", None)
    return str(version) if version is not None else "unknown"


# ---------------------------------------------------------------------------------------
# Cron grammar


_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    first_name_value: int = 0


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, _MONTH_NAMES, 1),
    _Field("day-of-week", 0, 7, _DAY_NAMES, 0),
)
_CRONSIM_FIELDS = {f"Bad {field.name}": field.name for field in _FIELDS}
# Quartz/cronie extensions we refuse by name: last day (L, 5L), weekday (15W, LW),
# nth weekday (1#2) and "no value" (?).
_EXTENSION = re.compile(r"\d*L|\d*W|LW|.*#.*|.*\?.*")
_TERM = re.compile(r"(?P<range>\*|(?P<a>[^-/]+)(?:-(?P<b>[^-/]+))?)(?:/(?P<step>[^/]*))?")


@dataclass(frozen=True, slots=True)
class _CompiledCron:
    expression: str  # five upper-case fields, single-spaced, macros expanded
    fixed_time: bool


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()  # str.isdigit alone accepts "²" and "٣"


def _check_value(field: _Field, text: str) -> int:
    if _is_number(text):
        value = int(text)
        if not field.low <= value <= field.high:
            raise InvalidCron(field.name, f"{value} is out of range {field.low}-{field.high}")
        return value
    if field.names and text in field.names:
        return field.names.index(text) + field.first_name_value
    if _EXTENSION.fullmatch(text):
        raise InvalidCron(
            field.name, f"{text!r} uses an extension (L, W, #, ?) that is not supported"
        )
    if text.isalpha():
        expected = f"; expected a number or one of {', '.join(field.names)}" if field.names else ""
        raise InvalidCron(field.name, f"unknown name {text!r}{expected}")
    raise InvalidCron(field.name, f"{text!r} is not a number")


def _check_field(field: _Field, text: str) -> str:
    """Validate one field; return it as handed to cronsim."""
    terms = []
    for term in text.split(","):
        if term == "":
            raise InvalidCron(field.name, f"empty list item in {text!r}")
        match = _TERM.fullmatch(term)
        if match is None:
            raise InvalidCron(field.name, f"{term!r} is not a value, range or step")
        step = match["step"]
        if step is not None and not (_is_number(step) and int(step) >= 1):
            raise InvalidCron(field.name, f"step {step!r} must be a whole number of at least 1")
        if match["range"] == "*":
            terms.append(term)
            continue
        start = _check_value(field, match["a"])
        if match["b"] is None:
            if step is not None:
                # Vixie/Debian cron refuse "5/10"; later crons disagree on its meaning.
                raise InvalidCron(
                    field.name,
                    f"{term!r}: a step needs '*' or a range before it (e.g. {match['a']}-"
                    f"{field.high}/{step})",
                )
            terms.append(term)
            continue
        end = _check_value(field, match["b"])
        if end < start:
            raise InvalidCron(field.name, f"range {match['range']!r} runs backwards")
        # cronsim reads a one-value range with a step ("2-2/1") like "2/1", i.e. 2 to the
        # field's maximum; in cron it is just that one value.
        terms.append(match["a"] if end == start else term)
    return ",".join(terms)


@functools.lru_cache(maxsize=1024)
def _compile(expression: str) -> _CompiledCron:
    text = expression.strip()
    if not text:
        raise InvalidCron("expression", "the expression is empty")
    if text.startswith("@"):
        expanded = _MACROS.get(text.lower())
        if expanded is None:
            raise InvalidCron(
                "expression",
                f"unknown macro {text!r}; supported: {', '.join(sorted(_MACROS))}",
            )
        text = expanded
    parts = text.upper().split()
    if len(parts) != len(_FIELDS):
        hint = " (a seconds field is not supported)" if len(parts) == 6 else ""
        raise InvalidCron(
            "expression",
            f"expected 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(parts)}{hint}",
        )
    normalized = " ".join(
        _check_field(field, part) for field, part in zip(_FIELDS, parts, strict=True)
    )
    try:
        CronSim(normalized, datetime(2000, 1, 1))
    except CronSimError as exc:
        # Our checks above leave cronsim one complaint: a day-of-month that none of the
        # months has (``31 2``), which would never fire.
        name = _CRONSIM_FIELDS.get(str(exc), "expression")
        raise InvalidCron(name, f"no date matches {normalized!r}: the day never occurs") from exc
    return _CompiledCron(
        expression=normalized,
        fixed_time=not parts[0].startswith("*") and not parts[1].startswith("*"),
    )


# ---------------------------------------------------------------------------------------
# Specs and results


@dataclass(frozen=True, slots=True)
class CronSpec:
    """Fire at the local wall times a five-field cron expression names, in ``time_zone``.

    Construction validates: ``InvalidCron`` (naming the field) and ``UnknownTimeZone``.
    ``dst_gap`` and ``dst_overlap`` only apply to fixed-time expressions (see module doc).
    """

    expression: str
    time_zone: str = "UTC"
    dst_gap: DstGap = DstGap.SHIFT_TO_GAP_END
    dst_overlap: DstOverlap = DstOverlap.FIRST

    def __post_init__(self) -> None:
        # Accept the plain strings the API carries; an unknown one is a ValueError.
        object.__setattr__(self, "dst_gap", DstGap(self.dst_gap))
        object.__setattr__(self, "dst_overlap", DstOverlap(self.dst_overlap))
        _compile(self.expression)
        load_zone(self.time_zone)

    @property
    def fixed_time(self) -> bool:
        """True when neither the minute nor the hour field starts with ``*``."""
        return _compile(self.expression).fixed_time


@dataclass(frozen=True, slots=True)
class IntervalSpec:
    """Fire every ``interval_ms`` of elapsed time from ``starts_at``; DST plays no part.

    ``starts_at`` is the first fire. When it is None the first fire is ``after +
    interval`` for whatever ``after`` a call passes, so a stored schedule should fix it
    at creation time (SPEC RS-1: default now + interval).
    """

    interval_ms: int
    starts_at: datetime | None = None

    def __post_init__(self) -> None:
        if isinstance(self.interval_ms, bool) or not isinstance(self.interval_ms, int):
            raise TypeError("interval_ms must be an int")
        if self.interval_ms < MIN_INTERVAL_MS:
            raise IntervalTooShort(self.interval_ms)
        if self.starts_at is not None:
            object.__setattr__(self, "starts_at", utc_instant(self.starts_at, "starts_at"))


RecurrenceSpec = CronSpec | IntervalSpec


@dataclass(frozen=True, slots=True)
class Fire:
    """One instant a spec fires at.

    ``at`` is the UTC instant; ``nominal`` the naive local wall time the expression named
    (the UTC wall time for intervals); ``local`` the same instant as ``at`` in the
    schedule's zone; ``dst_adjustment`` None unless DST moved or doubled this fire.
    """

    at: datetime
    nominal: datetime
    local: datetime
    dst_adjustment: DstAdjustment | None = None


@dataclass(frozen=True, slots=True)
class DstSkip:
    """A wall time the expression named that did not exist, so nothing fired for it.

    ``at`` is the first instant after the gap: the point where a timeline walking forward
    passes the missing wall time, and so where the "skipped by DST" decision belongs.
    """

    at: datetime
    nominal: datetime

    @property
    def dst_adjustment(self) -> DstAdjustment:
        return DstAdjustment.GAP_SKIPPED


# ---------------------------------------------------------------------------------------
# Arithmetic


def utc_instant(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got {value!r}")
    return value.astimezone(UTC)


def utc_offset(value: datetime) -> timedelta:
    offset = value.utcoffset()
    assert offset is not None  # always set for a ZoneInfo-aware datetime
    return offset


def _gap_end(
    naive: datetime, zone: ZoneInfo, old_offset: timedelta, new_offset: timedelta
) -> datetime:
    """The transition instant of the gap that swallows ``naive``: the first real instant
    after it. Between ``naive - new_offset`` (still on the old offset) and ``naive -
    old_offset`` (already on the new one) lies exactly one transition; tzdata transitions
    fall on whole seconds, so a bisection over seconds finds it."""
    epoch = datetime(1970, 1, 1)
    low = int((naive - new_offset - epoch).total_seconds())
    high = int((naive - old_offset - epoch).total_seconds())
    while high - low > 1:
        middle = (low + high) // 2
        if utc_offset(datetime.fromtimestamp(middle, zone)) == old_offset:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)


def resolve_wall_time(
    naive: datetime,
    zone: ZoneInfo,
    fixed_time: bool,
    dst_gap: DstGap = DstGap.SHIFT_TO_GAP_END,
    dst_overlap: DstOverlap = DstOverlap.FIRST,
) -> list[Fire | DstSkip]:
    """The fires (and reported skips) for one matching local wall time, by the DST policy."""
    first = naive.replace(tzinfo=zone)
    second = naive.replace(tzinfo=zone, fold=1)
    first_offset = utc_offset(first)
    second_offset = utc_offset(second)
    if first_offset == second_offset:  # the usual case: one instant
        return [Fire((naive - first_offset).replace(tzinfo=UTC), naive, first)]
    if first_offset > second_offset:  # repeated wall time; fold=0 is the earlier pass
        early = Fire((naive - first_offset).replace(tzinfo=UTC), naive, first)
        late = Fire(
            (naive - second_offset).replace(tzinfo=UTC),
            naive,
            second,
            DstAdjustment.OVERLAP_SECOND,
        )
        if not fixed_time or dst_overlap is DstOverlap.BOTH:
            return [early, late]
        return [early] if dst_overlap is DstOverlap.FIRST else [late]
    # Wall time in a gap: zoneinfo reads it with the old offset for fold=0.
    end = _gap_end(naive, zone, first_offset, second_offset)
    if not fixed_time or dst_gap is DstGap.SKIP:
        return [DstSkip(end, naive)]
    return [Fire(end, naive, end.astimezone(zone), DstAdjustment.GAP_SHIFTED)]


def _rank(item: Fire | DstSkip) -> int:
    # At one instant: skips first, then a fire at its own wall time, then a moved one.
    # The first fire wins, so an unadjusted match absorbs a gap-shifted one.
    if isinstance(item, DstSkip):
        return 0
    return 1 if item.dst_adjustment is None else 2


def _cron_timeline(spec: CronSpec, after: datetime) -> Iterator[Fire | DstSkip]:
    compiled = _compile(spec.expression)
    zone = load_zone(spec.time_zone)
    try:
        local_after = after.astimezone(zone)
        start = local_after.replace(tzinfo=None)
        if local_after.fold == 0:
            # Inside the first pass of a repeated hour, second-pass instants of *earlier*
            # wall times still lie ahead; start the wall-clock scan one overlap earlier.
            overlap = utc_offset(local_after) - utc_offset(start.replace(tzinfo=zone, fold=1))
            start -= max(overlap, timedelta(0))
        candidates = CronSim(compiled.expression, start - timedelta(seconds=1))
    except OverflowError:  # at the very end of the calendar
        return

    # Wall times come in wall-clock order; instants mostly do too. The exception is the
    # second pass of a repeated hour, which lands after first passes of later wall times.
    # Every item a wall time produces is at or after its earliest one, and earliest
    # instants never decrease, so anything older than the newest earliest instant is final.
    pending: list[tuple[datetime, int, int, Fire | DstSkip]] = []
    sequence = 0
    last_fire: datetime | None = None

    def settled(bound: datetime | None) -> Iterator[Fire | DstSkip]:
        nonlocal last_fire
        while pending and (bound is None or pending[0][0] < bound):
            at, _, _, item = heapq.heappop(pending)
            if at <= after:
                continue
            if isinstance(item, Fire):
                if at == last_fire:
                    continue  # one occurrence per instant
                last_fire = at
            yield item

    while True:
        try:
            items = resolve_wall_time(
                next(candidates), zone, compiled.fixed_time, spec.dst_gap, spec.dst_overlap
            )
        except (StopIteration, OverflowError):  # no match for 50 years, or end of calendar
            break
        yield from settled(min(item.at for item in items))
        for item in items:
            heapq.heappush(pending, (item.at, _rank(item), sequence, item))
            sequence += 1
    yield from settled(None)


def _interval_fires(spec: IntervalSpec, after: datetime) -> Iterator[Fire]:
    step = timedelta(milliseconds=spec.interval_ms)
    try:
        if spec.starts_at is None:
            first = after + step
        elif after < spec.starts_at:
            first = spec.starts_at
        else:
            first = spec.starts_at + step * ((after - spec.starts_at) // step + 1)
        for index in itertools.count():
            at = first + step * index  # multiply rather than add: no drift to accumulate
            yield Fire(at, at.replace(tzinfo=None), at)
    except OverflowError:  # at the very end of the calendar
        return


def iter_timeline(spec: RecurrenceSpec, after: datetime) -> Iterator[Fire | DstSkip]:
    """Everything that happens strictly after ``after``, lazily and in instant order:
    each ``Fire`` and, for cron specs, each ``DstSkip`` (a named wall time that did not
    exist and produced no fire).

    A generation pass walking a schedule forward records both kinds of decision from one
    stream. At one instant a skip comes before a fire. The stream only ends at the end of
    the calendar (or if cronsim finds no match for 50 years).
    """
    start = utc_instant(after, "after")
    if isinstance(spec, IntervalSpec):
        return _interval_fires(spec, start)
    return _cron_timeline(spec, start)


def iter_fires(spec: RecurrenceSpec, after: datetime) -> Iterator[Fire]:
    """The fires strictly after ``after``, lazily, strictly increasing, one per instant."""
    return (item for item in iter_timeline(spec, after) if isinstance(item, Fire))


def next_fires(spec: RecurrenceSpec, after: datetime, count: int) -> list[Fire]:
    """The first ``count`` fires strictly after ``after`` (the preview, RS-8's next 5)."""
    if count < 0:
        raise ValueError(f"count must be at least 0, got {count}")
    return list(itertools.islice(iter_fires(spec, after), count))


def fires_between(
    spec: RecurrenceSpec,
    start_exclusive: datetime,
    end_inclusive: datetime,
    *,
    limit: int | None = None,
) -> list[Fire]:
    """The fires in ``(start_exclusive, end_inclusive]``, at most ``limit`` of them."""
    end = utc_instant(end_inclusive, "end_inclusive")
    fires: list[Fire] = []
    for fire in iter_fires(spec, start_exclusive):
        if fire.at > end or (limit is not None and len(fires) >= limit):
            break
        fires.append(fire)
    return fires


def count_fires_between(
    spec: RecurrenceSpec,
    start_exclusive: datetime,
    end_inclusive: datetime,
    *,
    limit: int | None = None,
) -> int:
    """How many fires lie in ``(start_exclusive, end_inclusive]``, counting stops at
    ``limit``. Intervals are counted arithmetically; cron specs are walked, so an
    unbounded count over a long outage costs time in proportion to the fires."""
    start = utc_instant(start_exclusive, "start_exclusive")
    end = utc_instant(end_inclusive, "end_inclusive")
    if isinstance(spec, IntervalSpec) and spec.starts_at is not None:
        total = 0
        if end >= spec.starts_at:
            step = timedelta(milliseconds=spec.interval_ms)
            upto_end = (end - spec.starts_at) // step + 1
            upto_start = (start - spec.starts_at) // step + 1 if start >= spec.starts_at else 0
            total = max(upto_end - upto_start, 0)
        return total if limit is None else min(total, limit)
    count = 0
    for fire in iter_fires(spec, start):
        if fire.at > end or (limit is not None and count >= limit):
            break
        count += 1
    return count


def skipped_by_dst(
    spec: RecurrenceSpec, start_exclusive: datetime, end_inclusive: datetime
) -> list[DstSkip]:
    """The named wall times in ``(start_exclusive, end_inclusive]`` that did not exist and
    produced no fire, placed at the end of their gap.

    For fixed-time expressions these come from ``dst_gap=skip``; for wildcard expressions
    every missing matching wall time is listed (nothing fires for them by policy), so a
    caller that only records policy decisions can filter on ``spec.fixed_time``. Empty
    for intervals. A gap-shifted fire is a fire, not a skip, and is not listed.
    """
    end = utc_instant(end_inclusive, "end_inclusive")
    skips: list[DstSkip] = []
    for item in iter_timeline(spec, start_exclusive):
        if item.at > end:
            break
        if isinstance(item, DstSkip):
            skips.append(item)
    return skips
