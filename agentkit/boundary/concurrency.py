"""Concurrency/timeout: the stage that decides how long the caller waits, and for whom.

Handlers run in the caller's process on reusable daemon worker threads. The caller waits at
most ``timeout_seconds`` and then gives up; it cannot kill the thread, so a timed-out handler
may still finish (and a write may still land): that is why the result is ``outcome_unknown``,
not "failed". Daemon threads mean a hung handler never blocks other calls nor the
interpreter's exit, which ``concurrent.futures`` would (it joins its workers at exit).

A tool's ``max_concurrency`` is a semaphore owned by the tool's registry entry. A timed-out
handler keeps its slot until it really returns, so a stuck dependency cannot be flooded with
new calls while the old ones still hang.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: How long an idle worker thread waits for more work before it exits.
IDLE_SECONDS = 30.0


class WorkerPool:
    """Daemon threads reused across calls; a new one starts only when none is idle."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS, name: str = "agentkit-worker") -> None:
        self._idle_seconds = idle_seconds
        self._name = name
        self._lock = threading.Lock()
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._started = 0

    @property
    def threads_started(self) -> int:
        """How many threads this pool has ever started (reuse keeps this small)."""
        return self._started

    def submit(self, task: Callable[[], None]) -> None:
        """Run ``task`` on an idle worker, or on a new daemon thread when none is idle."""
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._tasks.put(task)
                return
            self._started += 1
            number = self._started
        thread = threading.Thread(
            target=self._work, args=(task,), name=f"{self._name}-{number}", daemon=True
        )
        thread.start()

    def _work(self, task: Callable[[], None]) -> None:
        while True:
            task()
            with self._lock:
                self._idle += 1
            try:
                task = self._tasks.get(timeout=self._idle_seconds)
            except queue.Empty:
                with self._lock:
                    try:  # a task handed to "an idle worker" just as we timed out is ours
                        task = self._tasks.get_nowait()
                    except queue.Empty:
                        self._idle -= 1
                        return


_POOL = WorkerPool()
_CURRENT: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar("agentkit_attempt", default=None)


def mark_landed() -> None:
    """Called by a handler at the moment its write takes effect (a commit, a rename).

    The trace then knows when the write really landed, which may be long before the handler
    returns (or after its caller gave up): the timeline picture shows exactly that gap.
    Outside a boundary attempt it does nothing.
    """
    attempt = _CURRENT.get()
    if attempt is not None:
        attempt.landed_at = time.monotonic()


def _in_attempt(attempt: Attempt, handler: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    _CURRENT.set(attempt)  # inside the copied context: never leaks to the caller
    return handler(**arguments)


@dataclass
class Attempt:
    """One run of a handler, as the boundary saw it and as it really went."""

    tool: str
    call_id: str
    done: threading.Event = field(default_factory=threading.Event)
    started: bool = False
    cancelled: bool = False
    value: Any = None
    error: BaseException | None = None
    started_at: float | None = None
    finished_at: float | None = None
    landed_at: float | None = None  # set by the handler through mark_landed(), if it knows
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _callbacks: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the handler has really returned (now, if it already has)."""
        with self.lock:
            if not self.done.is_set():
                self._callbacks.append(callback)
                return
        callback()

    @property
    def handler_ran(self) -> bool:
        return self.started

    @property
    def running(self) -> bool:
        """True while a handler the caller gave up on is still running."""
        return self.started and not self.done.is_set()


def run_limited(
    handler: Callable[..., Any],
    arguments: dict[str, Any],
    *,
    attempt: Attempt,
    timeout: float,
    slot: threading.Semaphore | None,
) -> str:
    """Run one attempt under the tool's limits; returns "busy", "timeout" or "finished".

    "busy": no slot freed, or the attempt had not started when its time ran out (it is
    cancelled and never runs). "timeout": the handler started and is still running.
    "finished": ``attempt.value`` or ``attempt.error`` holds what the handler did.
    """
    if slot is not None and not slot.acquire(timeout=timeout):
        return "busy"
    context = contextvars.copy_context()

    def body() -> None:
        with attempt.lock:
            if attempt.cancelled:
                return
            attempt.started = True
            attempt.started_at = time.monotonic()
        try:
            attempt.value = context.run(_in_attempt, attempt, handler, arguments)
        except BaseException as exc:  # handed to the caller, who re-raises non-Exceptions
            attempt.error = exc
        finally:
            if slot is not None:
                slot.release()
            with attempt.lock:
                attempt.finished_at = time.monotonic()
                attempt.done.set()
                callbacks, attempt._callbacks = attempt._callbacks, []
            for callback in callbacks:
                try:
                    callback()
                except Exception:
                    logging.getLogger("agentkit").exception(
                        "%s %s: a done-callback failed", attempt.call_id, attempt.tool
                    )

    _POOL.submit(body)
    attempt.done.wait(timeout)
    with attempt.lock:
        if attempt.done.is_set():
            return "finished"
        if not attempt.started:
            attempt.cancelled = True
            if slot is not None:
                slot.release()
            return "busy"
        return "timeout"
