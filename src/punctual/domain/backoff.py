"""Retry spacing for starts whose dispatch failed for a cause specific to them (DP-3)."""

from __future__ import annotations

import random
from datetime import timedelta

FIRST_DELAY = timedelta(seconds=5)
MAX_DELAY = timedelta(minutes=5)
MAX_ATTEMPTS = 12


def next_delay(attempt: int, rng: random.Random) -> timedelta:
    """Exponential from 5 s to 5 min, jittered so that retries of many starts spread out.

    ``attempt`` is the number of the attempt that just failed (1 for the first). The
    nominal delay doubles from 5 s and is capped at 5 min; the delay is drawn between half
    of it (never below 5 s) and all of it, so every delay lies within [5 s, 5 min].
    """
    if attempt < 1:
        raise ValueError("attempt numbers start at 1")
    nominal = min(FIRST_DELAY * (2 ** (attempt - 1)), MAX_DELAY)
    lowest = max(FIRST_DELAY, nominal / 2)
    spread: timedelta = nominal - lowest
    delay: timedelta = lowest + spread * rng.random()
    return delay


def exhausted(attempts: int) -> bool:
    """After this many failed attempts a start becomes terminal ``failed``."""
    return attempts >= MAX_ATTEMPTS
