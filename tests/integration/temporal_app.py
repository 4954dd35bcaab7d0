"""Workflows for the engine contract suite (both engines); imported by slot processes.

Bodies leave marks in the directory named by their input (``marks``), so a test can count
how many times a body really ran, and see whether a killed body went on running.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from punctual import App, Canceled, RunContext

app = App(name="engine-contract")


def _mark(payload: dict[str, Any], name: str, text: str = "") -> None:
    path = Path(payload["marks"]) / name
    with path.open("a") as handle:
        handle.write(text + "\n")


@app.workflow("count", "1")
def count(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Marks each execution of its body, optionally sleeps, returns when it began."""
    began = time.time()
    _mark(payload, f"{ctx.run_id}.ran", f"{ctx.attempt} {began}")
    ctx.sleep(float(payload.get("seconds", 0)))
    return {"began_at": began, "attempt": ctx.attempt}


@app.workflow("nap", "1")
def nap(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Sleeps cooperatively; a cancel ends the run ``canceled`` after a little clean-up."""
    _mark(payload, f"{ctx.run_id}.ran")
    if not ctx.sleep(float(payload.get("seconds", 60))):
        _mark(payload, f"{ctx.run_id}.cleaned")
        raise Canceled("woken by a cancel; cleaned up")
    return {"slept": payload.get("seconds", 60)}


@app.workflow("stubborn", "1", execution_timeout_seconds=60)
def stubborn(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Ignores cancel, ticks a file every 50 ms, and returns after ``seconds`` unless killed."""
    path = Path(payload["marks"]) / f"{ctx.run_id}.tick"
    end = time.monotonic() + float(payload.get("seconds", 4))
    while time.monotonic() < end:
        path.write_text(str(time.time()))
        time.sleep(0.05)
    _mark(payload, f"{ctx.run_id}.returned")
    return {"returned": True}


@app.workflow("explode", "1")
def explode(payload: dict[str, Any]) -> None:
    raise RuntimeError("exploded on purpose")


@app.workflow("hang", "1", execution_timeout_seconds=1.0)
def hang(payload: dict[str, Any]) -> None:
    """Never returns and ignores cancel: only terminate or its 1 s timeout end it."""
    while True:
        time.sleep(0.1)


@app.workflow("whence", "1")
def whence(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Answers what its run knows of the occurrence it is (``ctx.occurrence``)."""
    return {"occurrence": ctx.occurrence}
