"""One ``tools/call``'s own way back to its client: its log lines and its progress, in order.

A call's handler runs on a worker thread (or as a coroutine on the server's loop), while the
MCP session that must carry its notifications lives on the event loop. A :class:`CallChannel`
is made for each ``tools/call`` and set in :data:`current_channel` around the call, so that
whatever runs for that call (the policy's steps, its handler on a worker thread with the
caller's copied context, a status lookup) finds this call's channel, and never another
session's: a log record or a progress report carries the context of the thread or task that
made it.

Anything handed to the channel, from any thread, goes to the loop through
``loop.call_soon_threadsafe`` (first in, first out), and one sender task of the call's own
sends it: the client sees the lines in the order they were made. :meth:`CallChannel.aclose`,
awaited before the call's result is returned, sends what is still queued first, so every
notification of a call reaches the client before its result (a client forgets a request's
progress token once it has the response). Whatever arrives after that (a handler that timed
out and runs on) is dropped.

Progress (``notifications/progress``) is sent only when the request carried a
``progressToken`` and only increasing: a value not above the last one sent is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import numbers
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agentkit.boundary.canonical import escape_invisible

__all__ = ["MAX_MESSAGE_CHARS", "SENT", "CallChannel", "LogLine", "ProgressStep", "current_channel"]

log = logging.getLogger("agentkit.mcp")

#: The longest progress message sent (the rest is cut).
MAX_MESSAGE_CHARS = 1000

#: The attribute of a log record already sent to its call's client (a line of the kit's own,
#: logged for the operator too): the logging handler leaves it alone.
SENT = "agentkit_mcp_sent"

#: The channel of the ``tools/call`` this code runs for (None outside one).
current_channel: contextvars.ContextVar[CallChannel | None] = contextvars.ContextVar(
    "agentkit_mcp_channel", default=None
)



@dataclass(frozen=True)
class LogLine:
    """A ``notifications/message``: an MCP level, the logger's name and the text."""

    level: str
    logger: str
    data: str


@dataclass(frozen=True)
class ProgressStep:
    """A ``notifications/progress``."""

    progress: float
    total: float | None
    message: str | None


class _Mark:
    """A mark in a channel's queue: its future is set once everything before it was sent;
    the last one (``close``) ends the sender."""

    __slots__ = ("close", "done")

    def __init__(self, done: asyncio.Future[None], close: bool) -> None:
        self.done = done
        self.close = close


Send = Callable[[Any], Awaitable[None]]


class CallChannel:
    """The notifications of one call to its client.

    ``send`` sends one :class:`LogLine` or :class:`ProgressStep` (awaited on ``loop``, one at
    a time). ``levels`` are the MCP levels the client takes for this call (its session's
    ``logging/setLevel`` and above; empty: no log line is sent). ``progress`` is whether the
    request asked for progress. :meth:`log` and :meth:`report_progress` may be called from
    any thread and never raise.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, send: Send, *,
                 levels: frozenset[str], progress: bool) -> None:
        self.loop = loop
        self.levels = levels
        self.wants_progress = progress
        self.seen: object = None  # the last runner event told (agentkit.faces.mcp_progress)
        self._send = send
        self._lock = threading.Lock()  # orders progress values and their hand-off together
        self._last: float | None = None
        self._queue: asyncio.Queue[Any] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._closed = False
        self._handed = 0

    # ------------------------------------------------------------------ any thread

    def log(self, level: str, logger: str, data: str) -> None:
        """Send a log line if the client takes ``level`` for this call."""
        if level in self.levels:
            self._hand_off(LogLine(level, logger, data))

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Send progress if the request asked for it and ``progress`` is above the last sent
        (a :data:`~agentkit.boundary.call_info.ProgressSink`)."""
        if not self.wants_progress or not _is_number(progress):
            return
        if total is not None and not _is_number(total):
            total = None
        if message is not None:  # shown to a person: no invisible character, not a book
            message = escape_invisible(str(message))[:MAX_MESSAGE_CHARS]
        with self._lock:
            if self._last is not None and progress <= self._last:
                return
            self._last = float(progress)
            self._hand_off(ProgressStep(float(progress), None if total is None else float(total),
                                        message))

    def step(self, message: str) -> None:
        """Progress for a step of the kit's own (a retry, a status lookup, a person asked):
        one above the last value sent, with ``message`` and no total."""
        if not self.wants_progress:
            return
        with self._lock:
            self._last = 1.0 if self._last is None else self._last + 1.0
            self._hand_off(ProgressStep(self._last, None, message))

    def _hand_off(self, item: Any) -> None:
        self._handed += 1  # (under the GIL; read by aclose on the loop: any hand-off at all?)
        # In an empty context: its sender task, made there, sends as no call's code (what the
        # transport logs meanwhile is no line of this call: no loop back). A closed loop: the
        # call is long over.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._enqueue, item, context=contextvars.Context())

    # ------------------------------------------------------------------ the loop

    def _enqueue(self, item: Any) -> None:
        if self._closed:
            return  # after the result: nobody listens for this call any more
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._sender = self.loop.create_task(self._send_all(self._queue))
        self._queue.put_nowait(item)

    async def _send_all(self, queue: asyncio.Queue[Any]) -> None:
        while True:
            item = await queue.get()
            if isinstance(item, _Mark):
                if not item.done.done():
                    item.done.set_result(None)
                if item.close:
                    return
                continue
            try:
                await self._send(item)
            except Exception as exc:  # a client gone away: the call's result will tell
                log.debug("mcp: a notification could not be sent: %s", exc)

    async def flush(self) -> None:
        """Wait until everything handed off before this was called has been sent (before the
        server asks its client something: the question comes after the lines that led to
        it)."""
        await self._reach_the_end(close=False)

    async def aclose(self) -> None:
        """Send what is queued (everything handed off before this was called), then take
        nothing more. Awaited on the loop before the call's result is returned."""
        if self._handed == 0:  # nothing was ever handed off: nothing to wait for
            self._closed = True  # (a late hand-off, after the result, is dropped)
            return
        try:
            await self._reach_the_end(close=True)
        finally:
            sender = self._sender
            if sender is not None and not sender.done():
                sender.cancel()

    async def _reach_the_end(self, *, close: bool) -> None:
        done: asyncio.Future[None] = self.loop.create_future()
        # through the loop's queue too: after every hand-off made before this call
        self.loop.call_soon_threadsafe(self._mark, done, close, context=contextvars.Context())
        await done

    def _mark(self, done: asyncio.Future[None], close: bool) -> None:
        if close:
            self._closed = True
        if self._queue is None:
            done.set_result(None)
        else:
            self._queue.put_nowait(_Mark(done, close))


def _is_number(value: Any) -> bool:
    """A finite real number (not a bool)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, numbers.Real) and math.isfinite(value)
