"""The error-code registry (``punctual.errors.REGISTRY``) is the one list of codes: every
code the source raises is in it with the class that carries it, every entry is used, and
the table of codes in docs/api.md says what the registry says."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from punctual import errors
from punctual.adapters.http.status import status_of
from punctual.domain import recurrence

SOURCE = Path(errors.__file__).parent
DOCS = SOURCE.parent.parent / "docs" / "api.md"
ERROR_CLASSES: dict[str, type[Exception]] = {}


def _classes(root: type[Exception]) -> Iterator[type[Exception]]:
    yield root
    for sub in root.__subclasses__():
        yield from _classes(sub)


def _modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(SOURCE.rglob("*.py")):
        if "migrations" not in path.parts:
            yield path, ast.parse(path.read_text(), str(path))


def _code_sites() -> Iterator[tuple[str, str, str | None]]:
    """(where, code, the class that carries it where the source says) for every
    ``code="…"`` keyword and every ``code = "…"`` class attribute."""
    for path, module in _modules():
        where = str(path.relative_to(SOURCE))
        for node in ast.walk(module):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                for keyword in node.keywords:
                    value = keyword.value
                    if keyword.arg == "code" and isinstance(value, ast.Constant):
                        yield f"{where}:{node.lineno}", str(value.value), name
            elif isinstance(node, ast.ClassDef):
                for statement in node.body:
                    if (
                        isinstance(statement, ast.Assign)
                        and [getattr(t, "id", None) for t in statement.targets] == ["code"]
                        and isinstance(statement.value, ast.Constant)
                    ):
                        yield f"{where}:{node.name}", str(statement.value.value), node.name


def _error_classes() -> dict[str, type[Exception]]:
    if not ERROR_CLASSES:
        import punctual.adapters.crypto
        import punctual.ports.codec
        import punctual.ports.engine  # noqa: F401

        for root in (errors.PunctualError, recurrence.RecurrenceError):
            ERROR_CLASSES.update({cls.__name__: cls for cls in _classes(root)})
    return ERROR_CLASSES


def test_every_code_the_source_uses_is_registered_with_the_class_that_carries_it() -> None:
    classes = _error_classes()
    sites = list(_code_sites())
    assert len(sites) > 60, sites
    for where, code, carrier in sites:
        entry = errors.CODES.get(code)
        assert entry is not None, f"{where}: {code} is not in punctual.errors.REGISTRY"
        cls = classes.get(carrier or "")
        if cls is None or issubclass(cls, recurrence.RecurrenceError):
            # A helper that builds the error, or a domain error the use cases turn into
            # InvalidRequest: the code must still be one the API refuses with.
            continue
        assert issubclass(cls, entry.kind), (
            f"{where}: {code} is registered for {entry.kind.__name__}, raised as {cls.__name__}"
        )


def test_a_domain_spec_error_is_registered_as_a_validation_refusal() -> None:
    for cls in _classes(recurrence.RecurrenceError):
        assert errors.registered(cls.code).kind is errors.InvalidRequest, cls


def test_every_registered_code_is_used() -> None:
    defaults = {
        cls.code for cls in _classes(errors.PunctualError) if cls.__module__ == errors.__name__
    }
    text = "\n".join(
        path.read_text() for path in SOURCE.rglob("*.py") if path != Path(errors.__file__)
    )
    used = set(re.findall(r"\"([a-z][a-z_]+)\"", text))
    unused = [e.code for e in errors.REGISTRY if e.code not in used | defaults]
    assert unused == []


def test_codes_are_registered_once_and_readable() -> None:
    codes = [entry.code for entry in errors.REGISTRY]
    assert len(codes) == len(set(codes))
    for entry in errors.REGISTRY:
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", entry.code), entry.code
        assert entry.meaning and "\n" not in entry.meaning and len(entry.meaning) <= 90, entry


def test_an_unregistered_code_is_a_defect_not_an_answer() -> None:
    with pytest.raises(LookupError, match=r"not in punctual\.errors\.REGISTRY"):
        errors.registered("no_such_code")


def _documented() -> list[tuple[int, str]]:
    rows = []
    for line in DOCS.read_text().splitlines():
        match = re.match(r"\| (\d{3}) \| (`[a-z_]+`(?: / `[a-z_]+`)*) \|", line)
        if match:
            rows += [(int(match[1]), code) for code in re.findall(r"`([a-z_]+)`", match[2])]
    return rows


def test_the_documented_codes_answer_the_documented_status() -> None:
    rows = _documented()
    assert len(rows) > 30, rows
    for status, code in rows:
        assert code in errors.CODES, f"docs/api.md lists {code}, the registry does not"
        assert status_of(code) == status, (code, status, status_of(code))


def test_every_code_a_tenant_can_meet_is_documented() -> None:
    startup = (errors.HostUnavailable, errors.AddressInUse, errors.ConfigurationError)
    internal = {"internal_error", "bad_request", "conflict", "unavailable", "in_progress"}
    documented = {code for _, code in _documented()}
    missing = [
        entry.code
        for entry in errors.REGISTRY
        if not issubclass(entry.kind, startup)
        and entry.code not in internal
        and entry.code not in documented
    ]
    assert missing == []
