"""Concurrency/timeout: the stage that decides how long the caller waits, and for whom.

Handlers run in the caller's process on reusable daemon worker threads. The caller waits at
most ``timeout_seconds`` and then gives up; it cannot kill the thread, so a timed-out handler
may still finish (and a write may still land): that is why the result is ``outcome_unknown``,
not "failed". Daemon threads mean a hung handler never blocks other calls nor the
interpreter's exit, which ``concurrent.futures`` would (it joins its workers at exit).

A tool's ``max_concurrency`` is a semaphore owned by the tool's registry entry. A timed-out
handler keeps its slot until it really returns, so a stuck dependency cannot be flooded with
new calls while the old ones still hang.

How long a caller can wait, truthfully: ``timeout_seconds`` bounds two waits, one after the
other (as Temporal separates schedule-to-start from start-to-close): up to
``timeout_seconds`` for a free slot, then up to ``timeout_seconds`` for the handler and the
rendering of its value. The worst case for one attempt is therefore **2 × timeout_seconds**
(and a runner's read may make ``max_attempts`` such attempts, with backoff between them).
When no worker thread can be started at all, the attempt is ``busy`` at once and its slot is
released: nothing ran.

Coroutine handlers (``async def``) are served too, so one registry answers sync and async
callers alike (docs/design.md#async-path):

- from the sync path, a coroutine handler runs to completion on its worker thread's own event
  loop (a fresh one per attempt, closed afterwards, as ``asyncio.run`` does), under the same
  ``timeout_seconds``;
- from async code (:func:`arun_limited`, used by ``aexecute``/``ainvoke_tool`` and the
  runner's async driver), a coroutine handler runs on the *caller's* event loop under
  ``asyncio.timeout``, with no thread hand-off and no thread held while it awaits (on Python
  3.10, which has no ``asyncio.timeout``, a small equivalent: a ``call_later`` that cancels
  the task and marks the scope expired); a sync handler goes to a worker and back;
- a policy that itself runs on a worker for an async caller (:func:`run_on_worker`) sends a
  coroutine handler it reaches back to that caller's loop.

Sync handlers run on the same worker threads either way, and a tool's ``max_concurrency``
slot (:class:`Slot`) is the same semaphore for both kinds of caller.

A coroutine cancelled by its deadline (or by its caller's cancellation) is
``outcome_unknown``, never a plain failure: cancellation does not prove that a write did not
happen. A handler that raises ``CancelledError`` by itself (nobody cancelled its caller) is
:class:`HandlerCancelled`, also ``outcome_unknown``; only the caller's own cancellation
propagates to the caller.
"""

from __future__ import annotations

import collections
import contextvars
import heapq
import inspect
import itertools
import logging
import math
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from functools import partial
from types import CoroutineType
from types import coroutine as types_coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio
else:

    class _AsyncioOnFirstUse:
        """Stands in for the ``asyncio`` module until this module first uses it, then puts the
        module itself in its place: a program that only makes sync calls never imports asyncio
        (with ssl, about a third of ``import agentkit``)."""

        def __getattr__(self, name: str) -> Any:
            import asyncio as module

            globals()["asyncio"] = module
            return getattr(module, name)

    asyncio = _AsyncioOnFirstUse()

#: How long an idle worker thread waits for more work before it exits.
IDLE_SECONDS = 30.0


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


def _in_attempt(
    attempt: Attempt, handler: Callable[..., Any], arguments: dict[str, Any], timeout: float
) -> Any:
    _CURRENT.set(attempt)  # inside the copied context: never leaks to the caller
    value = handler(**arguments)
    # A coroutine handler reached from the sync path (the plain types are never awaitable:
    # asking them costs an ABC check on every call).
    if type(value) not in _PLAIN and inspect.isawaitable(value):
        value = _run_on_own_loop(value, timeout)
    return value


_PLAIN = frozenset({str, dict, list, tuple, int, float, bool, type(None), bytes})


# --------------------------------------------------------------------------- coroutine handlers

#: The event loop of the async caller whose policy runs on this worker (see run_on_worker).
_CALLER_LOOP: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "agentkit_caller_loop", default=None
)

_T = TypeVar("_T")


class WorkerUnavailable(RuntimeError):
    """No worker thread could be started (the process is out of memory or threads): nothing
    ran. The boundary answers ``busy``."""


class DeadlinePassed(Exception):
    """A coroutine handler was cancelled at its deadline (not a ``TimeoutError`` it raised)."""


class HandlerCancelled(Exception):
    """A handler ended by raising ``CancelledError`` although nobody cancelled its caller.

    It returned no value, and cancellation does not prove a write did not happen, so the
    attempt is ``outcome_unknown`` on both paths; only the caller's own cancellation
    propagates (docs/design.md#async-path).
    """


if sys.version_info >= (3, 11):

    def _timeout_scope(delay: float) -> asyncio.Timeout:
        return asyncio.timeout(delay)

else:  # pragma: no cover - exercised on Python 3.10 only

    class _timeout_scope:
        """``asyncio.timeout`` for Python 3.10: cancel the task at the deadline, then raise
        ``TimeoutError`` from the scope, and tell by ``expired()`` that it was the deadline."""

        def __init__(self, delay: float) -> None:
            self._delay = delay
            self._expired = False
            self._handle: asyncio.TimerHandle | None = None

        def expired(self) -> bool:
            return self._expired

        async def __aenter__(self) -> _timeout_scope:  # noqa: PYI034 (3.10 has no Self)
            task = asyncio.current_task()
            assert task is not None
            self._handle = asyncio.get_running_loop().call_later(self._delay, self._fire, task)
            return self

        def _fire(self, task: asyncio.Task[Any]) -> None:
            self._expired = True
            task.cancel()

        async def __aexit__(
            self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
        ) -> None:
            assert self._handle is not None
            self._handle.cancel()
            if self._expired and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc


async def _bounded(awaitable: Awaitable[_T], timeout: float) -> _T:
    """Await under ``timeout``; the deadline is :class:`DeadlinePassed`, while a
    ``TimeoutError`` raised by the handler itself stays what it is (a transient failure), and
    a ``CancelledError`` raised by the handler itself (nobody cancelled this task) is
    :class:`HandlerCancelled`. The task's own cancellation propagates unchanged."""
    scope = _timeout_scope(timeout)
    try:
        async with scope:
            return await _await_handler(awaitable)
    except TimeoutError:
        if scope.expired():
            raise DeadlinePassed from None
        raise


if sys.version_info >= (3, 11):

    async def _await_handler(awaitable: Awaitable[_T]) -> _T:
        """Await the handler in this task; ``Task.cancelling()`` tells the task's own
        cancellation (its caller's, or the deadline's) from a ``CancelledError`` the handler
        raised by itself."""
        try:
            return await awaitable
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            raise HandlerCancelled("the handler raised CancelledError") from exc

else:  # pragma: no cover - exercised on Python 3.10 only

    class _Tracked:
        """Awaits an awaitable in the caller's own task and notes whether the task threw a
        ``CancelledError`` into it (Python 3.10 has no ``Task.cancelling()``): a task's
        cancellation (its caller's, or the deadline's) always arrives as ``throw()`` through
        every awaiting frame, while a ``CancelledError`` the handler raises by itself does not.
        """

        __slots__ = ("_inner", "thrown")

        def __init__(self, awaitable: Awaitable[Any]) -> None:
            self._inner: Any = awaitable.__await__()
            self.thrown = False

        def __await__(self) -> _Tracked:
            return self

        def __iter__(self) -> _Tracked:
            return self

        def __next__(self) -> Any:
            return self._inner.send(None)

        def send(self, value: Any) -> Any:
            return self._inner.send(value)

        def throw(self, kind: Any, value: Any = None, traceback: Any = None) -> Any:
            error = value if value is not None else kind
            if isinstance(error, asyncio.CancelledError) or (
                isinstance(error, type) and issubclass(error, asyncio.CancelledError)
            ):
                self.thrown = True
            return self._inner.throw(kind, value, traceback)

        def close(self) -> None:
            self._inner.close()

    async def _await_handler(awaitable: Awaitable[_T]) -> _T:
        """Await the handler in this task; a ``CancelledError`` that this task did not throw
        into it is one the handler raised by itself."""
        tracked = _Tracked(awaitable)
        try:
            return await tracked  # type: ignore[no-any-return]
        except asyncio.CancelledError as exc:
            if tracked.thrown:
                raise
            raise HandlerCancelled("the handler raised CancelledError") from exc


_OWN = threading.local()  # each worker thread's own event loop, made on first use


def _run_on_own_loop(awaitable: Awaitable[_T], timeout: float) -> _T:
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
        return loop.run_until_complete(_bounded(awaitable, timeout))
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


def _is_running_here(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` is this thread's running loop: a coroutine handler that calls a sync
    entry point (``invoke_tool``) is itself on the caller's loop, which then cannot serve the
    inner handler while it waits; that one runs on a worker's own loop instead."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def is_coroutine_handler(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` is an ``async def`` (or a partial of one).

    A sync wrapper around a coroutine function (``functools.wraps`` included) counts as sync:
    it may block, so it runs on a worker thread, and the coroutine it returns runs on that
    worker's own loop.
    """
    return inspect.iscoroutinefunction(handler)


async def run_on_worker(function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``function(*args, **kwargs)`` on a worker thread, awaited without blocking the loop.

    The worker remembers this event loop: a coroutine handler reached from ``function`` is run
    back on it (see :func:`run_limited`). Cancelling the awaiting task does not stop the
    worker: a write under way goes on, and its result is still recorded by the policy.
    Raises :class:`WorkerUnavailable` when no worker thread can be started (nothing ran).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()
    context = contextvars.copy_context()
    context.run(_CALLER_LOOP.set, loop)

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
        _POOL.submit(task)
    except RuntimeError as exc:  # "can't start new thread"
        raise WorkerUnavailable(str(exc)) from exc
    return await future


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
        timer = loop.call_later(timeout, _settle_future, waiter.future)
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
                    waiter.future.get_loop().call_soon_threadsafe(_settle_future, waiter.future)
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


def _settle_future(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Deadlines:
    """The deadlines of the async waits for sync handlers on one event loop, behind one timer.

    ``loop.call_later`` for every wait builds a ``TimerHandle``, pushes it on the loop's heap
    (whose comparisons run Python code) and leaves it there cancelled until swept: a good part
    of what an async hop costs beyond the hop itself. Here a wait is a tuple on a heap of its
    own (compared in C) and one loop timer is armed at the earliest deadline still awaited.
    A wait that ends in time is not looked for: it is dropped when it reaches the top, or
    when the heap is compacted (every time it doubles). When the timer fires, every wait
    whose deadline has come is settled (its caller then finds the attempt not done: a
    timeout), exactly as its own timer would have done.

    One per thread, for the loop that thread last waited on (a thread runs one loop at a
    time); a thread that alternates loops makes a new one, and the old one's pending timer
    still serves the waits it holds.
    """

    __slots__ = ("_armed_at", "_compact_at", "_heap", "_order", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._armed_at = math.inf  # when the pending timer fires (inf: none pending)
        self._compact_at = _COMPACT_MIN

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
            self._compact_at = max(_COMPACT_MIN, 2 * len(heap))

    def _arm(self, when: float) -> None:
        self._armed_at = when
        self.loop.call_at(when, self._fire, when)

    def _fire(self, when: float) -> None:
        if when != self._armed_at:
            return  # an earlier deadline re-armed the timer since: that one serves now
        self._armed_at = math.inf
        now = self.loop.time() + _CLOCK_RESOLUTION
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


#: The heap of :class:`_Deadlines` is compacted when it reaches this size (then at twice the
#: waits still pending).
_COMPACT_MIN = 256
#: A loop runs a timer this much before its time (asyncio's ``_clock_resolution``).
_CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution
_LOCAL = threading.local()


def _deadlines(loop: asyncio.AbstractEventLoop) -> _Deadlines:
    """This thread's :class:`_Deadlines` for ``loop`` (a new one if it last served another)."""
    keeper: _Deadlines | None = getattr(_LOCAL, "deadlines", None)
    if keeper is None or keeper.loop is not loop:
        keeper = _LOCAL.deadlines = _Deadlines(loop)
    return keeper


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
        "_callbacks", "call_id", "cancelled", "done", "error", "finished_at", "landed_at",
        "lock", "started", "started_at", "timed_out", "tool", "value",
    )

    def __init__(self, tool: str, call_id: str) -> None:
        self.tool = tool
        self.call_id = call_id
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

    @property
    def running(self) -> bool:
        """True while a handler the caller gave up on is still running."""
        return self.started and not self.done.is_set()

    def __repr__(self) -> str:
        state = "running" if self.running else "done" if self.done.is_set() else "not started"
        return f"<Attempt {self.call_id} {self.tool} {state}>"


def _end_attempt(attempt: Attempt, slot: Slot | None) -> None:
    """The handler has really returned: free its slot, mark it done, run its callbacks."""
    if slot is not None:
        slot.release()
    with attempt.lock:
        attempt.finished_at = time.monotonic()
        attempt.done.set()
        callbacks, attempt._callbacks = attempt._callbacks, None
    for callback in callbacks or ():
        try:
            callback()
        except Exception:
            logging.getLogger("agentkit").exception(
                "%s %s: a done-callback failed", attempt.call_id, attempt.tool
            )


def _waited(attempt: Attempt, slot: Slot | None) -> str:
    """The caller's wait for a worker's attempt is over: ``finished`` or ``timeout`` if it
    has returned; else the caller stops waiting: ``busy`` if it never started (it never
    will), ``timeout`` (marked on the attempt: the handler may still complete) if it has."""
    with attempt.lock:
        if attempt.done.is_set():
            return "timeout" if attempt.timed_out else "finished"
        if _give_up_unstarted(attempt, slot):
            return "busy"
        attempt.timed_out = True
        return "timeout"


def _no_worker(attempt: Attempt, slot: Slot | None) -> str:
    """No worker thread could be started for the attempt: nothing ran, nor will (``busy``)."""
    with attempt.lock:
        attempt.cancelled = True
    if slot is not None:
        slot.release()
    logging.getLogger("agentkit").warning(
        "%s %s: busy, no worker thread could be started", attempt.call_id, attempt.tool
    )
    return "busy"


def _give_up_unstarted(attempt: Attempt, slot: Slot | None) -> bool:
    """Cancel an attempt that has not started (it never will; its slot is freed). False when
    it has already started (call with ``attempt.lock`` held)."""
    if attempt.started:
        return False
    attempt.cancelled = True
    if slot is not None:
        slot.release()
    return True


def _work(
    attempt: Attempt,
    context: contextvars.Context,
    handler: Callable[..., Any],
    arguments: dict[str, Any],
    timeout: float,
    slot: Slot | None,
    finish: Callable[[Any], Any] | None,
    waiter: asyncio.Future[None] | None,
) -> None:
    """One attempt on a worker thread: the handler, then ``finish``, then the end of the
    attempt; ``waiter`` (an async caller's future) is settled on its loop afterwards."""
    with attempt.lock:
        if attempt.cancelled:
            return
        attempt.started = True
        attempt.started_at = time.monotonic()
    try:
        value = context.run(_in_attempt, attempt, handler, arguments, timeout)
        attempt.value = value if finish is None else finish(value)
        del value
    except DeadlinePassed:
        attempt.timed_out = True
    except BaseException as exc:  # handed to the caller, who re-raises non-Exceptions
        if _is_cancelled_error(exc):  # a sync handler raised CancelledError by itself
            exc = HandlerCancelled("the handler raised CancelledError")
        attempt.error = exc
    finally:
        _end_attempt(attempt, slot)
    if waiter is not None:
        # Not contextlib.suppress: a context manager built on every call, on the way back.
        try:  # noqa: SIM105
            waiter.get_loop().call_soon_threadsafe(_settle_future, waiter)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting any more
            pass


def _is_cancelled_error(exc: BaseException) -> bool:
    module = sys.modules.get("asyncio")  # never imported just to ask
    return module is not None and isinstance(exc, module.CancelledError)


def run_limited(
    handler: Callable[..., Any],
    arguments: dict[str, Any],
    *,
    attempt: Attempt,
    timeout: float,
    slot: Slot | None,
    finish: Callable[[Any], Any] | None = None,
) -> str:
    """Run one attempt under the tool's limits; returns "busy", "timeout" or "finished".

    "busy": no slot freed, no worker thread could be started, or the attempt had not started
    when its time ran out (it is cancelled and never runs; the slot is released). "timeout":
    the handler started and is still running. "finished": ``attempt.value`` or
    ``attempt.error`` holds what the handler did (a handler that raised ``CancelledError`` by
    itself: :class:`HandlerCancelled`).

    ``finish`` (rendering, for the boundary) runs on the worker right after the handler
    returns, inside the attempt and its timeout and holding its slot; ``attempt.value`` is then
    what ``finish`` made of the handler's value, and the raw value is not kept.

    Worst case for the caller: up to ``timeout`` waiting for a slot, then up to ``timeout``
    for the handler (and ``finish``): 2 × ``timeout_seconds`` in all.
    """
    if slot is not None and not slot.acquire(timeout=timeout):
        return "busy"
    context = contextvars.copy_context()
    loop = _CALLER_LOOP.get()
    if loop is not None and is_coroutine_handler(handler) and not _is_running_here(loop):
        coroutine = _on_caller_loop(attempt, handler, arguments, timeout, slot, finish)
        try:
            asyncio.run_coroutine_threadsafe(coroutine, loop)
        except RuntimeError:  # the caller's loop is closed: nothing ran
            coroutine.close()
            attempt.cancelled = True
            if slot is not None:
                slot.release()
            return "busy"
    else:
        try:
            _POOL.submit(partial(_work, attempt, context, handler, arguments, timeout, slot, finish, None))
        except WorkerUnavailable:
            return _no_worker(attempt, slot)
    attempt.done.wait(timeout)
    return _waited(attempt, slot)


async def _on_caller_loop(
    attempt: Attempt,
    handler: Callable[..., Any],
    arguments: dict[str, Any],
    timeout: float,
    slot: Slot | None,
    finish: Callable[[Any], Any] | None,
) -> None:
    """A coroutine handler sent back to the async caller's loop by a policy running on a
    worker (see :func:`run_on_worker`)."""
    with attempt.lock:
        if attempt.cancelled:
            return
        attempt.started = True
        attempt.started_at = time.monotonic()
    _CURRENT.set(attempt)  # the task runs in a copy of the context: never leaks
    try:
        value = await _bounded(handler(**arguments), timeout)
        attempt.value = value if finish is None else finish(value)
        del value
    except (DeadlinePassed, asyncio.CancelledError):
        attempt.timed_out = True  # cancelled: the write may still have happened
    except BaseException as exc:
        attempt.error = exc
    finally:
        _end_attempt(attempt, slot)


# --------------------------------------------------------------------------- async callers


async def arun_limited(
    handler: Callable[..., Any],
    arguments: dict[str, Any],
    *,
    attempt: Attempt,
    timeout: float,
    slot: Slot | None,
    finish: Callable[[Any], Any] | None = None,
    heavy: Callable[[Any], bool] | None = None,
    coroutine: bool | None = None,
) -> str:
    """:func:`run_limited` for a caller on an event loop: the same statuses ("busy",
    "timeout", "finished") and the same :class:`Attempt` (started, running, done callbacks,
    ``mark_landed``), and the same ``slot`` as sync callers.

    - A coroutine handler runs right here, on the caller's loop, under ``asyncio.timeout``:
      no thread hand-off, and no thread is held while it awaits. ``finish`` runs here too,
      unless ``heavy(value)`` says the value is large: then it runs on a worker thread (still
      inside the deadline) so rendering never stalls the loop.
    - A sync handler (and ``finish``) runs on a worker thread: one hand-off there, one back.
    - Waiting for a slot holds no thread either (see :class:`Slot`).

    Cancelling the awaiting task: a coroutine handler is cancelled with it (as awaiting it
    directly would do; the attempt ends timed out, a write may have happened) and the
    ``CancelledError`` propagates; a sync handler that has started runs on to its end (its
    slot is freed then), one that has not started never runs. A coroutine handler that raises
    ``CancelledError`` by itself is :class:`HandlerCancelled` in ``attempt.error``, not a
    cancellation of the caller. ``coroutine`` says whether ``handler`` is a coroutine
    function when the caller knows (a registry entry does); None: find out.
    """
    if slot is not None and not await slot.aacquire(timeout):
        return "busy"
    if is_coroutine_handler(handler) if coroutine is None else coroutine:
        return await run_here(handler, arguments, attempt, timeout, slot, finish, heavy)
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    work = partial(_work, attempt, contextvars.copy_context(), handler, arguments, timeout,
                   slot, finish, waiter)
    # The deadline first: from the submit on, the worker waits for this thread to let go of
    # the GIL, so the loop should get to its next wait with as little as possible left to do.
    _deadlines(loop).add(timeout, waiter)
    try:
        _POOL.submit(work)
    except WorkerUnavailable:
        waiter.cancel()  # its deadline is dropped with it
        return _no_worker(attempt, slot)
    try:
        await waiter  # settled by the worker when the attempt ends, or at the deadline
    except BaseException:  # the caller was cancelled: an attempt not yet started never runs
        with attempt.lock:
            _give_up_unstarted(attempt, slot)
        raise
    return _waited(attempt, slot)


async def run_here(
    handler: Callable[..., Any],
    arguments: dict[str, Any],
    attempt: Attempt,
    timeout: float,
    slot: Slot | None,
    finish: Callable[[Any], Any] | None = None,
    heavy: Callable[[Any], bool] | None = None,
) -> str:
    """:func:`arun_limited` for a coroutine handler whose ``slot`` (if any) the caller already
    holds (it is released when the handler ends): the handler runs on this loop under
    ``asyncio.timeout``. Nobody else has seen ``attempt`` yet, so it starts without its lock.

    This is the hot path of every async call, so the deadline and the two kinds of
    cancellation are told apart right here, in one frame (see :func:`_bounded`)."""
    attempt.started = True
    started = attempt.started_at = time.monotonic()
    token = _CURRENT.set(attempt)
    try:
        if sys.version_info >= (3, 11):
            try:
                call = handler(**arguments)
                if type(call) is CoroutineType:
                    # Its first step, here: a handler that returns without ever giving the
                    # loop a turn cannot be stopped by a deadline (nothing can run to fire
                    # it), so it needs no timer at all. One that suspends is awaited on
                    # under the same deadline, counted from ``started``.
                    try:
                        step = call.send(None)
                    except StopIteration as stop:
                        value, call = stop.value, None
                    else:
                        call = _resume(call, step)
                if call is not None:
                    scope = asyncio.timeout(started + timeout - time.monotonic())
                    try:
                        async with scope:
                            value = await call
                    except TimeoutError:
                        if not scope.expired():
                            raise  # the handler's own TimeoutError: a transient failure
                        raise DeadlinePassed from None
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if task is None or task.cancelling():
                    raise
                raise HandlerCancelled("the handler raised CancelledError") from exc
        else:  # pragma: no cover - Python 3.10
            value = await _bounded(handler(**arguments), timeout)
        if finish is None:
            attempt.value = value
        elif heavy is None or not heavy(value):
            attempt.value = finish(value)
        else:
            attempt.value = await _finish_off_loop(finish, value, started + timeout)
        del value
    except DeadlinePassed:
        attempt.timed_out = True
    except asyncio.CancelledError:
        attempt.timed_out = True  # the caller was cancelled: the write may still have happened
        raise
    except BaseException as exc:  # handed to the caller, who re-raises non-Exceptions
        attempt.error = exc
    finally:
        _CURRENT.reset(token)
        _end_attempt(attempt, slot)
    return "timeout" if attempt.timed_out else "finished"


@types_coroutine
def _resume(call: Coroutine[Any, Any, Any], step: Any) -> Generator[Any, Any, Any]:
    """Await the rest of a coroutine whose first step has run (and yielded ``step``): what
    ``await`` would do from there on, so the task sees its futures and throws into it."""
    while True:
        try:
            sent = yield step
        except GeneratorExit:
            call.close()
            raise
        except BaseException as exc:  # the task's cancellation (or a throw), into the handler
            try:
                step = call.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                step = call.send(sent)
            except StopIteration as stop:
                return stop.value


async def _finish_off_loop(finish: Callable[[Any], Any], value: Any, deadline: float) -> Any:
    """``finish(value)`` on a worker, within what is left of the attempt's deadline."""
    try:
        return await _bounded(run_on_worker(finish, value), max(deadline - time.monotonic(), 0.0))
    except WorkerUnavailable:  # no thread to spare: render here rather than lose the value
        return finish(value)
