"""The store's repositories of what punctual tells people: health findings,
follow-through, notifications and webhooks."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, Protocol

from punctual.ports.records import (
    BaselineRun,
    ClaimedDelivery,
    Delivery,
    DeliveryOutcome,
    EndedRun,
    Finding,
    FollowThroughRecord,
    NewDelivery,
    NewNotification,
    NewWebhook,
    Notification,
    Seek,
    WebhookRecord,
)


class Findings(Protocol):
    def raise_finding(
        self, tenant: str, kind: str, subject_id: str, severity: str, message: str, now: datetime
    ) -> bool:
        """One finding per (tenant, kind, subject); True if new."""

    def clear(self, tenant: str, kind: str, subject_id: str) -> None: ...

    def clear_each(self, kind: str, subjects: Collection[tuple[str, str]]) -> None:
        """``clear`` for many (tenant, subject) pairs of one kind, in one statement."""

    def find(self, tenant: str, after_seq: int = 0, limit: int = 100) -> list[Finding]: ...

    def latest(self, tenant: str, limit: int) -> list[Finding]:
        """At most ``limit`` findings for a report: unacknowledged ones first, newest first
        within each group, so a long history never hides a new failure."""

    def count_open(self, tenant: str, severity: str) -> int:
        """Unacknowledged findings of ``severity``, however many there are."""

    def get(self, tenant: str, finding_id: str) -> Finding | None: ...

    def acknowledge(
        self, tenant: str, finding_id: str, subject: str, now: datetime
    ) -> Finding | None: ...


class FollowThrough(Protocol):
    """Which runs of occurrences await their follow-through, and what it recorded (CR-4,
    CR-5). A run of a schedule is *awaiting* from its insert (stage 0) until
    ``mark_done``; every path that ends a run sets ``ended_at``, so the claim below sees
    every end of every engine without any path having to call it."""

    def claim_ended(self, limit: int) -> list[EndedRun]:
        """Awaiting runs that have ended (stage 0 or 1, ``ended_at`` set), oldest end
        first, locked until commit; concurrent passes must skip locked ones. Cost flat in
        the number of runs (a partial index over the awaiting ones)."""

    def claim_overdue(self, created_before: datetime, limit: int) -> list[EndedRun]:
        """Stage-0 runs not ended and created before ``created_before`` (CR-5's deadline
        counts from the run's creation), locked until commit, skipping locked ones."""

    def baseline(self, schedule_id: str, occurrence_at: datetime) -> BaselineRun | None:
        """The completed run of the schedule whose occurrence is the latest one strictly
        before ``occurrence_at`` among completed runs (CR-4's baseline)."""

    def record(self, records: Sequence[FollowThroughRecord]) -> set[str]:
        """Insert or replace each occurrence's follow-through; returns the occurrence ids
        written. Replacing is how a ``finalize_timed_out`` stays when the run ends later:
        the caller does not write again in that case (idempotent per occurrence)."""

    def get_many(self, occurrence_ids: Collection[str]) -> dict[str, FollowThroughRecord]: ...

    def mark_stage(self, run_ids: Sequence[str], stage: int) -> None:
        """Stage 1 (finalize_timed_out recorded, run still live) or 2 (done: never claimed
        again)."""

    def hold_outcomes(self) -> None:
        """Hold the lock of schedules' outcome judgements until commit: passes that judge
        schedules' last runs (``schedule_failing``, OP-2) do so one at a time, each reading
        what the one before it wrote. One statement, however many schedules a pass has."""

    def latest_outcomes(
        self, schedule_ids: Collection[str], count: int
    ) -> dict[str, list[tuple[str, str]]]:
        """Per schedule, its last ``count`` runs to end ``completed``, ``failed`` or
        ``timed_out`` as (run id, state), the latest end first; schedules without such
        runs are absent. Cost flat in the schedules' history (an index by schedule and end)."""


class Notifications(Protocol):
    def insert(self, notes: Sequence[NewNotification], now: datetime) -> None: ...

    def find(
        self,
        tenant: str,
        recipient: str,
        *,
        unread_only: bool,
        at: Seek[int],
    ) -> list[Notification]:
        """The page of the recipient's notifications ``at`` selects, by ``seq``."""

    def get(self, tenant: str, recipient: str, notification_id: str) -> Notification | None:
        """Only the recipient's own: another principal's notification is absent."""

    def mark_read(
        self, tenant: str, recipient: str, notification_id: str, now: datetime
    ) -> Notification | None:
        """Set ``read_at`` once (idempotent: a second call keeps the first time)."""


class Webhooks(Protocol):
    def insert(self, new: NewWebhook, now: datetime) -> WebhookRecord: ...

    def get(self, tenant: str, webhook_id: str) -> WebhookRecord | None:
        """A live webhook (deleted ones are absent)."""

    def find(self, tenant: str, at: Seek[int]) -> list[WebhookRecord]:
        """The page of live webhooks ``at`` selects, by ``seq``."""

    def update(
        self, tenant: str, webhook_id: str, now: datetime, **changes: Any
    ) -> WebhookRecord | None:
        """Change ``url``/``url_display``/``secret``/``events`` of a live webhook."""

    def delete(self, tenant: str, webhook_id: str, now: datetime) -> bool:
        """Mark deleted; its pending deliveries end ``failed`` (nobody to send to)."""

    def subscribed(self, tenant: str, kind: str) -> list[WebhookRecord]:
        """Live webhooks of the tenant whose ``events`` include ``kind`` (an empty
        ``events`` list means every kind)."""

    def enqueue(self, deliveries: Sequence[NewDelivery], now: datetime) -> None:
        """Outbox rows, ``pending`` and due now, in the caller's transaction."""

    def claim_due(self, now: datetime, lease_seconds: float, limit: int) -> list[ClaimedDelivery]:
        """Lease pending deliveries due by ``now`` (``next_attempt_at``), oldest first,
        skipping rows locked by another deliverer: a claimed row's ``next_attempt_at``
        moves to ``now + lease_seconds``, so a deliverer killed mid-send leaves it due
        again after the lease (at least once). Each claim takes a new ``claim_token``."""

    def settle(self, outcomes: Sequence[DeliveryOutcome], now: datetime) -> set[str]:
        """Record attempts under their claim token (an outdated token records nothing);
        ``attempts`` grows by one; returns the ids recorded."""

    def deliveries(self, tenant: str, webhook_id: str, at: Seek[int]) -> list[Delivery]:
        """The page of the webhook's deliveries ``at`` selects, by ``seq``."""

    def get_delivery(self, tenant: str, webhook_id: str, delivery_id: str) -> Delivery | None: ...

    def redeliver(
        self, tenant: str, webhook_id: str, delivery_id: str, new_id: str, now: datetime
    ) -> Delivery | None:
        """A new pending delivery of the same event (same ``event_id`` and payload)."""

    def count_failed(self, tenant: str) -> int: ...
