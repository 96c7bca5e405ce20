"""A count that many threads add to without a lock, for the hot path's bookkeeping.

Adding is one step that no other thread can split: ``next`` of an :func:`itertools.count`,
done in C. An ``itertools.count`` has no other way to be read than to take its next number,
so a read takes one, under a lock (only reads need it), and subtracts the reads taken so far.
The budget counts the units of an uncapped task this way, and the trace its records and each
tool's handler runs (docs/design.md#budget, docs/design.md#events).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

__all__ = ["Tally"]


class Tally:
    """``add()`` counts one; :attr:`value` is how many were added."""

    __slots__ = ("_lock", "_numbers", "_reads", "add")

    def __init__(self) -> None:
        self._numbers = itertools.count()
        self.add: Callable[[], int] = self._numbers.__next__  # its return value means nothing
        self._reads = 0
        self._lock = threading.Lock()

    @property
    def value(self) -> int:
        with self._lock:
            taken = next(self._numbers)
            reads = self._reads
            self._reads = reads + 1
        return taken - reads

    def __repr__(self) -> str:
        return f"Tally({self.value})"
