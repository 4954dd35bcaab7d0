"""The CLI covers every tenant route (API.md "The CLI over HTTP"), against a real
``punctual serve``: schedules by id or name anywhere, ``schedules update``, webhooks with
a real receiver, notifications, holds, the audit log, members; lists as tables with
headers; ``--version`` and shell completion.

Each command is a ``punctual`` process of its own in an empty directory, as in
``test_cli_over_http`` (whose fixture and helpers this module shares); ``--json`` output
is compared with the route's own answer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from punctual.cli.schedules import CLEARABLE
from tests.e2e.test_cli_and_serve import CLI_SECONDS, PUNCTUAL, clean_env, together, wait_for
from tests.e2e.test_cli_over_http import Cli, cli, error_code
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.e2e
__all__ = ["cli"]  # the module's server, shared by its tests

RUN_SECONDS = 60.0
T_END = "2099-01-01T00:00:00Z"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def header_and_rows(stdout: str) -> tuple[str, list[str]]:
    lines = [line for line in stdout.splitlines() if line and not line.startswith("(more")]
    return lines[0], lines[1:]


def column(header: str, name: str) -> int:
    at = header.find(name)
    assert at >= 0, f"no column {name!r} in {header!r}"
    return at


def create_schedule(cli: Cli, name: str, *extra: str) -> dict[str, Any]:
    made: dict[str, Any] = cli.json(
        "schedules",
        "create",
        "--name",
        name,
        "--workflow",
        "echo",
        "--input",
        '{"message": "hi"}',
        "--cron",
        "0 7 * * *",
        "--time-zone",
        "Europe/Berlin",
        "--overlap",
        "allow_all",
        "--missed",
        "skip",
        *extra,
    )
    return made


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


# --- tables, version, completion -----------------------------------------------------------------


def test_lists_print_a_table_with_headers_and_json_stays_the_routes(cli: Cli) -> None:
    first = create_schedule(cli, "table-a")
    second = create_schedule(cli, "table-b-with-a-longer-name")
    human, as_json = together(
        lambda: cli("schedules", "list"), lambda: cli.json("schedules", "list")
    )
    header, rows = header_and_rows(ok(human))
    assert header.split()[:3] == ["ID", "NAME", "STATE"]
    state_at = column(header, "STATE")
    for made in (first, second):
        row = next(r for r in rows if r.startswith(made["id"]))
        assert made["name"] in row
        assert row[state_at:].startswith("active"), (header, row)
    assert as_json == cli.route("/schedules")

    empty = ok(cli("holds", "list", "--active"))
    assert empty.strip() == "no holds"


def test_version_and_shell_completion() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        # Without a shell above it (as under a test runner) Typer cannot guess the shell;
        # this switch makes --show-completion take it as a value instead.
        env = {**clean_env(), "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
        return subprocess.run(
            [str(PUNCTUAL), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=CLI_SECONDS,
            check=False,
        )

    shown, completion = together(lambda: run("--version"), lambda: run("--show-completion", "bash"))
    assert ok(shown).strip() == f"punctual {version('punctual')}"
    script = ok(completion)
    assert "_punctual_completion" in script
    assert "complete" in script


# --- schedules by id or name ---------------------------------------------------------------------


def test_a_schedule_is_named_by_id_or_name_anywhere(cli: Cli) -> None:
    made = create_schedule(cli, "reports/daily")
    by_name, by_id = together(
        lambda: cli.json("schedules", "get", "reports/daily"),
        lambda: cli.json("schedules", "get", made["id"]),
    )
    assert by_name == by_id == cli.route(f"/schedules/{made['id']}")

    updated = cli.json(
        "schedules", "update", "reports/daily", "--jitter-ms", "500", "--end-at",
        "2099-01-01T00:00:00Z",
    )  # fmt: skip
    assert updated["id"] == made["id"]
    assert updated["jitter_ms"] == 500
    assert updated["end_at"] == "2099-01-01T00:00:00.000Z"
    assert updated["version"] == made["version"] + 1

    cleared = cli.json("schedules", "update", "reports/daily", "--clear", "end_at")
    assert cleared["end_at"] is None
    assert cleared["jitter_ms"] == 500
    every = [arg for field in CLEARABLE for arg in ("--clear", field)]
    defaults = cli.json("schedules", "update", "reports/daily", *every)
    assert {field: defaults[field] for field in CLEARABLE} == dict.fromkeys(CLEARABLE)

    respecified = cli.json(
        "schedules", "update", "reports/daily", "--cron", "30 6 * * 1-5", "--time-zone",
        "America/New_York",
    )  # fmt: skip
    assert respecified["spec"] == {
        **respecified["spec"],
        "cron": "30 6 * * 1-5",
        "time_zone": "America/New_York",
    }

    paused = cli.json("schedules", "pause", "reports/daily")
    assert paused["state"] == "paused"
    resumed = cli.json("schedules", "resume", "reports/daily")
    assert resumed["state"] == "active"

    occurrence = cli.json("schedules", "trigger", "reports/daily")
    assert occurrence["schedule_id"] == made["id"]
    assert occurrence["origin"] == "trigger"
    triggered = cli.json(
        "schedules", "occurrences", "reports/daily", "--origin", "trigger", "--from",
        occurrence["occurrence_at"],
    )  # fmt: skip
    assert [o["id"] for o in triggered["items"]] == [occurrence["id"]]
    none_before = cli.json(
        "schedules", "occurrences", "reports/daily", "--to", occurrence["occurrence_at"],
        "--origin", "trigger",
    )  # fmt: skip
    assert none_before["items"] == []
    listed = cli.json("schedules", "occurrences", "reports/daily")
    assert listed == cli.route(f"/schedules/{made['id']}/occurrences")
    assert occurrence["id"] in [o["id"] for o in listed["items"]]
    human = ok(cli("schedules", "occurrences", "reports/daily"))
    header, rows = header_and_rows(human)
    assert header.split()[:4] == ["ID", "AT", "STATE", "REASON"]
    assert any(r.startswith(occurrence["id"]) and "trigger" in r for r in rows)

    deleted = cli("schedules", "delete", "reports/daily")
    assert ok(deleted).strip() == "schedule reports/daily deleted"
    gone = cli("schedules", "get", made["id"])
    assert gone.returncode == 3, gone.stderr


def test_a_buffered_occurrence_is_canceled_by_the_schedules_name(cli: Cli) -> None:
    made = cli.json(
        "schedules", "create", "--name", "one-at-a-time", "--workflow", "sleep", "--input",
        '{"seconds": 60}', "--interval-ms", "86400000", "--overlap", "buffer_one", "--missed",
        "skip",
    )  # fmt: skip
    running = cli.json("schedules", "trigger", "one-at-a-time")

    def run_of_first() -> str | None:
        runs = cli.route(f"/runs?origin_id={running['id']}")["items"]
        return runs[0]["id"] if runs and runs[0]["state"] == "running" else None

    run_id = wait_for("the first run", run_of_first, RUN_SECONDS, step=0.2)
    waiting = cli.json("schedules", "trigger", "one-at-a-time")
    assert waiting["state"] in ("scheduled", "buffered"), waiting

    canceled = cli.json("schedules", "cancel-occurrence", made["name"], waiting["id"])
    assert canceled["id"] == waiting["id"]
    assert canceled["state"] == "canceled"
    again = cli("schedules", "cancel-occurrence", made["name"], waiting["id"], "--json")
    assert again.returncode == 4, (again.stdout, again.stderr)
    assert error_code(again) == "invalid_state", "the server judges an ended occurrence"
    unknown = cli("schedules", "cancel-occurrence", made["name"], "occ_0123456789abcdef01234567")
    assert unknown.returncode == 3, (unknown.stdout, unknown.stderr)
    assert cli.json("runs", "terminate", run_id)["state"] == "terminated"


def test_schedule_commands_refuse_what_cannot_be_meant(cli: Cli) -> None:
    create_schedule(cli, "refusals")
    unknown, nothing, bad_clear, clash, lone_zone, zoneless = together(
        lambda: cli("schedules", "get", "no-such-schedule"),
        lambda: cli("schedules", "update", "refusals"),
        lambda: cli("schedules", "update", "refusals", "--clear", "jitter_ms"),
        lambda: cli("schedules", "update", "refusals", "--end-at", T_END, "--clear", "end_at"),
        lambda: cli("schedules", "update", "refusals", "--time-zone", "UTC"),
        lambda: cli("schedules", "update", "refusals", "--cron", "0 8 * * *"),
    )
    assert unknown.returncode == 3, unknown.stderr
    assert nothing.returncode == 2 and "nothing to change" in nothing.stderr
    assert bad_clear.returncode == 2 and "--clear takes one of" in bad_clear.stderr
    assert clash.returncode == 2 and "contradict" in clash.stderr
    assert lone_zone.returncode == 2 and "needs its spec" in lone_zone.stderr
    assert zoneless.returncode == 2 and "needs its --time-zone" in zoneless.stderr
    assert cli.json("schedules", "get", "refusals")["spec"]["time_zone"] == "Europe/Berlin"

    stale = cli("schedules", "update", "refusals", "--jitter-ms", "5", "--version", "99", "--json")
    assert stale.returncode == 4, stale.stderr
    assert error_code(stale) == "version_conflict"


# --- a regression, told to a person and to a webhook ---------------------------------------------


def test_a_regression_reaches_notifications_and_a_signed_webhook(
    cli: Cli, receiver: Receiver, tmp_path: Path
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cret\n")
    hook = cli.json(
        "webhooks", "create", receiver.url(), "--event", "regression",
        "--secret", f"@{secret_file}",
    )  # fmt: skip
    assert hook["events"] == ["regression"]
    assert "secret" not in hook
    listed, got = together(
        lambda: cli.json("webhooks", "list"), lambda: cli.json("webhooks", "get", hook["id"])
    )
    assert listed == cli.route("/webhooks")
    assert got == cli.route(f"/webhooks/{hook['id']}")

    policy = json.dumps({"metrics": [{"path": "metrics.score", "better": "higher"}]})
    made = cli.json(
        "schedules", "create", "--name", "scored", "--workflow", "score", "--input",
        '{"score": 0.9}', "--interval-ms", "86400000", "--overlap", "allow_all", "--missed",
        "skip", "--regression", policy,
    )  # fmt: skip

    first = cli.json("schedules", "trigger", "scored")

    def first_run_completed() -> bool:
        runs = cli.route(f"/runs?origin_id={first['id']}")["items"]
        return any(run["state"] == "completed" for run in runs)

    wait_for("the first run", lambda: first_run_completed() or None, RUN_SECONDS, step=0.2)
    cli.json("schedules", "update", "scored", "--input", '{"score": 0.5}')
    second = cli.json("schedules", "trigger", "scored")
    assert first["id"] != second["id"]

    def both_runs() -> list[dict[str, Any]] | None:
        runs: list[dict[str, Any]] = cli.route(f"/runs?schedule_id={made['id']}")["items"]
        return runs if len(runs) == 2 else None

    wait_for("the second run", both_runs, RUN_SECONDS, step=0.2)
    newest, oldest = together(
        lambda: cli.json("runs", "list", "--schedule", "scored"),
        lambda: cli.json("runs", "list", "--schedule", made["id"], "--order", "oldest"),
    )
    assert [run["origin"]["id"] for run in newest["items"]] == [second["id"], first["id"]]
    assert newest["items"] == oldest["items"][::-1]
    assert oldest == cli.route(f"/runs?schedule_id={made['id']}&order=oldest")

    def regression() -> dict[str, Any] | None:
        page = cli.route("/notifications?unread=true")["items"]
        return next((n for n in page if n["kind"] == "regression"), None)

    found = wait_for("the regression notification", regression, RUN_SECONDS, step=0.2)
    assert found["schedule_id"] == made["id"]

    unread_json, unread_human = together(
        lambda: cli.json("notifications", "list", "--unread"),
        lambda: cli("notifications", "list", "--unread"),
    )
    assert unread_json == cli.route("/notifications?unread=true")
    header, rows = header_and_rows(ok(unread_human))
    assert header.split()[:3] == ["ID", "CREATED", "KIND"]
    assert any(r.startswith(found["id"]) and "regression" in r for r in rows)

    read = cli.json("notifications", "read", found["id"])
    assert read["read_at"] is not None
    still_unread = [n["id"] for n in cli.json("notifications", "list", "--unread")["items"]]
    assert found["id"] not in still_unread

    delivered = wait_for("the delivery", lambda: receiver.received or None, RUN_SECONDS)
    body = delivered[0].body
    expected = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert delivered[0].headers["x-punctual-signature"] == f"sha256={expected}"
    assert json.loads(body)["event"] == "regression"

    deliveries = cli.json("webhooks", "deliveries", hook["id"])
    assert deliveries == cli.route(f"/webhooks/{hook['id']}/deliveries")
    delivery = deliveries["items"][0]
    header, rows = header_and_rows(ok(cli("webhooks", "deliveries", hook["id"])))
    assert header.split()[:3] == ["ID", "KIND", "STATUS"]
    assert rows[0].startswith(delivery["id"])

    redelivered = cli.json("webhooks", "redeliver", hook["id"], delivery["id"])
    assert redelivered["status"] == "queued"
    assert redelivered["event_id"] == delivery["event_id"]
    wait_for("the redelivery", lambda: len(receiver.received) >= 2 or None, RUN_SECONDS)
    assert receiver.received[1].headers["x-punctual-event-id"] == delivery["event_id"]

    rotated = cli.json("webhooks", "update", hook["id"], "--all-events", "--remove-secret")
    assert rotated["events"] == []
    tested = cli.json("webhooks", "test", hook["id"])
    assert tested["status"] == "queued"
    wait_for("the test event", lambda: len(receiver.received) >= 3 or None, RUN_SECONDS)
    assert json.loads(receiver.received[2].body)["event"] == "test"
    assert "x-punctual-signature" not in receiver.received[2].headers

    assert ok(cli("webhooks", "delete", hook["id"])).strip() == f"webhook {hook['id']} deleted"
    assert cli("webhooks", "get", hook["id"]).returncode == 3


# --- holds and the audit log ---------------------------------------------------------------------


def test_holds_and_the_audit_log(cli: Cli) -> None:
    made = create_schedule(cli, "held")
    hold = cli.json(
        "holds", "place", "--kind", "schedule", "--subject-id", made["id"], "--reason",
        "incident 42",
    )  # fmt: skip
    assert hold["subject_id"] == made["id"]
    assert hold["released_at"] is None
    active_json, active_human = together(
        lambda: cli.json("holds", "list", "--active"), lambda: cli("holds", "list", "--active")
    )
    assert active_json == cli.route("/holds?active=true")
    header, rows = header_and_rows(ok(active_human))
    assert header.split()[:3] == ["ID", "PLACED", "SUBJECT"]
    assert any(r.startswith(hold["id"]) and "incident 42" in r for r in rows)

    released = cli.json("holds", "release", hold["id"])
    assert released["released_at"] is not None
    assert hold["id"] not in [h["id"] for h in cli.json("holds", "list", "--active")["items"]]

    tenantless = cli("holds", "place", "--kind", "schedule", "--reason", "no subject", "--json")
    assert tenantless.returncode == 2, tenantless.stderr

    audit = cli.json("audit", "list", "--subject-id", hold["id"])
    assert audit == cli.route(f"/audit?subject_id={hold['id']}")
    assert [entry["action"] for entry in audit["items"]] == ["release_hold", "place_hold"]
    printed = ok(cli("audit", "list", "--actor", "admin", "--limit", "2"))
    header, rows = header_and_rows(printed)
    assert header.split()[:3] == ["AT", "ACTOR", "ACTION"]
    assert [row.split()[1:3] for row in rows] == [
        ["admin", "release_hold"],
        ["admin", "place_hold"],
    ]
    assert printed.splitlines()[-1].startswith("(more: --cursor ")


def test_members_are_listed_latest_first(cli: Cli) -> None:
    for subject in ("member-one", "member-two"):
        ok(cli("members", "add", "--subject", subject, "--role", "viewer"))
    listed, human, oldest = together(
        lambda: cli.json("members", "list"),
        lambda: cli("members", "list", "--limit", "2"),
        lambda: cli.json("members", "list", "--order", "oldest"),
    )
    assert listed == cli.route("/members")
    assert [m["subject"] for m in listed["items"]][:2] == ["member-two", "member-one"]
    assert oldest["items"] == listed["items"][::-1]
    header, rows = header_and_rows(ok(human))
    assert header.split() == ["SUBJECT", "ROLE", "JOINED"]
    assert [row.split()[:2] for row in rows] == [["member-two", "viewer"], ["member-one", "viewer"]]
    assert ok(human).splitlines()[-1].startswith("(more: --cursor ")

    bad = cli("members", "list", "--order", "sideways")
    assert bad.returncode == 2, bad.stderr


def test_names_with_dots_are_names(cli: Cli) -> None:
    """``..`` and ``.`` would be dot segments of the URL, which resolve away."""
    for name in ("..", ".", "v1.2"):
        made = create_schedule(cli, name)
        assert cli.json("schedules", "get", name)["id"] == made["id"], name
        paused = cli.json("schedules", "pause", name)
        assert (paused["id"], paused["state"]) == (made["id"], "paused")
