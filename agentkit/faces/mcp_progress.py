"""The kit's own steps of a ``tools/call``, told to its MCP client as they happen.

A call that retries, asks its status lookup or waits for a person used to be silent until
it ended. :func:`watch` adds one observer (:mod:`agentkit.policy.events`) to a runner the
MCP server uses; inside a ``tools/call`` (its
:class:`~agentkit.faces.mcp_channel.CallChannel` current: the policy's steps run in the
call's own task) each of these steps becomes

- a ``notifications/message`` (``info``, logger ``agentkit.mcp``) to that call's client, at
  or above its level, and the same line on the ``agentkit.mcp`` logger for the operator, and
- a ``notifications/progress`` when the request carried a ``progressToken``:

=====================  =============================================================
event                  what the client is told
=====================  =============================================================
``attempt_started``    a retry: ``attempt n of m`` (the first attempt says nothing)
``attempt_ended``      an attempt that failed, and why (log only)
``lookup_started``     the status lookup is asked whether the write landed
``lookup_ended``       what it answered (log only)
``approval_asked``     the call waits for a person (its approval id)
=====================  =============================================================

Outside a ``tools/call`` the observer returns at once; the runner keeps it (it is added once
per runner and its task twins, and costs a context-variable read per event).
"""

from __future__ import annotations

import logging
import weakref

from agentkit.faces.mcp_channel import SENT, CallChannel, current_channel
from agentkit.policy.events import CallEvent
from agentkit.policy.runner import ToolRunner
from agentkit.policy.trace import Trace

__all__ = ["watch"]

log = logging.getLogger("agentkit.mcp")

#: The runners watched, by their trace: a runner's twins for other tasks
#: (``runner.for_task``) share its trace and its observers, so one observer serves them all
#: (a server with a runner per conversation adds one, not one per conversation).
_watched: weakref.WeakSet[Trace] = weakref.WeakSet()


def watch(runner: ToolRunner) -> ToolRunner:
    """Tell the client of each ``tools/call`` that ``runner`` serves the kit's own steps
    (once per runner and its task twins); returns ``runner``."""
    if runner.trace not in _watched:
        _watched.add(runner.trace)
        runner.add_observer(_Steps(runner))
    return runner


class _Steps:
    """The observer: one runner's events, as log lines and progress of the current call."""

    __slots__ = ("_registry",)

    def __init__(self, runner: ToolRunner) -> None:
        self._registry = runner.registry

    def __call__(self, event: CallEvent) -> None:
        channel = current_channel.get()
        if channel is None or channel.seen is event:  # (runners sharing observers: told once)
            return
        channel.seen = event
        kind, tool = event.kind, event.tool
        if kind == "attempt_started" and event.number > 1:
            text = f"attempt {event.number} of {self._attempts(tool)}"
            _tell(channel, f"{tool}: retrying, {text}")
            channel.step(f"{tool}: {text}")
        elif kind == "attempt_ended" and event.outcome != "ok":
            _tell(channel, f"{tool}: attempt {event.number} of {self._attempts(tool)} failed: "
                           f"{event.outcome}")
        elif kind == "lookup_started":
            _tell(channel, f"{tool}: asking the status lookup whether the write landed")
            channel.step(f"{tool}: asking the status lookup")
        elif kind == "lookup_ended":
            _tell(channel, f"{tool}: the status lookup answered {event.outcome or 'nothing'}")
        elif kind == "approval_asked":
            _tell(channel, f"{tool}: waiting for a person to approve it (approval "
                           f"{event.approval_id})")
            channel.step(f"{tool}: waiting for a person (approval {event.approval_id})")

    def _attempts(self, tool: str) -> int:
        spec = self._registry.get(tool)
        return spec.max_attempts if spec is not None else 1


def _tell(channel: CallChannel, text: str) -> None:
    """One line of the kit's own: to the call's client whatever the logging configuration
    (an ``info`` line), and to the operator's log as configured (marked as sent already, so
    :class:`~agentkit.faces.mcp_logging.CallLogHandler` does not send it twice)."""
    channel.log("info", log.name, text)
    log.info("%s", text, extra={SENT: True})
