"""What a worker tells the store it has loaded: each definition of its app, with the
artifact of its code, so that runs go only to workers whose code is the registered one
(OP-3)."""

from __future__ import annotations

from punctual.usecases.running.definitions import DeclaredDefinition
from punctual.workflows import App


def declared_definitions(app: App) -> list[DeclaredDefinition]:
    return [
        DeclaredDefinition(
            name=d.name,
            version=d.version,
            artifact=d.artifact,
            input_schema=d.input_schema,
            execution_timeout_seconds=d.execution_timeout_seconds,
        )
        for d in app.definitions
    ]
