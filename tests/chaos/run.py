"""One chaos run from start to verdict: deploy, load, faults, quiet period, store, checker.

1. **Deploy** the variant (``tests.chaos.deployment``) and the webhook receiver; create the
   webhook and one-second schedules under each overlap policy through the API.
2. **Load and faults** for the run's length: load threads and a quota thread
   (``tests.chaos.load``), the fault injector and the supervisor (``tests.chaos.faults``),
   a sampler of the quota tenant's pending starts.
3. **Quiet period**: the load stops, every fault under way ends (paused processes go on,
   killed ones are started again, the database and the receiver come back), the receiver
   answers 200; every undecided operation is sent again until decided; every schedule is
   paused; then the harness waits until nothing is left to do (bounded).
4. **The store** is read through the API (``store.json``), the deployment is stopped and
   the checker (``tests.chaos.checker``) judges the run; ``report.txt`` and
   ``report.json`` hold its verdict.

The seed fixes every choice the harness makes (each load thread's scenarios and their
parameters, every fault, its target and its length, every answer of the receiver); the
operating system's interleaving is not the seed's to fix, so a rerun of a failing seed
replays the same plan, not the same nanoseconds.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from tests.chaos.checker import Report, check
from tests.chaos.deployment import (
    LAYOUTS,
    LEASE_SECONDS,
    QUOTA_LIMIT,
    QUOTA_TENANT,
    SHORT_LAYOUTS,
    TENANT,
    Deployment,
    Layout,
)
from tests.chaos.faults import LONG_PACE, SHORT_PACE, Injector, Pace, Supervisor
from tests.chaos.load import Client, LoadThread, QuotaThread, Shared, admin, finish_unfinished
from tests.chaos.receiver import ChaosReceiver
from tests.chaos.record import FAULTS, HISTORY, RECEIVER, SAMPLES, STORE, Journal

WEBHOOK_SECRET = "chaos-webhook-secret-" + "0123456789abcdef" * 2
REGRESSION = {"metrics": [{"path": "metrics.score", "better": "higher", "tolerance": 0.0}]}
SCHEDULES = [
    {
        "name": "every-second-skip",
        "overlap": "skip",
        "missed": "skip",
        "seconds": 1.5,
        "regression": REGRESSION,
    },
    {
        "name": "every-second-buffer-one",
        "overlap": "buffer_one",
        "missed": "catch_up",
        "seconds": 1.5,
    },
    {
        "name": "every-second-allow-all",
        "overlap": "allow_all",
        "missed": "catch_up",
        "seconds": 0.8,
        "regression": REGRESSION,
    },
]
FINISH_SECONDS = 60.0
"""How long an operation still undecided when the load stops is sent again, every process
up, before the checker reports it as never decided."""
PAGE = 100


@dataclass(frozen=True)
class Plan:
    variant: str
    seed: int
    seconds: float
    """How long the load and the faults last."""
    layout: Layout
    pace: Pace
    load_threads: int
    quota_threads: int
    quiet_seconds: float
    """The longest the quiet period waits for everything to settle."""
    refuse: float = 0.15
    """The receiver's share of requests answered 500 ..."""
    hang: float = 0.04
    """... and held unanswered past the delivery timeout."""
    backfill_span: tuple[float, float] = (4.0, 20.0)
    short: bool = False
    """The short run of the test suite (``--short`` reruns exactly it)."""

    def command(self) -> str:
        words = ["python", "-m", "tests.chaos"]
        words += ["--short"] if self.short else ["--minutes", f"{self.seconds / 60:g}"]
        words += ["--seed", str(self.seed), "--variant", self.variant]
        return shlex.join(words)


def short_plan(variant: str, seed: int) -> Plan:
    """The run ``make test`` makes: well under two minutes on a loaded two-core machine."""
    return Plan(
        variant=variant,
        seed=seed,
        seconds=25.0,
        layout=SHORT_LAYOUTS[variant],
        pace=SHORT_PACE,
        load_threads=2,
        quota_threads=1,
        quiet_seconds=60.0,
        backfill_span=(1.0, 4.0),
        short=True,
    )


def long_plan(variant: str, seed: int, minutes: float) -> Plan:
    return Plan(
        variant=variant,
        seed=seed,
        seconds=minutes * 60.0,
        layout=LAYOUTS[variant],
        pace=LONG_PACE if minutes >= 5 else SHORT_PACE,
        backfill_span=(2.0, 8.0),
        load_threads=3,
        quota_threads=1,
        quiet_seconds=420.0 if minutes >= 5 else 90.0,
    )


class Sampler(threading.Thread):
    """The quota tenant's pending starts, counted in the store every quarter second."""

    def __init__(self, deployment: Deployment, journal: Journal) -> None:
        super().__init__(name="sampler", daemon=True)
        self.deployment = deployment
        self.journal = journal
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.25):
            pending = self.deployment.pending_of(QUOTA_TENANT)
            if pending is not None:
                self.journal.write({"t": time.time(), "tenant": QUOTA_TENANT, "pending": pending})


class Reader:
    """Reads through the API for the quiet period and the final store, retried on
    transport errors and 5xx (unrecorded: reads change nothing)."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.http = httpx.Client(timeout=httpx.Timeout(20.0, connect=3.0))

    def get(self, tenant: str, suffix: str, **params: Any) -> Any:
        deadline = time.monotonic() + 120
        while True:
            for base in self.deployment.api_urls():
                with contextlib.suppress(httpx.HTTPError):
                    response = self.http.get(
                        f"{base}/v1/tenants/{tenant}{suffix}",
                        params=params,
                        headers={"Authorization": f"Bearer {self.deployment.tokens[tenant]}"},
                    )
                    if response.status_code == 200:
                        return response.json()
                    if response.status_code < 500:
                        raise AssertionError(
                            f"GET {suffix}: {response.status_code} {response.text[:500]}"
                        )
            if time.monotonic() > deadline:
                raise AssertionError(f"GET {suffix}: no API answered for 120 s")
            time.sleep(0.5)

    def items(self, tenant: str, suffix: str, **params: Any) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            query = {"limit": PAGE, **params}
            if cursor is not None:
                query["cursor"] = cursor
            page = self.get(tenant, suffix, **query)
            found += page["items"]
            cursor = page["next_cursor"]
            if cursor is None:
                return found

    def none_left(self, tenant: str, suffix: str, state: str) -> bool:
        return not self.get(tenant, suffix, state=state, limit=1)["items"]

    def close(self) -> None:
        self.http.close()


def read_store(reader: Reader, schedule_ids: list[str], webhook_ids: list[str]) -> dict[str, Any]:
    chaos: dict[str, Any] = {
        "starts": reader.items(TENANT, "/scheduled-starts"),
        "runs": reader.items(TENANT, "/runs"),
        "schedules": [reader.get(TENANT, f"/schedules/{s}") for s in schedule_ids],
        "occurrences": {
            s: reader.items(TENANT, f"/schedules/{s}/occurrences") for s in schedule_ids
        },
        "deliveries": {w: reader.items(TENANT, f"/webhooks/{w}/deliveries") for w in webhook_ids},
        "notifications": reader.items(TENANT, "/notifications"),
    }
    quota = {
        "starts": reader.items(QUOTA_TENANT, "/scheduled-starts"),
        "runs": reader.items(QUOTA_TENANT, "/runs"),
    }
    return {"tenants": {TENANT: chaos, QUOTA_TENANT: quota}, "read_at": time.time()}


def unsettled(store: dict[str, Any]) -> list[str]:
    """What is still to happen in a store read (empty: settled)."""
    chaos = store["tenants"][TENANT]
    left = [
        f"start {s['id']} {s['state']}"
        for s in chaos["starts"]
        if s["state"] in ("scheduled", "dispatching")
    ]
    left += [
        f"run {r['id']} {r['state']}" for r in chaos["runs"] if r["state"] in ("pending", "running")
    ]
    runs = {r["id"]: r for r in chaos["runs"]}
    for items in chaos["occurrences"].values():
        for o in items:
            if o["state"] in ("scheduled", "buffered", "dispatching"):
                left.append(f"occurrence {o['id']} {o['state']}")
            run = runs.get(o.get("run_id") or "")
            if (
                o["state"] == "dispatched"
                and run
                and run["state"] not in ("pending", "running")
                and o["follow_through"] is None
            ):
                left.append(f"occurrence {o['id']} follow-through")
    for items in chaos["deliveries"].values():
        left += [f"delivery {d['id']} {d['status']}" for d in items if d["status"] == "pending"]
    return left


def next_delivery_attempt(store: dict[str, Any]) -> float | None:
    """When the last pending delivery is tried next (epoch seconds), if any is pending."""
    times = [
        datetime.fromisoformat(d["next_attempt_at"].replace("Z", "+00:00")).timestamp()
        for items in store["tenants"][TENANT]["deliveries"].values()
        for d in items
        if d["status"] == "pending" and d.get("next_attempt_at")
    ]
    return max(times) if times else None


def setup(client: Client, receiver: ChaosReceiver, shared: Shared) -> None:
    """The webhook and the one-second schedules, through the API like any client."""
    hook = client.send(
        "setup", "POST", "/webhooks", {"url": receiver.url(), "secret": WEBHOOK_SECRET}
    )
    assert hook.status == 201, f"the webhook was refused: {hook.status} {hook.answer}"
    shared.webhooks.append(hook.answer["id"])
    for spec in SCHEDULES:
        body: dict[str, Any] = {
            "name": spec["name"],
            "workflow": "chaos-body",
            "input": {"tag": spec["name"], "seconds": spec["seconds"]},
            "spec": {"interval_ms": 1000},
            "overlap": spec["overlap"],
            "missed": spec["missed"],
            "workload_class": "standard",
        }
        if "regression" in spec:
            body["regression"] = spec["regression"]
        made = client.send("setup", "POST", "/schedules", body)
        assert made.status == 201, (
            f"schedule {spec['name']} was refused: {made.status} {made.answer}"
        )
        shared.schedules.append(made.answer["id"])


def pause_schedules(client: Client, reader: Reader, schedule_ids: list[str]) -> None:
    """Stop generation (RS-6) so the run can settle; occurrences already made still run."""
    for schedule_id in schedule_ids:
        for _ in range(10):
            current = reader.get(TENANT, f"/schedules/{schedule_id}")
            if not current["enabled"]:
                break
            op = client.send(
                "pause", "POST", f"/schedules/{schedule_id}/pause", {"version": current["version"]}
            )
            if op.status == 200:
                break


def settle(
    reader: Reader,
    schedule_ids: list[str],
    webhook_ids: list[str],
    seconds: float,
    journal: Journal,
) -> dict[str, Any]:
    """Wait (bounded) until the store has nothing left to do; the last store read. What is
    left at each look goes to ``quiet.jsonl``. Deliveries that a long receiver outage sent
    into a long backoff are waited for until their next attempt is due (and a minute), up
    to three times ``seconds``."""
    began = time.monotonic()
    deadline = began + seconds
    while True:
        left = [
            f"{what} {state}"
            for what, state in (
                ("/scheduled-starts", "scheduled"),
                ("/scheduled-starts", "dispatching"),
                ("/runs", "pending"),
                ("/runs", "running"),
            )
            if not reader.none_left(TENANT, what, state)
        ]
        if not left or time.monotonic() >= deadline:
            store = read_store(reader, schedule_ids, webhook_ids)
            left = unsettled(store)
            store["unsettled"] = left
            retry_at = next_delivery_attempt(store)
            if left and retry_at is not None and all(x.startswith("delivery ") for x in left):
                wait = retry_at - time.time() + 60.0
                deadline = max(deadline, min(time.monotonic() + wait, began + 3 * seconds))
            if not left or time.monotonic() >= deadline:
                journal.write({"t": time.time(), "settled": not left, "left": left[:50]})
                return store
        journal.write({"t": time.time(), "left": left[:50]})
        only_deliveries = bool(left) and all(x.startswith("delivery ") for x in left)
        time.sleep(10.0 if only_deliveries else 1.0)  # a backoff is seconds to minutes


def execute(plan: Plan, directory: Path, log: Any = print) -> Report:
    """Make the whole run in ``directory``; the checker's report."""
    directory.mkdir(parents=True, exist_ok=True)
    settings = {
        **asdict(plan),
        "command": plan.command(),
        "tenant": TENANT,
        "quota_tenant": QUOTA_TENANT,
        "quota_limit": QUOTA_LIMIT,
        "lease_seconds": LEASE_SECONDS,
        "webhook_secret": WEBHOOK_SECRET,
        "started": time.time(),
    }
    (directory / "run.json").write_text(json.dumps(settings, indent=2, default=str))
    log(
        f"chaos run: variant={plan.variant} seed={plan.seed} seconds={plan.seconds:g} "
        f"in {directory}"
    )
    log(f"rerun with: {plan.command()}")
    history = Journal(directory / HISTORY)
    faults = Journal(directory / FAULTS)
    samples = Journal(directory / SAMPLES)
    quiet = Journal(directory / "quiet.jsonl")
    receiver = ChaosReceiver(directory / RECEIVER, plan.seed, plan.refuse, plan.hang)
    receiver.up()
    deployment = Deployment(plan.variant, directory, plan.layout)
    stopping = threading.Event()
    injector: Injector | None = None
    supervisor: Supervisor | None = None
    sampler: Sampler | None = None
    reader: Reader | None = None
    timings: dict[str, float] = {}
    began = time.monotonic()
    try:
        deployment.start()
        timings["deployed"] = time.monotonic() - began
        shared = Shared(history, deployment.api_urls, deployment.tokens, stopping)
        shared.backfill_span = plan.backfill_span
        reader = Reader(deployment)
        with admin(shared, TENANT, "setup", plan.seed) as client:
            setup(client, receiver, shared)
        injector = Injector(deployment, receiver, faults, plan.seed, plan.pace)
        supervisor = Supervisor(deployment, injector, faults)
        sampler = Sampler(deployment, samples)
        threads: list[LoadThread | QuotaThread] = [
            LoadThread(shared, TENANT, plan.seed, n) for n in range(1, plan.load_threads + 1)
        ]
        threads += [
            QuotaThread(shared, QUOTA_TENANT, plan.seed, n)
            for n in range(1, plan.quota_threads + 1)
        ]
        sampler.start()
        for thread in threads:
            thread.start()
        injector.start()
        supervisor.start()
        stopping.wait(plan.seconds)
        stopping.set()
        for thread in threads:
            thread.join(60)
        timings["load_stopped"] = time.monotonic() - began
        injector.stop()
        receiver.steady()
        for member in deployment.members:
            with contextlib.suppress(AssertionError):
                if member.managed.alive():
                    deployment.wait_ready(member)
        timings["faults_over"] = time.monotonic() - began
        left = finish_unfinished(shared, FINISH_SECONDS)
        failures = [t.failure for t in threads if t.failure is not None]
        if failures:
            log(f"load threads failed: {failures!r}")
        with admin(shared, TENANT, "quiet", plan.seed) as client:
            pause_schedules(client, reader, shared.schedules)
        store = settle(reader, shared.schedules, shared.webhooks, plan.quiet_seconds, quiet)
        timings["settled"] = time.monotonic() - began
        store["undecided_after_quiet"] = [op.id for op in left]
        store["load_failures"] = [repr(f) for f in failures]
        store["fault_errors"] = injector.errors
        (directory / STORE).write_text(json.dumps(store))
    except BaseException:
        with contextlib.suppress(Exception):
            log(deployment.describe()[-20000:])
        raise
    finally:
        stopping.set()
        if supervisor is not None:
            supervisor.stop()
        if injector is not None:
            injector.stop()
        if sampler is not None:
            sampler.stopping.set()
            sampler.join(5)
        if reader is not None:
            reader.close()
        deployment.close()
        receiver.close()
        for journal in (history, faults, samples, quiet):
            journal.close()
    report = check(directory)
    timings["checked"] = time.monotonic() - began
    report.counts["seconds"] = {k: round(v, 1) for k, v in timings.items()}
    if store.get("load_failures"):
        report.add("harness_failed", f"load threads failed: {store['load_failures']}")
    if store.get("fault_errors"):
        report.notes.append(f"faults that could not be carried out: {store['fault_errors']}")
    if store.get("unsettled"):
        report.notes.append(f"not settled after the quiet period: {store['unsettled'][:20]}")
    (directory / "report.json").write_text(json.dumps(report.as_json(), indent=2, default=str))
    (directory / "report.txt").write_text(report.text() + "\n")
    log(report.text(limit=50))
    log(f"seed {plan.seed}; rerun with: {plan.command()}")
    return report
