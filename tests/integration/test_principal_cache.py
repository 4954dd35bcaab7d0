"""Tokens checked once per ``auth_cache_seconds`` per process (SPEC OP-5, a create without a
transaction for its token): a revoked token, a removed member or a new role takes effect on
every process within the bound, and at once on the process that made the change.

Two assembled systems on one database stand for two processes; the second one's memory
runs on a clock the test moves, so "within the bound" is checked at its edge, not raced.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from punctual import bootstrap
from punctual.domain.permissions import Principal, Role
from punctual.errors import Unauthenticated
from punctual.usecases.kernel.principals import PrincipalCache
from punctual.usecases.tenancy import identity
from tests.conftest import make_settings

BOUND = 2.0
ROOT = Principal("acme", "root", Role.ADMIN)


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def processes(
    database_url: str, tmp_path: Path
) -> Iterator[tuple[bootstrap.Punctual, bootstrap.Punctual, Ticks]]:
    settings = make_settings(database_url, tmp_path, auth_cache_seconds=BOUND)
    one = bootstrap.build(settings)
    other = bootstrap.build(settings)
    ticks = Ticks()
    other.services.principals = PrincipalCache(BOUND, monotonic=ticks)
    identity.ensure_member_token(one.services, ROOT.tenant, ROOT.subject, ROOT.role)
    try:
        yield one, other, ticks
    finally:
        other.close()
        one.close()


def test_a_revoked_token_is_refused_at_once_here_and_within_the_bound_elsewhere(
    processes: tuple[bootstrap.Punctual, bootstrap.Punctual, Ticks],
) -> None:
    one, other, ticks = processes
    issued = identity.ensure_member_token(one.services, "acme", "alice", Role.MEMBER)
    alice = Principal("acme", "alice", Role.MEMBER)
    assert identity.authenticate(one.services, issued.token) == alice
    assert identity.authenticate(other.services, issued.token) == alice
    one.mutations.run(None, identity.revoke_token(one.services, ROOT, issued.id))

    with pytest.raises(Unauthenticated):
        identity.authenticate(one.services, issued.token)
    ticks.now = BOUND - 0.001
    assert identity.authenticate(other.services, issued.token) == alice  # still trusted
    ticks.now = BOUND
    with pytest.raises(Unauthenticated):
        identity.authenticate(other.services, issued.token)


def test_a_new_role_and_a_removal_are_seen_within_the_bound_elsewhere(
    processes: tuple[bootstrap.Punctual, bootstrap.Punctual, Ticks],
) -> None:
    one, other, ticks = processes
    issued = identity.ensure_member_token(one.services, "acme", "bob", Role.ADMIN)
    assert identity.authenticate(other.services, issued.token).role is Role.ADMIN

    one.mutations.run(None, identity.add_member(one.services, ROOT, "bob", "viewer"))
    assert identity.authenticate(one.services, issued.token).role is Role.VIEWER
    ticks.now = BOUND - 0.001
    assert identity.authenticate(other.services, issued.token).role is Role.ADMIN
    ticks.now = BOUND
    assert identity.authenticate(other.services, issued.token).role is Role.VIEWER

    one.mutations.run(None, identity.remove_member(one.services, ROOT, "bob"))
    with pytest.raises(Unauthenticated):
        identity.authenticate(one.services, issued.token)
    ticks.now = 2 * BOUND
    with pytest.raises(Unauthenticated):
        identity.authenticate(other.services, issued.token)


def test_an_unknown_token_is_never_remembered(
    processes: tuple[bootstrap.Punctual, bootstrap.Punctual, Ticks],
) -> None:
    """A token issued on one process works on the other at its first request, even right
    after the other refused it."""
    one, other, _ = processes
    chosen = "pn_" + "x" * 40
    with pytest.raises(Unauthenticated):
        identity.authenticate(other.services, chosen)
    identity.ensure_member_token(one.services, "acme", "carol", Role.MEMBER, token=chosen)
    assert identity.authenticate(other.services, chosen) == Principal("acme", "carol", Role.MEMBER)
