"""A host command that cannot start says so in one line, never a traceback (SPEC OP-1).

Each problem an operator can cause (a database that is down, misnamed, in a directory
that does not exist or cannot be written, a URL punctual has no driver for, a key file it
cannot read, the temporal extra missing, a Temporal server that does not answer, a port
in use, a bad configuration key or value) runs through the host commands it concerns, as
the real ``punctual`` program: the exit code of API.md "The CLI over HTTP" (5 what is
unavailable, 7 a port in use, 2 configuration), exactly one non-empty line on stderr, and
that line names the thing to fix and never the database password. One database problem
and one configuration problem run through every host command; the others through one
command per way the commands reach what is wrong.

Every command is an interpreter start of its own (a second or more on a loaded machine),
so a problem's commands run side by side, each bounded by a timeout. The README's
own-workflow example runs verbatim at the end: ``--app mymod:app`` imports ``mymod.py``
from the current directory.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from punctual.adapters.crypto import generate_key_file
from tests.conftest import PG_SERVER
from tests.e2e.harness import free_port, migrate, require_server, wait_for

pytestmark = pytest.mark.e2e

PUNCTUAL = Path(sys.executable).parent / "punctual"
COMMAND_SECONDS = 60.0
"""Bound of one command that must fail at its start (a loaded machine starts slowly)."""
SERVE_SECONDS = 60.0
PASSWORD = "s3cret-" + secrets.token_hex(4)

HOST_COMMANDS: dict[str, tuple[str, ...]] = {
    "serve": ("serve",),
    "worker": ("worker", "--app", "punctual.demo:app"),
    "db upgrade": ("db", "upgrade"),
    "keys check": ("keys", "check"),
    "keys rewrap": ("keys", "rewrap"),
    "retention plan": ("retention", "plan"),
    "tokens create": ("tokens", "create", "--tenant", "t1", "--subject", "s1", "--role", "admin"),
    "definitions list": ("definitions", "list"),
}
EVERY_COMMAND = tuple(HOST_COMMANDS)
DATABASE_PATHS = ("serve", "db upgrade", "keys check")
"""One command per way to the database: the assembly, the migrations, the store alone."""
KEY_RING_PATHS = ("serve", "keys rewrap")
"""Assemblies that read ``codec.key_file``, with the logging of a long-running process and
without (a ``keys`` command reads its ``--key-file``)."""
ENGINE_PATHS = ("serve", "worker", "definitions list")
"""The start of a runner or worker checks the engine; any assembly imports it."""


@dataclass(frozen=True)
class World:
    """What the cases share: a current database with its key ring, files with a problem
    each, and two ports something else listens on."""

    root: Path
    database: str
    key_dir: Path
    temporal_shim: Path
    bad_key: Path
    bad_value: Path
    port_in_use: int
    internal_port_in_use: int


@dataclass(frozen=True)
class Case:
    command: str
    args: tuple[str, ...]
    env: dict[str, str]
    exit_code: int
    names: tuple[str, ...]
    """What the line must name (the setting, the path, the address)."""


@dataclass
class Answer:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False

    def describe(self) -> str:
        return f"exit={self.returncode}\nstdout:\n{self.stdout[-2000:]}\nstderr:\n{self.stderr}"


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("PUNCTUAL_")}


def args_of(command: str) -> tuple[str, ...]:
    """A serve gets a free port of its own (the default 8080 may be anyone's)."""
    if command == "serve":
        return ("serve", "--port", str(free_port()))
    return HOST_COMMANDS[command]


def listening() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("startup")
    # The commands that get past the database find it current and its key ring there, so
    # the only line they print is the one under test (a first start logs schema_created
    # and codec_key_generated before it, and first starts side by side race to write the
    # key ring).
    database = f"sqlite:///{root / 'current.db'}"
    migrate(database)
    generate_key_file(root / "punctual.keys")
    key_dir = root / "key-file-is-a-directory"
    key_dir.mkdir()
    # The venv has the temporal extra (the Temporal tests need it), so its absence is
    # simulated: first on PYTHONPATH, a ``temporalio`` whose import raises exactly what
    # Python raises for a package that is not installed.
    shim = root / "without-temporalio"
    (shim / "temporalio").mkdir(parents=True)
    (shim / "temporalio" / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'temporalio\'", name="temporalio")\n'
    )
    bad_key, bad_value = root / "bad-key.toml", root / "bad-value.toml"
    bad_key.write_text("no_such_setting = 1\n")
    bad_value.write_text('engine = "warp-drive"\n')
    with listening() as taken, listening() as internal_taken:
        yield World(
            root,
            database,
            key_dir,
            shim,
            bad_key,
            bad_value,
            taken.getsockname()[1],
            internal_taken.getsockname()[1],
        )


def database_cases(url: str, names: tuple[str, ...], commands: tuple[str, ...]) -> list[Case]:
    env = {"PUNCTUAL_DATABASE_URL": url}
    return [Case(command, args_of(command), env, 5, names) for command in commands]


def cases_of(problem: str, world: World) -> list[Case]:
    """The problem, with each host command it concerns."""
    current = {"PUNCTUAL_DATABASE_URL": world.database}
    names: tuple[str, ...]
    if problem == "postgres_unreachable":
        where = f"127.0.0.1:{free_port()}"
        url = f"postgresql://punctual:{PASSWORD}@{where}/punctual"
        return database_cases(url, (where, "database_url", "Connection refused"), EVERY_COMMAND)
    if problem == "database_misnamed":
        require_server()
        name = f"punctual_no_such_db_{secrets.token_hex(3)}"
        url = f"{PG_SERVER.rsplit('/', 1)[0]}/{name}"
        return database_cases(url, (name, "does not exist", "database_url"), DATABASE_PATHS)
    if problem == "sqlite_directory_missing":
        missing = world.root / "no" / "such" / "dir"
        url = f"sqlite:///{missing}/punctual.db"
        return database_cases(url, (str(missing), "does not exist", "database_url"), DATABASE_PATHS)
    if problem == "sqlite_unwritable":
        # Nobody may create files in /proc, root included (CI runs as root, for whom a
        # directory without write permission refuses nothing).
        url = "sqlite:////proc/punctual.db"
        return database_cases(
            url, ("/proc/punctual.db", "writable", "database_url"), DATABASE_PATHS
        )
    if problem == "url_unsupported":
        url = f"mysql://punctual:{PASSWORD}@127.0.0.1/punctual"
        names = ("mysql://", "database_url", "SQLite or PostgreSQL")
        return database_cases(url, names, DATABASE_PATHS)
    if problem == "key_file_unreadable":
        env = {**current, "PUNCTUAL_CODEC__KEY_FILE": str(world.key_dir)}
        names = ("codec.key_file", str(world.key_dir), "cannot be read")
        by_option = ("keys", "check", "--key-file", str(world.key_dir))
        return [
            *(Case(command, args_of(command), env, 5, names) for command in KEY_RING_PATHS),
            Case("keys check --key-file", by_option, env, 5, names),
        ]
    if problem == "temporal_extra_missing":
        path = os.pathsep.join(
            filter(None, (str(world.temporal_shim), os.environ.get("PYTHONPATH")))
        )
        env = {**current, "PUNCTUAL_ENGINE": "temporal", "PYTHONPATH": path}
        names = ("temporal extra", "pip install")
        return [Case(command, args_of(command), env, 5, names) for command in ENGINE_PATHS]
    if problem == "temporal_unreachable":
        where = f"127.0.0.1:{free_port()}"
        env = {**current, "PUNCTUAL_ENGINE": "temporal", "PUNCTUAL_TEMPORAL__ADDRESS": where}
        names = (where, "temporal.address")
        return [Case(command, args_of(command), env, 5, names) for command in ("serve", "worker")]
    if problem == "port_in_use":
        taken = str(world.port_in_use)
        internal = {
            **current,
            "PUNCTUAL_INTERNAL_TOKEN": secrets.token_urlsafe(32),
            "PUNCTUAL_INTERNAL_LISTEN": f"127.0.0.1:{world.internal_port_in_use}",
        }
        api_names = (f"127.0.0.1:{taken}", "--port")
        return [
            Case("serve", ("serve", "--port", taken), current, 7, api_names),
            Case(
                "serve --workers",
                ("serve", "--port", taken, "--components", "api", "--workers", "2"),
                current,
                7,
                api_names,
            ),
            Case(
                "serve internal_listen",
                args_of("serve"),
                internal,
                7,
                (f"127.0.0.1:{world.internal_port_in_use}", "internal_listen"),
            ),
        ]
    if problem == "config_key_unknown":
        config = ("--config", str(world.bad_key))
        return [
            Case(command, (*args_of(command), *config), {}, 2, ("no_such_setting",))
            for command in EVERY_COMMAND
        ]
    if problem == "config_value_bad":
        config = ("--config", str(world.bad_value))
        names = ("engine", "'local' or 'temporal'")
        return [
            Case(command, (*args_of(command), *config), {}, 2, names)
            for command in ("serve", "keys check")
        ]
    raise AssertionError(problem)


def run(case: Case, cwd: Path) -> Answer:
    cwd.mkdir(parents=True)
    try:
        done = subprocess.run(
            [str(PUNCTUAL), *case.args],
            cwd=cwd,
            env={**clean_env(), **case.env},
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        return Answer(None, out, err, timed_out=True)
    return Answer(done.returncode, done.stdout, done.stderr)


def side_by_side(cases: list[Case], directory: Path) -> list[Answer]:
    """Each case in a working directory of its own, a few at a time (two per core)."""
    with ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 1)) as pool:
        running = [pool.submit(run, case, directory / str(n)) for n, case in enumerate(cases)]
        return [future.result() for future in running]


def problems_in(case: Case, answer: Answer) -> list[str]:
    lines = [line for line in answer.stderr.splitlines() if line.strip()]
    line = lines[0] if lines else ""
    wrong = []
    if answer.timed_out:
        wrong.append(f"did not end within {COMMAND_SECONDS:g} s")
    if answer.returncode != case.exit_code:
        wrong.append(f"exit {answer.returncode}, expected {case.exit_code}")
    if len(lines) != 1 or "Traceback" in answer.stderr:
        wrong.append(f"{len(lines)} stderr lines, expected exactly one")
    if not line.startswith("error: "):
        wrong.append("the line does not start with 'error: '")
    wrong += [f"the line does not name {name!r}" for name in case.names if name not in line]
    if PASSWORD in answer.stderr or PASSWORD in answer.stdout:
        wrong.append("the database password is shown")
    return wrong


PROBLEMS = (
    "postgres_unreachable",
    "database_misnamed",
    "sqlite_directory_missing",
    "sqlite_unwritable",
    "url_unsupported",
    "key_file_unreadable",
    "temporal_extra_missing",
    "temporal_unreachable",
    "port_in_use",
    "config_key_unknown",
    "config_value_bad",
)


@pytest.mark.parametrize("problem", PROBLEMS)
def test_a_startup_problem_is_one_line_naming_what_to_fix(
    world: World, problem: str, tmp_path: Path
) -> None:
    cases = cases_of(problem, world)
    answers = side_by_side(cases, tmp_path)
    failures = [
        f"{case.command}: {'; '.join(wrong)}\n{answer.describe()}"
        for case, answer in zip(cases, answers, strict=True)
        if (wrong := problems_in(case, answer))
    ]
    assert not failures, "\n\n".join(failures)


# --- --app module:attr from the current directory --------------------------------------


def readme_module() -> str:
    """The ``# mymod.py`` block of the README's "Your own workflows", as written there."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    blocks = re.findall(r"```python\n(# mymod\.py\n.*?)```", readme, re.DOTALL)
    assert len(blocks) == 1, "README.md has one '# mymod.py' example"
    return str(blocks[0])


@dataclass
class Process:
    popen: subprocess.Popen[str]
    stdout: Path
    stderr: Path

    def text(self) -> str:
        return (
            f"exit={self.popen.poll()}\nstdout:\n{self.stdout.read_text()}\n"
            f"stderr:\n{self.stderr.read_text()[-4000:]}"
        )

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=SERVE_SECONDS)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=SERVE_SECONDS)
            raise AssertionError(f"did not stop on SIGTERM\n{self.text()}") from None


def start(cwd: Path, *args: str) -> Process:
    """``punctual ARGS`` run from ``cwd`` (its files land there; its output in files), with
    one slot process: the workflow runs one at a time, and a slot starts in a second."""
    name = args[0]
    stdout, stderr = cwd / f"{name}.out", cwd / f"{name}.err"
    with stdout.open("w") as out, stderr.open("w") as err:
        popen = subprocess.Popen(
            [str(PUNCTUAL), *args],
            cwd=cwd,
            env={**clean_env(), "PUNCTUAL_WORKER__SLOTS": "1"},
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    return Process(popen, stdout, stderr)


def test_the_readme_workflow_runs_with_app_from_the_current_directory(tmp_path: Path) -> None:
    """README: ``punctual serve --app mymod:app`` serves ``./mymod.py`` and runs its
    workflow; ``punctual worker --app mymod:app`` starts with it too."""
    serve_dir, worker_dir = tmp_path / "serve", tmp_path / "worker"
    for directory in (serve_dir, worker_dir):
        directory.mkdir()
        (directory / "mymod.py").write_text(readme_module())
    port, token = free_port(), "pn_startup_" + secrets.token_hex(16)
    serve = start(
        serve_dir, "serve", "--app", "mymod:app", "--port", str(port), "--dev-token", token
    )
    worker = start(worker_dir, "worker", "--app", "mymod:app")
    try:

        def worker_started() -> bool | None:
            _alive(worker)
            return (
                True
                if re.search(r"^worker \S+ started$", worker.stdout.read_text(), re.M)
                else None
            )

        wait_for("the worker's started line", worker_started, SERVE_SECONDS)
        base = f"http://127.0.0.1:{port}/v1/tenants/default"
        headers = {"Authorization": f"Bearer {token}"}

        def healthy() -> bool | None:
            _alive(serve)
            try:
                return True if httpx.get(f"http://127.0.0.1:{port}/healthz").is_success else None
            except httpx.HTTPError:
                return None

        wait_for("punctual serve to answer", healthy, SERVE_SECONDS)
        body = {
            "workflow": "send-reminder",
            "input": {"customer": "acme"},
            "business_request_id": "readme",
            "start_at": (datetime.now(UTC) + timedelta(seconds=2)).isoformat(),
            "workload_class": "standard",
        }

        def decided() -> httpx.Response | None:
            """Sent again with its key while it answers 202, as clients are told to."""
            answer = httpx.post(
                f"{base}/scheduled-starts",
                headers={**headers, "Idempotency-Key": "readme-1"},
                json=body,
                timeout=30,
            )
            return None if answer.status_code == 202 else answer

        created = wait_for("the create to be decided", decided, SERVE_SECONDS)
        assert created.status_code == 201, created.text

        def completed() -> str | None:
            _alive(serve)
            runs = httpx.get(f"{base}/runs", headers=headers, timeout=30).json()["items"]
            done = [r["id"] for r in runs if r["state"] == "completed"]
            return str(done[0]) if done else None

        run_id = wait_for("the send-reminder run to complete", completed, SERVE_SECONDS)
        run_view = httpx.get(f"{base}/runs/{run_id}", headers=headers, timeout=30).json()
        assert run_view["result"] == {"sent": True, "customer": "acme"}
    finally:
        codes = (serve.stop(), worker.stop())
    assert codes == (0, 0), f"{serve.text()}\n\n{worker.text()}"


def _alive(process: Process) -> None:
    assert process.popen.poll() is None, f"exited early\n{process.text()}"
