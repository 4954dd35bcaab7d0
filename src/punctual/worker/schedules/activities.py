"""The fire workflow's activities: thin, typed calls into ``usecases.schedule_driver``.

Both ends validate the contract (``messages``): the workflow builds the request from
models, the activity validates it again and validates what the use case answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from punctual.adapters.drivers.temporal_schedules.messages import (
    FIRE_ACTIVITY,
    SETTLE_ACTIVITY,
    FireAnswer,
    FireRequest,
    SettleAnswer,
    SettleRequest,
)
from punctual.errors import Unavailable
from punctual.usecases.firing import schedule_driver
from punctual.usecases.kernel.context import Services

SETTLE_POLL_SECONDS = 0.5


class FireActivities:
    def __init__(self, services: Services) -> None:
        self._services = services

    @activity.defn(name=FIRE_ACTIVITY)
    async def fire(self, raw: dict[str, Any]) -> dict[str, Any]:
        request = FireRequest.model_validate(raw)
        command = schedule_driver.TemporalFire(
            request.schedule_id, request.tenant, request.scheduled_at
        )
        try:
            fired = await asyncio.to_thread(schedule_driver.fire, self._services, command)
        except Unavailable as exc:
            # Transient: Temporal retries the activity; the insert is idempotent (CR-7).
            raise ApplicationError(str(exc), type="punctual.Unavailable") from None
        answer = FireAnswer(occurrence_id=fired.occurrence_id, state=fired.state)
        return answer.model_dump(mode="json")

    @activity.defn(name=SETTLE_ACTIVITY)
    async def await_follow_through(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Heartbeats until the occurrence's run has ended and been followed through (the
        runner's follow-through pass does that, once per occurrence), or it ended unrun."""
        request = SettleRequest.model_validate(raw)
        last_beat = 0.0
        while True:
            try:
                settled = await asyncio.to_thread(
                    schedule_driver.settled,
                    self._services,
                    request.tenant,
                    request.schedule_id,
                    request.occurrence_id,
                )
            except Unavailable:
                settled = None
            if settled is not None:
                with contextlib.suppress(Unavailable):
                    await asyncio.to_thread(
                        schedule_driver.heal, self._services, request.tenant, request.schedule_id
                    )
                answer = SettleAnswer(follow_through=settled.follow_through, state=settled.state)
                return answer.model_dump(mode="json")
            if time.monotonic() - last_beat >= 1.0:
                activity.heartbeat()
                last_beat = time.monotonic()
            await asyncio.sleep(SETTLE_POLL_SECONDS)
