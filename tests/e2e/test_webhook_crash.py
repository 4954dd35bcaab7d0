"""The webhook outbox with real processes: receiver down, punctual killed mid-delivery (CR-4).

``punctual serve --components api,runner,worker`` runs a one-second ``score`` schedule with
a regression policy and a signed webhook to a receiver on 127.0.0.1. Two runs complete at
0.9, then the input drops to 0.5, so a run regresses. The receiver holds the regression's
first delivery open and never answers; while it hangs, the whole serve process group gets
SIGKILL. The receiver then answers 200, punctual starts again on the same database, and a
``test`` event is sent that the receiver, down for a while, refuses twice with 500.

Afterwards: every event the store recorded (the feed's notifications, the webhook's
deliveries) reached the receiver at least once; every copy of one event carries the same
``X-Punctual-Event-Id`` and the same body bytes, signed with the webhook's secret; every
delivery ends ``delivered``.

The restarted process sends the killed delivery again only once its lease has run out: the
deliverer leases a pass for the host's ``[runner] lease_seconds`` plus 10 s for every eight
deliveries of a full batch (a batch is eight: 10 s), so this test waits about 12 s for it.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from punctual.domain.webhooks import signature
from tests.e2e.harness import (
    DEMO_APP,
    RUNNER_READY,
    Managed,
    Processes,
    free_port,
    fresh_database,
    migrate,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.spread]

TENANT = "default"
ADMIN_TOKEN = "e2e-webhook-admin-" + "0123456789abcdef" * 2
SECRET = "e2e-webhook-secret-" + "fedcba9876543210" * 2
POLICY = {"metrics": [{"path": "metrics.score", "better": "higher", "tolerance": 0.05}]}
HANG = None
"""A receiver's action that holds the request open and never answers."""
HANG_LIMIT_SECONDS = 60.0
READY_SECONDS = 40.0
LEASE_OUT_SECONDS = 70.0
"""The killed delivery's lease (about 12 s from its claim) plus its send, with slack."""
POLL_SECONDS = 0.05
"""How often the receiver's loop looks for a shutdown."""

Action = int | None


@dataclass(frozen=True)
class Copy:
    """One request as the receiver got it; ``answer`` None: it was held and never answered."""

    event_id: str | None
    kind: str | None
    signature: str | None
    body: bytes
    answer: Action

    def payload(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


class ScriptedReceiver:
    """An HTTP receiver on 127.0.0.1 that records every request the moment its body has
    been read, then acts by the script of the event's kind: a status to answer, or
    ``HANG`` (hold the connection, never answer). The last action of a script repeats;
    a kind without a script is answered 200."""

    def __init__(self) -> None:
        self.copies: list[Copy] = []
        self._scripts: dict[str, list[Action]] = {}
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def script(self, kind: str, *actions: Action) -> None:
        with self._lock:
            self._scripts[kind] = list(actions)

    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/hooks/{secrets.token_hex(8)}"

    def of_kind(self, kind: str) -> list[Copy]:
        with self._lock:
            return [copy for copy in self.copies if copy.kind == kind]

    def release(self) -> None:
        """Let every held request's handler end (their senders are gone by now)."""
        self._release.set()

    def _arrived(self, event_id: str | None, signed: str | None, body: bytes) -> Action:
        try:
            kind = json.loads(body).get("event")
        except ValueError:
            kind = None
        with self._lock:
            script = self._scripts.get(kind, [200]) if isinstance(kind, str) else [200]
            action = script.pop(0) if len(script) > 1 else script[0]
            self.copies.append(Copy(event_id, kind, signed, body, action))
        return action

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                action = receiver._arrived(
                    self.headers.get("X-Punctual-Event-Id"),
                    self.headers.get("X-Punctual-Signature"),
                    body,
                )
                if action is HANG:
                    receiver._release.wait(HANG_LIMIT_SECONDS)
                    self.close_connection = True
                    return
                with contextlib.suppress(OSError):
                    self.send_response(action)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A short poll interval: ``shutdown`` waits for the loop to look, 0.5 s by default.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(POLL_SECONDS,), daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)


@contextlib.contextmanager
def receiving() -> Iterator[ScriptedReceiver]:
    receiver = ScriptedReceiver()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()


class Api:
    """The tenant's HTTP API as its admin; every mutation with a fresh idempotency key."""

    def __init__(self, port: int) -> None:
        self.client = httpx.Client(
            base_url=f"http://127.0.0.1:{port}/v1/tenants/{TENANT}",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=10,
        )

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        response = self.client.get(path, params=params)
        assert response.status_code == 200, (path, response.status_code, response.text)
        body: dict[str, Any] = response.json()
        return body

    def items(self, path: str) -> list[dict[str, Any]]:
        """Every item of a list, following its cursors."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 100}
            if cursor is not None:
                params["cursor"] = cursor
            page = self.get(path, **params)
            found += page["items"]
            cursor = page["next_cursor"]
            if cursor is None:
                return found

    def send(self, method: str, path: str, body: Any, expected: int) -> dict[str, Any]:
        response = self.client.request(
            method, path, json=body, headers={"Idempotency-Key": secrets.token_hex(8)}
        )
        assert response.status_code == expected, (path, response.status_code, response.text)
        answer: dict[str, Any] = response.json() if response.content else {}
        return answer

    def answers(self) -> bool | None:
        with contextlib.suppress(httpx.HTTPError):
            if self.client.get("/definitions").status_code == 200:
                return True
        return None

    def close(self) -> None:
        self.client.close()


def serve_all(procs: Processes, port: int) -> Managed:
    """API, runner and worker in one process on a fixed port (a restart keeps it), with a
    known admin token for tenant ``default``."""
    args = ["serve", "--components", "api,runner,worker", "--app", DEMO_APP]
    args += ["--port", str(port), "--dev-token", ADMIN_TOKEN]
    return procs.start(Managed("serve", args, RUNNER_READY))


def wait_serving(procs: Processes, serving: Managed, api: Api) -> None:
    procs.wait_ready(serving, READY_SECONDS)
    wait_for("the API to answer", api.answers, READY_SECONDS)


def kill_hard(managed: Managed) -> None:
    """SIGKILL to the whole process group: nothing gets to finish or record anything."""
    process = managed.current.process
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=15)


def deliveries_of(api: Api, webhook_id: str) -> dict[str, dict[str, Any]]:
    """The webhook's deliveries by event kind (this test makes one event of each)."""
    rows = api.items(f"/webhooks/{webhook_id}/deliveries")
    by_kind = {row["kind"]: row for row in rows}
    assert len(by_kind) == len(rows), f"more than one delivery of a kind: {rows}"
    return by_kind


@contextlib.contextmanager
def database(kind: str, directory: Path) -> Iterator[str]:
    if kind == "postgres":
        with fresh_database() as url:
            yield url
    else:
        url = f"sqlite:///{directory / 'punctual.db'}"
        migrate(url)
        yield url


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_every_event_arrives_after_a_kill_mid_delivery_and_a_receiver_outage(
    tmp_path: Path, store: str
) -> None:
    port = free_port()
    with (
        contextlib.closing(Api(port)) as api,
        receiving() as receiver,
        database(store, tmp_path) as url,
        Processes(tmp_path, url) as procs,
    ):
        receiver.script("regression", HANG, 200)
        receiver.script("test", 500, 500, 200)
        serving = serve_all(procs, port)
        wait_serving(procs, serving, api)

        webhook = api.send("POST", "/webhooks", {"url": receiver.url(), "secret": SECRET}, 201)
        schedule = api.send(
            "POST",
            "/schedules",
            {
                "name": "scores",
                "workflow": "score",
                "input": {"score": 0.9},
                "spec": {"interval_ms": 1000},
                "overlap": "skip",
                "missed": "skip",
                "regression": POLICY,
            },
            201,
        )
        occurrences = f"/schedules/{schedule['id']}/occurrences"

        def baseline_compared() -> bool | None:
            """Two runs ended at 0.9 and the later one was compared with the earlier."""
            ended = [o for o in api.items(occurrences) if o["follow_through"] is not None]
            statuses = [o["follow_through"]["status"] for o in ended]
            return True if len(ended) >= 2 and "ok" in statuses else None

        wait_for("two runs to complete at 0.9", baseline_compared, 30, step=0.1)
        current = api.get(f"/schedules/{schedule['id']}")
        api.send(
            "PATCH",
            f"/schedules/{schedule['id']}",
            {"version": current["version"], "input": {"score": 0.5}},
            200,
        )

        wait_for(
            "the receiver to hold the regression's delivery",
            lambda: receiver.of_kind("regression") or None,
            30,
            step=0.05,
        )
        kill_hard(serving)
        receiver.release()
        receiver.script("regression", 200)  # the receiver answers from now on

        procs.restart(serving)
        wait_serving(procs, serving, api)
        # The killed attempt was never recorded: the delivery still waits, leased to the
        # dead process, with no attempt counted; or, when the restart took longer than the
        # lease (a loaded machine), it was sent again and that one attempt is all it counts.
        held = deliveries_of(api, webhook["id"])["regression"]
        assert (held["status"], held["attempts"]) in (("pending", 0), ("delivered", 1)), held
        assert (held["delivered_at"] is None) == (held["status"] == "pending"), held

        current = api.get(f"/schedules/{schedule['id']}")
        api.send("POST", f"/schedules/{schedule['id']}/pause", {"version": current["version"]}, 200)
        api.send("POST", f"/webhooks/{webhook['id']}/test", None, 202)

        def all_delivered() -> dict[str, dict[str, Any]] | None:
            rows = deliveries_of(api, webhook["id"])
            done = set(rows) == {"regression", "test"} and all(
                row["status"] == "delivered" for row in rows.values()
            )
            return rows if done else None

        deliveries = wait_for(
            "both deliveries to be delivered", all_delivered, LEASE_OUT_SECONDS, step=0.1
        )
        notifications = api.items("/notifications")
        ended = api.items(occurrences)
        assert serving.killed_count() == 1, serving.exit_codes()
        assert serving.alive(), "the restarted serve process died"

    copies = list(receiver.copies)
    by_event: dict[str | None, list[Copy]] = {}
    for copy in copies:
        by_event.setdefault(copy.event_id, []).append(copy)
    assert None not in by_event, "a request without X-Punctual-Event-Id"

    # Every copy of one event: the same id in header and body, the same bytes, signed.
    for event_id, same in by_event.items():
        assert len({copy.body for copy in same}) == 1, f"{event_id}: bodies differ"
        for copy in same:
            assert copy.payload()["event_id"] == event_id
            assert copy.signature is not None, f"{event_id}: unsigned copy"
            assert hmac.compare_digest(copy.signature, signature(SECRET, copy.body))

    # Every delivery the store recorded arrived, under its own event id, and is delivered.
    for kind, row in deliveries.items():
        arrived = by_event.get(row["event_id"], [])
        assert arrived, f"the {kind} delivery {row['event_id']} never reached the receiver"
        assert {copy.kind for copy in arrived} == {kind}
        assert arrived[-1].answer == 200, arrived
        assert row["last_status_code"] == 200, row
        assert row["delivered_at"] is not None, row
    assert set(by_event) == {row["event_id"] for row in deliveries.values()}, (
        "the receiver got events the store does not show"
    )

    # The regression: held by the receiver when punctual died, sent again after the
    # restart under the same event id, answered 200 there.
    regression = by_event[deliveries["regression"]["event_id"]]
    assert [copy.answer for copy in regression] == [HANG, 200]
    assert deliveries["regression"]["attempts"] == 1

    # The receiver down: the test event was refused twice, retried, then delivered; with
    # no crash in between, every attempt is recorded.
    refused = by_event[deliveries["test"]["event_id"]]
    assert [copy.answer for copy in refused] == [500, 500, 200]
    assert deliveries["test"]["attempts"] == 3

    # The feed: one regression notification, for the run whose delivery was killed.
    regressed = [o for o in ended if (o["follow_through"] or {}).get("status") == "regressed"]
    assert len(regressed) == 1, [o["follow_through"] for o in ended]
    assert [n["kind"] for n in notifications] == ["regression"], notifications
    (notification,) = notifications
    data = regression[0].payload()["data"]
    assert (notification["run_id"], notification["occurrence_id"]) == (
        data["run_id"],
        data["occurrence_id"],
    )
    assert notification["occurrence_id"] == regressed[0]["id"]
    assert notification["schedule_id"] == data["schedule_id"] == schedule["id"]
