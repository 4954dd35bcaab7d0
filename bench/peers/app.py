"""The workflows of the peer benchmarks: each body returns the wall time it began at.

The figure then depends on no stamp punctual writes (``claimed_at``, ``started_at``):
``entered - start_at`` is the lag a user's code sees.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict

from punctual.workflows import App

app = App(name="bench-peers")


class EntryInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str


@app.workflow("entry", "1", input=EntryInput)
def entry(payload: EntryInput) -> dict[str, float]:
    """Returns ``time.time()`` as the body's first act."""
    return {"entered": time.time()}
