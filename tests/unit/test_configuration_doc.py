"""docs/configuration.md lists every configuration key, and only keys that exist.

The keys are read from the ``Settings`` model itself, sections and the entries of
``[tenants.NAME]`` and ``[workload_classes.NAME]`` included, and compared with the
document's complete example file (a key written commented out, ``# key = value``, counts
as documented): a key added to the settings without its line in the document, or a line
left behind after a key was removed or renamed, fails here.
"""

from __future__ import annotations

import re
import tomllib
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from punctual.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
ENTRY = "*"
"""Stands for the name of one entry of a table of sections, as in ``tenants.*.max_schedules``."""
COMMENTED_KEY = re.compile(r"^(\s*)#\s*([a-z_]+\s*=.*)$")


def _nested(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The section model a field holds, and whether it is a table of them by name."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        for arm in get_args(annotation):
            model, by_name = _nested(arm)
            if model is not None:
                return model, by_name
        return None, False
    if origin is dict:
        model, _ = _nested(get_args(annotation)[1])
        return model, model is not None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def settings_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key the model accepts, dotted (``runner.page_size``)."""
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        section, by_name = _nested(field.annotation)
        if section is None:
            keys.add(key)
        else:
            keys |= settings_keys(section, f"{key}.{ENTRY}." if by_name else f"{key}.")
    return keys


def _example() -> dict[str, Any]:
    """The document's complete file, with its commented-out keys written in."""
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"^## A complete file\n.*?^```toml\n(.*?)^```", text, re.M | re.S)
    assert len(blocks) == 1, "docs/configuration.md has one ```toml block under 'A complete file'"
    lines = [COMMENTED_KEY.sub(r"\1\2", line) for line in blocks[0].splitlines()]
    return tomllib.loads("\n".join(lines))


def documented_keys(table: dict[str, Any], model: type[BaseModel], prefix: str = "") -> set[str]:
    """The example's keys, dotted the way ``settings_keys`` writes them; a key the model
    does not know is kept as written, so that it shows up as stale."""
    keys: set[str] = set()
    for name, value in table.items():
        key = f"{prefix}{name}"
        field = model.model_fields.get(name)
        section, by_name = _nested(field.annotation) if field is not None else (None, False)
        if section is None or not isinstance(value, dict):
            keys.add(key)
        elif by_name:
            for entry in value.values():
                keys |= documented_keys(entry, section, f"{key}.{ENTRY}.")
        else:
            keys |= documented_keys(value, section, f"{key}.")
    return keys


def test_every_configuration_key_is_documented() -> None:
    missing = settings_keys(Settings) - documented_keys(_example(), Settings)
    assert not missing, f"keys missing from docs/configuration.md: {sorted(missing)}"


def test_the_document_names_no_key_the_settings_lack() -> None:
    stale = documented_keys(_example(), Settings) - settings_keys(Settings)
    assert not stale, f"docs/configuration.md names keys that do not exist: {sorted(stale)}"


def test_the_walk_sees_nested_sections_and_tables_of_them() -> None:
    """The comparison is only as good as the walk: it reaches into sections, into the
    entries of tables of sections, and through optional types."""
    keys = settings_keys(Settings)
    assert {"driver", "runner.page_size", "codec.refresh_seconds"} <= keys
    assert {"tenants.*.retention_keep_seconds", "workload_classes.*.priority"} <= keys
    assert "quota.controller" in keys
    assert not any(key in keys for key in ("runner", "tenants", "tenants.*"))
