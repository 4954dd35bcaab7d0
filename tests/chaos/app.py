"""The chaos workflow app (``tests.chaos.app:app``): bodies that record their own execution.

Every execution of a body appends to ``$CHAOS_RECORD_DIR/bodies.jsonl``, outside punctual,
what happened to it: ``begin`` (run id, attempt, pid, a nonce of its own), then ``end``
(it returned), ``raised`` (it failed on purpose) or ``canceled`` (it saw a cooperative
cancel). A body killed mid-way leaves only its ``begin``. What a completed body returns
carries its nonce, so the checker can tell which execution's outcome the store recorded.

A body also takes an exclusive ``flock`` on a file named after its run for as long as it
executes; a second body of the same run that finds the lock taken records
``concurrent: true`` in its ``begin`` (two bodies of one run at once, SPEC FT-2). The lock
goes with its holder when the holder dies, so only live (or stopped) bodies hold it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from punctual.workflows import App, Canceled, RunContext
from tests.chaos.record import BODIES, append_line

RECORD_DIR_VARIABLE = "CHAOS_RECORD_DIR"
EXECUTION_TIMEOUT_SECONDS = 120.0

app = App(name="chaos")


class BodyInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: str = Field(max_length=200)
    """Which client operation (or schedule) asked for this run."""
    seconds: float = Field(ge=0, le=60)
    """How long the body works, sleeping cooperatively (a cancel cuts it short)."""
    hang: bool = False
    """Ignore cancels and sleep the whole time: only terminate (or a kill) stops it."""
    fail: bool = False
    """Raise at the end instead of returning: the run fails, and is never retried."""


class ChaosFailure(Exception):
    """What a body asked to fail raises; its message carries the execution's nonce."""


def _record_dir() -> Path:
    return Path(os.environ[RECORD_DIR_VARIABLE])


def score_of(nonce: str) -> float:
    """A metric that differs from one execution to the next (so regressions happen)."""
    return int(hashlib.sha256(nonce.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def _record(event: str, ctx: RunContext, nonce: str, **fields: Any) -> None:
    append_line(
        _record_dir() / BODIES,
        {
            "event": event,
            "run_id": ctx.run_id,
            "attempt": ctx.attempt,
            "nonce": nonce,
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "t": time.time(),
            **fields,
        },
    )


def _lock(run_id: str) -> tuple[int, bool]:
    """Open and try to lock the run's lock file: (fd, whether another body holds it)."""
    locks = _record_dir() / "locks"
    locks.mkdir(exist_ok=True)
    fd = os.open(locks / run_id, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return fd, True
    return fd, False


@app.workflow(
    "chaos-body", "1", input=BodyInput, execution_timeout_seconds=EXECUTION_TIMEOUT_SECONDS
)
def chaos_body(payload: BodyInput, ctx: RunContext) -> dict[str, Any]:
    nonce = uuid.uuid4().hex
    fd, concurrent = _lock(ctx.run_id)
    try:
        origin = dict(ctx.origin)
        _record(
            "begin",
            ctx,
            nonce,
            tag=payload.tag,
            concurrent=concurrent,
            origin_id=origin.get("id"),
            schedule_id=origin.get("schedule_id"),
        )
        if payload.hang:
            time.sleep(payload.seconds)
        elif not ctx.sleep(payload.seconds):
            _record("canceled", ctx, nonce)
            raise Canceled(f"run {ctx.run_id} canceled (execution {nonce})")
        if payload.fail:
            _record("raised", ctx, nonce)
            raise ChaosFailure(f"failed on purpose (execution {nonce})")
        result = {
            "nonce": nonce,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            "metrics": {"score": score_of(nonce)},
        }
        _record("end", ctx, nonce)
        return result
    finally:
        os.close(fd)
