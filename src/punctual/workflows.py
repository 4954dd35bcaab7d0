"""Registering workflows: the ``App`` object and the ``RunContext`` a run sees.

A workflow is a plain Python function, sync or async, registered with a name, a
version and an input model (pydantic) or a JSON Schema. Workers import the app by
reference (``module:attr``), so the same object defines what a worker can run and
what it declares as loaded.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar

from pydantic import BaseModel, ValidationError

from punctual.domain.inputs import location, named_keys, schema_problems
from punctual.errors import ConfigurationError

WorkflowFn = TypeVar("WorkflowFn", bound=Callable[..., Any])

DEFAULT_EXECUTION_TIMEOUT_SECONDS = 3600.0


class Canceled(Exception):
    """Raise from a workflow to end its run ``canceled`` after a cooperative cancel."""


class InputRejected(Exception):
    """The worker refused a run's input before its body began: the run fails
    ``input_rejected``. The message names schema rules and places only (FT-4)."""


class Occurrence(TypedDict):
    """A schedule's occurrence as its run sees it (``RunContext.occurrence``); instants in
    RFC 3339, as the API shows them."""

    schedule_id: str
    occurrence_id: str
    occurrence_at: str
    """The instant the schedule's spec named (or the trigger's or backfill's)."""
    scheduled_at: str | None
    """When it was due: ``occurrence_at`` with jitter, or later for a catch-up."""
    origin: str
    """``schedule``, ``trigger`` or ``backfill``."""
    previous_completed_run_id: str | None
    """The schedule's latest run that had completed, among earlier occurrences, when this
    one was dispatched."""


class RunContext:
    """What a running workflow may know about its run, and how it cooperates with cancel.

    ``cancel_requested`` turns true when someone cancels the run; ``sleep`` and
    ``sleep_async`` return early (``False``) when that happens so a workflow never
    sleeps through a cancel. ``traceparent`` is the W3C trace context the run's start
    was given (None without one), so a body can continue the caller's trace (OS-1).
    ``occurrence`` says which occurrence of which schedule the run is (None for a
    one-off start).
    """

    def __init__(
        self,
        run_id: str,
        attempt: int,
        origin: Mapping[str, Any],
        cancel_event: threading.Event | None = None,
        traceparent: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.origin: Mapping[str, Any] = dict(origin)
        self.traceparent = traceparent
        self._cancel = cancel_event or threading.Event()

    @property
    def occurrence(self) -> Occurrence | None:
        """The schedule's occurrence this run is (RS-10): None for a one-off start."""
        origin = self.origin
        if origin.get("source") != "schedule":
            return None
        return Occurrence(
            schedule_id=str(origin["schedule_id"]),
            occurrence_id=str(origin["id"]),
            occurrence_at=str(origin["occurrence_at"]),
            scheduled_at=origin.get("scheduled_at"),
            origin=str(origin.get("occurrence_origin", "schedule")),
            previous_completed_run_id=origin.get("previous_completed_run_id"),
        )

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def raise_if_canceled(self) -> None:
        if self._cancel.is_set():
            raise Canceled(f"run {self.run_id} was canceled")

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; ``False`` if a cancel cut the sleep short."""
        return not self._cancel.wait(max(0.0, seconds))

    async def sleep_async(self, seconds: float) -> bool:
        """Async ``sleep``: polls the cancel flag so the event loop stays free."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, seconds)
        while not self._cancel.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return True
            await asyncio.sleep(min(remaining, 0.05))
        return False


@dataclass(frozen=True)
class WorkflowDefinition:
    """One registered (name, version) with what is needed to validate and run it."""

    name: str
    version: str
    fn: Callable[..., Any]
    input_schema: dict[str, Any]
    input_model: type[BaseModel] | None
    artifact: str
    execution_timeout_seconds: float
    wants_context: bool
    is_async: bool

    def parse_input(self, payload: Any) -> Any:
        """The body's argument, judged by the input schema like acceptance and dispatch
        (decision 0004); ``InputRejected`` with a message that quotes no input."""
        problems = schema_problems(self.input_schema, payload)
        if problems:
            raise InputRejected(
                f"the input does not validate against {self.name} version {self.version}: "
                + "; ".join(problems)
            )
        if self.input_model is None:
            return payload
        try:
            return self.input_model.model_validate(payload)
        except ValidationError as exc:
            # pydantic's own text quotes the input (``input_value=...``): render from the
            # error's place and type only.
            raise InputRejected(
                f"the input model of {self.name} version {self.version} refuses input its "
                f"JSON Schema accepts: {'; '.join(self._model_problems(exc))}; put the rule "
                "in the schema (json_schema_extra) or check it in the body"
            ) from None

    def _model_problems(self, exc: ValidationError) -> list[str]:
        names = named_keys(self.input_schema)
        problems = (
            f"{location(error['loc'], names)}: {error['type']}"
            for error in exc.errors(include_url=False, include_context=False, include_input=False)
        )
        return list(dict.fromkeys(problems))

    def invoke(self, payload: Any, ctx: RunContext) -> Any:
        """Run the body in this thread and return a JSON-ready result."""
        argument = self.parse_input(payload)
        args = (argument, ctx) if self.wants_context else (argument,)
        result = asyncio.run(self.fn(*args)) if self.is_async else self.fn(*args)
        if isinstance(result, BaseModel):
            return result.model_dump(mode="json")
        return result


@dataclass
class App:
    """A set of workflows that a worker loads; import it as ``module:attr``.

    ``build_id`` names the artifact for every version (for example a container image
    tag); without it each version's artifact is a hash of its function's source.
    """

    name: str = "app"
    build_id: str | None = None
    _definitions: dict[tuple[str, str], WorkflowDefinition] = field(default_factory=dict)

    def workflow(
        self,
        name: str,
        version: str,
        *,
        input: type[BaseModel] | Mapping[str, Any] | None = None,
        execution_timeout_seconds: float = DEFAULT_EXECUTION_TIMEOUT_SECONDS,
    ) -> Callable[[WorkflowFn], WorkflowFn]:
        """Register the decorated function as workflow ``name`` at ``version``."""

        def register(fn: WorkflowFn) -> WorkflowFn:
            key = (name, version)
            if key in self._definitions:
                raise ConfigurationError(f"workflow {name} version {version} is registered twice")
            if not execution_timeout_seconds > 0:  # NaN too
                # A run without a finite, positive timeout could never be handed to a slot
                # (and would hold its schedule's overlap policy for ever, WF-7).
                raise ConfigurationError(
                    f"workflow {name} version {version}: execution_timeout_seconds must be "
                    f"greater than 0 (seconds), not {execution_timeout_seconds!r}"
                )
            model: type[BaseModel] | None = None
            if isinstance(input, type) and issubclass(input, BaseModel):
                model = input
                schema = input.model_json_schema()
            elif input is None:
                schema = {"type": "object"}
            else:
                schema = dict(input)
            parameters = inspect.signature(fn).parameters
            self._definitions[key] = WorkflowDefinition(
                name=name,
                version=version,
                fn=fn,
                input_schema=schema,
                input_model=model,
                artifact=self.build_id or _source_hash(fn, name, version),
                execution_timeout_seconds=execution_timeout_seconds,
                wants_context=len(parameters) >= 2,
                is_async=inspect.iscoroutinefunction(fn),
            )
            return fn

        return register

    @property
    def definitions(self) -> list[WorkflowDefinition]:
        return list(self._definitions.values())

    def get(self, name: str, version: str) -> WorkflowDefinition | None:
        return self._definitions.get((name, version))


def _source_hash(fn: Callable[..., Any], name: str, version: str) -> str:
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = f"{fn.__module__}.{fn.__qualname__}"
    digest = hashlib.sha256(f"{name}\0{version}\0{source}".encode()).hexdigest()
    return f"sha256:{digest[:16]}"


def load_app(reference: str) -> App:
    """Import ``module:attr`` and return the App it names, with an actionable error."""
    module_name, _, attr = reference.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"app reference {reference!r} must look like 'module:attr'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import app module {module_name!r}: {exc}") from exc
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        raise ConfigurationError(f"{reference!r} is not a punctual App")
    return app
