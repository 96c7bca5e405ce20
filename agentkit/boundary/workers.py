"""The worker pool: where handlers run, in the caller's process, on reusable daemon threads.

The caller waits at most ``timeout_seconds`` and then gives up; it cannot kill the thread, so
a timed-out handler may still finish (and a write may still land): that is why the result is
``outcome_unknown``, not "failed". Daemon threads mean a hung handler never blocks other
calls nor the interpreter's exit, which ``concurrent.futures`` would (it joins its workers at
exit). When no worker thread can be started at all, :class:`WorkerUnavailable` says so and
the attempt is ``busy``: nothing ran.

Each worker thread also keeps its own event loop, made on first use: a coroutine handler
reached from the sync path runs to completion there (:func:`run_on_own_loop`). And async
code sends a function to a worker with :func:`run_on_worker`, which remembers the caller's
loop (:data:`caller_loop`) so that a coroutine handler the function reaches is sent back to
that loop (see :func:`agentkit.boundary.concurrency.run_limited`).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agentkit.boundary.on_first_use import OnFirstUse

if TYPE_CHECKING:
    import asyncio
else:
    asyncio = OnFirstUse("asyncio", globals())

__all__ = [
    "IDLE_SECONDS",
    "POOL",
    "WorkerPool",
    "WorkerUnavailable",
    "caller_loop",
    "close_own_loop",
    "run_on_own_loop",
    "run_on_worker",
]

T = TypeVar("T")

#: How long an idle worker thread waits for more work before it exits.
IDLE_SECONDS = 30.0


class WorkerUnavailable(RuntimeError):
    """No worker thread could be started (the process is out of memory or threads): nothing
    ran. The boundary answers ``busy``."""


class _Idle:
    """An idle worker: it waits on its own lock for the task handed to it."""

    __slots__ = ("task", "wake")

    def __init__(self) -> None:
        self.task: Callable[[], None] | None = None
        self.wake = threading.Lock()
        self.wake.acquire()


class WorkerPool:
    """Daemon threads reused across calls; a new one starts only when none is idle.

    A task goes to the worker that became idle last (a stack, not a shared queue): with a
    steady stream of calls the same warm thread serves them all, where a queue shared by two
    idle threads would wake them in turn (each wake a colder thread, a few µs more per hop).
    """

    def __init__(self, idle_seconds: float = IDLE_SECONDS, name: str = "agentkit-worker") -> None:
        self._idle_seconds = idle_seconds
        self._name = name
        self._lock = threading.Lock()
        self._idle: list[_Idle] = []  # most recently idle last
        self._started = 0

    @property
    def threads_started(self) -> int:
        """How many threads this pool has ever started (reuse keeps this small)."""
        return self._started

    def submit(self, task: Callable[[], None]) -> None:
        """Run ``task`` on an idle worker, or on a new daemon thread when none is idle.

        Raises :class:`WorkerUnavailable` when a thread is needed and cannot be started.
        """
        with self._lock:
            if self._idle:
                worker = self._idle.pop()
                worker.task = task
                worker.wake.release()
                return
            self._started += 1
            number = self._started
        # The task goes in a list the worker empties: a Thread keeps its args until it exits,
        # and must not keep the first attempt (its value, its exception) alive that long.
        thread = threading.Thread(
            target=self._work, args=([task],), name=f"{self._name}-{number}", daemon=True
        )
        try:
            thread.start()
        except RuntimeError as exc:  # "can't start new thread": out of memory or threads
            with self._lock:
                self._started -= 1
            raise WorkerUnavailable(str(exc)) from exc

    def _work(self, first: list[Callable[[], None]]) -> None:
        me = _Idle()
        task: Callable[[], None] | None = first.pop()
        while True:
            assert task is not None
            task()
            # Let go of the finished task before waiting for the next one: an idle worker must
            # not keep the last attempt (its value, its exception) alive for IDLE_SECONDS.
            task = None
            with self._lock:
                self._idle.append(me)
            if not me.wake.acquire(timeout=self._idle_seconds):
                with self._lock:
                    if any(worker is me for worker in self._idle):
                        self._idle.remove(me)
                        close_own_loop()
                        return
                # A task was handed to us just as we timed out (under the lock): it is ours.
                me.wake.acquire()
            task, me.task = me.task, None


#: The process's one pool: every attempt and every :func:`run_on_worker` goes through it.
POOL = WorkerPool()


# --------------------------------------------------------------------------- a worker's own loop

_OWN = threading.local()  # each worker thread's own event loop, made on first use


def run_on_own_loop(awaitable: Awaitable[T]) -> T:
    """Run a coroutine to completion on this worker thread's own event loop.

    The loop is made once per thread and reused (a new loop costs an epoll descriptor and a
    socket pair: most of a call's time); as ``asyncio.run`` does, tasks the handler left
    behind are cancelled before the attempt ends, so nothing of one attempt runs in the next.
    The loop is closed when its worker thread exits (:func:`close_own_loop`).
    """
    loop: asyncio.AbstractEventLoop | None = getattr(_OWN, "loop", None)
    if loop is None or loop.is_closed():
        loop = _OWN.loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(awaitable)
    finally:
        left = asyncio.all_tasks(loop)
        if left:
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


def close_own_loop() -> None:
    """Close this thread's own event loop, if it made one (a worker thread, as it exits)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_OWN, "loop", None)
    if loop is not None and not loop.is_closed():
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


# --------------------------------------------------------------------------- async callers

#: The event loop of the async caller whose policy runs on this worker (see run_on_worker).
caller_loop: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "agentkit_caller_loop", default=None
)


async def run_on_worker(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` on a worker thread, awaited without blocking the loop.

    The worker remembers this event loop (:data:`caller_loop`): a coroutine handler reached
    from ``function`` is run back on it (see ``run_limited``). Cancelling the awaiting task
    does not stop the worker: a write under way goes on, and its result is still recorded by
    the policy. Raises :class:`WorkerUnavailable` when no worker thread can be started
    (nothing ran).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()
    context.run(caller_loop.set, loop)

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # the awaiting task was cancelled
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def task() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = context.run(function, *args, **kwargs)
        except BaseException as exc:  # handed to the awaiting task
            error = exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting any more
            logging.getLogger("agentkit").warning("a worker finished after its event loop closed")

    try:
        POOL.submit(task)
    except RuntimeError as exc:  # "can't start new thread"
        raise WorkerUnavailable(str(exc)) from exc
    return await future
