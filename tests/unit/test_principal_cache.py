"""The per-process memory of checked tokens (``auth_cache_seconds``): what it remembers,
for how long, and what it never does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from punctual.domain.permissions import Principal, Role
from punctual.ports.records import LiveToken
from punctual.usecases.kernel.principals import PrincipalCache

ALICE = Principal("acme", "alice", Role.MEMBER)
BOB = Principal("acme", "bob", Role.VIEWER)
NOW = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)


def live(principal: Principal, expires_at: datetime | None = None) -> LiveToken:
    return LiveToken(principal, expires_at)


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_principal_is_recalled_until_the_bound_and_not_at_it() -> None:
    ticks = Ticks()
    cache = PrincipalCache(2.0, monotonic=ticks)
    cache.remember("d1", live(ALICE))
    ticks.now += 1.999
    assert cache.recall("d1", NOW) == ALICE
    ticks.now += 0.001
    assert cache.recall("d1", NOW) is None
    assert cache.recall("d1", NOW) is None  # forgotten, not only hidden


def test_a_check_again_starts_a_new_bound() -> None:
    ticks = Ticks()
    cache = PrincipalCache(2.0, monotonic=ticks)
    cache.remember("d1", live(ALICE))
    ticks.now += 1.5
    cache.remember("d1", live(BOB))  # the store now says bob (a role change, say)
    ticks.now += 1.5
    assert cache.recall("d1", NOW) == BOB


def test_nothing_is_remembered_with_a_bound_of_zero() -> None:
    cache = PrincipalCache(0.0, monotonic=Ticks())
    cache.remember("d1", live(ALICE))
    assert cache.recall("d1", NOW) is None


def test_forget_all_empties_it() -> None:
    cache = PrincipalCache(2.0, monotonic=Ticks())
    cache.remember("d1", live(ALICE))
    cache.remember("d2", live(BOB))
    cache.forget_all()
    assert cache.recall("d1", NOW) is None
    assert cache.recall("d2", NOW) is None


def test_the_least_recently_checked_token_goes_first_when_it_is_full() -> None:
    cache = PrincipalCache(2.0, monotonic=Ticks(), capacity=2)
    cache.remember("d1", live(ALICE))
    cache.remember("d2", live(BOB))
    assert cache.recall("d1", NOW) == ALICE  # d1 is now the most recent
    cache.remember("d3", live(ALICE))
    assert cache.recall("d2", NOW) is None
    assert cache.recall("d1", NOW) == ALICE
    assert cache.recall("d3", NOW) == ALICE


def test_a_token_is_never_recalled_at_or_past_its_expiry() -> None:
    """The bound is a ceiling: an expiring token dies at its instant, as the store says."""
    cache = PrincipalCache(2.0, monotonic=Ticks())
    cache.remember("d1", live(ALICE, expires_at=NOW + timedelta(seconds=1)))
    assert cache.recall("d1", NOW + timedelta(milliseconds=999)) == ALICE
    assert cache.recall("d1", NOW + timedelta(seconds=1)) is None
