"""The active version of each workflow as this process last read it (WF-2, OP-5).

A create validates its input against the active definition. Reading it costs the create
a statement; a create in one round trip (``Store.create_in_one_trip``) validates against
the version remembered here instead, and the store checks, in the same statement, that it
is still the active one. A create that finds another version active forgets it here and
takes the transaction path, which reads the definition again and remembers what it read:
a deployment's new version is picked up by the next create, on every process.
"""

from __future__ import annotations

from punctual.domain.runs import Definition


class ActiveDefinitions:
    def __init__(self) -> None:
        self._by_name: dict[str, Definition] = {}

    def recall(self, workflow: str) -> Definition | None:
        return self._by_name.get(workflow)

    def remember(self, definition: Definition) -> None:
        self._by_name[definition.name] = definition

    def forget(self, workflow: str, version: str) -> None:
        """Forget ``version`` unless a newer read has replaced it meanwhile."""
        remembered = self._by_name.get(workflow)
        if remembered is not None and remembered.version == version:
            self._by_name.pop(workflow, None)
