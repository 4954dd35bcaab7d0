"""A tenant's webhooks: create, read, change, delete, test, deliveries, redeliver (CR-4).

Only admins manage webhooks: a webhook receives every subscribed event of the tenant.
A webhook URL is a credential (a Slack or Mattermost URL carries its token in the path),
so the URL and the secret are stored encrypted with the codec, reads show the URL cut
after its host, the secret is never returned, and no message names a URL's path or query.

Check order (API.md): existence, validation that reads only the request, role, then the
destination check. That check resolves the URL's host, so only an admin can make punctual
look a name up; the HTTP edge runs it before the transaction opens (``screen``) and the
mutation only reads its verdict, so no store lock is held while a resolver answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from punctual.domain.ids import new_id
from punctual.domain.permissions import Action, Principal, allowed, require
from punctual.domain.webhooks import display_url, url_problem
from punctual.errors import InvalidRequest, not_found, webhook_url_not_allowed
from punctual.ports.records import Delivery, EncryptedInput, NewWebhook, Order, Seek, WebhookRecord
from punctual.ports.store import Tx
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import Answer, Mutation, Outcome
from punctual.usecases.kernel.paging import page, read_page, seek
from punctual.usecases.kernel.projections import ts
from punctual.usecases.outbound.outbox import (
    KINDS,
    TEST_KIND,
    NotificationEvent,
    enqueue_deliveries,
)

MAX_SECRET_LENGTH = 1024
MAX_EVENTS = 50
EDITABLE_FIELDS = frozenset({"url", "events", "secret"})


@dataclass(frozen=True)
class CreateWebhook:
    url: str
    events: tuple[str, ...] | None = None
    """None (or empty) subscribes to every kind, kinds added later included."""
    secret: str | None = None


@dataclass(frozen=True)
class UpdateWebhook:
    """Only the fields sent change: ``url``, ``events`` (None: every kind) and ``secret``
    (a new value rotates it, None removes it, so deliveries go unsigned)."""

    webhook_id: str
    changes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Screening:
    """Destination verdicts reached before the transaction opened: URL to the reason it
    is refused, or None when allowed. A URL not screened is checked in the mutation."""

    verdicts: Mapping[str, str | None] = field(default_factory=dict)

    def problem(self, services: Services, url: str) -> str | None:
        if url in self.verdicts:
            return self.verdicts[url]
        return services.webhooks.destination_problem(url)


def screen(services: Services, principal: Principal, urls: Sequence[str | None]) -> Screening:
    """Resolve the destinations an admin's request names, outside any transaction; for
    anyone else, or for a URL that is malformed anyway, nothing is looked up."""
    if not allowed(principal, Action.ADMINISTER):
        return Screening()
    verdicts: dict[str, str | None] = {}
    for url in urls:
        if isinstance(url, str) and url not in verdicts and _url_problem(url) is None:
            verdicts[url] = services.webhooks.destination_problem(url)
    return Screening(verdicts)


def _url_problem(url: Any) -> str | None:
    """Why ``url`` is no webhook URL, judged from its text alone (the domain's rules)."""
    if not isinstance(url, str) or not url:
        return "it must be a non-empty string"
    return url_problem(url)


def _check_url(url: Any) -> str:
    """The display form of a valid URL: cut after its host (and port)."""
    problem = _url_problem(url)
    if problem is not None:
        raise webhook_url_not_allowed(problem)
    return display_url(url)


def _check_destination(services: Services, screening: Screening, url: str) -> None:
    problem = screening.problem(services, url)
    if problem is not None:
        raise webhook_url_not_allowed(_without_location(problem, url))


def _without_location(reason: str, url: str) -> str:
    """The sender promises a reason without the URL's path or query; this keeps that
    promise whatever sender is plugged in."""
    parts = urlsplit(url)
    for secret_part in (parts.path, parts.query, parts.fragment):
        if len(secret_part) > 1 and secret_part in reason:
            reason = reason.replace(secret_part, "/…")
    return reason


def _check_events(events: Any) -> list[str]:
    """Known kinds only, each once, in the order given; None or empty means every kind."""
    if events is None:
        return []
    if not isinstance(events, list | tuple) or len(events) > MAX_EVENTS:
        raise InvalidRequest(
            f"events must be a list of at most {MAX_EVENTS} event kinds, or null for every kind",
            errors=[{"loc": ["body", "events"], "msg": "a list of kinds", "type": "list_type"}],
        )
    unknown = [i for i, kind in enumerate(events) if kind not in KINDS]
    if unknown:
        raise InvalidRequest(
            f"events may only name these kinds: {', '.join(KINDS)}; details.errors points "
            "at the others",
            code="unknown_event_kind",
            kinds=list(KINDS),
            errors=[
                {"loc": ["body", "events", i], "msg": "unknown event kind", "type": "enum"}
                for i in unknown
            ],
        )
    return list(dict.fromkeys(events))


def _check_secret(secret: Any) -> None:
    if secret is not None and (
        not isinstance(secret, str) or not 1 <= len(secret) <= MAX_SECRET_LENGTH
    ):
        raise InvalidRequest(
            f"secret must be a string of 1 to {MAX_SECRET_LENGTH} characters, or null",
            errors=[{"loc": ["body", "secret"], "msg": "1..1024 characters", "type": "string"}],
        )


def _sealed(services: Services, tenant: str, value: str | None) -> EncryptedInput | None:
    return services.codec.encrypt(value, tenant) if value is not None else None


def webhook_view(hook: WebhookRecord) -> dict[str, Any]:
    """``events: []`` means every kind. The secret, sealed or not, is never shown."""
    return {
        "id": hook.id,
        "url": hook.url_display,
        "events": list(hook.events),
        "created_at": ts(hook.created_at),
    }


def delivery_view(delivery: Delivery) -> dict[str, Any]:
    """The fields API.md lists; ``last_error`` in the shape every ``last_error`` has."""
    last_error = None
    if delivery.last_error is not None:
        last_error = {
            "code": "http_status" if delivery.last_status_code is not None else "not_delivered",
            "message": delivery.last_error,
            "at": None,
        }
    return {
        "id": delivery.id,
        "event_id": delivery.event_id,
        "kind": delivery.kind,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "last_status_code": delivery.last_status_code,
        "last_error": last_error,
        "next_attempt_at": ts(delivery.next_attempt_at),
        "delivered_at": ts(delivery.delivered_at),
    }


def _load(tx: Tx, principal: Principal, webhook_id: str) -> WebhookRecord:
    hook = tx.webhooks.get(principal.tenant, webhook_id)
    if hook is None:
        raise not_found("webhook", webhook_id)
    return hook


def create(
    services: Services,
    principal: Principal,
    cmd: CreateWebhook,
    screening: Screening | None = None,
) -> Mutation:
    def mutation(tx: Tx, now: datetime) -> Outcome:
        display = _check_url(cmd.url)
        events = _check_events(cmd.events)
        _check_secret(cmd.secret)
        require(principal, Action.ADMINISTER)
        _check_destination(services, screening or Screening(), cmd.url)
        hook = tx.webhooks.insert(
            NewWebhook(
                id=new_id("whk"),
                tenant=principal.tenant,
                url=services.codec.encrypt(cmd.url, principal.tenant),
                url_display=display,
                secret=_sealed(services, principal.tenant, cmd.secret),
                events=events,
                created_by=principal.subject,
            ),
            now,
        )
        return Outcome(Answer.CREATED, webhook_view(hook), resource_id=hook.id)

    return mutation


def update(
    services: Services,
    principal: Principal,
    cmd: UpdateWebhook,
    screening: Screening | None = None,
) -> Mutation:
    def mutation(tx: Tx, now: datetime) -> Outcome:
        hook = _load(tx, principal, cmd.webhook_id)
        unknown = sorted(set(cmd.changes) - EDITABLE_FIELDS)
        if unknown:
            raise InvalidRequest(
                f"these fields cannot be changed: {', '.join(unknown)}",
                errors=[
                    {"loc": ["body", k], "msg": "not editable", "type": "extra"} for k in unknown
                ],
            )
        changes: dict[str, Any] = {}
        url = cmd.changes.get("url")
        if "url" in cmd.changes:
            if url is None:
                raise InvalidRequest(
                    "url cannot be removed: send the new URL, or delete the webhook",
                    errors=[{"loc": ["body", "url"], "msg": "a URL", "type": "string_type"}],
                )
            changes["url_display"] = _check_url(url)
        if "events" in cmd.changes:
            changes["events"] = _check_events(cmd.changes["events"])
        if "secret" in cmd.changes:
            _check_secret(cmd.changes["secret"])
        require(principal, Action.ADMINISTER)
        if isinstance(url, str):
            _check_destination(services, screening or Screening(), url)
            changes["url"] = services.codec.encrypt(url, principal.tenant)
        if "secret" in cmd.changes:
            changes["secret"] = _sealed(services, principal.tenant, cmd.changes["secret"])
        if changes:
            updated = tx.webhooks.update(principal.tenant, hook.id, now, **changes)
            if updated is None:  # deleted since it was read
                raise not_found("webhook", hook.id)
            hook = updated
        return Outcome(Answer.DONE, webhook_view(hook), resource_id=hook.id)

    return mutation


def delete(services: Services, principal: Principal, webhook_id: str) -> Mutation:
    """Its pending deliveries end ``failed``: there is nobody left to send them to."""
    del services

    def mutation(tx: Tx, now: datetime) -> Outcome:
        hook = _load(tx, principal, webhook_id)
        require(principal, Action.ADMINISTER)
        if not tx.webhooks.delete(principal.tenant, hook.id, now):
            raise not_found("webhook", hook.id)
        return Outcome(Answer.REMOVED, None, resource_id=hook.id)

    return mutation


def get(services: Services, principal: Principal, webhook_id: str) -> dict[str, Any]:
    with services.store.transaction(readonly=True) as tx:
        hook = _load(tx, principal, webhook_id)
    require(principal, Action.ADMINISTER)
    return webhook_view(hook)


def list_webhooks(
    services: Services,
    principal: Principal,
    limit: int,
    cursor: str | None,
    order: str | None = None,
) -> dict[str, Any]:
    """Admins only; newest first unless ``order`` is ``oldest``."""
    at = seek(limit, cursor, order, legacy=Order.OLDEST)
    require(principal, Action.ADMINISTER)
    return read_page(services, principal, at, lambda tx: tx.webhooks.find, webhook_view)


def list_deliveries(
    services: Services,
    principal: Principal,
    webhook_id: str,
    limit: int,
    cursor: str | None,
    order: str | None = None,
) -> dict[str, Any]:
    """Admins only; newest first unless ``order`` is ``oldest``."""
    at = seek(limit, cursor, order, legacy=Order.NEWEST)
    with services.store.transaction(readonly=True) as tx:
        hook = _load(tx, principal, webhook_id)
        require(principal, Action.ADMINISTER)
        rows = tx.webhooks.deliveries(principal.tenant, hook.id, at)
    return page([(d.seq, d) for d in rows], at, delivery_view)


def queued_view(event_id: str, delivery_id: str | None) -> dict[str, Any]:
    """The ``202`` of test and redeliver: ``status`` tells it apart from an undecided
    request's ``{"status": "in_progress"}``."""
    return {"status": "queued", "event_id": event_id, "delivery_id": delivery_id}


def send_test(services: Services, principal: Principal, webhook_id: str) -> Mutation:
    """A ``test`` event to this webhook only, through the same outbox as real events (so it
    proves the whole path). A 202 is not recorded against the idempotency key: each
    accepted call queues one test event."""

    def mutation(tx: Tx, now: datetime) -> Outcome:
        hook = _load(tx, principal, webhook_id)
        require(principal, Action.ADMINISTER)
        event_id = new_id("evt")
        event = NotificationEvent(
            tenant=principal.tenant,
            kind=TEST_KIND,
            title="Test event",
            text=f"punctual test event for webhook {hook.id} of tenant {principal.tenant}",
            details={"webhook_id": hook.id, "requested_by": principal.subject},
        )
        enqueue_deliveries(tx, [hook], event, event_id, now)
        newest = tx.webhooks.deliveries(principal.tenant, hook.id, Seek(limit=1))
        delivery_id = newest[0].id if newest and newest[0].event_id == event_id else None
        return Outcome(
            Answer.ACCEPTED,
            queued_view(event_id, delivery_id),
            resource_id=hook.id,
            after_commit=services.on_deliveries_queued,
        )

    return mutation


def redeliver(
    services: Services, principal: Principal, webhook_id: str, delivery_id: str
) -> Mutation:
    """A new delivery of the same event: same ``event_id`` and payload, so a receiver that
    already processed it can tell."""

    def mutation(tx: Tx, now: datetime) -> Outcome:
        hook = _load(tx, principal, webhook_id)
        if tx.webhooks.get_delivery(principal.tenant, hook.id, delivery_id) is None:
            raise not_found("delivery", delivery_id)
        require(principal, Action.ADMINISTER)
        again = tx.webhooks.redeliver(principal.tenant, hook.id, delivery_id, new_id("dlv"), now)
        if again is None:
            raise not_found("delivery", delivery_id)
        return Outcome(
            Answer.ACCEPTED,
            queued_view(again.event_id, again.id),
            resource_id=again.id,
            after_commit=services.on_deliveries_queued,
        )

    return mutation
