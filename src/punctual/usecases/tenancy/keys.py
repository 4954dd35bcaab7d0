"""The codec key lifecycle (RT-2): which processes hold which keys, the store's active key,
and moving stored values onto it.

Every assembled process *joins* (``join``): under the key lock it adopts the active key the
store records, refusing to start without it, and reports the key ids its ring holds. Its
heartbeat (``heartbeat``, every ``codec.refresh_seconds``) reports them again and follows
the store's active key, so an activation reaches every live process without a restart.
``activate`` records a key only while every live process holds it, under the same lock, so
a process joining at that moment is either counted or sees the new key. A process that
finds the active key missing from its ring anyway (it was silent during the activation)
stops sealing rather than seal with a key others may not hold. ``rewrap`` moves what is
still read onto the active key, and ``check_retirement`` lets a key go only when nothing
needs it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from punctual.domain.ids import new_id
from punctual.domain.timeutil import to_rfc3339
from punctual.errors import ConfigurationError, Conflict, InvalidRequest
from punctual.ports.codec import ActiveKeyNotHeld, InputKeyUnknown, InputUndecryptable
from punctual.ports.records import ProcessRecord, Resealed, SealedKind
from punctual.ports.store import Store
from punctual.usecases.kernel.context import Services

log = logging.getLogger("punctual.keys")

NEEDED_BY = {
    SealedKind.STARTS.value: "pending starts and occurrences",
    SealedKind.RUNS.value: "unfinished runs",
    SealedKind.SCHEDULES.value: "schedules",
    SealedKind.WEBHOOK_URLS.value: "webhook urls",
    SealedKind.WEBHOOK_SECRETS.value: "webhook secrets",
}
"""How a kind of sealed value reads in a sentence (``3 unfinished runs``)."""

MAX_REWRAP_BATCH = 10_000


def describe(process: ProcessRecord) -> str:
    """A process as an operator finds it: id, what it runs, where."""
    roles = ",".join(process.components) or "command"
    return f"{process.id} ({roles} on {process.host}, pid {process.pid})"


def process_view(process: ProcessRecord) -> dict[str, Any]:
    return {
        "id": process.id,
        "host": process.host,
        "pid": process.pid,
        "components": list(process.components),
        "key_ids": list(process.key_ids),
        "active_key_id": process.active_key_id,
        "started_at": to_rfc3339(process.started_at),
        "heartbeat_at": to_rfc3339(process.heartbeat_at) if process.heartbeat_at else None,
    }


def needed_by(counts: dict[str, int]) -> list[str]:
    return [f"{count} {NEEDED_BY.get(kind, kind)}" for kind, count in sorted(counts.items())]


# --- processes ---------------------------------------------------------------------------------


def new_process(host: str, pid: int, now: datetime) -> ProcessRecord:
    """This process's record before it joins (``join`` fills in its keys)."""
    return ProcessRecord(
        id=new_id("prc"),
        host=host,
        pid=pid,
        components=[],
        key_ids=[],
        active_key_id=None,
        started_at=now,
    )


def join(
    services: Services,
    process: ProcessRecord,
    configured_active: str | None,
    liveness_seconds: float,
) -> ProcessRecord:
    """Adopt the store's active key and report this process's keys, or refuse to start.

    With an active key recorded, a configured ``codec.active_key`` that differs is refused
    (naming both) and so is a ring without the key. Before the first activation, this
    process must seal with the key every live process seals with: otherwise one of them
    could write input another cannot read.
    """
    codec = services.codec
    now = services.clock.now()
    with services.store.transaction() as tx:
        tx.keys.lock()
        recorded = tx.keys.active_key_id()
        if recorded is not None:
            _adopt(services, recorded, configured_active)
        else:
            _agree(services, tx.keys.live_processes(liveness_seconds, now))
        tx.keys.prune_processes(liveness_seconds, now)
        joined = replace(
            process,
            key_ids=codec.key_ids(),
            active_key_id=codec.active_key_id,
            started_at=now,
        )
        tx.keys.heartbeat_process(joined, now)
    log.info(
        "event=process_joined process=%s active_key=%s keys=%s",
        joined.id,
        joined.active_key_id,
        ",".join(joined.key_ids),
    )
    return joined


def _adopt(services: Services, recorded: str, configured_active: str | None) -> None:
    codec = services.codec
    if configured_active is not None and configured_active != recorded:
        raise ConfigurationError(
            f"codec.active_key is {configured_active!r} but the store's active codec key is "
            f"{recorded!r} (recorded by 'punctual keys activate'); remove codec.active_key "
            f"or set it to {recorded!r}, or activate {configured_active!r} instead"
        )
    if recorded not in codec.key_ids():
        raise ConfigurationError(
            f"the store's active codec key {recorded!r} is not in this process's key ring "
            f"(it holds {', '.join(codec.key_ids())}); copy the key into codec.key_file, "
            f"e.g. 'punctual keys create --key-file FILE --id {recorded} --from OTHER_FILE' "
            "(see docs/operations.md, 'Keys')"
        )
    if codec.active_key_id != recorded:
        log.info("event=codec_key_adopted key=%s ring_active=%s", recorded, codec.active_key_id)
    codec.switch_active(recorded)


def _agree(services: Services, live: Iterable[ProcessRecord]) -> None:
    mine = services.codec.active_key_id
    for other in live:
        if other.active_key_id is not None and other.active_key_id != mine:
            raise ConfigurationError(
                f"live process {describe(other)} seals with codec key "
                f"{other.active_key_id!r} and this one would seal with {mine!r}; make one key "
                "active for every process with 'punctual keys activate --id KEY' (see "
                "docs/operations.md, 'Keys')"
            )


def heartbeat(services: Services, process: ProcessRecord) -> ProcessRecord:
    """Follow the store's active key and report this process's keys again."""
    codec = services.codec
    now = services.clock.now()
    with services.store.transaction() as tx:
        _follow(services, tx.keys.active_key_id(), process.id)
        current = replace(
            process,
            key_ids=codec.key_ids(),
            active_key_id=None if codec.missing_active_key else codec.active_key_id,
        )
        tx.keys.heartbeat_process(current, now)
    return current


def _follow(services: Services, recorded: str | None, process_id: str) -> None:
    codec = services.codec
    if recorded is None or recorded == codec.missing_active_key:
        return
    if recorded == codec.active_key_id and codec.missing_active_key is None:
        return
    previous = codec.active_key_id
    try:
        codec.switch_active(recorded)
    except ActiveKeyNotHeld:
        log.error(
            "event=codec_active_key_not_held process=%s key=%s note=this process seals "
            "nothing until the key is in its ring and it is restarted",
            process_id,
            recorded,
        )
        return
    log.info("event=codec_key_switched process=%s from=%s to=%s", process_id, previous, recorded)


def leave(services: Services, process_id: str) -> None:
    """Mark the process stopped: it no longer counts for activation."""
    with services.store.transaction() as tx:
        tx.keys.stop_process(process_id, services.clock.now())


# --- operator commands -------------------------------------------------------------------------


@dataclass(frozen=True)
class Activation:
    key_id: str
    previous: str | None
    live: list[ProcessRecord]


def activate(store: Store, key_id: str, liveness_seconds: float, now: datetime) -> Activation:
    """Record ``key_id`` as the active key, only while every live process holds it."""
    with store.transaction() as tx:
        tx.keys.lock()
        live = tx.keys.live_processes(liveness_seconds, now)
        lacking = [p for p in live if key_id not in p.key_ids]
        if lacking:
            raise Conflict(
                f"codec key {key_id!r} is not held by {len(lacking)} live process(es): "
                f"{'; '.join(describe(p) for p in lacking)}; add the key to their key files, "
                "restart them, and activate again",
                code="key_not_held",
                processes=[p.id for p in lacking],
            )
        previous = tx.keys.active_key_id()
        if previous != key_id:
            tx.keys.set_active_key_id(key_id, now)
    log.info(
        "event=codec_key_activated key=%s previous=%s live_processes=%d",
        key_id,
        previous,
        len(live),
    )
    return Activation(key_id, previous, live)


def key_check(
    store: Store, liveness_seconds: float, now: datetime, ring: Collection[str] | None = None
) -> dict[str, Any]:
    """Each key id known anywhere (the store, live processes, ``ring`` if given) with the
    stored values that still need it and the live processes that hold it."""
    with store.transaction(readonly=True) as tx:
        usage = tx.starts.key_usage()
        live = tx.keys.live_processes(liveness_seconds, now)
        active = tx.keys.active_key_id()
    known = set(usage) | {k for p in live for k in p.key_ids} | set(ring or ())
    if active is not None:
        known.add(active)
    keys = [
        {
            "key_id": key_id,
            "active": key_id == active,
            "in_key_file": None if ring is None else key_id in ring,
            "needed": sum(usage.get(key_id, {}).values()),
            "needed_by": dict(sorted(usage.get(key_id, {}).items())),
            "held_by": [p.id for p in live if key_id in p.key_ids],
            "sealing_with_it": [p.id for p in live if p.active_key_id == key_id],
        }
        for key_id in sorted(known)
    ]
    return {
        "active_key_id": active,
        "keys": keys,
        "processes": [process_view(p) for p in live],
    }


def check_retirement(
    store: Store, key_id: str, liveness_seconds: float, now: datetime
) -> str | None:
    """Refuse while ``key_id`` is the active key, a live process seals with it, or a stored
    value still needs it; otherwise the store's active key id (None before any)."""
    with store.transaction(readonly=True) as tx:
        active = tx.keys.active_key_id()
        usage = tx.starts.key_usage().get(key_id, {})
        sealing = [
            p for p in tx.keys.live_processes(liveness_seconds, now) if p.active_key_id == key_id
        ]
    if key_id == active:
        raise Conflict(
            f"codec key {key_id!r} is the active key; activate another key, rewrap, then "
            "retire this one",
            code="key_active",
        )
    if sealing:
        raise Conflict(
            f"codec key {key_id!r} is the key {len(sealing)} live process(es) seal with: "
            f"{'; '.join(describe(p) for p in sealing)}; activate another key first",
            code="in_use",
            processes=[p.id for p in sealing],
        )
    if usage:
        users = needed_by(usage)
        raise Conflict(
            f"codec key {key_id!r} is still needed by: {', '.join(users)}; run 'punctual "
            "keys rewrap' (pending work that is being dispatched moves on its next pass)",
            code="in_use",
            users=users,
        )
    return active


# --- rewrap ------------------------------------------------------------------------------------


@dataclass
class RewrapReport:
    """Per kind of sealed value: how many were moved to the active key, how many changed
    meanwhile (a concurrent edit or claim won; they are left as they are) and how many this
    ring cannot read; then what still needs another key."""

    active_key_id: str
    rewrapped: dict[str, int] = field(default_factory=dict)
    changed: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, int] = field(default_factory=dict)
    still_needed: dict[str, dict[str, int]] = field(default_factory=dict)

    def view(self) -> dict[str, Any]:
        return asdict(self)


def rewrap(services: Services, batch_size: int = 500) -> RewrapReport:
    """Seal again with the active key every value that may still be read and is sealed
    with another key, ``batch_size`` rows per short transaction.

    Each batch is read, resealed outside any transaction, and written back with a
    compare-and-set on the old ciphertext: a row edited, claimed or deleted meanwhile keeps
    what the concurrent change wrote. Versions, ``updated_at`` and claims never change.
    """
    if not 1 <= batch_size <= MAX_REWRAP_BATCH:
        raise InvalidRequest(f"--batch must be between 1 and {MAX_REWRAP_BATCH}")
    store, codec = services.store, services.codec
    with store.transaction(readonly=True) as tx:
        recorded = tx.keys.active_key_id()
    if recorded is None:
        raise Conflict(
            "no active codec key is recorded in the store; record one with 'punctual keys "
            "activate --id KEY' first",
            code="no_active_key",
        )
    _follow(services, recorded, "rewrap")
    if codec.missing_active_key is not None:
        raise ConfigurationError(
            f"the active codec key {recorded!r} is not in this key ring; rewrap with a ring "
            "that holds it"
        )
    report = RewrapReport(recorded)
    for kind in SealedKind:
        _rewrap_kind(services, kind, batch_size, report)
    with store.transaction(readonly=True) as tx:
        usage = tx.starts.key_usage()
    report.still_needed = {
        key_id: counts for key_id, counts in sorted(usage.items()) if key_id != recorded
    }
    log.info(
        "event=codec_rewrap_done key=%s rewrapped=%d changed=%d unreadable=%d",
        recorded,
        sum(report.rewrapped.values()),
        sum(report.changed.values()),
        sum(report.unreadable.values()),
    )
    return report


def _rewrap_kind(
    services: Services, kind: SealedKind, batch_size: int, report: RewrapReport
) -> None:
    store, codec = services.store, services.codec
    after = 0
    while True:
        active = codec.active_key_id  # a later activation meanwhile is followed, not undone
        with store.transaction(readonly=True) as tx:
            batch = tx.keys.sealed(kind, active, after, batch_size)
        if not batch:
            return
        after = batch[-1].seq
        resealed: list[Resealed] = []
        for value in batch:
            try:
                resealed.append(
                    Resealed(value.id, value.sealed, codec.reseal(value.sealed, value.tenant))
                )
            except (InputKeyUnknown, InputUndecryptable):
                report.unreadable[kind.value] = report.unreadable.get(kind.value, 0) + 1
        with store.transaction() as tx:
            replaced = tx.keys.reseal(kind, resealed)
        if replaced:
            report.rewrapped[kind.value] = report.rewrapped.get(kind.value, 0) + len(replaced)
        if len(resealed) > len(replaced):
            lost = len(resealed) - len(replaced)
            report.changed[kind.value] = report.changed.get(kind.value, 0) + lost
        if len(batch) < batch_size:
            return
