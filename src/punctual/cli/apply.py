"""``punctual schedules apply FILE``: schedules kept as code (SPEC RS-9e, API.md "Schedule
fields and controls").

The file is TOML: a top-level ``source = "<name>"`` and ``[[schedules]]`` tables, each the
create body of one schedule (its ``name`` included)::

    source = "deploy/schedules.toml"

    [[schedules]]
    name = "nightly-scores"
    workflow = "score"
    input = { score = 0.9 }
    spec = { cron = "30 2 * * 1-5", time_zone = "America/New_York" }
    overlap = "skip"
    missed = "catch_up"

The plan comes from the server (``PUT …/schedules/by-name/{name}?dry_run=true``: create,
update with the changed fields, or unchanged), so the CLI never guesses what a field's
default or a stored input is. Every schedule is planned before any is written: a file
with one invalid schedule changes nothing. Applying sends ``PUT`` only for creates and
updates, so a second apply of the same file writes nothing. ``--prune`` adds a ``delete``
for each schedule last applied from the same ``source`` that the file no longer names;
schedules of another source, or made by hand, are never touched.

Each ``PUT`` carries a fresh idempotency key (kept across the client's own retries):
applying is declarative, so the retry of an interrupted apply is simply running it again.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from punctual.cli.remote import EXIT_INVALID, fail, validation_errors

if TYPE_CHECKING:
    from punctual.client import PunctualClient

Action = Literal["create", "update", "unchanged", "delete"]
_FILE_KEYS = {"source", "schedules"}


@dataclass(frozen=True)
class ScheduleFile:
    source: str
    schedules: dict[str, dict[str, Any]]
    """Each schedule's PUT body (the table without its ``name``, with the file's
    ``source``), by name, in file order."""


@dataclass
class Step:
    """One line of the plan, and what applying it did."""

    name: str
    action: Action
    changed_fields: list[str] = field(default_factory=list)
    id: str | None = None
    """The schedule's id."""
    version: int | None = None
    """The version a ``delete`` is sent with."""
    applied: bool = False

    def view(self) -> dict[str, Any]:
        """The step as ``--json`` prints it: every field but the version."""
        return {name: value for name, value in asdict(self).items() if name != "version"}

    def line(self) -> str:
        detail = ""
        if self.action == "update" and self.changed_fields:
            detail = f": {', '.join(self.changed_fields)}"
        elif self.action == "delete":
            detail = f" ({self.id})"
        return f"  {self.action:<9} {self.name}{detail}"


def read_file(path: Path) -> ScheduleFile:
    """The file's schedules; exits 2 naming the problem when it is not a schedule file."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        fail(EXIT_INVALID, f"cannot read {path}: {exc.strerror or exc}")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        fail(EXIT_INVALID, f"{path} is not valid TOML: {exc}")
    unknown = sorted(set(data) - _FILE_KEYS)
    if unknown:
        fail(EXIT_INVALID, f"{path}: unknown top-level key(s) {', '.join(unknown)}")
    source = data.get("source")
    if not isinstance(source, str) or not source.strip():
        fail(EXIT_INVALID, f'{path} needs a top-level source = "<name>" naming this file')
    tables = data.get("schedules", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        fail(EXIT_INVALID, f"{path}: schedules must be [[schedules]] tables")
    schedules: dict[str, dict[str, Any]] = {}
    for number, table in enumerate(tables, start=1):
        name = table.get("name")
        if not isinstance(name, str) or not name:
            fail(EXIT_INVALID, f"{path}: schedule {number} has no name")
        if name in schedules:
            fail(EXIT_INVALID, f"{path}: two schedules are named {name!r}")
        if "source" in table:
            fail(EXIT_INVALID, f"{path}: schedule {name!r} sets source; the file's applies")
        schedules[name] = {
            **{key: value for key, value in table.items() if key != "name"},
            "source": source,
        }
    return ScheduleFile(source, schedules)


def plan(client: PunctualClient, schedule_file: ScheduleFile, prune: bool) -> list[Step]:
    """What applying the file would do, from the server's dry runs. Refusals of single
    schedules are collected and reported together (exit 2) before anything is written."""
    from punctual.client import InvalidRequestError

    steps: list[Step] = []
    refused: list[str] = []
    for name, body in schedule_file.schedules.items():
        try:
            planned = client.plan_schedule_by_name(name, body)
        except InvalidRequestError as error:
            refused.append(f"{name}: {error.status} {error.code}: {error.message}")
            refused += [f"  {item}" for item in validation_errors(error)]
            continue
        steps.append(Step(name, planned.action, list(planned.changed_fields)))
    if refused:
        fail(EXIT_INVALID, "the file was not applied:\n" + "\n".join(refused))
    if prune:
        steps += [
            Step(schedule.name, "delete", id=schedule.id, version=schedule.version)
            for schedule in _applied_from(client, schedule_file.source)
            if schedule.name not in schedule_file.schedules
        ]
    return steps


def apply(client: PunctualClient, schedule_file: ScheduleFile, steps: list[Step]) -> Iterator[Step]:
    """Carry the plan out in order (deletes last), yielding each step once it is done."""
    for step in steps:
        if step.action in ("create", "update"):
            answer = client.put_schedule_by_name(step.name, schedule_file.schedules[step.name])
            step.id = answer.id
        elif step.action == "delete":
            assert step.id is not None and step.version is not None
            client.delete_schedule(step.id, version=step.version)
        else:
            continue
        step.applied = True
        yield step


def summary(steps: list[Step]) -> str:
    counts = {action: 0 for action in ("create", "update", "unchanged", "delete")}
    for step in steps:
        counts[step.action] += 1
    return ", ".join(f"{count} {action}" for action, count in counts.items())


def _applied_from(client: PunctualClient, source: str) -> Iterator[Any]:
    """Every live schedule last applied from ``source`` (the filter is checked here too,
    so a server that ignores it can never widen a prune)."""
    cursor: str | None = None
    while True:
        page = client.list_schedules(limit=100, cursor=cursor, source=source)
        yield from (schedule for schedule in page.items if schedule.source == source)
        cursor = page.next_cursor
        if cursor is None:
            return
