"""Append-only JSON-lines records that several processes write at once.

Every writer opens the file with ``O_APPEND`` and writes each record as one ``write()`` of
one line: on a local file system the kernel places each such write at the end of the file
whole, so lines from the harness, its threads and the workflow bodies (in other processes)
never interleave, and a writer killed by SIGKILL leaves at most its own unfinished line,
which ``read_records`` skips.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HISTORY = "history.jsonl"
"""Client operations and every answer they got (the harness's load)."""
BODIES = "bodies.jsonl"
"""Body executions, written by the bodies themselves (``tests.chaos.app``)."""
FAULTS = "faults.jsonl"
"""Fault decisions and process lifecycle events."""
RECEIVER = "receiver.jsonl"
"""Every webhook request the receiver got and what it answered."""
SAMPLES = "samples.jsonl"
"""Pending-start counts sampled from the store while the load runs (quota)."""
STORE = "store.json"
"""The final store, read through the API after the quiet period."""


def append_line(path: Path | str, record: dict[str, Any]) -> None:
    """Append one record as one line with one ``write()`` (``O_APPEND``)."""
    line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
        if written != len(line):  # a full disk; a short record would be skipped as torn
            raise OSError(f"short write to {path}: {written} of {len(line)} bytes")
    finally:
        os.close(fd)


class Journal:
    """One record file of the harness, kept open; thread-safe, one write per record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """Every whole record of ``path`` in file order (none if it does not exist)."""
    if not path.exists():
        return
    with path.open("rb") as lines:
        for raw in lines:
            if not raw.endswith(b"\n"):
                continue  # the torn last line of a writer killed mid-write
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record
