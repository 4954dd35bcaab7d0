"""Ownership transfer of a schedule (CR-8): an admin names another member as its creator.

A schedule's runs carry its creator's identity (dispatch starts an occurrence's run as the
occurrence's ``created_by``, which generation copies from the schedule), so after a
transfer the schedule and its occurrences not yet claimed for dispatch name the new
owner: every run dispatched from then on carries it, and removing the previous creator no
longer touches the schedule. The new owner must be allowed to create runs (a member or an
admin): a viewer's schedule would only fail at its next fire.

Check order (API.md): existence, role, the new owner's membership (stored data), version.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from punctual.domain.permissions import Action, Principal, allowed, require
from punctual.domain.schedules import Schedule
from punctual.domain.starts import StartState
from punctual.errors import InvalidRequest, not_found, version_conflict
from punctual.ports.records import OccurrenceFilter, Order, Seek
from punctual.ports.store import Tx
from punctual.usecases.kernel.context import Services
from punctual.usecases.kernel.idempotency import Answer, Mutation, Outcome
from punctual.usecases.kernel.projections import schedule_view

_UNCLAIMED = (StartState.SCHEDULED.value, StartState.BUFFERED.value)
_PAGE = 500


@dataclass(frozen=True)
class TransferSchedule:
    schedule_id: str
    version: int
    to: str
    """The subject of the member who becomes the schedule's creator."""


def transfer(services: Services, principal: Principal, cmd: TransferSchedule) -> Mutation:
    del services

    def mutation(tx: Tx, now: datetime) -> Outcome:
        schedule = tx.schedules.get(principal.tenant, cmd.schedule_id, lock=True)
        if schedule is None:
            raise not_found("schedule", cmd.schedule_id)
        if not cmd.to or len(cmd.to) > 200:
            raise InvalidRequest(
                "to must be the subject of a member, 1 to 200 characters",
                errors=[{"loc": ["body", "to"], "msg": "1..200 characters", "type": "string"}],
            )
        require(principal, Action.ADMINISTER)
        _check_new_owner(tx, principal.tenant, cmd.to)
        if schedule.version != cmd.version:
            raise version_conflict("schedule", schedule.id, schedule.version)
        if schedule.created_by == cmd.to:
            return Outcome(Answer.DONE, schedule_view(schedule, now), resource_id=schedule.id)
        if not tx.schedules.compare_and_set(schedule.id, schedule.version, now, created_by=cmd.to):
            latest = tx.schedules.get(schedule.tenant, schedule.id)
            raise version_conflict("schedule", schedule.id, latest.version if latest else 0)
        _reown_unclaimed(tx, schedule, cmd.to, now)
        updated = tx.schedules.get(schedule.tenant, schedule.id)
        assert updated is not None, "changed in this transaction"
        return Outcome(Answer.DONE, schedule_view(updated, now), resource_id=schedule.id)

    return mutation


def _check_new_owner(tx: Tx, tenant: str, subject: str) -> None:
    role = tx.identity.member_role(tenant, subject)
    if role is None or not allowed(Principal(tenant, subject, role), Action.CREATE):
        raise InvalidRequest(
            "the new owner must be a member of this tenant with the member or admin role "
            "(runs carry their schedule's owner's identity); add the member first, or choose "
            "another",
            code="transfer_target_invalid",
            reason="not_a_member" if role is None else "cannot_create",
        )


def _reown_unclaimed(tx: Tx, schedule: Schedule, owner: str, now: datetime) -> None:
    """Occurrences generated before the transfer and not yet claimed would start their
    runs as the previous creator; they are the new owner's too. One claimed meanwhile
    keeps its version check failing here and runs as it was claimed."""
    for state in _UNCLAIMED:
        where = OccurrenceFilter(state=state)
        after: int | None = None
        while True:
            at = Seek(_PAGE, after, Order.OLDEST)
            rows = tx.starts.find_occurrences(schedule.id, where, at)
            for _, occurrence in rows:
                if occurrence.created_by != owner:
                    tx.starts.compare_and_set(
                        occurrence.id, occurrence.version, now, created_by=owner
                    )
            if len(rows) < _PAGE:
                break
            after = rows[-1][0]
