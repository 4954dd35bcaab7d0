"""Workflows whose pydantic models the input judge is tested against; imported by the
worker's slot processes, so no pytest here."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic import BaseModel, field_validator

from punctual import App

app = App(name="validation-tests")


class Guarded(BaseModel):
    """Stricter than its JSON Schema: the validator is not in the schema."""

    code: str

    @field_validator("code")
    @classmethod
    def _known(cls, value: str) -> str:
        if not value.startswith("ok-"):
            raise ValueError(f"unknown code {value}")
        return value


class Tagged(BaseModel):
    """Its schema says ``format: uuid``, which the judge asserts like pydantic does."""

    id: UUID


@app.workflow("guarded", "1", input=Guarded)
def guarded(payload: Guarded) -> dict[str, Any]:
    return {"code": payload.code}


@app.workflow("tagged", "1", input=Tagged)
def tagged(payload: Tagged) -> dict[str, Any]:
    return {"id": str(payload.id)}
