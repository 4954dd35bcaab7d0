"""Two builds of one app for the code drift tests (OP-3); imported by slot processes.

``app`` is the code registered for ``echo`` version 1; ``drifted`` is the same app after
someone edited echo's body without bumping its version. ``tick`` is the same function in
both, so both builds serve it.
"""

from __future__ import annotations

from typing import Any

from punctual import App

app = App(name="drift-registered")
drifted = App(name="drift-edited")


def echo(payload: dict[str, Any]) -> dict[str, Any]:
    return {"message": payload.get("message"), "code": "registered"}


def echo_edited(payload: dict[str, Any]) -> dict[str, Any]:
    return {"message": payload.get("message"), "code": "edited without a new version"}


def tick(payload: dict[str, Any]) -> dict[str, Any]:
    return {"ticked": True}


app.workflow("echo", "1")(echo)
app.workflow("tick", "1")(tick)
drifted.workflow("echo", "1")(echo_edited)
drifted.workflow("tick", "1")(tick)
