"""Workflows that exercise the slot executor: they succeed, fail, cooperate, hang and crash.

Loaded by the slot processes of ``test_executor.py`` through an app reference, so this
module must stay importable on its own (no pytest imports).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from punctual import App, Canceled, RunContext

app = App(name="executor-tests")


def _note_pid(payload: dict[str, Any]) -> None:
    pid_file = payload.get("pid_file")
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()))


@app.workflow("add", "1")
def add(payload: dict[str, Any]) -> dict[str, Any]:
    return {"sum": payload["a"] + payload["b"]}


@app.workflow("add_async", "1")
async def add_async(payload: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"sum": payload["a"] + payload["b"], "async": True}


@app.workflow("boom", "1")
def boom(payload: dict[str, Any]) -> None:
    raise ValueError(f"boom: {payload['n']}")


@app.workflow("patient", "1")
def patient(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Sleeps cooperatively and, when canceled, cleans up and finishes normally."""
    if not ctx.sleep(payload["seconds"]):
        return {"canceled_early": True, "cancel_requested": ctx.cancel_requested}
    return {"canceled_early": False}


@app.workflow("strict", "1")
async def strict(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Ends its run ``canceled`` when canceled."""
    if not await ctx.sleep_async(payload["seconds"]):
        raise Canceled("stopped at the user's request")
    return {"slept": payload["seconds"]}


@app.workflow("hang", "1")
def hang(payload: dict[str, Any], ctx: RunContext) -> None:
    """Ignores cancel and never returns: only terminate or a timeout ends it."""
    _note_pid(payload)
    while True:
        threading.Event().wait(3600)


@app.workflow("nap", "1")
def nap(payload: dict[str, Any]) -> dict[str, Any]:
    _note_pid(payload)
    time.sleep(payload["seconds"])
    return {"pid": os.getpid()}


@app.workflow("exit3", "1")
def exit3(payload: dict[str, Any]) -> None:
    os._exit(3)


@app.workflow("weird", "1")
def weird(payload: dict[str, Any]) -> object:
    return object()


@app.workflow("pid", "1")
def pid(payload: dict[str, Any]) -> int:
    return os.getpid()


@app.workflow("loaded", "1")
def loaded(payload: dict[str, list[str]]) -> list[str]:
    """Which of the named modules the slot process has imported."""
    return [name for name in payload["modules"] if name in sys.modules]


@app.workflow("spawner", "1")
def spawner(payload: dict[str, Any], ctx: RunContext) -> None:
    """Starts a helper process of its own, then hangs: terminate must stop both."""
    helper = subprocess.Popen(["sleep", "600"])
    Path(payload["pid_file"]).write_text(str(helper.pid))
    helper.wait()


@app.workflow("note", "1")
def note(payload: dict[str, Any]) -> str:
    """Appends its name to a file when its body begins: proves which bodies ran."""
    with open(payload["file"], "a") as handle:
        handle.write(payload["name"] + "\n")
    return str(payload["name"])
