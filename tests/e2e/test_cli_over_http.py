"""The tenant commands over HTTP (SPEC IF-3, API.md "The CLI over HTTP"), against a real
``punctual serve``.

Every command runs in a directory that holds no database, no configuration and no key
file, with only ``PUNCTUAL_URL`` and ``PUNCTUAL_TOKEN`` (or ``--url``/``--token``) in its
environment, and the directory is checked to be empty after each one: the commands need
a server and a token, nothing else. ``--json`` output is compared with the route's own
answer, and every exit code API.md lists is produced for real.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import httpx
import pytest

from tests.e2e.test_cli_and_serve import (
    CLI_SECONDS,
    DEV_TOKEN,
    PUNCTUAL,
    Server,
    clean_env,
    free_port,
    sqlite_url_of,
    start_server,
    together,
    wait_for,
)

pytestmark = pytest.mark.e2e

TIGHT_TENANT = "tight"
"""A tenant whose host quota allows one pending start (the 429 case)."""
KEY_LINE = re.compile(r"^idempotency key: (\S+)", re.MULTILINE)
AT_ONCE_SECONDS = 60.0
"""How long a command due at once is sent again while a slow start made it late."""


@dataclass
class Cli:
    """Runs ``punctual`` in an empty directory against one server."""

    server: Server
    workdir: Path
    token: str = DEV_TOKEN
    commands: list[list[str]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.base_url

    def __call__(
        self, *args: str, token: str | None = None, url: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = clean_env()
        env["PUNCTUAL_URL"] = url if url is not None else self.url
        env["PUNCTUAL_TOKEN"] = token if token is not None else self.token
        result = subprocess.run(
            [str(PUNCTUAL), *args],
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=CLI_SECONDS,
            check=False,
        )
        self.commands.append(list(args))
        left = sorted(p.name for p in self.workdir.iterdir())
        assert left == [], f"punctual {' '.join(args)} wrote {left} into its directory"
        return result

    def json(self, *args: str, token: str | None = None) -> Any:
        """Run with ``--json``, expect exit 0, answer the parsed output."""
        result = self(*args, "--json", token=token)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return json.loads(result.stdout)

    def host(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A host command on the server's own database (the bootstrap side)."""
        database = sqlite_url_of(self.server.directory)
        return subprocess.run(
            [str(PUNCTUAL), *args, "--database-url", database],
            cwd=self.server.directory,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=CLI_SECONDS,
            check=False,
        )

    def host_token(self, tenant: str, subject: str, role: str) -> str:
        made = self.host(
            "tokens", "create", "--tenant", tenant, "--subject", subject, "--role", role, "--json"
        )
        assert made.returncode == 0, made.stderr
        token: str = json.loads(made.stdout)["token"]
        return token

    def route(self, path: str, token: str | None = None, tenant: str = "default") -> Any:
        """``GET /v1/tenants/{tenant}{path}``: the route's own answer, to compare with."""
        answer = httpx.get(
            f"{self.url}/v1/tenants/{tenant}{path}",
            headers={"Authorization": f"Bearer {token or self.token}"},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        return answer.json()


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    base = tmp_path_factory.mktemp("cli-over-http")
    config = base / "punctual.toml"
    config.write_text(f"[tenants.{TIGHT_TENANT}]\nmax_pending_starts = 1\n")
    server = start_server(base / "server", "--dev-token", DEV_TOKEN, "--config", str(config))
    workdir = base / "elsewhere"
    workdir.mkdir()
    try:
        assert server.admin_token() == DEV_TOKEN
        server.wait_healthy()
        yield Cli(server, workdir)
    finally:
        try:
            server.terminate()
        finally:
            server.kill()


def in_a_day() -> str:
    return (datetime.now(UTC) + timedelta(days=1)).isoformat(timespec="seconds")


def create_args(request_id: str, *extra: str, start_at: str | None = None) -> list[str]:
    return [
        "starts",
        "create",
        "--workflow",
        "echo",
        "--input",
        json.dumps({"message": request_id}),
        "--start-at",
        start_at or in_a_day(),
        "--business-request-id",
        request_id,
        *extra,
    ]


def at_once(cli: Cli, *command: str, token: str | None = None) -> Any:
    """``starts create|reschedule … --start-at <now>`` with ``--json``: due at once. A CLI
    process can take longer than the allowed clock skew to start on a loaded machine;
    the server then refuses ``start_at_in_past`` and stores nothing, so the command runs
    again with a new now (and the new key the CLI makes), bounded."""
    deadline = time.monotonic() + AT_ONCE_SECONDS
    while True:
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        result = cli(*command, "--start-at", now, "--json", token=token)
        refused = result.returncode != 0 and "start_at_in_past" in result.stdout
        if not refused or time.monotonic() >= deadline:
            assert result.returncode == 0, (command, result.stdout, result.stderr)
            return json.loads(result.stdout)


def printed_key(stderr: str) -> str:
    match = KEY_LINE.search(stderr)
    assert match, f"no idempotency key on stderr: {stderr!r}"
    return match.group(1)


def error_code(result: subprocess.CompletedProcess[str]) -> str:
    """The envelope's ``code`` that ``--json`` printed for a refused request."""
    code: str = json.loads(result.stdout)["error"]["code"]
    return code


# --- a server, a token, nothing else ------------------------------------------------------------


def test_a_tenant_command_needs_only_the_url_and_the_token(cli: Cli) -> None:
    def with_flags_only() -> subprocess.CompletedProcess[str]:
        """The same with flags only: nothing from the environment."""
        return subprocess.run(
            [str(PUNCTUAL), "starts", "list", "--json", "--url", cli.url, "--token", cli.token],
            cwd=cli.workdir,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=CLI_SECONDS,
            check=False,
        )

    listed, result = together(lambda: cli.json("starts", "list"), with_flags_only)
    assert listed == cli.route("/scheduled-starts")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == cli.route("/scheduled-starts")
    assert list(cli.workdir.iterdir()) == []


def test_starts_create_get_list_print_the_routes_json(cli: Cli) -> None:
    berlin = (datetime.now(ZoneInfo("Europe/Berlin")) + timedelta(days=1)).isoformat("T", "seconds")
    zoned = ("--time-zone", "Europe/Berlin", "--attribute", "a=b")
    created = cli.json(*create_args("json-1", *zoned, start_at=berlin))
    assert created["state"] == "scheduled"
    assert created["time_zone"] == "Europe/Berlin"
    assert created["attributes"] == {"a": "b"}
    assert created["created_by"] == "admin"
    assert created == cli.route(f"/scheduled-starts/{created['id']}")

    got, page, human = together(
        lambda: cli.json("starts", "get", created["id"]),
        lambda: cli.json("starts", "list", "--business-request-id", "json-1"),
        lambda: cli("starts", "list", "--business-request-id", "json-1"),
    )
    assert got == cli.route(f"/scheduled-starts/{created['id']}")
    assert page == cli.route("/scheduled-starts?business_request_id=json-1")
    assert [item["id"] for item in page["items"]] == [created["id"]]

    assert human.returncode == 0, human.stderr
    assert created["id"] in human.stdout
    assert "scheduled" in human.stdout


def test_reschedule_and_cancel_read_the_version_or_take_it(cli: Cli) -> None:
    start = cli.json(*create_args("moves"))
    later = (datetime.now(UTC) + timedelta(days=2)).isoformat(timespec="seconds")
    moved = cli.json("starts", "reschedule", start["id"], "--start-at", later)
    assert moved["version"] == start["version"] + 1
    assert moved == cli.route(f"/scheduled-starts/{start['id']}")

    stale = cli("starts", "cancel", start["id"], "--version", str(start["version"]), "--json")
    assert stale.returncode == 4, stale.stderr
    assert error_code(stale) == "version_conflict"

    canceled = cli.json("starts", "cancel", start["id"], "--reason", "not needed")
    assert canceled["state"] == "canceled"
    assert canceled == cli.route(f"/scheduled-starts/{start['id']}")


# --- idempotency keys ----------------------------------------------------------------------------


def test_a_given_key_replays_the_same_start(cli: Cli) -> None:
    args = create_args("keyed", "--idempotency-key", "cli-key-1", start_at=in_a_day())
    first = cli.json(*args)
    again = cli.json(*args)
    assert again == first
    page = cli.route("/scheduled-starts?business_request_id=keyed")
    assert [item["id"] for item in page["items"]] == [first["id"]]


def test_the_printed_key_retries_a_request_that_got_no_answer(cli: Cli) -> None:
    """No server answers: exit 5, and stderr names the key; sent again with that key (now
    to the server) the start is created, and a third try replays it."""
    args = create_args("retried", start_at=in_a_day())
    down = cli(*args, url=f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 5, down.stderr
    assert down.stdout == ""
    key = printed_key(down.stderr)
    assert f"--idempotency-key {key}" in down.stderr

    made = cli.json(*args, "--idempotency-key", key)
    replayed = cli.json(*args, "--idempotency-key", key)
    assert replayed == made
    page = cli.route("/scheduled-starts?business_request_id=retried")
    assert [item["id"] for item in page["items"]] == [made["id"]]


def test_a_key_used_for_another_request_is_a_conflict(cli: Cli) -> None:
    cli.json(*create_args("reused-a", "--idempotency-key", "cli-key-reused"))
    other = cli(*create_args("reused-b", "--idempotency-key", "cli-key-reused"), "--json")
    assert other.returncode == 4, other.stderr
    assert error_code(other) == "idempotency_key_reused"


class DroppingProxy:
    """A TCP relay to the server that loses the answer to the first request: the server
    acts, then the connection closes before the client hears back (an ambiguous failure)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        self.dropped = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        with self._lock:
            drop = self.dropped == 0
            self.dropped += int(drop)
        upstream = socket.create_connection(("127.0.0.1", self.target_port))
        threading.Thread(target=self._forward, args=(client, upstream), daemon=True).start()
        with contextlib.suppress(OSError), client, upstream:
            while chunk := upstream.recv(65536):
                if drop:  # the server answered; the client never hears it
                    client.shutdown(socket.SHUT_RDWR)
                    return
                client.sendall(chunk)

    def _forward(self, client: socket.socket, upstream: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                with self._lock:
                    self.requests.append(chunk)
                upstream.sendall(chunk)

    def close(self) -> None:
        self.listener.close()


def test_the_cli_retries_a_lost_answer_with_the_same_key(cli: Cli) -> None:
    proxy = DroppingProxy(cli.server.port)
    try:
        created = cli(*create_args("lost-answer"), "--json", url=f"http://127.0.0.1:{proxy.port}")
    finally:
        proxy.close()
    assert created.returncode == 0, created.stderr
    start = json.loads(created.stdout)
    keys = re.findall(rb"idempotency-key: (\S+)", b"".join(proxy.requests), re.IGNORECASE)
    assert proxy.dropped == 1
    assert len(keys) == 2, proxy.requests
    assert keys[0] == keys[1] == printed_key(created.stderr).encode()
    page = cli.route("/scheduled-starts?business_request_id=lost-answer")
    assert [item["id"] for item in page["items"]] == [start["id"]], "the retry acted twice"


# --- exit codes ----------------------------------------------------------------------------------


def test_validation_errors_exit_2(cli: Cli, tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"message": "x" * 70_000}))
    past, too_large, usage, bad_json, bad_url = together(
        lambda: cli(*create_args("past", start_at="2020-01-01T00:00:00Z"), "--json"),
        lambda: cli(*create_args("big"), "--input", f"@{big}", "--json"),
        lambda: cli("starts", "create", "--workflow", "echo"),  # usage
        lambda: cli(*create_args("bad-json"), "--input", "{nope"),
        lambda: cli("starts", "list", "--url", "not-a-url"),
    )
    assert past.returncode == 2, past.stderr
    assert error_code(past) == "start_at_in_past"
    assert "start_at_in_past" in past.stderr

    assert too_large.returncode == 2, too_large.stderr
    assert error_code(too_large) in {"input_too_large", "body_too_large"}

    assert usage.returncode == 2
    assert bad_json.returncode == 2
    assert bad_url.returncode == 2


def test_unknown_ids_exit_3(cli: Cli) -> None:
    missing, run, schedule, tenant = together(
        lambda: cli("starts", "get", "st_does_not_exist", "--json"),
        lambda: cli("runs", "get", "run_does_not_exist"),
        lambda: cli("schedules", "get", "sch_does_not_exist"),
        lambda: cli("starts", "list", "--tenant", "no-such-tenant"),
    )
    assert missing.returncode == 3, missing.stderr
    assert error_code(missing) == "not_found"
    assert run.returncode == 3
    assert schedule.returncode == 3
    assert tenant.returncode == 3


def test_no_server_exits_5(cli: Cli) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    result, health = together(
        lambda: cli("starts", "list", "--json", url=nobody), lambda: cli("health", url=nobody)
    )
    assert result.returncode == 5, result.stderr
    assert "no answer" in result.stderr
    assert health.returncode == 5


def test_a_full_quota_exits_5(cli: Cli) -> None:
    token = cli.host_token(TIGHT_TENANT, "admin", "admin")
    cli.json(*create_args("quota-1"), "--tenant", TIGHT_TENANT, token=token)
    refused = cli(*create_args("quota-2"), "--tenant", TIGHT_TENANT, "--json", token=token)
    assert refused.returncode == 5, refused.stderr
    assert error_code(refused) == "quota_exceeded"
    assert "--idempotency-key" in refused.stderr


def test_an_undecided_mutation_exits_5_and_its_retry_decides_it(tmp_path: Path) -> None:
    """The store is held by another writer for longer than the API's bounded wait: every
    try answers ``202 in_progress``, so the command exits 5 and prints the route's JSON and
    the key; the same command with that key, once the store is free, decides it."""
    config = tmp_path / "punctual.toml"
    config.write_text("api_wait_seconds = 1\n")
    server = start_server(tmp_path / "server", "--dev-token", DEV_TOKEN, "--config", str(config))
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    try:
        server.admin_token()
        server.wait_healthy()
        cli = Cli(server, workdir)
        start = cli.json(*create_args("undecided"))
        writer = sqlite3.connect(server.directory / "punctual.db", isolation_level=None)
        try:
            writer.execute("BEGIN IMMEDIATE")
            undecided = cli("starts", "cancel", start["id"], "--version", "1", "--json")
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        assert undecided.returncode == 5, undecided.stdout + undecided.stderr
        assert json.loads(undecided.stdout) == {"status": "in_progress"}
        key = printed_key(undecided.stderr)
        assert "202 in_progress" in undecided.stderr
        assert f"send the same command again with --idempotency-key {key}" in undecided.stderr

        retry = ("--version", "1", "--idempotency-key", key)
        canceled = cli.json("starts", "cancel", start["id"], *retry)
        assert canceled["state"] == "canceled"
        assert canceled["version"] == 2
        assert cli.json("starts", "cancel", start["id"], *retry) == canceled
    finally:
        try:
            server.terminate()
        finally:
            server.kill()


def test_missing_bad_or_insufficient_tokens_exit_6(cli: Cli) -> None:
    missing, bad, _ = together(
        lambda: cli("starts", "list", token=""),
        lambda: cli("starts", "list", "--json", token="pn_not-a-token"),
        lambda: cli.json("members", "add", "--subject", "vera", "--role", "viewer"),
    )
    assert missing.returncode == 6
    assert bad.returncode == 6, bad.stderr
    assert error_code(bad) == "unauthenticated"

    viewer = cli("tokens", "issue", "--subject", "vera")
    assert viewer.returncode == 0, viewer.stderr
    viewer_token = viewer.stdout.strip()
    listed, refused = together(
        lambda: cli.json("starts", "list", token=viewer_token),
        lambda: cli(*create_args("by-viewer"), "--json", token=viewer_token),
    )
    assert listed == cli.route("/scheduled-starts")
    assert refused.returncode == 6, refused.stderr
    assert error_code(refused) == "forbidden"


def test_host_commands_use_the_same_exit_codes(cli: Cli) -> None:
    """A refusal of a host command used to exit 1; it exits as its kind says now."""
    cli.json(*create_args("needs-echo"))  # a pending start keeps echo's active version in use
    in_use, unknown = together(
        lambda: cli.host("definitions", "retire", "echo", "1"),
        lambda: cli.host("definitions", "activate", "no-such-workflow", "1"),
    )
    assert in_use.returncode == 4, in_use.stderr
    assert "in_use" in in_use.stderr
    assert unknown.returncode == 3


# --- runs ----------------------------------------------------------------------------------------


def test_runs_get_list_cancel_and_terminate(cli: Cli) -> None:
    started = []
    for name in ("to-cancel", "to-terminate"):
        started.append(
            at_once(
                cli,
                "starts",
                "create",
                "--workflow",
                "sleep",
                "--input",
                '{"seconds": 60}',
                "--business-request-id",
                name,
            )
        )

    def run_of(start: dict[str, Any]) -> str | None:
        dispatch = cli.route(f"/scheduled-starts/{start['id']}")["dispatch"]
        return dispatch["run_id"] if dispatch else None

    to_cancel, to_terminate = (
        wait_for("dispatch", functools.partial(run_of, start), 30) for start in started
    )
    got, listed = together(
        lambda: cli.json("runs", "get", to_cancel),
        lambda: cli.json("runs", "list", "--origin-id", started[0]["id"]),
    )
    assert got == cli.route(f"/runs/{to_cancel}")
    assert listed == cli.route(f"/runs?origin_id={started[0]['id']}")
    assert [run["id"] for run in listed["items"]] == [to_cancel]

    canceled, terminated = together(
        lambda: cli.json("runs", "cancel", to_cancel),
        lambda: cli.json("runs", "terminate", to_terminate),
    )
    assert canceled["cancel_requested"] is True
    assert terminated["state"] == "terminated"
    assert terminated["error"]["code"] == "terminated"
    human = cli("runs", "get", to_terminate)
    assert human.returncode == 0, human.stderr
    assert "terminated" in human.stdout


# --- schedules -----------------------------------------------------------------------------------


def test_schedules_create_read_pause_resume_and_delete(cli: Cli) -> None:
    created = cli.json(
        "schedules",
        "create",
        "--name",
        "cli-nightly",
        "--workflow",
        "echo",
        "--input",
        '{"message": "night"}',
        "--cron",
        "30 2 * * *",
        "--time-zone",
        "Europe/Berlin",
        "--overlap",
        "skip",
        "--missed",
        "skip",
    )
    schedule_id = created["id"]
    assert created["created_by"] == "admin"
    assert created["spec"]["time_zone"] == "Europe/Berlin"
    assert len(created["next_fire_times"]) == 5
    got, listed, occurrences = together(
        lambda: cli.json("schedules", "get", schedule_id),
        lambda: cli.json("schedules", "list"),
        lambda: cli.json("schedules", "occurrences", schedule_id),
    )
    assert got == cli.route(f"/schedules/{schedule_id}")
    assert listed == cli.route("/schedules")
    assert occurrences == cli.route(f"/schedules/{schedule_id}/occurrences")

    paused = cli.json("schedules", "pause", schedule_id)
    assert (paused["state"], paused["enabled"], paused["next_fire_times"]) == ("paused", False, [])
    resumed = cli.json("schedules", "resume", schedule_id, "--version", str(paused["version"]))
    assert resumed["state"] == "active"
    human = cli("schedules", "list")
    assert human.stdout.splitlines()[0].split()[:3] == ["ID", "NAME", "STATE"]
    assert re.search(rf"^{schedule_id}\s+cli-nightly\s+active\b", human.stdout, re.MULTILINE)

    deleted = cli("schedules", "delete", schedule_id, "--json")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == ""  # 204: the route answers no JSON
    assert cli("schedules", "get", schedule_id).returncode == 3


def test_schedules_preview_prints_the_routes_fire_times(cli: Cli) -> None:
    zoned = ("--cron", "30 2 * * *", "--time-zone", "Europe/Berlin")
    preview, both_kinds = together(
        lambda: cli.json(
            "schedules", "preview", *zoned, "--from", "2026-03-27T00:00:00Z", "--count", "3"
        ),
        lambda: cli("schedules", "preview", "--cron", "* * * * *", "--interval-ms", "60000"),
    )
    query = "cron=30%202%20*%20*%20*&time_zone=Europe/Berlin&from=2026-03-27T00:00:00Z&count=3"
    assert preview == cli.route(f"/schedule-preview?{query}")
    assert [fire["dst_adjustment"] for fire in preview["items"]] == [None, None, "gap_shifted"]
    assert both_kinds.returncode == 2


def test_schedules_preview_and_create_take_business_days_and_a_calendar(cli: Cli) -> None:
    calendar = (
        '{"holidays": [{"country": "DE", "subdivision": "BY"}], "extra_holidays": ["2026-12-31"]}'
    )
    payroll = ("--business-day", "-1", "--at", "17:30", "--time-zone", "Europe/Berlin")
    preview, text = together(
        lambda: cli.json(
            "schedules", "preview", *payroll, "--calendar", calendar,
            "--from", "2026-12-01T00:00:00Z", "--count", "2",
        ),
        lambda: cli(
            "schedules", "preview", "--cron", "0 9 * * *", "--time-zone", "Europe/Berlin",
            "--calendar", calendar, "--from", "2026-12-24T12:00:00Z", "--count", "1",
        ),
    )  # fmt: skip
    assert [fire["fire_at"] for fire in preview["items"]] == [
        "2026-12-30T16:30:00.000Z",
        "2027-01-29T16:30:00.000Z",
    ]
    assert text.returncode == 0, text.stderr
    assert "calendar: Christmas Day" in text.stdout  # the closed days it stepped over
    created = cli.json(
        "schedules", "create", "--name", "payroll", "--workflow", "echo",
        "--input", '{"message": "pay"}', *payroll, "--calendar", calendar,
        "--overlap", "skip", "--missed", "skip", "--start-deadline-ms", "14400000",
    )  # fmt: skip
    assert created["specs"][0]["business_day"] == -1
    assert created["calendar"]["extra_holidays"] == ["2026-12-31"]
    assert created["start_deadline_ms"] == 14_400_000
    shown = cli("schedules", "get", created["id"])
    assert "last business day at 17:30 in Europe/Berlin" in shown.stdout
    assert "holidays of DE-BY" in shown.stdout
    several = cli("schedules", "preview", "--specs", "[not json")
    assert several.returncode == 2


# --- members, tokens, health ---------------------------------------------------------------------


def test_members_and_tokens_over_http(cli: Cli) -> None:
    member = cli.json("members", "add", "--subject", "mia", "--role", "member")
    assert member == {"tenant": "default", "subject": "mia", "role": "member"}
    issued = cli.json("tokens", "issue", "--subject", "mia")
    assert issued["subject"] == "mia"
    assert issued["token"]
    listed, as_member, tokens_as_member = together(
        lambda: cli.json("tokens", "list"),
        lambda: cli("starts", "list", token=issued["token"]),
        lambda: cli("tokens", "list", token=issued["token"]),
    )
    assert listed == cli.route("/tokens")
    assert issued["id"] in {item["id"] for item in listed["items"]}
    assert all("token" not in item for item in listed["items"])
    assert as_member.returncode == 0

    assert tokens_as_member.returncode == 6  # members are not admins
    revoked = cli("tokens", "revoke", issued["id"])
    assert revoked.returncode == 0, revoked.stderr
    assert cli("starts", "list", token=issued["token"]).returncode == 6

    second = cli("tokens", "issue", "--subject", "mia")
    assert second.returncode == 0, second.stderr
    removed = cli("members", "remove", "mia")
    assert removed.returncode == 0, removed.stderr
    assert cli("starts", "list", token=second.stdout.strip()).returncode == 6


# A dozen CLI processes and a run brought forward: 17-25 s on a quiet machine, 119 s with two
# suites beside it, and the module's server stops inside this test's time when it runs
# last. The timeout only catches a hang.
@pytest.mark.timeout(300)
def test_health_exits_1_while_degraded_and_acknowledge_clears_it(cli: Cli) -> None:
    """A start whose workflow lost its active version fails; the report is degraded (exit
    1) until the finding is acknowledged."""
    tenant = "ops"
    token = cli.host_token(tenant, "boss", "admin")
    ok = cli("health", "--tenant", tenant, token=token)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "status: ok" in ok.stdout

    # Created for later, then brought forward once its workflow is deprecated: it falls
    # due only after the deprecation is in, however long each CLI process takes.
    start = cli.json(
        "starts",
        "create",
        "--workflow",
        "fail",
        "--start-at",
        in_a_day(),
        "--business-request-id",
        "doomed",
        "--tenant",
        tenant,
        token=token,
    )
    deprecated = cli.host("definitions", "deprecate", "fail", "1")
    assert deprecated.returncode == 0, deprecated.stderr
    try:
        at_once(cli, "starts", "reschedule", start["id"], "--tenant", tenant, token=token)

        def failed() -> bool | None:
            state = cli.route(f"/scheduled-starts/{start['id']}", token, tenant)["state"]
            return True if state == "failed" else None

        wait_for("the start to fail", failed, 45)
    finally:
        activated = cli.host("definitions", "activate", "fail", "1")
        assert activated.returncode == 0, activated.stderr

    degraded, human = together(
        lambda: cli("health", "--tenant", tenant, "--json", token=token),
        lambda: cli("health", "--tenant", tenant, token=token),
    )
    assert degraded.returncode == 1, degraded.stderr
    report = json.loads(degraded.stdout)
    route = cli.route("/health", token, tenant)
    assert (report["status"], report["findings"]) == (route["status"], route["findings"])
    assert report["starts"] == route["starts"]
    [finding] = [f for f in report["findings"] if f["subject_id"] == start["id"]]
    assert human.returncode == 1
    assert "status: degraded" in human.stdout
    assert finding["id"] in human.stdout

    acknowledged = cli.json("health", "acknowledge", finding["id"], "--tenant", tenant, token=token)
    assert acknowledged["acknowledged"] is True
    assert acknowledged["acknowledged_by"] == "boss"
    assert cli("health", "--tenant", tenant, token=token).returncode == 0


def hourly_schedule(cli: Cli, name: str) -> dict[str, Any]:
    schedule: dict[str, Any] = cli.json(
        "schedules",
        "create",
        "--name",
        name,
        "--workflow",
        "echo",
        "--input",
        '{"message": "hourly"}',
        "--cron",
        "0 * * * *",
        "--overlap",
        "allow_all",
        "--missed",
        "skip",
    )
    return schedule


def test_trigger_and_backfill(cli: Cli) -> None:
    schedule = hourly_schedule(cli, "cli-hourly")
    paused = cli.json("schedules", "pause", schedule["id"])
    triggered = cli.json("schedules", "trigger", schedule["id"])
    assert triggered["origin"] == "trigger"
    assert triggered["schedule_id"] == schedule["id"]
    listed = cli.route(f"/schedules/{schedule['id']}/occurrences")
    assert triggered["id"] in {item["id"] for item in listed["items"]}
    assert cli.route(f"/schedules/{schedule['id']}")["version"] == paused["version"]

    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    after, to = (hour - timedelta(hours=3)).isoformat(), (hour - timedelta(hours=1)).isoformat()
    keyed = ("--from", after, "--to", to, "--idempotency-key", "cli-backfill-1")
    filled = cli.json("schedules", "backfill", schedule["id"], *keyed)
    assert (filled["generated"], filled["existing"]) == (2, 0)
    assert [item["origin"] for item in filled["items"]] == ["backfill", "backfill"]
    replayed, again, backwards = together(
        lambda: cli.json("schedules", "backfill", schedule["id"], *keyed),
        lambda: cli.json("schedules", "backfill", schedule["id"], "--from", after, "--to", to),
        lambda: cli("schedules", "backfill", schedule["id"], "--from", to, "--to", after, "--json"),
    )
    assert replayed == filled
    assert (again["generated"], again["existing"]) == (0, 2)

    assert backwards.returncode == 2, backwards.stderr
    assert error_code(backwards) == "backfill_range_invalid"


# --- schedules apply -----------------------------------------------------------------------------

APPLIED = """
source = "e2e/schedules.toml"

[[schedules]]
name = "reports/nightly"
workflow = "echo"
input = {{ message = "{message}" }}
spec = {{ cron = "30 2 * * *", time_zone = "Europe/Berlin" }}
overlap = "skip"
missed = "catch_up"
"""
SECOND = """
[[schedules]]
name = "cleanup"
workflow = "echo"
input = { message = "clean" }
spec = { interval_ms = 3600000 }
overlap = "buffer_one"
missed = "skip"
"""


def by_name(cli: Cli, name: str) -> dict[str, Any] | None:
    answer = httpx.get(
        f"{cli.url}/v1/tenants/default/schedules/by-name/{quote(name, safe='')}",
        headers={"Authorization": f"Bearer {cli.token}"},
        timeout=10,
    )
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, answer.text
    schedule: dict[str, Any] = answer.json()
    return schedule


def plan_of(answer: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["action"] for item in answer["items"]}


def test_apply_creates_then_changes_nothing_and_prunes_only_its_source(
    cli: Cli, tmp_path: Path
) -> None:
    first = tmp_path / "schedules.toml"
    first.write_text(APPLIED.format(message="v1") + SECOND)

    dry = cli.json("schedules", "apply", str(first), "--dry-run")
    assert dry["source"] == "e2e/schedules.toml"
    assert plan_of(dry) == {"reports/nightly": "create", "cleanup": "create"}
    assert by_name(cli, "reports/nightly") is None, "a dry run stored something"

    applied = cli("schedules", "apply", str(first))
    assert applied.returncode == 0, applied.stderr
    assert "create    reports/nightly" in applied.stdout
    nightly, cleanup = by_name(cli, "reports/nightly"), by_name(cli, "cleanup")
    assert nightly is not None and cleanup is not None
    assert nightly["source"] == cleanup["source"] == "e2e/schedules.toml"

    # Paused by hand: an apply never re-enables it.
    cli.json("schedules", "pause", cleanup["id"])
    cleanup = by_name(cli, "cleanup")
    assert cleanup is not None
    again = cli.json("schedules", "apply", str(first))
    assert plan_of(again) == {"reports/nightly": "unchanged", "cleanup": "unchanged"}
    assert not any(item["applied"] for item in again["items"])
    assert by_name(cli, "reports/nightly") == nightly
    assert by_name(cli, "cleanup") == cleanup

    # Not from this file: a schedule made by hand, one applied from another source.
    by_hand = hourly_schedule(cli, "made-by-hand")
    other = tmp_path / "other.toml"
    other.write_text('source = "other"\n' + SECOND.replace('"cleanup"', '"elsewhere"'))
    assert cli("schedules", "apply", str(other)).returncode == 0

    # The file changes one input and drops a schedule.
    second = tmp_path / "schedules.toml"
    second.write_text(APPLIED.format(message="v2"))
    unconfirmed = cli("schedules", "apply", str(second), "--prune")
    assert unconfirmed.returncode == 2, unconfirmed.stderr
    assert "update    reports/nightly: input" in unconfirmed.stdout
    assert f"delete    cleanup ({cleanup['id']})" in unconfirmed.stdout
    assert by_name(cli, "reports/nightly") == nightly, "--prune without --yes applied"
    assert by_name(cli, "cleanup") == cleanup

    pruned = cli.json("schedules", "apply", str(second), "--prune", "--yes")
    assert plan_of(pruned) == {"reports/nightly": "update", "cleanup": "delete"}
    [update] = [item for item in pruned["items"] if item["action"] == "update"]
    assert "input" in update["changed_fields"]
    assert all(item["applied"] for item in pruned["items"])
    updated = by_name(cli, "reports/nightly")
    assert updated is not None
    assert updated["revision"] == nightly["revision"] + 1
    assert by_name(cli, "cleanup") is None
    assert by_name(cli, "elsewhere") is not None
    assert cli.route(f"/schedules/{by_hand['id']}")["name"] == "made-by-hand"

    last = cli.json("schedules", "apply", str(second), "--prune", "--yes")
    assert plan_of(last) == {"reports/nightly": "unchanged"}
    assert by_name(cli, "reports/nightly") == updated


def test_apply_refuses_a_bad_file_and_writes_nothing(cli: Cli, tmp_path: Path) -> None:
    invalid = tmp_path / "invalid.toml"
    broken_cron = APPLIED.format(message="x").replace("30 2 * * *", "not a cron")
    invalid.write_text(broken_cron + SECOND.replace('"cleanup"', '"fine-one"'))
    no_source = tmp_path / "no-source.toml"
    no_source.write_text(SECOND)
    twice = tmp_path / "twice.toml"
    twice.write_text('source = "s"\n' + SECOND + SECOND)
    not_toml = tmp_path / "not.toml"
    not_toml.write_text("source = \n")
    refused, *others = together(
        *(
            functools.partial(cli, "schedules", "apply", str(path))
            for path in (invalid, no_source, twice, not_toml)
        )
    )
    assert refused.returncode == 2, refused.stderr
    assert "reports/nightly: 422 invalid_cron" in refused.stderr
    assert by_name(cli, "fine-one") is None, "a file with an invalid schedule was half applied"
    assert [other.returncode for other in others] == [2, 2, 2]
