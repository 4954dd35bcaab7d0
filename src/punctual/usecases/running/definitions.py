"""Host-global workflow definitions: registration by workers, lifecycle, input validation."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from punctual.domain.inputs import schema_problems
from punctual.domain.runs import Definition, DefinitionState
from punctual.errors import ConfigurationError, Conflict, InvalidRequest, NotFound
from punctual.ports.records import WorkerRecord
from punctual.ports.store import Tx
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.projections import definition_view
from punctual.usecases.tenancy.health import ARTIFACT_MISMATCH, HOST
from punctual.usecases.tenancy.keys import needed_by

log = logging.getLogger("punctual.worker")


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


@dataclass(frozen=True)
class ArtifactMismatch:
    """A version whose code in a worker is not the code registered for it (OP-3)."""

    workflow: str
    version: str
    artifact: str
    """The artifact of the worker's code."""
    registered: str


def register_worker(
    services: Services,
    worker: WorkerRecord,
    declared: Iterable[DeclaredDefinition],
    *,
    pid: int | None = None,
) -> WorkerRecord:
    """Record a worker and the definitions it loaded; first versions become active (WF-2).

    A version registered before keeps its artifact. A worker whose code for it differs
    (a body edited without a new version) serves none of its runs (OP-3): the record
    returned, the one stored, has only the versions whose code matches, so dispatch sends
    the others' starts back to wait (DP-3) and the worker claims none of their runs; and
    a host-wide ``artifact_mismatch`` finding names both artifacts and the process while
    the worker lives (``pid`` completes its name).

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
        mismatched = _mismatches(tx, worker.loaded)
        drifted = {(m.workflow, m.version) for m in mismatched}
        served = replace(worker, loaded=[i for i in worker.loaded if (i[0], i[1]) not in drifted])
        tx.definitions.upsert_worker(served)
        if mismatched:
            tx.findings.raise_finding(
                HOST,
                ARTIFACT_MISMATCH,
                worker.id,
                "warning",
                mismatch_text(worker, pid, mismatched),
                now,
            )
    for m in mismatched:
        log.error(
            "event=artifact_mismatch worker=%s host=%s pid=%s workflow=%s version=%s "
            "artifact=%s registered=%s",
            worker.id,
            worker.host,
            pid,
            m.workflow,
            m.version,
            m.artifact,
            m.registered,
        )
    return served


def _mismatches(tx: Tx, loaded: Iterable[tuple[str, str, str]]) -> list[ArtifactMismatch]:
    found: list[ArtifactMismatch] = []
    for name, version, artifact in loaded:
        registered = tx.definitions.get(name, version)
        if registered is not None and registered.artifact != artifact:
            found.append(ArtifactMismatch(name, version, artifact, registered.artifact))
    return found


def mismatch_text(
    worker: WorkerRecord, pid: int | None, mismatched: Iterable[ArtifactMismatch]
) -> str:
    """What an operator reads: the process, and per version both artifacts and the fix."""
    process = f"worker {worker.id} on host {worker.host}" + (f" (pid {pid})" if pid else "")
    versions = "; ".join(
        f"{m.workflow} version {m.version}: its code is {m.artifact}, the registered "
        f"artifact is {m.registered}"
        for m in mismatched
    )
    return (
        f"{process} has code that differs from the registered artifact, so it takes no "
        f"runs of these versions: {versions}. Deploy the registered code there, or register "
        "the changed body as a new version"
    )


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
