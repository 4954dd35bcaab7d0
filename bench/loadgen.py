"""The create benchmark's load generator: its own process, a small asyncio HTTP/1.1 client.

Each of ``--clients`` connections sends ``POST .../scheduled-starts`` back to back over a
keep-alive connection, every request with its own ``Idempotency-Key`` and
``business_request_id``. A hand-written client keeps the generator's CPU cost low on a
2-core machine (httpx costs several times more per request).

Protocol with the parent: after the warm-up it prints ``warm`` and waits for a line on
stdin; then it runs the timed phase and prints one JSON object.

    python -m bench.loadgen --port 8080 --token pn_... --clients 16 --count 2000
    python -m bench.loadgen --port 8080,8081 ...   # two API processes, clients alternate
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import secrets
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import percentile


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    sample_error: str | None = None


class Requests:
    """Hands out request numbers; builds each request's bytes."""

    def __init__(
        self, port: int, token: str, tenant: str, tag: str, route: str, batch_size: int = 1
    ) -> None:
        self._route = route
        self.batch_size = batch_size if route == "batch" else 1
        self._probe = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        self._batch_head = (
            f"POST /v1/tenants/{tenant}/scheduled-starts/batch HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\n"
        )
        self._head = (
            f"POST /v1/tenants/{tenant}/scheduled-starts HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\n"
        )
        self._tag = tag
        # Far in the future: nothing becomes due while the benchmark runs.
        self._start_at = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.next = 0
        self.end = 0

    def take(self) -> int | None:
        if self.next >= self.end:
            return None
        self.next += 1
        return self.next - 1

    def _create(self, i: int) -> dict[str, Any]:
        return {
            "workflow": "echo",
            "input": {"message": f"bench {i}"},
            "business_request_id": f"{self._tag}-{i}",
            "start_at": self._start_at,
            "workload_class": "standard",
        }

    def build(self, i: int) -> bytes:
        if self._route == "healthz":
            return self._probe
        if self._route == "batch":
            first = i * self.batch_size
            items = [
                {"idempotency_key": f"{self._tag}-{n}", **self._create(n)}
                for n in range(first, first + self.batch_size)
            ]
            data = json.dumps({"items": items}, separators=(",", ":")).encode()
            return f"{self._batch_head}Content-Length: {len(data)}\r\n\r\n".encode() + data
        body = json.dumps(self._create(i), separators=(",", ":")).encode()
        head = (
            f"{self._head}Idempotency-Key: {self._tag}-{i}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("the server closed the connection")
    status = int(status_line.split(b" ", 2)[1])
    length = 0
    close = False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
        elif name == b"transfer-encoding":
            raise ConnectionError("chunked responses are not supported by this client")
    body = await reader.readexactly(length) if length else b""
    return status, body, close


async def _client(port: int, requests: Requests, tally: Tally, expect: int) -> None:
    """One keep-alive connection to ``port``, sending requests until none are left."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while (i := requests.take()) is not None:
            payload = requests.build(i)
            began = time.perf_counter()
            writer.write(payload)
            status, body, close = await _read_response(reader)
            tally.latencies.append(time.perf_counter() - began)
            if requests.batch_size > 1 and status == 200:
                # Per-item statuses: a created item answers {"status":201,...}.
                created = body.count(b'{"status":201,')
                tally.statuses[201] += created
                tally.statuses[-1] += requests.batch_size - created  # items not created
                if created < requests.batch_size and tally.sample_error is None:
                    tally.sample_error = f"items not created: {body[:300].decode(errors='replace')}"
                continue
            tally.statuses[status] += 1
            if status != expect and tally.sample_error is None:
                tally.sample_error = f"{status} {body[:300].decode(errors='replace')}"
            if close:
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
    finally:
        writer.close()


async def _phase(
    ports: list[int], requests: Requests, clients: int, count: int, expect: int
) -> tuple[Tally, float]:
    """``clients`` connections, spread round-robin over ``ports`` (one per API process)."""
    requests.end = requests.next + count
    tally = Tally()
    began = time.perf_counter()
    await asyncio.gather(
        *(_client(ports[n % len(ports)], requests, tally, expect) for n in range(clients))
    )
    return tally, time.perf_counter() - began


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    tag = args.tag or secrets.token_hex(4)
    ports = [int(p) for p in str(args.port).split(",")]
    requests = Requests(ports[0], args.token, args.tenant, tag, args.route, args.batch_size)
    expect = 200 if args.route == "healthz" else 201
    if args.warmup:
        await _phase(ports, requests, args.clients, args.warmup, expect)
    if args.handshake:
        print("warm", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    tally, elapsed = await _phase(ports, requests, args.clients, args.count, expect)
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    created = tally.statuses.get(expect, 0)
    return {
        "clients": args.clients,
        "count": args.count * requests.batch_size,
        "requests": len(tally.latencies),
        "elapsed_s": elapsed,
        "created": created,
        "rate_per_s": created / elapsed if elapsed > 0 else 0.0,
        "statuses": {str(k): v for k, v in sorted(tally.statuses.items())},
        "latency_ms": {
            "p50": 1000 * percentile(tally.latencies, 50),
            "p99": 1000 * percentile(tally.latencies, 99),
            "max": 1000 * max(tally.latencies, default=float("nan")),
        },
        "client_cpu_s": cpu,
        "sample_error": tally.sample_error,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", required=True, help="Port, or ports: 8080,8081 (round-robin).")
    parser.add_argument("--token", required=True)
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument(
        "--route",
        choices=["create", "batch", "healthz"],
        default="create",
        help="create = POST scheduled-starts; batch = POST scheduled-starts/batch with "
        "--batch-size items (counts are then requests; the rate counts created items); "
        "healthz = GET /healthz (the HTTP stack's floor).",
    )
    parser.add_argument("--batch-size", type=int, default=500, help="Items per batch request.")
    parser.add_argument("--tag", default=None, help="Prefix of keys and business request ids.")
    parser.add_argument("--handshake", action="store_true", help="Wait for stdin after warm-up.")
    args = parser.parse_args()
    try:
        import uvloop  # uvicorn[standard] brings it; it halves the client's CPU per request

        result = uvloop.run(main_async(args))
    except ImportError:
        result = asyncio.run(main_async(args))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
