"""OS-4/OS-7: a mutation that cannot be decided within the bounded API wait answers
``202 in_progress`` and carries on; the retry with the same key learns the outcome.

The start's row is held by another transaction (PostgreSQL: ``SELECT ... FOR UPDATE``;
SQLite: an open write transaction) for longer than the API wait.
"""

from __future__ import annotations

import time
from pathlib import Path

import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.stores.sql.tables import starts
from tests.conftest import make_settings
from tests.support.api import echo_start, in_process, member_api, register_demo


def _hold(system: bootstrap.Punctual, start_id: str) -> sa.Connection:
    conn = system.store.engine.connect()
    conn.info["readonly"] = False
    conn.begin()
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(starts.c.id).where(starts.c.id == start_id).with_for_update())
    else:
        conn.execute(starts.update().where(starts.c.id == start_id).values(attempts=0))
    return conn


def test_undecided_mutation_answers_in_progress_then_its_outcome(
    database_url: str, tmp_path: Path
) -> None:
    system = bootstrap.build(make_settings(database_url, tmp_path, api_wait_seconds=1))
    try:
        register_demo(system)
        with in_process(system) as client:
            api = member_api(system, client)
            start = api.post("/scheduled-starts", echo_start()).json()
            holder = _hold(system, start["id"])
            try:
                began = time.monotonic()
                first = api.post(
                    f"/scheduled-starts/{start['id']}/cancel", {"version": 1}, key="c1", once=True
                )
                waited = time.monotonic() - began
                assert first.status_code == 202, first.text
                assert first.json() == {"status": "in_progress"}
                assert 0.9 <= waited < 3
                # The same request again while the first is still blocked: also in progress.
                second = api.post(
                    f"/scheduled-starts/{start['id']}/cancel", {"version": 1}, key="c1", once=True
                )
                assert second.status_code == 202
            finally:
                holder.commit()
                holder.close()
            deadline = time.monotonic() + 10
            while True:
                retry = api.post(
                    f"/scheduled-starts/{start['id']}/cancel", {"version": 1}, key="c1"
                )
                if retry.status_code != 202 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert retry.status_code == 200, retry.text
            assert retry.json()["state"] == "canceled"
            assert retry.json()["version"] == 2
            # The mutation went on after the 202: exactly one cancel happened.
            assert api.get(f"/scheduled-starts/{start['id']}").json()["version"] == 2
    finally:
        system.close()
