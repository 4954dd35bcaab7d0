"""The invariant checker of a chaos run: reads the recorded history and the final store,
and reports every violation of punctual's promises with the ids involved.

Inputs (the run's directory, ``tests.chaos.record``): every client operation with every
answer (``history.jsonl``); every body execution as the body itself recorded it, outside
punctual (``bodies.jsonl``); every fault and process event (``faults.jsonl``); every
webhook request the receiver got (``receiver.jsonl``); pending counts sampled while the
load ran (``samples.jsonl``); the store as the API showed it after the quiet period
(``store.json``); the run's settings (``run.json``).

What is checked, and what the contract allows (SPEC DP-2, FT-2, FT-3, WF-4, WF-5):

* **One run per start and per occurrence.** A start accepted with ``201`` exists; once
  ``dispatched`` it has exactly one run, the preallocated one; canceled or failed, none.
  The same for occurrences (generated, triggered or backfilled); no two live occurrences of
  one schedule share an ``occurrence_at``; no run exists without its start or occurrence.
* **Bodies.** At-least-once execution of a *body* is allowed exactly where the contract
  allows it: when the worker executing an attempt dies (or is frozen past its lease, or
  loses the store past it) before the attempt's outcome is recorded, the run is retried as
  a new attempt of the same run (DP-2), visible in ``attempts``. So: every body execution
  is an attempt the run counts (``1 <= attempt <= attempts``, no attempt executed twice);
  a completed run's result is the one returned by an execution of its last attempt; a body
  that finished (returned, raised, or ended on a cancel) is executed again only if a fault
  that the contract names hit it before its outcome was recorded — a kill or freeze of its
  worker or of its slot process, or the store (or Temporal) going away. Two finished
  executions of one run without such a fault is a violation ("run twice"), as is a body
  that began while another body of the same run held the run's lock unless that other
  body's process had been killed or frozen (FT-2), and a body of an attempt that began
  after a later attempt's body had begun (its claim was superseded: fencing must stop it
  before it begins). A body that began but never finished and was executed again without
  any fault is allowed (a worker that cannot renew its lease in time stops the body itself,
  FT-2) and is counted, not reported.
* **Acknowledged cancels win.** A start or occurrence canceled with ``200`` ends
  ``canceled`` with no run and no body execution; a start never dispatches before its
  ``start_at`` (a reschedule answered ``200`` is not lost).
* **Terminal is final.** A run, start or occurrence any answer showed terminal ends in that
  state (a terminate answered ``terminated`` stays terminated; a dispatched start keeps its
  run id).
* **Follow-through once per ended occurrence.** Every dispatched occurrence whose run ended
  has its follow-through; at most one notification and one event per (occurrence, kind);
  a regressed follow-through notified.
* **Webhooks at least once, stable id, same bytes.** Every delivery the store holds reached
  the receiver with a 2xx under its event id and is ``delivered``; every copy of one event
  has the same bytes, the event id of its header and a valid signature; the receiver got
  no event the store does not know.
* **Quotas never exceeded** in any sample, any ``429``'s count, or the final store.
* **Replays are identical.** Every decided answer under one idempotency key (single route
  or batch item) equals the first.
* **Overlap policies.** Runs of a ``skip`` or ``buffer_one`` schedule never overlap in
  time (each is created after the previous one ended); an ``allow_all`` schedule never
  skips for overlap.
* **Liveness after the quiet period.** Every operation decided, nothing left scheduled,
  dispatching, pending or running, every delivery delivered.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.chaos.record import BODIES, FAULTS, HISTORY, RECEIVER, SAMPLES, STORE, read_records

TERMINAL_RUN = {"completed", "failed", "canceled", "terminated", "timed_out"}
TERMINAL_START = {"dispatched", "failed", "canceled", "skipped"}
LIVE_OCCURRENCE = {"scheduled", "buffered", "dispatching", "dispatched"}
UNSETTLED_START = {"scheduled", "dispatching", "buffered"}
WORKER_FAULTS = {"kill_worker", "kill_serve", "pause_worker", "pause_serve", "kill_slot"}
STORE_FAULTS = {"pg_restart_fast", "pg_restart_immediate", "pg_terminate", "temporal_kill"}
FINISHED_BODY = {"end", "raised", "canceled"}


@dataclass(frozen=True)
class Violation:
    rule: str
    ids: dict[str, Any]
    detail: str

    def line(self) -> str:
        ids = " ".join(f"{k}={v}" for k, v in self.ids.items())
        return f"[{self.rule}] {ids}: {self.detail}"


@dataclass
class Report:
    violations: list[Violation] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, rule: str, detail: str, **ids: Any) -> None:
        self.violations.append(Violation(rule, ids, detail))

    def rules(self) -> Counter[str]:
        return Counter(v.rule for v in self.violations)

    def text(self, limit: int = 200) -> str:
        lines = [f"violations: {len(self.violations)}"]
        for rule, count in sorted(self.rules().items()):
            lines.append(f"  {rule}: {count}")
        lines += [v.line() for v in self.violations[:limit]]
        if len(self.violations) > limit:
            lines.append(f"... and {len(self.violations) - limit} more (report.json)")
        lines.append("counts:")
        lines += [f"  {k}: {json.dumps(v, sort_keys=True)}" for k, v in self.counts.items()]
        if self.notes:
            lines.append("notes:")
            lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "violations": [v.__dict__ for v in self.violations],
            "counts": self.counts,
            "notes": self.notes,
        }


def parse_instant(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def is_decided(status: int | None, body: Any) -> bool:
    """The answers punctual records under a key (OS-4): a retry must get them verbatim."""
    if status is None or not 200 <= status < 500 or status in (202, 429):
        return False
    error = body.get("error") if isinstance(body, dict) else None
    return not (status == 409 and isinstance(error, dict) and error.get("code") == "conflict")


# --- reading the run --------------------------------------------------------------------


@dataclass
class Operation:
    id: int
    kind: str
    tenant: str
    method: str
    path: str
    body: Any
    key: str | None
    record: dict[str, Any]
    answers: list[dict[str, Any]] = field(default_factory=list)
    ended: bool = False

    def decided(self) -> list[dict[str, Any]]:
        return [a for a in self.answers if is_decided(a["status"], a["body"])]

    def first_decided(self) -> dict[str, Any] | None:
        found = self.decided()
        return found[0] if found else None


@dataclass
class Run:
    directory: Path
    settings: dict[str, Any]
    operations: dict[int, Operation]
    bodies: list[dict[str, Any]]
    faults: list[dict[str, Any]]
    processes: list[dict[str, Any]]
    received: list[dict[str, Any]]
    samples: list[dict[str, Any]]
    store: dict[str, Any]


def load(directory: Path) -> Run:
    operations: dict[int, Operation] = {}
    for record in read_records(directory / HISTORY):
        kind = record.get("type")
        if kind == "op":
            operations[record["op"]] = Operation(
                record["op"],
                record["kind"],
                record["tenant"],
                record["method"],
                record["path"],
                record.get("body"),
                record.get("key"),
                record,
            )
        elif kind == "answer" and record["op"] in operations:
            operations[record["op"]].answers.append(record)
        elif kind == "end" and record["op"] in operations:
            operations[record["op"]].ended = True
    faults, processes = [], []
    ends: dict[int, float] = {}
    for record in read_records(directory / FAULTS):
        if record.get("type") == "fault":
            faults.append(record)
        elif record.get("type") == "fault_end":
            ends[record["id"]] = record["t"]
        elif record.get("type") == "process":
            processes.append(record)
    for fault in faults:
        fault["t_end"] = ends.get(fault["id"], fault["t"])
    settings_path = directory / "run.json"
    settings = json.loads(settings_path.read_text()) if settings_path.exists() else {}
    store_path = directory / STORE
    store = json.loads(store_path.read_text()) if store_path.exists() else {}
    return Run(
        directory,
        settings,
        operations,
        list(read_records(directory / BODIES)),
        faults,
        processes,
        list(read_records(directory / RECEIVER)),
        list(read_records(directory / SAMPLES)),
        store,
    )


# --- the checks -------------------------------------------------------------------------


class Checker:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.report = Report()
        tenant = run.settings.get("tenant", "chaos")
        self.tenant = tenant
        space = run.store.get("tenants", {}).get(tenant, {})
        self.starts: dict[str, dict[str, Any]] = {s["id"]: s for s in space.get("starts", [])}
        self.runs: dict[str, dict[str, Any]] = {r["id"]: r for r in space.get("runs", [])}
        self.schedules: dict[str, dict[str, Any]] = {s["id"]: s for s in space.get("schedules", [])}
        self.occurrences: dict[str, dict[str, Any]] = {}
        for items in space.get("occurrences", {}).values():
            for occurrence in items:
                self.occurrences[occurrence["id"]] = occurrence
        self.deliveries: list[dict[str, Any]] = [
            d for items in space.get("deliveries", {}).values() for d in items
        ]
        self.notifications: list[dict[str, Any]] = space.get("notifications", [])
        self.runs_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for run_view in self.runs.values():
            self.runs_of[str(run_view["origin"].get("id"))].append(run_view)
        self.bodies_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for body in run.bodies:
            self.bodies_of[body["run_id"]].append(body)

    def check(self) -> Report:
        if not self.run.store:
            self.report.add("no_store", "the final store was never read (store.json missing)")
        self.one_run_per_start()
        self.one_run_per_occurrence()
        self.bodies()
        self.acknowledged_cancels()
        self.terminal_is_final()
        self.follow_through()
        self.webhooks()
        self.quotas()
        self.replays()
        self.overlap()
        self.liveness()
        self.count()
        return self.report

    # --- exactly one run ---

    def accepted_creates(self) -> dict[str, tuple[int, str]]:
        """Start id -> (operation, key) of every create a client saw accepted (201)."""
        accepted: dict[str, tuple[int, str]] = {}
        for op in self.run.operations.values():
            if op.tenant != self.tenant:
                continue
            for tenant_key, status, body in answers_by_key(op):
                if (
                    status == 201
                    and isinstance(body, dict)
                    and str(body.get("id", "")).startswith("st_")
                ):
                    accepted.setdefault(body["id"], (op.id, tenant_key[1]))
        return accepted

    def one_run_per_start(self) -> None:
        accepted = self.accepted_creates()
        for start_id, (op_id, key) in accepted.items():
            if start_id not in self.starts:
                self.report.add(
                    "accepted_start_lost",
                    "accepted with 201, absent from the store",
                    start=start_id,
                    op=op_id,
                    key=key,
                )
        for start in self.starts.values():
            runs = self.runs_of.get(start["id"], [])
            dispatch = start.get("dispatch") or {}
            if start["state"] == "dispatched":
                if len(runs) != 1:
                    self.report.add(
                        "start_runs",
                        f"dispatched with {len(runs)} runs: {[r['id'] for r in runs]}",
                        start=start["id"],
                    )
                elif runs[0]["id"] != dispatch.get("run_id"):
                    self.report.add(
                        "start_runs",
                        f"its run is {runs[0]['id']}, not the preallocated "
                        f"{dispatch.get('run_id')}",
                        start=start["id"],
                    )
            elif runs:
                self.report.add(
                    "ended_start_has_run",
                    f"{start['state']} but has runs {[r['id'] for r in runs]}",
                    start=start["id"],
                )
            if start["id"] not in accepted and not self.created_by_undecided(start):
                self.report.add(
                    "start_never_accepted",
                    "in the store, but no client saw its create accepted",
                    start=start["id"],
                    business_request_id=start.get("business_request_id"),
                )
        run_origins = set(self.starts) | set(self.occurrences)
        for run_view in self.runs.values():
            if run_view["origin"].get("id") not in run_origins:
                self.report.add(
                    "orphan_run",
                    f"origin {run_view['origin']} is no start or occurrence",
                    run=run_view["id"],
                )

    def created_by_undecided(self, start: dict[str, Any]) -> bool:
        """Whether an operation that never got a decided answer may have created it."""
        tag = start.get("business_request_id")
        for op in self.run.operations.values():
            if op.tenant != self.tenant or op.kind not in ("create", "batch") or op.first_decided():
                continue
            bodies = op.body.get("items", []) if op.kind == "batch" else [op.body]
            if any(isinstance(b, dict) and b.get("business_request_id") == tag for b in bodies):
                return True
        return False

    def one_run_per_occurrence(self) -> None:
        accepted: dict[str, int] = {}
        for op in self.run.operations.values():
            first = op.first_decided()
            if op.tenant != self.tenant or first is None or not isinstance(first["body"], dict):
                continue
            if op.kind == "trigger" and first["status"] == 201:
                accepted[first["body"]["id"]] = op.id
            if op.kind == "backfill" and first["status"] == 200:
                for item in first["body"].get("items", []):
                    accepted[item["id"]] = op.id
        for occurrence_id, op_id in accepted.items():
            if occurrence_id not in self.occurrences:
                self.report.add(
                    "accepted_occurrence_lost",
                    "answered by a trigger or backfill, absent",
                    occurrence=occurrence_id,
                    op=op_id,
                )
        instants: dict[tuple[str, str], list[str]] = defaultdict(list)
        for occurrence in self.occurrences.values():
            if occurrence.get("range"):
                continue
            runs = self.runs_of.get(occurrence["id"], [])
            if occurrence["state"] in LIVE_OCCURRENCE:
                instants[(occurrence["schedule_id"], occurrence["occurrence_at"])].append(
                    occurrence["id"]
                )
            if occurrence["state"] == "dispatched":
                if len(runs) != 1 or runs[0]["id"] != occurrence.get("run_id"):
                    self.report.add(
                        "occurrence_runs",
                        f"dispatched with runs {[r['id'] for r in runs]}, preallocated "
                        f"{occurrence.get('run_id')}",
                        occurrence=occurrence["id"],
                        schedule=occurrence["schedule_id"],
                    )
            elif runs:
                self.report.add(
                    "ended_occurrence_has_run",
                    f"{occurrence['state']} ({occurrence.get('reason')}) but has runs "
                    f"{[r['id'] for r in runs]}",
                    occurrence=occurrence["id"],
                )
        for (schedule_id, at), ids in instants.items():
            if len(ids) > 1:
                self.report.add(
                    "duplicate_occurrence",
                    f"{len(ids)} live occurrences at {at}: {ids}",
                    schedule=schedule_id,
                )

    # --- bodies ---

    def hit(self, fault: dict[str, Any], body: dict[str, Any], until: float) -> bool:
        """Whether ``fault`` was under way while ``body`` executed (up to ``until``): a
        fault of the store counts until a lease after it ended (the worker may not have
        renewed in the meantime); a fault of a process only if it reached the body's."""
        lease = float(self.run.settings.get("lease_seconds", 4.0))
        if fault["kind"] in STORE_FAULTS:
            return bool(fault["t"] <= until and body["t"] - 1.0 <= fault["t_end"] + lease)
        return bool(
            fault["kind"] in WORKER_FAULTS
            and body["pid"] in (fault.get("pids") or [])
            and fault["t"] <= until
            and body["t"] - 1.0 <= fault["t_end"]
        )

    def explained(self, body: dict[str, Any], until: float) -> dict[str, Any] | None:
        """A fault the contract names that hit ``body``'s execution before ``until``."""
        return next((f for f in self.run.faults if self.hit(f, body, until)), None)

    def bodies(self) -> None:
        allowed = unexplained_unfinished = 0
        for run_id, records in self.bodies_of.items():
            run_view = self.runs.get(run_id)
            begins = sorted((r for r in records if r["event"] == "begin"), key=lambda r: r["t"])
            finishes = {r["nonce"]: r for r in records if r["event"] in FINISHED_BODY}
            if run_view is None:
                self.report.add(
                    "body_without_run",
                    f"{len(begins)} executions of a run the store does not have "
                    f"(origin {begins[0].get('origin_id') if begins else None})",
                    run=run_id,
                )
                continue
            attempts = Counter(b["attempt"] for b in begins)
            for attempt, times in attempts.items():
                if times > 1:
                    self.report.add(
                        "attempt_executed_twice",
                        f"attempt {attempt} began {times} times",
                        run=run_id,
                    )
                if not 1 <= attempt <= run_view["attempts"]:
                    self.report.add(
                        "execution_not_counted",
                        f"an execution of attempt {attempt}; the run counts {run_view['attempts']}",
                        run=run_id,
                    )
            if run_view["state"] == "completed":
                nonce = (run_view.get("result") or {}).get("nonce")
                source = finishes.get(nonce)
                if source is None or source["event"] != "end":
                    self.report.add(
                        "result_not_from_a_body",
                        f"the recorded result's execution {nonce} never returned",
                        run=run_id,
                    )
                elif source["attempt"] != run_view["attempts"]:
                    self.report.add(
                        "result_not_from_last_attempt",
                        f"result of attempt {source['attempt']}, the run counts "
                        f"{run_view['attempts']}",
                        run=run_id,
                    )
            stale = set()
            for earlier, later in itertools.pairwise(begins):
                superseded = max(b["attempt"] for b in begins if b["t"] <= earlier["t"])
                if later["attempt"] < superseded:
                    stale.add(later["nonce"])
                    self.report.add(
                        "stale_attempt_began",
                        f"attempt {later['attempt']} (pid {later['pid']}) began "
                        f"{later['t'] - earlier['t']:.3f} s after attempt {superseded} had: a "
                        "superseded claim's body executed",
                        run=run_id,
                    )
            by_attempt = sorted(begins, key=lambda b: (b["attempt"], b["t"]))
            for earlier, later in itertools.pairwise(by_attempt):
                finish = finishes.get(earlier["nonce"])
                fault = self.explained(earlier, later["t"])
                if finish is not None and fault is None:
                    self.report.add(
                        "run_twice",
                        f"attempt {earlier['attempt']} {finish['event']} (pid {earlier['pid']}), "
                        f"attempt {later['attempt']} executed again with no fault that explains it",
                        run=run_id,
                    )
                elif fault is not None:
                    allowed += 1
                else:
                    unexplained_unfinished += 1
            for body in begins:
                if not body.get("concurrent") or body["nonce"] in stale:
                    continue
                holders = [
                    b
                    for b in begins
                    if b["t"] < body["t"]
                    and b["nonce"] != body["nonce"]
                    and (finishes.get(b["nonce"], {}).get("t", float("inf")) > body["t"])
                ]
                if not any(self.frozen_or_killed(b, body["t"]) for b in holders):
                    self.report.add(
                        "concurrent_bodies",
                        f"attempt {body['attempt']} began while attempt(s) "
                        f"{[b['attempt'] for b in holders]} held the run",
                        run=run_id,
                    )
        self.report.counts["re_executions"] = {
            "after_a_fault": allowed,
            "unfinished_without_fault": unexplained_unfinished,
        }

    def frozen_or_killed(self, body: dict[str, Any], until: float) -> bool:
        return any(f["kind"] in WORKER_FAULTS and self.hit(f, body, until) for f in self.run.faults)

    # --- cancels, reschedules, terminal states ---

    def acknowledged_cancels(self) -> None:
        for op in self.run.operations.values():
            first = op.first_decided()
            if op.tenant != self.tenant or first is None or first["status"] != 200:
                continue
            if op.kind == "cancel_start":
                start_id = op.path.split("/")[-2]
                self.canceled_never_ran(start_id, op.id, "start")
            elif op.kind == "cancel_occurrence":
                self.canceled_never_ran(op.path.split("/")[-2], op.id, "occurrence")
        for start in self.starts.values():
            run_view = self.runs.get((start.get("dispatch") or {}).get("run_id", ""))
            if start["state"] != "dispatched" or run_view is None:
                continue
            due = parse_instant(start["start_at"])
            created = parse_instant(run_view["created_at"])
            if due and created and created < due:
                self.report.add(
                    "dispatched_early",
                    f"run created {run_view['created_at']}, before start_at {start['start_at']}",
                    start=start["id"],
                    run=run_view["id"],
                )
            for body in self.bodies_of.get(run_view["id"], []):
                if body["event"] == "begin" and due and body["t"] < due.timestamp() - 0.001:
                    self.report.add(
                        "executed_early",
                        f"a body began {due.timestamp() - body['t']:.3f} s before start_at",
                        start=start["id"],
                    )

    def canceled_never_ran(self, subject_id: str, op_id: int, kind: str) -> None:
        view = self.starts.get(subject_id) if kind == "start" else self.occurrences.get(subject_id)
        if view is None:
            self.report.add(
                "canceled_lost",
                f"a {kind} canceled with 200 is absent",
                **{kind: subject_id, "op": op_id},
            )
            return
        runs = self.runs_of.get(subject_id, [])
        executed = [b for b in self.run.bodies if b.get("origin_id") == subject_id]
        if view["state"] != "canceled" or runs or executed:
            self.report.add(
                "acknowledged_cancel_lost",
                f"canceled with 200, now {view['state']} with runs {[r['id'] for r in runs]} and "
                f"{len(executed)} body executions",
                **{kind: subject_id, "op": op_id},
            )

    def terminal_is_final(self) -> None:
        for op in self.run.operations.values():
            if op.tenant != self.tenant:
                continue
            for answer in op.answers:
                body = answer["body"]
                if answer["status"] != 200 or not isinstance(body, dict):
                    continue
                identity = str(body.get("id", ""))
                if identity.startswith("run_") and body.get("state") in TERMINAL_RUN:
                    final = self.runs.get(identity)
                    if (
                        final is None
                        or final["state"] != body["state"]
                        or final.get("result") != body.get("result")
                    ):
                        self.report.add(
                            "terminal_state_changed",
                            f"answered {body['state']}, ends {final and final['state']}",
                            run=identity,
                            op=op.id,
                        )
                if (
                    identity.startswith("st_")
                    and body.get("state") in TERMINAL_START
                    and op.kind != "replay"
                ):
                    final = self.starts.get(identity)
                    seen_run = (body.get("dispatch") or {}).get("run_id")
                    if (
                        final is None
                        or final["state"] != body["state"]
                        or (seen_run and (final.get("dispatch") or {}).get("run_id") != seen_run)
                    ):
                        self.report.add(
                            "terminal_state_changed",
                            f"answered {body['state']} (run {seen_run}), ends "
                            f"{final and final['state']}",
                            start=identity,
                            op=op.id,
                        )

    # --- follow-through and webhooks ---

    def follow_through(self) -> None:
        for occurrence in self.occurrences.values():
            run_view = self.runs.get(occurrence.get("run_id") or "")
            if (
                occurrence["state"] == "dispatched"
                and run_view
                and run_view["state"] in TERMINAL_RUN
                and occurrence.get("follow_through") is None
            ):
                self.report.add(
                    "follow_through_missing",
                    f"its run ended {run_view['state']}",
                    occurrence=occurrence["id"],
                )
        notified: Counter[tuple[str, str]] = Counter(
            (str(n.get("occurrence_id")), n["kind"])
            for n in self.notifications
            if n.get("occurrence_id")
        )
        for (occurrence_id, kind), count in notified.items():
            if count > 1:
                self.report.add(
                    "follow_through_repeated",
                    f"{count} {kind} notifications",
                    occurrence=occurrence_id,
                )
        for occurrence in self.occurrences.values():
            follow = occurrence.get("follow_through") or {}
            if (
                follow.get("status") == "regressed"
                and not notified[(occurrence["id"], "regression")]
            ):
                self.report.add(
                    "regression_not_notified",
                    "follow-through regressed, no notification",
                    occurrence=occurrence["id"],
                )
        events: dict[tuple[str, str], set[str]] = defaultdict(set)
        for copy in self.run.received:
            payload = parse_json(copy.get("body"))
            if payload is None or not copy.get("event_id"):
                continue
            about = (payload.get("data") or {}).get("occurrence_id")
            if about:
                events[(str(about), str(payload.get("event")))].add(copy["event_id"])
        for (occurrence_id, kind), ids in events.items():
            if len(ids) > 1:
                self.report.add(
                    "follow_through_repeated",
                    f"{len(ids)} distinct {kind} events: {sorted(ids)}",
                    occurrence=occurrence_id,
                )

    def webhooks(self) -> None:
        secret = self.run.settings.get("webhook_secret", "")
        copies: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for copy in self.run.received:
            copies[str(copy.get("event_id"))].append(copy)
        known = {d["event_id"] for d in self.deliveries}
        per_event = Counter(d["event_id"] for d in self.deliveries)
        for event_id, count in per_event.items():
            if count > 1:
                self.report.add(
                    "delivery_repeated", f"{count} deliveries of one event", event=event_id
                )
        for delivery in self.deliveries:
            got = copies.get(delivery["event_id"], [])
            if delivery["status"] != "delivered":
                self.report.add(
                    "delivery_not_delivered",
                    f"{delivery['status']} after {delivery['attempts']} attempts "
                    f"({delivery.get('last_error')})",
                    event=delivery["event_id"],
                    delivery=delivery["id"],
                )
            if not any(copy["action"] == "200" for copy in got):
                self.report.add(
                    "event_never_received",
                    f"{delivery['status']}, {len(got)} copies received, none answered 200",
                    event=delivery["event_id"],
                    delivery=delivery["id"],
                )
        for event_id, same in copies.items():
            if event_id not in known:
                self.report.add(
                    "event_unknown",
                    f"{len(same)} copies of an event the store does not have",
                    event=event_id,
                )
            if len({copy["sha256"] for copy in same}) > 1:
                self.report.add(
                    "event_bytes_differ", f"{len(same)} copies, bodies differ", event=event_id
                )
            for copy in same:
                payload = parse_json(copy.get("body"))
                if payload is None or payload.get("event_id") != event_id:
                    self.report.add(
                        "event_id_mismatch",
                        "the body's event_id is not its header's",
                        event=event_id,
                    )
                expected = (
                    "sha256="
                    + hmac.new(secret.encode(), copy["body"].encode(), hashlib.sha256).hexdigest()
                )
                if secret and not hmac.compare_digest(expected, str(copy.get("signature"))):
                    self.report.add(
                        "event_badly_signed",
                        "the signature does not match the body",
                        event=event_id,
                    )

    # --- quotas, replays, overlap ---

    def quotas(self) -> None:
        limit = self.run.settings.get("quota_limit")
        if limit is None:
            return
        worst = 0
        for sample in self.run.samples:
            worst = max(worst, sample["pending"])
            if sample["pending"] > limit:
                self.report.add(
                    "quota_exceeded", f"{sample['pending']} pending, limit {limit}", t=sample["t"]
                )
        for op in self.run.operations.values():
            for answer in op.answers:
                details = (
                    ((answer["body"] or {}).get("error") or {}).get("details")
                    if isinstance(answer["body"], dict)
                    else None
                )
                if (
                    answer["status"] == 429
                    and isinstance(details, dict)
                    and details.get("count", 0) > details.get("limit", 0)
                ):
                    self.report.add("quota_exceeded", f"a 429 counted {details}", op=op.id)
        final = [
            s
            for s in self.run.store.get("tenants", {})
            .get(self.run.settings.get("quota_tenant", "quota"), {})
            .get("starts", [])
            if s["state"] in ("scheduled", "dispatching")
        ]
        if len(final) > limit:
            self.report.add(
                "quota_exceeded", f"{len(final)} pending in the final store, limit {limit}"
            )
        self.report.counts["quota"] = {
            "limit": limit,
            "most_pending_sampled": worst,
            "samples": len(self.run.samples),
        }

    def replays(self) -> None:
        answers: dict[tuple[str, str], list[tuple[int, int | None, Any]]] = defaultdict(list)
        for op in sorted(self.run.operations.values(), key=lambda o: o.id):
            for tenant_key, status, body in answers_by_key(op):
                if is_decided(status, body):
                    answers[tenant_key].append((op.id, status, body))
        for (tenant, key), seen in answers.items():
            first = seen[0]
            for other in seen[1:]:
                if (other[1], other[2]) != (first[1], first[2]):
                    self.report.add(
                        "replay_differs",
                        f"first {first[1]} (op {first[0]}), then {other[1]} (op {other[0]}): "
                        f"{short(first[2])} vs {short(other[2])}",
                        tenant=tenant,
                        key=key,
                    )
                    break

    def overlap(self) -> None:
        for schedule in self.schedules.values():
            runs = sorted(
                (r for r in self.runs.values() if r["origin"].get("schedule_id") == schedule["id"]),
                key=lambda r: r["created_at"],
            )
            if schedule["overlap"] in ("skip", "buffer_one"):
                for earlier, later in itertools.pairwise(runs):
                    ended = parse_instant(earlier.get("ended_at"))
                    created = parse_instant(later["created_at"])
                    if ended is None or created is None or created < ended:
                        self.report.add(
                            "overlap_violated",
                            f"{schedule['overlap']}: run {later['id']} created "
                            f"{later['created_at']} while "
                            f"{earlier['id']} was unfinished (ended {earlier.get('ended_at')})",
                            schedule=schedule["id"],
                        )
            else:
                skipped = [
                    o["id"]
                    for o in self.occurrences.values()
                    if o["schedule_id"] == schedule["id"]
                    and o["state"] == "skipped"
                    and o.get("reason") == "overlap"
                ]
                if skipped:
                    self.report.add(
                        "overlap_violated",
                        f"allow_all skipped {len(skipped)} for overlap: {skipped[:5]}",
                        schedule=schedule["id"],
                    )

    # --- liveness ---

    def liveness(self) -> None:
        for op in self.run.operations.values():
            if not op.ended and op.method != "GET":
                self.report.add(
                    "never_decided",
                    f"{op.kind} {op.method} {op.path}: {len(op.answers)} attempts, last "
                    f"{op.answers[-1]['status'] if op.answers else None}",
                    op=op.id,
                    key=op.key,
                )
        for start in self.starts.values():
            if start["state"] in UNSETTLED_START:
                self.report.add(
                    "not_settled",
                    f"start still {start['state']}, due {start['start_at']}",
                    start=start["id"],
                )
        for occurrence in self.occurrences.values():
            if occurrence["state"] in UNSETTLED_START:
                self.report.add(
                    "not_settled",
                    f"occurrence still {occurrence['state']}",
                    occurrence=occurrence["id"],
                )
        for run_view in self.runs.values():
            if run_view["state"] not in TERMINAL_RUN:
                self.report.add("not_settled", f"run still {run_view['state']}", run=run_view["id"])

    # --- counts ---

    def count(self) -> None:
        counts = self.report.counts
        ops = [op for op in self.run.operations.values()]
        counts["operations"] = len(ops)
        counts["operations_by_kind"] = dict(Counter(op.kind for op in ops))
        counts["requests"] = sum(len(op.answers) for op in ops)
        counts["answers"] = dict(
            Counter(
                str(a["status"]) if a["status"] is not None else a.get("error") or "none"
                for op in ops
                for a in op.answers
            )
        )
        counts["faults"] = dict(Counter(f["kind"] for f in self.run.faults if not f.get("missed")))
        counts["unexpected_exits"] = sum(1 for p in self.run.processes if p.get("event") == "exit")
        counts["starts"] = dict(Counter(s["state"] for s in self.starts.values()))
        counts["occurrences"] = dict(Counter(o["state"] for o in self.occurrences.values()))
        counts["runs"] = dict(Counter(r["state"] for r in self.runs.values()))
        counts["bodies"] = dict(Counter(b["event"] for b in self.run.bodies))
        counts["deliveries"] = dict(Counter(d["status"] for d in self.deliveries))
        counts["webhook_requests"] = dict(Counter(c["action"] for c in self.run.received))


def answers_by_key(op: Operation) -> Iterable[tuple[tuple[str, str], int | None, Any]]:
    """Every answer ``op`` got, per (tenant, idempotency key): the request's own, or each
    item of a batch under the item's key."""
    if op.kind == "batch" or (op.kind == "replay" and op.path.endswith("/scheduled-starts/batch")):
        items = op.body.get("items", []) if isinstance(op.body, dict) else []
        for answer in op.answers:
            results = answer["body"].get("items") if isinstance(answer["body"], dict) else None
            if answer["status"] != 200 or not isinstance(results, list):
                continue
            for item, result in zip(items, results, strict=False):
                yield (op.tenant, item["idempotency_key"]), result.get("status"), result.get("body")
    elif op.key is not None:
        for answer in op.answers:
            yield (op.tenant, op.key), answer["status"], answer["body"]


def parse_json(text: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "…"


def check(directory: Path) -> Report:
    return Checker(load(directory)).check()
