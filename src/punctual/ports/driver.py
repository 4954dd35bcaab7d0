"""The Driver port: what fires a schedule's due work (SPEC CR-6).

With the ``sql`` driver the runner's generation pass fires schedules and there is nothing
outside the store to keep in step. With ``temporal_schedules`` every schedule is also a
Temporal Schedule, and this port is how use cases keep it in step with the store, which
stays the source of truth. Its promises:

* ``ensure`` is an idempotent create-or-update of the schedule as ``DriverSchedule``
  describes it, ``paused`` included, marked with this installation's id; it answers the
  driver's next fire times (UTC), which the caller caches in the store;
* ``remove`` deletes the driver's copy; removing one that does not exist is no error;
* ``describe_many`` answers, per id, what the driver holds (absent ids are not present);
* ``list_marked`` answers the ids of every schedule the driver holds that carries this
  installation's mark (and never one without it);
* ``fire_times`` answers, per schedule, the fire times the driver's own copy of the spec
  yields in a window, as the driver matches them (what its decisions are about);
* ``end_fires`` stops the fire actions the driver started for the given schedules that are
  still open (a switch away from the driver: nothing takes them any more);
* a driver that cannot be reached raises ``EngineUnavailable``.

``ScheduleSync`` is the store's side: the installation id, and per schedule the sync state,
when it was checked and the cached next fire times (reads serve these, never the driver).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from punctual.domain.calendar_timeline import ScheduleSpec
from punctual.domain.schedules import OverlapPolicy, spec_to_json


class SyncState(StrEnum):
    IN_SYNC = "in_sync"
    """The driver holds the schedule as the store describes it (as of ``checked_at``)."""
    DRIFTED = "drifted"
    """The last ensure failed or the driver's copy differs: reconcile will ensure it."""
    ORPHANED = "orphaned"
    """A record the driver does not fire: a create whose ensure failed and whose record
    could not be removed either, or one whose id is taken by a Schedule without our mark."""
    CREATING = "creating"
    """A create saga between its two steps (record stored, ensure not yet answered); read
    as ``orphaned``: if it does not finish, a retry with its key or reconcile settles it."""


@dataclass(frozen=True)
class DriverSchedule:
    """A schedule as the driver is to hold it: when, how overlaps and misses go, state."""

    schedule_id: str
    tenant: str
    spec: ScheduleSpec
    """Its one spec: the driver is given no other (``check_supported``)."""
    overlap: OverlapPolicy
    catchup_window: timedelta
    paused: bool
    end_at: datetime | None = None
    remaining_actions: int | None = None
    """Fires left under ``max_occurrences`` (None: no limit)."""

    @property
    def digest(self) -> str:
        """A stable fingerprint of everything above: the driver's copy carries it, so a
        sweep can tell a copy that differs from the record without comparing fields."""
        data = {
            "id": self.schedule_id,
            "tenant": self.tenant,
            "spec": spec_to_json(self.spec),
            "overlap": self.overlap.value,
            "catchup_window": self.catchup_window.total_seconds(),
            "paused": self.paused,
            "end_at": self.end_at.isoformat() if self.end_at else None,
            "remaining_actions": self.remaining_actions,
        }
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class DriverAction:
    """An action the driver took for one of its fire times."""

    scheduled_at: datetime
    """The fire time it was for (the occurrence's ``occurrence_at``)."""
    started_at: datetime | None
    """When the driver started it (None: not known)."""
    running: bool
    """Its fire workflow still runs, as far as the driver tracks it (Temporal does not
    under ``allow_all``, where this is always False)."""


@dataclass(frozen=True)
class DriverView:
    """What the driver holds for one schedule id."""

    schedule_id: str
    present: bool
    marked: bool = False
    paused: bool = False
    digest: str | None = None
    next_fire_times: list[datetime] = field(default_factory=list)
    ensured_at: datetime | None = None
    """When punctual last ensured it (None: unknown)."""
    created_at: datetime | None = None
    """When the driver's copy was created: earlier fire times were not its decisions."""
    decided_before: datetime | None = None
    """Every fire time before this instant has been decided by the driver (acted on,
    buffered, skipped, or passed over while paused): its next fire time, paused or not.
    None when it has none (its spec or its actions ran out)."""
    actions: list[DriverAction] = field(default_factory=list)
    """Its recent actions and every one whose fire workflow still runs, oldest first."""
    actions_since: datetime | None = None
    """``actions`` holds every action taken for a fire time at or after this instant; an
    older one may be missing (None: it holds every action ever taken)."""
    buffered: int = 0
    """Fire times it holds back until the running action ends (``buffer_one``)."""


FIRE_TIMES_LIMIT = 1000
"""Fire times one ``fire_times`` answer holds per schedule at most (Temporal's own bound)."""


@dataclass(frozen=True)
class SkipMark:
    """How far the driver's own decisions not to fire were recorded as occurrences, and at
    which schedule version: a later version means the schedule may have been paused or
    edited since, so what came before that change is not known to have been enabled."""

    schedule_id: str
    checked_through: datetime
    schedule_version: int


@dataclass(frozen=True)
class SyncRecord:
    schedule_id: str
    state: SyncState
    checked_at: datetime
    next_fire_times: list[datetime]
    digest: str | None
    create_token: str | None = None
    """Set while a create saga is unfinished: the digest of the request that began it, so
    only a retry of that request (same principal, key and body) resumes it."""

    @property
    def unfinished_create(self) -> bool:
        return self.create_token is not None


class Driver(Protocol):
    name: str

    def ensure(self, schedule: DriverSchedule) -> list[datetime]:
        """Create or update, idempotently; the driver's next fire times."""

    def remove(self, schedule_id: str) -> None:
        """Delete the driver's copy; an absent one is no error."""

    def describe_many(self, schedule_ids: Sequence[str]) -> dict[str, DriverView]:
        """Per id, what the driver holds, in batched calls."""

    def list_marked(self) -> list[str]:
        """Ids of the schedules that carry this installation's mark."""

    def fire_times(
        self, windows: Mapping[str, tuple[datetime, datetime]]
    ) -> dict[str, list[datetime]]:
        """Per schedule id, the fire times its copy's spec yields in ``(start, end]``,
        ascending, at most ``FIRE_TIMES_LIMIT`` of them (a full answer may stop before
        ``end``); an id the driver does not hold or cannot match answers ``[]``."""

    def end_fires(self, schedule_ids: Sequence[str]) -> int:
        """Stop every fire action of these schedules that is still open, and only theirs;
        the number stopped."""


class ScheduleSync(Protocol):
    """The store's record of the driver: installation id and per-schedule sync state."""

    def installation_id(self, candidate: str, now: datetime) -> str:
        """This store's installation id, recording ``candidate`` if there is none yet."""

    def get_many(self, schedule_ids: Sequence[str]) -> dict[str, SyncRecord]: ...

    def record(self, record: SyncRecord) -> None:
        """Insert or replace the schedule's sync record."""

    def forget(self, schedule_id: str) -> None: ...

    def not_in_sync(self, limit: int) -> list[str]:
        """Ids of schedules whose record is not ``in_sync``, oldest check first."""

    def recorded(self, after_id: str, limit: int) -> list[str]:
        """Ids of every schedule with a sync record, in id order after ``after_id``: a
        store that has any was under the Temporal Schedules driver (the switch back)."""

    def unfinished_creates(self, checked_before: datetime, limit: int) -> list[str]:
        """Ids of schedules whose create saga began (or was last resumed) before
        ``checked_before`` and never finished, oldest first."""

    def live_schedules(self, after_id: str, limit: int) -> list[tuple[str, str]]:
        """(schedule id, tenant) of live schedules of every tenant, in id order after
        ``after_id``: what a sweep compares with the driver."""

    def skip_marks(self, schedule_ids: Sequence[str]) -> dict[str, SkipMark]:
        """Per id, its skip mark (absent: none recorded yet)."""

    def record_skip_mark(self, mark: SkipMark) -> None:
        """Set the schedule's skip mark on its sync record; a schedule without a sync
        record keeps none (every schedule the driver holds has one)."""
