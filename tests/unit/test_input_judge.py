"""The input judge and its messages (SPEC FT-4, OS-9; decision 0004).

Every message built from a failed validation names schema rules and schema-named places
only: a secret value and a secret unknown key go into each input, and neither may appear.
The schema asserts formats, so it refuses what a pydantic model would refuse for them.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from punctual.domain.inputs import UNNAMED, named_keys, schema_problems
from punctual.workflows import App, InputRejected

SECRET_VALUE = "SECRET-VALUE-4f1c"
SECRET_KEY = "secret-key-9b2e"

STRICT = {
    "type": "object",
    "required": ["code"],
    "properties": {
        "code": {"type": "string", "maxLength": 4, "pattern": "^[a-z]+$"},
        "kind": {"enum": ["a", "b"]},
        "id": {"type": "string", "format": "uuid"},
        "mail": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "integer"}},
        "nested": {
            "type": "object",
            "properties": {"deep": {"type": "integer"}},
            "additionalProperties": False,
        },
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
    "additionalProperties": False,
}

BAD_INPUTS: dict[str, Any] = {
    "too long and off pattern": {"code": SECRET_VALUE},
    "not in the enum": {"code": "ab", "kind": SECRET_VALUE},
    "not a uuid": {"code": "ab", "id": SECRET_VALUE},
    "not an email": {"code": "ab", "mail": SECRET_VALUE},
    "wrong item type": {"code": "ab", "tags": [1, SECRET_VALUE]},
    "unknown key at the top": {"code": "ab", SECRET_KEY: SECRET_VALUE},
    "unknown key nested": {"code": "ab", "nested": {SECRET_KEY: 1, "deep": SECRET_VALUE}},
    "bad value under an unnamed key": {"code": "ab", "counts": {SECRET_KEY: SECRET_VALUE}},
    "required missing": {SECRET_KEY: SECRET_VALUE},
    "not an object": SECRET_VALUE,
}


@pytest.mark.parametrize("payload", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_schema_problems_quote_no_value_and_no_unnamed_key(payload: Any) -> None:
    problems = schema_problems(STRICT, payload)
    assert problems, "the input is invalid: the judge must say so"
    text = "; ".join(problems)
    assert SECRET_VALUE not in text, text
    assert SECRET_KEY not in text, text


def test_schema_problems_name_the_schema_places_and_rules() -> None:
    problems = schema_problems(
        STRICT, {"code": "ab", "nested": {"deep": "x", SECRET_KEY: 1}, "counts": {SECRET_KEY: "x"}}
    )
    assert problems == [
        f'/counts/{UNNAMED}: does not satisfy type "integer" '
        "(properties/counts/additionalProperties/type)",
        "/nested: has properties the schema does not name "
        "(properties/nested/additionalProperties); allowed: deep",
        '/nested/deep: does not satisfy type "integer" (properties/nested/properties/deep/type)',
    ]
    assert schema_problems(STRICT, {}) == ["/: missing required property code (required)"]


def test_formats_are_asserted() -> None:
    assert schema_problems(STRICT, {"code": "ab", "id": "not-a-uuid"})
    assert schema_problems(STRICT, {"code": "ab", "mail": "nobody"})
    assert schema_problems(STRICT, {"code": "ab", "id": str(UUID(int=7)), "mail": "a@b.c"}) == []


def test_named_keys_are_the_schemas_own_names() -> None:
    assert named_keys(STRICT) == {"code", "kind", "id", "mail", "tags", "nested", "deep", "counts"}


class Item(BaseModel):
    code: str

    @field_validator("code")
    @classmethod
    def _known(cls, value: str) -> str:
        if not value.startswith("ok-"):
            raise ValueError(f"unknown code {value}")
        return value


class Guarded(Item):
    """A model stricter than its schema: the validators are not in the JSON Schema."""

    counts: dict[str, int] = {}
    items: dict[str, Item] = {}


app = App(name="judge-tests")


@app.workflow("guarded", "1", input=Guarded)
def guarded(payload: Guarded) -> dict[str, Any]:
    return {"code": payload.code}


def test_a_model_stricter_than_its_schema_is_refused_without_quoting_the_input() -> None:
    definition = app.get("guarded", "1")
    assert definition is not None
    payload = {"code": SECRET_VALUE}
    assert schema_problems(definition.input_schema, payload) == []
    with pytest.raises(ValidationError) as raw:
        Guarded.model_validate(payload)
    assert SECRET_VALUE in str(raw.value), "pydantic's own text quotes the input"

    with pytest.raises(InputRejected) as refused:
        definition.parse_input(payload)
    message = str(refused.value)
    assert SECRET_VALUE not in message, message
    assert "/code: value_error" in message, message
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_a_refusal_by_the_schema_at_the_worker_quotes_no_unnamed_key() -> None:
    definition = app.get("guarded", "1")
    assert definition is not None
    with pytest.raises(InputRejected) as refused:
        definition.parse_input({"code": "ok-1", "counts": {SECRET_KEY: SECRET_VALUE}})
    message = str(refused.value)
    assert SECRET_KEY not in message and SECRET_VALUE not in message, message
    assert f"/counts/{UNNAMED}" in message, message


def test_a_model_refusal_under_an_unnamed_key_shows_the_key_as_unnamed() -> None:
    definition = app.get("guarded", "1")
    assert definition is not None
    payload = {"code": "ok-1", "items": {SECRET_KEY: {"code": SECRET_VALUE}}}
    assert schema_problems(definition.input_schema, payload) == []
    with pytest.raises(InputRejected) as refused:
        definition.parse_input(payload)
    message = str(refused.value)
    assert SECRET_KEY not in message and SECRET_VALUE not in message, message
    assert f"/items/{UNNAMED}/code: value_error" in message, message


def test_valid_input_becomes_the_model() -> None:
    definition = app.get("guarded", "1")
    assert definition is not None
    assert definition.parse_input({"code": "ok-1"}) == Guarded(code="ok-1")
