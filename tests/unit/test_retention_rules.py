"""Retention's pure rules and settings (SPEC RT-1, API.md "Retention and holds"): windows,
what a hold needs and who releases it, the ``[retention]`` keys with the deprecated
``days``, and per-tenant windows."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from punctual import settings as settings_module
from punctual.domain.retention import (
    SWEEP_ORDER,
    UNREAD_NOTIFICATION_FACTOR,
    HoldKind,
    RecordKind,
    may_release,
    needs_subject_id,
    window_for,
)
from punctual.errors import ConfigurationError
from punctual.settings import load_settings
from punctual.usecases.tenancy.retention import RetentionPolicy

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)

API_MD_RETENTION = """\
[retention]
keep_seconds = 2592000          # terminal records older than this are removed (30 days)
sweep_interval_seconds = 300    # how often the runner sweeps
[tenants.acme]
retention_keep_seconds = 604800
"""


def test_a_window_counts_back_from_now() -> None:
    window = window_for("acme", NOW, 600, 3600)
    assert window.removable_before == NOW - timedelta(seconds=600)
    assert window.unread_before == NOW - timedelta(seconds=600 * UNREAD_NOTIFICATION_FACTOR)
    assert window.audit_before == NOW - timedelta(hours=1)
    assert UNREAD_NOTIFICATION_FACTOR == 4


def test_every_kind_is_swept_and_runs_go_before_the_keys_and_schedules_they_free() -> None:
    order = list(SWEEP_ORDER)
    assert set(order) | {RecordKind.OCCURRENCES} == set(RecordKind)
    assert order.index(RecordKind.RUNS) < order.index(RecordKind.STARTS)
    assert order.index(RecordKind.STARTS) < order.index(RecordKind.IDEMPOTENCY_RECORDS)
    assert order.index(RecordKind.STARTS) < order.index(RecordKind.SCHEDULES)
    assert order.index(RecordKind.WEBHOOK_DELIVERIES) < order.index(RecordKind.WEBHOOKS)


def test_only_a_tenant_hold_goes_without_a_subject() -> None:
    assert [k for k in HoldKind if not needs_subject_id(k)] == [HoldKind.TENANT]


def test_the_host_releases_every_hold_and_a_tenant_admin_only_its_own() -> None:
    assert may_release(placed_by_host=False, by_host=False)
    assert may_release(placed_by_host=True, by_host=True)
    assert may_release(placed_by_host=False, by_host=True)
    assert not may_release(placed_by_host=True, by_host=False)


def test_a_policy_gives_each_tenant_its_window() -> None:
    policy = RetentionPolicy(keep_seconds=600, tenant_keep_seconds={"brief": 60})
    assert policy.window("brief", NOW).removable_before == NOW - timedelta(seconds=60)
    assert policy.window("acme", NOW).removable_before == NOW - timedelta(seconds=600)


def test_defaults() -> None:
    retention = load_settings(None).retention
    assert retention.keep_seconds == 2_592_000
    assert retention.sweep_interval_seconds == 300
    assert retention.audit_keep_seconds == 31_536_000
    assert retention.batch_size == 500


def test_the_api_md_keys_and_a_tenant_window(tmp_path: Path) -> None:
    path = tmp_path / "punctual.toml"
    path.write_text(API_MD_RETENTION)
    loaded = load_settings(path)
    assert loaded.retention.keep_seconds == 2_592_000
    assert loaded.retention_overrides() == {"acme": 604_800}
    # A tenant's window is not one of its limits (the limits of acme still validate).
    assert loaded.limits_for("acme").max_pending_starts == 10000


def test_days_is_a_deprecated_alias_used_only_without_keep_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings_module._warn_retention_days.cache_clear()
    with caplog.at_level(logging.WARNING, logger="punctual"):
        assert load_settings(None, retention={"days": 2}).retention.keep_seconds == 172_800
        both = load_settings(None, retention={"days": 2, "keep_seconds": 60})
        assert both.retention.keep_seconds == 60
    warned = [r for r in caplog.records if "retention.days" in r.getMessage()]
    assert len(warned) == 1, "warned once"


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUNCTUAL_RETENTION__KEEP_SECONDS", "86400")
    monkeypatch.setenv("PUNCTUAL_RETENTION__AUDIT_KEEP_SECONDS", "172800")
    loaded = load_settings(None)
    assert (loaded.retention.keep_seconds, loaded.retention.audit_keep_seconds) == (
        86_400,
        172_800,
    )


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"retention": {"keep_seconds": 0}}, "retention.keep_seconds"),
        ({"retention": {"days": -1}}, "retention.days"),
        ({"retention": {"batch_size": 0}}, "retention.batch_size"),
        ({"tenants": {"acme": {"retention_keep_seconds": 0}}}, "retention_keep_seconds"),
        ({"retention": {"keep": 1}}, "retention.keep"),
    ],
)
def test_bad_values_name_the_key(values: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigurationError, match=key):
        load_settings(None, **values)
