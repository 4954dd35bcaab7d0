"""Workflows for the worker tests; imported by the worker's slot processes, so no pytest here."""

from __future__ import annotations

import time
from typing import Any

from punctual import App, Canceled, RunContext

app = App(name="worker-tests")


@app.workflow("echo", "1", input={"type": "object", "required": ["message"]})
def echo(payload: dict[str, Any]) -> dict[str, Any]:
    return {"message": payload["message"]}


@app.workflow("nap", "1")
def nap(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Sleeps cooperatively; a cancel ends the run ``canceled``."""
    if not ctx.sleep(float(payload.get("seconds", 30))):
        raise Canceled("woken by a cancel")
    return {"slept": payload.get("seconds", 30)}


@app.workflow("hang", "1", execution_timeout_seconds=1.5)
def hang(payload: dict[str, Any]) -> None:
    """Ignores cancel and never returns: only terminate or the timeout stop it."""
    while True:
        time.sleep(1)


@app.workflow("wedge", "1", execution_timeout_seconds=300)
def wedge(payload: dict[str, Any]) -> None:
    """Like ``hang``, with a timeout no test waits for: only terminate stops it in a test's
    time, however slow the machine (``hang``'s 1.5 s ran out before a terminate on a loaded
    one)."""
    while True:
        time.sleep(1)


@app.workflow("explode", "1")
def explode(payload: dict[str, Any]) -> None:
    raise RuntimeError("exploded on purpose")


NUL_RESULT = {"text": "before\x00after", "\x00key": ["\x00", "\ud800"], "$punctual_escaped": 1}
"""A result PostgreSQL's JSONB cannot hold as is (NUL, a lone surrogate, the envelope key)."""


@app.workflow("nul", "1")
def nul(payload: dict[str, Any]) -> dict[str, Any]:
    return NUL_RESULT


@app.workflow("nul_error", "1")
def nul_error(payload: dict[str, Any]) -> None:
    raise ValueError("a message with a \x00 in it")


@app.workflow("counted", "1")
def counted(payload: dict[str, Any]) -> dict[str, Any]:
    """Appends a line per execution to ``payload["file"]``, so a test counts bodies."""
    with open(payload["file"], "a") as handle:
        handle.write("ran\n")
    time.sleep(float(payload.get("seconds", 0)))
    return {"ran": True}
