"""A run's W3C trace context as a Temporal header on its workflow execution (OS-1).

``Client.start_workflow`` takes no headers, so a client interceptor adds them: the engine
names the start's ``traceparent`` in a context variable around each start, and the
interceptor writes it as the ``traceparent`` header (a JSON string ``Payload``) of that
start. Temporal records it in the execution's ``WorkflowExecutionStarted`` event, where
tracing tools and interceptors on the Temporal side read it. The body itself gets it from
the run record (``RunContext.traceparent``), like on the local engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Interceptor,
    OutboundInterceptor,
    StartWorkflowInput,
    WorkflowHandle,
)
from temporalio.converter import default as default_converter

TRACEPARENT_HEADER = "traceparent"

_traceparent: ContextVar[str | None] = ContextVar("punctual_traceparent", default=None)


@contextlib.contextmanager
def starting_with(traceparent: str | None) -> Iterator[None]:
    """Starts made inside carry ``traceparent`` as their header (none if None)."""
    token = _traceparent.set(traceparent)
    try:
        yield
    finally:
        _traceparent.reset(token)


def header_payload(traceparent: str) -> Payload:
    return default_converter().payload_converter.to_payloads([traceparent])[0]


def header_value(payload: Payload) -> str:
    """The ``traceparent`` a header payload carries (as read back from the history)."""
    value = default_converter().payload_converter.from_payloads([payload], [str])[0]
    return str(value)


class TraceContextInterceptor(Interceptor):
    """Adds the ``traceparent`` header to every workflow start made under ``starting_with``."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Outbound(next)


class _Outbound(OutboundInterceptor):
    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        traceparent = _traceparent.get()
        if traceparent is not None:
            headers = {**input.headers, TRACEPARENT_HEADER: header_payload(traceparent)}
            input = dataclasses.replace(input, headers=headers)
        return await super().start_workflow(input)
