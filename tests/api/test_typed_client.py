"""The typed Python client (IF-2), sync and async, against a real uvicorn on loopback: every
tenant route, typed answers and errors, and idempotency keys kept across its own retries
of an ambiguous failure and exposed to the caller."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import holidays
import httpx
import pytest
import sqlalchemy as sa

from punctual import bootstrap, resources
from punctual.adapters.stores.sql.tables import starts
from punctual.client import (
    ApiError,
    AsyncPunctualClient,
    AuthenticationError,
    ConflictError,
    InProgress,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    PunctualClient,
    ServerUnreachable,
    UnavailableError,
    aiterate,
    iterate,
)
from punctual.domain.permissions import Role
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.usecases.tenancy import identity
from tests.conftest import make_settings
from tests.support.api import live_worker, register_demo
from tests.support.server import free_port, serving

TENANT = "acme"
# Route operations whose client method has another name.
METHOD_OF_OPERATION = {
    "patch_schedule": "update_schedule",
    "schedule_preview": "preview_schedule",
    "tenant_health": "health",
    "patch_webhook": "update_webhook",
}


@dataclass
class Server:
    system: bootstrap.Punctual
    url: str
    admin: str
    member: str
    viewer: str

    def client(self, token: str | None = None, **options: Any) -> PunctualClient:
        return PunctualClient(self.url, token or self.admin, TENANT, **options)


@pytest.fixture
def server(system: bootstrap.Punctual) -> Iterator[Server]:
    live_worker(system)
    tokens = {
        role: identity.ensure_member_token(system.services, TENANT, role.value, role).token
        for role in Role
    }
    with serving(system.http_app()) as url:
        yield Server(system, url, tokens[Role.ADMIN], tokens[Role.MEMBER], tokens[Role.VIEWER])


def later(hours: float = 1) -> datetime:
    return datetime.now(UTC) + timedelta(hours=hours)


def start_fields(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "workflow": "echo",
        "input": {"message": "hi"},
        "business_request_id": "r-1",
        "start_at": later(),
    }
    return fields | overrides


def create_due(client: PunctualClient) -> resources.Start:
    """A start due at once, sent again with a new now while a loaded machine delays it past
    the allowed skew (``start_at_in_past`` stores nothing), as a client scheduling "now"
    would (bounded)."""
    for attempt in range(5):
        try:
            return client.create_start(**start_fields(start_at=datetime.now(UTC)))
        except InvalidRequestError as refused:
            if refused.code != "start_at_in_past" or attempt == 4:
                raise
    raise AssertionError("unreachable")


class Recording(httpx.BaseTransport):
    """The network between client and server: records each request's key and can lose the
    first answers (the request reached the server; its answer never came back)."""

    def __init__(self, lose: int = 0, unavailable: int = 0) -> None:
        self.inner = httpx.HTTPTransport()
        self.lose = lose
        self.unavailable = unavailable
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.keys.append(request.headers.get("idempotency-key"))
        if self.unavailable:
            self.unavailable -= 1
            body = {"error": {"code": "store_unavailable", "message": "down", "details": {}}}
            return httpx.Response(503, json=body)
        response = self.inner.handle_request(request)
        if self.lose:
            self.lose -= 1
            response.read()
            raise httpx.ReadError("the answer was lost", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


# --------------------------------------------------------------------------- the surface


def test_the_client_covers_every_tenant_route(system: bootstrap.Punctual) -> None:
    document = system.http_app().openapi()
    operations = {
        operation["operationId"]
        for path, entries in document["paths"].items()
        if path.startswith("/v1/tenants/")
        for operation in entries.values()
    }
    methods = {METHOD_OF_OPERATION.get(name, name) for name in operations}
    missing = [name for name in sorted(methods) if not callable(getattr(PunctualClient, name, 0))]
    assert missing == []


def test_the_async_client_has_the_same_methods_and_parameters() -> None:
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")
        }

    sync, asynchronous = public(PunctualClient), public(AsyncPunctualClient)
    assert set(sync) - {"close"} == set(asynchronous) - {"close"}
    for name, signature in sync.items():
        assert list(signature.parameters.values()) == list(
            asynchronous[name].parameters.values()
        ), name
        assert inspect.iscoroutinefunction(getattr(AsyncPunctualClient, name)), name


# --------------------------------------------------------------------------- every family


def test_starts_and_runs(server: Server) -> None:
    with server.client() as client:
        start = client.create_start(**start_fields(attributes={"customer": "c-17"}))
        assert isinstance(start, resources.Start) and start.state == "scheduled"
        assert start.idempotency_key and start.attributes == {"customer": "c-17"}
        assert client.get_start(start.id) == start
        moved = client.reschedule_start(start.id, version=1, start_at=later(2))
        assert moved.version == 2 and moved.start_at > start.start_at
        canceled = client.cancel_start(start.id, version=2, reason="not needed")
        assert (canceled.state, canceled.reason) == ("canceled", "not needed")
        page = client.list_starts(state="canceled", limit=1)
        assert [s.id for s in page.items] == [start.id] and page.next_cursor is None

        due = create_due(client)
        dispatch_due(server.system.services, "runner-client", 10)
        dispatch = client.get_start(due.id).dispatch
        assert dispatch is not None
        run = client.get_run(dispatch.run_id)
        assert (run.state, run.origin.source, run.origin.id) == (
            "pending",
            "scheduled_start",
            due.id,
        )
        assert client.list_runs(origin_id=due.id).items == [run]
        assert client.terminate_run(run.id).state == "terminated"
        assert client.cancel_run(run.id).state == "terminated"  # idempotent once ended

        items = [start_fields(idempotency_key="b-1"), start_fields(workflow="nope")]
        first, second = client.create_starts_batch(items)
        assert (first.status, first.idempotency_key) == (201, "b-1")
        assert isinstance(first.body, resources.Start)
        assert second.status == 422 and isinstance(second.body, resources.Error)
        assert second.body.error.code == "unknown_workflow" and second.idempotency_key


def test_schedules_and_their_occurrences(server: Server) -> None:
    body = {
        "name": "nightly",
        "workflow": "score",
        "input": {"score": 0.5},
        "spec": {"cron": "30 2 * * *", "time_zone": "Europe/Berlin"},
        "overlap": "skip",
        "missed": "catch_up",
    }
    with server.client(server.member) as client, server.client() as admin:
        schedule = client.create_schedule(**body, max_catch_up=3)
        assert isinstance(schedule.spec, resources.CronSpec)
        assert schedule.max_catch_up == 3 and len(schedule.next_fire_times) == 5
        assert client.get_schedule(schedule.id) == schedule
        assert [s.id for s in client.list_schedules().items] == [schedule.id]
        edited = client.update_schedule(schedule.id, version=1, misfire_grace_ms=1000)
        assert (edited.misfire_grace_ms, edited.version) == (1000, 2)
        paused = client.pause_schedule(schedule.id, version=2)
        assert paused.enabled is False and paused.next_fire_times == []
        resumed = client.resume_schedule(schedule.id, version=3)
        assert resumed.enabled is True
        moved = admin.transfer_schedule(schedule.id, version=4, to="admin")
        assert moved.created_by == "admin"
        assert client.list_occurrences(schedule.id).items == []
        with pytest.raises(NotFoundError):
            client.cancel_occurrence(schedule.id, "occ_unknown", version=1)
        preview = client.preview_schedule(
            cron="30 2 * * *", time_zone="Europe/Berlin", after="2026-03-28T00:00:00Z", count=2
        )
        assert [f.dst_adjustment for f in preview.items] == [None, "gap_shifted"]
        interval = client.create_schedule(
            **{**body, "name": "tick", "spec": {"interval_ms": 60_000, "starts_at": later()}}
        )
        assert isinstance(interval.spec, resources.IntervalSpec)
        admin.delete_schedule(schedule.id, version=5)
        with pytest.raises(NotFoundError):
            client.get_schedule(schedule.id)


def test_tenant_members_tokens_and_health(server: Server) -> None:
    with server.client() as client:
        assert {d.name for d in client.list_definitions().items} >= {"echo", "score"}
        member = client.add_member(subject="bob", role="viewer")
        assert (member.subject, member.role) == ("bob", "viewer")
        issued = client.create_token(subject="bob", expires_at=later(24))
        assert issued.token and issued.expires_at is not None
        assert issued.id in {t.id for t in client.list_tokens(limit=100).items}
        with PunctualClient(server.url, issued.token, TENANT) as bob:
            assert bob.health().status == "ok"
        client.revoke_token(issued.id)
        with (
            PunctualClient(server.url, issued.token, TENANT) as bob,
            pytest.raises(AuthenticationError),
        ):
            bob.health()
        client.remove_member("bob")
        with server.system.store.transaction() as tx:
            tx.findings.raise_finding(
                TENANT,
                "start_failed",
                "sst_x",
                "error",
                "failed",
                server.system.services.clock.now(),
            )
        report = client.health()
        assert report.status == "degraded" and report.workers
        assert report.holidays_version == holidays.__version__
        [finding] = report.findings
        acknowledged = client.acknowledge_finding(finding.id)
        assert acknowledged.acknowledged is True and acknowledged.acknowledged_by == "admin"
        assert client.health().status == "ok"


def test_notifications_and_webhooks(server: Server) -> None:
    with server.client(server.member) as member, server.client() as client:
        member.create_schedule(
            name="doomed",
            workflow="echo",
            input={"message": "x"},
            spec={"interval_ms": 60_000},
            overlap="skip",
            missed="skip",
        )
        client.remove_member("member")  # auto-disables its schedule; the admins are told
        [note] = client.list_notifications(unread=True).items
        assert note.kind == "schedule_auto_disabled"
        assert client.mark_notification_read(note.id).read_at is not None
        assert client.list_notifications(unread=True).items == []

        hook = client.create_webhook(url="http://127.0.0.1:9/hook", events=["regression"])
        assert client.get_webhook(hook.id) == hook
        assert client.list_webhooks().items == [hook]
        changed = client.update_webhook(hook.id, events=None, secret="s")
        assert changed.events == []
        queued = client.test_webhook(hook.id)
        assert queued.status == "queued" and queued.idempotency_key
        [delivery] = client.list_deliveries(hook.id).items
        again = client.redeliver(hook.id, delivery.id)
        assert again.event_id == queued.event_id
        client.delete_webhook(hook.id)
        with pytest.raises(NotFoundError):
            client.get_webhook(hook.id)


# --------------------------------------------------------------------------- errors


def test_errors_are_typed_and_carry_the_envelope_and_the_key(server: Server) -> None:
    with server.client(server.viewer) as viewer, server.client() as client:
        with pytest.raises(PermissionDeniedError) as forbidden:
            viewer.create_start(**start_fields(), idempotency_key="v-1")
        assert (forbidden.value.status, forbidden.value.code) == (403, "forbidden")
        assert forbidden.value.idempotency_key == "v-1"
        with pytest.raises(InvalidRequestError) as invalid:
            client.create_start(**start_fields(start_at="tomorrow"))
        assert invalid.value.status == 422 and invalid.value.details["errors"]
        assert invalid.value.envelope["error"]["code"] == "validation_error"
        assert invalid.value.idempotency_key  # generated, and kept for a retry
        start = client.create_start(**start_fields())
        with pytest.raises(ConflictError) as stale:
            client.cancel_start(start.id, version=7)
        assert stale.value.code == "version_conflict"
        assert stale.value.details == {"current_version": 1}
        with pytest.raises(NotFoundError) as missing:
            client.get_start("sst_unknown")
        assert missing.value.idempotency_key is None  # a read has no key
    with PunctualClient(server.url, "not-a-token", TENANT) as stranger:
        with pytest.raises(AuthenticationError) as refused:
            stranger.list_starts()
        assert isinstance(refused.value, ApiError) and refused.value.status == 401


def test_raw_is_the_json_the_server_sent(server: Server) -> None:
    with server.client() as client:
        start = client.create_start(**start_fields())
        page = client.list_starts()
        direct = httpx.get(
            f"{server.url}/v1/tenants/{TENANT}/scheduled-starts",
            headers={"Authorization": f"Bearer {server.admin}"},
        ).json()
        assert page.raw == direct
        assert page.items[0].raw == direct["items"][0] == start.raw


# --------------------------------------------------------------------------- idempotency


def test_a_lost_answer_is_retried_with_the_same_key_and_acts_once(server: Server) -> None:
    network = Recording(lose=1)
    with server.client(transport=network, backoff=0) as client:
        start = client.create_start(**start_fields())
        assert (
            len(network.keys) == 2 and network.keys[0] == network.keys[1] == start.idempotency_key
        )
        assert [s.id for s in client.list_starts().items] == [start.id]


def test_a_503_is_retried_with_the_same_key(server: Server) -> None:
    network = Recording(unavailable=2)
    with server.client(transport=network, backoff=0) as client:
        start = client.create_start(**start_fields(), idempotency_key="mine")
        assert network.keys == ["mine", "mine", "mine"] and start.idempotency_key == "mine"


def test_retries_are_bounded_and_the_key_is_on_the_exception(server: Server) -> None:
    with server.client(transport=Recording(unavailable=5), retries=2, backoff=0) as client:
        with pytest.raises(UnavailableError) as down:
            client.create_start(**start_fields())
        key = down.value.idempotency_key
        assert key is not None and down.value.code == "store_unavailable"
    with server.client() as client:
        # The caller persisted the key (and the request): the same request later acts once.
        request = start_fields()
        first = client.create_start(**request, idempotency_key=key)
        assert client.create_start(**request, idempotency_key=key) == first
    closed = f"http://127.0.0.1:{free_port()}"
    with PunctualClient(closed, server.admin, TENANT, retries=1, backoff=0) as nowhere:
        with pytest.raises(ServerUnreachable) as unreachable:
            nowhere.cancel_start("sst_1", version=1, idempotency_key="lost-1")
        assert unreachable.value.idempotency_key == "lost-1"
        assert isinstance(unreachable.value.__cause__, httpx.TransportError)


def _hold(system: bootstrap.Punctual, start_id: str) -> sa.Connection:
    """Block the start's row (PostgreSQL: FOR UPDATE; SQLite: an open write)."""
    conn = system.store.engine.connect()
    conn.info["readonly"] = False
    conn.begin()
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(starts.c.id).where(starts.c.id == start_id).with_for_update())
    else:
        conn.execute(starts.update().where(starts.c.id == start_id).values(attempts=0))
    return conn


def test_in_progress_is_retried_then_raised_with_its_key(database_url: str, tmp_path: Path) -> None:
    system = bootstrap.build(make_settings(database_url, tmp_path, api_wait_seconds=0.5))
    try:
        register_demo(system)
        token = identity.ensure_member_token(system.services, TENANT, "alice", Role.MEMBER).token
        with serving(system.http_app()) as url, PunctualClient(url, token, TENANT) as client:
            start = client.create_start(**start_fields())
            holder = _hold(system, start.id)
            try:
                with (
                    PunctualClient(url, token, TENANT, retries=1, backoff=0) as impatient,
                    pytest.raises(InProgress) as undecided,
                ):
                    impatient.cancel_start(start.id, version=1)
                key = undecided.value.idempotency_key
                assert key is not None
                release = threading.Timer(0.8, holder.commit)
                release.start()
                network = Recording()
                with PunctualClient(url, token, TENANT, transport=network, retries=10) as patient:
                    canceled = patient.cancel_start(start.id, version=1, idempotency_key=key)
                release.join()
            finally:
                holder.close()
            assert canceled.state == "canceled" and canceled.version == 2
            assert len(network.keys) >= 2 and set(network.keys) == {key}
            assert client.get_start(start.id).version == 2, "one cancel, however many tries"
    finally:
        system.close()


# --------------------------------------------------------------------------- async


def test_the_async_client(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncPunctualClient(server.url, server.admin, TENANT) as client:
            request = start_fields()
            start = await client.create_start(**request, idempotency_key="a-1")
            assert start.idempotency_key == "a-1"
            assert await client.create_start(**request, idempotency_key="a-1") == start
            assert await client.get_start(start.id) == start
            canceled = await client.cancel_start(start.id, version=1)
            assert canceled.state == "canceled"
            assert (await client.list_starts()).items == [canceled]
            results = await client.create_starts_batch([start_fields(idempotency_key="a-2")])
            assert [r.status for r in results] == [201]
            with pytest.raises(ConflictError) as stale:
                await client.reschedule_start(start.id, version=1, start_at=later())
            assert stale.value.code == "invalid_state"
            assert (await client.health()).status == "ok"
        async with AsyncPunctualClient(server.url, "bad", TENANT) as stranger:
            with pytest.raises(AuthenticationError):
                await stranger.list_runs()

    asyncio.run(scenario())


def test_waiting_for_a_start_and_a_run_and_iterating_every_page(server: Server) -> None:
    """``wait_for_start`` returns once the start is settled, ``wait_for_run`` once the run
    ended, each ``TimeoutError`` when it does not within the timeout; ``iterate`` follows
    ``next_cursor`` to the last item (sync and async alike)."""
    with server.client() as client:
        due = create_due(client)
        later_on = threading.Timer(
            0.5, lambda: dispatch_due(server.system.services, "runner-client", 10)
        )
        later_on.start()
        settled = client.wait_for_start(due.id, timeout=20, poll=0.1)
        later_on.join()
        assert settled.state == "dispatched" and settled.dispatch is not None
        run_id = settled.dispatch.run_id
        with pytest.raises(TimeoutError, match="still pending"):
            client.wait_for_run(run_id, timeout=0.3, poll=0.1)
        ender = threading.Timer(0.5, lambda: client.terminate_run(run_id))
        ender.start()
        assert client.wait_for_run(run_id, timeout=20, poll=0.1).state == "terminated"
        ender.join()
        made = {
            client.create_start(**start_fields(business_request_id=f"p-{n}")).id for n in range(5)
        }
        listed = [start.id for start in iterate(client.list_starts, state="scheduled", limit=2)]
        assert sorted(listed) == sorted(made) and len(listed) == 5

    async def scenario() -> None:
        async with AsyncPunctualClient(server.url, server.admin, TENANT) as client:
            ended = await client.wait_for_run(run_id, timeout=5, poll=0.1)
            assert ended.state == "terminated"
            with pytest.raises(TimeoutError):
                await client.wait_for_start(
                    next(iter(made)), timeout=0.3, poll=0.1
                )  # scheduled an hour from now
            found = [s.id async for s in aiterate(client.list_starts, state="scheduled", limit=2)]
            assert sorted(found) == sorted(made)

    asyncio.run(scenario())


def test_lists_take_an_order_and_members_are_listed(server: Server) -> None:
    """Every list method takes ``order``; ``iterate`` keeps it through the cursor;
    ``list_members`` is the admins' (sync and async)."""
    with server.client() as client:
        made = [
            client.create_start(**start_fields(business_request_id=f"o-{n}")).id for n in range(3)
        ]
        assert [s.id for s in client.list_starts().items] == made[::-1]
        assert [s.id for s in client.list_starts(order="oldest").items] == made
        assert [s.id for s in iterate(client.list_starts, order="oldest", limit=2)] == made
        assert [s.id for s in iterate(client.list_starts, limit=2)] == made[::-1]
        first = client.list_starts(order="oldest", limit=1)
        with pytest.raises(InvalidRequestError) as turned:
            client.list_starts(cursor=first.next_cursor, order="newest")
        assert turned.value.code == "invalid_cursor"
        with pytest.raises(InvalidRequestError) as bad:
            client.list_runs(order="sideways")
        assert bad.value.code == "validation_error"

        client.add_member(subject="bob", role="viewer")
        page = client.list_members()
        assert isinstance(page, resources.MemberPage)
        assert [m.subject for m in page.items][:1] == ["bob"]
        roles = {m.subject: m.role for m in page.items}
        assert (roles["bob"], roles["admin"]) == ("viewer", "admin")
        assert [m.subject for m in client.list_members(order="oldest").items][-1] == "bob"
        assert [m.subject for m in iterate(client.list_members, limit=1)] == [
            m.subject for m in page.items
        ]
    with server.client(server.member) as member, pytest.raises(PermissionDeniedError):
        member.list_members()

    async def scenario() -> None:
        async with AsyncPunctualClient(server.url, server.admin, TENANT) as client:
            listed = [m.subject async for m in aiterate(client.list_members, order="oldest")]
            assert listed[-1] == "bob" and len(listed) == len(page.items)
            oldest = await client.list_starts(order="oldest", limit=3)
            assert [s.id for s in oldest.items] == made

    asyncio.run(scenario())
