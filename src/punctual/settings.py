"""Host configuration: one TOML file, ``PUNCTUAL_*`` environment, CLI flags.

Precedence is CLI > environment > file > defaults. Everything is validated once, at
startup, and an error names the key. Only the composition root reads settings.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from punctual.errors import ConfigurationError, HostUnavailable


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QuotaSettings(_Section):
    controller: Literal["local", "postgres", "none"] | None = None


class TenantLimits(_Section):
    allowed_workload_classes: list[str] = Field(
        default_factory=lambda: ["interactive", "standard", "batch"]
    )
    max_input_bytes: int = Field(default=65536, ge=2)
    max_pending_starts: int = Field(default=10000, ge=0)
    max_schedules: int = Field(default=1000, ge=0)
    max_pending_by_class: dict[str, int] = Field(default_factory=dict)


class TenantOverrides(_Section):
    allowed_workload_classes: list[str] | None = None
    max_input_bytes: int | None = Field(default=None, ge=2)
    max_pending_starts: int | None = Field(default=None, ge=0)
    max_schedules: int | None = Field(default=None, ge=0)
    max_pending_by_class: dict[str, int] | None = None
    retention_keep_seconds: float | None = Field(default=None, gt=0)
    """This tenant's retention window instead of ``retention.keep_seconds``."""


class WorkloadClass(_Section):
    task_queue: str = Field(min_length=1)
    priority: int = Field(ge=1, le=5)


def _default_classes() -> dict[str, WorkloadClass]:
    return {
        "interactive": WorkloadClass(task_queue="interactive", priority=1),
        "standard": WorkloadClass(task_queue="standard", priority=3),
        "batch": WorkloadClass(task_queue="batch", priority=5),
    }


class RunnerSettings(_Section):
    page_size: int = Field(default=500, ge=1, le=10000)
    lease_seconds: float = Field(default=30, gt=0)
    max_idle_seconds: float = Field(default=1.0, gt=0)
    """Longest the runner sleeps without looking, as a backstop to wake-ups."""


class WorkerSettings(_Section):
    slots: int = Field(default=4, ge=1, le=256)
    heartbeat_seconds: float = Field(default=5, gt=0)
    liveness_seconds: float = Field(default=20, gt=0)
    """A worker that has not heartbeated for this long is treated as gone."""
    pending_timeout_seconds: float = Field(default=3600, gt=0)
    max_execution_timeout_seconds: float = Field(default=86400, gt=0)


class CodecSettings(_Section):
    active_key: str | None = None
    key_file: str | None = None
    refresh_seconds: float = Field(default=5, gt=0, le=10)
    """How often a process reports its keys and re-reads the store's active key: an
    activation reaches every live process within this time (API.md promises 10 s)."""
    liveness_seconds: float = Field(default=30, gt=0)
    """A process that has not reported its keys for this long is not live: it no longer
    blocks an activation."""

    @model_validator(mode="after")
    def _beats_within_liveness(self) -> CodecSettings:
        # Two beats per liveness window: one slow beat must not make a process look gone.
        if self.liveness_seconds < 2 * self.refresh_seconds:
            raise ValueError(
                f"codec.liveness_seconds ({self.liveness_seconds:g}) must be at least twice "
                f"codec.refresh_seconds ({self.refresh_seconds:g})"
            )
        return self


class TemporalSettings(_Section):
    address: str = "127.0.0.1:7233"
    namespace: str = "default"


class ScheduleSettings(_Section):
    follow_through_deadline_seconds: float = Field(default=14_400, gt=0)
    """How long follow-through waits for an occurrence's run to end (SPEC CR-5)."""


class WebhookSettings(_Section):
    allowed_cidrs: list[str] | None = None
    """Private ranges deliveries may reach; None means the profile's default (the local
    profile allows loopback and private ranges, production none)."""

    @field_validator("allowed_cidrs")
    @classmethod
    def _valid_networks(cls, value: list[str] | None) -> list[str] | None:
        for cidr in value or []:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(
                    "webhooks.allowed_cidrs holds an entry that is not an IP network "
                    "(write it like 10.0.0.0/8 or fd00::/8)"
                ) from None
        return value


MIN_INTERNAL_TOKEN_LENGTH = 32


def listen_address(value: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:8081`` for IPv6) as (host, port), or a ValueError naming
    ``internal_listen``."""
    host, _, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"internal_listen must be host:port, such as 127.0.0.1:8081 (not {value!r})"
        )
    return host, int(port)


_DAY_SECONDS = 86_400


@functools.cache
def _warn_retention_days() -> None:
    """Once per process, however many times settings are loaded."""
    logging.getLogger("punctual").warning(
        "event=deprecated_setting key=retention.days note=use retention.keep_seconds "
        "(it wins when both are set)"
    )


class RetentionSettings(_Section):
    """RT-1: terminal records older than ``keep_seconds`` are swept every
    ``sweep_interval_seconds``; audit entries have their own, longer window."""

    keep_seconds: float = Field(default=2_592_000, gt=0)
    sweep_interval_seconds: float = Field(default=300, gt=0)
    audit_keep_seconds: float = Field(default=31_536_000, gt=0)
    """How long audit entries are kept (one year), whatever a tenant's window."""
    batch_size: int = Field(default=500, ge=1, le=10_000)
    """Records a sweep removes per short transaction."""
    days: float | None = Field(default=None, gt=0)
    """Deprecated: ``keep_seconds`` in days, used only when ``keep_seconds`` is not set."""

    @model_validator(mode="after")
    def _days_as_keep_seconds(self) -> RetentionSettings:
        if self.days is None:
            return self
        if "keep_seconds" not in self.model_fields_set:
            self.keep_seconds = self.days * _DAY_SECONDS
        _warn_retention_days()
        return self


class LoggingSettings(_Section):
    """What a host process (``serve``, ``worker``) writes to stderr (SPEC OP-4)."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """The least severe lines written; uvicorn's own lines stay at WARNING and above."""
    format: Literal["text", "json"] = "text"
    """``text``: ``time LEVEL logger event=name key=value …``; ``json``: one JSON object
    per line, the ``key=value`` fields of an event line as keys of their own."""
    access_log: bool = False
    """One line per HTTP request (uvicorn's access log, logger ``uvicorn.access``), at
    INFO, written whatever ``level`` is."""

    @field_validator("level", mode="before")
    @classmethod
    def _any_case(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PUNCTUAL_",
        env_nested_delimiter="__",
        extra="forbid",
        case_sensitive=False,
    )

    profile: Literal["local", "production"] = "local"
    database_url: str = "sqlite:///punctual.db"
    database_pool_size: int = Field(default=16, ge=1, le=500)
    """Connections each process keeps to the database once it needed them; PostgreSQL
    opens 4 more in a burst. Size the server's ``max_connections`` from it."""
    engine: Literal["local", "temporal"] = "local"
    driver: Literal["sql", "temporal_schedules"] = "sql"
    """What fires schedules (CR-6): the runner's generation pass, or Temporal Schedules."""
    api_wait_seconds: float = Field(default=5, gt=0, le=120)
    auth_cache_seconds: float = Field(default=2, ge=0, le=60)
    """How long a process trusts a bearer token it checked (0: never): a revoked or expired
    token, or a member's new role, takes effect within it on every process."""
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    internal_token: SecretStr | None = None
    """The host's token for ``/internal/…`` (``X-Internal-Token``); without it the tree
    does not exist."""
    internal_listen: str | None = None
    """``host:port`` serving ``/internal/…`` alone; the API's address then has none."""
    quota: QuotaSettings = Field(default_factory=QuotaSettings)
    tenant_defaults: TenantLimits = Field(default_factory=TenantLimits)
    tenants: dict[str, TenantOverrides] = Field(default_factory=dict)
    workload_classes: dict[str, WorkloadClass] = Field(default_factory=_default_classes)
    runner: RunnerSettings = Field(default_factory=RunnerSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    codec: CodecSettings = Field(default_factory=CodecSettings)
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    schedules: ScheduleSettings = Field(default_factory=ScheduleSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)

    @field_validator("workload_classes", mode="before")
    @classmethod
    def _merge_classes(cls, value: Any) -> Any:
        """A file's classes add to or replace the built-in ones by name; the others stay."""
        if isinstance(value, dict):
            return {**{k: v.model_dump() for k, v in _default_classes().items()}, **value}
        return value

    @field_validator("internal_token")
    @classmethod
    def _long_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_INTERNAL_TOKEN_LENGTH:
            raise ValueError(
                f"internal_token must be at least {MIN_INTERNAL_TOKEN_LENGTH} characters "
                "(make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        return value

    @field_validator("internal_listen")
    @classmethod
    def _host_and_port(cls, value: str | None) -> str | None:
        if value is not None:
            listen_address(value)
        return value

    def internal_address(self) -> tuple[str, int] | None:
        """``internal_listen`` as (host, port), or None when the tree shares the API's."""
        return listen_address(self.internal_listen) if self.internal_listen else None

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.internal_listen is not None and self.internal_token is None:
            raise ValueError(
                "internal_listen is set but internal_token is not: without a token there "
                "are no internal routes to serve; set internal_token or remove internal_listen"
            )
        if self.driver == "temporal_schedules" and self.engine != "temporal":
            raise ValueError(
                'driver = "temporal_schedules" needs engine = "temporal" (engine is '
                f'"{self.engine}"): set engine = "temporal" or driver = "sql"'
            )
        for name, overrides in self.tenants.items():
            for cls in overrides.allowed_workload_classes or []:
                if cls not in self.workload_classes:
                    raise ValueError(
                        f"tenants.{name}.allowed_workload_classes names {cls!r}, "
                        "which is not in [workload_classes]"
                    )
        if self.worker.heartbeat_seconds > self.runner.lease_seconds / 3:
            # A worker renews its runs' leases on each heartbeat and stops a body it could
            # not renew before the lease ends (FT-2): three beats per lease leave room for
            # one to fail without stopping bodies that are fine.
            raise ValueError(
                f"worker.heartbeat_seconds ({self.worker.heartbeat_seconds:g}) must be at "
                f"most a third of runner.lease_seconds ({self.runner.lease_seconds:g}); "
                "lower worker.heartbeat_seconds or raise runner.lease_seconds"
            )
        return self

    def limits_for(self, tenant: str) -> TenantLimits:
        """The tenant's effective limits: its overrides on top of ``tenant_defaults``."""
        overrides = self.tenants.get(tenant)
        if overrides is None:
            return self.tenant_defaults
        merged = self.tenant_defaults.model_dump()
        merged.update(overrides.model_dump(exclude_none=True, exclude={"retention_keep_seconds"}))
        return TenantLimits.model_validate(merged)

    def retention_overrides(self) -> dict[str, float]:
        """Tenants with their own retention window (``[tenants.NAME] retention_keep_seconds``)."""
        return {
            name: overrides.retention_keep_seconds
            for name, overrides in self.tenants.items()
            if overrides.retention_keep_seconds is not None
        }

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))


def load_settings(config_file: str | Path | None = None, **cli: Any) -> Settings:
    """Build settings from the file, the environment and CLI values (``None`` = unset)."""
    settings_cls: type[Settings] = Settings
    if config_file is not None:
        if not Path(config_file).is_file():
            raise ConfigurationError(f"configuration file {config_file} does not exist")
        # pydantic-settings reads the TOML path from the class's config, so bind it there.
        settings_cls = type(
            "FileSettings",
            (Settings,),
            {"model_config": {**Settings.model_config, "toml_file": Path(config_file)}},
        )
    try:
        return settings_cls(**{k: v for k, v in cli.items() if v is not None})
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(
            f"configuration file {config_file} is not valid TOML: {exc}"
        ) from exc
    except OSError as exc:
        raise HostUnavailable(
            f"configuration file {config_file} cannot be read "
            f"({exc.strerror or type(exc).__name__}); fix its permissions",
            code="file_unavailable",
        ) from exc
    except SettingsError as exc:
        # A PUNCTUAL_* variable for a section ([temporal], [tenants], ...) that is not JSON.
        raise ConfigurationError(f"invalid configuration: {exc}") from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigurationError(f"invalid configuration: {problems}") from exc
