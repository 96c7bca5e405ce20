"""The kit's own steps of a ``tools/call``, told to its MCP client as they happen.

A call that retries, asks its status lookup or waits for a person used to be silent until
it ended. :func:`watch` adds one observer (:mod:`agentkit.policy.events`) to a runner the
MCP server uses; inside a ``tools/call`` (its
:class:`~agentkit.faces.mcp_channel.CallChannel` current: the policy's steps run in the
call's own task) each of these steps becomes

- a line on the ``agentkit.mcp`` logger (so a ``notifications/message`` to that call's
  client, through :mod:`agentkit.faces.mcp_logging`, and the operator's log), and
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
per runner, and costs a context-variable read per event).
"""

from __future__ import annotations

import logging
import weakref

from agentkit.faces.mcp_channel import current_channel
from agentkit.policy.events import CallEvent
from agentkit.policy.runner import ToolRunner

__all__ = ["watch"]

log = logging.getLogger("agentkit.mcp")

_watched: weakref.WeakSet[ToolRunner] = weakref.WeakSet()


def watch(runner: ToolRunner) -> ToolRunner:
    """Tell the client of each ``tools/call`` that ``runner`` serves the kit's own steps
    (once per runner); returns ``runner``."""
    if runner not in _watched:
        _watched.add(runner)
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
            log.info("%s: retrying, %s", tool, text)
            channel.step(f"{tool}: {text}")
        elif kind == "attempt_ended" and event.outcome != "ok":
            log.info("%s: attempt %d of %d failed: %s", tool, event.number,
                     self._attempts(tool), event.outcome)
        elif kind == "lookup_started":
            log.info("%s: asking the status lookup whether the write landed", tool)
            channel.step(f"{tool}: asking the status lookup")
        elif kind == "lookup_ended":
            log.info("%s: the status lookup answered %s", tool, event.outcome or "nothing")
        elif kind == "approval_asked":
            log.info("%s: waiting for a person to approve it (approval %s)", tool,
                     event.approval_id)
            channel.step(f"{tool}: waiting for a person (approval {event.approval_id})")

    def _attempts(self, tool: str) -> int:
        spec = self._registry.get(tool)
        return spec.max_attempts if spec is not None else 1
