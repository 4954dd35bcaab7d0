"""Protected workflow input on both stores (SPEC OS-9, DP-6 "rotating keys", WF-3 keys;
docs/operations.md "Keys").

Input is encrypted at rest with a key id from the host key ring, never logged and never
returned by a projection. A unique marker string goes into the input of starts and a
schedule, the work runs on a real worker, and then every response body, the captured
log and stderr output, the metrics page and the raw database (SQLite file and WAL bytes,
or every PostgreSQL row as text) are searched for it. Key rotation keeps old input
readable while anything pending needs the old key, and a ring that lost a needed key is
refused at startup, naming it.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from punctual import bootstrap
from punctual.adapters.crypto import generate_key_file
from punctual.adapters.stores.sql import tables as t
from punctual.domain.permissions import Role
from punctual.domain.runs import DefinitionState
from punctual.errors import ConfigurationError
from punctual.ports.records import EncryptedInput, WorkerRecord
from punctual.settings import Settings
from punctual.usecases.running.definitions import (
    DeclaredDefinition,
    key_report,
    register_worker,
    set_lifecycle,
)
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.worker.definitions import declared_definitions
from punctual.workflows import load_app
from tests.conftest import make_settings
from tests.support.api import Api, in_process, member_api

APP_REF = "tests.integration.worker_app:app"
RUN_SECONDS = 20.0
_s = t.starts.c


# --------------------------------------------------------------------------- helpers


def worker_settings(database_url: str, tmp_path: Path, **overrides: Any) -> Settings:
    return make_settings(
        database_url,
        tmp_path,
        worker={"heartbeat_seconds": 0.5, "liveness_seconds": 10},
        runner={"lease_seconds": 2, "max_idle_seconds": 0.2},
        **overrides,
    )


def iso(delta_seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta_seconds)).isoformat()


def start_body(workflow: str, payload: Any, start_at: str, **extra: Any) -> dict[str, Any]:
    return {
        "workflow": workflow,
        "input": payload,
        "business_request_id": f"protected-{secrets.token_hex(3)}",
        "start_at": start_at,
        "workload_class": "standard",
        **extra,
    }


def wait_until(what: str, check: Callable[[], Any], timeout: float = RUN_SECONDS) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def run_of(api: Api, start_id: str) -> dict[str, Any] | None:
    start = api.get(f"/scheduled-starts/{start_id}").json()
    if start["dispatch"] is None:
        return None
    run: dict[str, Any] = api.get(f"/runs/{start['dispatch']['run_id']}").json()
    return run if run["state"] not in ("pending", "running") else None


def raw_database_text(system: bootstrap.Punctual) -> bytes:
    """Everything the database holds, as bytes to search.

    SQLite: the database file and its WAL and shared-memory files, byte for byte.
    PostgreSQL: every row of every table in the database, as JSON text (``bytea`` shows
    as hex there, so callers search for the hex form of the marker too).
    """
    if system.store.dialect == "sqlite":
        database = system.store.engine.url.database
        assert database is not None
        chunks = []
        for suffix in ("", "-wal", "-shm", "-journal"):
            path = Path(database + suffix)
            if path.exists():
                chunks.append(path.read_bytes())
        assert chunks, database
        return b"\n".join(chunks)
    lines: list[str] = []
    with system.store.engine.connect() as conn:
        names = conn.execute(
            sa.text(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            )
        ).scalars()
        for name in list(names):
            rows = conn.execute(sa.text(f'SELECT row_to_json(r)::text FROM "{name}" r'))
            lines.extend(f"{name}: {row}" for row in rows.scalars())
    assert any(line.startswith("tenants:") for line in lines), lines[:5]
    return "\n".join(lines).encode()


def _forms(marker: str) -> set[bytes]:
    """The marker as text, as hex (how ``bytea`` prints), and as the start of its base64."""
    raw = marker.encode()
    return {raw, raw.hex().encode(), raw.hex().upper().encode(), base64.b64encode(raw)[:16]}


def found_in(marker: str, haystack: bytes | str) -> list[str]:
    """The places around each occurrence of the marker (empty when it is absent)."""
    data = haystack.encode() if isinstance(haystack, str) else haystack
    spots = []
    for form in _forms(marker):
        at = data.find(form)
        if at >= 0:
            window = data[max(0, at - 160) : at + len(form) + 40].decode("latin-1")
            spots.append("".join(ch if ch.isprintable() else "." for ch in window))
    return spots


def assert_absent(marker: str, where: str, haystack: bytes | str) -> None:
    spots = found_in(marker, haystack)
    assert not spots, f"the protected marker appears in {where}: {spots}"


def decrypted_inputs(system: bootstrap.Punctual, table: sa.Table) -> list[tuple[str, Any]]:
    """(key id, plaintext) of every row's input in ``table``, decrypted with the codec."""
    query = sa.select(table.c.tenant, table.c.input, table.c.input_key_id)
    with system.store.engine.connect() as conn:
        rows = conn.execute(query).all()
    codec = system.services.codec
    return [
        (key_id, codec.decrypt(EncryptedInput(key_id, bytes(data)), tenant))
        for tenant, data, key_id in rows
    ]


# --------------------------------------------------------------------------- never revealed


@pytest.fixture
def running(database_url: str, tmp_path: Path) -> Iterator[tuple[bootstrap.Punctual, Api, Any]]:
    system = bootstrap.build(worker_settings(database_url, tmp_path))
    try:
        system.start_worker(APP_REF, slots=2)
        system.start_runner()
        with in_process(system) as client:
            yield system, member_api(system, client, role=Role.ADMIN), client
    finally:
        system.close()


def test_the_input_never_appears_in_responses_logs_metrics_or_the_database(
    running: tuple[bootstrap.Punctual, Api, Any],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG, logger="punctual")
    system, api, client = running
    marker = f"PROTECTED-{secrets.token_hex(8)}"
    bodies: list[tuple[str, str]] = []

    def keep(what: str, response: Any, status: int) -> Any:
        bodies.append((what, response.text))
        assert response.status_code == status, (what, response.text)
        return response.json() if response.content else None

    payload = {"seconds": 0, "note": marker, "nested": {"list": [marker, 1]}}
    due = keep(
        "create due",
        api.post("/scheduled-starts", start_body("nap", payload, iso(-1))),
        201,
    )
    later = keep(
        "create later",
        api.post(
            "/scheduled-starts",
            start_body("nap", payload, iso(3600), attributes={"kind": "reminder"}),
        ),
        201,
    )
    schedule = keep(
        "create schedule",
        api.post(
            "/schedules",
            {
                "name": "protected-every-second",
                "workflow": "nap",
                "input": payload,
                "spec": {"interval_ms": 1000},
                "overlap": "skip",
                "missed": "skip",
                "workload_class": "standard",
            },
        ),
        201,
    )
    edited = keep(
        "edit schedule input",
        api.client.patch(
            api.path(f"/schedules/{schedule['id']}"),
            headers=api.headers(secrets.token_hex(8)),
            json={"version": schedule["version"], "input": {**payload, "edited": marker}},
        ),
        200,
    )

    # The due start runs on the real worker (which decrypts the input), and so do the
    # schedule's occurrences.
    run = wait_until("the due start's run", lambda: run_of(api, due["id"]))
    assert run["state"] == "completed", run
    assert run["result"] == {"slept": 0}

    def an_occurrence_ran() -> bool:
        items = api.get(f"/schedules/{schedule['id']}/occurrences").json()["items"]
        return any(o["state"] == "dispatched" for o in items)

    wait_until("an occurrence to be dispatched", an_occurrence_ran)
    paused = keep(
        "pause schedule",
        api.post(f"/schedules/{schedule['id']}/pause", {"version": edited["version"]}),
        200,
    )
    keep("get due", api.get(f"/scheduled-starts/{due['id']}"), 200)
    keep("get later", api.get(f"/scheduled-starts/{later['id']}"), 200)
    keep("list starts", api.get("/scheduled-starts", limit=100), 200)
    keep("get run", api.get(f"/runs/{run['id']}"), 200)
    keep("list runs", api.get("/runs", limit=100), 200)
    keep("get schedule", api.get(f"/schedules/{schedule['id']}"), 200)
    keep("list schedules", api.get("/schedules"), 200)
    keep("occurrences", api.get(f"/schedules/{schedule['id']}/occurrences", limit=100), 200)
    keep("health", api.get("/health"), 200)
    keep("definitions", api.get("/definitions"), 200)
    keep(
        "cancel later",
        api.post(f"/scheduled-starts/{later['id']}/cancel", {"version": later["version"]}),
        200,
    )
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    bodies.append(("metrics", metrics.text))
    assert "punctual_starts_dispatched" in metrics.text
    assert paused["enabled"] is False

    for what, text in bodies:
        assert_absent(marker, f"the response body of '{what}'", text)
        assert '"input"' not in text or what == "definitions", (what, text)
    assert caplog.records, "nothing was logged at all: the log check would prove nothing"
    assert_absent(marker, "the captured log records", caplog.text)
    for record in caplog.records:
        assert_absent(marker, f"log record {record.name}", repr(record.args))
    captured = capfd.readouterr()
    assert_absent(marker, "stderr", captured.err)
    assert_absent(marker, "stdout", captured.out)
    assert_absent(marker, f"the {system.store.dialect} database", raw_database_text(system))
    if system.store.dialect == "sqlite":
        # The WAL was part of what was searched (recent writes live there before a checkpoint).
        assert Path(f"{system.store.engine.url.database}-wal").exists()

    # Only ciphertext is stored: every input column decrypts back to the input.
    starts_inputs = decrypted_inputs(system, t.starts)
    assert (system.services.codec.active_key_id, payload) in starts_inputs
    assert all(key_id == "k1" for key_id, _ in starts_inputs)
    assert [value for _, value in decrypted_inputs(system, t.schedules)] == [
        {**payload, "edited": marker}
    ]
    assert payload in [value for _, value in decrypted_inputs(system, t.runs)]


def test_input_rejected_at_dispatch_is_not_revealed_by_the_failure(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The start's ``last_error``, the health finding and the logs say why the input was
    rejected without quoting it (OS-9: never logged, never returned by projections)."""
    caplog.set_level(logging.DEBUG, logger="punctual")
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        lenient = DeclaredDefinition(
            "vault", "1", "vault-1", {"type": "object", "required": ["code"]}, 60
        )
        strict = DeclaredDefinition(
            "vault",
            "2",
            "vault-2",
            {
                "type": "object",
                "required": ["code"],
                "properties": {"code": {"type": "integer"}},
            },
            60,
        )
        now = system.services.clock.now()
        loaded = [(d.name, d.version, d.artifact) for d in (lenient, strict)]
        record = WorkerRecord("wrk_vault", "local", "test", ["standard"], loaded, 1, now, now, None)
        register_worker(system.services, record, [lenient, strict])
        marker = f"PROTECTED-{secrets.token_hex(8)}"
        with in_process(system) as client:
            api = member_api(system, client)
            created = api.post("/scheduled-starts", start_body("vault", {"code": marker}, iso(-1)))
            assert created.status_code == 201, created.text
            start_id = created.json()["id"]
            set_lifecycle(system.services, "vault", "2", DefinitionState.ACTIVE)
            report = dispatch_due(system.services, "runner-vault", 10)
            assert report.failed == [start_id], report
            start = api.get(f"/scheduled-starts/{start_id}")
            assert start.json()["last_error"]["code"] == "input_rejected", start.text
            health = api.get("/health")
            listed = api.get("/scheduled-starts", state="failed")
        channels: list[tuple[str, bytes | str]] = [
            ("the failed start", start.text),
            ("the list of failed starts", listed.text),
            ("the health report", health.text),
            ("the log", caplog.text),
            (f"the {system.store.dialect} database", raw_database_text(system)),
        ]
        leaks = {what: found_in(marker, text) for what, text in channels}
        leaked = {what: spots for what, spots in leaks.items() if spots}
        assert not leaked, f"the input leaks through: {sorted(leaked)}\n{leaked}"
    finally:
        system.close()


def test_input_refused_at_acceptance_is_not_stored_in_the_clear(
    database_url: str, tmp_path: Path
) -> None:
    """A create refused with ``422 input_invalid`` is a decided outcome, so its answer is
    recorded for replay (OS-4). That record is stored: it must not hold the input in clear."""
    system = bootstrap.build(make_settings(database_url, tmp_path))
    try:
        schema = {
            "type": "object",
            "required": ["code"],
            "properties": {"code": {"type": "string", "maxLength": 4}},
        }
        declared = DeclaredDefinition("vault", "1", "vault-1", schema, 60)
        now = system.services.clock.now()
        record = WorkerRecord("wrk_vault", "local", "test", ["standard"], [], 1, now, now, None)
        register_worker(system.services, record, [declared])
        marker = f"PROTECTED-{secrets.token_hex(8)}"
        with in_process(system) as client:
            api = member_api(system, client)
            refused = api.post("/scheduled-starts", start_body("vault", {"code": marker}, iso(60)))
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "input_invalid"
        assert_absent(marker, f"the {system.store.dialect} database", raw_database_text(system))
    finally:
        system.close()


# --------------------------------------------------------------------------- key rotation


def write_ring(path: Path, keys: dict[str, str], active: str) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"active": active, "keys": keys}, handle)


def register_worker_app(system: bootstrap.Punctual) -> None:
    """The worker app's definitions, registered as a (stopped) worker would leave them."""
    app = load_app(APP_REF)
    now = system.services.clock.now()
    record = WorkerRecord(
        id="wrk_registration",
        engine="local",
        host="test",
        task_queues=["standard"],
        loaded=[(d.name, d.version, d.artifact) for d in app.definitions],
        slots=1,
        started_at=now,
        heartbeat_at=now,
        stopped_at=now,
    )
    register_worker(system.services, record, declared_definitions(app))


def key_ids(system: bootstrap.Punctual) -> dict[str, str]:
    with system.store.engine.connect() as conn:
        rows = conn.execute(sa.select(_s.id, _s.input_key_id)).all()
    return {start_id: key_id for start_id, key_id in rows}


def report_of(system: bootstrap.Punctual) -> dict[str, dict[str, Any]]:
    return {item["key_id"]: item for item in key_report(system.services)}


def test_key_rotation_keeps_old_input_readable_and_refuses_a_ring_missing_a_needed_key(
    database_url: str, tmp_path: Path
) -> None:
    key_file = tmp_path / "test.keys"  # the file make_settings points codec.key_file at
    generate_key_file(key_file, "k1")
    settings = worker_settings(database_url, tmp_path)
    assert settings.codec.key_file == str(key_file)

    # Before the rotation: a start due in a few seconds, encrypted with k1.
    before = bootstrap.build(settings)
    try:
        register_worker_app(before)
        assert before.services.codec.active_key_id == "k1"
        with in_process(before) as client:
            api = member_api(before, client)
            old = api.post(
                "/scheduled-starts", start_body("echo", {"message": "sealed with k1"}, iso(-1))
            )
            assert old.status_code == 201, old.text
    finally:
        before.close()
    old_id = old.json()["id"]

    # Rotate: k2 is added and made active; k1 stays in the file.
    ring = json.loads(key_file.read_text())
    k1 = ring["keys"]["k1"]
    k2 = base64.b64encode(secrets.token_bytes(32)).decode()
    write_ring(key_file, {"k1": k1, "k2": k2}, "k2")
    assert key_file.stat().st_mode & 0o777 == 0o600

    after = bootstrap.build(settings)
    try:
        assert after.services.codec.active_key_id == "k2"
        with in_process(after) as client:
            api = member_api(after, client)
            new = api.post(
                "/scheduled-starts", start_body("echo", {"message": "sealed with k2"}, iso(-1))
            )
            assert new.status_code == 201, new.text
            new_id = new.json()["id"]
            ids = key_ids(after)
            assert (ids[old_id], ids[new_id]) == ("k1", "k2")

            # The preflight lists k1 as needed while the old start is pending.
            report = report_of(after)
            assert report["k1"]["in_key_ring"] is True
            assert report["k1"]["active"] is False
            assert report["k1"]["needed_by"], report
            assert any("pending" in item for item in report["k1"]["needed_by"]), report
            assert report["k2"]["active"] is True

            # A ring without k1 is refused at startup while the old start needs it.
            elsewhere = tmp_path / "without-k1"
            elsewhere.mkdir()
            write_ring(elsewhere / "test.keys", {"k2": k2}, "k2")
            refused_settings = worker_settings(database_url, elsewhere)
            with pytest.raises(ConfigurationError) as caught:
                bootstrap.build(refused_settings)
            assert "k1" in str(caught.value)

            # The old start dispatches and its run executes on a real worker.
            after.start_worker(APP_REF, slots=2)
            after.start_runner()
            old_run = wait_until("the k1 start's run", lambda: run_of(api, old_id))
            new_run = wait_until("the k2 start's run", lambda: run_of(api, new_id))
            assert old_run["state"] == "completed", old_run
            assert old_run["result"] == {"message": "sealed with k1"}
            assert new_run["state"] == "completed", new_run
            assert new_run["result"] == {"message": "sealed with k2"}

        # Nothing pending needs k1 any more: the preflight says so, and a ring without it
        # is accepted.
        assert report_of(after)["k1"]["needed_by"] == []
        bootstrap.build(refused_settings).close()
    finally:
        after.close()
