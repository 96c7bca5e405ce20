"""The call a handler runs in: ``current_call()`` tells a handler or a status lookup who it is.

A write is safe after a crash when the service it calls deduplicates by a key the caller
sends (payment APIs take an ``Idempotency-Key`` header). The runner already has such a key
for every write, stable across attempts, status lookups, processes and engines; this module
hands it downstream::

    def charge(invoice: str, cents: int) -> dict[str, str]:
        call = agentkit.current_call()
        key = call.idempotency_key if call is not None else None
        return payments.post("/charges", json={...}, headers={"Idempotency-Key": key})

:func:`~agentkit.current_call` answers inside a handler or a status lookup (on its worker thread, or in
the coroutine handler's own task) and None anywhere else. The :class:`CallInfo` is made only
when asked for, from the attempt that runs (:data:`~agentkit.boundary.concurrency.running_attempt`)
and what that attempt is about (a :class:`CallSource`: the runner's call, or a plain
:func:`~agentkit.invoke_tool`), so a call that never asks pays nothing for it.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["CallInfo", "CallSource", "InvokedCall", "ProgressSink", "progress_sink"]

#: Where :meth:`CallInfo.report_progress` sends a handler's progress: ``(progress, total,
#: message)``. A face that can carry progress to a client sets it around the call (the MCP
#: server, for a request with a ``progressToken``); the handler's worker thread sees it in
#: its copy of the caller's context.
ProgressSink = Callable[[float, "float | None", "str | None"], None]
progress_sink: contextvars.ContextVar[ProgressSink | None] = contextvars.ContextVar(
    "agentkit_progress_sink", default=None
)


@dataclass(frozen=True)
class CallInfo:
    """Who a handler (or status lookup) runs for (docs/design.md#current-call).

    - ``call_id``: the call's id (the host's tool-call id, or the runner's own);
    - ``task_id``: the conversation or workflow it belongs to (``CallContext.task_id``);
    - ``tool``, ``effect``: the tool's name and side-effect level (``"read"``, …);
    - ``idempotency_key``: a write's key, the same on every attempt, in its status lookup,
      after recovery in another process and under an engine; None for reads;
    - ``attempt``: the handler attempt this is (1, 2, …); in a status lookup, the attempt it
      asks about (0 when it settles a claim that another process left);
    - ``connection``: for a ``transactional`` write, the store's own connection inside the
      open transaction (never commit, roll back or close it); None otherwise.

    :meth:`report_progress` tells the caller how far the handler got, where a face carries
    it (an MCP client that asked for progress); anywhere else it does nothing.
    """

    call_id: str
    task_id: str
    tool: str
    effect: str
    idempotency_key: str | None
    attempt: int
    connection: Any = field(default=None, repr=False, compare=False)

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Tell the caller how far this call got: ``progress`` (of ``total``, when known) and
        a short ``message`` (an MCP ``notifications/progress``, docs/design.md#mcp).

        A no-op unless the face serving the call carries progress (an MCP request with a
        ``progressToken``); a value not above the last one sent is dropped (progress only
        increases). Safe from any thread, and it never raises into the handler: a sink that
        fails is logged on the ``agentkit`` logger and ignored."""
        sink = progress_sink.get()
        if sink is None:
            return
        try:
            sink(progress, total, message)
        except Exception:  # a progress report must never fail the handler
            logging.getLogger("agentkit").warning(
                "%s %s: a progress report failed", self.call_id, self.tool, exc_info=True)


class CallSource(Protocol):
    """What an attempt runs for (``Attempt.about``): it makes the :class:`CallInfo` of its
    latest attempt, when a handler or lookup asks."""

    def call_info(self) -> CallInfo: ...


class InvokedCall:
    """The source of a plain :func:`~agentkit.invoke_tool` attempt: one attempt, no key."""

    __slots__ = ("call_id", "effect", "task_id", "tool")

    def __init__(self, call_id: str, task_id: str, tool: str, effect: str) -> None:
        self.call_id = call_id
        self.task_id = task_id
        self.tool = tool
        self.effect = effect

    def call_info(self) -> CallInfo:
        return CallInfo(self.call_id, self.task_id, self.tool, self.effect, None, 1)
