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


@app.workflow("explode", "1")
def explode(payload: dict[str, Any]) -> None:
    raise RuntimeError("exploded on purpose")
