"""Metrics and logs of real processes (SPEC OP-4, docs/operations.md "Metrics" and
"Logs"): ``/metrics`` of ``punctual serve`` and of a worker's ``--metrics-port``, parsed
as Prometheus reads it; ``[logging]`` as the processes write it: JSON lines, the level,
the access log, one line per run end, and a runner that says nothing new while idle."""

from __future__ import annotations

import json
import re
import secrets
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.e2e.harness import free_port
from tests.e2e.test_cli_and_serve import (
    CLI_SECONDS,
    PUNCTUAL,
    STARTUP_SECONDS,
    STOP_SECONDS,
    Server,
    bearer,
    clean_env,
    run_cli,
    start_server,
    wait_for,
)

pytestmark = pytest.mark.e2e

DEV_TOKEN = "pn_metrics_" + "0123456789abcdef" * 2
DURATION = "punctual_http_request_duration_seconds"
METRICS_LINE = re.compile(r"^metrics on http://127\.0\.0\.1:(\d+)/metrics$", re.M)
RUN_ENDS = ("run.completed", "run.failed", "run.canceled", "run.terminated", "run.timed_out")


def scrape(url: str) -> dict[str, list[Sample]]:
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200, response.text
    return {f.name: f.samples for f in text_string_to_metric_families(response.text)}


def metrics_url(stdout: str) -> str | None:
    match = METRICS_LINE.search(stdout)
    return f"http://127.0.0.1:{match.group(1)}/metrics" if match else None


def json_lines(stderr: str) -> list[dict[str, Any]]:
    """Every line of a process in ``format = "json"``: each must parse."""
    entries = []
    for line in stderr.splitlines():
        if line.strip():
            try:
                entries.append(json.loads(line))
            except ValueError:
                raise AssertionError(f"a log line is not JSON: {line!r}") from None
    return entries


def create_due(base_url: str, token: str, key: str) -> dict[str, Any]:
    body = {
        "workflow": "echo",
        "input": {"message": key},
        "business_request_id": key,
        "start_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "workload_class": "standard",
    }

    def decided() -> httpx.Response | None:
        answer = httpx.post(
            f"{base_url}/v1/tenants/default/scheduled-starts",
            headers=bearer(token, key),
            json=body,
            timeout=30,
        )
        return None if answer.status_code == 202 else answer

    created = wait_for("the create to be decided", decided, STARTUP_SECONDS)
    assert created.status_code == 201, created.text
    start: dict[str, Any] = created.json()
    return start


def completed_run(base_url: str, token: str, start_id: str) -> str:
    url = f"{base_url}/v1/tenants/default/scheduled-starts/{start_id}"

    def run_id() -> str | None:
        start = httpx.get(url, headers=bearer(token), timeout=10).json()
        return start["dispatch"]["run_id"] if start["dispatch"] else None

    found = wait_for("the start's dispatch", run_id, STARTUP_SECONDS)
    run_url = f"{base_url}/v1/tenants/default/runs/{found}"

    def done() -> str | None:
        state = httpx.get(run_url, headers=bearer(token), timeout=10).json()["state"]
        return str(state) if state not in ("pending", "running") else None

    assert wait_for("the run to end", done, STARTUP_SECONDS) == "completed"
    return found


def no_raw_values_in_labels(families: dict[str, list[Sample]], *raw: str) -> None:
    for sample in (s for samples in families.values() for s in samples):
        for label in sample.labels.values():
            for value in raw:
                assert value not in label, (sample.name, sample.labels)


# --- one server: JSON lines at DEBUG, the access log on, metrics on a port of their own ----


@pytest.fixture(scope="module")
def json_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    directory = tmp_path_factory.mktemp("json-logs") / "served"
    directory.mkdir()
    (directory / "punctual.toml").write_text(
        '[logging]\nlevel = "DEBUG"\nformat = "json"\naccess_log = true\n'
    )
    server = start_server(
        directory,
        "--config",
        "punctual.toml",
        "--dev-token",
        DEV_TOKEN,
        "--metrics-port",
        "0",
    )
    try:
        server.admin_token()
        server.wait_healthy()
        url = wait_for("the metrics line", lambda: metrics_url(server.stdout()), STARTUP_SECONDS)
        yield server, url
    finally:
        try:
            server.terminate()
        finally:
            server.kill()


def test_a_run_s_end_is_one_json_line_with_its_workflow_and_duration(
    json_server: tuple[Server, str],
) -> None:
    server, _ = json_server
    start = create_due(server.base_url, DEV_TOKEN, "one-line-" + secrets.token_hex(4))
    run_id = completed_run(server.base_url, DEV_TOKEN, start["id"])

    def ends() -> list[dict[str, Any]] | None:
        found = [
            e for e in json_lines(server.stderr()) if e.get("subject") == run_id and e["event"]
        ]
        return found or None

    said = wait_for("the run's end in the log", ends, STARTUP_SECONDS)
    mentioning = [e for e in json_lines(server.stderr()) if run_id in e["message"]]
    ended = [e for e in mentioning if e.get("event") in RUN_ENDS]
    assert len(ended) == 1, json.dumps(mentioning, indent=1)
    (end,) = ended
    assert said[0]["event"] == "run.completed"
    assert end["level"] == "INFO" and end["logger"] == "punctual.events"
    assert (end["workflow"], end["attempt"], end["tenant"]) == ("echo", 1, "default")
    assert isinstance(end["duration_ms"], float | int) and end["duration_ms"] >= 0
    assert {"time", "level", "logger", "message"} <= set(end)


def test_every_line_is_json_and_requests_have_access_lines(
    json_server: tuple[Server, str],
) -> None:
    server, _ = json_server
    marker = secrets.token_hex(6)
    assert httpx.get(f"{server.base_url}/healthz?probe={marker}", timeout=5).status_code == 200

    def access_line() -> dict[str, Any] | None:
        found = [e for e in json_lines(server.stderr()) if marker in e["message"]]
        return found[0] if found else None

    line = wait_for("the request's access line", access_line, STARTUP_SECONDS)
    assert line["logger"] == "uvicorn.access"
    assert (line["method"], line["status"]) == ("GET", 200)
    assert line["path"] == f"/healthz?probe={marker}"
    for entry in json_lines(server.stderr()):
        assert {"time", "level", "logger", "message"} <= set(entry), entry


def test_an_idle_runner_says_its_backlog_at_info_only_when_it_changed(
    json_server: tuple[Server, str],
) -> None:
    """The reaper counts the backlog every 5 s: at DEBUG the repeats are there to see, and
    none of them is at INFO."""
    server, _ = json_server

    def backlog_lines() -> list[dict[str, Any]] | None:
        found = [e for e in json_lines(server.stderr()) if e.get("event") == "dispatch.backlog"]
        return found if len(found) >= 3 else None

    said = wait_for("three backlog counts", backlog_lines, 3 * STARTUP_SECONDS)
    assert said[0]["level"] == "INFO"
    for previous, line in pairwise(said):
        expected = "DEBUG" if line["due"] == previous["due"] else "INFO"
        assert line["level"] == expected, (previous, line)


def test_serve_s_metrics_on_its_own_port_and_on_the_api(json_server: tuple[Server, str]) -> None:
    server, url = json_server
    start = create_due(server.base_url, DEV_TOKEN, "metrics-" + secrets.token_hex(4))
    run_id = completed_run(server.base_url, DEV_TOKEN, start["id"])
    for families in (scrape(url), scrape(f"{server.base_url}/metrics")):
        names = set(families)
        assert {"process_cpu_seconds", "process_resident_memory_bytes"} <= names
        assert {"python_gc_objects_collected", "python_gc_collections"} <= names
        counted = {
            (s.labels["method"], s.labels["route"], s.labels["status"])
            for s in families[DURATION]
            if s.name == f"{DURATION}_count"
        }
        assert ("POST", "/v1/tenants/{tenant}/scheduled-starts", "201") in counted
        assert ("GET", "/v1/tenants/{tenant}/runs/{run_id}", "200") in counted
        no_raw_values_in_labels(families, run_id, start["id"], "/v1/tenants/default")
        assert "punctual_due_backlog" in names
        assert {s.labels["task_queue"] for s in families["punctual_runs_pending"]} >= {
            "interactive",
            "standard",
            "batch",
        }


# --- a quiet API and runner beside a worker with its own metrics port ------------------------


@dataclass
class Process:
    popen: subprocess.Popen[str]
    stdout: Path
    stderr: Path

    def describe(self) -> str:
        return (
            f"exit={self.popen.poll()}\nstdout:\n{self.stdout.read_text()}\n"
            f"stderr:\n{self.stderr.read_text()[-4000:]}"
        )

    def alive(self) -> None:
        assert self.popen.poll() is None, f"exited early\n{self.describe()}"

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=STOP_SECONDS)
            raise AssertionError(f"did not stop on SIGTERM\n{self.describe()}") from None


def launch(cwd: Path, name: str, *args: str, **env: str) -> Process:
    stdout, stderr = cwd / f"{name}.out", cwd / f"{name}.err"
    with stdout.open("w") as out, stderr.open("w") as err:
        popen = subprocess.Popen(
            [str(PUNCTUAL), *args],
            cwd=cwd,
            env={**clean_env(), "PUNCTUAL_WORKER__SLOTS": "1", **env},
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    return Process(popen, stdout, stderr)


def test_a_worker_s_metrics_port_and_a_quiet_api_without_access_lines(tmp_path: Path) -> None:
    """``serve --components api,runner`` at ``level = "WARNING"`` with the access log off
    (the default), and ``punctual worker --metrics-port`` beside it on the same database:
    the API writes nothing for a run it served, the worker one line for the run's end."""
    (tmp_path / "punctual.toml").write_text('[logging]\nlevel = "WARNING"\n')
    port = free_port()
    serve = launch(
        tmp_path,
        "serve",
        "serve",
        "--config",
        "punctual.toml",
        "--components",
        "api,runner",
        "--port",
        str(port),
        "--dev-token",
        DEV_TOKEN,
    )
    worker: Process | None = None
    try:
        base_url = f"http://127.0.0.1:{port}"

        def healthy() -> bool | None:
            serve.alive()
            try:
                return True if httpx.get(f"{base_url}/healthz", timeout=2).is_success else None
            except httpx.HTTPError:
                return None

        wait_for("the API", healthy, STARTUP_SECONDS)
        # The worker starts on the database and key file serve created (same directory).
        worker = launch(
            tmp_path, "worker", "worker", "--app", "punctual.demo:app", "--metrics-port", "0"
        )
        running = worker

        def worker_metrics() -> str | None:
            running.alive()
            return metrics_url(running.stdout.read_text())

        url = wait_for("the worker's metrics line", worker_metrics, STARTUP_SECONDS)
        start = create_due(base_url, DEV_TOKEN, "quiet-" + secrets.token_hex(4))
        run_id = completed_run(base_url, DEV_TOKEN, start["id"])

        families = scrape(url)
        assert {"process_cpu_seconds", "python_gc_objects_collected"} <= set(families)
        assert {"punctual_due_backlog", "punctual_runs_pending"} <= set(families)
        assert DURATION in families, "the family is there, with no request served"
        assert not [s for s in families[DURATION] if s.name == f"{DURATION}_count"]

        def ended() -> list[str] | None:
            lines = [
                line
                for line in running.stderr.read_text().splitlines()
                if f"subject={run_id}" in line and " event=run." in line
            ]
            return lines or None

        (line,) = wait_for("the worker's line for the run's end", ended, STARTUP_SECONDS)
        assert " INFO punctual.events event=run.completed tenant=default " in line
        assert "workflow=echo" in line and "duration_ms=" in line
    finally:
        codes = (serve.stop(), worker.stop() if worker is not None else 0)
    assert codes == (0, 0), f"{serve.describe()}\n\n{worker.describe() if worker else ''}"
    quiet = serve.stderr.read_text()
    assert " INFO " not in quiet and "scheduled-starts" not in quiet, quiet


# --- refusals: a bad [logging] value, a metrics port in use ---------------------------------


def test_a_bad_logging_value_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text('[logging]\nlevel = "LOUD"\n')
    answer = run_cli("serve", "--config", "bad.toml", "--port", str(free_port()), cwd=tmp_path)
    assert answer.returncode == 2, answer
    (line,) = answer.stderr.strip().splitlines()
    assert line.startswith("error: invalid configuration: logging.level"), line

    worker = subprocess.run(
        [str(PUNCTUAL), "worker", "--app", "punctual.demo:app"],
        cwd=tmp_path,
        env={**clean_env(), "PUNCTUAL_LOGGING__FORMAT": "xml"},
        capture_output=True,
        text=True,
        timeout=CLI_SECONDS,
        check=False,
    )
    assert worker.returncode == 2, worker
    (line,) = worker.stderr.strip().splitlines()
    assert line.startswith("error: invalid configuration: logging.format"), line
    assert not (tmp_path / "punctual.db").exists(), "refused before the database is touched"


def test_a_metrics_port_in_use_is_one_line_and_exit_7(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        worker = run_cli(
            "worker", "--app", "punctual.demo:app", "--metrics-port", port, cwd=tmp_path
        )
        serve = run_cli("serve", "--components", "runner", "--metrics-port", port, cwd=tmp_path)
    # The API's own port: both sockets are this process's, and still one is refused.
    api_port = str(free_port())
    same = run_cli("serve", "--port", api_port, "--metrics-port", api_port, cwd=tmp_path)
    for answer in (worker, serve, same):
        assert answer.returncode == 7, answer
        (line,) = answer.stderr.strip().splitlines()
        assert "address_in_use" in line and "--metrics-port" in line, line
    assert not (tmp_path / "punctual.db").exists(), "refused before the database is touched"

    several = run_cli(
        "serve", "--workers", "2", "--components", "api", "--metrics-port", "0", cwd=tmp_path
    )
    assert several.returncode == 2, several
    assert "--metrics-port" in several.stderr
