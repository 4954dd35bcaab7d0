"""A first pass through the API: create a start, read it back, replay it."""

from __future__ import annotations

from punctual import bootstrap
from tests.support.api import echo_start, in_process, member_api, register_demo


def test_create_get_and_replay(system: bootstrap.Punctual) -> None:
    register_demo(system)
    with in_process(system) as client:
        api = member_api(system, client)
        created = api.post("/scheduled-starts", echo_start(), key="create-1")
        assert created.status_code == 201, created.text
        start = created.json()
        assert start["state"] == "scheduled"
        assert "input" not in start
        fetched = api.get(f"/scheduled-starts/{start['id']}")
        assert fetched.json() == start
        replay = api.post(
            "/scheduled-starts", echo_start(start_at=start["start_at"]), key="create-1"
        )
        assert replay.status_code in (201, 409)
