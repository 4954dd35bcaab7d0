"""Retention sweeps on both stores (RT-1): every kind goes after its window and not before,
nothing non-terminal goes, replays and follow-through keep what they need.

Time is a ``FakeClock`` driven by hand, with a retention window of ten minutes; the rig of
``test_schedule_runtime.py`` generates, dispatches and ends runs as the runner and a worker
do, and the sweep (``usecases.retention.sweep``) is called where the sweeper thread would.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import generate_latest
from typer.testing import CliRunner

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.retention import tables_swept
from punctual.cli.main import app
from punctual.domain.ids import new_id
from punctual.domain.permissions import Principal, Role
from punctual.domain.retention import RecordKind
from punctual.domain.runs import RunState
from punctual.domain.timeutil import parse_rfc3339, to_rfc3339
from punctual.ports.events import Event
from punctual.ports.records import (
    DeliveryOutcome,
    EncryptedInput,
    NewDelivery,
    NewNotification,
    NewWebhook,
)
from punctual.runner.sweeper import Sweeper
from punctual.usecases.recurring import schedules
from punctual.usecases.running import execution
from punctual.usecases.running.followthrough import follow_through
from punctual.usecases.tenancy import identity, retention
from punctual.usecases.tenancy.retention import RetentionPolicy, SweepReport
from tests.integration.test_schedule_runtime import MINUTE, WORKER, Rig, build_rig
from tests.support.api import in_process, member_api, register_demo

__all__ = ["build_rig"]  # the schedule runtime tests' rig fixture, used here too

TENANT = "acme"
KEEP = 600.0
AUDIT_KEEP = 3600.0
SCORE = {"metrics": [{"path": "metrics.score", "better": "higher", "tolerance": 0.0}]}
POLICY = RetentionPolicy(keep_seconds=KEEP, audit_keep_seconds=AUDIT_KEEP, batch_size=3)


@pytest.fixture
def rig(build_rig: Callable[..., Rig]) -> Rig:
    return build_rig()


def sweep(rig: Rig, policy: RetentionPolicy = POLICY) -> SweepReport:
    return retention.sweep(rig.services, policy)


def ids(rig: Rig, table: sa.Table, column: str = "id") -> set[Any]:
    with rig.system.store.engine.connect() as conn:
        return set(conn.execute(sa.select(table.c[column])).scalars())


def keys_of(rig: Rig) -> set[str]:
    """The idempotency keys stored, of every principal."""
    return ids(rig, t.idempotency_keys, "key")


def one_off(
    rig: Rig, key: str, *, in_seconds: float = 3600.0, at: datetime | None = None
) -> dict[str, Any]:
    """Alice's start of ``echo``, due ``in_seconds`` from now (or ``at``), created under
    ``key``."""
    return rig.alice.schedule_at(
        "echo",
        {"message": "hello"},
        at or rig.now + timedelta(seconds=in_seconds),
        business_request_id=key,
        idempotency_key=key,
    )


def canceled(rig: Rig, key: str) -> str:
    start = one_off(rig, key)
    rig.alice.cancel_start(start["id"], start["version"], idempotency_key=f"{key}-cancel")
    return str(start["id"])


def dispatched(rig: Rig, key: str) -> dict[str, Any]:
    """A start due at once, dispatched (its run pending)."""
    start = one_off(rig, key, in_seconds=1)
    rig.advance(2)
    rig.dispatch()
    return rig.alice.get_start(start["id"])


def fire(rig: Rig, schedule_id: str, state: RunState = RunState.COMPLETED) -> str:
    """One more fire of the schedule, dispatched and ended in ``state`` and followed
    through; the occurrence's id."""
    before = {o.id for o in rig.occurrences(schedule_id)}
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()
    rig.finish_runs(state)
    [new] = [o for o in rig.occurrences(schedule_id) if o.id not in before]
    return new.id


# --------------------------------------------------------------------------- starts, runs


def test_a_canceled_start_and_its_keys_go_after_the_window_and_not_before(rig: Rig) -> None:
    start_id = canceled(rig, "k-canceled")
    live = one_off(rig, "k-live", in_seconds=10 * KEEP)  # created long before, never terminal
    rig.advance(KEEP - 1)
    assert sweep(rig).removed[RecordKind.STARTS] == 0
    assert {start_id, live["id"]} <= ids(rig, t.starts)

    rig.advance(2)
    report = sweep(rig)

    assert report.removed[RecordKind.STARTS] == 1
    assert ids(rig, t.starts) == {live["id"]}
    # Both keys of the removed start (its create and its cancel) go with it; the live
    # start's key stays: a retry of its create must replay.
    assert report.removed[RecordKind.IDEMPOTENCY_RECORDS] == 2
    assert keys_of(rig) == {"k-live"}
    assert one_off(rig, "k-live", at=parse_rfc3339(live["start_at"])) == live


def test_a_dispatched_start_goes_with_its_run_once_the_run_ended_a_window_ago(rig: Rig) -> None:
    start = dispatched(rig, "k-run")
    run_id = start["dispatch"]["run_id"]
    rig.advance(10 * KEEP)
    sweep(rig)
    assert run_id in ids(rig, t.runs), "a pending run is never removed"
    assert start["id"] in ids(rig, t.starts)

    rig.finish_runs(RunState.COMPLETED)
    rig.advance(KEEP - 1)
    sweep(rig)
    assert run_id in ids(rig, t.runs)

    rig.advance(2)
    report = sweep(rig)
    assert (report.removed[RecordKind.RUNS], report.removed[RecordKind.STARTS]) == (1, 1)
    assert run_id not in ids(rig, t.runs)
    assert start["id"] not in ids(rig, t.starts)
    assert "k-run" not in keys_of(rig)


def test_a_replay_of_a_create_whose_start_is_retained_replays_and_is_recorded_once(
    rig: Rig,
) -> None:
    with in_process(rig.system) as client:
        api = member_api(rig.system, client)
        body = {
            "workflow": "echo",
            "input": {"message": "hello"},
            "business_request_id": "appt-42",
            "start_at": to_rfc3339(rig.now + timedelta(days=30)),
            "workload_class": "standard",
        }
        first = api.post("/scheduled-starts", body, key="create-once")
        assert first.status_code == 201
        rig.advance(5 * KEEP)  # the key was decided long ago; its start still exists
        sweep(rig)
        again = api.post("/scheduled-starts", body, key="create-once")
    assert again.status_code == 201
    assert again.json() == first.json()
    assert len(rig.alice.list_starts()["items"]) == 1


# --------------------------------------------------------------------------- schedules


def test_occurrences_and_runs_go_but_the_baseline_and_the_shown_run_stay(rig: Rig) -> None:
    nightly = rig.every("nightly", workflow="score", input={"score": 0.5}, regression=SCORE)
    schedule_id = nightly["id"]
    first = fire(rig, schedule_id)
    baseline = fire(rig, schedule_id)
    shown = fire(rig, schedule_id, RunState.FAILED)
    runs = {row["origin_id"]: row["id"] for row in rig.runs_of(schedule_id)}
    assert rig.get(schedule_id)["last_run_id"] == runs[shown]
    assert ids(rig, t.follow_throughs, "occurrence_id") == {first, baseline, shown}

    rig.advance(KEEP + 1)
    report = sweep(rig)

    assert (report.removed[RecordKind.RUNS], report.removed[RecordKind.OCCURRENCES]) == (1, 1)
    assert {o.id for o in rig.occurrences(schedule_id)} == {baseline, shown}
    assert {row["id"] for row in rig.runs_of(schedule_id)} == {runs[baseline], runs[shown]}
    assert ids(rig, t.follow_throughs, "occurrence_id") == {baseline, shown}

    # The next end is compared with the baseline that was kept.
    with rig.system.store.transaction(readonly=True) as tx:
        found = tx.follow_through.baseline(schedule_id, rig.now + timedelta(days=1))
    assert found is not None and found.run_id == runs[baseline]


def test_a_completed_run_an_older_running_occurrence_still_compares_with_stays(
    rig: Rig,
) -> None:
    """Under ``allow_all`` a newer occurrence can complete while an older one still runs:
    the completed run before the older one stays (its follow-through's baseline) until
    that follow-through is recorded, then it may go."""
    nightly = rig.every("nightly", workflow="score", input={"score": 0.5}, regression=SCORE)
    schedule_id = nightly["id"]
    first = fire(rig, schedule_id)
    rig.advance(MINUTE)
    rig.generate()
    rig.dispatch()
    loaded = [(name, version) for name, version, _ in rig.loaded]
    [slow] = execution.claim_runs(rig.services, WORKER, ["standard"], loaded, 100)
    newest = fire(rig, schedule_id)
    runs = {row["origin_id"]: row["id"] for row in rig.runs_of(schedule_id)}
    assert rig.get(schedule_id)["last_run_id"] == runs[newest]

    rig.advance(KEEP + 1)
    sweep(rig)
    assert runs[first] in ids(rig, t.runs)
    assert first in {o.id for o in rig.occurrences(schedule_id)}

    ended = execution.Finished(slow.run, RunState.COMPLETED, {"score": 0.5}, None)
    assert all(execution.finish_runs(rig.services, WORKER, [ended]))
    follow_through(rig.services)
    [slow_occurrence] = [o for o, run_id in runs.items() if run_id == slow.run.id]
    with rig.system.store.transaction(readonly=True) as tx:
        recorded = tx.follow_through.get_many([slow_occurrence])[slow_occurrence]
    assert recorded.previous_run_id == runs[first]

    sweep(rig)
    assert runs[first] not in ids(rig, t.runs)
    assert {runs[newest], slow.run.id} <= ids(rig, t.runs)


def test_skipped_ranges_go_after_the_window(rig: Rig) -> None:
    schedule_id = rig.every("skipper", missed="skip")["id"]
    rig.advance(10 * MINUTE)
    rig.generate()
    skipped = [o for o in rig.occurrences(schedule_id) if o.state == "skipped"]
    assert skipped and skipped[0].range_count
    rig.advance(KEEP - 1)
    sweep(rig)
    assert skipped[0].id in ids(rig, t.starts)
    rig.advance(2)
    report = sweep(rig)
    assert report.removed[RecordKind.OCCURRENCES] >= 1
    assert skipped[0].id not in ids(rig, t.starts)


def test_a_deleted_schedule_goes_with_its_status_once_its_history_went(rig: Rig) -> None:
    schedule_id = rig.every("doomed")["id"]
    fire(rig, schedule_id)
    version = rig.get(schedule_id)["version"]
    mutation = schedules.delete(rig.services, rig.alice.principal, schedule_id, version)
    rig.system.mutations.run(None, mutation)
    rig.advance(KEEP - 1)
    sweep(rig)
    assert schedule_id in ids(rig, t.schedules)
    assert rig.alice.list_occurrences(schedule_id)["items"], "history readable until retention"
    assert schedule_id in ids(rig, t.schedule_events, "schedule_id"), "the audit's history"

    rig.advance(2)
    report = sweep(rig)
    assert report.removed[RecordKind.SCHEDULES] == 1
    assert schedule_id not in ids(rig, t.schedules)
    assert schedule_id not in ids(rig, t.schedule_status, "schedule_id")
    assert schedule_id not in ids(rig, t.schedule_events, "schedule_id")
    assert not rig.occurrences(schedule_id)


def test_a_live_schedule_is_never_removed(rig: Rig) -> None:
    schedule_id = rig.every("forever")["id"]
    rig.advance(10 * KEEP)
    sweep(rig)
    assert schedule_id in ids(rig, t.schedules)
    assert schedule_id in ids(rig, t.schedule_events, "schedule_id"), "nor its history"


# --------------------------------------------------------------------------- the rest


def test_acknowledged_findings_go_and_open_ones_stay(rig: Rig) -> None:
    now = rig.now
    with rig.system.store.transaction() as tx:
        tx.findings.raise_finding(TENANT, "start_failed", "st_a", "failed", "failed", now)
        tx.findings.raise_finding(TENANT, "start_failed", "st_b", "failed", "failed", now)
        [acked] = [f for f in tx.findings.find(TENANT) if f.subject_id == "st_a"]
        tx.findings.acknowledge(TENANT, acked.id, "alice", now)
    rig.advance(KEEP - 1)
    sweep(rig)
    assert len(ids(rig, t.findings)) == 2
    rig.advance(2)
    assert sweep(rig).removed[RecordKind.FINDINGS] == 1
    assert ids(rig, t.findings, "subject_id") == {"st_b"}


def _notify(rig: Rig, *note_ids: str) -> None:
    with rig.system.store.transaction() as tx:
        tx.notifications.insert(
            [
                NewNotification(
                    id=note_id,
                    tenant=TENANT,
                    recipient="alice",
                    kind="regression",
                    schedule_id=None,
                    occurrence_id=None,
                    run_id=None,
                    title="t",
                    text="x",
                    details={},
                    event_id=new_id("evt"),
                )
                for note_id in note_ids
            ],
            rig.now,
        )


def test_read_notifications_go_after_the_window_and_unread_ones_after_four(rig: Rig) -> None:
    _notify(rig, "ntf_read", "ntf_unread")
    with rig.system.store.transaction() as tx:
        tx.notifications.mark_read(TENANT, "alice", "ntf_read", rig.now)
    rig.advance(KEEP + 1)
    assert sweep(rig).removed[RecordKind.NOTIFICATIONS] == 1
    assert ids(rig, t.notifications) == {"ntf_unread"}
    rig.advance(3 * KEEP - 2)
    sweep(rig)
    assert ids(rig, t.notifications) == {"ntf_unread"}
    rig.advance(2)
    assert sweep(rig).removed[RecordKind.NOTIFICATIONS] == 1
    assert not ids(rig, t.notifications)


def _webhook(rig: Rig) -> str:
    hook_id = new_id("whk")
    sealed = EncryptedInput("k1", b"sealed")
    with rig.system.store.transaction() as tx:
        tx.webhooks.insert(
            NewWebhook(hook_id, TENANT, sealed, "https://example.test/", None, [], "root"),
            rig.now,
        )
    return hook_id


def _deliveries(rig: Rig, hook_id: str, count: int) -> list[str]:
    delivery_ids = [new_id("dlv") for _ in range(count)]
    with rig.system.store.transaction() as tx:
        tx.webhooks.enqueue(
            [
                NewDelivery(d, TENANT, hook_id, new_id("evt"), "regression", {"n": i})
                for i, d in enumerate(delivery_ids)
            ],
            rig.now,
        )
    return delivery_ids


def test_ended_deliveries_go_and_pending_ones_stay_then_the_deleted_webhook(rig: Rig) -> None:
    hook_id = _webhook(rig)
    delivered, pending = _deliveries(rig, hook_id, 2)
    with rig.system.store.transaction() as tx:
        [claim] = [c for c in tx.webhooks.claim_due(rig.now, 30, 10) if c.id == delivered]
        outcome = DeliveryOutcome(delivered, claim.claim_token, "delivered", 200, None, None)
        tx.webhooks.settle([outcome], rig.now)
    rig.advance(KEEP + 1)
    report = sweep(rig)
    assert report.removed[RecordKind.WEBHOOK_DELIVERIES] == 1
    assert ids(rig, t.webhook_deliveries) == {pending}
    with rig.system.store.transaction() as tx:
        tx.webhooks.delete(TENANT, hook_id, rig.now)  # the pending delivery ends failed
    rig.advance(KEEP + 1)
    report = sweep(rig)
    assert report.removed[RecordKind.WEBHOOK_DELIVERIES] == 1
    assert report.removed[RecordKind.WEBHOOKS] == 1
    assert not ids(rig, t.webhooks)


def test_revoked_tokens_go_after_the_window(rig: Rig) -> None:
    issued = identity.ensure_member_token(rig.services, TENANT, "bob", Role.MEMBER)
    kept = identity.ensure_member_token(rig.services, TENANT, "carol", Role.MEMBER)
    with rig.system.store.transaction() as tx:
        tx.identity.revoke_token(TENANT, issued.id, rig.now)
    rig.advance(KEEP - 1)
    sweep(rig)
    assert issued.id in ids(rig, t.tokens)
    rig.advance(2)
    assert sweep(rig).removed[RecordKind.TOKENS] == 1
    assert kept.id in ids(rig, t.tokens)
    assert issued.id not in ids(rig, t.tokens)


def test_removed_members_leave_nothing_to_sweep(rig: Rig) -> None:
    """Removing a member deletes its row at once (its tokens are revoked, then swept)."""
    identity.ensure_member_token(rig.services, TENANT, "dave", Role.MEMBER)
    with rig.system.store.transaction() as tx:
        assert tx.identity.remove_member(TENANT, "dave")
    assert "dave" not in ids(rig, t.members, "subject")


def test_a_tenant_window_overrides_the_host_window(rig: Rig) -> None:
    short = Principal("brief", "erin", Role.ADMIN)
    from punctual.embedded import Scheduler

    brief = Scheduler(rig.system, short.tenant, short.subject, short.role)
    mine = brief.schedule_at(
        "echo", {"message": "x"}, rig.now + timedelta(hours=1), business_request_id="b"
    )
    brief.cancel_start(mine["id"], mine["version"])
    theirs = canceled(rig, "k-default")
    policy = RetentionPolicy(keep_seconds=KEEP, tenant_keep_seconds={"brief": 60.0}, batch_size=3)
    rig.advance(61)
    retention.sweep(rig.services, policy)
    assert mine["id"] not in ids(rig, t.starts)
    assert theirs in ids(rig, t.starts)


def test_sweeps_go_in_batches_and_the_plan_counts_what_they_take(rig: Rig) -> None:
    started = [canceled(rig, f"k-{n}") for n in range(7)]
    rig.advance(KEEP + 1)
    planned = retention.plan(rig.services, POLICY)
    assert planned[TENANT][RecordKind.STARTS.value] == 7
    assert planned[TENANT][RecordKind.IDEMPOTENCY_RECORDS.value] == 0  # freed by the sweep
    assert set(started) <= ids(rig, t.starts), "the plan removes nothing"

    report = sweep(rig)

    assert report.removed[RecordKind.STARTS] == 7
    assert report.removed[RecordKind.IDEMPOTENCY_RECORDS] == 14
    assert report.batches >= 3 + 5  # 3 + 3 + 1 starts, 3 * 4 + 2 keys
    assert retention.plan(rig.services, POLICY, tenant=TENANT)[TENANT] == dict.fromkeys(
        (kind.value for kind in RecordKind), 0
    )


def test_a_sweep_stops_between_batches_when_told_and_the_next_carries_on(rig: Rig) -> None:
    for n in range(5):
        canceled(rig, f"k-{n}")
    rig.advance(KEEP + 1)
    stopped = retention.sweep(rig.services, POLICY, pause=lambda: False)
    assert not stopped.complete
    assert stopped.removed[RecordKind.STARTS] == 3
    assert sweep(rig).removed[RecordKind.STARTS] == 2


def test_a_sweep_is_counted_in_events_and_metrics(rig: Rig) -> None:
    events: list[Event] = []
    unsubscribe = rig.system.events.subscribe(events.append)
    canceled(rig, "k-metric")
    rig.advance(KEEP + 1)
    try:
        sweep(rig)
    finally:
        unsubscribe()
    swept = {e.data["kind"]: e.data["removed"] for e in events if e.name == "retention.swept"}
    assert swept == {"idempotency_records": 2, "starts": 1}
    text = generate_latest(rig.system.metrics.registry).decode()
    assert 'punctual_retention_removed_total{kind="starts"} 1.0' in text
    assert 'punctual_retention_removed_total{kind="idempotency_records"} 2.0' in text


def test_the_sweeper_thread_sweeps_on_its_interval_then_reclaims(rig: Rig) -> None:
    canceled(rig, "k-thread")
    rig.advance(KEEP + 1)
    passes: list[SweepReport] = []
    sweeper = Sweeper(rig.services, POLICY, interval_seconds=0.05, after_pass=passes.append)
    sweeper.start()
    try:
        wait_for(lambda: bool(passes), "a sweep pass removed something")
    finally:
        sweeper.stop()
    assert not ids(rig, t.starts)
    assert len(passes) == 1, "only passes that removed something reclaim"
    assert tables_swept(passes[0].removed) == ["follow_throughs", "idempotency_keys", "starts"]


def wait_for(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


# --------------------------------------------------------------------------- races


def test_a_sweep_racing_dispatch_and_idempotent_retries_loses_nothing(rig: Rig) -> None:
    """While a sweep removes a long history in many batches, a dispatch pass starts every
    due start exactly once and a retry of a retained start's create keeps replaying."""
    old = [canceled(rig, f"old-{n}") for n in range(40)]
    retained = one_off(rig, "retained", in_seconds=100 * KEEP)
    retained_at = parse_rfc3339(retained["start_at"])
    rig.advance(KEEP + 1)
    due = [one_off(rig, f"due-{n}", in_seconds=1)["id"] for n in range(30)]
    rig.advance(2)
    policy = RetentionPolicy(keep_seconds=KEEP, batch_size=2)
    failures: list[BaseException] = []
    replays: list[dict[str, Any]] = []
    stop = threading.Event()

    def retry() -> None:
        try:
            while not stop.is_set():
                replays.append(one_off(rig, "retained", at=retained_at))
        except BaseException as exc:  # reported below, on the test's thread
            failures.append(exc)

    def sweep_all() -> None:
        try:
            retention.sweep(rig.services, policy, pause=lambda: True)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=retry), threading.Thread(target=sweep_all)]
    for thread in threads:
        thread.start()
    dispatched_count = 0
    while dispatched_count < len(due):
        dispatched_count += len(rig.dispatch().dispatched)
    threads[1].join(60)
    stop.set()
    threads[0].join(60)

    assert not failures, failures
    assert not set(old) & ids(rig, t.starts)
    runs = {row.origin_id for row in _runs(rig)}
    assert runs == set(due), "each due start dispatched exactly once"
    assert replays and all(r["id"] == retained["id"] for r in replays)
    assert "retained" in keys_of(rig)


def _runs(rig: Rig) -> list[Any]:
    with rig.system.store.engine.connect() as conn:
        return list(conn.execute(sa.select(t.runs.c.id, t.runs.c.origin_id)))


# --------------------------------------------------------------------------- the dry run


def test_the_plan_command_prints_what_a_sweep_would_remove(
    system: bootstrap.Punctual, tmp_path: Path
) -> None:
    from punctual.embedded import Scheduler

    register_demo(system)
    alice = Scheduler(system, TENANT, "alice", Role.MEMBER)
    start = alice.schedule_at(
        "echo",
        {"message": "x"},
        system.services.clock.now() + timedelta(hours=1),
        business_request_id="b",
    )
    alice.cancel_start(start["id"], start["version"])
    time.sleep(0.05)  # the window below is a millisecond: let it pass
    env = {
        "PUNCTUAL_RETENTION__KEEP_SECONDS": "0.001",
        "PUNCTUAL_CODEC__KEY_FILE": str(tmp_path / "test.keys"),
    }
    url = system.settings.database_url
    runner = CliRunner()
    answer = runner.invoke(app, ["retention", "plan", "--json", "--database-url", url], env=env)
    assert answer.exit_code == 0, answer.output
    shown = json.loads(answer.stdout)
    assert shown["tenants"][TENANT]["starts"] == 1
    assert shown["total"]["starts"] == 1
    human = runner.invoke(app, ["retention", "plan", "--database-url", url], env=env)
    assert f"{TENANT:<24} {'starts':<22} {1:>12}" in human.stdout
    unknown = runner.invoke(
        app, ["retention", "plan", "--tenant", "nobody", "--database-url", url], env=env
    )
    assert unknown.exit_code == 3
    assert start["id"] in {s["id"] for s in alice.list_starts()["items"]}, "nothing removed"
