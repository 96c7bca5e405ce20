"""Cancellation: how an awaited handler's end is told apart, at its deadline or not.

A coroutine cancelled by its deadline (or by its caller's cancellation) is
``outcome_unknown``, never a plain failure: cancellation does not prove that a write did not
happen. A handler that raises ``CancelledError`` by itself (nobody cancelled its caller) is
:class:`HandlerCancelled`, also ``outcome_unknown``; only the caller's own cancellation
propagates to the caller. A ``TimeoutError`` the handler raises by itself stays what it is (a
transient failure); the deadline is :class:`DeadlinePassed`.

:func:`bounded` awaits a handler under its deadline and tells these apart: with
``asyncio.timeout`` and ``Task.cancelling()`` on Python 3.11+, and on Python 3.10, which has
neither, with a small equivalent (a ``call_later`` that cancels the task and marks the scope
expired, and an awaitable that notes whether the task threw a ``CancelledError`` into it).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from agentkit.boundary.on_first_use import OnFirstUse

if TYPE_CHECKING:
    import asyncio
else:
    asyncio = OnFirstUse("asyncio", globals())

__all__ = ["DeadlinePassed", "HandlerCancelled", "bounded", "is_cancelled_error"]

T = TypeVar("T")


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


async def bounded(awaitable: Awaitable[T], timeout: float) -> T:
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

    async def _await_handler(awaitable: Awaitable[T]) -> T:
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

    async def _await_handler(awaitable: Awaitable[T]) -> T:
        """Await the handler in this task; a ``CancelledError`` that this task did not throw
        into it is one the handler raised by itself."""
        tracked = _Tracked(awaitable)
        try:
            return await tracked  # type: ignore[no-any-return]
        except asyncio.CancelledError as exc:
            if tracked.thrown:
                raise
            raise HandlerCancelled("the handler raised CancelledError") from exc


def is_cancelled_error(exc: BaseException) -> bool:
    """Whether ``exc`` is asyncio's ``CancelledError`` (a sync handler may raise one by itself);
    asyncio is never imported just to ask."""
    module = sys.modules.get("asyncio")
    return module is not None and isinstance(exc, module.CancelledError)
