"""The runner: the public face of the policy, above the one-attempt boundary.

``ToolRunner`` applies the policy of each tool's side-effect level (bounded retries for reads;
idempotency key and status lookup for reversible writes; approval, one run and the status
lookup for irreversible writes; the task's budget throughout). The policy itself is written
once, as steps (:mod:`agentkit.policy.steps`), and performed by one of two drivers
(:mod:`agentkit.policy.drivers`): the sync one for ``call``/``approve``/``deny``, the async one
for ``acall``/``aapprove``/``adeny`` (docs/design.md#drivers). What each call did is told to
observers as events (:mod:`agentkit.policy.events`); the in-memory :attr:`ToolRunner.trace`
is the first of them.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from agentkit.boundary.context import CallContext
from agentkit.boundary.invoke import new_call_id
from agentkit.boundary.registry import ToolRegistry
from agentkit.policy.approvals import MAX_APPROVER_CHARS, Approvals
from agentkit.policy.backoff import Backoff
from agentkit.policy.budget import Budget
from agentkit.policy.drivers import AsyncDriver, SyncDriver
from agentkit.policy.events import CallEvent, Observers
from agentkit.policy.steps import Policy
from agentkit.policy.stores import IdempotencyStore
from agentkit.policy.trace import DEFAULT_MAX_RECORDS, Trace
from agentkit.policy.writes import refuse_transactional


class ToolRunner:
    """Applies the policy of each tool's effect; the agent loop talks only to a runner.

    ``sleep`` is injected so tests and notebooks never wait on the wall clock (see also
    :func:`agentkit.set_testing`); ``asleep`` is its twin for the async path (by default
    ``asyncio.sleep`` when ``sleep`` is ``time.sleep``, else the given ``sleep`` followed by a
    yield to the loop, so a fake ``sleep`` serves both paths). ``clock`` (wall time) decides
    approval expiry. ``max_trace_records`` bounds :attr:`trace` (the most recent records are
    kept; None keeps all), so a long-running kernel or server does not grow without end.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        store: Any = None,
        budget: Budget | None = None,
        context: CallContext | None = None,
        sleep: Callable[[float], Any] = time.sleep,
        approval_ttl_seconds: float = 3600.0,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.time,
        max_trace_records: int | None = DEFAULT_MAX_RECORDS,
        asleep: Callable[[float], Awaitable[Any]] | None = None,
    ) -> None:
        store = store if store is not None else IdempotencyStore()
        refuse_transactional(registry, store)
        self.trace = Trace(max_trace_records)
        self._observers = Observers(first=self.trace.note)
        self._policy = Policy(
            registry, store, budget if budget is not None else Budget(),
            context if context is not None else CallContext(),
            backoff if backoff is not None else Backoff(),
            Approvals(store, approval_ttl_seconds, clock),
            self._observers,
        )
        self._sync_driver = SyncDriver(store, registry, sleep)
        self._async_driver = AsyncDriver(store, registry, asleep or _async_twin(sleep))

    @property
    def registry(self) -> ToolRegistry:
        return self._policy.registry

    @property
    def store(self) -> Any:
        return self._policy.store

    @property
    def budget(self) -> Budget:
        return self._policy.budget

    @property
    def context(self) -> CallContext:
        return self._policy.context

    @property
    def approvals(self) -> Approvals:
        return self._policy.approvals

    def for_task(self, task_id: str) -> ToolRunner:
        """This runner for another task (one conversation of a host that serves several):
        everything shared (registry, store, budget, principal and scopes, backoff, sleeps,
        clock, approvals, observers and :attr:`trace`) but the context's task id, so that
        the task's idempotency keys and approvals are its own, and found again by the same
        task after a restart (docs/design.md#framework-faces). Cheap: a policy object over
        the shared parts; ``self`` for its own task id."""
        if not isinstance(task_id, str) or not task_id:
            raise ValueError("task_id must be a non-empty str")
        policy = self._policy
        if task_id == policy.context.task_id:
            return self
        twin = copy.copy(self)
        twin._policy = Policy(
            policy.registry, policy.store, policy.budget,
            dataclasses.replace(policy.context, task_id=task_id), policy.backoff,
            policy.approvals, policy.observers,
        )
        return twin

    def add_observer(self, observer: Callable[[CallEvent], None]) -> Callable[[], None]:
        """Tell ``observer`` every :class:`~agentkit.policy.events.CallEvent` of every call from
        now on (docs/design.md#events); returns a function that removes it. An observer that
        raises is logged and ignored: it cannot change a result."""
        return self._observers.add(observer)

    # ------------------------------------------------------------------ sync callers

    def call(self, name: Any, arguments: Any, *, call_id: str | None = None) -> dict[str, Any]:
        """Run one model tool call under its effect's policy; never raises for model input.

        ``call_id`` is the host's own tool-call id (a framework's or an MCP request's); it then
        names this call in the trace, the log and the events. Without one the runner makes its
        own. A bug anywhere below is logged and answered as a stable error: ``tool_failure``
        when nothing ran, ``outcome_unknown`` (not retryable) when a handler attempt had started.
        """
        call_id = call_id if isinstance(call_id, str) and call_id else new_call_id()
        return self._sync_driver.run(self._policy.call(name, arguments, call_id))

    def approve(self, approval_id: Any, *, call_id: str | None = None,
                approver: str | None = None) -> dict[str, Any]:
        """Run the one call this approval was asked for, once; again returns the same result.
        A store that cannot be used answers ``busy``: nothing ran. ``call_id`` is the host's
        own id of the call being approved (a framework's tool-call id, a durable engine's step
        or activity id), which then names the run in the trace, the log and the events, as
        with :meth:`call`; without one the runner makes its own. ``approver`` names the
        person: it is kept with the decision (``decided_by``) and in the store's audit log;
        an approval that needs two people (four eyes) counts each named person once and
        answers ``approval_required`` until the second one approves."""
        return self._sync_driver.run(
            self._policy.approve(approval_id, _named(call_id), _person(approver)))

    def deny(self, approval_id: Any, *, call_id: str | None = None,
             approver: str | None = None) -> dict[str, Any]:
        """Settle a pending approval as ``forbidden``: nothing runs, now or later
        (``approver``: the person, as for :meth:`approve`)."""
        return self._sync_driver.run(
            self._policy.deny(approval_id, _named(call_id), _person(approver)))

    def recheck(self, approval_id: Any, *, call_id: str | None = None,
                approver: str | None = None) -> dict[str, Any]:
        """Ask the status lookup again about an approved call that ended in doubt
        (``outcome_unknown``): done → the receipt is its result now; not done →
        ``transient_failure``, not retryable, the key freed; still unknown → as it was. The
        handler never runs. The desk's "ask the lookup again"
        (docs/design.md#approvals-desk)."""
        return self._sync_driver.run(
            self._policy.recheck(approval_id, _named(call_id), _person(approver)))

    def pending_approvals(self) -> list[dict[str, Any]]:
        """The approvals in the store that still wait for a decision, oldest first: those
        this runner opened and those any earlier process (a restarted kernel, the CLI,
        another host) opened in the same store. Each has ``approval_id``, ``tool``,
        ``arguments``, ``task_id`` and ``principal``. Raises ``StoreError`` if the store
        cannot be read (this is a person's view, not model input)."""
        return self._sync_driver.run(self._policy.pending())

    def release(self, key: str, *, who: str | None = None, note: str | None = None) -> str:
        """A person's "I checked: it did not happen" for a write left in doubt: clear
        ``key``'s claim, only if it is stale (its lease passed, its owner's process is gone,
        or its attempt ended ``outcome_unknown``), so the next call may run the write again.
        Returns what it found: ``"released"``, ``"live"`` (the claim may still be running:
        left as it is), ``"completed"`` (nothing to release) or ``"unknown"`` (no such key).
        The release goes to the store's audit log with ``who`` and ``note``. The checks are
        ``python -m agentkit keys release KEY``'s. Raises ``StoreError`` when the store
        cannot be used (a person's operation, not model input)."""
        if not isinstance(key, str):
            raise TypeError("key must be a str")
        return str(self.store.release_stale(key, who=who, note=note).outcome)

    # ------------------------------------------------------------------ async callers

    def acall(
        self, name: Any, arguments: Any, *, call_id: str | None = None
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """:meth:`call` for async hosts (``await runner.acall(name, arguments)``): the same
        policy, the same results.

        A coroutine handler or status lookup runs right on this loop, under
        ``asyncio.timeout``, holding no thread while it awaits; a sync one runs on a worker
        thread. A store that may block runs its steps on a worker (or its async twins), never
        on the loop. If the awaiting task is cancelled once a write's bookkeeping has begun,
        the call goes on to its end and its outcome is recorded.

        It returns the async driver's own coroutine (``AsyncDriver.drive``), so nothing sits
        between the host's ``await`` and the driver's loop: it is awaited, made a task,
        gathered and cancelled as any coroutine, and nothing runs until it is awaited (only
        the call id is taken when it is made).
        (So, as with ``aapprove``, ``adeny`` and ``arecheck``,
        ``inspect.iscoroutinefunction`` says False for it; ``inspect.iscoroutine`` says True
        for what it returns.)
        """
        call_id = call_id if isinstance(call_id, str) and call_id else new_call_id()
        return self._async_driver.drive(self._policy.call(name, arguments, call_id))

    def aapprove(
        self, approval_id: Any, *, call_id: str | None = None, approver: str | None = None
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """:meth:`approve` for async hosts (see :meth:`acall`)."""
        return self._async_driver.drive(
            self._policy.approve(approval_id, _named(call_id), _person(approver)))

    def adeny(
        self, approval_id: Any, *, call_id: str | None = None, approver: str | None = None
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """:meth:`deny` for async hosts (see :meth:`acall`)."""
        return self._async_driver.drive(
            self._policy.deny(approval_id, _named(call_id), _person(approver)))

    def arecheck(
        self, approval_id: Any, *, call_id: str | None = None, approver: str | None = None
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """:meth:`recheck` for async hosts (see :meth:`acall`): a coroutine status lookup is
        awaited on this loop, a sync one runs on a worker thread."""
        return self._async_driver.drive(
            self._policy.recheck(approval_id, _named(call_id), _person(approver)))


def _person(approver: Any) -> str | None:
    """A person's name as a decision records it: a non-empty str of printable characters
    (no leading or trailing space), at most ``MAX_APPROVER_CHARS`` long (anything else raises ``ValueError``: a person's
    channel, not model input, names the approver), or None."""
    if approver is None:
        return None
    if (not isinstance(approver, str) or not approver or approver != approver.strip()
            or not approver.isprintable() or len(approver) > MAX_APPROVER_CHARS):
        raise ValueError(f"approver must be a printable name of 1 to {MAX_APPROVER_CHARS}"
                         " characters, or None")
    return str.__str__(approver)


def _named(call_id: Any) -> str:
    """The host's own call id when it gave one (a non-empty str), else a new one."""
    return call_id if isinstance(call_id, str) and call_id else new_call_id()


def _async_twin(sleep: Callable[[float], Any]) -> Callable[[float], Awaitable[Any]]:
    """The async path's ``sleep``: ``asyncio.sleep`` for the real clock; an injected (fake)
    ``sleep`` is called as it is, then the loop gets a turn. (asyncio is imported when first
    awaited: a program that only makes sync calls never imports it.)"""
    if sleep is time.sleep:

        async def real(seconds: float) -> None:
            import asyncio

            await asyncio.sleep(seconds)

        return real

    async def fake(seconds: float) -> None:
        import asyncio

        sleep(seconds)
        await asyncio.sleep(0)

    return fake
