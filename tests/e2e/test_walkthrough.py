"""IF-6: the appointment-reminder walkthrough, an independent HTTP client, against a real
server on loopback — DST, reminders already due, and recovery from an ambiguous answer."""

from __future__ import annotations

import ast
import importlib.util
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.usecases.tenancy import identity
from tests.conftest import make_settings
from tests.support.server import serving

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "appointment_reminder.py"


@pytest.fixture(scope="module")
def walkthrough() -> ModuleType:
    spec = importlib.util.spec_from_file_location("appointment_reminder", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(EXAMPLE.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert "punctual" not in imported, "the walkthrough must not depend on punctual's code"
    return module


@pytest.fixture
def server(sqlite_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    settings = make_settings(sqlite_url, tmp_path, runner={"max_idle_seconds": 0.2})
    system = bootstrap.build(settings)
    try:
        system.start_worker("punctual.demo:app", slots=1)
        system.start_runner()
        token = identity.ensure_member_token(system.services, "clinic", "front-desk", Role.MEMBER)
        with serving(system.http_app()) as url:
            yield url, token.token
    finally:
        system.close()


class LoseFirstAnswer(httpx.BaseTransport):
    """Delivers every request, but drops the first answer as a timed-out connection would."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.dropped = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if self.dropped == 0:
            response.read()
            response.close()
            self.dropped += 1
            raise httpx.ReadTimeout("the answer was lost", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def _plan(module: Any, outbox: Any, appointment: datetime, zone: str, now: datetime) -> Any:
    return module.plan_reminder(
        outbox,
        tenant="clinic",
        principal="desk",
        appointment_id="appt-42",
        customer="c-17",
        appointment_local=appointment,
        zone=zone,
        now=now,
    )


def test_dst_reminder_is_two_elapsed_hours_before(
    walkthrough: Any, server: tuple[str, str], tmp_path: Path
) -> None:
    url, token = server
    outbox = walkthrough.Outbox(str(tmp_path / "outbox.db"))
    # 03:30 on the spring-forward Sunday in Berlin is 01:30 UTC; two hours earlier is
    # 23:30 UTC the day before, i.e. 00:30 local time (CET, +01:00).
    request = _plan(
        walkthrough, outbox, datetime(2027, 3, 28, 3, 30), "Europe/Berlin", datetime.now(UTC)
    )
    assert request.body["start_at"] == "2027-03-28T00:30:00+01:00"
    with httpx.Client(base_url=url, timeout=10) as client:
        walkthrough.deliver(outbox, client, {"desk": token})
    status, answer = outbox.answer(request.key)
    assert status == 201, answer
    assert answer["start_at"] == "2027-03-27T23:30:00.000Z"
    assert answer["time_zone"] == "Europe/Berlin"


def test_an_ambiguous_answer_is_recovered_by_resending_the_same_request(
    walkthrough: Any, server: tuple[str, str], tmp_path: Path
) -> None:
    url, token = server
    outbox = walkthrough.Outbox(str(tmp_path / "outbox.db"))
    now = datetime.now(UTC)
    # The appointment is in one hour: the reminder is already due and goes out at once.
    request = _plan(
        walkthrough, outbox, (now + timedelta(hours=1)).replace(tzinfo=None), "UTC", now
    )
    transport = LoseFirstAnswer(httpx.HTTPTransport())
    with httpx.Client(base_url=url, timeout=10, transport=transport) as client:
        walkthrough.deliver(outbox, client, {"desk": token})
    assert transport.dropped == 1
    status, answer = outbox.answer(request.key)
    assert status == 201, answer
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, timeout=10, headers=headers) as client:
        starts = client.get(
            "/v1/tenants/clinic/scheduled-starts", params={"business_request_id": "appt-42"}
        ).json()["items"]
        assert [s["id"] for s in starts] == [answer["id"]], "the retry created a second start"
        deadline = time.monotonic() + 20
        while (start := client.get(f"/v1/tenants/clinic/scheduled-starts/{answer['id']}").json())[
            "dispatch"
        ] is None:
            assert time.monotonic() < deadline, start
            time.sleep(0.1)
        # Long after the reminder time (a new request for it would be refused as more than
        # 5 s in the past), the exact same request still answers the original.
        start_at = datetime.fromisoformat(answer["start_at"])
        past_the_window = start_at + timedelta(seconds=5.5) - datetime.now(UTC)
        time.sleep(max(0.0, past_the_window.total_seconds()))
        replay = client.post(
            request.path, json=request.body, headers={"Idempotency-Key": request.key}
        )
        assert replay.status_code == 201
        assert replay.json() == answer
        run = client.get(f"/v1/tenants/clinic/runs/{start['dispatch']['run_id']}").json()
        assert run["workflow"] == "echo"


def test_no_reminder_for_an_appointment_that_is_over(walkthrough: Any, tmp_path: Path) -> None:
    outbox = walkthrough.Outbox(str(tmp_path / "outbox.db"))
    now = datetime.now(UTC)
    past = (now - timedelta(minutes=1)).replace(tzinfo=None)
    assert _plan(walkthrough, outbox, past, "UTC", now) is None
    assert outbox.undecided() == []
