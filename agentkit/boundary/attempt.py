"""The attempt: one run of a handler, as the boundary saw it and as it really went.

The caller may stop waiting before the handler returns (its time ran out, or it was
cancelled), so an :class:`Attempt` keeps both stories: whether the handler started, when it
started, whether the caller gave up (``timed_out``), and, set only when the handler has
really returned, its value or error, ``finished_at`` and the :class:`DoneFlag` ``done``.
The policy waits on that flag (or registers a done-callback) before it lets a claim go
stale: a handler still running may still write. (A handler that knows when its write took
effect says so with :func:`agentkit.boundary.concurrency.mark_landed`.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentkit.boundary.call_info import CallSource
    from agentkit.boundary.slot import Slot

__all__ = ["Attempt", "DoneFlag"]


class DoneFlag:
    """A one-shot event with ``threading.Event``'s ``set``/``is_set``/``wait``, on one lock.

    Every attempt makes one and its caller waits on it, so it is on the hot path: a held lock
    that ``set`` releases is one handoff in C, where ``threading.Event`` builds a Condition per
    event and allocates a waiter lock per wait. Each waiter passes the lock on (acquire, then
    release), so all of them wake. ``set`` is called by the attempt's own code, under the
    attempt's lock (never twice at once).
    """

    __slots__ = ("_flag", "_lock")

    def __init__(self) -> None:
        self._flag = False
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self) -> None:
        if not self._flag:
            self._flag = True
            self._lock.release()

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        """True once set; False if ``timeout`` seconds pass first (None: wait as long as it takes)."""
        if self._flag:
            return True
        if self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            self._lock.release()
        return self._flag

    def __repr__(self) -> str:
        return f"<DoneFlag {'set' if self._flag else 'unset'}>"


class Attempt:
    """One run of a handler, as the boundary saw it and as it really went.

    A plain class with ``__slots__`` (every attempt makes one, so it is on the hot path): the
    flags and times below, a :class:`DoneFlag` set when the handler has really returned, and
    a lock that makes "started" and "cancelled before it started" exclusive.
    """

    __slots__ = (
        "_callbacks", "about", "call_id", "cancelled", "done", "error", "finished_at",
        "landed_at", "lock", "started", "started_at", "timed_out", "tool", "value",
    )

    def __init__(self, tool: str, call_id: str, about: CallSource | None = None) -> None:
        self.tool = tool
        self.call_id = call_id
        self.about = about  # what it runs for: agentkit.current_call() asks it (call_info.py)
        self.done = DoneFlag()
        self.started = False
        self.cancelled = False  # nothing ran, and nothing will
        self.value: Any = None
        self.error: BaseException | None = None
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.landed_at: float | None = None  # set by the handler through mark_landed(), if it knows
        self.timed_out = False  # the caller gave up at the deadline (or was itself cancelled)
        self.lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] | None = None

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the handler has really returned (now, if it already has)."""
        with self.lock:
            if not self.done.is_set():
                if self._callbacks is None:
                    self._callbacks = [callback]
                else:
                    self._callbacks.append(callback)
                return
        callback()

    def end(self, slot: Slot | None) -> None:
        """The handler has really returned: free its slot, mark it done, run its callbacks."""
        if slot is not None:
            slot.release()
        with self.lock:
            self.finished_at = time.monotonic()
            self.done.set()
            callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            try:
                callback()
            except Exception:
                logging.getLogger("agentkit").exception(
                    "%s %s: a done-callback failed", self.call_id, self.tool
                )

    @property
    def running(self) -> bool:
        """True while a handler the caller gave up on is still running."""
        return self.started and not self.done.is_set()

    def __repr__(self) -> str:
        state = "running" if self.running else "done" if self.done.is_set() else "not started"
        return f"<Attempt {self.call_id} {self.tool} {state}>"
