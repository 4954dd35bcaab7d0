"""Business calendars: which local dates are open for a schedule, and why the others are not.

A calendar closes the public holidays of the regions it names (from the maintained
``holidays`` package, never a hand-kept list), its weekend days and extra closed dates; extra
open dates override all of those. Schedules use it to skip a fire on a closed day or move it
to the nearest open one, and to find the N-th or last business day of a month (SPEC RS-10).

Everything here is pure and deterministic for one version of the ``holidays`` package
(``holidays_version()``, shown in health next to tzdata's): a region's holidays for a year
are computed once per process and cached.

Errors, each with a stable ``code`` the HTTP edge turns into a 422::

    RecurrenceError (ValueError)
    ├── UnknownHolidayRegion   unknown_holiday_region   details: country, subdivision
    ├── CalendarNeverOpen      calendar_never_open      details: year
    └── InvalidCalendar        validation_error         details: field
"""

from __future__ import annotations

import calendar as month_calendar
import enum
import functools
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta

import holidays

from punctual.domain.recurrence import RecurrenceError

__all__ = [
    "MAX_EXTRA_DATES",
    "MAX_REGIONS",
    "WEEKDAYS",
    "BusinessCalendar",
    "CalendarNeverOpen",
    "HolidayRegion",
    "InvalidCalendar",
    "OnClosedDay",
    "UnknownHolidayRegion",
    "holidays_version",
]

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
"""Weekend day names, in ``date.weekday()`` order."""
MAX_REGIONS = 10
MAX_EXTRA_DATES = 400
"""Per list of extra dates: a year of them and some to spare."""
_UNKNOWN = object()
_SEARCH_DAYS = 3 * 366
"""How far an open day is looked for; a valid calendar has one in every year."""


class UnknownHolidayRegion(RecurrenceError):
    """A country or subdivision the ``holidays`` package does not know."""

    code = "unknown_holiday_region"

    def __init__(self, country: str, subdivision: str | None) -> None:
        where = f"{country}-{subdivision}" if subdivision else country
        super().__init__(
            f"unknown holiday region {where!r}: use an ISO 3166-1 country code such as 'DE' "
            "and, optionally, one of its ISO 3166-2 subdivisions such as 'BY'",
            country=country,
            subdivision=subdivision,
        )


class CalendarNeverOpen(RecurrenceError):
    """The calendar leaves a whole year without an open day: nothing could ever fire."""

    code = "calendar_never_open"

    def __init__(self, year: int | None) -> None:
        when = f"in {year}" if year is not None else "in any week"
        super().__init__(
            f"the calendar has no open day {when}: open a weekday or remove extra closed dates",
            year=year,
        )


class InvalidCalendar(RecurrenceError):
    """A calendar field that cannot be accepted; ``field`` names it."""

    code = "validation_error"

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"calendar.{name}: {message}", field=f"calendar.{name}")


class OnClosedDay(enum.StrEnum):
    """What a fire that falls on a closed local date does."""

    SKIP = "skip"
    """Nothing fires; the skip is recorded with the reason (the holiday's name)."""

    NEXT_OPEN_DAY = "next_open_day"
    """It fires at the same local time on the next open day."""

    PREVIOUS_OPEN_DAY = "previous_open_day"
    """It fires at the same local time on the previous open day."""


@dataclass(frozen=True, slots=True)
class HolidayRegion:
    """An ISO 3166-1 country and, optionally, one of its ISO 3166-2 subdivisions."""

    country: str
    subdivision: str | None = None

    def __post_init__(self) -> None:
        known = _supported()
        if self.country not in known:
            raise UnknownHolidayRegion(self.country, self.subdivision)
        if self.subdivision is not None and self.subdivision not in known[self.country]:
            raise UnknownHolidayRegion(self.country, self.subdivision)


@dataclass(frozen=True, slots=True)
class BusinessCalendar:
    """The open and closed local dates of a schedule.

    A date is closed when it is an extra closed date, a public holiday of one of the
    regions, or a weekend day, unless it is an extra open date. Construction validates and
    raises the errors of the module doc.
    """

    holidays: tuple[HolidayRegion, ...] = ()
    weekend: frozenset[int] = frozenset({5, 6})
    """``date.weekday()`` numbers (Monday 0)."""
    extra_holidays: frozenset[date] = frozenset()
    extra_workdays: frozenset[date] = frozenset()
    on_closed_day: OnClosedDay = OnClosedDay.SKIP
    _closed_cache: dict[date, str | None] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "on_closed_day", OnClosedDay(self.on_closed_day))
        if len(self.holidays) > MAX_REGIONS:
            raise InvalidCalendar("holidays", f"at most {MAX_REGIONS} regions")
        if len(set(self.holidays)) != len(self.holidays):
            raise InvalidCalendar("holidays", "a region is named twice")
        if not all(0 <= day <= 6 for day in self.weekend):
            raise InvalidCalendar("weekend", "days are mon, tue, wed, thu, fri, sat or sun")
        for name, dates in (
            ("extra_holidays", self.extra_holidays),
            ("extra_workdays", self.extra_workdays),
        ):
            if len(dates) > MAX_EXTRA_DATES:
                raise InvalidCalendar(name, f"at most {MAX_EXTRA_DATES} dates")
        both = self.extra_holidays & self.extra_workdays
        if both:
            raise InvalidCalendar(
                "extra_workdays", f"{min(both).isoformat()} is also an extra closed date"
            )
        if len(self.weekend) == 7:
            # Extra open dates alone leave every later year without an open day.
            raise CalendarNeverOpen(None)
        for year in sorted({day.year for day in self.extra_holidays | self.extra_workdays}):
            if not any(self.is_open(day) for day in _days_of(year)):
                raise CalendarNeverOpen(year)

    @classmethod
    def of(
        cls,
        *,
        holidays: Iterable[tuple[str, str | None]] = (),
        weekend: Iterable[str] = ("sat", "sun"),
        extra_holidays: Iterable[date] = (),
        extra_workdays: Iterable[date] = (),
        on_closed_day: OnClosedDay | str = OnClosedDay.SKIP,
    ) -> BusinessCalendar:
        """A calendar from the API's names: regions as pairs, weekend days as ``mon``…"""
        days = []
        for name in weekend:
            if name not in WEEKDAYS:
                raise InvalidCalendar(
                    "weekend", f"{name!r} is not a day: use {', '.join(WEEKDAYS)}"
                )
            days.append(WEEKDAYS.index(name))
        if len(set(days)) != len(days):
            raise InvalidCalendar("weekend", "a day is named twice")
        return cls(
            holidays=tuple(HolidayRegion(country, sub) for country, sub in holidays),
            weekend=frozenset(days),
            extra_holidays=frozenset(extra_holidays),
            extra_workdays=frozenset(extra_workdays),
            on_closed_day=OnClosedDay(on_closed_day),
        )

    @property
    def weekend_names(self) -> list[str]:
        return [WEEKDAYS[day] for day in sorted(self.weekend)]

    def closed_because(self, day: date) -> str | None:
        """Why ``day`` is closed (a holiday's name, ``weekend``, ``extra closed date``),
        or None when it is open."""
        cached = self._closed_cache.get(day, _UNKNOWN)
        if cached is not _UNKNOWN:
            return cached  # type: ignore[return-value]
        reason: str | None = None
        if day in self.extra_workdays:
            reason = None
        elif day in self.extra_holidays:
            reason = "extra closed date"
        else:
            names = [
                name
                for region in self.holidays
                for name in _holidays_of(region.country, region.subdivision, day.year).get(day, ())
            ]
            if names:
                reason = "; ".join(dict.fromkeys(names))
            elif day.weekday() in self.weekend:
                reason = "weekend"
        if len(self._closed_cache) > 4096:
            self._closed_cache.clear()
        self._closed_cache[day] = reason
        return reason

    def is_open(self, day: date) -> bool:
        return self.closed_because(day) is None

    def next_open(self, day: date) -> date:
        """The first open date after ``day``."""
        return self._search(day, 1)

    def previous_open(self, day: date) -> date:
        """The last open date before ``day``."""
        return self._search(day, -1)

    def business_day(self, year: int, month: int, n: int) -> date | None:
        """The ``n``-th open date of the month (``n`` > 0), or the ``-n``-th from its end
        (``n`` < 0); None when the month has fewer open dates."""
        if n == 0:
            raise ValueError("n counts from 1 (from the start) or -1 (from the end)")
        length = month_calendar.monthrange(year, month)[1]
        days = [date(year, month, day) for day in range(1, length + 1)]
        open_days = [day for day in days if self.is_open(day)]
        index = n - 1 if n > 0 else n
        if abs(n) > len(open_days):
            return None
        return open_days[index]

    def _search(self, day: date, step: int) -> date:
        for offset in range(1, _SEARCH_DAYS + 1):
            try:
                candidate = day + timedelta(days=step * offset)
            except OverflowError:
                break
            if self.is_open(candidate):
                return candidate
        raise CalendarNeverOpen(day.year)


def holidays_version() -> str:
    """The version of the ``holidays`` package whose data decides closed days (health)."""
    return str(getattr(holidays, "__version__", "unknown"))


@functools.cache
def _supported() -> Mapping[str, frozenset[str]]:
    return {
        country: frozenset(subdivisions)
        for country, subdivisions in holidays.list_supported_countries().items()
    }


@functools.lru_cache(maxsize=1024)
def _holidays_of(country: str, subdivision: str | None, year: int) -> Mapping[date, list[str]]:
    """A region's public holidays of one year: date -> names."""
    if not 1 <= year <= 9999:
        return {}
    with warnings.catch_warnings():
        # Some regions' data covers a span of years (India's lunar holidays, 2001-2035):
        # outside it the package says so once per call, and knows the fixed-date ones only.
        warnings.simplefilter("ignore", UserWarning)
        table = holidays.country_holidays(country, subdiv=subdivision, years=year)
    return {day: list(table.get_list(day)) for day in table}


def _days_of(year: int) -> Iterable[date]:
    day = date(year, 1, 1)
    while day.year == year:
        yield day
        if day == date.max:
            return
        day += timedelta(days=1)
