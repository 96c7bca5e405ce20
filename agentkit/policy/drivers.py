"""The two drivers that perform what the policy asks for (docs/design.md#drivers).

The policy (:mod:`agentkit.policy.steps`) yields effects (:mod:`agentkit.policy.effects`); a
driver performs each effect and sends its answer back, or throws its exception in at the
``yield`` (so cleanup that writes happens in the steps, on both drivers). The steps run in the
driver's frame, on the caller's own thread or task, so the events they tell the observers are
told there too. Nothing is decided here.

- :class:`SyncDriver` (``call``, ``approve``, ``deny``, ``run_once``): performs everything on
  the caller's thread; a handler attempt runs on a worker thread, as the boundary does it.
- :class:`AsyncDriver` (``acall``, ``aapprove``, ``adeny``): attempts and lookups go through
  the boundary's async twins (``aexecute``, ``arun_limited``): a coroutine handler or lookup
  runs on the caller's loop with no thread hand-off and holds no thread while it awaits (nor
  while it waits for a slot); a sync one goes to a worker and back. A store step uses the store's async twin
  (``store.a<step>``) when it has one, runs right here when the store says it never blocks
  (``blocking = False``: the memory store), and otherwise runs on a worker, so SQLite's busy
  timeout or PostgreSQL's connect timeout never blocks the loop. From the policy's
  :data:`~agentkit.policy.effects.PROTECT` on, the first effect that must be awaited moves the
  rest of the call into a task of its own, awaited through ``asyncio.shield``: a cancelled
  caller stops waiting, the call's bookkeeping (claim, result, approval) still ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agentkit.boundary.attempt import Attempt
from agentkit.boundary.concurrency import arun_limited, run_here, run_limited
from agentkit.boundary.invoke import aexecute, conclude, execute, renderer, renders_large
from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.workers import WorkerUnavailable, run_on_worker
from agentkit.policy.effects import (
    PROTECT,
    AskLookup,
    Invoke,
    LateSteps,
    Pause,
    RunAttempt,
    Steps,
    StoreStep,
    WhenDone,
)
from agentkit.policy.stores.algorithm import StoreError

if TYPE_CHECKING:
    import asyncio

__all__ = ["AsyncDriver", "SyncDriver", "run_store_steps"]

log = logging.getLogger("agentkit")

T = TypeVar("T")


class SyncDriver:
    """Performs the steps on the caller's thread."""

    __slots__ = ("registry", "sleep", "store")

    def __init__(self, store: Any, registry: ToolRegistry | None = None,
                 sleep: Callable[[float], Any] = time.sleep) -> None:
        self.store = store
        self.registry = registry
        self.sleep = sleep

    def run(self, steps: Steps[T]) -> T:
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                effect = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            value = error = None
            try:
                value = self.perform(effect)
            except BaseException as exc:  # delivered into the step that asked
                error = exc

    def perform(self, effect: Any) -> Any:
        kind = type(effect)
        if kind is StoreStep:
            return getattr(self.store, effect.name)(*effect.args, **effect.kwargs)
        if isinstance(effect, RunAttempt):
            assert self.registry is not None
            return execute(self.registry, effect.entry, effect.arguments, effect.call_id,
                           effect.attempt)
        if kind is AskLookup:
            return run_limited(effect.lookup, effect.arguments, attempt=effect.probe,
                               timeout=effect.timeout, slot=None, finish=effect.finish)
        if kind is Pause:
            return self.sleep(effect.seconds)
        if kind is Invoke:
            return effect.function()
        if kind is WhenDone:
            return self._when_done(effect)
        if effect is PROTECT:
            return None
        raise TypeError(f"not an effect: {effect!r}")

    def _when_done(self, effect: WhenDone) -> None:
        """Perform ``effect.then`` now if the attempt has returned, else when it does."""
        then = effect.then
        if effect.attempt.done.is_set():
            if isinstance(then, StoreStep):
                self.perform(then)
            else:
                self.run(then())
            return
        effect.attempt.add_done_callback(lambda: _quiet_store_step(self.store, then))


def run_store_steps(store: Any, steps: Steps[T]) -> T:
    """Perform steps that touch only ``store`` (``run_once``, a panel's read), right here."""
    return SyncDriver(store).run(steps)


def _quiet_store_step(store: Any, then: StoreStep | LateSteps) -> None:
    """A store step (or steps of store steps) done from wherever a late attempt returned:
    nobody is left to tell, so a failing store is logged."""
    try:
        if isinstance(then, StoreStep):
            getattr(store, then.name)(*then.args, **then.kwargs)
        else:
            run_store_steps(store, then())
    except StoreError as exc:
        name = then.name if isinstance(then, StoreStep) else "settle"
        log.error("store step %s failed after a late attempt returned: %s", name, exc)


class AsyncDriver:
    """Performs the steps for async callers, on the caller's loop (see the module docstring)."""

    __slots__ = ("asleep", "registry", "store")

    def __init__(self, store: Any, registry: ToolRegistry,
                 asleep: Callable[[float], Awaitable[Any]]) -> None:
        self.store = store
        self.registry = registry
        self.asleep = asleep

    async def drive(self, steps: Steps[T], pending: Any = None, protected: bool = False,
                    in_own_task: bool = False) -> T:
        """Perform ``steps`` from their next effect (or ``pending``, already asked for);
        ``protected``: the policy has asked for :data:`~agentkit.policy.effects.PROTECT`;
        ``in_own_task``: this is the call's shielded task. The runner's ``acall``, ``aapprove``
        and ``adeny`` return this coroutine itself (no frame between it and the caller)."""
        value: Any = None
        error: BaseException | None = None
        store = self.store
        while True:
            if pending is not None:
                effect, pending = pending, None
            else:
                try:
                    effect = steps.send(value) if error is None else steps.throw(error)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                value = error = None
                if isinstance(effect, RunAttempt) and (not protected or in_own_task):
                    # every call's effect first: aexecute(...), its common case spelled out
                    # (as ainvoke_tool does): a coroutine handler with a free slot runs right
                    # here, no frame between
                    try:
                        entry, call_id = effect.entry, effect.call_id
                        spec, slot = entry.spec, entry.slot
                        attempt = effect.attempt or Attempt(spec.name, call_id)
                        if entry.coroutine and (slot is None or slot.acquire(blocking=False)):
                            status = await run_here(spec.handler, effect.arguments, attempt,
                                                    spec.timeout_seconds, slot,
                                                    renderer(self.registry, spec, call_id),
                                                    renders_large)
                            value = conclude(entry, attempt, status, call_id), attempt
                        else:
                            value = await aexecute(self.registry, entry, effect.arguments,
                                                   call_id, attempt)
                    except BaseException as exc:  # delivered into the step that asked
                        error = exc
                    continue
                if effect is PROTECT:
                    protected = True
                    continue
                if (type(effect) is StoreStep and not getattr(store, "blocking", True)
                        and not hasattr(store, "a" + effect.name)):
                    try:  # never blocks: no await, so no cancellation can land in between
                        value = getattr(store, effect.name)(*effect.args, **effect.kwargs)
                    except BaseException as exc:
                        error = exc
                    continue
                if protected and not in_own_task:
                    return await _shielded(self.drive(steps, effect, True, True))
            try:
                value = await self.perform(effect)
            except BaseException as exc:  # delivered into the step that asked
                error = exc

    async def perform(self, effect: Any) -> Any:
        kind = type(effect)
        if kind is StoreStep:
            return await self._store_step(effect)
        if isinstance(effect, RunAttempt):
            return await aexecute(self.registry, effect.entry, effect.arguments, effect.call_id,
                                  effect.attempt)
        if kind is AskLookup:
            return await arun_limited(effect.lookup, effect.arguments, attempt=effect.probe,
                                      timeout=effect.timeout, slot=None, finish=effect.finish)
        if kind is Pause:
            return await self.asleep(effect.seconds)
        if kind is Invoke:
            return await run_on_worker(effect.function)
        if kind is WhenDone:
            then = effect.then
            if effect.attempt.done.is_set():
                if isinstance(then, StoreStep):
                    return await self._store_step(then)
                return await self.drive(then())
            effect.attempt.add_done_callback(lambda: _off_this_loop(self.store, then))
            return None
        if effect is PROTECT:
            return None
        raise TypeError(f"not an effect: {effect!r}")

    async def _store_step(self, step: StoreStep) -> Any:
        store = self.store
        twin = getattr(store, "a" + step.name, None)
        if twin is not None:
            return await twin(*step.args, **step.kwargs)
        method = getattr(store, step.name)
        if not getattr(store, "blocking", True):
            return method(*step.args, **step.kwargs)
        try:
            return await run_on_worker(method, *step.args, **step.kwargs)
        except WorkerUnavailable as exc:
            raise StoreError(f"no worker thread for the store step {step.name}: {exc}") from exc


def _off_this_loop(store: Any, then: StoreStep | LateSteps) -> None:
    """A late attempt returned (on whatever thread): do the store step(s) here, unless they
    may block and this thread is running an event loop (then on a thread of their own). The
    sync steps are used even for a store with async twins: the loop that awaited the
    attempt may have ended since."""
    if getattr(store, "blocking", True) and _running_a_loop():
        threading.Thread(target=_quiet_store_step, args=(store, then), daemon=True,
                         name="agentkit-late-store-step").start()
        return
    _quiet_store_step(store, then)


def _running_a_loop() -> bool:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _shielded(work: Awaitable[T]) -> T:
    """Run ``work`` in a task of its own that the awaiting caller cannot cancel."""
    import asyncio

    task: asyncio.Future[T] = asyncio.ensure_future(work)
    task.add_done_callback(_retrieve)
    return await asyncio.shield(task)


def _retrieve(task: asyncio.Future[Any]) -> None:
    """A shielded call whose caller went away: its own failure is logged, not lost."""
    if not task.cancelled() and task.exception() is not None:
        log.error("a call finished after its caller was cancelled, and failed",
                  exc_info=task.exception())
