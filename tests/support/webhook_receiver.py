"""A webhook receiver on 127.0.0.1 for delivery tests: a real HTTP server in a thread that
records every request and answers with the statuses of its script."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REDIRECT_PATH = "/moved"
SHUTDOWN_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: bytes


class Receiver:
    """Answers each POST with the next status of ``statuses`` (the last one repeats); a
    3xx carries ``Location: /moved`` on the same server, so a followed redirect shows."""

    def __init__(self, statuses: tuple[int, ...] = (200,)) -> None:
        self.received: list[Received] = []
        self._statuses = list(statuses)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def answer(self, *statuses: int) -> None:
        with self._lock:
            self._statuses = list(statuses)

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def start(self, port: int = 0, tls: ssl.SSLContext | None = None) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                status = receiver._record(
                    Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", REDIRECT_PATH)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        # ``stop`` waits for the loop to notice the shutdown: it looks every 0.5 s by default.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(SHUTDOWN_POLL_SECONDS,), daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _record(self, request: Received) -> int:
        with self._lock:
            self.received.append(request)
            return self._statuses.pop(0) if len(self._statuses) > 1 else self._statuses[0]


@contextmanager
def receiving(
    statuses: tuple[int, ...] = (200,), port: int = 0, tls: ssl.SSLContext | None = None
) -> Iterator[Receiver]:
    receiver = Receiver(statuses)
    receiver.start(port, tls)
    try:
        yield receiver
    finally:
        receiver.stop()
