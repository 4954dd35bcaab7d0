"""The fire workflow a Temporal Schedule starts: fire one occurrence, then live until its
run has ended and been followed through, so Temporal's overlap policy sees the run.

Deterministic: it only runs two activities. The scheduled time comes from the
``TemporalScheduledStartTime`` search attribute Temporal sets on scheduled workflows.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    from punctual.adapters.drivers.temporal_schedules.messages import (
        FIRE_ACTIVITY,
        FIRE_WORKFLOW,
        SETTLE_ACTIVITY,
        FireAnswer,
        FireArgs,
        FireRequest,
        SettleAnswer,
        SettleRequest,
    )

SCHEDULED_START = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
SETTLE_HEARTBEAT = timedelta(seconds=30)


@workflow.defn(name=FIRE_WORKFLOW)
class PunctualFire:
    @workflow.run
    async def run(self, raw: dict[str, Any]) -> dict[str, Any]:
        args = FireArgs.model_validate(raw)
        info = workflow.info()
        scheduled_at = info.typed_search_attributes.get(SCHEDULED_START) or info.start_time
        request = FireRequest(
            schedule_id=args.schedule_id, tenant=args.tenant, scheduled_at=scheduled_at
        )
        answered = await workflow.execute_activity(
            FIRE_ACTIVITY,
            request.model_dump(mode="json"),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
            result_type=dict,
        )
        fired = FireAnswer.model_validate(answered)
        if fired.occurrence_id is None:
            return fired.model_dump(mode="json")
        settle = SettleRequest(
            occurrence_id=fired.occurrence_id, schedule_id=args.schedule_id, tenant=args.tenant
        )
        settled = await workflow.execute_activity(
            SETTLE_ACTIVITY,
            settle.model_dump(mode="json"),
            # Follow-through gives up at its own deadline (CR-5); this bounds the wait.
            start_to_close_timeout=timedelta(days=2),
            heartbeat_timeout=SETTLE_HEARTBEAT,
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
            result_type=dict,
        )
        return SettleAnswer.model_validate(settled).model_dump(mode="json")
