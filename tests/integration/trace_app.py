"""A workflow that returns the trace context its run was given; imported by slot processes."""

from __future__ import annotations

from typing import Any

from punctual import App, RunContext

app = App(name="trace-tests")


@app.workflow("traced", "1")
def traced(payload: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    return {"traceparent": ctx.traceparent}
