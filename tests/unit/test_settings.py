"""Host configuration (SPEC §2, API.md "Host configuration file"): defaults, the documented
TOML keys, environment overrides, precedence CLI > environment > file, errors that name
the key, and what the production profile refuses at startup."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from punctual import bootstrap
from punctual.adapters.stores.sql.store import SqlStore
from punctual.errors import ConfigurationError
from punctual.settings import Settings, TenantLimits, load_settings

# The example from API.md, verbatim (comments included).
API_MD_EXAMPLE = """\
profile = "local"                      # "local" | "production"
database_url = "sqlite:///punctual.db"
engine = "local"                       # "local" | "temporal"
api_wait_seconds = 5                   # bounded API wait before 202 in_progress

[quota]
controller = "local"                   # "local" (best-effort) | "postgres" (exact) | "none"

[tenant_defaults]                      # applies to every tenant unless [tenants.NAME] overrides
allowed_workload_classes = ["interactive", "standard", "batch"]
max_input_bytes = 65536
max_pending_starts = 10000
max_schedules = 1000
# max_pending_by_class = { batch = 5000 }

[tenants.acme]
max_pending_starts = 500

[workload_classes.standard]
task_queue = "standard"
priority = 3                           # 1..5, lower runs first

[runner]
page_size = 500
lease_seconds = 30

[codec]                                # AES-GCM key ring; local profile generates a key file
active_key = "k1"
key_file = "punctual.keys"

[temporal]                             # used when engine = "temporal"
address = "127.0.0.1:7233"
namespace = "default"
"""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No PUNCTUAL_* variable of the surrounding shell leaks in; relative paths land in tmp."""
    for name in list(os.environ):
        if name.upper().startswith("PUNCTUAL_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    yield


def write(tmp_path: Path, text: str, name: str = "punctual.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config_error(config: Path | None = None, **cli: Any) -> str:
    with pytest.raises(ConfigurationError) as caught:
        load_settings(config, **cli)
    return str(caught.value)


# --- defaults -------------------------------------------------------------------------------


def test_defaults() -> None:
    settings = load_settings()
    assert settings.profile == "local"
    assert settings.database_url == "sqlite:///punctual.db"
    assert settings.engine == "local"
    assert settings.api_wait_seconds == 5
    assert settings.max_body_bytes >= 1024
    assert settings.internal_token is None
    assert settings.quota.controller in (None, "local")
    assert settings.tenant_defaults == TenantLimits(
        allowed_workload_classes=["interactive", "standard", "batch"],
        max_input_bytes=65536,
        max_pending_starts=10000,
        max_schedules=1000,
        max_pending_by_class={},
    )
    assert settings.tenants == {}
    classes = {name: (c.task_queue, c.priority) for name, c in settings.workload_classes.items()}
    assert classes == {
        "interactive": ("interactive", 1),
        "standard": ("standard", 3),
        "batch": ("batch", 5),
    }
    assert set(settings.tenant_defaults.allowed_workload_classes) <= set(settings.workload_classes)
    assert settings.runner.page_size == 500
    assert settings.runner.lease_seconds == 30
    assert settings.temporal.address == "127.0.0.1:7233"
    assert settings.temporal.namespace == "default"


def test_no_file_in_the_working_directory_is_read_implicitly(tmp_path: Path) -> None:
    write(tmp_path, "api_wait_seconds = 9\n", "punctual.toml")
    write(tmp_path, "api_wait_seconds = 9\n", "config.toml")
    assert load_settings().api_wait_seconds == 5


# --- the documented file --------------------------------------------------------------------


def test_api_md_example_loads_with_every_key(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, API_MD_EXAMPLE))
    assert settings.profile == "local"
    assert settings.database_url == "sqlite:///punctual.db"
    assert settings.engine == "local"
    assert settings.api_wait_seconds == 5
    assert settings.quota.controller == "local"
    assert settings.tenant_defaults.allowed_workload_classes == ["interactive", "standard", "batch"]
    assert settings.tenant_defaults.max_input_bytes == 65536
    assert settings.tenant_defaults.max_pending_starts == 10000
    assert settings.tenant_defaults.max_schedules == 1000
    assert settings.tenants["acme"].max_pending_starts == 500
    assert settings.workload_classes["standard"].task_queue == "standard"
    assert settings.workload_classes["standard"].priority == 3
    assert settings.runner.page_size == 500
    assert settings.runner.lease_seconds == 30
    assert settings.codec.active_key == "k1"
    assert settings.codec.key_file == "punctual.keys"
    assert settings.temporal.address == "127.0.0.1:7233"
    assert settings.temporal.namespace == "default"


def test_the_commented_out_per_class_limit_works_too(tmp_path: Path) -> None:
    text = API_MD_EXAMPLE.replace(
        "# max_pending_by_class = { batch = 5000 }", "max_pending_by_class = { batch = 5000 }"
    )
    settings = load_settings(write(tmp_path, text))
    assert settings.tenant_defaults.max_pending_by_class == {"batch": 5000}
    assert settings.limits_for("acme").max_pending_by_class == {"batch": 5000}


def test_file_values_other_than_defaults_are_used(tmp_path: Path) -> None:
    text = """\
profile = "local"
database_url = "sqlite:///elsewhere.db"
api_wait_seconds = 2.5

[runner]
page_size = 50

[workload_classes.fast]
task_queue = "fast-q"
priority = 1

[tenant_defaults]
allowed_workload_classes = ["fast"]
"""
    settings = load_settings(write(tmp_path, text))
    assert settings.database_url == "sqlite:///elsewhere.db"
    assert settings.api_wait_seconds == 2.5
    assert settings.runner.page_size == 50
    assert settings.runner.lease_seconds == 30  # the section's other keys keep their defaults
    assert settings.workload_classes["fast"].task_queue == "fast-q"
    assert settings.tenant_defaults.allowed_workload_classes == ["fast"]


def test_missing_config_file_is_a_configuration_error(tmp_path: Path) -> None:
    message = config_error(tmp_path / "absent.toml")
    assert "absent.toml" in message


def test_malformed_toml_is_a_configuration_error_naming_the_file(tmp_path: Path) -> None:
    """A syntax error is a configuration error too (the CLI turns those into exit 2 and a
    one-line message, not a traceback)."""
    path = write(tmp_path, "[runner\npage_size = 5\n", "broken.toml")
    message = config_error(path)
    assert "broken.toml" in message


# --- environment ----------------------------------------------------------------------------


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUNCTUAL_API_WAIT_SECONDS", "7")
    monkeypatch.setenv("PUNCTUAL_RUNNER__PAGE_SIZE", "123")
    monkeypatch.setenv("PUNCTUAL_QUOTA__CONTROLLER", "postgres")
    settings = load_settings()
    assert settings.api_wait_seconds == 7
    assert settings.runner.page_size == 123
    assert settings.runner.lease_seconds == 30
    assert settings.quota.controller == "postgres"


def test_environment_names_are_case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("punctual_runner__page_size", "77")
    assert load_settings().runner.page_size == 77


def test_environment_section_key_merges_with_the_file_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "[runner]\npage_size = 10\nlease_seconds = 45\n")
    monkeypatch.setenv("PUNCTUAL_RUNNER__PAGE_SIZE", "20")
    settings = load_settings(path)
    assert settings.runner.page_size == 20
    assert settings.runner.lease_seconds == 45


def test_invalid_environment_value_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUNCTUAL_RUNNER__PAGE_SIZE", "lots")
    assert "runner.page_size" in config_error()


# --- precedence -----------------------------------------------------------------------------


def test_precedence_cli_over_environment_over_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        'database_url = "sqlite:///file.db"\napi_wait_seconds = 3\n[runner]\npage_size = 30\n',
    )
    assert load_settings(path).api_wait_seconds == 3
    assert load_settings(path).database_url == "sqlite:///file.db"

    monkeypatch.setenv("PUNCTUAL_API_WAIT_SECONDS", "4")
    monkeypatch.setenv("PUNCTUAL_DATABASE_URL", "sqlite:///env.db")
    monkeypatch.setenv("PUNCTUAL_RUNNER__PAGE_SIZE", "40")
    from_env = load_settings(path)
    assert from_env.api_wait_seconds == 4
    assert from_env.database_url == "sqlite:///env.db"
    assert from_env.runner.page_size == 40

    from_cli = load_settings(
        path, api_wait_seconds=6, database_url="sqlite:///cli.db", runner={"page_size": 60}
    )
    assert from_cli.api_wait_seconds == 6
    assert from_cli.database_url == "sqlite:///cli.db"
    assert from_cli.runner.page_size == 60

    # ``None`` from the CLI means "flag not given": the environment still stands.
    assert load_settings(path, database_url=None).database_url == "sqlite:///env.db"


def test_cli_flag_beats_environment_in_the_real_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from punctual.cli.main import app

    monkeypatch.setenv("PUNCTUAL_DATABASE_URL", f"sqlite:///{tmp_path / 'from-env.db'}")
    result = CliRunner().invoke(
        app, ["db", "upgrade", "--database-url", f"sqlite:///{tmp_path / 'from-flag.db'}"]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "from-flag.db").exists()
    assert not (tmp_path / "from-env.db").exists()


# --- validation names the key ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            "[workload_classes.standard]\ntask_queue = 'standard'\npriority = 7\n",
            "workload_classes.standard.priority",
        ),
        (
            "[workload_classes.standard]\ntask_queue = 'standard'\npriority = 0\n",
            "workload_classes.standard.priority",
        ),
        ("[workload_classes.standard]\npriority = 2\n", "workload_classes.standard.task_queue"),
        ("[runner]\npage_size = 0\n", "runner.page_size"),
        ("[runner]\npage_size = 'many'\n", "runner.page_size"),
        ("[runner]\nlease_seconds = -1\n", "runner.lease_seconds"),
        ("api_wait_seconds = 0\n", "api_wait_seconds"),
        ("api_wait_seconds = 100000\n", "api_wait_seconds"),
        ("profile = 'staging'\n", "profile"),
        ("engine = 'celery'\n", "engine"),
        ("[quota]\ncontroller = 'redis'\n", "quota.controller"),
        ("[tenant_defaults]\nmax_input_bytes = -5\n", "tenant_defaults.max_input_bytes"),
        ("[tenants.acme]\nmax_pending_starts = -1\n", "tenants.acme.max_pending_starts"),
        (
            "[tenants.acme]\nallowed_workload_classes = ['gold']\n",
            "tenants.acme.allowed_workload_classes",
        ),
    ],
)
def test_invalid_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    message = config_error(write(tmp_path, text))
    assert key in message, message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("colour = 'blue'\n", "colour"),
        ("[runner]\npagesize = 10\n", "runner.pagesize"),
        ("[quota]\ncontroler = 'postgres'\n", "quota.controler"),
        ("[codec]\nactive = 'k1'\n", "codec.active"),
        (
            "[workload_classes.standard]\ntask_queue = 's'\npriority = 3\nweight = 2\n",
            "workload_classes.standard.weight",
        ),
        ("[tenants.acme]\nmax_pending = 5\n", "tenants.acme.max_pending"),
        ("[nonsense]\nx = 1\n", "nonsense"),
    ],
)
def test_unknown_keys_are_refused(tmp_path: Path, text: str, key: str) -> None:
    message = config_error(write(tmp_path, text))
    assert key in message, message


def test_unknown_cli_value_is_refused() -> None:
    assert "colour" in config_error(None, colour="blue")


# --- tenant limits --------------------------------------------------------------------------


def test_limits_for_merges_tenant_overrides(tmp_path: Path) -> None:
    text = """\
[tenant_defaults]
allowed_workload_classes = ["interactive", "standard", "batch"]
max_input_bytes = 4096
max_pending_starts = 100
max_schedules = 10
max_pending_by_class = { batch = 50 }

[tenants.acme]
max_pending_starts = 500
allowed_workload_classes = ["batch"]

[tenants.tiny]
max_input_bytes = 64
max_pending_by_class = { standard = 1 }
"""
    settings = load_settings(write(tmp_path, text))
    acme = settings.limits_for("acme")
    assert acme.max_pending_starts == 500
    assert acme.allowed_workload_classes == ["batch"]
    assert acme.max_input_bytes == 4096
    assert acme.max_schedules == 10
    assert acme.max_pending_by_class == {"batch": 50}

    tiny = settings.limits_for("tiny")
    assert tiny.max_input_bytes == 64
    assert tiny.max_pending_starts == 100
    assert tiny.max_pending_by_class == {"standard": 1}
    assert tiny.allowed_workload_classes == ["interactive", "standard", "batch"]

    assert settings.limits_for("someone-else") == settings.tenant_defaults
    # The defaults themselves are not modified by merging.
    assert settings.tenant_defaults.max_pending_starts == 100

    policy = bootstrap.host_policy(settings).tenant_policy("acme")
    assert policy.max_pending_starts == 500
    assert policy.allowed_workload_classes == frozenset({"batch"})


# --- the production profile -----------------------------------------------------------------


def production(database_url: str, tmp_path: Path, **extra: Any) -> Settings:
    return load_settings(
        None,
        profile="production",
        database_url=database_url,
        codec={"key_file": str(tmp_path / "prod.keys"), **extra.pop("codec", {})},
        **extra,
    )


def test_production_refuses_the_best_effort_quota_controller(tmp_path: Path) -> None:
    settings = production(
        "postgresql://postgres@127.0.0.1:5432/never_used", tmp_path, quota={"controller": "local"}
    )
    with pytest.raises(ConfigurationError) as caught:
        bootstrap.build(settings)
    assert "quota.controller" in str(caught.value)


def test_production_refuses_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "prod.db"
    settings = production(f"sqlite:///{db}", tmp_path, quota={"controller": "postgres"})
    with pytest.raises(ConfigurationError) as caught:
        bootstrap.build(settings)
    assert "database_url" in str(caught.value)
    assert not db.exists(), "a refused start must not create the database"


def test_local_profile_generates_a_missing_key_file(sqlite_url: str, tmp_path: Path) -> None:
    key_file = tmp_path / "local.keys"
    settings = load_settings(None, database_url=sqlite_url, codec={"key_file": str(key_file)})
    built = bootstrap.build(settings)
    built.close()
    assert key_file.exists()


class RecordingStore(SqlStore):
    """A SqlStore that remembers whether it was disposed."""

    made: ClassVar[list[RecordingStore]] = []

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.disposed = False
        RecordingStore.made.append(self)

    def dispose(self) -> None:
        self.disposed = True
        super().dispose()


@pytest.fixture
def stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RecordingStore]]:
    RecordingStore.made = []
    monkeypatch.setattr(bootstrap, "SqlStore", RecordingStore)
    yield RecordingStore.made
    for store in RecordingStore.made:
        if not store.disposed:
            SqlStore.dispose(store)


@pytest.mark.postgres
def test_production_refuses_a_missing_codec_key_file(
    pg_url: str, tmp_path: Path, stores: list[RecordingStore]
) -> None:
    key_file = tmp_path / "prod.keys"
    settings = production(pg_url, tmp_path, quota={"controller": "postgres"})
    with pytest.raises(ConfigurationError) as caught:
        bootstrap.build(settings)
    assert "codec.key_file" in str(caught.value)
    assert not key_file.exists(), "production must not invent a key ring"


@pytest.mark.postgres
def test_production_refuses_a_missing_default_key_file(
    pg_url: str, tmp_path: Path, stores: list[RecordingStore]
) -> None:
    settings = load_settings(
        None, profile="production", database_url=pg_url, quota={"controller": "postgres"}
    )
    with pytest.raises(ConfigurationError) as caught:
        bootstrap.build(settings)
    assert "codec.key_file" in str(caught.value)
    assert not (tmp_path / "punctual.keys").exists()


@pytest.mark.postgres
def test_a_refused_build_releases_its_database_connections(
    pg_url: str, tmp_path: Path, stores: list[RecordingStore]
) -> None:
    """Embedded users may retry ``build``; a refusal must not leave a connection pool open."""
    settings = production(pg_url, tmp_path, quota={"controller": "postgres"})
    with pytest.raises(ConfigurationError):
        bootstrap.build(settings)
    assert stores, "build should have opened the store before it looked for the key file"
    assert all(store.disposed for store in stores), "the refused build left its pool open"


@pytest.mark.postgres
def test_production_starts_with_postgres_controller_and_a_key_file(
    pg_url: str, tmp_path: Path
) -> None:
    local = load_settings(None, database_url=pg_url, codec={"key_file": str(tmp_path / "k")})
    bootstrap.build(local).close()  # the local profile writes a key ring we can reuse
    settings = production(
        pg_url, tmp_path, quota={"controller": "postgres"}, codec={"key_file": str(tmp_path / "k")}
    )
    built = bootstrap.build(settings)
    built.close()


# --- fencing (FT-2) -------------------------------------------------------------------------


def test_a_heartbeat_longer_than_a_third_of_the_lease_is_refused_naming_both_keys(
    tmp_path: Path,
) -> None:
    message = config_error(
        write(tmp_path, "[runner]\nlease_seconds = 12\n[worker]\nheartbeat_seconds = 4.5\n")
    )
    assert "worker.heartbeat_seconds" in message and "runner.lease_seconds" in message
    # Exactly a third is enough: three renewals per lease.
    path = write(tmp_path, "[runner]\nlease_seconds = 12\n[worker]\nheartbeat_seconds = 4\n")
    assert load_settings(path).worker.heartbeat_seconds == 4


def test_the_default_heartbeat_fits_the_default_lease() -> None:
    settings = load_settings(None)
    assert settings.worker.heartbeat_seconds <= settings.runner.lease_seconds / 3


def test_the_database_pool_size_is_read_and_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_settings(None).database_pool_size == 16
    assert load_settings(None, database_pool_size=40).database_pool_size == 40
    monkeypatch.setenv("PUNCTUAL_DATABASE_POOL_SIZE", "7")
    assert load_settings(None).database_pool_size == 7
    assert "database_pool_size" in config_error(database_pool_size=0)
