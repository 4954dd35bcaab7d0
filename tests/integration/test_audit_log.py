"""The audit log on both stores (CR-8): one entry per decided user mutation, on every
mutation route of the HTTP API, written with the mutation; who, which token, what, when and
the status, never a body or input; readable by admins, filtered; kept for its own window.

The route walk reads the application's own route table, so a mutation route added later is
covered the day it is added.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.domain.permissions import Principal, Role
from punctual.domain.retention import RecordKind
from punctual.domain.timeutil import to_rfc3339
from punctual.errors import Forbidden
from punctual.ports.records import AuditEntry, Seek
from punctual.usecases.kernel import audit
from punctual.usecases.outbound.outbox import NotificationEvent, notify
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.usecases.tenancy import identity, retention
from punctual.usecases.tenancy.retention import RetentionPolicy
from tests.conftest import FakeClock, make_settings
from tests.support.api import Api, in_process, live_worker, register_demo

TENANT = "acme"
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
SECRET = "audit-must-not-see-7d1e"
UNDECIDED_SECONDS = 60.0
"""How long an undecided batch is sent again before the test gives up."""


@dataclass
class Rig:
    system: bootstrap.Punctual
    clock: FakeClock
    client: TestClient
    admin: Api
    member: Api
    admin_token_id: str

    def entries(self, **filters: Any) -> list[AuditEntry]:
        with self.system.store.transaction(readonly=True) as tx:
            found = tx.audit.find(
                TENANT,
                subject_id=filters.get("subject_id"),
                actor=filters.get("actor"),
                at=Seek(1000),
            )
        return list(reversed(found))


def _api(rig_system: bootstrap.Punctual, client: TestClient, subject: str, role: Role) -> Any:
    issued = identity.ensure_member_token(rig_system.services, TENANT, subject, role)
    return Api(client, issued.token, TENANT), issued.id


@pytest.fixture
def rig(database_url: str, tmp_path: Path) -> Iterator[Rig]:
    clock = FakeClock()
    system = bootstrap.build(make_settings(database_url, tmp_path), clock=clock)
    register_demo(system)
    try:
        with in_process(system) as client:
            admin, admin_token = _api(system, client, "root", Role.ADMIN)
            member, _ = _api(system, client, "alice", Role.MEMBER)
            yield Rig(system, clock, client, admin, member, admin_token)
    finally:
        system.close()


def start_body(rig: Rig, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workflow": "echo",
        "input": {"message": SECRET},
        "business_request_id": "appt-1",
        "start_at": to_rfc3339(rig.clock.now() + timedelta(hours=1)),
        "workload_class": "standard",
    }
    body.update(overrides)
    return body


# --------------------------------------------------------------------------- every route


@dataclass(frozen=True)
class MutationRoute:
    method: str
    path: str
    name: str


def _flatten(routes: Iterable[Any]) -> Iterator[Any]:
    for route in routes:
        expand = getattr(route, "effective_route_contexts", None)
        if callable(expand):
            yield from _flatten(expand())
        else:
            yield route


def mutation_routes(app: FastAPI) -> list[MutationRoute]:
    found = {
        MutationRoute(method, route.path, route.name)
        for route in _flatten(app.routes)
        if getattr(route, "path", "").startswith("/v1/tenants/{tenant}")
        for method in getattr(route, "methods", None) or ()
        if method in MUTATING
    }
    return sorted(found, key=lambda r: (r.path, r.method))


@dataclass(frozen=True)
class Call:
    """A request that takes effect: path parameters, body, query."""

    params: dict[str, str]
    body: Any = None
    query: dict[str, Any] | None = None


_names = iter(range(1_000_000))


def _name() -> str:
    return f"walk-{next(_names)}"


def _start(rig: Rig, seconds: float = 3600) -> dict[str, Any]:
    made = rig.admin.post("/scheduled-starts", start_body(rig, start_at=_at(rig, seconds)))
    assert made.status_code == 201, made.text
    return dict(made.json())


def _at(rig: Rig, seconds: float) -> str:
    return to_rfc3339(rig.clock.now() + timedelta(seconds=seconds))


def _run(rig: Rig) -> str:
    start = _start(rig, seconds=1)
    rig.clock.advance(2)
    live_worker(rig.system)
    assert dispatch_due(rig.system.services, "runner-audit", 100).dispatched
    return str(rig.admin.get(f"/scheduled-starts/{start['id']}").json()["dispatch"]["run_id"])


def _schedule(rig: Rig, **overrides: Any) -> dict[str, Any]:
    body = {**SCHEDULE_BODY, "name": _name(), **overrides}
    made = rig.admin.post("/schedules", body)
    assert made.status_code == 201, made.text
    return dict(made.json())


def _webhook(rig: Rig) -> str:
    made = rig.admin.post("/webhooks", {"url": "http://127.0.0.1:9/hook"})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _finding(rig: Rig) -> str:
    with rig.system.store.transaction() as tx:
        subject = _name()
        tx.findings.raise_finding(TENANT, "test", subject, "error", "x", rig.clock.now())
        return next(f.id for f in tx.findings.find(TENANT) if f.subject_id == subject)


def _notification(rig: Rig) -> str:
    with rig.system.store.transaction() as tx:
        event = NotificationEvent(TENANT, "regression", "t", "x")
        notify(rig.system.services, tx, event, "root", rig.clock.now())
    return str(rig.admin.get("/notifications").json()["items"][0]["id"])


def _member(rig: Rig) -> str:
    subject = _name()
    assert rig.admin.post("/members", {"subject": subject, "role": "viewer"}).status_code == 201
    return subject


def _token(rig: Rig) -> str:
    made = rig.admin.post("/tokens", {"subject": "alice"})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _occurrence(rig: Rig) -> Call:
    schedule = _schedule(rig)
    made = rig.admin.post(f"/schedules/{schedule['id']}/trigger", {})
    assert made.status_code == 201, made.text
    occurrence = made.json()
    return Call(
        {"schedule_id": schedule["id"], "occurrence_id": occurrence["id"]},
        {"version": occurrence["version"]},
    )


def _hold(rig: Rig) -> str:
    made = rig.admin.post("/holds", {"subject_kind": "tenant", "reason": "audit"})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _delivery(rig: Rig) -> Call:
    hook = _webhook(rig)
    tested = rig.admin.post(f"/webhooks/{hook}/test")
    assert tested.status_code == 202, tested.text
    return Call({"webhook_id": hook, "delivery_id": tested.json()["delivery_id"]})


SCHEDULE_BODY: dict[str, Any] = {
    "workflow": "echo",
    "input": {"message": SECRET},
    "spec": {"cron": "30 2 * * *", "time_zone": "Europe/Berlin"},
    "overlap": "skip",
    "missed": "skip",
    "workload_class": "standard",
}
RECIPES: dict[str, Callable[[Rig], Call]] = {
    "acknowledge_finding": lambda rig: Call({"finding_id": _finding(rig)}),
    "add_member": lambda rig: Call({}, {"subject": _name(), "role": "viewer"}),
    "remove_member": lambda rig: Call({"subject": _member(rig)}),
    "mark_notification_read": lambda rig: Call({"notification_id": _notification(rig)}),
    "cancel_run": lambda rig: Call({"run_id": _run(rig)}),
    "terminate_run": lambda rig: Call({"run_id": _run(rig)}),
    "create_start": lambda rig: Call({}, start_body(rig)),
    "create_starts_batch": lambda rig: Call(
        {}, {"items": [{"idempotency_key": _name(), **start_body(rig)}]}
    ),
    "cancel_start": lambda rig: Call({"start_id": _start(rig)["id"]}, {"version": 1}),
    "reschedule_start": lambda rig: Call(
        {"start_id": _start(rig)["id"]}, {"version": 1, "start_at": _at(rig, 7200)}
    ),
    "create_schedule": lambda rig: Call({}, {**SCHEDULE_BODY, "name": _name()}),
    "put_schedule_by_name": lambda rig: Call({"name": _name()}, SCHEDULE_BODY),
    "delete_schedule": lambda rig: Call(
        {"schedule_id": _schedule(rig)["id"]}, query={"version": 1}
    ),
    "patch_schedule": lambda rig: Call(
        {"schedule_id": _schedule(rig)["id"]}, {"version": 1, "misfire_grace_ms": 30000}
    ),
    "backfill_schedule": lambda rig: Call(
        {"schedule_id": _schedule(rig)["id"]}, {"from": _at(rig, -3 * 86400), "to": _at(rig, -60)}
    ),
    "cancel_occurrence": _occurrence,
    "pause_schedule": lambda rig: Call({"schedule_id": _schedule(rig)["id"]}, {"version": 1}),
    "resume_schedule": lambda rig: Call(
        {"schedule_id": _schedule(rig, enabled=False)["id"]}, {"version": 1}
    ),
    "transfer_schedule": lambda rig: Call(
        {"schedule_id": _schedule(rig)["id"]}, {"version": 1, "to": "alice"}
    ),
    "trigger_schedule": lambda rig: Call({"schedule_id": _schedule(rig)["id"]}, {}),
    "create_token": lambda rig: Call({}, {"subject": "alice"}),
    "revoke_token": lambda rig: Call({"token_id": _token(rig)}),
    "create_webhook": lambda rig: Call({}, {"url": "http://127.0.0.1:9/hook"}),
    "delete_webhook": lambda rig: Call({"webhook_id": _webhook(rig)}),
    "patch_webhook": lambda rig: Call({"webhook_id": _webhook(rig)}, {"events": ["regression"]}),
    "redeliver": _delivery,
    "place_hold": lambda rig: Call({}, {"subject_kind": "tenant", "reason": "audit"}),
    "release_hold": lambda rig: Call({"hold_id": _hold(rig)}),
    "test_webhook": lambda rig: Call({"webhook_id": _webhook(rig)}),
}
"""Per route (by name), a request that takes effect on resources made for it alone."""


def _concrete(template: str, params: dict[str, str]) -> str:
    parts = []
    for segment in template.split("/"):
        if segment.startswith("{"):
            parts.append({"tenant": TENANT, **params}[segment.strip("{}").split(":")[0]])
        else:
            parts.append(segment)
    return "/".join(parts)


def test_every_mutation_route_writes_one_entry_when_it_takes_effect(rig: Rig) -> None:
    routes = mutation_routes(rig.system.http_app())
    missing = sorted(r.name for r in routes if r.name not in RECIPES)
    assert not missing, f"give the audit test a request that takes effect for {missing}"
    for route in routes:
        call = RECIPES[route.name](rig)
        path = _concrete(route.path, call.params)
        before = len(rig.entries())
        answer = rig.client.request(
            route.method,
            path,
            headers=rig.admin.headers(_name()),
            params=call.query,
            content=json.dumps(call.body) if call.body is not None else None,
        )
        assert 200 <= answer.status_code < 300, (route, answer.status_code, answer.text)
        new = rig.entries()[before:]
        assert len(new) == 1, (route, new)
        [entry] = new
        assert (entry.action, entry.method, entry.path) == (route.name, route.method, path)
        assert (entry.status, entry.actor, entry.token_id) == (
            answer.status_code,
            "root",
            rig.admin_token_id,
        )
        assert entry.subject_kind is not None, route
        named = [v for k, v in call.params.items() if k.endswith("_id") or k == "subject"]
        shown = answer.json() if answer.content else {}
        created = {shown.get("id"), shown.get("subject")} if isinstance(shown, dict) else set()
        if route.name != "create_starts_batch":
            assert entry.subject_id in {*named[-1:], *created} - {None}, (route, entry)


def test_a_refusal_and_a_replay_write_no_entry(rig: Rig) -> None:
    created = rig.admin.post("/scheduled-starts", start_body(rig), key="k-refused")
    refused = rig.member.post(
        f"/scheduled-starts/{created.json()['id']}/cancel", {"version": created.json()["version"]}
    )
    assert refused.status_code == 403
    missing = rig.admin.post("/scheduled-starts/st_nothing/cancel", {"version": 1})
    assert missing.status_code == 404
    invalid = rig.admin.post("/scheduled-starts", {"workflow": "echo"})
    assert invalid.status_code == 422
    replayed = rig.admin.post("/scheduled-starts", start_body(rig), key="k-refused")
    assert replayed.json() == created.json()
    assert [e.action for e in rig.entries()] == ["create_start"]


def test_a_create_names_what_it_created_and_its_replay_writes_nothing(rig: Rig) -> None:
    created = rig.admin.post("/scheduled-starts", start_body(rig), key="k-create")
    assert created.status_code == 201
    again = rig.admin.post("/scheduled-starts", start_body(rig), key="k-create")
    assert again.json() == created.json()

    [entry] = rig.entries()
    assert (entry.subject_kind, entry.subject_id) == ("start", created.json()["id"])
    assert (entry.action, entry.status, entry.token_id) == ("create_start", 201, rig.admin_token_id)
    assert entry.at == rig.clock.now()


def test_a_batch_create_is_one_entry(rig: Rig) -> None:
    items = [{"idempotency_key": f"b-{n}", **start_body(rig)} for n in range(3)]
    items.append({"idempotency_key": "b-bad", "workflow": "echo"})

    def send() -> list[int]:
        answer = rig.member.client.post(
            rig.member.path("/scheduled-starts/batch"),
            headers=rig.member.headers(),
            json={"items": items},
        )
        return [i["status"] for i in answer.json()["items"]]

    # Past the bounded wait (a loaded machine) the items answer 202: the same batch, with
    # the same keys, is sent again for the outcome, as the contract tells a client to; a
    # resend is a replay and adds no entry.
    deadline = time.monotonic() + UNDECIDED_SECONDS
    statuses = send()
    while 202 in statuses and time.monotonic() < deadline:
        time.sleep(0.2)
        statuses = send()
    assert statuses == [201, 201, 201, 422]
    assert send() == statuses, "a resent batch replays its items"
    [entry] = rig.entries()
    assert (entry.action, entry.status, entry.actor) == ("create_starts_batch", 200, "alice")
    assert (entry.subject_kind, entry.subject_id) == ("start", None)


def test_no_entry_holds_a_body_or_input(rig: Rig) -> None:
    created = rig.admin.post("/scheduled-starts", start_body(rig)).json()
    rig.admin.post(
        f"/scheduled-starts/{created['id']}/reschedule",
        {"version": created["version"], "start_at": start_body(rig)["start_at"]},
    )
    shown = audit.list_entries(
        rig.system.services, Principal(TENANT, "root", Role.ADMIN), audit.ListAudit()
    )
    assert len(shown["items"]) == 2
    assert SECRET not in json.dumps(shown)


def test_admins_read_the_log_newest_first_filtered_and_paged(rig: Rig) -> None:
    first = rig.admin.post("/scheduled-starts", start_body(rig)).json()
    second = rig.member.post("/scheduled-starts", start_body(rig)).json()
    rig.admin.post(f"/scheduled-starts/{first['id']}/cancel", {"version": first["version"]})
    admin = Principal(TENANT, "root", Role.ADMIN)
    services = rig.system.services

    page = audit.list_entries(services, admin, audit.ListAudit(limit=2))
    assert [e["action"] for e in page["items"]] == ["cancel_start", "create_start"]
    rest = audit.list_entries(services, admin, audit.ListAudit(cursor=page["next_cursor"]))
    assert [e["subject_id"] for e in rest["items"]] == [first["id"]]
    assert rest["next_cursor"] is None

    by_subject = audit.list_entries(services, admin, audit.ListAudit(subject_id=first["id"]))
    assert [e["action"] for e in by_subject["items"]] == ["cancel_start", "create_start"]
    by_actor = audit.list_entries(services, admin, audit.ListAudit(actor="alice"))
    assert [e["subject_id"] for e in by_actor["items"]] == [second["id"]]
    assert set(by_actor["items"][0]) == {
        "id",
        "at",
        "actor",
        "token_id",
        "action",
        "method",
        "path",
        "subject_kind",
        "subject_id",
        "status",
    }
    with pytest.raises(Forbidden):
        audit.list_entries(services, Principal(TENANT, "alice", Role.MEMBER), audit.ListAudit())


def test_entries_are_kept_for_the_audit_window_not_the_tenant_window(rig: Rig) -> None:
    rig.admin.post("/scheduled-starts", start_body(rig))
    policy = RetentionPolicy(keep_seconds=60, audit_keep_seconds=3600)
    rig.clock.advance(61)
    assert retention.sweep(rig.system.services, policy).removed[RecordKind.AUDIT_ENTRIES] == 0
    rig.clock.advance(3600)
    report = retention.sweep(rig.system.services, policy)
    assert report.removed[RecordKind.AUDIT_ENTRIES] == 1
    assert not rig.entries()
