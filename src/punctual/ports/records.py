"""Plain records that cross the store port and are not domain aggregates."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from punctual.domain.permissions import Principal, Role
from punctual.domain.runs import RunState
from punctual.domain.schedules import Schedule, ScheduleSettings
from punctual.domain.starts import ScheduledStart, StartRequest


@dataclass(frozen=True)
class TokenRecord:
    id: str
    tenant: str
    subject: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    seq: int = 0


@dataclass(frozen=True)
class MemberRecord:
    tenant: str
    subject: str
    role: Role
    created_at: datetime


@dataclass(frozen=True)
class IdempotencyRecord:
    tenant: str
    principal: str
    key: str
    fingerprint: str
    state: str  # "in_flight" | "done"
    owner: str
    lease_until: datetime
    status_code: int | None
    response: Any


@dataclass(frozen=True)
class KeyOutcome:
    """A decided outcome to record under an idempotency key (OS-4)."""

    key: str
    status_code: int
    response: Any
    resource_id: str | None


@dataclass(frozen=True)
class EncryptedInput:
    key_id: str
    ciphertext: bytes


# --- codec keys (RT-2) ------------------------------------------------------------------------


class SealedKind(StrEnum):
    """Where stored values sealed with a codec key live, counted while they may still be
    read (a terminal record's input is never read again)."""

    STARTS = "starts"
    """Input of pending, dispatching and buffered starts and occurrences."""
    RUNS = "runs"
    """Input of pending and running runs."""
    SCHEDULES = "schedules"
    """Input of live schedules (paused ones included)."""
    WEBHOOK_URLS = "webhook_urls"
    """URLs of live webhooks."""
    WEBHOOK_SECRETS = "webhook_secrets"
    """Secrets of live webhooks that have one."""


@dataclass(frozen=True)
class SealedValue:
    """One stored value sealed with a codec key; ``tenant`` is its associated data."""

    kind: SealedKind
    seq: int
    id: str
    tenant: str
    sealed: EncryptedInput


@dataclass(frozen=True)
class Resealed:
    """A value sealed again: replaced only while the row still holds ``old``."""

    id: str
    old: EncryptedInput
    new: EncryptedInput


@dataclass(frozen=True)
class ProcessRecord:
    """A running punctual process as it reports itself: the codec keys its ring holds and
    the one it seals with (None while it refuses to seal, lacking the active key)."""

    id: str
    host: str
    pid: int
    components: list[str]
    key_ids: list[str]
    active_key_id: str | None
    started_at: datetime
    heartbeat_at: datetime | None = None
    """Set by the store, on its own clock (the database's on PostgreSQL)."""


@dataclass(frozen=True)
class NewStart(StartRequest):
    input: EncryptedInput
    created_by: str
    run_id: str


@dataclass(frozen=True)
class ClaimedStart:
    """A start a runner holds under a lease, with what dispatch needs to start its run."""

    id: str
    tenant: str
    workflow: str
    workload_class: str
    traceparent: str | None
    input: EncryptedInput
    created_by: str
    run_id: str
    version: int
    attempts: int
    origin: dict[str, Any] = field(default_factory=dict)
    schedule_id: str | None = None
    due_at: datetime | None = None
    occurrence_at: datetime | None = None
    claimed_by: str = ""
    claim_seq: int = 0
    occurrence_origin: str | None = None
    """An occurrence's ``OccurrenceOrigin`` value (None for a one-off start)."""
    overlap: str | None = None
    """The overlap policy its trigger or backfill request named (None: the schedule's)."""
    start_deadline_at: datetime | None = None
    """An occurrence's start deadline (RS-10): never started after it."""

    @property
    def token(self) -> ClaimToken:
        return ClaimToken(self.id, self.version, self.claimed_by, self.claim_seq)


@dataclass(frozen=True)
class ClaimToken:
    """Which claim of a start a runner holds (FT-5): a claim does not change the start's
    version, so what a runner records is matched on (id, version, claimer, claim sequence)
    and refused once another claim, a cancel or a reschedule came in between."""

    start_id: str
    version: int
    claimed_by: str
    claim_seq: int


@dataclass(frozen=True)
class DispatchedStart:
    """A claimed start to record as dispatched, under the claim token it was claimed with."""

    claim: ClaimToken
    attempts: int
    definition_version: str
    artifact: str


@dataclass(frozen=True)
class NewRun:
    id: str
    tenant: str
    workflow: str
    definition_version: str
    artifact: str
    origin: dict[str, Any]
    started_by: str
    input: EncryptedInput
    task_queue: str
    priority: int
    traceparent: str | None
    timeout_seconds: float


@dataclass(frozen=True)
class ClaimedRun:
    """A run a worker holds under a lease: attempt number and encrypted input included."""

    id: str
    tenant: str
    workflow: str
    definition_version: str
    origin: dict[str, Any]
    attempt: int
    input: EncryptedInput
    timeout_seconds: float
    claim_token: str
    """``<worker id>/<attempt>``: this claim, as renewal, flags and the outcome match it."""
    traceparent: str | None = None
    """The W3C trace context its start carried, handed to the body (OS-1)."""

    @property
    def claim(self) -> RunClaim:
        return RunClaim(self.id, self.claim_token)


@dataclass(frozen=True)
class RunClaim:
    """One run under one claim (FT-2): the worker acts on the run only while it matches."""

    run_id: str
    token: str


@dataclass(frozen=True)
class AttemptOutcome:
    """How one attempt of a run ended, as its worker records it (``Runs.finish_many``)."""

    run_id: str
    attempt: int
    state: str  # a RunState value
    result: Any
    error: dict[str, Any] | None
    started_at: datetime | None = None
    """When the body began, if not recorded yet: written with the outcome, one statement."""


@dataclass(frozen=True)
class StoreEndedRun:
    """A run the store ended itself, no worker having recorded its outcome (timed out,
    failed after lost workers): what its one end line names (SPEC OP-4)."""

    tenant: str
    id: str
    workflow: str
    attempts: int
    state: str


@dataclass(frozen=True)
class RunFlags:
    id: str
    state: str
    cancel_requested: bool
    claim_token: str | None = None
    """Whose claim the run is under now; another than the worker's own means stop."""


@dataclass(frozen=True)
class RunRecord:
    """A run as an engine that is handed one run by id needs it (``RunLedgerStore``), its
    input still encrypted."""

    id: str
    seq: int
    tenant: str
    workflow: str
    definition_version: str
    state: RunState
    attempts: int
    origin: dict[str, Any]
    input: EncryptedInput
    task_queue: str
    priority: int
    timeout_seconds: float
    cancel_requested: bool
    created_at: datetime
    result: Any
    error: dict[str, Any] | None
    traceparent: str | None = None
    """The W3C trace context its start carried, handed to the body (OS-1)."""

    @property
    def active(self) -> bool:
        return self.state in (RunState.PENDING, RunState.RUNNING)


@dataclass(frozen=True)
class RunSignal:
    """What the store asks of a run's execution: its state and whether cancel is asked."""

    tenant: str
    state: RunState
    cancel_requested: bool


@dataclass(frozen=True)
class WorkerRecord:
    id: str
    engine: str
    host: str
    task_queues: list[str]
    loaded: list[tuple[str, str, str]]  # (workflow, version, artifact)
    slots: int
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None


@dataclass(frozen=True)
class Finding:
    id: str
    tenant: str
    kind: str
    subject_id: str
    severity: str
    message: str
    created_at: datetime
    acknowledged_at: datetime | None
    acknowledged_by: str | None


@dataclass(frozen=True)
class StartFilter:
    state: str | None = None
    workflow: str | None = None
    business_request_id: str | None = None


@dataclass(frozen=True)
class RunFilter:
    workflow: str | None = None
    state: str | None = None
    origin_id: str | None = None
    """The start's or occurrence's id (``origin.id``)."""
    schedule_id: str | None = None
    """Runs of that schedule's occurrences."""
    source: str | None = None
    """``origin.source``: ``scheduled_start`` (runs of one-off starts) or ``schedule``
    (runs of occurrences, triggered and backfilled ones too)."""


@dataclass(frozen=True)
class OccurrenceFilter:
    state: str | None = None
    origin: str | None = None
    """``schedule`` (a stored null counts as it), ``trigger`` or ``backfill``."""
    start: datetime | None = None
    end: datetime | None = None
    """``[start, end)``: occurrences whose instant, or any instant of whose skipped range,
    falls in it; either bound may be open."""


class Order(StrEnum):
    """The order a list is read in: the order its rows were recorded (``seq``), either way."""

    NEWEST = "newest"
    """Newest first (``seq`` descending): every list's default."""
    OLDEST = "oldest"
    """Oldest first (``seq`` ascending)."""


P = TypeVar("P")


@dataclass(frozen=True)
class Seek(Generic[P]):
    """Which rows of a list a store reads (keyset paging): at most ``limit``, in ``order``,
    strictly past ``after`` (the position of the previous page's last row: its ``seq``, or
    a member's ``(created_at, subject)``), from the first row when ``after`` is None."""

    limit: int
    after: P | None = None
    order: Order = Order.NEWEST


@dataclass(frozen=True)
class NewSchedule:
    """A schedule to insert: its settings, decided, and what its creation fixes."""

    id: str
    tenant: str
    settings: ScheduleSettings
    input: EncryptedInput
    pinned_version: str | None
    created_by: str
    cursor: datetime
    next_fire_at: datetime | None


@dataclass(frozen=True)
class NewOccurrence:
    """An occurrence to insert: a start of a schedule, or a record of a decision not to."""

    id: str
    tenant: str
    schedule_id: str
    revision: int
    workflow: str
    workload_class: str
    input: EncryptedInput
    created_by: str
    business_request_id: str
    occurrence_at: datetime
    due_at: datetime
    nominal: str | None
    dst_adjustment: str | None
    run_id: str
    state: str = "scheduled"
    reason: str | None = None
    reason_detail: str | None = None
    """What the decision names beyond its reason (a blackout's own reason, RS-10)."""
    spec_indexes: list[int] | None = None
    """The specs that yielded it (RS-10); None for a trigger."""
    calendar_moved_from: datetime | None = None
    start_deadline_at: datetime | None = None
    """Not started after this (the schedule's ``start_deadline_ms`` after it was due)."""
    range_last: datetime | None = None
    range_count: int | None = None
    origin: str = "schedule"
    """An ``OccurrenceOrigin`` value."""
    overlap: str | None = None
    """The overlap policy a trigger or backfill request named (None: the schedule's)."""
    rerun: int = 0
    """0 for the first row of an instant; a backfill that generates the instant again
    after skipped or failed rows takes the next number (they stay as history)."""


@dataclass(frozen=True)
class StoredOccurrence:
    """An occurrence with its ``rerun`` number (``NewOccurrence.rerun``)."""

    occurrence: ScheduledStart
    rerun: int


@dataclass(frozen=True)
class DueSchedule:
    """A schedule the generation pass holds locked, with the sealed input its occurrences
    copy (read by the claim itself, so a pass needs no read per schedule)."""

    schedule: Schedule
    input: EncryptedInput


@dataclass(frozen=True)
class CursorMove:
    """Where a generation pass leaves a schedule: runner bookkeeping, never a version."""

    schedule_id: str
    cursor: datetime
    next_fire_at: datetime | None
    planned_version: int | None = None
    """The schedule version the plan was made from; the move applies only at it (None:
    unconditionally, for bookkeeping outside a pass)."""
    fires_counted: int | None = None
    """The schedule's spec fires decided so far, this pass's included (RS-9c); None leaves
    the count as it is."""


@dataclass(frozen=True)
class Fired:
    """A schedule's latest occurrence dispatched in a pass (``last_fired_at``/``last_run_id``)."""

    schedule_id: str
    run_id: str


@dataclass(frozen=True)
class EndedRun:
    """A run of a schedule's occurrence that awaits its follow-through (CR-4, CR-5).

    ``stage`` is 0 while nothing was recorded yet, 1 once ``finalize_timed_out`` was
    recorded and the run had not ended (its later end then only moves ``last_status``).
    ``state`` is the run's state now: terminal for a claimed end, live for an overdue run.
    """

    run_id: str
    tenant: str
    schedule_id: str
    occurrence_id: str
    occurrence_at: datetime
    state: str
    result: Any
    created_at: datetime
    ended_at: datetime | None
    stage: int
    error: dict[str, Any] | None = None
    """How it failed, ``{"code", "message"}`` (``too_late``: it never began, RS-10)."""


@dataclass(frozen=True)
class BaselineRun:
    """The completed run with the greatest ``occurrence_at`` below another's (CR-4)."""

    run_id: str
    occurrence_at: datetime
    result: Any


@dataclass(frozen=True)
class FollowThroughRecord:
    """An occurrence's follow-through as API.md shows it (``follow_through``)."""

    occurrence_id: str
    tenant: str
    schedule_id: str
    run_id: str
    status: str  # ok | regressed | not_comparable | no_policy | finalize_timed_out
    reason: str | None
    previous_run_id: str | None
    regressions: list[dict[str, Any]]
    recorded_at: datetime


@dataclass(frozen=True)
class EndedStatus:
    """``last_status``/``last_run_id`` of a schedule after one of its runs ended; applied
    only when ``occurrence_at`` is not older than the one already shown (CR-4)."""

    schedule_id: str
    run_id: str
    status: str
    occurrence_at: datetime


@dataclass(frozen=True)
class NewNotification:
    id: str
    tenant: str
    recipient: str
    kind: str  # regression | schedule_auto_disabled | finalize_timed_out | start_failed
    schedule_id: str | None
    occurrence_id: str | None
    run_id: str | None
    title: str
    text: str
    details: dict[str, Any]
    event_id: str
    """The event it belongs to: one event may notify several recipients and webhooks."""


@dataclass(frozen=True)
class Notification:
    id: str
    tenant: str
    recipient: str
    kind: str
    schedule_id: str | None
    occurrence_id: str | None
    run_id: str | None
    title: str
    text: str
    details: dict[str, Any]
    event_id: str
    created_at: datetime
    read_at: datetime | None
    seq: int = 0


@dataclass(frozen=True)
class NewWebhook:
    id: str
    tenant: str
    url: EncryptedInput
    """The whole URL, encrypted with the codec (a Slack URL is a credential)."""
    url_display: str
    """The URL cut after its host (``https://hooks.example.com/…``): what reads show."""
    secret: EncryptedInput | None
    events: list[str]
    created_by: str


@dataclass(frozen=True)
class WebhookRecord:
    id: str
    tenant: str
    url: EncryptedInput
    url_display: str
    secret: EncryptedInput | None
    events: list[str]
    created_by: str
    created_at: datetime
    updated_at: datetime
    seq: int = 0


@dataclass(frozen=True)
class NewDelivery:
    """One event to one webhook, written in the transaction that decided the event
    (the transactional outbox of CR-4); ``event_id`` is stable across retries."""

    id: str
    tenant: str
    webhook_id: str
    event_id: str
    kind: str
    payload: dict[str, Any]
    schedule_id: str | None = None
    occurrence_id: str | None = None
    run_id: str | None = None
    """What the event is about: a hold on any of them keeps the delivery (RT-1)."""


@dataclass(frozen=True)
class Delivery:
    id: str
    tenant: str
    webhook_id: str
    event_id: str
    kind: str
    status: str  # pending | delivered | failed
    attempts: int
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    created_at: datetime
    seq: int = 0


@dataclass(frozen=True)
class ClaimedDelivery:
    """A due delivery leased to one deliverer, with what it needs to send it."""

    id: str
    tenant: str
    webhook_id: str
    event_id: str
    kind: str
    payload: dict[str, Any]
    attempts: int
    """Attempts made before this one."""
    created_at: datetime
    url: EncryptedInput
    secret: EncryptedInput | None
    claim_token: str


@dataclass(frozen=True)
class DeliveryOutcome:
    """What one attempt did: ``status`` is ``delivered``, ``pending`` (retry at
    ``next_attempt_at``) or ``failed`` (given up). ``last_error`` never holds a URL's path."""

    delivery_id: str
    claim_token: str
    status: str
    status_code: int | None
    error: str | None
    next_attempt_at: datetime | None


# --- retention, holds and the audit log (RT-1, CR-8) ------------------------------------------


@dataclass(frozen=True)
class NewHold:
    id: str
    tenant: str
    subject_kind: str  # start | schedule | run | tenant
    subject_id: str
    """The held record's id; a tenant hold names its tenant."""
    reason: str
    created_by: str
    placed_by_host: bool


@dataclass(frozen=True)
class Hold:
    id: str
    tenant: str
    subject_kind: str
    subject_id: str
    reason: str
    created_by: str
    created_at: datetime
    released_at: datetime | None
    released_by: str | None
    placed_by_host: bool
    seq: int = 0


@dataclass(frozen=True)
class NewAuditEntry:
    """One decided user mutation: who, with which token, what, and how it was answered.
    Never a body or input."""

    id: str
    tenant: str
    actor: str
    token_id: str | None
    token_digest: str | None
    """The request's token by its digest, when the edge knows no id: the store resolves it
    to the token's id (no token when neither is given: a host action)."""
    action: str
    method: str
    path: str
    subject_kind: str | None
    subject_id: str | None
    status: int


@dataclass(frozen=True)
class AuditEntry:
    id: str
    tenant: str
    at: datetime
    actor: str
    token_id: str | None
    action: str
    method: str
    path: str
    subject_kind: str | None
    subject_id: str | None
    status: int
    seq: int = 0


@dataclass(frozen=True)
class LiveToken:
    """A token that may be used now: whose it is, and until when (None: no expiry)."""

    principal: Principal
    expires_at: datetime | None
