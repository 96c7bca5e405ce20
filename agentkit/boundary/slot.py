"""The slot: a tool's ``max_concurrency``, one limit for sync and async callers alike.

A tool's ``max_concurrency`` is a :class:`Slot` owned by the tool's registry entry. A
timed-out handler keeps its slot until it really returns, so a stuck dependency cannot be
flooded with new calls while the old ones still hang. Waiting for a slot is the first of the
two waits ``timeout_seconds`` bounds (docs/design.md#timeouts): none freed in time is
``busy``, and nothing ran.
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING

from agentkit.boundary.on_first_use import OnFirstUse

if TYPE_CHECKING:
    import asyncio
else:
    asyncio = OnFirstUse("asyncio", globals())

__all__ = ["Slot", "wake"]


class Slot:
    """A tool's ``max_concurrency``: a counting semaphore that threads and event-loop tasks
    wait on alike, first come first served, so one limit serves sync and async callers.

    A thread waits on a lock of its own; a task waits on a future of its loop and holds no
    thread while it waits. ``release`` hands the slot straight to the oldest waiter (under
    the slot's lock), so a waiter that times out just as it is handed the slot keeps it.
    Releasing more often than acquired raises ``ValueError`` (like ``BoundedSemaphore``).
    """

    __slots__ = ("_free", "_limit", "_lock", "_waiters")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._free = limit
        self._lock = threading.Lock()
        self._waiters: collections.deque[_Waiter] = collections.deque()

    @property
    def limit(self) -> int:
        return self._limit

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take a slot; wait up to ``timeout`` seconds (None or negative: as long as it takes)."""
        with self._lock:
            if self._free and not self._waiters:
                self._free -= 1
                return True
            if not blocking or (timeout is not None and timeout == 0):
                return False
            waiter = _Waiter(None)
            self._waiters.append(waiter)
        wait = -1 if timeout is None or timeout < 0 else timeout
        if waiter.wake.acquire(timeout=wait):
            return True
        with self._lock:
            if waiter.granted:  # handed over just as we gave up: it is ours
                return True
            self._waiters.remove(waiter)
            return False

    async def aacquire(self, timeout: float) -> bool:
        """:meth:`acquire` for a task: waits on this loop, holding no thread."""
        with self._lock:
            if self._free and not self._waiters:
                self._free -= 1
                return True
            loop = asyncio.get_running_loop()
            waiter = _Waiter(loop.create_future())
            self._waiters.append(waiter)
        assert waiter.future is not None
        timer = loop.call_later(timeout, wake, waiter.future)
        try:
            await waiter.future
        except BaseException:  # the caller was cancelled: give back a slot handed to us
            with self._lock:
                if not waiter.granted:
                    self._waiters.remove(waiter)
                    raise
            self.release()
            raise
        finally:
            timer.cancel()
        with self._lock:
            if waiter.granted:
                return True
            self._waiters.remove(waiter)
            return False

    def release(self) -> None:
        with self._lock:
            while self._waiters:
                waiter = self._waiters.popleft()
                if waiter.future is None:
                    waiter.granted = True
                    waiter.wake.release()
                    return
                try:
                    waiter.future.get_loop().call_soon_threadsafe(wake, waiter.future)
                except RuntimeError:  # its loop is closed: nobody waits there any more
                    continue
                waiter.granted = True
                return
            if self._free >= self._limit:
                raise ValueError("Slot released too many times")
            self._free += 1

    def __repr__(self) -> str:
        return f"<Slot {self._free}/{self._limit} free, {len(self._waiters)} waiting>"


class _Waiter:
    __slots__ = ("future", "granted", "wake")

    def __init__(self, future: asyncio.Future[None] | None) -> None:
        self.future = future
        self.granted = False
        if future is None:
            self.wake = threading.Lock()
            self.wake.acquire()


def wake(future: asyncio.Future[None]) -> None:
    """Wake the task waiting on ``future`` (on the future's loop), unless it is done already."""
    if not future.done():
        future.set_result(None)
