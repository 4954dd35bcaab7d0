"""Webhook delivery: send what the outbox holds, at least once (CR-4).

One pass leases a page of due deliveries in a short transaction, sends them outside any
transaction (a receiver is never waited on with a transaction open), then records every
attempt in one transaction under the claim tokens. A deliverer that dies between the
claim and the record leaves its deliveries leased; when the lease runs out another one
sends them again under the same ``event_id``, which is what lets receivers drop the copy.

Sends of one pass run side by side, so a receiver that hangs costs the others nothing
beyond its own time budget. A failed attempt is tried again on the domain's schedule
(5 s doubling to 1 h, jittered) until the next try would come more than 24 h after the
delivery was created; then it is ``failed`` and the tenant's health shows a finding.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from punctual.domain.webhooks import next_attempt_at, signature
from punctual.ports.codec import InputKeyUnknown, InputUndecryptable
from punctual.ports.events import Event
from punctual.ports.records import ClaimedDelivery, DeliveryOutcome, EncryptedInput
from punctual.ports.webhooks import SendResult
from punctual.usecases.kernel.context import Services

log = logging.getLogger("punctual.delivery")

SEND_CONCURRENCY = 8
SEND_BUDGET_SECONDS = 10.0
"""The longest one send may take (API.md: total 10 s); the lease covers a pass of them."""
USER_AGENT = "punctual-webhooks"
FINDING_KIND = "webhook_delivery_failed"


@dataclass(frozen=True)
class DeliveryReport:
    claimed: int = 0
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    unrecorded: int = 0
    """Attempts whose claim had been taken over (a lease that ran out): not recorded."""


@dataclass(frozen=True)
class _Attempt:
    claim: ClaimedDelivery
    result: SendResult


def lease_seconds(services: Services, limit: int) -> float:
    """Long enough for ``limit`` sends at ``SEND_CONCURRENCY`` at a time, each taking its
    whole budget, plus the host's lease margin: a live pass never loses its claims."""
    rounds = math.ceil(max(1, limit) / SEND_CONCURRENCY)
    return services.policy.lease_seconds + rounds * SEND_BUDGET_SECONDS


def deliver_due(services: Services, limit: int = 32) -> DeliveryReport:
    """One pass: claim up to ``limit`` due deliveries, send them, record the attempts."""
    with services.store.transaction() as tx:
        claims = tx.webhooks.claim_due(services.clock.now(), lease_seconds(services, limit), limit)
    if not claims:
        return DeliveryReport()
    attempts = _send_all(services, claims)
    now = services.clock.now()
    outcomes = [_outcome(services, attempt, now) for attempt in attempts]
    with services.store.transaction() as tx:
        recorded = tx.webhooks.settle(outcomes, now)
        for attempt, outcome in zip(attempts, outcomes, strict=True):
            if outcome.status == "failed" and outcome.delivery_id in recorded:
                claim = attempt.claim
                tx.findings.raise_finding(
                    claim.tenant,
                    FINDING_KIND,
                    claim.id,
                    "warning",
                    f"webhook {claim.webhook_id} gave up delivering event {claim.event_id} "
                    f"({claim.kind}) after {claim.attempts + 1} attempts; the webhook's "
                    "deliveries show the last error",
                    now,
                )
    for attempt, outcome in zip(attempts, outcomes, strict=True):
        if outcome.delivery_id in recorded:
            _emit(services, attempt.claim, outcome)
        else:
            log.info(
                "event=webhook_attempt_unrecorded tenant=%s delivery=%s",
                attempt.claim.tenant,
                attempt.claim.id,
            )
    statuses = [outcome.status for outcome in outcomes if outcome.delivery_id in recorded]
    return DeliveryReport(
        claimed=len(claims),
        delivered=statuses.count("delivered"),
        retried=statuses.count("pending"),
        failed=statuses.count("failed"),
        unrecorded=len(outcomes) - len(statuses),
    )


BODY_ORDER = ("text", "event", "event_id", "tenant", "data")
"""API.md's order: ``text`` first, for a person reading the raw body. The store may not
keep key order (PostgreSQL's JSONB does not), so the body puts it back."""


def request_body(claim: ClaimedDelivery) -> bytes:
    """The payload fixed when the event was decided, compact, the same bytes every time."""
    payload = claim.payload
    ordered = {key: payload[key] for key in BODY_ORDER if key in payload}
    ordered.update((key, value) for key, value in payload.items() if key not in ordered)
    return json.dumps(ordered, separators=(",", ":"), sort_keys=False).encode()


def request_headers(claim: ClaimedDelivery, body: bytes, secret: str | None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Punctual-Event-Id": claim.event_id,
    }
    if secret:
        headers["X-Punctual-Signature"] = signature(secret, body)
    return headers


def _send_all(services: Services, claims: Sequence[ClaimedDelivery]) -> list[_Attempt]:
    with ThreadPoolExecutor(
        max_workers=min(SEND_CONCURRENCY, len(claims)), thread_name_prefix="webhook-delivery"
    ) as pool:
        results = list(pool.map(lambda claim: _send_one(services, claim), claims))
    return [_Attempt(claim, result) for claim, result in zip(claims, results, strict=True)]


def _send_one(services: Services, claim: ClaimedDelivery) -> SendResult:
    """One attempt; whatever goes wrong becomes this delivery's result alone (FT-1)."""
    try:
        url = _decrypt(services, claim.url, claim.tenant, "URL")
        secret = (
            _decrypt(services, claim.secret, claim.tenant, "secret")
            if claim.secret is not None
            else None
        )
        body = request_body(claim)
        return services.webhooks.send(url, body, request_headers(claim, body, secret))
    except _Unreadable as exc:
        return SendResult(False, None, str(exc))
    except Exception as exc:
        # The sender never raises for a receiver's fault: this is a bug; the type names it
        # without repeating a message that could hold the URL.
        log.error(
            "event=webhook_attempt_error tenant=%s delivery=%s error=%s",
            claim.tenant,
            claim.id,
            type(exc).__name__,
        )
        return SendResult(False, None, f"the attempt failed inside punctual ({type(exc).__name__})")


class _Unreadable(Exception):
    """A webhook's stored URL or secret cannot be read; the message is safe to record."""


def _decrypt(services: Services, sealed: EncryptedInput, tenant: str, what: str) -> str:
    try:
        value = services.codec.decrypt(sealed, tenant)
    except InputKeyUnknown:
        raise _Unreadable(
            f"the webhook's {what} cannot be decrypted: codec key {sealed.key_id!r} is not in "
            "this process's key ring; restore the key and the delivery is tried again"
        ) from None
    except InputUndecryptable:
        raise _Unreadable(
            f"the webhook's {what} cannot be decrypted: it fails authentication with codec "
            f"key {sealed.key_id!r} (damaged, or sealed with another key under that id)"
        ) from None
    if not isinstance(value, str):
        raise _Unreadable(f"the webhook's stored {what} is not text")
    return value


def _outcome(services: Services, attempt: _Attempt, now: datetime) -> DeliveryOutcome:
    claim, result = attempt.claim, attempt.result
    if result.delivered:
        status, following = "delivered", None
    else:
        following = next_attempt_at(claim.created_at, claim.attempts + 1, now, services.rng)
        status = "pending" if following is not None else "failed"
    return DeliveryOutcome(
        delivery_id=claim.id,
        claim_token=claim.claim_token,
        status=status,
        status_code=result.status_code,
        error=result.error,
        next_attempt_at=following,
    )


_EVENT_NAMES = {
    "delivered": "webhook.delivered",
    "pending": "webhook.retried",
    "failed": "webhook.failed",
}


def _emit(services: Services, claim: ClaimedDelivery, outcome: DeliveryOutcome) -> None:
    services.events.emit(
        Event(
            _EVENT_NAMES[outcome.status],
            claim.tenant,
            claim.id,
            {
                "webhook_id": claim.webhook_id,
                "event_id": claim.event_id,
                "kind": claim.kind,
                "attempts": claim.attempts + 1,
                "status_code": outcome.status_code,
            },
        )
    )
