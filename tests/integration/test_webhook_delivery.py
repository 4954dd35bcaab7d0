"""Webhook delivery end to end over both stores (CR-4): outbox rows written by ``notify``
are sent by delivery passes to real receivers on 127.0.0.1, at least once, with a stable
``event_id`` and a signature the receiver can check; failures are retried on the backoff
schedule and given up after 24 h with a health finding; an attempt recorded under a claim
that was taken over changes nothing.

Time is a ``FakeClock``: a retry is made due by moving the clock to its
``next_attempt_at``, never by sleeping.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from punctual import bootstrap
from punctual.adapters.webhooks import HttpWebhookSender
from punctual.domain.ids import new_id
from punctual.domain.webhooks import GIVE_UP_AFTER, MAX_DELAY, display_url
from punctual.ports.events import Event
from punctual.ports.records import Delivery, DeliveryOutcome, EncryptedInput, NewWebhook, Seek
from punctual.runner.deliverer import Deliverer
from punctual.usecases.kernel.context import Services
from punctual.usecases.outbound.delivery import (
    FINDING_KIND,
    USER_AGENT,
    deliver_due,
    lease_seconds,
    request_body,
    request_headers,
)
from punctual.usecases.outbound.outbox import NotificationEvent, notify
from tests.conftest import FakeClock, make_settings
from tests.support.server import free_port
from tests.support.webhook_receiver import Received, Receiver, receiving

TENANT = "acme"
SECRET = "s3cr3t-shared-with-the-receiver"
HOOK_PATH = "/services/T0PATHSECRET/B0?token=QUERYSECRET"
SEND_BUDGET_SECONDS = 10


@dataclasses.dataclass
class Rig:
    system: bootstrap.Punctual
    services: Services
    clock: FakeClock
    events: list[Event]


@pytest.fixture
def rig(database_url: str, tmp_path: Path, clock: FakeClock) -> Iterator[Rig]:
    system = bootstrap.build(make_settings(database_url, tmp_path), clock=clock)
    events: list[Event] = []
    unsubscribe = system.events.subscribe(events.append)
    # The production budget per send: a loopback receiver on a loaded machine took over 3 s
    # to answer (SPEC OP-6); no test here waits for the budget to run out.
    services = dataclasses.replace(
        system.services,
        webhooks=HttpWebhookSender(["127.0.0.0/8"], total_timeout=SEND_BUDGET_SECONDS),
    )
    try:
        yield Rig(system, services, clock, events)
    finally:
        unsubscribe()
        system.close()


def _webhook(rig: Rig, url: str, *, secret: str | None = None, events: tuple[str, ...] = ()) -> str:
    codec = rig.services.codec
    hook_id = new_id("whk")
    with rig.services.store.transaction() as tx:
        tx.webhooks.insert(
            NewWebhook(
                id=hook_id,
                tenant=TENANT,
                url=codec.encrypt(url, TENANT),
                url_display=display_url(url),
                secret=codec.encrypt(secret, TENANT) if secret is not None else None,
                events=list(events),
                created_by="alice",
            ),
            rig.clock.now(),
        )
    return hook_id


def _regression(rig: Rig, text: str = "nightly-report regressed: p95 rose 30%") -> str:
    event = NotificationEvent(
        tenant=TENANT,
        kind="regression",
        title="nightly-report regressed",
        text=text,
        schedule_id="sch_1",
        occurrence_id="occ_1",
        run_id="run_1",
        details={"regressions": [{"path": "p95", "previous": 100, "current": 130}]},
    )
    with rig.services.store.transaction() as tx:
        return notify(rig.services, tx, event, None, rig.clock.now())


def _deliveries(rig: Rig, hook_id: str) -> list[Delivery]:
    with rig.services.store.transaction(readonly=True) as tx:
        return tx.webhooks.deliveries(TENANT, hook_id, Seek(100))


def _only(rig: Rig, hook_id: str) -> Delivery:
    [delivery] = _deliveries(rig, hook_id)
    return delivery


def _retry_now(rig: Rig, delivery: Delivery) -> None:
    assert delivery.status == "pending" and delivery.next_attempt_at is not None
    rig.clock.current = delivery.next_attempt_at


def _no_url_pieces(text: str | None) -> None:
    assert text is not None
    for piece in ("T0PATHSECRET", "QUERYSECRET", "services"):
        assert piece not in text


def test_a_regression_reaches_the_receiver_signed_and_marked_delivered(rig: Rig) -> None:
    with receiving() as receiver:
        hook_id = _webhook(rig, receiver.url(HOOK_PATH), secret=SECRET)
        event_id = _regression(rig)
        report = deliver_due(rig.services)
    assert (report.claimed, report.delivered) == (1, 1)
    [request] = receiver.received
    assert request.path == HOOK_PATH
    assert request.headers["content-type"] == "application/json"
    assert request.headers["user-agent"] == USER_AGENT
    assert request.headers["x-punctual-event-id"] == event_id
    expected = "sha256=" + hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(request.headers["x-punctual-signature"], expected)
    body = json.loads(request.body)
    assert list(body)[:1] == ["text"]
    assert body["text"] == "nightly-report regressed: p95 rose 30%"
    assert body["event"] == "regression"
    assert body["event_id"] == event_id
    assert body["tenant"] == TENANT
    assert body["data"]["schedule_id"] == "sch_1"
    delivery = _only(rig, hook_id)
    assert delivery.status == "delivered"
    assert delivery.attempts == 1
    assert delivery.last_status_code == 200
    assert delivery.delivered_at == rig.clock.now()
    assert delivery.next_attempt_at is None
    [delivered] = [e for e in rig.events if e.name == "webhook.delivered"]
    assert delivered.subject_id == delivery.id
    assert delivered.data["webhook_id"] == hook_id
    assert delivered.data["event_id"] == event_id
    assert delivered.data["attempts"] == 1
    assert delivered.data["status_code"] == 200


def test_no_log_line_carries_the_url_path_or_query(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """The HTTP library logs request lines with the full URL; a webhook's path is its
    credential, so nothing at any level may show it (API.md "Notifications and webhooks")."""
    caplog.set_level(logging.DEBUG)
    with receiving() as receiver:
        _webhook(rig, receiver.url(HOOK_PATH))
        _regression(rig)
        assert deliver_due(rig.services).delivered == 1
        receiver.answer(500)
        _regression(rig)
        assert deliver_due(rig.services).delivered == 0
    assert caplog.records, "the deliveries logged nothing at all: the check would be empty"
    for record in caplog.records:
        _no_url_pieces(record.getMessage())


def test_without_a_secret_no_signature_is_sent(rig: Rig) -> None:
    with receiving() as receiver:
        _webhook(rig, receiver.url(HOOK_PATH))
        _regression(rig)
        deliver_due(rig.services)
    [request] = receiver.received
    assert "x-punctual-signature" not in request.headers


SLACK_OR_MATTERMOST_FIELDS = {
    "username": str,
    "icon_url": str,
    "icon_emoji": str,
    "channel": str,
    "attachments": list,
    "blocks": list,
    "props": dict,
    "type": str,
    "thread_ts": str,
    "mrkdwn": bool,
    "priority": dict,
}


def test_the_body_is_a_valid_slack_and_mattermost_incoming_webhook_message(rig: Rig) -> None:
    with receiving() as receiver:
        _webhook(rig, receiver.url(HOOK_PATH))
        _regression(rig)
        deliver_due(rig.services)
    body: dict[str, Any] = json.loads(receiver.received[0].body)
    assert isinstance(body["text"], str) and body["text"].strip()
    assert "\n" not in body["text"]  # one line a person can read
    # Every other key is either ignored by both products or has the type they expect.
    for key, value in body.items():
        if key in SLACK_OR_MATTERMOST_FIELDS:
            assert isinstance(value, SLACK_OR_MATTERMOST_FIELDS[key]), key
    assert set(body) == {"text", "event", "event_id", "tenant", "data"}


def test_a_receiver_that_was_down_gets_the_delivery_when_it_is_back(rig: Rig) -> None:
    port = free_port()
    hook_id = _webhook(rig, f"http://127.0.0.1:{port}{HOOK_PATH}")
    event_id = _regression(rig)
    assert deliver_due(rig.services).retried == 1
    down = _only(rig, hook_id)
    assert down.status == "pending" and down.attempts == 1
    assert down.last_status_code is None
    assert down.last_error is not None and down.last_error.startswith(
        f"could not connect to http://127.0.0.1:{port}"
    )
    _no_url_pieces(down.last_error)
    assert down.next_attempt_at == rig.clock.now() + timedelta(seconds=5)  # no jitter at first
    assert deliver_due(rig.services).claimed == 0  # not due before its retry time
    with receiving(port=port) as receiver:
        _retry_now(rig, down)
        assert deliver_due(rig.services).delivered == 1
    [request] = receiver.received
    assert request.headers["x-punctual-event-id"] == event_id
    up = _only(rig, hook_id)
    assert (up.status, up.attempts, up.last_status_code) == ("delivered", 2, 200)


def test_a_receiver_failing_the_first_attempts_gets_the_same_event_each_time(rig: Rig) -> None:
    with receiving((500, 503, 502, 200)) as receiver:
        hook_id = _webhook(rig, receiver.url(HOOK_PATH), secret=SECRET)
        event_id = _regression(rig)
        delays = []
        while (delivery := _only(rig, hook_id)).status != "delivered":
            before = rig.clock.now()
            deliver_due(rig.services)
            delivery = _only(rig, hook_id)
            if delivery.status == "pending":
                assert delivery.next_attempt_at is not None
                delays.append((delivery.next_attempt_at - before).total_seconds())
                _retry_now(rig, delivery)
    assert [r.headers["x-punctual-event-id"] for r in receiver.received] == [event_id] * 4
    assert len({r.body for r in receiver.received}) == 1
    assert len({r.headers["x-punctual-signature"] for r in receiver.received}) == 1
    assert delivery.attempts == 4 and delivery.last_status_code == 200
    assert delays[0] == 5.0
    assert all(5.0 <= delay <= 40.0 for delay in delays)
    retried = [e for e in rig.events if e.name == "webhook.retried"]
    assert [e.data["status_code"] for e in retried] == [500, 503, 502]


def test_a_deliverer_killed_after_its_claim_is_replaced_once_the_lease_ends(rig: Rig) -> None:
    with receiving() as receiver:
        hook_id = _webhook(rig, receiver.url(HOOK_PATH), secret=SECRET)
        event_id = _regression(rig)
        # The first deliverer claims and sends, then dies before recording anything.
        lease = lease_seconds(rig.services, 32)
        with rig.services.store.transaction() as tx:
            [claim] = tx.webhooks.claim_due(rig.clock.now(), lease, 32)
        url = rig.services.codec.decrypt(claim.url, TENANT)
        body = request_body(claim)
        sent = rig.services.webhooks.send(url, body, request_headers(claim, body, SECRET))
        assert sent.delivered
        assert deliver_due(rig.services).claimed == 0  # still leased to the dead one
        rig.clock.advance(lease + 1)
        assert deliver_due(rig.services).delivered == 1
        # The dead deliverer's record, arriving late, is ignored: its claim was taken over.
        with rig.services.store.transaction() as tx:
            late = tx.webhooks.settle(
                [DeliveryOutcome(claim.id, claim.claim_token, "failed", 500, "late", None)],
                rig.clock.now(),
            )
        assert late == set()
    first, second = receiver.received
    assert first.headers["x-punctual-event-id"] == second.headers["x-punctual-event-id"]
    assert first.headers["x-punctual-event-id"] == event_id
    assert first.body == second.body
    for request in (first, second):
        expected = "sha256=" + hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
        assert request.headers["x-punctual-signature"] == expected
    delivery = _only(rig, hook_id)
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("delivered", 1, None)


def test_a_receiver_failing_for_a_day_is_given_up_with_a_health_finding(rig: Rig) -> None:
    with receiving((500,)) as receiver:
        hook_id = _webhook(rig, receiver.url(HOOK_PATH))
        event_id = _regression(rig)
        created = rig.clock.now()
        while (delivery := _only(rig, hook_id)).status == "pending":
            deliver_due(rig.services)
            delivery = _only(rig, hook_id)
            if delivery.status == "pending":
                _retry_now(rig, delivery)
    assert delivery.status == "failed"
    assert delivery.last_status_code == 500
    assert delivery.next_attempt_at is None
    assert delivery.attempts == len(receiver.received)
    assert rig.clock.now() <= created + GIVE_UP_AFTER
    assert rig.clock.now() > created + GIVE_UP_AFTER - MAX_DELAY
    with rig.services.store.transaction(readonly=True) as tx:
        findings = [f for f in tx.findings.find(TENANT) if f.kind == FINDING_KIND]
    [finding] = findings
    assert finding.subject_id == delivery.id
    assert hook_id in finding.message and event_id in finding.message
    assert "127.0.0.1" not in finding.message
    _no_url_pieces(finding.message)
    [failed] = [e for e in rig.events if e.name == "webhook.failed"]
    assert failed.data["attempts"] == delivery.attempts
    # Nothing is claimed any more, however late it gets.
    rig.clock.advance(GIVE_UP_AFTER.total_seconds())
    assert deliver_due(rig.services).claimed == 0


def test_a_url_sealed_with_a_missing_key_is_a_failed_attempt_naming_the_key(rig: Rig) -> None:
    hook_id = new_id("whk")
    with rig.services.store.transaction() as tx:
        tx.webhooks.insert(
            NewWebhook(
                id=hook_id,
                tenant=TENANT,
                url=EncryptedInput("retired-key", b"\x00" * 40),
                url_display="http://127.0.0.1/…",
                secret=None,
                events=[],
                created_by="alice",
            ),
            rig.clock.now(),
        )
    _regression(rig)
    assert deliver_due(rig.services).retried == 1
    delivery = _only(rig, hook_id)
    assert delivery.status == "pending"
    assert delivery.last_error is not None
    assert "codec key 'retired-key' is not in this process's key ring" in delivery.last_error


def test_only_subscribed_webhooks_get_the_event(rig: Rig) -> None:
    with receiving() as subscribed, receiving() as elsewhere:
        wanted = _webhook(rig, subscribed.url(HOOK_PATH), events=("regression",))
        other = _webhook(rig, elsewhere.url(HOOK_PATH), events=("start_failed",))
        _regression(rig)
        assert deliver_due(rig.services).delivered == 1
    assert len(subscribed.received) == 1 and elsewhere.received == []
    assert _only(rig, wanted).status == "delivered"
    assert _deliveries(rig, other) == []


def test_a_hanging_receiver_does_not_hold_back_the_others_of_its_pass(rig: Rig) -> None:
    """The hanging receiver answers only once the other one was reached: sends made one
    after the other would time it out first and reach the other only afterwards."""
    reached = threading.Event()

    class Waiting(Receiver):
        def _record(self, request: Received) -> int:
            reached.wait(3 * SEND_BUDGET_SECONDS)
            return super()._record(request)

    class Prompt(Receiver):
        def _record(self, request: Received) -> int:
            reached.set()
            return super()._record(request)

    waiting, prompt = Waiting(), Prompt()
    waiting.start()
    prompt.start()
    try:
        slow_hook = _webhook(rig, waiting.url(HOOK_PATH))
        _regression(rig)  # its delivery is the older one: claimed and started first
        rig.clock.advance(1)
        fast_hook = _webhook(rig, prompt.url(HOOK_PATH))
        _regression(rig)
        report = deliver_due(rig.services)
    finally:
        waiting.stop()
        prompt.stop()
    assert report.delivered == 3  # the second event went to both webhooks
    assert {d.status for d in _deliveries(rig, slow_hook)} == {"delivered"}
    assert {d.status for d in _deliveries(rig, fast_hook)} == {"delivered"}


def test_the_deliverer_thread_delivers_when_woken(rig: Rig) -> None:
    deliverer = Deliverer(rig.services, max_idle_seconds=30)
    with receiving() as receiver:
        hook_id = _webhook(rig, receiver.url(HOOK_PATH))
        deliverer.start()
        try:
            time.sleep(0.3)  # its first pass found nothing: it now sleeps for 30 s
            _regression(rig)
            deliverer.wake()
            deadline = time.monotonic() + 10
            while not receiver.received:
                assert time.monotonic() < deadline, "the woken deliverer never delivered"
                time.sleep(0.02)
        finally:
            deliverer.stop(timeout=10)
    assert _only(rig, hook_id).status == "delivered"


def test_one_pass_of_the_deliverer_reports_what_it_claimed(rig: Rig) -> None:
    deliverer = Deliverer(rig.services)
    assert deliverer.deliver_once() == 0
    with receiving() as receiver:
        _webhook(rig, receiver.url(HOOK_PATH))
        _webhook(rig, receiver.url(HOOK_PATH))
        _regression(rig)
        assert deliverer.deliver_once() == 2
    assert len(receiver.received) == 2
