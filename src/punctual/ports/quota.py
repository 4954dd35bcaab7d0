"""The QuotaController port: admission of new pending starts (QA-1..QA-3)."""

from __future__ import annotations

from typing import Protocol

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
