"""Backoff between attempts, and the switch that makes it instant in tests and notebooks.

Jittered exponential backoff spreads retries out so that many agents recovering from the
same outage do not hammer the dependency in lockstep. The jitter comes from a seeded
``random.Random`` so that a notebook's output is the same on every run. ``set_testing`` (as
in hynek/stamina) turns every delay into 0 without touching the retry logic it exercises.
"""

from __future__ import annotations

import random
from types import TracebackType
from typing import final

_TESTING = False


@final
class TestingMode:
    """What :func:`set_testing` returns: the switch is already set; leaving a ``with`` block
    puts back the state it had before the call (also when the block raises)."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, testing: bool, previous: bool) -> None:
        self.testing = testing
        self.previous = previous

    def __enter__(self) -> TestingMode:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        global _TESTING
        _TESTING = self.previous

    def __repr__(self) -> str:
        return f"TestingMode(testing={self.testing}, previous={self.previous})"


def set_testing(testing: bool = True) -> TestingMode:
    """Make every backoff delay 0 (tests, notebooks, live demos), at once.

    A plain call sets the switch for good; ``with set_testing(True): ...`` sets it for the
    block and restores the previous state when the block ends, as in hynek/stamina.
    """
    global _TESTING
    previous = _TESTING
    _TESTING = bool(testing)
    return TestingMode(_TESTING, previous)


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
        return min(self.cap, self.base * 2.0 ** (retry - 1)) * jitter


def no_wait(seconds: float) -> None:
    """A ``sleep`` that returns at once: give it to a ``ToolRunner`` (``sleep=no_wait``) whose
    retries should test policy, not patience (the failure matrix, the exercises' checks)."""
