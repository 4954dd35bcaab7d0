"""The client load of a chaos run: real HTTP clients against every API process.

Each load thread plays scenarios chosen by its own ``random.Random`` (seeded from the
run's seed and the thread's number): creates single and batched, cancels and reschedules
that race dispatch, run cancels and terminates, triggers, backfills, occurrence cancels,
webhook tests and deliberate replays. A quota thread fills a tenant with a small pending
limit and cancels from it.

Every request is an *operation* recorded in ``history.jsonl`` before it is sent (``op``),
with each attempt's answer (``answer``) and its end (``end``). An ambiguous answer — no
answer at all, a 5xx, a ``202 in_progress``, an unrecorded ``409 conflict`` — is retried
with the same ``Idempotency-Key`` and the same body, as docs/api.md tells clients to;
never recomputed. An operation still undecided when the load stops is finished in the
quiet period, when every process is up again.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.chaos.record import Journal

REQUEST_SECONDS = 8.0
"""A request's own timeout: longer than the bounded API wait (2 s), so a live API
answers, and a paused one is left for another."""
CONNECT_SECONDS = 2.0
OP_SECONDS = 30.0
"""How long an operation is retried during the load; the rest waits for the quiet period."""
IN_PROGRESS = {"status": "in_progress"}


def instant(at: datetime) -> str:
    """RFC 3339 in UTC with milliseconds, as the API writes instants."""
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def in_seconds(seconds: float) -> str:
    return instant(datetime.now(UTC) + timedelta(seconds=seconds))


def error_code(body: Any) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
        return code if isinstance(code, str) else None
    return None


def undecided(status: int | None, body: Any) -> bool:
    """An answer after which the client does not know whether punctual acted (or a
    refusal that is not recorded against the key): retry the same request."""
    if status is None or status >= 500:
        return True
    if status == 202:
        return bool(body == IN_PROGRESS)
    if status == 409:
        return error_code(body) == "conflict"
    return status == 429


@dataclass
class Op:
    """One logical request and what it has been answered so far."""

    id: int
    kind: str
    tenant: str
    method: str
    path: str
    body: Any
    key: str | None
    status: int | None = None
    answer: Any = None
    attempts: int = 0
    decided: bool = False

    def code(self) -> str | None:
        return error_code(self.answer)


@dataclass
class Shared:
    """What the load threads share: the record, ids, the stop signal, what exists."""

    history: Journal
    urls: Callable[[], list[str]]
    tokens: dict[str, str]
    stopping: threading.Event
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    lock: threading.Lock = field(default_factory=threading.Lock)
    unfinished: list[tuple[Client, Op]] = field(default_factory=list)
    schedules: list[str] = field(default_factory=list)
    webhooks: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    """Run ids the clients have seen, for reads."""
    decided: list[Op] = field(default_factory=list)
    """Decided operations with a key, for deliberate replays."""
    backfill_span: tuple[float, float] = (4.0, 20.0)
    """How many seconds of the past a backfill covers: its occurrences dispatch one after
    another, so this bounds how long they keep the quiet period waiting."""


class Client:
    """Requests as one tenant's admin to a random live API process, every one recorded."""

    def __init__(self, shared: Shared, tenant: str, rng: random.Random, name: str) -> None:
        self.shared = shared
        self.tenant = tenant
        self.rng = rng
        self.name = name
        self.http = httpx.Client(timeout=httpx.Timeout(REQUEST_SECONDS, connect=CONNECT_SECONDS))
        self._keys = itertools.count(1)

    def close(self) -> None:
        self.http.close()

    def new_key(self) -> str:
        return f"{self.name}-{next(self._keys)}-{self.rng.getrandbits(32):08x}"

    def path(self, suffix: str) -> str:
        return f"/v1/tenants/{self.tenant}{suffix}"

    # --- one operation ----------------------------------------------------------------

    def begin(
        self, kind: str, method: str, suffix: str, body: Any, key: str | None, **extra: Any
    ) -> Op:
        op = Op(next(self.shared.ids), kind, self.tenant, method, self.path(suffix), body, key)
        self.shared.history.write(
            {
                "type": "op",
                "op": op.id,
                "kind": kind,
                "tenant": self.tenant,
                "method": method,
                "path": op.path,
                "body": body,
                "key": key,
                "client": self.name,
                "t": time.time(),
                **extra,
            }
        )
        return op

    def attempt(self, op: Op) -> None:
        urls = self.shared.urls()
        base = self.rng.choice(urls)
        headers = {"Authorization": f"Bearer {self.shared.tokens[self.tenant]}"}
        if op.key is not None:
            headers["Idempotency-Key"] = op.key
        op.attempts += 1
        started = time.time()
        status: int | None = None
        answer: Any = None
        problem: str | None = None
        try:
            response = self.http.request(
                op.method,
                base + op.path,
                headers=headers,
                json=op.body if op.body is not None else None,
            )
            status = response.status_code
            try:
                answer = response.json() if response.content else None
            except ValueError:
                answer = {"unparsed": response.text[:2000]}
        except httpx.HTTPError as exc:
            problem = type(exc).__name__
        op.status, op.answer = status, answer
        self.shared.history.write(
            {
                "type": "answer",
                "op": op.id,
                "n": op.attempts,
                "api": base,
                "status": status,
                "body": answer,
                "error": problem,
                "t0": started,
                "t1": time.time(),
            }
        )

    def settle(self, op: Op, seconds: float, *, quiet: bool = False) -> Op:
        """Send ``op`` until it is decided or ``seconds`` pass (then it is unfinished);
        during the load, also until the load stops (``quiet``: the quiet period's retries
        go on while the load is stopped)."""
        deadline = time.monotonic() + seconds
        delay = 0.1
        while True:
            self.attempt(op)
            if not self.undecided(op):
                self.end(op)
                return op
            if time.monotonic() >= deadline or (self.shared.stopping.is_set() and not quiet):
                return op
            time.sleep(delay * (0.5 + self.rng.random()))
            delay = min(delay * 2, 2.0)

    def undecided(self, op: Op) -> bool:
        if op.status == 429:
            return False  # the load gives up on a full quota: a refusal, decided for it
        return undecided(op.status, op.answer)

    def end(self, op: Op) -> None:
        op.decided = True
        self.shared.history.write(
            {"type": "end", "op": op.id, "status": op.status, "t": time.time()}
        )
        # A webhook test's 202 queues one more event each time: nothing to replay.
        if op.key is not None and op.status != 429 and op.kind != "webhook_test":
            with self.shared.lock:
                self.shared.decided.append(op)

    def send(
        self,
        kind: str,
        method: str,
        suffix: str,
        body: Any = None,
        *,
        keyed: bool = True,
        **extra: Any,
    ) -> Op:
        key = self.new_key() if keyed and method != "GET" else None
        op = self.begin(kind, method, suffix, body, key, **extra)
        self.settle(op, OP_SECONDS)
        if not op.decided:
            with self.shared.lock:
                self.shared.unfinished.append((self, op))
        return op

    def get(self, suffix: str, kind: str = "read", **extra: Any) -> Op:
        """A read: retried like a mutation, but given up (and ended) after a while, as a
        read changes nothing and a scenario that cannot read moves on."""
        op = self.begin(kind, "GET", suffix, None, None, **extra)
        self.settle(op, OP_SECONDS / 2)
        if not op.decided:
            self.end(op)
        return op


# --- scenarios ------------------------------------------------------------------------


def body_input(
    rng: random.Random, tag: str, *, seconds: tuple[float, float] = (0.1, 1.2), hang: bool = False
) -> dict[str, Any]:
    value: dict[str, Any] = {"tag": tag, "seconds": round(rng.uniform(*seconds), 2)}
    if hang:
        value["hang"] = True
    elif rng.random() < 0.08:
        value["fail"] = True
    return value


def start_body(rng: random.Random, tag: str, due_in: float, **input_options: Any) -> dict[str, Any]:
    return {
        "workflow": "chaos-body",
        "input": body_input(rng, tag, **input_options),
        "business_request_id": tag,
        "start_at": in_seconds(due_in),
        "workload_class": "standard",
    }


class LoadThread(threading.Thread):
    """Plays scenarios until the load stops."""

    SCENARIOS: dict[str, int] = {
        "create_one": 20,
        "create_batch": 8,
        "race_cancel": 12,
        "race_reschedule": 10,
        "terminate_running": 6,
        "cancel_running": 5,
        "trigger": 6,
        "backfill": 3,
        "cancel_occurrence": 4,
        "webhook_test": 2,
        "replay": 8,
        "read_run": 3,
    }

    def __init__(self, shared: Shared, tenant: str, seed: int, number: int) -> None:
        super().__init__(name=f"load-{number}", daemon=True)
        self.shared = shared
        self.rng = random.Random(f"{seed}/load/{number}")
        self.client = Client(shared, tenant, self.rng, f"c{number}")
        self.scenarios = itertools.count(1)
        self.failure: BaseException | None = None

    def run(self) -> None:
        names = list(self.SCENARIOS)
        weights = [self.SCENARIOS[n] for n in names]
        try:
            while not self.shared.stopping.is_set():
                scenario = self.rng.choices(names, weights)[0]
                number = next(self.scenarios)
                tag = f"{self.client.name}-s{number}"
                self.shared.history.write(
                    {
                        "type": "decision",
                        "thread": self.name,
                        "scenario": scenario,
                        "tag": tag,
                        "t": time.time(),
                    }
                )
                getattr(self, scenario)(tag)
                self.pause(self.rng.uniform(0.0, 0.3))
        except BaseException as exc:
            self.failure = exc
        finally:
            self.client.close()

    def pause(self, seconds: float) -> None:
        self.shared.stopping.wait(max(0.0, seconds))

    # --- starts ---

    def create(self, tag: str, due_in: float, **input_options: Any) -> Op:
        body = start_body(self.rng, tag, due_in, **input_options)
        return self.client.send("create", "POST", "/scheduled-starts", body, tag=tag)

    def create_one(self, tag: str) -> None:
        self.create(tag, self.rng.uniform(0.0, 3.0))

    def create_batch(self, tag: str) -> None:
        count = self.rng.randint(2, 6)
        items = []
        for index in range(count):
            item = start_body(self.rng, f"{tag}-{index}", self.rng.uniform(0.0, 4.0))
            item["idempotency_key"] = self.client.new_key()
            items.append(item)
        op = self.client.send(
            "batch", "POST", "/scheduled-starts/batch", {"items": items}, keyed=False, tag=tag
        )
        if not op.decided or op.status != 200 or not isinstance(op.answer, dict):
            return
        # Items still in flight elsewhere: retried with the same key and body, through the
        # batch route or one by one through the single route (each replays the other).
        waiting = [
            items[i]
            for i, result in enumerate(op.answer.get("items", []))
            if undecided(result.get("status"), result.get("body"))
        ]
        while waiting and not self.shared.stopping.is_set():
            if self.rng.random() < 0.5:
                again = self.client.send(
                    "batch",
                    "POST",
                    "/scheduled-starts/batch",
                    {"items": waiting},
                    keyed=False,
                    tag=tag,
                    parent=op.id,
                )
                if not again.decided or not isinstance(again.answer, dict):
                    return
                results = again.answer.get("items", [])
                waiting = [
                    waiting[i]
                    for i, result in enumerate(results)
                    if undecided(result.get("status"), result.get("body"))
                ]
            else:
                for item in waiting:
                    single = {k: v for k, v in item.items() if k != "idempotency_key"}
                    one = self.client.begin(
                        "create",
                        "POST",
                        "/scheduled-starts",
                        single,
                        item["idempotency_key"],
                        tag=tag,
                        parent=op.id,
                    )
                    self.client.settle(one, 30.0)
                    if not one.decided:
                        with self.shared.lock:
                            self.shared.unfinished.append((self.client, one))
                waiting = []

    def read_start(self, start_id: str, tag: str) -> dict[str, Any] | None:
        op = self.client.get(f"/scheduled-starts/{start_id}", tag=tag)
        if op.status == 200 and isinstance(op.answer, dict):
            run = (op.answer.get("dispatch") or {}).get("run_id")
            if run:
                with self.shared.lock:
                    self.shared.runs.append(run)
            return op.answer
        return None

    def accepted_start(self, op: Op) -> str | None:
        if op.status == 201 and isinstance(op.answer, dict):
            start_id = op.answer.get("id")
            return start_id if isinstance(start_id, str) else None
        return None

    def created_near_its_due_time(self, tag: str) -> dict[str, Any] | None:
        """Create a start due in about a second and read it back just before or after it is due,
        the moment when a change races its dispatch."""
        due = self.rng.uniform(0.5, 1.5)
        created = time.monotonic()
        start_id = self.accepted_start(self.create(tag, due))
        if start_id is None:
            return None
        self.pause(due - (time.monotonic() - created) + self.rng.uniform(-0.6, 0.4))
        return self.read_start(start_id, tag)

    def race_cancel(self, tag: str) -> None:
        start = self.created_near_its_due_time(tag)
        if start is None:
            return
        start_id = start["id"]
        op = self.client.send(
            "cancel_start",
            "POST",
            f"/scheduled-starts/{start_id}/cancel",
            {"version": start["version"]},
            tag=tag,
        )
        if op.status == 409 and op.code() == "already_dispatched":
            run_id = (op.answer["error"].get("details") or {}).get("run_id")
            if isinstance(run_id, str):
                self.end_run(run_id, tag)

    def end_run(self, run_id: str, tag: str) -> None:
        """OS-8: a dispatched start is stopped through its run."""
        with self.shared.lock:
            self.shared.runs.append(run_id)
        action = "terminate" if self.rng.random() < 0.5 else "cancel"
        self.client.send(f"run_{action}", "POST", f"/runs/{run_id}/{action}", None, tag=tag)

    def race_reschedule(self, tag: str) -> None:
        start = self.created_near_its_due_time(tag)
        if start is None:
            return
        start_id = start["id"]
        body = {"version": start["version"], "start_at": in_seconds(self.rng.uniform(1.0, 4.0))}
        self.client.send(
            "reschedule", "POST", f"/scheduled-starts/{start_id}/reschedule", body, tag=tag
        )

    def stop_running(self, tag: str, action: str, hang: bool) -> None:
        seconds = (4.0, 10.0) if hang else (2.0, 5.0)
        start_id = self.accepted_start(
            self.create(tag, self.rng.uniform(0.0, 1.0), seconds=seconds, hang=hang)
        )
        if start_id is None:
            return
        self.pause(self.rng.uniform(1.0, 4.0))
        start = self.read_start(start_id, tag)
        if start is None:
            return
        run_id = (start.get("dispatch") or {}).get("run_id")
        if run_id:
            self.client.send(f"run_{action}", "POST", f"/runs/{run_id}/{action}", None, tag=tag)
        elif start.get("state") == "scheduled":
            self.client.send(
                "cancel_start",
                "POST",
                f"/scheduled-starts/{start_id}/cancel",
                {"version": start["version"]},
                tag=tag,
            )

    def terminate_running(self, tag: str) -> None:
        self.stop_running(tag, "terminate", hang=self.rng.random() < 0.7)

    def cancel_running(self, tag: str) -> None:
        self.stop_running(tag, "cancel", hang=False)

    # --- schedules ---

    def schedule(self) -> str | None:
        with self.shared.lock:
            return self.rng.choice(self.shared.schedules) if self.shared.schedules else None

    def trigger(self, tag: str) -> None:
        schedule_id = self.schedule()
        if schedule_id is not None:
            self.client.send("trigger", "POST", f"/schedules/{schedule_id}/trigger", {}, tag=tag)

    def backfill(self, tag: str) -> None:
        schedule_id = self.schedule()
        if schedule_id is None:
            return
        to = self.rng.uniform(1.0, 4.0)
        span = self.rng.uniform(*self.shared.backfill_span)
        body = {"from": in_seconds(-to - span), "to": in_seconds(-to)}
        self.client.send("backfill", "POST", f"/schedules/{schedule_id}/backfill", body, tag=tag)

    def cancel_occurrence(self, tag: str) -> None:
        schedule_id = self.schedule()
        if schedule_id is None:
            return
        state = self.rng.choice(["scheduled", "buffered"])
        # The oldest ones: the next to be dispatched, so a cancel races the runner.
        listed = self.client.get(
            f"/schedules/{schedule_id}/occurrences?state={state}&limit=5&order=oldest", tag=tag
        )
        items = listed.answer.get("items", []) if isinstance(listed.answer, dict) else []
        if listed.status != 200 or not items:
            return
        occurrence = self.rng.choice(items)
        self.client.send(
            "cancel_occurrence",
            "POST",
            f"/schedules/{schedule_id}/occurrences/{occurrence['id']}/cancel",
            {"version": occurrence["version"]},
            tag=tag,
        )

    def webhook_test(self, tag: str) -> None:
        with self.shared.lock:
            hooks = list(self.shared.webhooks)
        if hooks:
            self.client.send(
                "webhook_test", "POST", f"/webhooks/{self.rng.choice(hooks)}/test", None, tag=tag
            )

    # --- replays and reads ---

    def replay(self, tag: str) -> None:
        """The exact request of a decided operation again, with its key (OS-4)."""
        with self.shared.lock:
            candidates = [
                op for op in self.shared.decided[-200:] if op.tenant == self.client.tenant
            ]
        if not candidates:
            return
        original = self.rng.choice(candidates)
        op = self.client.begin(
            "replay",
            original.method,
            original.path.removeprefix(self.client.path("")),
            original.body,
            original.key,
            tag=tag,
            of=original.id,
        )
        self.client.settle(op, OP_SECONDS)
        if not op.decided:
            with self.shared.lock:
                self.shared.unfinished.append((self.client, op))

    def read_run(self, tag: str) -> None:
        with self.shared.lock:
            run_id = self.rng.choice(self.shared.runs[-100:]) if self.shared.runs else None
        if run_id is not None:
            self.client.get(f"/runs/{run_id}", tag=tag)


class QuotaThread(threading.Thread):
    """Fills the quota tenant with far-future starts and cancels some (QA-1, QA-3)."""

    def __init__(self, shared: Shared, tenant: str, seed: int, number: int) -> None:
        super().__init__(name=f"quota-{number}", daemon=True)
        self.shared = shared
        self.rng = random.Random(f"{seed}/quota/{number}")
        self.client = Client(shared, tenant, self.rng, f"q{number}")
        self.accepted: list[str] = []
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            number = itertools.count(1)
            while not self.shared.stopping.is_set():
                if self.accepted and self.rng.random() < 0.3:
                    start_id = self.accepted.pop(self.rng.randrange(len(self.accepted)))
                    # Nothing else changes these starts: their version is still 1.
                    self.client.send(
                        "cancel_start",
                        "POST",
                        f"/scheduled-starts/{start_id}/cancel",
                        {"version": 1},
                    )
                else:
                    tag = f"{self.client.name}-{next(number)}"
                    body = start_body(self.rng, tag, 3600.0)
                    op = self.client.send("create", "POST", "/scheduled-starts", body, tag=tag)
                    if op.status == 201 and isinstance(op.answer, dict):
                        self.accepted.append(op.answer["id"])
                self.shared.stopping.wait(self.rng.uniform(0.0, 0.15))
        except BaseException as exc:
            self.failure = exc
        finally:
            self.client.close()


def finish_unfinished(shared: Shared, seconds: float) -> list[Op]:
    """Send every undecided operation again until it is decided (the quiet period, every
    process up); the ones still undecided after ``seconds``."""
    with shared.lock:
        pending = list(shared.unfinished)
        shared.unfinished.clear()
    left: list[Op] = []
    threads = []
    lock = threading.Lock()

    def finish(client: Client, op: Op) -> None:
        client.settle(op, seconds, quiet=True)
        if not op.decided:
            with lock:
                left.append(op)

    # One request at a time per client: its httpx client is not shared across threads.
    by_client: dict[int, list[tuple[Client, Op]]] = {}
    for client, op in pending:
        by_client.setdefault(id(client), []).append((client, op))
    for group in by_client.values():
        replacement = Client(
            shared, group[0][0].tenant, random.Random(group[0][1].id), group[0][0].name
        )

        def work(group: list[tuple[Client, Op]] = group, client: Client = replacement) -> None:
            try:
                for _, op in group:
                    finish(client, op)
            finally:
                client.close()

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(seconds * 2 + 10)
    return left


@contextlib.contextmanager
def admin(shared: Shared, tenant: str, name: str, seed: int) -> Any:
    """A client for the harness's own setup and quiet-period requests."""
    client = Client(shared, tenant, random.Random(f"{seed}/{name}"), name)
    try:
        yield client
    finally:
        client.close()
