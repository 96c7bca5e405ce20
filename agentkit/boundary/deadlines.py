"""The loop's shared deadlines: the async waits for sync handlers on one event loop, behind one timer.

``loop.call_later`` for every wait builds a ``TimerHandle``, pushes it on the loop's heap
(whose comparisons run Python code) and leaves it there cancelled until swept: a good part
of what an async hop costs beyond the hop itself. Here a wait is a tuple on a heap of its
own (compared in C) and one loop timer is armed at the earliest deadline still awaited.
A wait that ends in time is not looked for: it is dropped when it reaches the top, or
when the heap is compacted (every time it doubles). When the timer fires, every wait
whose deadline has come is settled (its caller then finds the attempt not done: a
timeout), exactly as its own timer would have done.

One :class:`Deadlines` per thread, for the loop that thread last waited on (a thread runs
one loop at a time; :func:`deadlines_of`); a thread that alternates loops makes a new one,
and the old one's pending timer still serves the waits it holds.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

__all__ = ["Deadlines", "deadlines_of"]

#: The heap of :class:`Deadlines` is compacted when it reaches this size (then at twice the
#: waits still pending).
COMPACT_MIN = 256
#: A loop runs a timer this much before its time (asyncio's ``_clock_resolution``).
CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution


class Deadlines:
    """The deadlines of the async waits for sync handlers on one event loop (see the module
    docstring): settle each waiter at its deadline unless it is done by then."""

    __slots__ = ("_armed_at", "_compact_at", "_heap", "_order", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._armed_at = math.inf  # when the pending timer fires (inf: none pending)
        self._compact_at = COMPACT_MIN

    def add(self, delay: float, waiter: asyncio.Future[None]) -> None:
        """Settle ``waiter`` ``delay`` seconds from now, unless it is done by then."""
        when = self.loop.time() + delay
        heap = self._heap
        heapq.heappush(heap, (when, next(self._order), waiter))
        if when < self._armed_at:
            self._arm(when)
        if len(heap) >= self._compact_at:
            heap[:] = [entry for entry in heap if not entry[2].done()]
            heapq.heapify(heap)
            self._compact_at = max(COMPACT_MIN, 2 * len(heap))

    def _arm(self, when: float) -> None:
        self._armed_at = when
        self.loop.call_at(when, self._fire, when)

    def _fire(self, when: float) -> None:
        if when != self._armed_at:
            return  # an earlier deadline re-armed the timer since: that one serves now
        self._armed_at = math.inf
        now = self.loop.time() + CLOCK_RESOLUTION
        heap = self._heap
        while heap:
            deadline, _, waiter = heap[0]
            if waiter.done():
                heapq.heappop(heap)
            elif deadline <= now:
                heapq.heappop(heap)
                waiter.set_result(None)
            else:
                self._arm(deadline)
                return


_LOCAL = threading.local()


def deadlines_of(loop: asyncio.AbstractEventLoop) -> Deadlines:
    """This thread's :class:`Deadlines` for ``loop`` (a new one if it last served another)."""
    keeper: Deadlines | None = getattr(_LOCAL, "deadlines", None)
    if keeper is None or keeper.loop is not loop:
        keeper = _LOCAL.deadlines = Deadlines(loop)
    return keeper
