"""The webhook receiver of a chaos run: a real HTTP server on 127.0.0.1 that is sometimes
refusing, sometimes hanging, and sometimes not there at all.

Every request is recorded (``receiver.jsonl``) the moment its body has been read: the
``X-Punctual-Event-Id`` and signature headers, the body's SHA-256 and text, and what the
receiver did with it. Its answers come from its own ``random.Random``, seeded from the
run's seed, and are recorded with the request. ``down()`` closes the listening socket
(deliveries then fail to connect); ``up()`` listens again on the same port.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.chaos.record import Journal
from tests.e2e.harness import free_port

HANG_SECONDS = 12.0
"""Longer than a delivery's total timeout (10 s): a hung answer fails the attempt."""
POLL_SECONDS = 0.05


class ChaosReceiver:
    def __init__(self, journal_path: Path, seed: int, refuse: float, hang: float) -> None:
        self.port = free_port()
        self.journal = Journal(journal_path)
        self.refuse = refuse
        self.hang = hang
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/chaos"

    def steady(self) -> None:
        """From now on answer every request 200 at once (the quiet period)."""
        with self._lock:
            self.refuse = 0.0
            self.hang = 0.0
        self._release.set()

    def _decide(self) -> str:
        with self._lock:
            draw = self._rng.random()
            if draw < self.hang:
                return "hang"
            if draw < self.hang + self.refuse:
                return "500"
            return "200"

    def _arrived(self, headers: dict[str, str], body: bytes) -> str:
        action = self._decide()
        self.journal.write(
            {
                "t": time.time(),
                "event_id": headers.get("x-punctual-event-id"),
                "signature": headers.get("x-punctual-signature"),
                "sha256": hashlib.sha256(body).hexdigest(),
                "body": body.decode("utf-8", errors="replace"),
                "action": action,
            }
        )
        return action

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                action = receiver._arrived(headers, body)
                if action == "hang":
                    receiver._release.wait(HANG_SECONDS)
                    self.close_connection = True
                    return
                with contextlib.suppress(OSError):
                    self.send_response(int(action))
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._release.clear()
        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(POLL_SECONDS,), name="chaos-receiver", daemon=True
        )
        self._thread.start()

    def down(self) -> None:
        """Stop listening; requests held open are let go."""
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def close(self) -> None:
        self.down()
        self.journal.close()
