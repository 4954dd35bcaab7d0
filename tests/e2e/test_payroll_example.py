"""The payroll walkthrough (``examples/payroll.py``, SPEC RS-10) against a real server on
loopback: its preview names each month's last Bavarian business day at 17:30 Berlin time,
across the switch to summer time, and applying it twice creates the schedule once."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

from punctual import bootstrap
from punctual.client import PunctualClient
from punctual.domain.permissions import Role
from punctual.usecases.tenancy import identity
from tests.conftest import make_settings
from tests.support.api import register_demo
from tests.support.server import serving

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "payroll.py"


@pytest.fixture(scope="module")
def payroll() -> ModuleType:
    spec = importlib.util.spec_from_file_location("payroll_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def client(sqlite_url: str, tmp_path: Path) -> Iterator[PunctualClient]:
    system = bootstrap.build(make_settings(sqlite_url, tmp_path))
    try:
        token = identity.ensure_member_token(system.services, "acme", "finance", Role.MEMBER)
        register_demo(system)
        with serving(system.http_app()) as url, PunctualClient(url, token.token, "acme") as api:
            yield api
    finally:
        system.close()


def test_the_preview_names_the_last_business_days_at_17_30_berlin(
    payroll: ModuleType, client: PunctualClient
) -> None:
    runs = payroll.preview(client, datetime(2026, 11, 1, tzinfo=UTC), 6)
    assert runs == [
        "Mon 30 Nov 2026 17:30 CET",
        "Wed 30 Dec 2026 17:30 CET",  # the 31st is a company closed day
        "Fri 29 Jan 2027 17:30 CET",
        "Fri 26 Feb 2027 17:30 CET",
        "Wed 31 Mar 2027 17:30 CEST",  # after the switch to summer time
        "Fri 30 Apr 2027 17:30 CEST",
    ]


def test_applying_it_twice_creates_the_schedule_once(
    payroll: ModuleType, client: PunctualClient
) -> None:
    assert payroll.apply(client) == "created or updated"
    assert payroll.apply(client) == "unchanged"
    schedule = client.get_schedule_by_name("payroll")
    assert schedule.calendar is not None
    assert schedule.start_deadline_ms == 4 * 3_600_000
    assert len(schedule.next_fire_times) == 5
