"""Retry spacing for starts whose dispatch failed for a cause specific to them (DP-3)."""

from __future__ import annotations

import random
from datetime import timedelta

FIRST_DELAY = timedelta(seconds=5)
MAX_DELAY = timedelta(minutes=5)
MAX_ATTEMPTS = 12


def next_delay(attempt: int, rng: random.Random) -> timedelta:
    """Exponential from 5 s, capped at 5 min, with "equal jitter" so retries spread out.

    ``attempt`` is the number of the attempt that just failed (1 for the first). The
    delay lies in [base/2, base], so it never drops below half the nominal spacing.
    """
    if attempt < 1:
        raise ValueError("attempt numbers start at 1")
    base = min(FIRST_DELAY * (2 ** (attempt - 1)), MAX_DELAY)
    half: timedelta = base / 2
    return half + half * rng.random()


def exhausted(attempts: int) -> bool:
    """After this many failed attempts a start becomes terminal ``failed``."""
    return attempts >= MAX_ATTEMPTS
