"""The codec key lifecycle on both stores (SPEC RT-2; API.md "Keys"; docs/operations.md
"Keys").

``punctual keys create|activate|check|rewrap|retire``: processes report the key ids they
hold, an activation is refused (exit 4, naming them) while a live process lacks the key and
is followed by every live process within ``codec.refresh_seconds`` without a restart; a
process that starts later without the active key, or configured with another one, is
refused; ``check`` counts what still needs each key; ``rewrap`` moves it onto the active key
in batches without overwriting a concurrent change; ``retire`` lets a key go only when
nothing needs it. The last test rotates a key across real processes started from
different key files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from punctual import bootstrap
from punctual.adapters import crypto
from punctual.adapters.stores.sql import tables as t
from punctual.adapters.stores.sql.dialects import normalize_url
from punctual.cli.main import app as cli
from punctual.domain.permissions import Role
from punctual.errors import ConfigurationError
from punctual.ports.codec import ActiveKeyNotHeld, Codec
from punctual.ports.records import EncryptedInput, ProcessRecord, Resealed, SealedKind
from punctual.settings import Settings, load_settings
from punctual.usecases.scheduled.dispatch import dispatch_due
from punctual.usecases.tenancy import keys
from tests.conftest import DEV_TOKEN
from tests.e2e.harness import (
    DEMO_APP,
    PUNCTUAL,
    STARTUP_SECONDS,
    STOP_SECONDS,
    free_port,
    fresh_database,
    punctual_env,
)
from tests.e2e.harness import migrate as migrate_database
from tests.e2e.harness import wait_for as harness_wait_for
from tests.support.api import Api, in_process, live_worker, member_api, register_demo

T = TypeVar("T")

REFRESH_SECONDS = 0.2
LIVENESS_SECONDS = 2.0
SWITCH_DEADLINE_SECONDS = 10.0
"""API.md: live processes pick an activation up within 10 s, no restart."""
HOOK_URL = "http://127.0.0.1:9/hooks/build-bot?token=sealed-in-the-store"

_s = t.starts.c
_r = t.runs.c
_sch = t.schedules.c
_w = t.webhooks.c


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def material() -> dict[str, bytes]:
    """The keys of one deployment: every ring below holds copies of some of them."""
    return {key_id: secrets.token_bytes(32) for key_id in ("k1", "k2", "k3")}


def ring(path: Path, material: dict[str, bytes], *key_ids: str, active: str = "k1") -> Path:
    crypto.write_ring(path, crypto.KeyRing(active, {k: material[k] for k in key_ids}))
    return path


def key_settings(database_url: str, key_file: Path, **codec: Any) -> Settings:
    return load_settings(
        None,
        database_url=database_url,
        api_wait_seconds=10,
        codec={
            "key_file": str(key_file),
            "refresh_seconds": REFRESH_SECONDS,
            "liveness_seconds": LIVENESS_SECONDS,
            **codec,
        },
    )


@contextmanager
def running(settings: Settings) -> Iterator[bootstrap.Punctual]:
    system = bootstrap.build(settings)
    try:
        yield system
    finally:
        system.close()


def process_id(system: bootstrap.Punctual) -> str:
    assert system.key_watch is not None
    return system.key_watch.process.id


def punctual(database_url: str, *args: str, key_file: Path | None = None) -> tuple[int, str]:
    """``punctual keys ...`` in this process, as an operator types it (``rewrap`` reads
    the ring of ``codec.key_file``)."""
    env = {
        "PUNCTUAL_CODEC__LIVENESS_SECONDS": str(LIVENESS_SECONDS),
        "PUNCTUAL_CODEC__REFRESH_SECONDS": str(REFRESH_SECONDS),
    }
    if key_file is not None:
        env["PUNCTUAL_CODEC__KEY_FILE"] = str(key_file)
    result = CliRunner().invoke(cli, ["keys", *args, "--database-url", database_url], env=env)
    # With --json, stdout is the document; the one-line error goes to stderr as always.
    return result.exit_code, result.stdout if "--json" in args else result.output


def host_command(*args: str) -> subprocess.CompletedProcess[str]:
    """``punctual keys ...`` as the fleet's operator types it, run in this process with
    none of its ``PUNCTUAL_*`` settings: the command only reads and writes the store and
    key files, so a process of its own would add nothing but an interpreter start."""
    unset: dict[str, str | None] = {
        name: None for name in os.environ if name.upper().startswith("PUNCTUAL_")
    }
    result = CliRunner().invoke(cli, list(args), env=unset)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def keys_file_command(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["keys", *args])
    return result.exit_code, result.stdout if "--json" in args else result.output


def wait_for(what: str, check: Callable[[], T | None], timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def iso(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def start_body(message: str, start_at: str) -> dict[str, Any]:
    return {
        "workflow": "echo",
        "input": {"message": message},
        "business_request_id": f"keys-{secrets.token_hex(3)}",
        "start_at": start_at,
        "workload_class": "standard",
    }


SCHEDULE_BODY: dict[str, Any] = {
    "name": "nightly-echo",
    "workflow": "echo",
    "input": {"message": "from the schedule"},
    "spec": {"cron": "0 3 * * *", "time_zone": "UTC"},
    "overlap": "skip",
    "missed": "skip",
    "workload_class": "standard",
}


def admin(system: bootstrap.Punctual, client: Any) -> Api:
    return member_api(system, client, subject="root", role=Role.ADMIN)


def created(response: Any) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def sealed_column(
    system: bootstrap.Punctual, table: sa.Table, column: str, row_id: str
) -> EncryptedInput:
    with system.store.engine.connect() as conn:
        row = conn.execute(
            sa.select(table.c[f"{column}_key_id"], table.c[column]).where(table.c.id == row_id)
        ).one()
    return EncryptedInput(row[0], row[1])


@dataclasses.dataclass
class Stored:
    """One of everything that holds a sealed value, sealed with k1."""

    starts: list[str]
    canceled_start: str
    run_id: str
    schedule_id: str
    hook_with_secret: str
    hook_without_secret: str
    deleted_hook: str


def store_one_of_everything(system: bootstrap.Punctual, api: Api) -> Stored:
    live_worker(system)
    pending = [
        created(api.post("/scheduled-starts", start_body(f"pending {n}", iso(3600))))["id"]
        for n in range(3)
    ]
    canceled = created(api.post("/scheduled-starts", start_body("canceled", iso(3600))))
    response = api.post(f"/scheduled-starts/{canceled['id']}/cancel", {"version": 1})
    assert response.status_code == 200, response.text
    due = created(api.post("/scheduled-starts", start_body("dispatched", iso(-1))))
    report = dispatch_due(system.services, "runner-keys", 10)
    assert report.claimed == 1, report
    run_id = api.get(f"/scheduled-starts/{due['id']}").json()["dispatch"]["run_id"]
    schedule = created(api.post("/schedules", SCHEDULE_BODY))
    signed = created(api.post("/webhooks", {"url": HOOK_URL, "secret": "s3cret"}))
    unsigned = created(api.post("/webhooks", {"url": HOOK_URL}))
    deleted = created(api.post("/webhooks", {"url": HOOK_URL, "secret": "gone"}))
    assert api.delete(f"/webhooks/{deleted['id']}").status_code == 204
    return Stored(
        pending, canceled["id"], run_id, schedule["id"], signed["id"], unsigned["id"], deleted["id"]
    )


def check_report(system: bootstrap.Punctual) -> dict[str, Any]:
    return keys.key_check(system.store, LIVENESS_SECONDS, system.services.clock.now())


def by_key(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["key_id"]: item for item in report["keys"]}


# --------------------------------------------------------------------------- create


def test_create_writes_a_ring_then_adds_keys_that_are_not_active(tmp_path: Path) -> None:
    key_file = tmp_path / "host.keys"
    assert keys_file_command("create", "--key-file", str(key_file)) == (
        0,
        f"codec key k1 written as a new ring in {key_file}\n",
    )
    code, output = keys_file_command("create", "--key-file", str(key_file), "--json")
    assert code == 0, output
    assert json.loads(output) == {"key_id": "k2", "key_file": str(key_file), "active": False}
    ring_now = crypto.read_ring(key_file)
    assert (ring_now.active, sorted(ring_now.keys)) == ("k1", ["k1", "k2"])
    assert key_file.stat().st_mode & 0o777 == 0o600

    # Another host's ring gets the very same key, by copy.
    other = tmp_path / "other.keys"
    code, output = keys_file_command(
        "create", "--key-file", str(other), "--id", "k2", "--from", str(key_file)
    )
    assert code == 0, output
    assert crypto.read_ring(other).keys == {"k2": ring_now.keys["k2"]}
    assert other.stat().st_mode & 0o777 == 0o600

    code, output = keys_file_command("create", "--key-file", str(key_file), "--id", "k2")
    assert code == 4 and "key_exists" in output, output
    code, output = keys_file_command("create", "--key-file", str(key_file), "--id", "no spaces")
    assert code == 2 and "validation_error" in output, output
    code, output = keys_file_command(
        "create", "--key-file", str(other), "--id", "k7", "--from", str(key_file)
    )
    assert code == 3 and "not_found" in output, output
    assert sorted(crypto.read_ring(key_file).keys) == ["k1", "k2"], "refusals change nothing"


@pytest.mark.parametrize(
    ("codec", "named"),
    [
        ({"refresh_seconds": 11}, "codec.refresh_seconds: Input should be less than or equal"),
        ({"refresh_seconds": 0}, "codec.refresh_seconds: Input should be greater than 0"),
        (
            {"refresh_seconds": 5, "liveness_seconds": 9},
            "codec.liveness_seconds (9) must be at least twice codec.refresh_seconds (5)",
        ),
    ],
)
def test_the_refresh_stays_within_ten_seconds_and_twice_within_the_liveness(
    codec: dict[str, float], named: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_settings(None, codec=codec)
    assert named in str(caught.value)


# --------------------------------------------------------------------------- activate


def test_activation_is_refused_naming_a_live_process_that_lacks_the_key(
    database_url: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    both = ring(tmp_path / "both.keys", material, "k1", "k2")
    old = ring(tmp_path / "old.keys", material, "k1")
    with (
        running(key_settings(database_url, both)) as ready,
        running(key_settings(database_url, old)) as lagging,
    ):
        code, output = punctual(database_url, "activate", "--id", "k2")
        assert code == 4, output
        assert "key_not_held" in output
        assert process_id(lagging) in output
        assert process_id(ready) not in output
        with ready.store.transaction(readonly=True) as tx:
            assert tx.keys.active_key_id() is None, "a refused activation records nothing"
        time.sleep(3 * REFRESH_SECONDS)
        assert ready.services.codec.active_key_id == "k1"
        assert lagging.services.codec.active_key_id == "k1"

        code, output = punctual(database_url, "activate", "--id", "k2", "--json")
        assert code == 4
        assert json.loads(output)["error"]["details"]["processes"] == [process_id(lagging)]


def test_every_live_process_switches_within_the_refresh_without_a_restart(
    database_url: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    first = ring(tmp_path / "first.keys", material, "k1", "k2")
    second = ring(tmp_path / "second.keys", material, "k1", "k2")
    with (
        running(key_settings(database_url, first)) as api_side,
        running(key_settings(database_url, second)) as other,
    ):
        code, output = punctual(database_url, "activate", "--id", "k2")
        assert code == 0, output
        assert "codec key k2 is the active key (was not recorded)" in output
        activated = time.monotonic()
        wait_for(
            "both processes to seal with k2",
            lambda: all(s.services.codec.active_key_id == "k2" for s in (api_side, other)),
            SWITCH_DEADLINE_SECONDS,
        )
        assert time.monotonic() - activated < SWITCH_DEADLINE_SECONDS

        register_demo(api_side)
        with in_process(api_side) as client:
            start = created(
                member_api(api_side, client).post(
                    "/scheduled-starts", start_body("after the switch", iso(3600))
                )
            )
        sealed = sealed_column(api_side, t.starts, "input", start["id"])
        assert sealed.key_id == "k2"
        assert other.services.codec.decrypt(sealed, "acme") == {"message": "after the switch"}

        # Their reports follow too: what they hold, what they seal with, what they run.
        def sealing_with_k2() -> dict[str, Any] | None:
            report = check_report(api_side)
            both_ids = {process_id(api_side), process_id(other)}
            return report if set(by_key(report)["k2"]["sealing_with_it"]) == both_ids else None

        report = wait_for("both reports to show k2", sealing_with_k2, SWITCH_DEADLINE_SECONDS)
        assert report["active_key_id"] == "k2"
        views = {p["id"]: p for p in report["processes"]}
        assert views[process_id(api_side)]["components"] == ["api"]
        assert views[process_id(other)]["key_ids"] == ["k1", "k2"]

        code, output = punctual(database_url, "activate", "--id", "k2")
        assert (code, output.strip()) == (0, "codec key k2 was already the active key")


def test_stopped_and_silent_processes_do_not_block_activation(
    database_url: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    both = ring(tmp_path / "both.keys", material, "k1", "k2")
    old = ring(tmp_path / "old.keys", material, "k1")
    with running(key_settings(database_url, both)) as live:
        with running(key_settings(database_url, old)) as stopped:
            gone = process_id(stopped)
        # A process that lost the store long ago (killed, partitioned) and lacks the key.
        silent = ProcessRecord(
            "prc_silent", "far-away", 7, ["worker"], ["k1"], "k1", datetime.now(UTC)
        )
        with live.store.transaction() as tx:
            tx.keys.heartbeat_process(silent, live.services.clock.now())
        with live.store.engine.begin() as conn:
            conn.execute(
                sa.update(t.processes)
                .where(t.processes.c.id == "prc_silent")
                .values(heartbeat_at=datetime.now(UTC) - timedelta(hours=1))
            )
        live_ids = [p["id"] for p in check_report(live)["processes"]]
        assert live_ids == [process_id(live)], (gone, live_ids)

        code, output = punctual(database_url, "activate", "--id", "k2")
        assert code == 0, output
        wait_for(
            "the live process to switch",
            lambda: live.services.codec.active_key_id == "k2",
            SWITCH_DEADLINE_SECONDS,
        )


def test_what_a_process_runs_stays_reported_while_its_timer_beats(
    database_url: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    """A timer beat that read the components before one was added must not commit after
    the beat that reported it: ``keys check`` would lose the component until the next beat."""
    key_file = ring(tmp_path / "k.keys", material, "k1")
    settings = key_settings(database_url, key_file, refresh_seconds=0.001, liveness_seconds=2)
    with running(settings) as system:
        assert system.key_watch is not None
        added: list[str] = []
        for component in ("api", "runner", "worker", "sweeper", "deliverer"):
            system.key_watch.add_component(component)
            added.append(component)
            for _ in range(40):  # the timer beats about once per read
                with system.store.engine.connect() as conn:
                    (stored,) = conn.execute(
                        sa.select(t.processes.c.components).where(
                            t.processes.c.id == process_id(system)
                        )
                    ).one()
                assert sorted(stored) == sorted(added), f"after adding {component}"


def test_a_process_that_missed_an_activation_seals_nothing(
    database_url: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    """A process silent while a key was activated (so not asked) finds the key missing
    from its ring: it refuses to seal rather than write input others may not read."""
    both = ring(tmp_path / "both.keys", material, "k1", "k2")
    old = ring(tmp_path / "old.keys", material, "k1")
    with (
        running(key_settings(database_url, both)) as current,
        running(key_settings(database_url, old)) as behind,
    ):
        with current.store.transaction() as tx:
            tx.keys.set_active_key_id("k2", current.services.clock.now())
        wait_for(
            "the process without k2 to stop sealing",
            lambda: behind.services.codec.missing_active_key == "k2",
            SWITCH_DEADLINE_SECONDS,
        )
        wait_for(
            "the other to seal with k2",
            lambda: current.services.codec.active_key_id == "k2",
            SWITCH_DEADLINE_SECONDS,
        )
        register_demo(current)
        with pytest.raises(ActiveKeyNotHeld):
            behind.services.codec.encrypt({"message": "never sealed"}, "acme")
        with in_process(behind) as client:
            refused = member_api(behind, client).post(
                "/scheduled-starts", start_body("refused", iso(3600))
            )
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "codec_key_unavailable"
        with behind.store.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(t.starts)).scalar() == 0

        def sealing_nothing() -> dict[str, Any] | None:
            report = check_report(current)
            views = {p["id"]: p for p in report["processes"]}
            return report if views[process_id(behind)]["active_key_id"] is None else None

        report = wait_for("its report to say it seals nothing", sealing_nothing, 10)
        assert process_id(behind) not in by_key(report)["k2"]["held_by"]
        code, output = punctual(database_url, "activate", "--id", "k2")
        assert code == 4 and process_id(behind) in output, output


# --------------------------------------------------------------------------- startup


def test_startup_follows_the_store_and_refuses_what_contradicts_it(
    database_url: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    both = ring(tmp_path / "both.keys", material, "k1", "k2")
    with running(key_settings(database_url, both)):
        assert punctual(database_url, "activate", "--id", "k2")[0] == 0

    # The file still names k1 active: the store's k2 wins.
    with running(key_settings(database_url, both)) as later:
        assert later.services.codec.active_key_id == "k2"

    with pytest.raises(ConfigurationError) as configured:
        bootstrap.build(key_settings(database_url, both, active_key="k1"))
    message = str(configured.value)
    assert "codec.active_key is 'k1'" in message and "'k2'" in message, message
    assert "punctual keys activate" in message

    lacking = ring(tmp_path / "lacking.keys", material, "k1")
    with pytest.raises(ConfigurationError) as missing:
        bootstrap.build(key_settings(database_url, lacking))
    assert "'k2' is not in this process's key ring" in str(missing.value)
    assert "--from" in str(missing.value)

    with running(key_settings(database_url, both, active_key="k2")) as agreeing:
        assert agreeing.services.codec.active_key_id == "k2"


def test_before_any_activation_a_process_must_seal_with_the_key_the_live_ones_use(
    database_url: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    """The unsafe rolling restart of old: a new ring's ``active`` switched while other
    processes still run with the old one is refused, naming the way to do it."""
    old = ring(tmp_path / "old.keys", material, "k1")
    new = ring(tmp_path / "new.keys", material, "k1", "k2", active="k2")
    with running(key_settings(database_url, old)) as live:
        with pytest.raises(ConfigurationError) as caught:
            bootstrap.build(key_settings(database_url, new))
        message = str(caught.value)
        assert process_id(live) in message and "'k1'" in message and "'k2'" in message
        assert "punctual keys activate" in message
    with running(key_settings(database_url, new)) as alone:
        assert alone.services.codec.active_key_id == "k2"


# --------------------------------------------------------------------------- check


def test_check_counts_what_still_needs_each_key_and_who_holds_it(
    database_url: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    key_file = ring(tmp_path / "host.keys", material, "k1", "k2")
    with running(key_settings(database_url, key_file)) as system, in_process(system) as client:
        api = admin(system, client)
        store_one_of_everything(system, api)
        assert punctual(database_url, "activate", "--id", "k2")[0] == 0
        wait_for("the switch", lambda: system.services.codec.active_key_id == "k2", 10)
        created(api.post("/scheduled-starts", start_body("sealed with k2", iso(3600))))

        code, output = punctual(database_url, "check", "--key-file", str(key_file), "--json")
        assert code == 0, output
        report = json.loads(output)
        found = by_key(report)
        assert found["k1"]["needed_by"] == {
            "runs": 1,
            "schedules": 1,
            "starts": 3,
            "webhook_secrets": 1,
            "webhook_urls": 2,
        }, "canceled and dispatched starts and the deleted webhook need no key"
        assert found["k1"]["needed"] == 8
        assert found["k2"]["needed_by"] == {"starts": 1}
        assert (found["k1"]["active"], found["k2"]["active"]) == (False, True)
        assert found["k1"]["held_by"] == [process_id(system)]
        assert found["k1"]["in_key_file"] is True
        assert report["active_key_id"] == "k2"

        code, human = punctual(database_url, "check")
        assert code == 0, human
        assert "active key: k2" in human
        assert (
            "k1: needed by 1 unfinished runs, 1 schedules, 3 pending starts and occurrences, "
            "1 webhook secrets, 2 webhook urls; held by 1 live process(es)"
        ) in human

        # The deployment preflight says the same.
        code_check = CliRunner().invoke(
            cli,
            ["definitions", "check", "--json", "--database-url", database_url],
            env={"PUNCTUAL_CODEC__KEY_FILE": str(key_file)},
        )
        assert code_check.exit_code == 0, code_check.output
        preflight = {k["key_id"]: k for k in json.loads(code_check.output)["codec_keys"]}
        assert "2 webhook urls" in preflight["k1"]["needed_by"]
        assert preflight["k2"]["active"] is True


# --------------------------------------------------------------------------- rewrap


class InterferingCodec:
    """The process's codec, with a concurrent change made just before the first value of
    ``kind`` is resealed: between the rewrap's read and its write."""

    def __init__(self, codec: Codec, on_first_reseal: Callable[[], None]) -> None:
        self._codec = codec
        self._on_first_reseal: Callable[[], None] | None = on_first_reseal

    def __getattr__(self, name: str) -> Any:
        return getattr(self._codec, name)

    def reseal(self, encrypted: EncryptedInput, aad: str) -> EncryptedInput:
        if self._on_first_reseal is not None:
            interfere, self._on_first_reseal = self._on_first_reseal, None
            interfere()
        return self._codec.reseal(encrypted, aad)


def rows_by_key(system: bootstrap.Punctual) -> dict[str, dict[str, str | None]]:
    with system.store.engine.connect() as conn:
        return {
            "starts": dict(conn.execute(sa.select(_s.id, _s.input_key_id)).all()),
            "runs": dict(conn.execute(sa.select(_r.id, _r.input_key_id)).all()),
            "schedules": dict(conn.execute(sa.select(_sch.id, _sch.input_key_id)).all()),
            "webhook_urls": dict(conn.execute(sa.select(_w.id, _w.url_key_id)).all()),
            "webhook_secrets": dict(conn.execute(sa.select(_w.id, _w.secret_key_id)).all()),
        }


def test_rewrap_moves_everything_still_read_onto_the_active_key_in_batches(
    database_url: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    key_file = ring(tmp_path / "host.keys", material, "k1", "k2")
    with running(key_settings(database_url, key_file)) as system, in_process(system) as client:
        api = admin(system, client)
        stored = store_one_of_everything(system, api)
        soon = created(api.post("/scheduled-starts", start_body("runs after rewrap", iso(4))))
        before = {s: api.get(f"/scheduled-starts/{s}").json() for s in stored.starts}
        schedule_before = api.get(f"/schedules/{stored.schedule_id}").json()
        assert punctual(database_url, "activate", "--id", "k2")[0] == 0

        code, output = punctual(database_url, "rewrap", "--batch", "2", "--json", key_file=key_file)
        assert code == 0, output
        report = json.loads(output)
        assert report["active_key_id"] == "k2"
        assert report["rewrapped"] == {
            "starts": 4,
            "runs": 1,
            "schedules": 1,
            "webhook_urls": 2,
            "webhook_secrets": 1,
        }
        assert (report["changed"], report["unreadable"], report["still_needed"]) == ({}, {}, {})

        rows = rows_by_key(system)
        for start_id in [*stored.starts, soon["id"]]:
            assert rows["starts"][start_id] == "k2"
        assert rows["starts"][stored.canceled_start] == "k1", "terminal input is not read again"
        assert rows["runs"][stored.run_id] == "k2"
        assert rows["schedules"][stored.schedule_id] == "k2"
        assert rows["webhook_urls"][stored.hook_with_secret] == "k2"
        assert rows["webhook_secrets"][stored.hook_with_secret] == "k2"
        assert rows["webhook_secrets"][stored.hook_without_secret] is None
        assert rows["webhook_urls"][stored.deleted_hook] == "k1"

        codec = system.services.codec
        assert codec.decrypt(
            sealed_column(system, t.starts, "input", stored.starts[0]), "acme"
        ) == {"message": "pending 0"}
        assert codec.decrypt(
            sealed_column(system, t.schedules, "input", stored.schedule_id), "acme"
        ) == {"message": "from the schedule"}
        assert (
            codec.decrypt(sealed_column(system, t.webhooks, "url", stored.hook_with_secret), "acme")
            == HOOK_URL
        )
        assert (
            codec.decrypt(
                sealed_column(system, t.webhooks, "secret", stored.hook_with_secret), "acme"
            )
            == "s3cret"
        )
        # Invisible to users: no version, no updated_at moved.
        assert {s: api.get(f"/scheduled-starts/{s}").json() for s in stored.starts} == before
        assert api.get(f"/schedules/{stored.schedule_id}").json() == schedule_before

        code, output = punctual(database_url, "rewrap", "--json", key_file=key_file)
        assert code == 0, output
        assert json.loads(output)["rewrapped"] == {}, "a second pass finds nothing to move"

    # Nothing read any more needs k1: a process holding only k2 starts, dispatches and runs
    # the start sealed with k1 before the rewrap.
    only_k2 = ring(tmp_path / "only-k2.keys", material, "k2", active="k2")
    with running(key_settings(database_url, only_k2)) as successor, in_process(successor) as client:
        successor.start_worker("punctual.demo:app", slots=1)
        successor.start_runner()
        api = admin(successor, client)

        def ended() -> dict[str, Any] | None:
            start = api.get(f"/scheduled-starts/{soon['id']}").json()
            if start["dispatch"] is None:
                return None
            run = api.get(f"/runs/{start['dispatch']['run_id']}").json()
            return run if run["state"] == "completed" else None

        run = wait_for("the rewrapped start's run", ended, 30)
        assert run["result"] == {"message": "runs after rewrap"}


def test_rewrap_never_overwrites_a_concurrent_change_or_a_claimed_start(
    database_url: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    key_file = ring(tmp_path / "host.keys", material, "k1", "k2")
    with running(key_settings(database_url, key_file)) as system, in_process(system) as client:
        api = admin(system, client)
        register_demo(system)
        schedule = created(api.post("/schedules", SCHEDULE_BODY))
        due = created(api.post("/scheduled-starts", start_body("claimed", iso(-1))))
        assert punctual(database_url, "activate", "--id", "k2")[0] == 0
        wait_for("the switch", lambda: system.services.codec.active_key_id == "k2", 10)

        now = system.services.clock.now()
        with system.store.transaction() as tx:
            (claim,) = tx.starts.claim_due(now, 10, "runner-elsewhere", 30)
        assert claim.id == due["id"]

        def edit_the_schedule() -> None:
            response = api.client.patch(
                api.path(f"/schedules/{schedule['id']}"),
                headers=api.headers(secrets.token_hex(8)),
                json={"version": schedule["version"], "input": {"message": "edited meanwhile"}},
            )
            assert response.status_code == 200, response.text

        interfering = dataclasses.replace(
            system.services, codec=InterferingCodec(system.services.codec, edit_the_schedule)
        )
        report = keys.rewrap(interfering, batch_size=10)
        assert report.changed == {"schedules": 1}, report
        assert report.rewrapped == {}, report
        assert report.still_needed == {"k1": {"starts": 1}}, "the claimed start waits"

        sealed = sealed_column(system, t.schedules, "input", schedule["id"])
        assert sealed.key_id == "k2"
        assert system.services.codec.decrypt(sealed, "acme") == {"message": "edited meanwhile"}
        assert sealed_column(system, t.starts, "input", due["id"]).key_id == "k1"

        # Once the claim is given back, the next rewrap moves it.
        with system.store.transaction() as tx:
            assert tx.starts.release_claims([claim.token], system.services.clock.now()) == {
                due["id"]
            }
        again = keys.rewrap(system.services, batch_size=10)
        assert (again.rewrapped, again.still_needed) == ({"starts": 1}, {})

        # The store's compare-and-set itself: a stale old value replaces nothing.
        current = sealed_column(system, t.schedules, "input", schedule["id"])
        stale = EncryptedInput("k1", b"not what the row holds")
        with system.store.transaction() as tx:
            replaced = tx.keys.reseal(
                SealedKind.SCHEDULES,
                [Resealed(schedule["id"], stale, system.services.codec.encrypt({}, "acme"))],
            )
        assert replaced == set()
        assert sealed_column(system, t.schedules, "input", schedule["id"]) == current


def test_rewrap_needs_a_recorded_active_key_and_a_sane_batch(
    database_url: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    key_file = ring(tmp_path / "host.keys", material, "k1")
    with running(key_settings(database_url, key_file)):
        code, output = punctual(database_url, "rewrap", key_file=key_file)
        assert code == 4 and "no_active_key" in output, output
        code, output = punctual(database_url, "rewrap", "--batch", "0", key_file=key_file)
        assert code == 2 and "--batch" in output, output


# --------------------------------------------------------------------------- retire


def test_retire_is_refused_while_needed_or_active_and_allowed_after_rewrap(
    database_url: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    key_file = ring(tmp_path / "host.keys", material, "k1", "k2")
    with running(key_settings(database_url, key_file)) as system, in_process(system) as client:
        api = admin(system, client)
        register_demo(system)
        start = created(api.post("/scheduled-starts", start_body("needs k1", iso(3600))))

        code, output = punctual(database_url, "retire", "--key-file", str(key_file), "--id", "k1")
        assert code == 4 and "in_use" in output, output
        assert process_id(system) in output, "before any activation, k1 is what it seals with"

        assert punctual(database_url, "activate", "--id", "k2")[0] == 0
        wait_for("the switch", lambda: system.services.codec.active_key_id == "k2", 10)
        code, output = punctual(database_url, "retire", "--key-file", str(key_file), "--id", "k1")
        assert code == 4 and "1 pending starts and occurrences" in output, output
        code, output = punctual(database_url, "retire", "--key-file", str(key_file), "--id", "k2")
        assert code == 4 and "key_active" in output, output
        code, output = punctual(database_url, "retire", "--key-file", str(key_file), "--id", "k3")
        assert code == 3, output
        assert sorted(crypto.read_ring(key_file).keys) == ["k1", "k2"], "refusals change nothing"

        assert punctual(database_url, "rewrap", key_file=key_file)[0] == 0
        code, output = punctual(
            database_url, "retire", "--key-file", str(key_file), "--id", "k1", "--json"
        )
        assert code == 0, output
        assert json.loads(output)["retired"] is True
        after = crypto.read_ring(key_file)
        assert (after.active, sorted(after.keys)) == ("k2", ["k2"]), "the file follows the store"
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert api.get(f"/scheduled-starts/{start['id']}").json()["state"] == "scheduled"

    with running(key_settings(database_url, key_file)) as restarted:
        assert restarted.services.codec.key_ids() == ["k2"]


# --------------------------------------------------------------------------- real processes


@dataclasses.dataclass
class Proc:
    """One real punctual process with its own key file, and its log."""

    name: str
    args: list[str]
    key_file: Path
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    port: int | None = None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Fleet:
    """Real ``punctual serve`` and ``punctual worker`` processes on one database, each
    started from the key file it is given (the harness's ``Processes`` shares one file)."""

    def __init__(self, directory: Path, database_url: str) -> None:
        self.directory = directory
        self.database_url = database_url
        self.procs: dict[str, Proc] = {}
        self._incarnation = 0

    def env(self, key_file: Path) -> dict[str, str]:
        return punctual_env(
            self.database_url,
            key_file,
            PUNCTUAL_CODEC__REFRESH_SECONDS="0.5",
            PUNCTUAL_CODEC__LIVENESS_SECONDS="5",
        )

    def serve(self, name: str, components: str, key_file: Path) -> Proc:
        port = free_port()
        args = ["serve", "--components", components, "--app", DEMO_APP]
        args += ["--port", str(port), "--dev-token", DEV_TOKEN]
        proc = Proc(name, args, key_file, self.directory / "unused.log", port=port)
        return self.start(proc)

    def worker(self, name: str, task_queue: str, key_file: Path) -> Proc:
        args = ["worker", "--app", DEMO_APP, "--task-queue", task_queue, "--slots", "1"]
        return self.start(Proc(name, args, key_file, self.directory / "unused.log"))

    def start(self, proc: Proc) -> Proc:
        self._incarnation += 1
        proc.log = self.directory / f"{proc.name}.{self._incarnation}.log"
        with proc.log.open("wb") as out:
            proc.popen = subprocess.Popen(
                [str(PUNCTUAL), *proc.args],
                cwd=self.directory,
                env=self.env(proc.key_file),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.procs[proc.name] = proc
        return proc

    def wait_ready(self, proc: Proc) -> str:
        """The worker id of a worker, or ``ready`` for an API once /readyz answers."""

        def ready() -> str | None:
            assert proc.popen is not None
            if proc.popen.poll() is not None:
                raise AssertionError(f"{proc.name} exited early:\n{proc.text()[-4000:]}")
            if proc.port is None:
                found = re.search(r"event=worker_started worker=(\S+)", proc.text())
                return found.group(1) if found else None
            try:
                answer = httpx.get(f"http://127.0.0.1:{proc.port}/readyz", timeout=2)
            except httpx.HTTPError:
                return None
            return "ready" if answer.status_code == 200 else None

        return harness_wait_for(f"{proc.name} to be ready", ready, STARTUP_SECONDS)

    def stop(self, *procs: Proc) -> None:
        """SIGTERM to each, then wait for each: their graceful shutdowns overlap."""
        live = [p.popen for p in procs if p.popen is not None and p.popen.poll() is None]
        for popen in live:
            popen.send_signal(signal.SIGTERM)
        for popen in live:
            try:
                popen.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(timeout=STOP_SECONDS)

    def restart(self, *procs: Proc) -> None:
        self.stop(*procs)
        for proc in procs:
            self.start(proc)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return host_command(*args, "--database-url", self.database_url)

    def close(self) -> None:
        self.stop(*reversed(list(self.procs.values())))

    def describe(self) -> str:
        return "\n".join(
            f"===== {p.name} ({p.log}) =====\n{p.text()[-4000:]}" for p in self.procs.values()
        )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database for real processes: a SQLite file or a new PostgreSQL one."""
    if request.param == "postgres":
        with fresh_database() as url:
            yield url
        return
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    migrate_database(url)
    yield url


def echo_run(client: httpx.Client, port: int, workload_class: str, message: str) -> str:
    """Create an echo start due now through the API on ``port``; its id."""
    body = start_body(message, iso(-1)) | {"workload_class": workload_class}
    response = client.post(
        f"http://127.0.0.1:{port}/v1/tenants/default/scheduled-starts",
        headers={"Authorization": f"Bearer {DEV_TOKEN}", "Idempotency-Key": secrets.token_hex(8)},
        json=body,
    )
    assert response.status_code == 201, response.text
    start_id: str = response.json()["id"]
    return start_id


def completed_run(client: httpx.Client, port: int, start_id: str) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}/v1/tenants/default"
    headers = {"Authorization": f"Bearer {DEV_TOKEN}"}

    def ended() -> dict[str, Any] | None:
        start = client.get(f"{base}/scheduled-starts/{start_id}", headers=headers).json()
        if start["dispatch"] is None:
            return None
        run: dict[str, Any] = client.get(
            f"{base}/runs/{start['dispatch']['run_id']}", headers=headers
        ).json()
        return run if run["state"] in ("completed", "failed", "timed_out") else None

    run = harness_wait_for(f"the run of {start_id}", ended, 60)
    assert run["state"] == "completed", run
    return run


def claimed_by(database_url: str, start_id: str) -> tuple[str, str]:
    """(input key id, worker that claimed the run) of a dispatched start."""
    engine = sa.create_engine(normalize_url(database_url))
    try:
        with engine.connect() as conn:
            key_id, run_id = conn.execute(
                sa.select(_s.input_key_id, _s.run_id).where(_s.id == start_id)
            ).one()
            worker = conn.execute(sa.select(_r.claimed_by).where(_r.id == run_id)).scalar_one()
    finally:
        engine.dispose()
    return key_id, worker


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rotation_across_processes_started_from_different_key_files(
    shared_database: str, tmp_path: Path, material: dict[str, bytes]
) -> None:
    """Side A (an API with the runner, a worker on queue ``standard``) has k1 and k2; side
    B (an API, a worker on queue ``batch``) has only k1. Activating k2 is refused, naming
    B's processes; once k2 is copied into B's key file and B restarted, it is accepted,
    every process switches without a restart, and input created through either API is
    read by the other side's worker."""
    file_a = ring(tmp_path / "a.keys", material, "k1", "k2")
    file_b = ring(tmp_path / "b.keys", material, "k1")
    fleet = Fleet(tmp_path, shared_database)
    try:
        api_a = fleet.serve("api-a", "api,runner", file_a)
        worker_a = fleet.worker("worker-a", "standard", file_a)
        worker_b = fleet.worker("worker-b", "batch", file_b)
        fleet.wait_ready(api_a)  # before B's API: A's creates tenant default with the dev token
        api_b = fleet.serve("api-b", "api", file_b)
        worker_a_id = fleet.wait_ready(worker_a)
        fleet.wait_ready(api_b)
        fleet.wait_ready(worker_b)
        assert api_a.port is not None and api_b.port is not None

        refused = fleet.cli("keys", "activate", "--id", "k2")
        assert refused.returncode == 4, refused.stdout + refused.stderr
        for lacking in (api_b, worker_b):
            assert lacking.popen is not None
            assert f"pid {lacking.popen.pid})" in refused.stderr, refused.stderr
        for holding in (api_a, worker_a):
            assert holding.popen is not None
            assert f"pid {holding.popen.pid})" not in refused.stderr, refused.stderr

        with httpx.Client(timeout=10) as client:
            before = echo_run(client, api_b.port, "standard", "sealed with k1 by B")
            completed_run(client, api_b.port, before)

            added = host_command(
                "keys", "create", "--key-file", str(file_b), "--id", "k2", "--from", str(file_a)
            )
            assert added.returncode == 0, added.stderr
            fleet.restart(api_b, worker_b)
            fleet.wait_ready(api_b)
            worker_b_id = fleet.wait_ready(worker_b)

            accepted = fleet.cli("keys", "activate", "--id", "k2")
            assert accepted.returncode == 0, accepted.stdout + accepted.stderr
            activated = time.monotonic()

            def all_sealing_with_k2() -> dict[str, Any] | None:
                checked = fleet.cli("keys", "check", "--json")
                assert checked.returncode == 0, checked.stderr
                report: dict[str, Any] = json.loads(checked.stdout)
                sealing = {p["pid"]: p["active_key_id"] for p in report["processes"]}
                pids = {p.popen.pid for p in (api_a, worker_a, api_b, worker_b) if p.popen}
                return report if all(sealing.get(pid) == "k2" for pid in pids) else None

            report = harness_wait_for("every process to seal with k2", all_sealing_with_k2, 10)
            assert time.monotonic() - activated < SWITCH_DEADLINE_SECONDS + 5
            assert len(report["processes"]) == 4, report["processes"]

            # A's API seals for B's worker (queue batch), B's API for A's worker (standard).
            from_a = echo_run(client, api_a.port, "batch", "sealed by A, read by B")
            from_b = echo_run(client, api_b.port, "standard", "sealed by B, read by A")
            assert completed_run(client, api_b.port, from_a)["result"] == {
                "message": "sealed by A, read by B"
            }
            assert completed_run(client, api_a.port, from_b)["result"] == {
                "message": "sealed by B, read by A"
            }
        assert claimed_by(shared_database, from_a) == ("k2", worker_b_id)
        assert claimed_by(shared_database, from_b) == ("k2", worker_a_id)
        assert claimed_by(shared_database, before)[0] == "k1"
    except BaseException:
        print(fleet.describe())
        raise
    finally:
        fleet.close()
