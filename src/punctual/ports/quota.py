"""The QuotaController port: admission of new pending starts (QA-1..QA-3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from punctual.errors import PunctualError
from punctual.ports.store import Tx


class QuotaController(Protocol):
    exact: bool
    """True only when the decision is exact across every API process."""

    def admit_start(
        self,
        tx: Tx,
        tenant: str,
        workload_class: str,
        max_pending: int,
        max_pending_for_class: int | None,
    ) -> None:
        """Decide inside the transaction that will insert the start, before the insert.

        Raises ``QuotaExceeded`` (details: ``limit``, ``count``, ``scope``) when the tenant,
        or the tenant and class, already has its limit of pending starts; raises
        ``Unavailable`` with code ``quota_unavailable`` when no decision can be made.
        Nothing has been written when it raises.
        """

    def admit_starts(
        self,
        tx: Tx,
        tenant: str,
        workload_classes: Sequence[str],
        max_pending: int,
        max_pending_by_class: Mapping[str, int],
    ) -> list[PunctualError | None]:
        """One decision for several new starts of one tenant (a batch create, OS-11), taken
        inside the transaction that inserts the admitted ones, before the insert.

        The starts are admitted in the order given, each exactly as ``admit_start`` would
        admit it after the ones before it had been inserted: the answer per start is
        ``None`` (admitted) or the error ``admit_start`` would have raised for it. Nothing
        is written.
        """
