"""Black box over a real uvicorn on loopback, through the typed client (IF-2)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from punctual import bootstrap
from punctual.client import ApiError, PunctualClient, retry_until_decided
from punctual.domain.permissions import Role
from punctual.usecases.tenancy import identity
from tests.conftest import make_settings
from tests.support.server import serving


def test_start_created_over_http_runs_and_its_run_is_readable(
    database_url: str, tmp_path: Path
) -> None:
    system = bootstrap.build(
        make_settings(database_url, tmp_path, runner={"max_idle_seconds": 0.2})
    )
    try:
        system.start_worker("punctual.demo:app", slots=1)
        system.start_runner()
        token = identity.ensure_member_token(system.services, "acme", "carol", Role.MEMBER).token
        with serving(system.http_app()) as url, PunctualClient(url, token, "acme") as client:
            start_at = datetime.now(UTC) + timedelta(seconds=1)
            create = {
                "idempotency_key": "reminder-1",
                "workflow": "echo",
                "input": {"message": "over the wire"},
                "business_request_id": "appt-1",
                "start_at": start_at,
            }
            start = retry_until_decided(client.create_start, **create)
            assert retry_until_decided(client.create_start, **create) == start
            with pytest.raises(ApiError) as reused:
                client.create_start(**{**create, "business_request_id": "other"})
            assert reused.value.status == 409
            assert reused.value.code == "idempotency_key_reused"
            deadline = time.monotonic() + 20
            while client.get_start(start.id).dispatch is None:
                assert time.monotonic() < deadline, "the start was not dispatched"
                time.sleep(0.05)
            dispatch = client.get_start(start.id).dispatch
            assert dispatch is not None
            run_id = dispatch.run_id
            while (run := client.get_run(run_id)).state != "completed":
                assert time.monotonic() < deadline, f"the run did not complete: {run}"
                time.sleep(0.05)
            assert run.result == {"message": "over the wire"}
            assert client.list_runs(origin_id=start.id).items[0].id == run_id
            assert client.health().status == "ok"
    finally:
        system.close()
