"""Request bodies as the API accepts them; converted into use-case commands at the edge."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from punctual.usecases.schedules import CreateSchedule
from punctual.usecases.starts import CancelStart, CreateStart, RescheduleStart

Label = Annotated[str, StringConstraints(max_length=500)]


class _Body(BaseModel):
    """Unknown fields are refused, so a misspelt option never passes silently.

    Timestamps without an offset parse here and are refused by the use case with
    ``start_at_not_timezone_aware``, the code the contract names.
    """

    model_config = ConfigDict(extra="forbid")


class CreateStartBody(_Body):
    workflow: str = Field(min_length=1, max_length=200)
    input: Any
    business_request_id: str = Field(min_length=1, max_length=200)
    start_at: datetime
    time_zone: str | None = Field(default=None, max_length=64)
    workload_class: str = Field(min_length=1, max_length=64)
    attributes: dict[Annotated[str, StringConstraints(max_length=100)], Label] = Field(
        default_factory=dict, max_length=50
    )
    traceparent: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
    )

    def command(self) -> CreateStart:
        return CreateStart(
            workflow=self.workflow,
            input=self.input,
            business_request_id=self.business_request_id,
            start_at=self.start_at,
            workload_class=self.workload_class,
            time_zone=self.time_zone,
            attributes=dict(self.attributes),
            traceparent=self.traceparent,
        )


class RescheduleBody(_Body):
    version: int = Field(ge=1)
    start_at: datetime
    time_zone: str | None = Field(default=None, max_length=64)

    def command(self, start_id: str) -> RescheduleStart:
        return RescheduleStart(start_id, self.version, self.start_at, self.time_zone)


class CancelBody(_Body):
    version: int = Field(ge=1)
    reason: str | None = Field(default=None, max_length=300)

    def command(self, start_id: str) -> CancelStart:
        return CancelStart(start_id, self.version, self.reason)


class MemberBody(_Body):
    subject: str = Field(min_length=1, max_length=200)
    role: str


class TokenBody(_Body):
    subject: str = Field(min_length=1, max_length=200)
    expires_at: datetime | None = None


class EmptyBody(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CronSpecBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cron: str
    time_zone: str = "UTC"
    dst_gap: str | None = None
    dst_overlap: str | None = None


class IntervalSpecBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    interval_ms: int
    starts_at: datetime | None = None


class RegressionMetric(BaseModel):
    path: str
    better: str
    tolerance: float = 0.0


class RegressionBody(BaseModel):
    metrics: list[RegressionMetric]


class CreateScheduleBody(_Body):
    """``overlap`` and ``missed`` have no default: behaviour after downtime is a choice."""

    name: str = Field(min_length=1, max_length=200)
    workflow: str = Field(min_length=1, max_length=200)
    input: Any
    spec: dict[str, Any] = Field(
        json_schema_extra={
            "oneOf": [CronSpecBody.model_json_schema(), IntervalSpecBody.model_json_schema()]
        }
    )
    overlap: str | None = None
    missed: str | None = None
    max_catch_up: int = 10
    catch_up_window: float | None = None
    misfire_grace_ms: int = 60_000
    enabled: bool = True
    version_policy: str = "active_at_fire"
    workload_class: str = Field(default="standard", min_length=1, max_length=64)
    regression: dict[str, Any] | None = None

    def command(self) -> CreateSchedule:
        return CreateSchedule(
            name=self.name,
            workflow=self.workflow,
            input=self.input,
            spec=self.spec,
            overlap=self.overlap,
            missed=self.missed,
            workload_class=self.workload_class,
            max_catch_up=self.max_catch_up,
            catch_up_window=self.catch_up_window,
            misfire_grace_ms=self.misfire_grace_ms,
            enabled=self.enabled,
            version_policy=self.version_policy,
            regression=self.regression,
        )


class PatchScheduleBody(BaseModel):
    """``version`` plus the fields to change; which fields may change is the use case's rule."""

    model_config = ConfigDict(extra="allow")
    version: int = Field(ge=1)

    def changes(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class VersionBody(_Body):
    version: int = Field(ge=1)
