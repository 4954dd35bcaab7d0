"""One idempotency mechanism for every mutation (OS-4, OS-5, OS-7).

A key belongs to (tenant, principal, key). The first request with a key records it
*in flight* in its own short transaction, so concurrent requests with the same key see
it; the mutation then runs in a second transaction that also records the decided
outcome, so an accepted mutation and its recorded answer commit together or not at all.

Only decided outcomes are recorded (2xx except 202, and deterministic 4xx); anything
else releases the key so that a retry can still succeed. A mutation that lost a race to a
concurrent write (``RaceLost``) runs again and decides on what won; that answer is never
recorded. The mutation runs on a
background thread: if it is not decided within the bounded API wait the caller gets
``202 in_progress`` while it carries on, and a retry with the same key returns its
outcome once it is decided.

Every mutation that takes effect for a request the edge names (``usecases.audit.serving``)
also writes its audit entry (CR-8), in the mutation's own transaction: the entry commits
with it or not at all. A refusal changes nothing and writes none (SEC-4), nor does a replay;
a batch create writes one for the whole request.

A mutation may be a saga of two steps (a schedule's create under a firing driver, CR-6):
its first transaction commits what it stored with the key still in flight, its ``then``
runs outside any transaction (a call to another system) and answers the mutation that
decides the outcome in a second transaction, where the key is completed and the audit
entry written. A failure between the steps leaves the key in flight: a retry with it
finds the saga's record through ``request_token`` and resumes it.

Creates (one, or a batch of up to 500, OS-11) take a cheaper path, ``run_batch``: keys,
mutation and outcomes in *one* transaction. A concurrent request with the same key then
waits on the uncommitted key row (PostgreSQL) or on the write lock (SQLite) instead of
polling a committed in-flight row, and a process that dies mid-request leaves nothing
behind to take over. Replay, the bounded wait and the check order are the same.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Any

from punctual.errors import Conflict, PunctualError, RaceLost, Unavailable
from punctual.ports.records import KeyOutcome
from punctual.ports.store import Tx
from punctual.usecases.kernel.audit import AuditedRequest, being_served
from punctual.usecases.kernel.context import Services

IN_PROGRESS_BODY = {"status": "in_progress"}
_POLL_SECONDS = 0.02
_RACE_RUNS = 3
"""How often a mutation that keeps losing races runs before its caller hears the conflict
(unrecorded: a retry with the key runs it again)."""
_serving: ContextVar[str | None] = ContextVar("punctual_idempotent_request", default=None)


def request_token() -> str | None:
    """The digest of the keyed request the running mutation serves (tenant, principal, key
    and body), or None: what a saga's record carries so that only a retry of the very same
    request resumes it."""
    return _serving.get()


def _token_of(request: IdempotentRequest) -> str:
    text = "\x1f".join((request.tenant, request.principal, request.key, request.fingerprint))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class IdempotentRequest:
    tenant: str
    principal: str
    key: str
    fingerprint: str


class Answer(IntEnum):
    """What a mutation did, named by the use case that decided it; the number is what the
    runner records under the request's key and the HTTP edge answers."""

    DONE = 200
    """Changed (or, for an upsert, found unchanged); the body is the resource."""
    CREATED = 201
    """The body is the new resource."""
    ACCEPTED = 202
    """Taken on but not finished: in progress, or queued (a webhook test)."""
    REMOVED = 204
    """Deleted, revoked or removed; no body."""


@dataclass(frozen=True)
class Outcome:
    status: int
    """An ``Answer`` when a use case decides; a replay carries the recorded number."""
    body: Any
    resource_id: str | None = None
    replayed: bool = False
    recorded_body: Any = None
    """What a replay answers instead of ``body`` (a token's secret is shown only once)."""
    after_commit: Callable[[], None] | None = None
    """Runs once the mutation committed, on a thread of its own: the answer never waits
    for it and its failure changes nothing recorded (an engine call that follows the
    store change, FT-6; whatever it misses is retried by the runner)."""
    then: Callable[[], Mutation] | None = None
    """A saga's next step: called once this step committed, outside any transaction, it
    answers the mutation that decides the outcome (the key stays in flight until then)."""


Mutation = Callable[[Tx, datetime], Outcome]


class RecordedError(Exception):
    """A deterministic error outcome, replayed exactly as it was first answered."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"recorded error {status}")
        self.status = status
        self.body = body


@dataclass(frozen=True)
class ItemResult:
    """One request's answer from ``run_batch``: status and body as the client gets them."""

    status: int
    body: Any
    error: PunctualError | None = None
    """The error behind a fresh (not replayed) error answer."""


BatchMutation = Callable[[Tx, datetime, Sequence[int]], Mapping[int, "Outcome | PunctualError"]]
"""Decides the requests at the given indexes (those whose keys this transaction claimed),
in one transaction: per index an outcome, or the error it was refused with."""
ErrorStatus = Callable[[PunctualError], int]
ErrorBody = Callable[[PunctualError], Any]


def is_decided(status: int) -> bool:
    """Outcomes a retry must get back verbatim; 202, 429, 503 and 5xx stay retryable."""
    return 200 <= status < 500 and status not in (202, 429)


def _audit(tx: Tx, audited: AuditedRequest | None, outcome: Outcome, now: datetime) -> None:
    """The entry of a mutation that took effect: a 2xx other than ``in_progress`` (a
    ``202`` that queued something, a webhook test, did change the store)."""
    if audited is not None and 200 <= outcome.status < 300 and outcome.body != IN_PROGRESS_BODY:
        tx.audit.record([audited.entry(outcome.status, outcome.resource_id)], now)


@dataclass(frozen=True)
class _Served:
    """Whom a mutation runs for: the key it is recorded under and the owner of its claim
    (None and "" without a key), and the audit entry its decision writes."""

    request: IdempotentRequest | None
    owner: str
    audited: AuditedRequest | None


class MutationRunner:
    """Runs mutations under idempotency keys with a bounded wait."""

    def __init__(
        self,
        services: Services,
        error_status: ErrorStatus,
        error_body: ErrorBody,
        *,
        threads: int = 16,
    ) -> None:
        self._services = services
        self._error_status = error_status
        self._error_body = error_body
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mutation")
        self._followers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="after-commit")

    @property
    def _wait(self) -> float:
        return self._services.policy.api_wait_seconds

    @property
    def key_lease(self) -> timedelta:
        """How long a key in flight is held before a retry may take it over."""
        return self._lease

    @property
    def one_trip_lock_wait(self) -> float:
        """How long a create in one round trip waits for a lock (a concurrent request with
        its key, the tenant's quota lock) before the transaction path takes over: half the
        bounded wait, the other half being that path's."""
        return self._wait / 2

    @property
    def _lease(self) -> timedelta:
        # Long enough that a mutation stuck behind a lock gives up before its key can
        # be adopted by a retry: the lock wait below is bounded by this minus a margin.
        return timedelta(seconds=max(30.0, 6 * self._wait))

    def run(self, request: IdempotentRequest | None, mutation: Mutation) -> Outcome:
        """Execute or replay; raises ``RecordedError`` to replay a recorded error.

        Claiming the key and running the mutation both happen on a background thread:
        either may wait on a lock (SQLite serializes writers), and the caller's wait is
        bounded either way.
        """
        audited = being_served()
        if request is None:
            return self._execute(_Served(None, "", audited), mutation)
        deadline = time.monotonic() + self._wait
        future = self._pool.submit(self._claim_then_execute, request, mutation, deadline, audited)
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            return Outcome(Answer.ACCEPTED, IN_PROGRESS_BODY)

    def run_batch(
        self,
        tenant: str,
        principal: str,
        requests: Sequence[tuple[str, str]],
        mutation: BatchMutation,
        *,
        first: Callable[[], ItemResult | None] | None = None,
    ) -> list[ItemResult]:
        """Replay or decide each ``(key, fingerprint)`` request in one transaction.

        ``first``, for a single request: a quicker way to decide it (a create in one round
        trip), tried before the transaction on the same thread and under the same bounded
        wait; None from it leaves the request to the transaction.

        Each request behaves as ``run`` would run it alone: a recorded outcome is
        replayed, a different fingerprint is ``409 idempotency_key_reused``, a key whose
        first request is still in flight is waited for, and whatever is not decided within
        the bounded wait answers ``202 in_progress`` (it carries on, and commits, or not,
        with the rest). Decided outcomes are recorded in the same transaction.
        """
        deadline = time.monotonic() + self._wait
        audited = being_served()

        def decide() -> list[ItemResult]:
            if first is not None:
                answer = first()
                if answer is not None:
                    return [answer]
            return self._decide_batch(tenant, principal, requests, mutation, deadline, audited)

        future = self._pool.submit(decide)
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            return [ItemResult(202, IN_PROGRESS_BODY) for _ in requests]

    def _decide_batch(
        self,
        tenant: str,
        principal: str,
        requests: Sequence[tuple[str, str]],
        mutation: BatchMutation,
        deadline: float,
        audited: AuditedRequest | None,
    ) -> list[ItemResult]:
        owner = secrets.token_hex(8)
        lock_wait = self._lease.total_seconds() - max(5.0, self._wait)
        while True:
            try:
                with self._services.store.transaction(lock_timeout=lock_wait) as tx:
                    results = self._batch_in(
                        tx, tenant, principal, requests, mutation, owner, deadline, audited
                    )
            except _WaitForKeys:
                time.sleep(_POLL_SECONDS)
                continue
            self._services.on_due_change()
            return results

    def _batch_in(
        self,
        tx: Tx,
        tenant: str,
        principal: str,
        requests: Sequence[tuple[str, str]],
        mutation: BatchMutation,
        owner: str,
        deadline: float,
        audited: AuditedRequest | None,
    ) -> list[ItemResult]:
        now = self._services.clock.now()
        keys = tx.idempotency
        lease_until = now + self._lease
        claimed = keys.claim_many(tenant, principal, requests, owner, lease_until, now)
        results: list[ItemResult | None] = [None] * len(requests)
        fresh = [i for i, (key, _) in enumerate(requests) if key in claimed]
        taken = [i for i, (key, _) in enumerate(requests) if key not in claimed]
        records = keys.get_many(tenant, principal, [requests[i][0] for i in taken])
        waiting: list[int] = []
        for index in taken:
            key, fingerprint = requests[index]
            record = records.get(key)
            if record is None:  # released between our insert and read: look again
                waiting.append(index)
            elif record.fingerprint != fingerprint:
                refusal = _reused(key)
                results[index] = ItemResult(
                    self._error_status(refusal), self._error_body(refusal), refusal
                )
            elif record.state == "done":
                assert record.status_code is not None
                results[index] = ItemResult(record.status_code, record.response)
            elif record.lease_until < now and keys.take_over(
                tenant, principal, key, owner, lease_until, now
            ):
                fresh.append(index)
            else:  # in flight in a request that committed its claim (``run``)
                waiting.append(index)
        # Wait for keys in flight elsewhere for half the bounded wait at most: the other
        # half is the rest of the batch's, to be decided (a loaded store can take a while).
        if waiting and time.monotonic() < deadline - self._wait / 2:
            raise _WaitForKeys  # roll back and look again
        for index in waiting:
            results[index] = ItemResult(202, IN_PROGRESS_BODY)
        fresh.sort()
        decided = mutation(tx, now, fresh) if fresh else {}
        recorded: list[KeyOutcome] = []
        released: list[str] = []
        took_effect: list[KeyOutcome] = []
        for index in fresh:
            key = requests[index][0]
            answer = decided[index]
            if isinstance(answer, PunctualError):
                status, body = self._error_status(answer), self._error_body(answer)
                results[index] = ItemResult(status, body, answer)
                resource_id = None
            else:
                assert answer.then is None, "a saga's steps need run(), not one transaction"
                status, body = answer.status, answer.body
                results[index] = ItemResult(status, body)
                resource_id = answer.resource_id
                if answer.recorded_body is not None:
                    body = answer.recorded_body
            if is_decided(status):
                recorded.append(KeyOutcome(key, status, body, resource_id))
                if 200 <= status < 300:
                    took_effect.append(recorded[-1])
            else:
                released.append(key)
        if recorded:
            done = keys.complete_many(tenant, principal, owner, recorded, now)
            assert done == {o.key for o in recorded}, "keys claimed in this transaction"
            if audited is not None and took_effect:
                # One entry per request: a single create names what it created, a batch
                # answers its fixed status (``AuditedRequest.status``) for all its items.
                single = took_effect[0].resource_id if len(requests) == 1 else None
                tx.audit.record([audited.entry(took_effect[0].status_code, single)], now)
        keys.release_many(tenant, principal, released, owner)
        return [r if r is not None else ItemResult(202, IN_PROGRESS_BODY) for r in results]

    def _claim_then_execute(
        self,
        request: IdempotentRequest,
        mutation: Mutation,
        deadline: float,
        audited: AuditedRequest | None,
    ) -> Outcome:
        owner = secrets.token_hex(8)
        while True:
            claimed, outcome = self._claim_or_replay(request, owner)
            if outcome is not None:
                return outcome
            if claimed:
                return self._execute(_Served(request, owner, audited), mutation)
            if time.monotonic() >= deadline:
                return Outcome(Answer.ACCEPTED, IN_PROGRESS_BODY)
            time.sleep(_POLL_SECONDS)

    def _claim_or_replay(
        self, request: IdempotentRequest, owner: str
    ) -> tuple[bool, Outcome | None]:
        services = self._services
        now = services.clock.now()
        with services.store.transaction() as tx:
            keys = tx.idempotency
            args = (request.tenant, request.principal, request.key)
            if keys.try_claim(*args, request.fingerprint, owner, now + self._lease, now):
                return True, None
            record = keys.get(*args)
            if record is None:  # released between our insert and read: try again
                return False, None
            if record.fingerprint != request.fingerprint:
                raise _reused(request.key)
            if record.state == "done":
                assert record.status_code is not None
                if record.status_code >= 400:
                    raise RecordedError(record.status_code, record.response)
                return False, Outcome(record.status_code, record.response, replayed=True)
            if record.lease_until < now and keys.take_over(*args, owner, now + self._lease, now):
                return True, None
            return False, None

    def _execute(self, served: _Served, mutation: Mutation) -> Outcome:
        request, owner = served.request, served.owner
        try:
            outcome = self._replanned_step(served, mutation)
            while outcome.then is not None:
                outcome = self._step(served, outcome.then())
        except RaceLost:
            if request is not None:
                self._release(request, owner)
            raise
        except PunctualError as exc:
            status = self._error_status(exc)
            if request is not None:
                self._record_error(request, owner, exc, status)
            raise
        except BaseException:
            if request is not None:
                self._release(request, owner)
            raise
        self._services.on_due_change()
        if outcome.after_commit is not None:
            self._followers.submit(outcome.after_commit)
        return outcome

    def _replanned_step(self, served: _Served, mutation: Mutation) -> Outcome:
        """The mutation's first step, run again while it loses a race (``RaceLost``: a
        concurrent write won after this one's checks had passed). Its transaction rolled
        back, so the next run decides on what won, as a request sent after it would: a
        ``PUT`` of a name another ``PUT`` just created answers as an update or unchanged."""
        for _ in range(_RACE_RUNS - 1):
            try:
                return self._step(served, mutation)
            except RaceLost:
                continue
        return self._step(served, mutation)

    def _step(self, served: _Served, mutation: Mutation) -> Outcome:
        """One transaction of a mutation; the last step of a saga decides the key."""
        services, request = self._services, served.request
        lock_wait = self._lease.total_seconds() - max(5.0, self._wait)
        serving = _serving.set(_token_of(request) if request is not None else None)
        try:
            with services.store.transaction(lock_timeout=lock_wait) as tx:
                now = services.clock.now()
                outcome = mutation(tx, now)
                if outcome.then is None:
                    if request is not None:
                        self._finish(tx, request, served.owner, outcome, now)
                    _audit(tx, served.audited, outcome, now)
        finally:
            _serving.reset(serving)
        return outcome

    def _finish(
        self, tx: Tx, request: IdempotentRequest, owner: str, outcome: Outcome, now: datetime
    ) -> None:
        args = (request.tenant, request.principal, request.key)
        if is_decided(outcome.status):
            body = outcome.body if outcome.recorded_body is None else outcome.recorded_body
            recorded = tx.idempotency.complete(
                *args, owner, outcome.status, body, outcome.resource_id, now
            )
            if not recorded:
                raise Unavailable(
                    f"idempotency key {request.key!r} was taken over while this request ran; "
                    "retry the same request to learn its outcome",
                    code="in_progress",
                )
        else:
            tx.idempotency.release(*args, owner)

    def _record_error(
        self, request: IdempotentRequest, owner: str, exc: PunctualError, status: int
    ) -> None:
        args = (request.tenant, request.principal, request.key)
        try:
            with self._services.store.transaction() as tx:
                if is_decided(status):
                    now = self._services.clock.now()
                    body = self._error_body(exc)
                    tx.idempotency.complete(*args, owner, status, body, None, now)
                else:
                    tx.idempotency.release(*args, owner)
        except Unavailable:
            pass  # the in-flight key expires with its lease; a retry takes it over

    def _release(self, request: IdempotentRequest, owner: str) -> None:
        try:
            with self._services.store.transaction() as tx:
                tx.idempotency.release(request.tenant, request.principal, request.key, owner)
        except Unavailable:
            pass  # the lease runs out and a retry adopts the key

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)
        self._followers.shutdown(wait=True, cancel_futures=True)  # the runner re-sends


class _WaitForKeys(Exception):
    """Some keys are held by requests still in flight: roll back, wait, look again."""


def _reused(key: str) -> Conflict:
    return Conflict(
        f"idempotency key {key!r} was already used for a different request; "
        "use a new key for a new request",
        code="idempotency_key_reused",
    )
