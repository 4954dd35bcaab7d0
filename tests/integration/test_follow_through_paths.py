"""Follow-through on every path that ends a run, on the local engine and both stores (CR-4,
CR-5).

Time is driven by hand (``FakeClock``), as in ``test_schedule_runtime.py``, whose rig this
reuses: generation and dispatch passes are called as the runner calls them, runs are
claimed and ended through the worker's own use cases (``claim_runs``, ``finish_runs``) or
by the path under test (a cancel, a terminate, the reaper), and the runner's
follow-through pass (``follow_through``) is called where the runner's third thread would.
The last test runs real worker processes and a real runner instead, so that the runner's
own pass is seen to follow through every end a body can have.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.stores.sql import tables as t
from punctual.domain.ids import new_id
from punctual.domain.permissions import Principal, Role
from punctual.domain.runs import DefinitionState, RunState
from punctual.embedded import Scheduler
from punctual.ports.records import (
    ClaimedDelivery,
    ClaimedRun,
    Delivery,
    FollowThroughRecord,
    NewWebhook,
    Notification,
    Seek,
)
from punctual.usecases.running import execution
from punctual.usecases.running.definitions import set_lifecycle
from punctual.usecases.running.followthrough import FollowThroughReport, follow_through
from punctual.usecases.tenancy import identity
from tests.conftest import make_settings
from tests.integration.test_schedule_runtime import (
    ECHO_V2_INCOMPATIBLE,
    MINUTE,
    WORKER,
    Occurrence,
    Rig,
    activate_echo_v2,
    build_rig,
)
from tests.support.api import in_process, member_api

__all__ = ["build_rig"]  # the schedule runtime tests' rig fixture, used here too

TENANT = "acme"
SCORE = {"metrics": [{"path": "metrics.score", "better": "higher", "tolerance": 0.05}]}
"""The regression policy of issue 13's ``nightly-scores``."""
FAR_PAST = datetime(2000, 1, 1, tzinfo=UTC)
"""Before any clock's present, the database's included (leases and claims on PostgreSQL
are timed by it)."""


def scored(value: float) -> dict[str, Any]:
    return {"metrics": {"score": value}}


def regression(previous: float, current: float) -> dict[str, Any]:
    """One entry of ``follow_through.regressions`` under ``SCORE`` (API.md)."""
    return {
        "path": "metrics.score",
        "previous": previous,
        "current": current,
        "better": "higher",
        "tolerance": 0.05,
    }


class Follow:
    """The rig, plus what the follow-through tests read and do."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.services = rig.services

    def schedule(self, name: str, **options: Any) -> str:
        """Alice's schedule every minute (``allow_all``: runs may overlap and end in any
        order), of the demo ``score`` workflow."""
        options.setdefault("workflow", "score")
        options.setdefault("input", {"score": 0.5})
        schedule_id: str = self.rig.every(name, **options)["id"]
        return schedule_id

    def fire(self, schedule_id: str, minutes: int = 1) -> list[Occurrence]:
        """``minutes`` more fires of the schedule, dispatched; the new occurrences in order."""
        before = {o.id for o in self.rig.occurrences(schedule_id)}
        self.rig.advance(minutes * MINUTE)
        self.rig.generate()
        self.rig.dispatch()
        fired = [o for o in self.rig.occurrences(schedule_id) if o.id not in before]
        assert len(fired) == minutes, fired
        assert all(o.state == "dispatched" for o in fired), fired
        return fired

    def claim(self) -> dict[str, ClaimedRun]:
        """Every pending run, claimed by the rig's live worker; by run id."""
        loaded = [(name, version) for name, version, _ in self.rig.loaded]
        work = execution.claim_runs(self.services, WORKER, ["standard"], loaded, 100)
        return {w.run.id: w.run for w in work}

    def end(
        self,
        run: ClaimedRun,
        state: RunState,
        result: Any = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """The worker reports the attempt's outcome, as its recorder thread does."""
        if state is not RunState.COMPLETED and error is None:
            error = {"code": "workflow_error", "message": f"ended {state.value} by the test"}
        finished = execution.Finished(run, state, result, error)
        assert execution.finish_runs(self.services, WORKER, [finished]) == [True]

    def complete(self, run: ClaimedRun, score: float) -> None:
        self.end(run, RunState.COMPLETED, scored(score))

    def follow(self) -> FollowThroughReport:
        """The runner's follow-through pass."""
        return follow_through(self.services)

    def recorded(self, occurrence_id: str) -> FollowThroughRecord | None:
        with self.rig.system.store.transaction(readonly=True) as tx:
            return tx.follow_through.get_many([occurrence_id]).get(occurrence_id)

    def status(self, occurrence_id: str) -> str | None:
        record = self.recorded(occurrence_id)
        return record.status if record else None

    def last(self, schedule_id: str) -> tuple[str | None, str | None]:
        """The schedule's (last_status, last_run_id) as its view shows them."""
        view = self.rig.get(schedule_id)
        return view["last_status"], view["last_run_id"]

    def run_state(self, run_id: str) -> str:
        state: str = self.rig.admin.get_run(run_id)["state"]
        return state

    def feed(self, subject: str) -> list[Notification]:
        with self.rig.system.store.transaction(readonly=True) as tx:
            return tx.notifications.find(TENANT, subject, unread_only=False, at=Seek(100))

    def kinds(self, subject: str) -> list[str]:
        return sorted(n.kind for n in self.feed(subject))

    def webhook(self, events: list[str], host: str = "hooks.example.com") -> str:
        """A tenant webhook, inserted as the webhooks route stores one (URL encrypted)."""
        url = f"https://{host}/services/T000/B000/secret-path"
        hook = NewWebhook(
            id=new_id("whk"),
            tenant=TENANT,
            url=self.services.codec.encrypt(url, TENANT),
            url_display=f"https://{host}/…",
            secret=None,
            events=events,
            created_by="root",
        )
        with self.rig.system.store.transaction() as tx:
            return tx.webhooks.insert(hook, self.rig.now).id

    def outbox(self, webhook_id: str) -> list[Delivery]:
        with self.rig.system.store.transaction(readonly=True) as tx:
            return tx.webhooks.deliveries(TENANT, webhook_id, Seek(100))

    def due_deliveries(self) -> list[ClaimedDelivery]:
        """What a deliverer would send now (a claim: the rows are leased by it)."""
        with self.rig.system.store.transaction() as tx:
            return tx.webhooks.claim_due(self.rig.now, 60, 100)

    def age_claim(self, run_id: str, **values: Any) -> None:
        """Move a claim's lease or its ``claimed_at`` into the far past, on every clock."""
        with self.rig.system.store.engine.begin() as conn:
            conn.execute(sa.update(t.runs).where(t.runs.c.id == run_id).values(**values))


@pytest.fixture
def follow(build_rig: Callable[..., Rig]) -> Follow:
    return Follow(build_rig())


def single_run(follow: Follow, schedule_id: str) -> tuple[Occurrence, str]:
    (occurrence,) = follow.fire(schedule_id)
    return occurrence, occurrence.run_id


# --------------------------------------------------------------------------- every run end


def _completed(follow: Follow, run_id: str) -> None:
    follow.complete(follow.claim()[run_id], 0.7)


def _failed(follow: Follow, run_id: str) -> None:
    """The body raised: the worker reports ``failed`` with a ``workflow_error``."""
    follow.end(follow.claim()[run_id], RunState.FAILED)


def _canceled_before_pick_up(follow: Follow, run_id: str) -> None:
    canceled = follow.rig.alice.cancel_run(run_id)
    assert canceled["state"] == "canceled"


def _canceled_and_honoured(follow: Follow, run_id: str) -> None:
    run = follow.claim()[run_id]
    flagged = follow.rig.alice.cancel_run(run_id)
    assert (flagged["state"], flagged["cancel_requested"]) == ("running", True)
    assert follow.follow().recorded == 0, "a cancel requested is no end"
    follow.end(run, RunState.CANCELED, error={"code": "canceled", "message": "woken"})


def _terminated(follow: Follow, run_id: str) -> None:
    follow.claim()
    assert follow.rig.alice.terminate_run(run_id)["state"] == "terminated"


def _timed_out(follow: Follow, run_id: str) -> None:
    """The worker stopped the body at its execution timeout and says so."""
    run = follow.claim()[run_id]
    follow.end(run, RunState.TIMED_OUT, error={"code": "timed_out", "message": "timeout"})


def _pending_timed_out(follow: Follow, run_id: str) -> None:
    """No worker picks the run up within ``pending_timeout_seconds`` (an hour)."""
    del run_id
    follow.rig.advance(3600 + 1)
    assert execution.reap(follow.services).timed_out == 1


def _lost_workers_exhausted(follow: Follow, run_id: str) -> None:
    """Every attempt's worker vanishes (its lease runs out); after ``max_run_attempts``
    the reaper fails the run ``worker_lost``."""
    follow.services.policy = replace(follow.services.policy, max_run_attempts=2)
    for attempt in (1, 2):
        assert run_id in follow.claim(), f"attempt {attempt} was not claimed"
        follow.age_claim(run_id, lease_until=FAR_PAST)
        report = execution.reap(follow.services)
        assert (report.requeued, report.failed) == ((1, 0) if attempt == 1 else (0, 1))


def _running_backstop(follow: Follow, run_id: str) -> None:
    """A run still renewed long after its execution timeout: the reaper ends it."""
    follow.claim()
    follow.age_claim(run_id, claimed_at=FAR_PAST)
    assert execution.reap(follow.services).timed_out == 1


def _unreadable_input(follow: Follow, run_id: str) -> None:
    """The stored input fails authentication: the claim fails the run alone (FT-1)."""
    with follow.rig.system.store.engine.begin() as conn:
        sealed = conn.execute(sa.select(t.runs.c.input).where(t.runs.c.id == run_id)).scalar_one()
        damaged = bytes(sealed[:-1]) + bytes([sealed[-1] ^ 1])
        conn.execute(sa.update(t.runs).where(t.runs.c.id == run_id).values(input=damaged))
    assert follow.claim() == {}, "nothing readable was claimed"


PATHS: list[tuple[Callable[[Follow, str], None], str, str | None]] = [
    (_completed, "completed", None),
    (_failed, "failed", "workflow_error"),
    (_canceled_before_pick_up, "canceled", "canceled"),
    (_canceled_and_honoured, "canceled", "canceled"),
    (_terminated, "terminated", "terminated"),
    (_timed_out, "timed_out", "timed_out"),
    (_pending_timed_out, "timed_out", "timed_out"),
    (_lost_workers_exhausted, "failed", "worker_lost"),
    (_running_backstop, "timed_out", "timed_out"),
    (_unreadable_input, "failed", "input_undecryptable"),
]


@pytest.mark.parametrize(
    ("end_run", "state", "code"), PATHS, ids=[path.__name__.strip("_") for path, *_ in PATHS]
)
def test_every_run_end_is_followed_through(
    follow: Follow, end_run: Callable[[Follow, str], None], state: str, code: str | None
) -> None:
    sid = follow.schedule("every-end", regression=SCORE)
    occurrence, run_id = single_run(follow, sid)
    assert follow.last(sid) == ("fired", run_id)
    assert follow.follow().recorded == 0, "nothing ended yet"

    end_run(follow, run_id)

    run = follow.rig.admin.get_run(run_id)
    assert run["state"] == state
    assert (run["error"] or {}).get("code") == code
    assert follow.status(occurrence.id) is None, "recorded by the pass, not by the end"
    report = follow.follow()
    assert (report.recorded, report.claimed, report.notified) == (1, 1, 0)
    record = follow.recorded(occurrence.id)
    assert record is not None
    assert (record.run_id, record.schedule_id) == (run_id, sid)
    assert record.status == "not_comparable"
    if state == "completed":
        assert record.reason is not None and "no earlier occurrence" in record.reason
    else:
        assert record.reason == f"the run ended {state}, not completed"
    assert (record.previous_run_id, record.regressions) == (None, [])
    assert follow.last(sid) == (state, run_id)
    assert follow.rig.get(sid)["version"] == 1, "bookkeeping, never a user update"
    assert follow.follow().recorded == 0, "followed through once"


# --------------------------------------------------------------------------- the comparison


def test_a_regression_is_recorded_and_told_to_the_creator_and_subscribed_webhooks(
    follow: Follow,
) -> None:
    Scheduler(follow.rig.system, TENANT, "bob", Role.MEMBER)
    regressions = follow.webhook(["regression"])
    every_kind = follow.webhook([], host="chat.example.org")
    other_kind = follow.webhook(["schedule_auto_disabled"], host="other.example.net")
    sid = follow.schedule("nightly-scores", regression=SCORE, input={"score": 0.9})

    first, first_run = single_run(follow, sid)
    follow.complete(follow.claim()[first_run], 0.9)
    assert follow.follow().notified == 0
    record = follow.recorded(first.id)
    assert record is not None
    assert (record.status, record.previous_run_id) == ("not_comparable", None)
    assert record.reason is not None and "compare" in record.reason

    second, second_run = single_run(follow, sid)
    follow.complete(follow.claim()[second_run], 0.85)  # exactly at the tolerance: no regression
    assert follow.follow().notified == 0
    record = follow.recorded(second.id)
    assert record is not None
    assert (record.status, record.reason, record.previous_run_id) == ("ok", None, first_run)
    assert record.regressions == []

    third, third_run = single_run(follow, sid)
    follow.complete(follow.claim()[third_run], 0.79)
    report = follow.follow()
    assert (report.recorded, report.notified) == (1, 1)
    record = follow.recorded(third.id)
    assert record is not None
    assert (record.status, record.previous_run_id) == ("regressed", second_run)
    assert record.regressions == [regression(0.85, 0.79)]
    assert follow.last(sid) == ("completed", third_run)

    (note,) = follow.feed("alice")
    assert note.kind == "regression"
    assert (note.schedule_id, note.occurrence_id, note.run_id) == (sid, third.id, third_run)
    assert "nightly-scores" in note.text and "0.79" in note.text
    assert note.details["previous_run_id"] == second_run
    assert note.details["regressions"] == record.regressions
    assert follow.feed("bob") == [] and follow.feed("root") == [], "the creator only"

    (delivery,) = follow.outbox(regressions)
    assert (delivery.kind, delivery.status, delivery.event_id) == (
        "regression",
        "pending",
        note.event_id,
    )
    assert [d.event_id for d in follow.outbox(every_kind)] == [note.event_id]
    assert follow.outbox(other_kind) == [], "not subscribed to regressions"
    sent = {d.webhook_id: d for d in follow.due_deliveries()}
    assert set(sent) == {regressions, every_kind}
    payload = sent[regressions].payload
    assert (payload["event"], payload["event_id"], payload["tenant"]) == (
        "regression",
        note.event_id,
        TENANT,
    )
    assert payload["text"] == note.text
    assert payload["data"]["run_id"] == third_run
    assert payload["data"]["regressions"] == record.regressions


def test_a_schedule_without_a_policy_records_no_policy(follow: Follow) -> None:
    hook = follow.webhook([])
    sid = follow.schedule("no-policy")
    for score in (0.9, 0.1):
        occurrence, run_id = single_run(follow, sid)
        follow.complete(follow.claim()[run_id], score)
        assert follow.follow().notified == 0
        record = follow.recorded(occurrence.id)
        assert record is not None
        assert (record.status, record.reason, record.previous_run_id) == ("no_policy", None, None)
    assert follow.feed("alice") == [] and follow.outbox(hook) == []


def test_the_baseline_is_the_latest_earlier_occurrence_that_completed(follow: Follow) -> None:
    """Four runs at once; the fourth ends before the third, the second failed. The third's
    baseline is the first: not the fourth (a later occurrence, although it ended earlier),
    not the second (failed)."""
    sid = follow.schedule("baseline", regression=SCORE)
    first, second, third, fourth = follow.fire(sid, minutes=4)
    claimed = follow.claim()
    assert set(claimed) == {first.run_id, second.run_id, third.run_id, fourth.run_id}

    follow.complete(claimed[first.run_id], 0.9)
    follow.end(claimed[second.run_id], RunState.FAILED)
    follow.follow()
    follow.complete(claimed[fourth.run_id], 0.5)
    follow.follow()
    follow.complete(claimed[third.run_id], 0.88)
    follow.follow()

    assert follow.status(second.id) == "not_comparable"
    late = follow.recorded(fourth.id)
    assert late is not None
    assert (late.status, late.previous_run_id) == ("regressed", first.run_id)
    record = follow.recorded(third.id)
    assert record is not None
    assert (record.status, record.previous_run_id) == ("ok", first.run_id)
    assert follow.last(sid) == ("completed", fourth.run_id), "the latest occurrence stays"


# --------------------------------------------------------------------------- ordering


def test_an_older_occurrence_ending_later_never_overwrites_the_newer_one(
    follow: Follow,
) -> None:
    sid = follow.schedule("overlapping")
    older, newer = follow.fire(sid, minutes=2)
    claimed = follow.claim()
    assert follow.last(sid) == ("fired", newer.run_id)

    follow.end(claimed[older.run_id], RunState.FAILED)
    follow.follow()
    assert follow.last(sid) == ("fired", newer.run_id), "the newer run was fired already"
    follow.complete(claimed[newer.run_id], 0.5)
    follow.follow()
    assert follow.last(sid) == ("completed", newer.run_id)

    later = follow.fire(sid, minutes=2)
    claimed = follow.claim()
    follow.complete(claimed[later[1].run_id], 0.5)
    follow.follow()
    follow.end(claimed[later[0].run_id], RunState.FAILED)  # ends after the newer one
    follow.follow()

    assert follow.last(sid) == ("completed", later[1].run_id)
    assert [follow.status(o.id) for o in (older, newer, *later)] == ["no_policy"] * 4


def test_a_second_pass_records_and_notifies_nothing_again(follow: Follow) -> None:
    hook = follow.webhook(["regression"])
    sid = follow.schedule("twice", regression=SCORE)
    first, second = follow.fire(sid, minutes=2)
    claimed = follow.claim()
    follow.complete(claimed[first.run_id], 0.9)
    follow.complete(claimed[second.run_id], 0.1)

    report = follow.follow()
    assert (report.recorded, report.notified) == (2, 1)
    recorded = follow.recorded(second.id)
    again = follow.follow()

    assert (again.recorded, again.notified, again.claimed) == (0, 0, 0)
    assert follow.recorded(second.id) == recorded
    assert follow.kinds("alice") == ["regression"]
    assert len(follow.outbox(hook)) == 1


# --------------------------------------------------------------------------- the deadline


def test_a_run_past_the_deadline_is_left_alone_and_its_end_moves_only_last_status(
    build_rig: Callable[..., Rig],
) -> None:
    follow = Follow(build_rig(schedules={"follow_through_deadline_seconds": 600}))
    hook = follow.webhook(["finalize_timed_out"])
    sid = follow.schedule("slow", regression=SCORE)
    _, first_run = single_run(follow, sid)
    follow.complete(follow.claim()[first_run], 0.9)
    follow.follow()
    occurrence, run_id = single_run(follow, sid)
    follow.rig.advance(300)
    run = follow.claim()[run_id]  # the deadline counts from the run's creation, not this

    follow.rig.advance(299)
    assert follow.follow().recorded == 0, "within the deadline"
    follow.rig.advance(2)
    report = follow.follow()

    assert (report.recorded, report.notified) == (1, 1)
    record = follow.recorded(occurrence.id)
    assert record is not None
    assert (record.status, record.run_id) == ("finalize_timed_out", run_id)
    assert record.reason is not None and "600" in record.reason
    assert follow.run_state(run_id) == "running", "the run is left alone"
    (note,) = follow.feed("alice")
    assert (note.kind, note.run_id, note.occurrence_id) == (
        "finalize_timed_out",
        run_id,
        occurrence.id,
    )
    assert [d.event_id for d in follow.outbox(hook)] == [note.event_id]
    assert follow.last(sid) == ("fired", run_id)
    assert follow.follow().recorded == 0, "recorded once"

    follow.complete(run, 0.1)  # a regression, ended too late to be compared
    report = follow.follow()

    assert report.notified == 0
    assert follow.last(sid) == ("completed", run_id)
    assert follow.recorded(occurrence.id) == record, "finalize_timed_out stands"
    assert follow.kinds("alice") == ["finalize_timed_out"]
    assert follow.follow().claimed == 0


# --------------------------------------------------------------------------- recipients


def remove_member(follow: Follow, subject: str) -> None:
    admin = Principal(TENANT, "root", Role.ADMIN)
    mutation = identity.remove_member(follow.services, admin, subject)
    assert follow.rig.system.mutations.run(None, mutation).status == 204


def test_with_the_creator_gone_notifications_go_to_the_admins(follow: Follow) -> None:
    Scheduler(follow.rig.system, TENANT, "ada", Role.ADMIN)
    sid = follow.schedule("orphaned", regression=SCORE)
    first, second = follow.fire(sid, minutes=2)
    claimed = follow.claim()
    follow.complete(claimed[first.run_id], 0.9)
    follow.follow()

    remove_member(follow, "alice")
    follow.complete(claimed[second.run_id], 0.2)  # dispatched before alice left
    follow.follow()

    assert follow.feed("alice") == []
    for admin in ("root", "ada"):
        assert follow.kinds(admin) == ["regression", "schedule_auto_disabled"], admin
        regression = next(n for n in follow.feed(admin) if n.kind == "regression")
        assert (regression.schedule_id, regression.run_id) == (sid, second.run_id)
    event_ids = {n.event_id for n in follow.feed("root")}
    assert event_ids == {n.event_id for n in follow.feed("ada")}, "one event, two recipients"


def test_removing_a_member_tells_the_admins_of_each_schedule_it_disabled(
    follow: Follow,
) -> None:
    hook = follow.webhook(["schedule_auto_disabled"])
    mine = [follow.schedule(f"alice-{i}") for i in range(2)]
    follow.schedule("alice-paused", enabled=False)

    remove_member(follow, "alice")

    notes = follow.feed("root")
    assert sorted((n.kind, n.schedule_id) for n in notes) == sorted(
        ("schedule_auto_disabled", sid) for sid in mine
    ), "a paused schedule is not disabled by the removal, so nothing to tell"
    for note in notes:
        assert note.details["last_status"] == follow.rig.get(note.schedule_id or "")["last_status"]
        assert "alice" in note.text
    assert sorted(d.event_id for d in follow.outbox(hook)) == sorted(n.event_id for n in notes)


def test_an_auto_disable_at_fire_notifies_the_creator(follow: Follow) -> None:
    hook = follow.webhook(["schedule_auto_disabled"])
    sid = follow.schedule("rejected", workflow="echo", input={"message": "tick"})
    activate_echo_v2(follow.rig, ECHO_V2_INCOMPATIBLE)
    follow.rig.advance(MINUTE)
    follow.rig.generate()
    follow.rig.dispatch()

    status = follow.rig.get(sid)["last_status"]
    assert status.startswith("Auto-disabled: ")
    notes = {n.kind: n for n in follow.feed("alice")}
    assert set(notes) == {"schedule_auto_disabled", "start_failed"}
    disabled = notes["schedule_auto_disabled"]
    assert (disabled.schedule_id, disabled.details["last_status"]) == (sid, status)
    assert notes["start_failed"].details["code"] == "input_rejected"
    assert [d.event_id for d in follow.outbox(hook)] == [disabled.event_id]


def test_a_start_that_fails_for_good_notifies_its_creator(follow: Follow) -> None:
    hook = follow.webhook(["start_failed"])
    start = follow.rig.alice.schedule_at(
        "echo", {"message": "late"}, follow.rig.now, business_request_id="doomed"
    )
    set_lifecycle(follow.services, "echo", "1", DefinitionState.DEPRECATED)

    report = follow.rig.dispatch()

    assert report.failed == [start["id"]]
    assert follow.rig.alice.get_start(start["id"])["state"] == "failed"
    (note,) = follow.feed("alice")
    assert (note.kind, note.schedule_id, note.occurrence_id) == ("start_failed", None, None)
    assert (note.details["start_id"], note.details["code"]) == (start["id"], "workflow_inactive")
    assert start["id"] in note.text
    assert follow.feed("root") == []
    assert [d.event_id for d in follow.outbox(hook)] == [note.event_id]


# --------------------------------------------------------------------------- the API


def test_the_occurrence_list_shows_each_follow_through(follow: Follow) -> None:
    sid = follow.schedule("shown", regression=SCORE)
    first, second, third = follow.fire(sid, minutes=3)
    claimed = follow.claim()
    follow.complete(claimed[first.run_id], 0.9)
    follow.complete(claimed[second.run_id], 0.5)
    follow.follow()

    with in_process(follow.rig.system) as client:
        api = member_api(follow.rig.system, client, TENANT, "alice", Role.MEMBER)
        response = api.get(f"/schedules/{sid}/occurrences")
    assert response.status_code == 200, response.text
    items = {item["id"]: item for item in response.json()["items"]}

    assert items[third.id]["follow_through"] is None, "its run has not ended"
    shown = items[second.id]["follow_through"]
    assert set(shown) >= {"status", "reason", "previous_run_id", "regressions"}
    assert (shown["status"], shown["reason"], shown["previous_run_id"]) == (
        "regressed",
        None,
        first.run_id,
    )
    assert shown["regressions"] == [regression(0.9, 0.5)]
    baseline_less = items[first.id]["follow_through"]
    assert (baseline_less["status"], baseline_less["previous_run_id"]) == ("not_comparable", None)
    assert isinstance(baseline_less["reason"], str) and baseline_less["reason"]
    assert baseline_less["regressions"] == []


# --------------------------------------------------------------------------- real processes

APP_REF = "tests.integration.worker_app:app"


@pytest.fixture
def running(database_url: str, tmp_path: Path) -> Iterator[bootstrap.Punctual]:
    system = bootstrap.build(
        make_settings(
            database_url,
            tmp_path,
            worker={"heartbeat_seconds": 0.5, "liveness_seconds": 10},
            runner={"lease_seconds": 2, "max_idle_seconds": 0.2},
        )
    )
    try:
        system.start_worker(APP_REF, slots=4)
        system.start_runner()
        yield system
    finally:
        system.close()


def poll(what: str, check: Callable[[], Any], timeout: float = 20) -> Any:
    """``check()`` until it returns something truthy; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.05)


SOON_SECONDS = 1.5


def fire_and_end(
    alice: Scheduler,
    bodies: dict[str, tuple[str, dict[str, Any]]],
    timeout: float = 20,
    **options: Any,
) -> dict[str, dict[str, Any]]:
    """One schedule per expected end (state -> workflow and input), each firing once,
    ``SOON_SECONDS`` after it was created, on whichever engine runs them; the runs
    expected ``canceled`` and ``terminated`` are canceled and terminated once their
    bodies run. Per state: the
    run, the schedule and the occurrence's follow-through once the runner's pass has
    followed the run through."""
    schedules = {
        state: alice.schedule_every(
            workflow,
            payload,
            # Without ``starts_at`` the first fire is one interval after the schedule was
            # created, however long the create took on a loaded machine (a fixed instant
            # computed before the call can be past by then, and is never fired).
            timedelta(seconds=SOON_SECONDS),
            name=f"ends-{state}",
            overlap="skip",
            missed="skip",
            max_occurrences=1,
            **options,
        )["id"]
        for state, (workflow, payload) in bodies.items()
    }

    def fired(state: str) -> str | None:
        items = alice.list_occurrences(schedules[state])["items"]
        run_id: str | None = items[0]["run_id"] if items else None
        return run_id

    def running(run_id: str) -> bool:
        state: str = alice.get_run(run_id)["state"]
        return state == "running"

    def followed(state: str) -> dict[str, Any] | None:
        (item,) = alice.list_occurrences(schedules[state])["items"]
        schedule = alice.get_schedule(schedules[state])
        if item["follow_through"] is None or schedule["last_status"] != state:
            return None
        run = alice.get_run(item["run_id"])
        return {"run": run, "schedule": schedule, "follow_through": item["follow_through"]}

    runs = {
        state: poll(f"the {state} schedule fires", partial(fired, state), timeout)
        for state in bodies
    }
    for state in {"canceled", "terminated"} & set(bodies):
        poll(f"the {state} run's body runs", partial(running, runs[state]), timeout)
    if "canceled" in bodies:
        assert alice.cancel_run(runs["canceled"])["cancel_requested"] is True
    if "terminated" in bodies:
        assert alice.terminate_run(runs["terminated"])["state"] == "terminated"
    return {
        state: poll(f"the {state} run is followed through", partial(followed, state), timeout)
        for state in bodies
    }


def test_the_runners_pass_follows_through_what_real_bodies_do(
    running: bootstrap.Punctual,
) -> None:
    """A real worker executes the bodies and the runner's own threads dispatch and follow
    through: completed, raised, canceled, terminated, execution timeout (1.5 s)."""
    alice = Scheduler(running, TENANT, "alice", Role.MEMBER)
    ended = fire_and_end(
        alice,
        {
            "completed": ("echo", {"message": "hi"}),
            "failed": ("explode", {}),
            "canceled": ("nap", {"seconds": 60}),
            "terminated": ("nap", {"seconds": 60}),
            "timed_out": ("hang", {}),
        },
    )
    for state, seen in ended.items():
        assert seen["run"]["state"] == state
        assert seen["schedule"]["last_run_id"] == seen["run"]["id"]
        assert seen["follow_through"]["status"] == "no_policy"
        assert seen["follow_through"]["reason"] is None
