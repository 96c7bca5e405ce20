"""Concurrency/timeout: the stage that decides how long the caller waits, and for whom.

How long a caller can wait, truthfully: ``timeout_seconds`` bounds two waits, one after the
other (as Temporal separates schedule-to-start from start-to-close): up to
``timeout_seconds`` for a free slot, then up to ``timeout_seconds`` for the handler and the
rendering of its value. The worst case for one attempt is therefore **2 × timeout_seconds**
(and a runner's read may make ``max_attempts`` such attempts, with backoff between them).
When no worker thread can be started at all, the attempt is ``busy`` at once and its slot is
released: nothing ran.

This module is the stage's entry: the ways to run one attempt under the tool's limits,
:func:`run_limited` for sync callers and :func:`arun_limited` (with :func:`run_here`, its
coroutine-handler path) for callers on an event loop. Each idea they use has its own module:

- :mod:`~agentkit.boundary.workers`: the worker pool, reusable daemon threads in the caller's
  process (a timed-out handler may still finish: a write may still land);
- :mod:`~agentkit.boundary.slot`: a tool's ``max_concurrency``, one semaphore for sync and
  async callers; a timed-out handler keeps its slot until it really returns;
- :mod:`~agentkit.boundary.deadlines`: the loop's shared deadlines for async waits on sync
  handlers (one timer per loop);
- :mod:`~agentkit.boundary.attempt`: the attempt and its done flag;
- :mod:`~agentkit.boundary.cancellation`: a deadline, a caller's cancellation, and a
  ``CancelledError`` a handler raised by itself, told apart.

Coroutine handlers (``async def``) are served too, so one registry answers sync and async
callers alike (docs/design.md#async-path):

- from the sync path, a coroutine handler runs to completion on its worker thread's own event
  loop (reused per thread, its leftover tasks cancelled after each attempt, as
  ``asyncio.run`` does), under the same ``timeout_seconds``;
- from async code (:func:`arun_limited`, used by ``aexecute``/``ainvoke_tool`` and the
  runner's async driver), a coroutine handler runs on the *caller's* event loop under
  ``asyncio.timeout``, with no thread hand-off and no thread held while it awaits; a sync
  handler goes to a worker and back;
- a policy that itself runs on a worker for an async caller
  (:func:`~agentkit.boundary.workers.run_on_worker`) sends a coroutine handler it reaches
  back to that caller's loop.

Sync handlers run on the same worker threads either way, and a tool's ``max_concurrency``
slot is the same semaphore for both kinds of caller.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import sys
import time
from collections.abc import Callable, Coroutine, Generator
from functools import partial
from types import CoroutineType
from types import coroutine as types_coroutine
from typing import TYPE_CHECKING, Any

from agentkit.boundary import pace as paces
from agentkit.boundary import workers
from agentkit.boundary.attempt import Attempt
from agentkit.boundary.call_info import CallInfo
from agentkit.boundary.cancellation import (
    DeadlinePassed,
    HandlerCancelled,
    bounded,
    is_cancelled_error,
)
from agentkit.boundary.deadlines import deadlines_of
from agentkit.boundary.on_first_use import OnFirstUse
from agentkit.boundary.pace import Pace
from agentkit.boundary.slot import Slot, wake
from agentkit.boundary.workers import WorkerUnavailable, run_on_own_loop, run_on_worker

if TYPE_CHECKING:
    import asyncio
else:
    asyncio = OnFirstUse("asyncio", globals())

__all__ = ["arun_limited", "current_call", "is_coroutine_handler", "mark_landed", "run_here",
           "run_limited", "running_attempt"]

# The pool is reached as ``workers.POOL`` (and the caller's loop as ``workers.caller_loop``):
# CPython 3.11 compiles ``name.method()`` on a name bound by ``from … import`` as an attribute
# load, taking the name for a module, and would make a bound method on every call.

#: The attempt whose handler runs in this context: set by the ways to run one attempt below,
#: in the attempt's own copy of the context, so it never leaks to the caller.
running_attempt: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar(
    "agentkit_attempt", default=None
)


def current_call() -> CallInfo | None:
    """Inside a handler or a status lookup, the :class:`~agentkit.boundary.call_info.CallInfo`
    of the call it runs for (its id, task, tool, effect, idempotency key and attempt); None
    anywhere else. A write forwards ``current_call().idempotency_key`` to a service that
    deduplicates by it (an ``Idempotency-Key`` header): the key is the same on every attempt,
    in the lookup and after recovery in another process (docs/design.md#current-call)."""
    attempt = running_attempt.get()
    if attempt is None or attempt.about is None:
        return None
    return attempt.about.call_info()


def mark_landed() -> None:
    """Called by a handler at the moment its write takes effect (a commit, a rename).

    The trace then knows when the write really landed, which may be long before the handler
    returns (or after its caller gave up): the timeline picture shows exactly that gap.
    Outside a boundary attempt it does nothing.
    """
    attempt = running_attempt.get()
    if attempt is not None:
        attempt.landed_at = time.monotonic()


def _in_attempt(
    attempt: Attempt, handler: Callable[..., Any], arguments: dict[str, Any], timeout: float
) -> Any:
    running_attempt.set(attempt)  # inside the copied context: never leaks to the caller
    value = handler(**arguments)
    # A coroutine handler reached from the sync path (the plain types are never awaitable:
    # asking them costs an ABC check on every call).
    if type(value) not in _PLAIN and inspect.isawaitable(value):
        value = run_on_own_loop(bounded(value, timeout))
    return value


_PLAIN = frozenset({str, dict, list, tuple, int, float, bool, type(None), bytes})


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


# --------------------------------------------------------------------------- the caller's wait


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
        if is_cancelled_error(exc):  # a sync handler raised CancelledError by itself
            exc = HandlerCancelled("the handler raised CancelledError")
        attempt.error = exc
    finally:
        attempt.end(slot)
    if waiter is not None:
        _wake_soon(waiter)


def _wake_soon(waiter: asyncio.Future[None]) -> None:
    """From any thread: wake the task awaiting ``waiter``, on the waiter's own loop."""
    # Not contextlib.suppress: a context manager built on every call, on the way back.
    try:  # noqa: SIM105
        waiter.get_loop().call_soon_threadsafe(wake, waiter)
    except RuntimeError:  # the caller's loop is closed: nobody is waiting any more
        pass


# --------------------------------------------------------------------------- sync callers


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

    A caller interrupted while it waits (``KeyboardInterrupt``, ``SystemExit``) gets the
    exception as it came; the attempt is cancelled if it had not started (it never runs),
    and one that had started runs on to its end, as after a timeout (``attempt.done`` tells
    when: the policy keeps the write's claim live until then).
    """
    if slot is not None and not slot.acquire(timeout=timeout):
        return "busy"
    context = contextvars.copy_context()
    loop = workers.caller_loop.get()
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
            workers.POOL.submit(partial(_work, attempt, context, handler, arguments, timeout, slot, finish, None))
        except WorkerUnavailable:
            return _no_worker(attempt, slot)
    try:
        attempt.done.wait(timeout)
    except BaseException:  # the caller was interrupted (KeyboardInterrupt, SystemExit)
        with attempt.lock:  # an attempt not yet started never runs; one that has runs on
            _give_up_unstarted(attempt, slot)
        raise
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
    worker (see :func:`~agentkit.boundary.workers.run_on_worker`)."""
    with attempt.lock:
        if attempt.cancelled:
            return
        attempt.started = True
        attempt.started_at = time.monotonic()
    running_attempt.set(attempt)  # the task runs in a copy of the context: never leaks
    try:
        value = await bounded(handler(**arguments), timeout)
        attempt.value = value if finish is None else finish(value)
        del value
    except (DeadlinePassed, asyncio.CancelledError):
        attempt.timed_out = True  # cancelled: the write may still have happened
    except BaseException as exc:
        attempt.error = exc
    finally:
        attempt.end(slot)


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
    pace: Pace | None = None,
) -> str:
    """:func:`run_limited` for a caller on an event loop: the same statuses ("busy",
    "timeout", "finished") and the same :class:`Attempt` (started, running, done callbacks,
    ``mark_landed``), and the same ``slot`` as sync callers.

    - A coroutine handler runs right here, on the caller's loop, under ``asyncio.timeout``:
      no thread hand-off, and no thread is held while it awaits. ``finish`` runs here too,
      unless ``heavy(value)`` says the value is large: then it runs on a worker thread (still
      inside the deadline) so rendering never stalls the loop.
    - A sync handler (and ``finish``) runs on a worker thread: one hand-off there, one back.
      While its tool is quick (``pace``, see :mod:`~agentkit.boundary.pace`), the loop's
      thread waits for the answer for at most ``QUICK_WAIT_SECONDS`` before it gives the loop
      back, so a quick answer needs no turn of the loop; otherwise, or when it takes longer,
      the wait is an await, holding no thread.
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
    if pace is not None and pace.quick:
        return await _quickly(handler, arguments, attempt, timeout, slot, finish, pace, loop)
    waiter: asyncio.Future[None] = loop.create_future()
    work = partial(_work, attempt, contextvars.copy_context(), handler, arguments, timeout,
                   slot, finish, waiter)
    # The deadline first: from the submit on, the worker waits for this thread to let go of
    # the GIL, so the loop should get to its next wait with as little as possible left to do.
    deadlines_of(loop).add(timeout, waiter)
    try:
        workers.POOL.submit(work)
    except WorkerUnavailable:
        waiter.cancel()  # its deadline is dropped with it
        return _no_worker(attempt, slot)
    return await _awaited(waiter, attempt, slot, pace)


async def _awaited(waiter: asyncio.Future[None], attempt: Attempt, slot: Slot | None,
                   pace: Pace | None) -> str:
    """The await for a worker's attempt: ``waiter`` is settled when the attempt ends, or at
    its deadline; then what :func:`_waited` says, learnt by ``pace`` if any. Cancelled while
    it awaits: an attempt not yet started never runs, one that has runs on to its end."""
    try:
        await waiter
    except BaseException:  # the caller was cancelled: an attempt not yet started never runs
        with attempt.lock:
            _give_up_unstarted(attempt, slot)
        raise
    status = _waited(attempt, slot)
    if pace is not None:
        pace.note(attempt)
    return status


async def _quickly(
    handler: Callable[..., Any],
    arguments: dict[str, Any],
    attempt: Attempt,
    timeout: float,
    slot: Slot | None,
    finish: Callable[[Any], Any] | None,
    pace: Pace,
    loop: asyncio.AbstractEventLoop,
) -> str:
    """:func:`arun_limited` for a quick tool's sync handler: hand it to a worker and wait on
    the attempt's done flag right here, for at most ``QUICK_WAIT_SECONDS``; past that, the
    rest of the deadline is awaited on the loop (the attempt's done-callback wakes it).

    Interrupted while it waits on the loop's thread (``KeyboardInterrupt``), or cancelled
    while it awaits: an attempt not yet started never runs; one that has runs on to its end."""
    began = time.monotonic()
    try:
        workers.POOL.submit(partial(_work, attempt, contextvars.copy_context(), handler,
                                    arguments, timeout, slot, finish, None))
    except WorkerUnavailable:
        return _no_worker(attempt, slot)
    try:
        answered = attempt.done.wait(min(paces.QUICK_WAIT_SECONDS, timeout))
    except BaseException:  # interrupted on the loop's thread (KeyboardInterrupt)
        with attempt.lock:
            _give_up_unstarted(attempt, slot)
        raise
    if answered:
        pace.note(attempt)
        return "timeout" if attempt.timed_out else "finished"
    pace.quick = False  # not back in time: await the rest, and let the next calls be awaited
    waiter: asyncio.Future[None] = loop.create_future()
    deadlines_of(loop).add(max(began + timeout - time.monotonic(), 0.0), waiter)
    # on the worker when the attempt ends (here, if it has already)
    attempt.add_done_callback(partial(_wake_soon, waiter))
    return await _awaited(waiter, attempt, slot, pace)


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
    cancellation are told apart right here, in one frame (see :func:`bounded`)."""
    attempt.started = True
    started = attempt.started_at = time.monotonic()
    token = running_attempt.set(attempt)
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
            value = await bounded(handler(**arguments), timeout)
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
        running_attempt.reset(token)
        attempt.end(slot)
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
        return await bounded(run_on_worker(finish, value), max(deadline - time.monotonic(), 0.0))
    except WorkerUnavailable:  # no thread to spare: render here rather than lose the value
        return finish(value)
