"""Host-global workflow definitions: registration by workers, lifecycle, input validation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from punctual.domain.inputs import schema_problems
from punctual.domain.runs import Definition, DefinitionState
from punctual.errors import ConfigurationError, Conflict, InvalidRequest, NotFound
from punctual.ports.records import WorkerRecord
from punctual.ports.store import Tx
from punctual.usecases.context import Services
from punctual.usecases.keys import needed_by
from punctual.usecases.projections import definition_view


@dataclass(frozen=True)
class DeclaredDefinition:
    """What a worker declares for one workflow version it has loaded."""

    name: str
    version: str
    artifact: str
    input_schema: dict[str, Any]
    execution_timeout_seconds: float


def input_problems(definition: Definition, payload: Any) -> list[str]:
    """Why ``payload`` does not validate against the definition's schema (empty if it does).

    The schema is the one judge (decision 0004); the problems name schema rules and
    schema-named places only, never input values or unnamed keys (FT-4)."""
    return schema_problems(definition.input_schema, payload)


def register_worker(
    services: Services, worker: WorkerRecord, declared: Iterable[DeclaredDefinition]
) -> None:
    """Record a worker and the definitions it loaded; first versions become active (WF-2).

    Registration locks each workflow name until commit; names are taken in sorted order
    so that two workers declaring the same workflows cannot deadlock.
    """
    now = services.clock.now()
    with services.store.transaction() as tx:
        for item in sorted(declared, key=lambda d: (d.name, d.version)):
            tx.definitions.register(
                item.name,
                item.version,
                item.artifact,
                item.input_schema,
                item.execution_timeout_seconds,
                now,
            )
        tx.definitions.upsert_worker(worker)


def loaded_versions(tx: Tx, now: datetime, liveness_seconds: float) -> set[tuple[str, str, str]]:
    since = now - timedelta(seconds=liveness_seconds)
    return {item for worker in tx.definitions.live_workers(since) for item in worker.loaded}


def list_definitions(services: Services) -> list[dict[str, Any]]:
    now = services.clock.now()
    with services.store.transaction(readonly=True) as tx:
        loaded = {
            (name, version)
            for name, version, _ in loaded_versions(
                tx, now, services.policy.worker_liveness_seconds
            )
        }
        return [definition_view(d, (d.name, d.version) in loaded) for _, d in tx.definitions.find()]


def set_lifecycle(
    services: Services, name: str, version: str, state: DefinitionState
) -> Definition:
    """Activate, deprecate or retire a version (a host operation, WF-3).

    Retiring is refused while pending starts or unfinished runs pin the version, or,
    for the active version, while unpinned pending starts of the workflow wait for it.
    """
    with services.store.transaction() as tx:
        current = tx.definitions.get(name, version)
        if current is None:
            raise NotFound(f"workflow {name} has no version {version}")
        if state is DefinitionState.RETIRED:
            users = definition_users(tx, name, version, current.state == DefinitionState.ACTIVE)
            if users:
                raise Conflict(
                    f"{name} version {version} is still needed by: {', '.join(users)}",
                    code="in_use",
                    users=users,
                )
        tx.definitions.set_state(name, version, state)
        updated = tx.definitions.get(name, version)
        assert updated is not None
        return updated


def definition_users(tx: Tx, name: str, version: str, is_active: bool) -> list[str]:
    """What still needs a definition version (WF-3): unfinished runs and pinned schedules
    (paused ones included) of it and, for the active version, pending starts and
    occurrences and ``active_at_fire`` schedules that will resolve to it at dispatch."""
    users: list[str] = []
    unfinished = tx.runs.count_unfinished(name, version)
    if unfinished:
        users.append(f"{unfinished} unfinished run(s)")
    pinned, following = tx.schedules.count_using(name, version)
    if pinned:
        users.append(f"{pinned} schedule(s) pinned to it")
    if is_active and following:
        users.append(f"{following} active_at_fire schedule(s) of {name}")
    if is_active:
        pending = tx.starts.count_pending_of_workflow(name)
        if pending:
            users.append(f"{pending} pending start(s) of {name}")
    return users


def key_report(services: Services) -> list[dict[str, Any]]:
    """Every codec key in the ring or needed by stored values, with what needs them;
    ``active`` is the key this process seals with (the store's, once one was activated)."""
    with services.store.transaction(readonly=True) as tx:
        usage = tx.starts.key_usage()
    ring = set(services.codec.key_ids())
    return [
        {
            "key_id": key_id,
            "in_key_ring": key_id in ring,
            "active": key_id == services.codec.active_key_id,
            "needed_by": needed_by(usage.get(key_id, {})),
        }
        for key_id in sorted(ring | set(usage))
    ]


def check_keys(services: Services) -> None:
    """Refuse to start when stored work needs a codec key the ring no longer has."""
    missing = [item for item in key_report(services) if not item["in_key_ring"]]
    if missing:
        detail = "; ".join(f"{m['key_id']} ({', '.join(m['needed_by'])})" for m in missing)
        raise ConfigurationError(
            f"codec key(s) missing from the key ring but still needed: {detail}; restore them "
            "to codec.key_file (see docs/operations.md, 'Keys')"
        )


def check(services: Services) -> list[dict[str, Any]]:
    """Deployment preflight (WF-3): every version, with what still needs it."""
    with services.store.transaction(readonly=True) as tx:
        report = [
            {
                "name": d.name,
                "version": d.version,
                "state": d.state,
                "artifact": d.artifact,
                "needed_by": definition_users(tx, d.name, d.version, d.state == "active"),
            }
            for _, d in tx.definitions.find()
        ]
    return report


def require_active(tx: Tx, workflow: str) -> Definition:
    """The active definition a new request validates against (OS-6)."""
    definition = tx.definitions.active(workflow)
    if definition is not None:
        return definition
    if not any(d.name == workflow for _, d in tx.definitions.find()):
        raise InvalidRequest(
            f"workflow {workflow} is not defined; a worker that has it loaded registers it",
            code="unknown_workflow",
        )
    raise InvalidRequest(
        f"workflow {workflow} has no active version; activate one first",
        code="workflow_inactive",
    )
