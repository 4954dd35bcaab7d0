"""Why a dispatch did not start a run, classified by what should happen next.

* configuration failures are deterministic: retrying cannot help, the start fails
  (and a schedule that hits one is auto-disabled, CR-3);
* item failures are deterministic too, but lie in one start's own stored data (a
  ciphertext that fails authentication): that start fails, its schedule keeps firing;
* start-specific failures (no worker has the version loaded, a key id this process does
  not hold, an unexpected error while deciding the start) are retried with backoff and
  charged to the start (DP-3);
* outages (engine or store unavailable) are never charged to starts: dispatch pauses.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FailureClass(StrEnum):
    CONFIGURATION = "configuration"
    """Deterministic: the start fails at once; retrying would fail the same way."""
    ITEM = "item"
    """Deterministic and confined to this start's own data: it fails at once, alone (FT-1)."""
    START_SPECIFIC = "start_specific"
    """Specific to this start and possibly temporary: retried with backoff, then failed."""
    OUTAGE = "outage"
    """The engine or store is down: nothing is charged, dispatch pauses and resumes."""
    TOO_LATE = "too_late"
    """Its start deadline passed (RS-10): it is never started late; skipped, not failed,
    and nothing about the schedule is wrong."""


@dataclass(frozen=True)
class DispatchFailure:
    code: str
    message: str
    failure_class: FailureClass


def workflow_inactive(workflow: str) -> DispatchFailure:
    return DispatchFailure(
        "workflow_inactive",
        f"workflow {workflow} has no active version; activate one with "
        "'punctual definitions activate'",
        FailureClass.CONFIGURATION,
    )


def input_rejected(workflow: str, version: str, reason: str) -> DispatchFailure:
    return DispatchFailure(
        "input_rejected",
        f"the input no longer validates against {workflow} version {version}: {reason}",
        FailureClass.CONFIGURATION,
    )


def workload_class_removed(workload_class: str) -> DispatchFailure:
    return DispatchFailure(
        "workload_class_not_allowed",
        f"workload class {workload_class} is no longer configured or allowed for this tenant",
        FailureClass.CONFIGURATION,
    )


def version_not_loaded(workflow: str, version: str) -> DispatchFailure:
    return DispatchFailure(
        "version_not_loaded",
        f"no live worker has {workflow} version {version} loaded; start a worker with it",
        FailureClass.START_SPECIFIC,
    )


def engine_unavailable(detail: str) -> DispatchFailure:
    return DispatchFailure(
        "engine_unavailable", f"the engine did not answer: {detail}", FailureClass.OUTAGE
    )


def too_late(deadline_text: str) -> DispatchFailure:
    return DispatchFailure(
        "too_late",
        f"its start deadline ({deadline_text}) passed before it could be started; it is "
        "never started late (the schedule's start_deadline_ms)",
        FailureClass.TOO_LATE,
    )


def creator_access_revoked(subject: str) -> DispatchFailure:
    return DispatchFailure(
        "creator_access_revoked",
        f"{subject}, who created it, is no longer a member of the tenant allowed to create "
        "runs; an admin can transfer the schedule or create a new start",
        FailureClass.CONFIGURATION,
    )


def input_undecryptable(key_id: str) -> DispatchFailure:
    return DispatchFailure(
        "input_undecryptable",
        f"the stored input (codec key {key_id}) fails authentication: it is damaged or was "
        "sealed with another key under that id; create a new start with the input",
        FailureClass.ITEM,
    )


def input_key_unknown(key_id: str) -> DispatchFailure:
    return DispatchFailure(
        "input_key_unknown",
        f"codec key {key_id} is not in this runner's key ring; add it to every runner's ring",
        FailureClass.START_SPECIFIC,
    )


def dispatch_error(error_type: str) -> DispatchFailure:
    """An unexpected error while deciding one start: retried alone, never stops the page."""
    return DispatchFailure(
        "dispatch_error",
        f"deciding the dispatch raised {error_type}; the runner log has the details",
        FailureClass.START_SPECIFIC,
    )
