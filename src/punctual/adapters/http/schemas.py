"""Request bodies as the API accepts them, converted into use-case commands at the edge.
What each route answers is documented in ``punctual.adapters.http.openapi``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictStr,
    StringConstraints,
    create_model,
)

from punctual.domain.calendar_timeline import MAX_SPECS
from punctual.domain.webhooks import MAX_URL_LENGTH
from punctual.usecases.kernel.paging import BIGINT_MAX
from punctual.usecases.outbound.webhooks import (
    MAX_EVENTS,
    MAX_SECRET_LENGTH,
    CreateWebhook,
    UpdateWebhook,
)
from punctual.usecases.recurring.schedule_controls import BackfillSchedule, TriggerSchedule
from punctual.usecases.recurring.schedule_fields import (
    MAX_SPAN_MS,
    NAME_MAX,
    REQUIRED,
    CreateSchedule,
    UpsertByName,
    decode_create,
    decode_upsert,
    in_body_order,
)
from punctual.usecases.recurring.transfer import TransferSchedule
from punctual.usecases.scheduled.starts import CancelStart, CreateStart, RescheduleStart
from punctual.usecases.tenancy.holds import MAX_REASON_LENGTH, PlaceHold
from punctual.usecases.tenancy.identity import SUBJECT_MAX

Label = Annotated[str, StringConstraints(max_length=500)]

# Bounds that keep numbers inside what the store's columns and Python's ``datetime`` and
# ``timedelta`` hold, so an absurd value is a 422 and never an overflow (a 500, SPEC FT-7).
# A resource's version, as the contract has it: a JSON integer, 1 to a 64-bit column's maximum.
Version = Annotated[int, Field(strict=True, ge=1, le=BIGINT_MAX)]


def representable_in_utc(value: datetime) -> datetime:
    """An instant whose UTC value is a ``datetime`` (years 1 to 9999): ``0001-01-01T00:00
    +01:00`` or ``9999-12-31T23:59-01:00`` would overflow when stored. Naive values pass
    (the use case refuses them with its own code)."""
    if value.tzinfo is not None:
        try:
            value.astimezone(UTC)
        except OverflowError:
            raise ValueError("the instant in UTC must fall within the years 1 to 9999") from None
    return value


Instant = Annotated[datetime, AfterValidator(representable_in_utc)]


class _Body(BaseModel):
    """Unknown fields are refused, so a misspelt option never passes silently.

    Timestamps without an offset parse here and are refused by the use case with
    ``start_at_not_timezone_aware``, the code the contract names.
    """

    model_config = ConfigDict(extra="forbid")


_CREATE_START_FIELDS = tuple(f.name for f in fields(CreateStart))


class CreateStartBody(_Body):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "workflow": "echo",
                    "input": {"message": "hi"},
                    "business_request_id": "appt-42",
                    "start_at": "2036-12-01T07:00:00+01:00",
                    "time_zone": "Europe/Berlin",
                    "workload_class": "standard",
                    "attributes": {"customer": "c-17"},
                }
            ]
        },
    )

    workflow: str = Field(min_length=1, max_length=200)
    input: Any
    business_request_id: str = Field(min_length=1, max_length=200)
    start_at: Instant
    time_zone: str | None = Field(default=None, max_length=64)
    workload_class: str = Field(
        min_length=1,
        max_length=64,
        description="A class the host configures (API.md requires it on a start; the typed "
        "client and the CLI send `standard` when none is given).",
    )
    attributes: dict[Annotated[str, StringConstraints(max_length=100)], Label] = Field(
        default_factory=dict, max_length=50, json_schema_extra={"default": {}}
    )
    traceparent: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
    )

    def command(self) -> CreateStart:
        """The body's fields are the command's, by name (a batch item's key is not one)."""
        return CreateStart(**{name: getattr(self, name) for name in _CREATE_START_FIELDS})


MAX_BATCH_ITEMS = 500
IdempotencyKey = Annotated[
    str, StringConstraints(min_length=1, max_length=255, pattern=r"^[!-~]+$")
]


class BatchCreateItem(CreateStartBody):
    """A create body with the idempotency key its item is decided under (OS-11)."""

    model_config = ConfigDict(
        extra="forbid",
        title="BatchCreateItem",
        json_schema_extra={
            "examples": [
                {
                    "idempotency_key": "appt-42-reminder",
                    "workflow": "echo",
                    "input": {"message": "hi"},
                    "business_request_id": "appt-42",
                    "start_at": "2036-12-01T07:00:00+01:00",
                    "workload_class": "standard",
                }
            ]
        },
    )

    idempotency_key: IdempotencyKey


class BatchCreateBody(_Body):
    """``POST …/scheduled-starts/batch``: 1-500 creates, each with its own key."""

    model_config = ConfigDict(extra="forbid", title="BatchCreateBody")

    items: list[BatchCreateItem] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class RescheduleBody(_Body):
    version: Version
    start_at: Instant
    time_zone: str | None = Field(default=None, max_length=64)

    def command(self, start_id: str) -> RescheduleStart:
        return RescheduleStart(start_id, self.version, self.start_at, self.time_zone)


class CancelBody(_Body):
    version: Version
    reason: str | None = Field(default=None, max_length=300)

    def command(self, start_id: str) -> CancelStart:
        return CancelStart(start_id, self.version, self.reason)


class MemberBody(_Body):
    subject: str = Field(min_length=1, max_length=SUBJECT_MAX)
    role: str = Field(json_schema_extra={"enum": ["admin", "member", "viewer"]})


class TokenBody(_Body):
    subject: str = Field(min_length=1, max_length=SUBJECT_MAX)
    expires_at: Instant | None = None


class CronSpecBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cron: str
    time_zone: str = "UTC"
    dst_gap: str | None = None
    dst_overlap: str | None = None


class IntervalSpecBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    interval_ms: Annotated[int, Field(strict=True, le=MAX_SPAN_MS)]
    starts_at: Instant | None = None


class BusinessDaySpecBody(BaseModel):
    """The N-th business day of each month (1 to 23, or -1 to -23 from its end) at a
    local time; needs the schedule's ``calendar``."""

    model_config = ConfigDict(extra="forbid")
    business_day: int = Field(ge=-23, le=23)
    at: str = Field(pattern=r"^[0-2][0-9]:[0-5][0-9]$")
    time_zone: str = "UTC"
    dst_gap: str | None = None
    dst_overlap: str | None = None


def check_spec(spec: Any) -> Any:
    """Check the types and bounds of an interval spec; the rest is the use case's to judge.

    ``interval_ms`` must be a JSON integer of at most ten years (a float such as ``1e20``
    or a huge integer would overflow a ``timedelta``) and ``starts_at`` a string or null,
    an instant that UTC can hold.
    The minimum interval (``interval_too_short``) stays the use case's rule, with its code.
    """
    if isinstance(spec, dict) and "interval_ms" in spec:
        interval = spec["interval_ms"]
        if isinstance(interval, bool) or not isinstance(interval, int) or interval > MAX_SPAN_MS:
            raise ValueError(
                f"spec.interval_ms must be a whole number of milliseconds up to {MAX_SPAN_MS}"
            )
        starts_at = spec.get("starts_at")
        if not isinstance(starts_at, str | None):
            raise ValueError("spec.starts_at must be an RFC 3339 timestamp with an offset")
        try:
            parsed = datetime.fromisoformat(starts_at) if starts_at is not None else None
        except ValueError:
            parsed = None  # not a timestamp: the use case refuses it with its own message
        if parsed is not None:
            representable_in_utc(parsed)
    return spec


Spec = Annotated[dict[str, Any], AfterValidator(check_spec)]


def documented_as(schema: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """Replace a field's generated schema with ``schema``: for values the route or the use
    case judges itself (with the contract's codes), the document states what they must be."""

    def replace(generated: dict[str, Any]) -> None:
        generated.clear()
        generated.update(schema)

    return replace


class RegressionMetricBody(_Body):
    path: str = Field(min_length=1)
    """Where the number is in the run's result, e.g. ``metrics.score``."""
    better: Literal["higher", "lower"]
    tolerance: float = Field(default=0.0, ge=0)


class RegressionBody(_Body):
    """Compare each completed run's metrics with the previous completed run's (CR-4)."""

    metrics: list[RegressionMetricBody] = Field(min_length=1)


_REGRESSION = documented_as(
    {
        "anyOf": [{"$ref": "#/components/schemas/RegressionBody"}, {"type": "null"}],
        "default": None,
    }
)


def _on_the_wire(name: str, kind: Any, *, edit: bool) -> tuple[Any, dict[str, Any]]:
    """A schedule field's type in a body and its schema's extras: an instant must fit UTC,
    a spec's types and bounds are checked here (``check_spec``) and documented as its two
    forms on a create, and a regression policy is documented by its body model."""
    one_of = [
        CronSpecBody.model_json_schema(),
        IntervalSpecBody.model_json_schema(),
        BusinessDaySpecBody.model_json_schema(),
    ]
    if name == "spec":
        # Not required (``specs`` may say it instead), never null: one of its three forms.
        return Spec, {} if edit else {"json_schema_extra": documented_as({"oneOf": one_of})}
    if name == "specs":
        many = Annotated[list[Spec], Field(min_length=1, max_length=MAX_SPECS)]
        # Untitled: a generated client names them apart from ``spec``'s three forms.
        untitled = [{k: v for k, v in form.items() if k != "title"} for form in one_of]
        listed = {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_SPECS,
            "items": {"oneOf": untitled},
        }
        return many, {} if edit else {"json_schema_extra": documented_as(listed)}
    if name == "regression":
        return kind, {"json_schema_extra": _REGRESSION}
    return (Instant if kind is datetime else kind), {}


def _strict(kind: Any) -> Any:
    """``kind`` refusing any JSON value of another kind (``"5"`` for a number, ``1`` for a
    boolean); a number of seconds may be an integer or a float."""
    base, *bounds = get_args(kind) if get_origin(kind) is Annotated else (kind,)
    if base is float:
        return Annotated[int, Strict(), *bounds] | Annotated[float, Strict(), *bounds]
    if base in (str, int, bool):
        return Annotated[base, Strict(), *bounds]
    return kind


def _schedule_fields(*, edit: bool) -> dict[str, Any]:
    """The fields of a schedule body, from the table of schedule fields: a create's take
    their create defaults; an edit's are all optional, strictly typed, ``None`` unsent."""
    declared: dict[str, Any] = {}
    for name, kind, default in in_body_order():
        wire, extras = _on_the_wire(name, kind, edit=edit)
        if edit:
            wire = _strict(wire)
        if (edit or default is None) and wire is not Any:
            wire = wire | None
        value = None if edit else (... if default is REQUIRED else default)
        declared[name] = (wire, Field(value, **extras))
    return declared


_ScheduleFields: type[BaseModel] = create_model(
    "_ScheduleFields", __base__=_Body, **_schedule_fields(edit=False)
)
_ScheduleEdit: type[BaseModel] = create_model(
    "_ScheduleEdit", version=(Version, ...), **_schedule_fields(edit=True)
)


class CreateScheduleBody(_ScheduleFields):
    """``overlap`` and ``missed`` have no default: behaviour after downtime is a choice."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "name": "nightly-scores",
                    "workflow": "score",
                    "input": {"score": 0.9},
                    "spec": {"cron": "30 2 * * 1-5", "time_zone": "America/New_York"},
                    "overlap": "skip",
                    "missed": "catch_up",
                    "max_catch_up": 10,
                    "catch_up_window": 86400,
                    "misfire_grace_ms": 60000,
                    "enabled": True,
                    "version_policy": "active_at_fire",
                    "workload_class": "standard",
                    "regression": {
                        "metrics": [{"path": "metrics.score", "better": "higher", "tolerance": 0.0}]
                    },
                },
                {
                    "name": "every-minute",
                    "workflow": "echo",
                    "input": {"message": "tick"},
                    "spec": {"interval_ms": 60000},
                    "overlap": "buffer_one",
                    "missed": "skip",
                },
            ]
        },
    )

    def command(self) -> CreateSchedule:
        return decode_create(self.model_dump(exclude_unset=True))


class PutScheduleBody(CreateScheduleBody):
    """``PUT …/schedules/by-name/{name}``: the create body, its ``name`` optional (the path
    names the schedule), with an optional ``version`` the schedule must still be at. An
    omitted ``enabled`` (or ``source``) keeps the schedule's own; other omitted fields
    take their create defaults."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "workflow": "score",
                    "input": {"score": 0.9},
                    "spec": {"cron": "30 2 * * 1-5", "time_zone": "America/New_York"},
                    "overlap": "skip",
                    "missed": "catch_up",
                    "source": "deploy/schedules.toml",
                }
            ]
        },
    )

    name: str | None = Field(default=None, min_length=1, max_length=NAME_MAX)
    version: Version | None = None

    def command(self, name: str) -> UpsertByName:  # type: ignore[override]
        sent = {field: getattr(self, field) for field in self.model_fields_set - {"version"}}
        return decode_upsert(name, sent, self.version)


class TriggerBody(_Body):
    """``POST …/schedules/{id}/trigger`` (the body may be omitted)."""

    overlap: StrictStr | None = Field(
        default=None, json_schema_extra={"enum": ["skip", "buffer_one", "allow_all", None]}
    )
    """The overlap policy this occurrence is dispatched under; default: the schedule's."""

    def command(self, schedule_id: str) -> TriggerSchedule:
        return TriggerSchedule(schedule_id, self.overlap)


class BackfillBody(_Body):
    """``POST …/schedules/{id}/backfill``: the fire times in ``(from, to]``."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {"from": "2026-11-22T00:00:00Z", "to": "2026-11-29T00:00:00Z"},
                {"from": "2026-11-22T00:00:00Z", "to": "2026-11-29T00:00:00Z", "overlap": "skip"},
            ]
        },
    )

    start: Instant = Field(alias="from")
    """Exclusive."""
    to: Instant
    """Inclusive; not in the future."""
    overlap: StrictStr | None = Field(
        default=None, json_schema_extra={"enum": ["skip", "buffer_one", "allow_all", None]}
    )
    """Default: they dispatch one after another, in ``occurrence_at`` order."""

    def command(self, schedule_id: str) -> BackfillSchedule:
        return BackfillSchedule(schedule_id, self.start, self.to, self.overlap)


class PatchScheduleBody(_ScheduleEdit):
    """``version`` plus the fields to change; which fields may change is the use case's rule.

    The editable fields are typed strictly (a JSON value of the field's own kind, never
    coerced), so a ``"name": 5`` is a 422 here and the use case receives what was sent.
    """

    model_config = ConfigDict(extra="allow")
    if TYPE_CHECKING:  # declared first, in the generated fields, so it leads the schema
        version: int

    def changes(self) -> dict[str, Any]:
        """The fields the request sent (the ``None`` defaults are never applied), and the
        unknown ones, which the use case names in its refusal."""
        sent = {name: getattr(self, name) for name in self.model_fields_set - {"version"}}
        return sent | dict(self.model_extra or {})


class VersionBody(_Body):
    version: Version


class TransferBody(_Body):
    """``POST …/schedules/{id}/transfer``: the schedule's current version and its new owner."""

    version: Version
    to: str = Field(min_length=1, max_length=200)

    def command(self, schedule_id: str) -> TransferSchedule:
        return TransferSchedule(schedule_id, self.version, self.to)


EventKinds = Annotated[list[StrictStr], Field(max_length=MAX_EVENTS)]
WebhookSecret = Annotated[StrictStr, Field(min_length=1, max_length=MAX_SECRET_LENGTH)]


class CreateWebhookBody(_Body):
    """``events`` omitted, null or empty: every kind, kinds added later included."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "url": "https://hooks.example.com/services/T000/B000/XXXX",
                    "events": ["regression", "schedule_auto_disabled"],
                    "secret": "a shared secret for X-Punctual-Signature",
                }
            ]
        },
    )

    url: StrictStr = Field(min_length=1, max_length=MAX_URL_LENGTH)
    events: EventKinds | None = None
    secret: WebhookSecret | None = None

    def command(self) -> CreateWebhook:
        events = tuple(self.events) if self.events is not None else None
        return CreateWebhook(self.url, events, self.secret)


class PatchWebhookBody(_Body):
    """Only the fields sent change. ``secret``: a new value rotates it, ``null`` removes
    it (deliveries then go unsigned). ``events``: ``null`` or empty means every kind."""

    url: StrictStr | None = Field(default=None, min_length=1, max_length=MAX_URL_LENGTH)
    events: EventKinds | None = None
    secret: WebhookSecret | None = None

    def command(self, webhook_id: str) -> UpdateWebhook:
        sent = {name: getattr(self, name) for name in self.model_fields_set}
        if sent.get("events") is not None:
            sent["events"] = tuple(sent["events"])
        return UpdateWebhook(webhook_id, sent)


class PlaceHoldBody(_Body):
    """``POST …/holds``: what to keep from retention, and why."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "subject_kind": "schedule",
                    "subject_id": "sch_3b1d9c0e7a5f2e8d4c6b0a19",
                    "reason": "incident 2026-118: keep the nightly runs",
                },
                {"subject_kind": "tenant", "reason": "legal hold"},
            ]
        },
    )

    subject_kind: StrictStr = Field(
        max_length=20, json_schema_extra={"enum": ["start", "schedule", "run", "tenant"]}
    )
    subject_id: StrictStr | None = Field(default=None, min_length=1, max_length=200)
    """Required for every kind but ``tenant`` (a tenant hold names the caller's tenant)."""
    reason: StrictStr = Field(min_length=1, max_length=MAX_REASON_LENGTH)

    def command(self) -> PlaceHold:
        return PlaceHold(self.subject_kind, self.subject_id, self.reason)


REQUEST_BODIES: tuple[type[BaseModel], ...] = (
    CreateStartBody,
    BatchCreateBody,
    RescheduleBody,
    CancelBody,
    MemberBody,
    TokenBody,
    CreateScheduleBody,
    PatchScheduleBody,
    PutScheduleBody,
    TriggerBody,
    BackfillBody,
    RegressionBody,
    VersionBody,
    TransferBody,
    CreateWebhookBody,
    PatchWebhookBody,
    PlaceHoldBody,
)
"""The bodies the routes parse themselves (after replay and authentication, in the
contract's order), named as component schemas so that generated clients can type them."""


def request_body_ref(model: type[BaseModel]) -> dict[str, Any]:
    """A ``requestBody`` pointing at ``model``'s component schema."""
    if model not in REQUEST_BODIES:
        raise ValueError(f"{model.__name__} is not in REQUEST_BODIES")
    return {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
        },
    }
