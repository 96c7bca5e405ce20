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
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CallChannel", "LogLine", "ProgressStep", "current_channel"]

log = logging.getLogger("agentkit.mcp")

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


class _End:
    """The last item of a channel: the future set once everything before it was sent."""

    __slots__ = ("done",)

    def __init__(self, done: asyncio.Future[None]) -> None:
        self.done = done


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
        if message is not None:
            message = str(message)
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
            if isinstance(item, _End):
                if not item.done.done():
                    item.done.set_result(None)
                return
            try:
                await self._send(item)
            except Exception as exc:  # a client gone away: the call's result will tell
                log.debug("mcp: a notification could not be sent: %s", exc)

    async def aclose(self) -> None:
        """Send what is queued (everything handed off before this was called), then take
        nothing more. Awaited on the loop before the call's result is returned."""
        done: asyncio.Future[None] = self.loop.create_future()
        self.loop.call_soon_threadsafe(self._finish, done, context=contextvars.Context())
        try:
            await done
        finally:
            sender = self._sender
            if sender is not None and not sender.done():
                sender.cancel()

    def _finish(self, done: asyncio.Future[None]) -> None:
        self._closed = True
        if self._queue is None:
            done.set_result(None)
        else:
            self._queue.put_nowait(_End(done))


def _is_number(value: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)
