"""Mutations in two steps (a saga, CR-6) under one idempotency key, on both stores.

The first step commits with the key still in flight; ``then`` runs outside any
transaction and answers the step that decides the key. A failure between the steps
releases the key, and what the first step stored stays for the retry to find.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import pytest

from punctual import bootstrap
from punctual.errors import Unavailable
from punctual.ports.store import Tx
from punctual.usecases.kernel.idempotency import (
    IdempotentRequest,
    Mutation,
    Outcome,
    request_token,
)


def request(key: str) -> IdempotentRequest:
    return IdempotentRequest("acme", "alice", key, "fingerprint")


def key_state(system: bootstrap.Punctual, key: str) -> str | None:
    with system.services.store.transaction(readonly=True) as tx:
        record = tx.idempotency.get("acme", "alice", key)
    return None if record is None else record.state


def test_the_key_is_decided_by_the_last_step_only(system: bootstrap.Punctual) -> None:
    seen: dict[str, Any] = {}
    between = threading.Event()

    def second(tx: Tx, now: datetime) -> Outcome:
        seen["second_token"] = request_token()
        return Outcome(201, {"step": 2}, resource_id="r1")

    def then() -> Mutation:
        seen["key_between"] = key_state(system, "k-saga")
        seen["token_between"] = request_token()
        between.set()
        return second

    def first(tx: Tx, now: datetime) -> Outcome:
        seen["first_token"] = request_token()
        return Outcome(201, None, resource_id="r1", then=then)

    outcome = system.mutations.run(request("k-saga"), first)
    assert (outcome.status, outcome.body) == (201, {"step": 2})
    assert between.is_set()
    assert seen["key_between"] == "in_flight"
    assert seen["token_between"] is None  # outside any step, no request is being served
    assert seen["first_token"] == seen["second_token"] is not None
    assert key_state(system, "k-saga") == "done"
    replay = system.mutations.run(request("k-saga"), first)
    assert (replay.status, replay.body, replay.replayed) == (201, {"step": 2}, True)


def test_a_failure_between_the_steps_releases_the_key(system: bootstrap.Punctual) -> None:
    def then() -> Mutation:
        raise Unavailable("the other system did not answer")

    def first(tx: Tx, now: datetime) -> Outcome:
        return Outcome(201, None, then=then)

    with pytest.raises(Unavailable):
        system.mutations.run(request("k-fails"), first)
    assert key_state(system, "k-fails") is None  # a retry runs it again

    def again(tx: Tx, now: datetime) -> Outcome:
        return Outcome(200, {"ran": "again"})

    assert system.mutations.run(request("k-fails"), again).body == {"ran": "again"}


def test_different_requests_have_different_tokens(system: bootstrap.Punctual) -> None:
    tokens: list[str | None] = []

    def capture(tx: Tx, now: datetime) -> Outcome:
        tokens.append(request_token())
        return Outcome(200, {})

    system.mutations.run(request("k-one"), capture)
    system.mutations.run(request("k-two"), capture)
    system.mutations.run(IdempotentRequest("acme", "alice", "k-three", "other"), capture)
    system.mutations.run(None, capture)
    assert len(set(tokens[:3])) == 3 and tokens[3] is None
