"""Who may do what (SEC-5). One table, consulted by every use case."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from punctual.errors import Forbidden


class Role(StrEnum):
    VIEWER = "viewer"
    """Reads everything in the tenant; changes nothing."""
    MEMBER = "member"
    """Creates starts and schedules; changes its own; pauses and acknowledges."""
    ADMIN = "admin"
    """Everything, including members and tokens."""


class Action(StrEnum):
    READ = "read"
    CREATE = "create"
    MUTATE_START = "mutate_start"
    """Reschedule or cancel a start, cancel or terminate a run: owner or admin."""
    EDIT_SCHEDULE = "edit_schedule"
    """Content edit or delete of a schedule: creator or admin."""
    OPERATE = "operate"
    """Pause/resume a schedule, cancel an occurrence, acknowledge a finding."""
    ADMINISTER = "administer"
    """Members and tokens."""


@dataclass(frozen=True)
class Principal:
    tenant: str
    subject: str
    role: Role


_OWNER_ONLY_FOR_MEMBERS = {Action.MUTATE_START, Action.EDIT_SCHEDULE}


def allowed(principal: Principal, action: Action, owner: str | None = None) -> bool:
    if principal.role is Role.ADMIN:
        return True
    if action is Action.READ:
        return True
    if principal.role is Role.VIEWER or action is Action.ADMINISTER:
        return False
    if action in _OWNER_ONLY_FOR_MEMBERS:
        return owner == principal.subject
    return True


def require(principal: Principal, action: Action, owner: str | None = None) -> None:
    if not allowed(principal, action, owner):
        needs = "the owner or an admin" if action in _OWNER_ONLY_FOR_MEMBERS else "a member"
        if action is Action.ADMINISTER:
            needs = "an admin"
        raise Forbidden(
            f"{principal.subject} ({principal.role}) may not {action.value.replace('_', ' ')}; "
            f"this needs {needs}"
        )
