"""The PostgreSQL store's async connections: each event loop its own, closed with it.

An async twin (``aclaim``, ``acomplete``, ...) takes a connection of the running loop's
:class:`LoopPools` (one :class:`AsyncConnections` per durability level), made in the task of
the step that needs it; when the loop ends they are closed, and a step still asked for on it
(:class:`LoopEnding`: a call's cleanup while ``asyncio.run`` cancels its tasks) runs its sync
twin on a thread instead (:func:`on_a_thread_if_the_loop_ends`). :func:`looks_dead` is how the
store tells an idle connection the server has left, sync or async. (Used by
:mod:`agentkit.policy.stores.postgres` only; ``import agentkit`` never loads it.)
"""

from __future__ import annotations

import select
from collections.abc import Awaitable, Callable
from functools import partial, wraps
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio

__all__ = ["AsyncConnections", "LoopEnding", "LoopPools", "looks_dead",
           "on_a_thread_if_the_loop_ends"]


class AsyncConnections:
    """One event loop's async connections at one durability level: at most ``size`` open at
    once (a step waits up to ``timeout`` seconds for one), the idle ones kept for the next
    step, none known dead handed out.

    It runs no task of its own, and that is why it is not psycopg_pool's async pool: that
    pool's workers and scheduler are tasks on the loop, which ``asyncio.run`` cancels with
    every other task when it ends the loop; a worker caught while connecting swallows the
    cancellation and waits for more work, so the loop never closes, and a pool whose
    workers were cancelled cannot be closed any more (its ``close`` raises before it closes
    its connections). Here a connection is made in the task of the step that needs it, so
    a cancellation reaches that step, and closing is closing the idle connections."""

    __slots__ = ("_connect", "_free", "_idle", "_timeout", "closed")

    def __init__(self, connect: Callable[[], Awaitable[Any]], size: int, timeout: float) -> None:
        import asyncio

        self._connect = connect
        self._idle: list[Any] = []
        self._free = asyncio.Semaphore(size)
        self._timeout = timeout
        self.closed = False

    async def get(self) -> Any:
        """An idle connection, or a new one; raises ``asyncio.TimeoutError`` when none is
        free within the timeout, and psycopg's error when a new one cannot connect."""
        import asyncio

        if self._free.locked():
            await asyncio.wait_for(self._free.acquire(), self._timeout)
        else:
            await self._free.acquire()  # free: returns without suspending
        try:
            while self._idle:
                conn = self._idle.pop()
                if not looks_dead(conn):
                    return conn
                await conn.close()
            return await self._connect()
        except BaseException:
            self._free.release()
            raise

    async def put(self, conn: Any) -> None:
        """Give a connection back: kept if it is usable and the set still open, else closed."""
        from psycopg.pq import TransactionStatus

        try:
            if (self.closed or conn.closed or conn.broken
                    or conn.info.transaction_status != TransactionStatus.IDLE):
                await conn.close()
            else:
                self._idle.append(conn)
        finally:
            self._free.release()

    async def close(self) -> None:
        """Close the idle connections; those in use are closed as they are given back."""
        self.closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


class LoopPools:
    """One event loop's connections (by durability), and the task that closes them with it."""

    __slots__ = ("closer", "ending", "pools")

    def __init__(self) -> None:
        self.pools: dict[bool, AsyncConnections] = {}
        self.closer: asyncio.Task[None] | None = None  # a strong reference: the loop's is weak
        self.ending = False  # the loop is ending: its connections are closed, or closing


class LoopEnding(Exception):
    """The running loop is ending (its connections closed with it): a store step still
    asked for on it (a call's cleanup, run as ``asyncio.run`` cancels its tasks) runs on a
    thread, through the sync pools."""


_Twin = TypeVar("_Twin", bound=Callable[..., Awaitable[Any]])


def on_a_thread_if_the_loop_ends(twin: _Twin) -> _Twin:
    """An async twin ``a<step>`` that, on a loop whose pools are closed with it, performs
    the sync ``<step>`` on a thread instead (before it has sent anything)."""
    name = twin.__name__[1:]

    @wraps(twin)
    async def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        import asyncio

        try:
            return await twin(self, *args, **kwargs)
        except LoopEnding:
            return await asyncio.to_thread(partial(getattr(self, name), *args, **kwargs))

    return step  # type: ignore[return-value]


def looks_dead(conn: Any) -> bool:
    """An idle connection with something to read (the server's goodbye), or closed."""
    if conn.closed or conn.broken:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
