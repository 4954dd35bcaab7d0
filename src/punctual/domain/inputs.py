"""The one judge of a workflow's input: its JSON Schema (SPEC FT-4, decision 0004).

Acceptance, dispatch and the worker all ask ``schema_problems``, so they agree on what is
valid. Its messages are built from the schema alone: a rule, the schema's value for it and
the place in the input, where every key the schema does not name shows as ``*``. Input
values and unnamed keys (they can be personal data) never reach a message, a record, a
log or an engine's history (OS-9).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

_MAX_EXPECTED_CHARS = 200
_NAMING_KEYWORDS = frozenset({"properties", "dependentRequired", "dependentSchemas"})
UNNAMED = "*"
"""What a message shows in place of an input key that the schema does not name."""


@functools.lru_cache(maxsize=512)
def _validator(schema_json: str) -> Draft202012Validator:
    schema = json.loads(schema_json)
    Draft202012Validator.check_schema(schema)
    # Formats are asserted: a pydantic model refuses a malformed uuid or email, so the
    # schema it produced must too, or acceptance and the worker would disagree.
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def schema_problems(schema: dict[str, Any], payload: Any) -> list[str]:
    """Why ``payload`` does not validate against ``schema`` (empty if it does), safely."""
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
    except SchemaError as exc:
        return [f"the definition's input schema is invalid: {exc.message}"]
    names = named_keys(schema)
    errors = sorted(validator.iter_errors(payload), key=lambda e: list(map(str, e.schema_path)))
    # ``required`` reports each missing property once with the whole list: say it once.
    return list(dict.fromkeys(_describe(error, names) for error in errors))


@functools.lru_cache(maxsize=512)
def _named_keys(schema_json: str) -> frozenset[str]:
    names: set[str] = set()
    _collect_names(json.loads(schema_json), names)
    return frozenset(names)


def named_keys(schema: dict[str, Any]) -> frozenset[str]:
    """Every property name the schema itself names (``properties``, ``required``, …)."""
    return _named_keys(json.dumps(schema, sort_keys=True))


def _collect_names(node: Any, names: set[str]) -> None:
    if isinstance(node, list):
        for item in node:
            _collect_names(item, names)
        return
    if not isinstance(node, dict):
        return
    for keyword, value in node.items():
        naming = keyword in _NAMING_KEYWORDS and isinstance(value, dict)
        if naming or (keyword == "required" and isinstance(value, list)):
            names.update(str(key) for key in value)
        _collect_names(value, names)


def location(parts: Iterable[Any], names: frozenset[str]) -> str:
    """A place in the input as ``/a/0/*``: indexes and schema-named keys, ``*`` otherwise."""
    shown = [
        str(part) if isinstance(part, int) or str(part) in names else UNNAMED for part in parts
    ]
    return "/" + "/".join(shown)


def _describe(error: ValidationError, names: frozenset[str]) -> str:
    """jsonschema's own messages quote the input's values (and unknown keys): never use
    them; say which rule of the schema failed, with the schema's value for it."""
    rule = str(error.validator)
    rule_path = "/".join(str(p) for p in error.schema_path) or rule
    at = location(error.absolute_path, names)
    required = error.validator_value
    if rule == "required" and isinstance(error.instance, dict) and isinstance(required, list):
        missing = [str(p) for p in required if p not in error.instance]
        plural = "y" if len(missing) == 1 else "ies"
        return f"{at}: missing required propert{plural} {', '.join(missing)} ({rule_path})"
    if rule in ("additionalProperties", "unevaluatedProperties") and isinstance(
        error.instance, dict
    ):
        declared = error.schema.get("properties") if isinstance(error.schema, dict) else None
        allowed = sorted(str(k) for k in declared or {})
        return (
            f"{at}: has properties the schema does not name ({rule_path}); "
            f"allowed: {', '.join(allowed) or 'none'}"
        )
    expected = json.dumps(error.validator_value, sort_keys=True, default=str)
    if len(expected) > _MAX_EXPECTED_CHARS:
        expected = expected[:_MAX_EXPECTED_CHARS] + "..."
    return f"{at}: does not satisfy {rule} {expected} ({rule_path})"
