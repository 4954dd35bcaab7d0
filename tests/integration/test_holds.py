"""Holds on both stores (RT-1): a hold on a start, a schedule, a run or a tenant keeps what
it covers from every sweep until it is released; a host hold is not the tenant's to
release; placements are checked, serialized with sweeps and audited.

The rig and helpers are those of ``test_retention.py`` (a ``FakeClock``, a ten-minute
window); tenant admins act through the mutation runner, as their HTTP routes do.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from punctual.adapters.stores.sql import tables as t
from punctual.domain.ids import new_id
from punctual.domain.permissions import Principal, Role
from punctual.domain.retention import RecordKind, window_for
from punctual.domain.runs import RunState
from punctual.errors import Forbidden, InvalidRequest, NotFound
from punctual.ports.records import (
    DeliveryOutcome,
    NewAuditEntry,
    NewDelivery,
    NewNotification,
    Seek,
)
from punctual.usecases.kernel.audit import AuditedRequest, serving
from punctual.usecases.kernel.idempotency import IdempotentRequest, Outcome
from punctual.usecases.recurring import schedules
from punctual.usecases.tenancy import holds
from tests.integration.test_retention import (
    AUDIT_KEEP,
    KEEP,
    POLICY,
    TENANT,
    _webhook,
    build_rig,
    canceled,
    dispatched,
    fire,
    ids,
    keys_of,
    sweep,
)
from tests.integration.test_schedule_runtime import Rig

__all__ = ["build_rig"]

ADMIN = Principal(TENANT, "root", Role.ADMIN)


@pytest.fixture
def rig(build_rig: Callable[..., Rig]) -> Rig:
    return build_rig()


def place(
    rig: Rig, kind: str, subject_id: str | None, who: Principal = ADMIN, reason: str = "audit"
) -> dict[str, Any]:
    """A tenant admin's hold, decided by the mutation runner under a fresh key."""
    command = holds.PlaceHold(kind, subject_id, reason)
    return _run(rig, who, holds.place(rig.services, who, command)).body


def release(rig: Rig, hold_id: str, who: Principal = ADMIN) -> dict[str, Any]:
    return _run(rig, who, holds.release(rig.services, who, hold_id)).body


_keys = iter(range(1_000_000))


def _run(rig: Rig, who: Principal, mutation: Any) -> Outcome:
    request = IdempotentRequest(who.tenant, who.subject, f"hold-{next(_keys)}", "fingerprint")
    outcome: Outcome = rig.system.mutations.run(request, mutation)
    return outcome


# --------------------------------------------------------------------------- coverage


def test_a_start_hold_keeps_the_start_and_its_keys_until_released(rig: Rig) -> None:
    start_id = canceled(rig, "k-held")
    hold = place(rig, "start", start_id)
    rig.advance(5 * KEEP)
    sweep(rig)
    assert start_id in ids(rig, t.starts)
    assert {"k-held", "k-held-cancel"} <= keys_of(rig)

    released = release(rig, hold["id"])
    assert released["released_at"] is not None
    report = sweep(rig)
    assert start_id not in ids(rig, t.starts)
    assert report.removed[RecordKind.IDEMPOTENCY_RECORDS] == 2
    # The released hold itself is kept for a window, then swept.
    assert hold["id"] in ids(rig, t.holds)
    rig.advance(KEEP + 1)
    assert sweep(rig).removed[RecordKind.HOLDS] == 1
    assert hold["id"] not in ids(rig, t.holds)


def test_a_run_hold_keeps_the_run_its_start_and_their_keys(rig: Rig) -> None:
    start = dispatched(rig, "k-run-held")
    run_id = start["dispatch"]["run_id"]
    rig.finish_runs(RunState.COMPLETED)
    hold = place(rig, "run", run_id)
    rig.advance(5 * KEEP)
    sweep(rig)
    assert run_id in ids(rig, t.runs)
    assert start["id"] in ids(rig, t.starts)
    assert "k-run-held" in keys_of(rig)

    release(rig, hold["id"])
    sweep(rig)
    assert run_id not in ids(rig, t.runs)
    assert start["id"] not in ids(rig, t.starts)
    assert "k-run-held" not in keys_of(rig)


def test_a_schedule_hold_keeps_its_occurrences_runs_and_the_deleted_schedule(rig: Rig) -> None:
    schedule_id = rig.every("held")["id"]
    occurrences = [fire(rig, schedule_id) for _ in range(3)]
    version = rig.get(schedule_id)["version"]
    rig.system.mutations.run(
        None, schedules.delete(rig.services, rig.alice.principal, schedule_id, version)
    )
    hold = place(rig, "schedule", schedule_id)
    rig.advance(5 * KEEP)
    sweep(rig)
    assert {o.id for o in rig.occurrences(schedule_id)} == set(occurrences)
    assert len(rig.runs_of(schedule_id)) == 3
    assert schedule_id in ids(rig, t.schedules)

    release(rig, hold["id"])
    sweep(rig)
    assert not rig.occurrences(schedule_id)
    assert not rig.runs_of(schedule_id)
    assert schedule_id not in ids(rig, t.schedules)


def _records_about(rig: Rig, *, run_id: str, start_id: str) -> dict[sa.Table, set[str]]:
    """An audit entry, a read notification, an acknowledged finding and a delivered
    webhook delivery about ``run_id``, and the same about ``start_id``, none naming a
    schedule: what keeps them under a schedule hold is the run's or start's lineage. Each
    is terminal now, so every one would go with the next sweep past the audit window."""
    hook_id = _webhook(rig)
    now = rig.now
    written: dict[sa.Table, set[str]] = {
        t.audit_log: set(),
        t.notifications: set(),
        t.findings: set(),
        t.webhook_deliveries: set(),
    }
    subjects = [
        ("run", run_id, {"run_id": run_id}),
        ("start", start_id, {"occurrence_id": start_id}),
    ]
    with rig.system.store.transaction() as tx:
        for kind, subject_id, named in subjects:
            entry = f"aud_{kind}"
            tx.audit.record(
                [
                    NewAuditEntry(
                        entry,
                        TENANT,
                        "root",
                        None,
                        None,
                        "cancel",
                        "POST",
                        "/p",
                        kind,
                        subject_id,
                        200,
                    )
                ],
                now,
            )
            written[t.audit_log].add(entry)
            note = f"ntf_{kind}"
            tx.notifications.insert(
                [
                    NewNotification(
                        id=note,
                        tenant=TENANT,
                        recipient="alice",
                        kind="regression",
                        schedule_id=None,
                        occurrence_id=named.get("occurrence_id"),
                        run_id=named.get("run_id"),
                        title="t",
                        text="x",
                        details={},
                        event_id=new_id("evt"),
                    )
                ],
                now,
            )
            tx.notifications.mark_read(TENANT, "alice", note, now)
            written[t.notifications].add(note)
            tx.findings.raise_finding(TENANT, "start_failed", subject_id, "failed", "failed", now)
            [finding] = [f for f in tx.findings.find(TENANT) if f.subject_id == subject_id]
            tx.findings.acknowledge(TENANT, finding.id, "root", now)
            written[t.findings].add(finding.id)
            delivery = f"dlv_{kind}"
            tx.webhooks.enqueue(
                [NewDelivery(delivery, TENANT, hook_id, new_id("evt"), "regression", {}, **named)],
                now,
            )
            written[t.webhook_deliveries].add(delivery)
        claims = tx.webhooks.claim_due(now, 30, 10)
        outcomes = [
            DeliveryOutcome(c.id, c.claim_token, "delivered", 200, None, None) for c in claims
        ]
        tx.webhooks.settle(outcomes, now)
    return written


def _kept(rig: Rig, written: dict[sa.Table, set[str]]) -> dict[str, set[str]]:
    return {table.name: ids(rig, table) & expected for table, expected in written.items()}


@pytest.mark.parametrize("held", ["schedule", "start", "run"])
def test_a_hold_keeps_the_audit_entries_notifications_findings_and_deliveries_about_what_it_holds(
    rig: Rig, held: str
) -> None:
    """RT-1: nothing a hold covers is removed, the records about its runs, starts and
    occurrences included, whichever of them the hold names; released, they all go."""
    if held == "start":
        start = dispatched(rig, "k-start")
        start_id, run_id = start["id"], start["dispatch"]["run_id"]
        rig.finish_runs(RunState.COMPLETED)
        subject = start_id
    else:
        schedule_id = rig.every("held")["id"]
        start_id = fire(rig, schedule_id)
        [run] = rig.runs_of(schedule_id)
        run_id = run["id"]
        subject = schedule_id if held == "schedule" else run_id
    written = _records_about(rig, run_id=run_id, start_id=start_id)
    hold = place(rig, held, subject)
    rig.advance(AUDIT_KEEP + 5 * KEEP)

    sweep(rig)

    assert _kept(rig, written) == {table.name: expected for table, expected in written.items()}
    release(rig, hold["id"])
    sweep(rig)
    assert _kept(rig, written) == {table.name: set() for table in written}


def test_a_tenant_hold_keeps_everything_of_the_tenant_and_nothing_of_others(rig: Rig) -> None:
    from punctual.embedded import Scheduler

    mine = canceled(rig, "k-tenant")
    other = Scheduler(rig.system, "other", "olga", Role.ADMIN)
    theirs = other.schedule_at(
        "echo", {"message": "x"}, rig.now.replace(year=rig.now.year + 1), business_request_id="o"
    )
    other.cancel_start(theirs["id"], theirs["version"])
    hold = place(rig, "tenant", None)
    assert hold["subject_id"] == TENANT
    rig.advance(5 * KEEP)
    sweep(rig)
    assert mine in ids(rig, t.starts)
    assert theirs["id"] not in ids(rig, t.starts)
    assert "k-tenant" in keys_of(rig)
    planned = holds_plan(rig)
    assert planned[TENANT] == dict.fromkeys(planned[TENANT], 0), "nothing of a held tenant"

    release(rig, hold["id"])
    sweep(rig)
    assert mine not in ids(rig, t.starts)


def holds_plan(rig: Rig) -> dict[str, dict[str, int]]:
    from punctual.usecases.tenancy import retention

    return retention.plan(rig.services, POLICY)


# --------------------------------------------------------------------------- who may


def test_a_host_hold_is_not_the_tenant_admins_to_release(rig: Rig) -> None:
    start_id = canceled(rig, "k-host")
    hold = holds.place_by_host(rig.services, TENANT, holds.PlaceHold("start", start_id, "legal"))
    assert hold["placed_by_host"] is True
    assert hold["created_by"] == "host"

    with pytest.raises(Forbidden, match="placed by the host"):
        release(rig, hold["id"])
    rig.advance(5 * KEEP)
    sweep(rig)
    assert start_id in ids(rig, t.starts)

    released = holds.release_by_host(rig.services, hold["id"])
    assert released["released_by"] == "host"
    sweep(rig)
    assert start_id not in ids(rig, t.starts)


def test_only_admins_place_list_and_release_holds(rig: Rig) -> None:
    start_id = canceled(rig, "k-member")
    member = Principal(TENANT, "alice", Role.MEMBER)
    with pytest.raises(Forbidden):
        place(rig, "start", start_id, who=member)
    hold = place(rig, "start", start_id)
    with pytest.raises(Forbidden):
        release(rig, hold["id"], who=member)
    with pytest.raises(Forbidden):
        holds.list_holds(rig.services, member, holds.ListHolds())


def test_subjects_are_checked(rig: Rig) -> None:
    from punctual.embedded import Scheduler

    other = Scheduler(rig.system, "other", "olga", Role.ADMIN)
    theirs = other.schedule_at(
        "echo", {"message": "x"}, rig.now.replace(year=rig.now.year + 1), business_request_id="o"
    )
    with pytest.raises(NotFound):
        place(rig, "start", "st_nothing")
    with pytest.raises(NotFound):
        place(rig, "start", theirs["id"])  # another tenant's start does not exist here
    with pytest.raises(NotFound):
        place(rig, "tenant", "other")
    with pytest.raises(NotFound):
        place(rig, "run", "run_nothing")
    with pytest.raises(NotFound):
        place(rig, "schedule", "sch_nothing")
    with pytest.raises(InvalidRequest, match="needs its subject_id"):
        place(rig, "run", None)
    with pytest.raises(InvalidRequest, match="subject_kind"):
        place(rig, "webhook", "whk_1")
    with pytest.raises(InvalidRequest, match="reason"):
        place(rig, "tenant", None, reason=" ")
    with pytest.raises(NotFound):
        holds.place_by_host(rig.services, "nobody", holds.PlaceHold("tenant", None, "x"))
    with pytest.raises(NotFound):
        release(rig, "hld_nothing")


def test_holds_are_listed_newest_first_and_filtered_by_activity(rig: Rig) -> None:
    first = place(rig, "tenant", None, reason="one")
    second = place(rig, "tenant", None, reason="two")
    release(rig, first["id"])
    listed = holds.list_holds(rig.services, ADMIN, holds.ListHolds(limit=1))
    assert [h["id"] for h in listed["items"]] == [second["id"]]
    rest = holds.list_holds(rig.services, ADMIN, holds.ListHolds(cursor=listed["next_cursor"]))
    assert [h["id"] for h in rest["items"]] == [first["id"]]
    active = holds.list_holds(rig.services, ADMIN, holds.ListHolds(active="true"))
    assert [h["id"] for h in active["items"]] == [second["id"]]
    again = release(rig, first["id"])
    assert again["released_at"] == rest["items"][0]["released_at"], "release is idempotent"


# --------------------------------------------------------------------------- audit


def served(request: AuditedRequest, call: Callable[[], Any]) -> Any:
    """``call`` as the edge makes it: in a context of its own that names the request."""

    def in_context() -> Any:
        serving(request)
        return call()

    return contextvars.copy_context().run(in_context)


def test_every_placement_and_release_is_in_the_audit_log(rig: Rig) -> None:
    start_id = canceled(rig, "k-audited")
    path = f"/v1/tenants/{TENANT}/holds"
    placing = AuditedRequest(TENANT, "root", None, "place_hold", "POST", path, "hold", None)
    hold = served(placing, lambda: place(rig, "start", start_id))
    releasing = AuditedRequest(
        TENANT, "root", None, "release_hold", "POST", f"{path}/{hold['id']}/release", "hold", None
    )
    served(releasing, lambda: release(rig, hold["id"]))
    host = holds.place_by_host(rig.services, TENANT, holds.PlaceHold("tenant", None, "legal"))
    holds.release_by_host(rig.services, host["id"])

    with rig.system.store.transaction() as tx:
        entries = tx.audit.find(TENANT, subject_id=None, actor=None, at=Seek(10))
    seen = [(e.actor, e.action, e.subject_id, e.status) for e in reversed(entries)]
    assert seen == [
        ("root", "place_hold", hold["id"], 201),
        ("root", "release_hold", hold["id"], 200),
        ("host", "place_hold", host["id"], 201),
        ("host", "release_hold", host["id"], 200),
    ]


# --------------------------------------------------------------------------- races


def test_a_placement_waits_for_a_sweep_batch_and_a_batch_for_a_placement(rig: Rig) -> None:
    """Hold placements and sweep batches take one lock: a subject checked to exist by a
    placement cannot be swept before the hold commits."""
    start_id = canceled(rig, "k-race")
    rig.advance(KEEP + 1)
    window = window_for(TENANT, rig.now, KEEP, 10 * KEEP)
    entered = threading.Event()
    removed: list[dict[RecordKind, int]] = []

    def batch() -> None:
        entered.set()
        with rig.system.store.transaction(lock_timeout=30) as tx:
            removed.append(tx.retention.remove(RecordKind.STARTS, window, 10))

    with rig.system.store.transaction() as tx:
        tx.holds.lock_against_sweeps()
        sweeper = threading.Thread(target=batch)
        sweeper.start()
        entered.wait(10)
        sweeper.join(0.5)
        assert sweeper.is_alive(), "the batch waits for the placement to commit"
        assert tx.starts.get(TENANT, start_id) is not None
        place_now = holds.PlaceHold("start", start_id, "investigation")
        holds.place(rig.services, ADMIN, place_now)(tx, rig.now)
    sweeper.join(30)
    assert removed == [{RecordKind.STARTS: 0, RecordKind.OCCURRENCES: 0}], "it saw the hold"
    assert start_id in ids(rig, t.starts)
