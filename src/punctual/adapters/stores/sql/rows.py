"""Row <-> domain conversions shared by the repositories."""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.engine import RowMapping

from punctual.domain.runs import Definition, Run, RunState
from punctual.domain.starts import DispatchRecord, LastError, ScheduledStart, StartState
from punctual.domain.timeutil import parse_rfc3339, to_rfc3339
from punctual.ports.records import EncryptedInput

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Record = TypeVar("Record", bound="DataclassInstance")


@cache
def _field_names(cls: type[DataclassInstance]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def record_from_row(cls: type[Record], row: RowMapping, **converted: Any) -> Record:
    """A record whose fields are read from the columns of the same name, but for those
    given in ``converted`` (a value the column holds in another form, or another column's)."""
    read = {name: row[name] for name in _field_names(cls) if name not in converted}
    return cls(**read, **converted)


def record_columns(record: DataclassInstance, **converted: Any) -> dict[str, Any]:
    """The columns of a row holding ``record``: each field in the column of its name, but
    for those given in ``converted``, which also adds the columns the record has no field
    for."""
    return {name: getattr(record, name) for name in _field_names(type(record))} | converted


def encrypted_columns(name: str, value: EncryptedInput | None) -> dict[str, Any]:
    """A sealed value's two columns: the ciphertext in ``name``, its key in ``<name>_key_id``."""
    if value is None:
        return {name: None, f"{name}_key_id": None}
    return {name: value.ciphertext, f"{name}_key_id": value.key_id}


def encrypted_from_row(row: RowMapping, name: str) -> EncryptedInput:
    """The sealed value that ``encrypted_columns`` stored in ``name``."""
    return EncryptedInput(row[f"{name}_key_id"], row[name])


def last_error_to_json(error: LastError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {"code": error.code, "message": error.message, "at": to_rfc3339(error.at)}


def last_error_from_json(data: dict[str, Any] | None) -> LastError | None:
    if not data:
        return None
    return LastError(code=data["code"], message=data["message"], at=parse_rfc3339(data["at"]))


def start_from_row(row: RowMapping) -> ScheduledStart:
    dispatched = row["dispatched_at"] is not None
    return record_from_row(
        ScheduledStart,
        row,
        attributes=dict(row["attributes"] or {}),
        state=StartState(row["state"]),
        last_error=last_error_from_json(row["last_error"]),
        dispatch=record_from_row(DispatchRecord, row) if dispatched else None,
        # Not the ``origin`` column (an occurrence's ``OccurrenceOrigin``): the origin its run
        # carries, which reads of occurrences fill in.
        origin={},
    )


def run_converted(row: RowMapping) -> dict[str, Any]:
    """The columns of a run that its records hold in another form."""
    return {
        "state": RunState(row["state"]),
        "origin": dict(row["origin"] or {}),
        "cancel_requested": bool(row["cancel_requested"]),
    }


def run_from_row(row: RowMapping) -> Run:
    return record_from_row(Run, row, **run_converted(row))


def definition_from_row(row: RowMapping) -> Definition:
    return record_from_row(Definition, row, input_schema=dict(row["input_schema"]))
