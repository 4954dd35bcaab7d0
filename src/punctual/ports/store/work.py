"""The store's repositories of the work itself: scheduled starts and occurrences, runs,
the run ledger of an engine that runs them by id, and schedules."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, Protocol

from punctual.domain.runs import Run, RunState
from punctual.domain.schedule_audit import AuditRow, ScheduleEvent
from punctual.domain.schedules import Schedule
from punctual.domain.starts import ScheduledStart, StartState
from punctual.ports.records import (
    AttemptOutcome,
    ClaimedRun,
    ClaimedStart,
    ClaimToken,
    CursorMove,
    DispatchedStart,
    DueSchedule,
    EncryptedInput,
    EndedStatus,
    Fired,
    NewOccurrence,
    NewRun,
    NewSchedule,
    NewStart,
    OccurrenceFilter,
    RunClaim,
    RunFilter,
    RunFlags,
    RunRecord,
    RunSignal,
    Seek,
    StartFilter,
    StoredOccurrence,
    StoreEndedRun,
)


class Starts(Protocol):
    def insert(self, new: NewStart, now: datetime) -> ScheduledStart:
        """A new start is ``scheduled`` at version 1, due at its ``start_at``."""

    def insert_many(self, new: Sequence[NewStart], now: datetime) -> list[ScheduledStart]:
        """Insert one-off starts in as few statements as possible; returned in the order
        given."""

    def pending_by_class(self, tenant: str) -> dict[str, int]:
        """The tenant's pending one-off starts per workload class, what ``count_pending``
        counts, at a cost that does not grow with the number pending (QA-1)."""

    def notify_due(self) -> None:
        """Wake runners in other processes once this transaction commits."""

    def get(self, tenant: str, start_id: str, *, lock: bool = False) -> ScheduledStart | None:
        """``lock`` holds the row until commit (waits at most the transaction's lock timeout)."""

    def find(
        self, tenant: str, where: StartFilter, at: Seek[int]
    ) -> list[tuple[int, ScheduledStart]]:
        """The page of one-off starts (no occurrences) ``at`` selects, by ``seq``."""

    def count_pending(self, tenant: str, workload_class: str | None = None) -> int:
        """One-off starts in ``scheduled`` or ``dispatching``, and backfilled occurrences
        not started yet (``buffered`` too: they wait their turn, RS-9b)."""

    def count_in_state(self, tenant: str, state: StartState) -> int: ...

    def stalled(self, tenant: str, grace_seconds: float, now: datetime, limit: int) -> list[str]:
        """Claimed starts whose lease expired more than ``grace_seconds`` ago by the clock
        leases are taken with (the database's on PostgreSQL, ``now`` on SQLite, FT-2)."""

    def count_pending_of_workflow(self, workflow: str) -> int:
        """Pending starts of ``workflow`` across all tenants (definitions are host-global)."""

    def last_decided(self, schedule_id: str) -> datetime | None:
        """The latest instant a row of the schedule's own fires covers (not a trigger's
        or a backfill's): where it ended once ``max_occurrences`` was reached."""

    def audit_rows(self, schedule_id: str, start: datetime, end: datetime) -> list[AuditRow]:
        """The schedule's rows deciding an instant in ``[start, end)``: occurrences there,
        and skipped ranges reaching into it, each with its run's state once it has one."""

    def compare_and_set(
        self, start_id: str, expected_version: int, now: datetime, **changes: Any
    ) -> bool:
        """Apply and bump the version only at ``expected_version``: the OS-7 arbiter."""

    def mark_dispatched_many(self, rows: Sequence[DispatchedStart], now: datetime) -> set[str]:
        """Record claims dispatched (version bumped), each only while its claim token still
        holds and its lease has not run out by the store's clock; the ids that won."""

    def claim_due(
        self, now: datetime, limit: int, runner_id: str, lease_seconds: float
    ) -> list[ClaimedStart]:
        """Claim starts due at ``now`` (and those whose lease expired) oldest first;
        concurrent claimers must never get the same start while its lease is live. The
        lease ends ``lease_seconds`` after the store's clock and is judged by it (the
        database's on PostgreSQL, ``now`` on SQLite, FT-2). A claim must not change
        ``version``; it takes the next ``claim_seq`` instead (FT-5)."""

    def settle_claim(self, claim: ClaimToken, now: datetime, **changes: Any) -> bool:
        """Apply a dispatch outcome (failure, retry, skip, buffer) and bump the version,
        only while ``claim`` holds: same version and token, lease not run out by the
        store's clock."""

    def renew_claims(
        self, claims: Sequence[ClaimToken], lease_seconds: float, now: datetime
    ) -> set[str]:
        """Extend to ``lease_seconds`` after the store's clock the leases of the claims that
        still hold; the ids renewed."""

    def release_claims(self, claims: Sequence[ClaimToken], now: datetime) -> set[str]:
        """Give claims that still hold back to ``scheduled``, version unchanged and nothing
        charged (an engine outage); the ids released."""

    def states_of(self, start_ids: Sequence[str]) -> dict[str, StartState]:
        """The current state of each start (of any tenant) that exists."""

    def allocation_of_run(self, tenant: str, run_id: str) -> tuple[StartState, str] | None:
        """(state, created_by) of the start or occurrence of ``tenant`` that allocated
        ``run_id``, whether or not the run exists yet (FT-5)."""

    def key_usage(self) -> dict[str, dict[str, int]]:
        """Codec key id -> {``SealedKind`` value: count} of the stored values that may still
        be read (pending work, live schedules and webhooks), every table included."""

    def count_due(self, now: datetime) -> int:
        """Starts (occurrences included) that are due and still ``scheduled``."""

    def due_backlog(self, now: datetime) -> tuple[int, datetime | None]:
        """The starts ``count_due`` counts, and the earliest ``due_at`` among them (None
        when there are none), read together in one statement (the queue gauges)."""

    def earliest_due(self, now: datetime) -> datetime | None:
        """When the next pending start comes due, on the clock whose present is ``now``;
        a lease expiry (on the store's clock) counts as due, moved onto that clock."""

    def insert_occurrences(self, occurrences: Sequence[NewOccurrence], now: datetime) -> int:
        """Insert occurrences; an existing (schedule, occurrence_at, rerun) must be kept as
        it is (RS-5: after a commit the same occurrence is retried, never regenerated)."""

    def occurrences_between(
        self, schedule_id: str, after: datetime, until: datetime
    ) -> list[StoredOccurrence]:
        """Every row of the schedule with ``occurrence_at`` in ``(after, until]``, skipped
        and failed history included, ordered by (``occurrence_at``, ``rerun``)."""

    def latest_fired_before(self, schedule_id: str, before: datetime) -> StoredOccurrence | None:
        """The schedule's latest row of one of its spec's own fires (origin ``schedule``)
        that was not skipped, with ``occurrence_at`` before ``before``; None if none."""

    def get_occurrence(
        self, tenant: str, schedule_id: str, occurrence_id: str, *, lock: bool = False
    ) -> ScheduledStart | None: ...

    def find_occurrences(
        self, schedule_id: str, where: OccurrenceFilter, at: Seek[int]
    ) -> list[tuple[int, ScheduledStart]]:
        """The page of the schedule's occurrences ``at`` selects, by ``seq`` (the order
        they were generated in)."""

    def occurrences_since(
        self, schedule_id: str, since: datetime, limit: int
    ) -> list[ScheduledStart]:
        """The schedule's rows whose instant is at or after ``since``, newest instant first,
        at most ``limit``; then the skipped ranges that began before ``since`` and reach
        into it. Read by instant, never through the older history (a timeline's window)."""

    def cancel_unstarted(self, schedule_id: str, reason: str, now: datetime) -> int:
        """Cancel the schedule's scheduled and buffered occurrences, with ``reason``."""

    def buffered_of(self, schedule_id: str) -> int:
        """The schedule's ``buffer_one`` occurrences waiting (queued backfilled ones, which
        have no overlap policy of their own, are not counted)."""

    def release_buffered(self, now: datetime) -> int:
        """Buffered occurrences whose schedule has no unfinished run become due now. Of the
        queued backfilled ones only the earliest of a schedule goes, and only while nothing
        else of that schedule is due or being dispatched: they run one after another."""

    def occurrence_counts(self, tenant: str) -> dict[str, dict[str, int]]:
        """Per schedule id: ``skipped_count``, ``missed_count`` (ranges counted in full)
        and ``failed_count``."""


class Runs(Protocol):
    def insert_new(self, runs: Sequence[NewRun], now: datetime) -> int:
        """Create runs; an existing run id must be left untouched (WF-6). Workers in other
        processes are woken once the transaction commits."""

    def get(self, tenant: str, run_id: str) -> Run | None: ...

    def find(self, tenant: str, where: RunFilter, at: Seek[int]) -> list[tuple[int, Run]]:
        """The page of runs ``at`` selects, by ``seq``."""

    def count_unfinished(self, workflow: str, version: str) -> int:
        """Runs of that version that are pending or running, across all tenants."""

    def pending_by_queue(self) -> dict[str, tuple[int, datetime]]:
        """Task queue -> (runs ``pending`` on it, the earliest time one of them was queued),
        across all tenants, in one grouped statement; a queue without pending runs is
        absent (the queue gauges)."""

    def count_active_of_schedule(self, schedule_id: str) -> int:
        """The schedule's runs that are not terminal yet (pending or running)."""

    def request_cancel(self, tenant: str, run_id: str, now: datetime) -> None:
        """An unclaimed pending run ends ``canceled``; an active one is flagged."""

    def terminate(self, tenant: str, run_id: str, now: datetime, reason: str) -> None:
        """An active run is recorded ``terminated`` at once; no later result is accepted."""

    def claim_pending(
        self,
        worker_id: str,
        task_queues: Sequence[str],
        loaded: Sequence[tuple[str, str]],
        limit: int,
        lease_seconds: float,
        now: datetime,
        key_ids: Sequence[str] | None = None,
    ) -> list[ClaimedRun]:
        """Claim runs the worker can execute (with ``key_ids``: only runs whose input key
        is among them), by priority then age; each claim is a new attempt under the claim
        token ``<worker id>/<attempt>``, ``claimed_at`` = the store's clock and no
        ``started_at`` yet. The lease ends ``lease_seconds`` after the store's clock (the
        database's on PostgreSQL, ``now`` on SQLite; FT-2). Concurrent workers must never
        get the same run."""

    def renew_leases(
        self, claims: Sequence[RunClaim], lease_seconds: float, now: datetime
    ) -> set[str]:
        """Extend by ``lease_seconds`` the leases of runs still ``running`` under exactly
        these claims; returns the run ids renewed (a run claimed again by anyone, even the
        same worker, is not)."""

    def give_back(self, claims: Sequence[RunClaim]) -> int:
        """Runs still ``running`` under these claims return to ``pending`` and their
        attempt is not counted (the body never began); returns how many."""

    def flags(self, run_ids: Sequence[str]) -> list[RunFlags]:
        """State, cancel flag and current claim token of each run."""

    def mark_started(self, claims: Sequence[RunClaim], at: datetime) -> set[str]:
        """``started_at`` = ``at`` for runs still under these claims; the ids marked."""

    def mark_started_each(self, started: Sequence[tuple[RunClaim, datetime]]) -> set[str]:
        """``mark_started`` with a time per claim, in one statement; the ids marked."""

    def finish(
        self,
        run_id: str,
        worker_id: str,
        attempt: int,
        state: RunState,
        result: Any,
        error: dict[str, Any] | None,
        now: datetime,
        started_at: datetime | None = None,
    ) -> bool:
        """Record an attempt's outcome under the claim ``<worker_id>/<attempt>`` (and
        ``started_at`` when given); must refuse (False) when the run was terminated or
        claimed again. Results and errors are stored losslessly, NUL included (FT-3)."""

    def finish_many(
        self, worker_id: str, outcomes: Sequence[AttemptOutcome], now: datetime
    ) -> set[str]:
        """``finish`` for many attempts in one statement; the run ids recorded (the others
        had moved on). A worker records a batch of outcomes at once, with the start of
        each body whose start it had not recorded yet."""

    def release_lost(self, now: datetime, max_attempts: int) -> tuple[int, list[StoreEndedRun]]:
        """Runs whose lease expired (by the store's clock): requeue as a new attempt
        without a claim, fail (``worker_lost``) after ``max_attempts``. Returns how many
        were requeued, and the runs failed."""

    def time_out_running(self, now: datetime, grace_seconds: float) -> list[StoreEndedRun]:
        """Running runs claimed longer ago than their execution timeout plus
        ``grace_seconds`` end ``timed_out``, whether or not their lease is renewed."""

    def time_out_pending(
        self, queued_before: datetime, now: datetime, timeout: float
    ) -> list[StoreEndedRun]:
        """Pending runs queued (created, or requeued after a lost worker) before the cutoff
        end ``timed_out``."""


class OutcomeRefused(Exception):
    """The store refused to record a run's outcome for a reason retrying cannot change (a
    value the database cannot hold): the same write would be refused again."""

    def __init__(self, run_id: str, cause: BaseException) -> None:
        super().__init__(f"the store refused the outcome of run {run_id} ({type(cause).__name__})")
        self.run_id = run_id


class RunLedgerStore(Protocol):
    """Runs by id, for an engine that executes them without a store lease (Temporal).

    ``Runs`` hands a local worker *some* runs of its queues by claim; such an engine is
    handed *one* run by id, and its sync sees what the engine decided, so both read and
    update a run by its id. ``claimed_by`` names the engine: its runs carry it with no
    lease, so the lease recovery of ``Runs.release_lost`` never touches them.

    Every update must leave a run that is no longer ``pending`` or ``running`` as it is
    (a terminate, a timeout, an outcome already recorded is never overwritten), and must
    ignore an attempt older than the newest one recorded (a worker the engine gave up on
    that lives on). ``claimed_at`` and ``started_at`` are the current attempt's (API.md
    "Runs").
    """

    def load(self, run_id: str) -> RunRecord | None: ...

    def start_state(self, run_id: str) -> StartState | None:
        """State of the start or occurrence that allocated ``run_id`` (None: there is none)."""

    def active(self, claimed_by: str, after_seq: int, limit: int) -> list[RunRecord]:
        """Pending or running runs, unclaimed or claimed by ``claimed_by``, with ``seq``
        after ``after_seq``, in row order."""

    def flags(self, run_id: str) -> tuple[RunState, bool] | None:
        """(state, cancel_requested) of a run."""

    def signals(self, run_ids: Sequence[str]) -> dict[str, RunSignal]:
        """State and cancel request of each run of ``run_ids`` the store knows, however
        many ids are given."""

    def mark_running(self, run_id: str, attempts: int, claimed_by: str, now: datetime) -> bool:
        """``running`` under ``claimed_by`` with at least ``attempts``, no lease; False
        (and no change) unless the run is still active and no later attempt was recorded.
        A newer attempt than the recorded one is claimed at ``now`` and has not started its
        body (``started_at`` cleared); marking the same attempt again keeps its times."""

    def mark_started(self, run_id: str, attempts: int, now: datetime) -> bool:
        """``started_at`` = ``now``; False (and no change) unless the run is still active at
        exactly attempt ``attempts``."""

    def finish(
        self,
        run_id: str,
        state: RunState,
        attempts: int,
        result: Any,
        error: dict[str, Any] | None,
        claimed_by: str,
        now: datetime,
    ) -> str | None:
        """Record the outcome of attempt ``attempts`` (``ended_at`` = ``now``, no lease);
        returns the run's tenant, or None (and no change) unless the run is still active
        and no later attempt was recorded. An outcome of an attempt newer than the
        recorded one clears ``claimed_at`` and ``started_at``: the older attempt's times
        would be wrong, the newer one's are not known. Results and errors are stored
        losslessly, NUL characters included (FT-3); values the store cannot hold raise
        ``OutcomeRefused``, an outage ``Unavailable`` (from the transaction)."""


class Schedules(Protocol):
    def insert(self, new: NewSchedule, now: datetime) -> Schedule:
        """A new schedule is at version 1, revision 1. A name another live schedule of the
        tenant has must raise ``Conflict`` ``name_taken`` (also from ``compare_and_set``)."""

    def get(
        self, tenant: str, schedule_id: str, *, lock: bool = False, deleted: bool = False
    ) -> Schedule | None:
        """A live schedule (``deleted=True`` also finds deleted ones, for their history)."""

    def name_taken(self, tenant: str, name: str, other_than: str | None = None) -> bool: ...

    def count_live(self, tenant: str) -> int: ...

    def lock_for_create(self, tenant: str) -> None:
        """Until commit, other creates of ``tenant``'s schedules must wait, so that a count
        and a name check followed by an insert are exact across processes."""

    def find(
        self, tenant: str, at: Seek[int], source: str | None = None
    ) -> list[tuple[int, Schedule]]:
        """The page of live schedules ``at`` selects, by ``seq``; with ``source``, only
        those last applied from it."""

    def by_name(self, tenant: str, name: str, *, lock: bool = False) -> Schedule | None:
        """The live schedule with that name (names are unique among live ones)."""

    def by_creator(self, tenant: str, subject: str) -> list[Schedule]: ...

    def count_using(self, workflow: str, version: str) -> tuple[int, int]:
        """Live schedules of ``workflow``, paused included: (pinned to ``version``,
        following the active version)."""

    def input_of(self, schedule_id: str) -> EncryptedInput: ...

    def compare_and_set(
        self, schedule_id: str, expected_version: int, now: datetime, **changes: Any
    ) -> bool:
        """User mutations and auto-disable: apply and bump ``version`` at the expected one."""

    def get_many(self, schedule_ids: Collection[str]) -> dict[str, Schedule]:
        """Schedules by id, deleted ones included (dispatch resolves a page at once)."""

    def claim_due_for_generation(self, horizon: datetime, limit: int) -> list[DueSchedule]:
        """Lock enabled schedules due by ``horizon`` until commit, earliest first;
        concurrent passes must skip locked ones (the schedule lock of RS-5)."""

    def move_cursors(self, moves: Sequence[CursorMove]) -> set[str]:
        """Move many cursors in one statement; bookkeeping, never ``version`` (RS-6). A
        move with a ``planned_version`` must skip a schedule no longer at that version (a
        concurrent edit is never overwritten); returns the ids of the schedules moved. A
        move with ``fires_counted`` also sets the count of the spec's fires (RS-9c)."""

    def note_ended(self, ended: Sequence[EndedStatus]) -> None:
        """``last_status``/``last_run_id`` after runs ended (CR-4): a schedule's row moves
        only when the run's ``occurrence_at`` is not older than the occurrence it shows
        (a late end of an older run never overwrites a newer one)."""

    def note_fired(self, fired: Sequence[Fired], at: datetime) -> None:
        """``last_fired_at``/``last_run_id``/``last_status`` of schedules whose occurrences
        were dispatched (the last of a schedule wins); written in schedule id order, so
        concurrent writers cannot deadlock."""

    def earliest_generation(self) -> datetime | None: ...

    def record_event(self, tenant: str, schedule_id: str, event: ScheduleEvent) -> None:
        """Append to the schedule's history (the missed-run audit's, RS-10)."""

    def events(self, schedule_id: str) -> list[ScheduleEvent]:
        """The schedule's history, oldest first."""

    def lock_for_dispatch(self, schedule_id: str) -> Schedule | None:
        """Hold the schedule row until commit, deleted or not (overlap decisions, RS-3)."""
