"""Backoff between attempts, and the switch that makes it instant in tests and notebooks.

Jittered exponential backoff spreads retries out so that many agents recovering from the
same outage do not hammer the dependency in lockstep. The jitter comes from a seeded
``random.Random`` so that a notebook's output is the same on every run. ``set_testing`` (as
in hynek/stamina) turns every delay into 0 without touching the retry logic it exercises.
"""

from __future__ import annotations

import random

_TESTING = False


def set_testing(testing: bool = True) -> None:
    """Make every backoff delay 0 (tests, notebooks, live demos)."""
    global _TESTING
    _TESTING = bool(testing)


def is_testing() -> bool:
    return _TESTING


class Backoff:
    """``delay(n)`` for the wait before retry ``n`` (1-based): base·2ⁿ⁻¹, capped, times a jitter
    factor drawn from [0.5, 1)."""

    def __init__(self, base: float = 0.1, cap: float = 2.0, seed: int | None = 0) -> None:
        if base < 0 or cap < 0:
            raise ValueError("base and cap must be >= 0")
        self.base = base
        self.cap = cap
        self._random = random.Random(seed)

    def delay(self, retry: int) -> float:
        jitter = 0.5 + self._random.random() / 2
        if _TESTING:
            return 0.0
        return min(self.cap, self.base * 2 ** (retry - 1)) * jitter
