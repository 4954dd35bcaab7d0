"""The QuotaController port: admission of new pending starts (QA-1..QA-3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

from punctual.errors import PunctualError
from punctual.ports.store import Tx


class QuotaController(Protocol):
    exact: bool
    """True only when the decision is exact across every API process."""
    one_trip: Literal["count", "lock_and_count"] | None
    """How the store decides for this controller when a create takes one round trip
    (``Store.create_in_one_trip``): the same count, after the same tenant lock when
    ``lock_and_count``; None when it cannot, and every create takes the transaction."""

    def admit_starts(
        self,
        tx: Tx,
        tenant: str,
        workload_classes: Sequence[str],
        max_pending: int,
        max_pending_by_class: Mapping[str, int],
    ) -> list[PunctualError | None]:
        """One decision for the new starts of one tenant (a single create is a list of one;
        a batch create, OS-11, up to 500), taken inside the transaction that inserts the
        admitted ones, before the insert. Nothing is written.

        The starts are admitted in the order given, each counting the ones admitted before
        it as pending: the answer per start is ``None`` (admitted) or ``QuotaExceeded``
        (details: ``limit``, ``count``, ``scope``) when the tenant, or the tenant and class,
        already has its limit of pending starts, or ``Unavailable`` with code
        ``quota_unavailable`` when no decision can be made.
        """
