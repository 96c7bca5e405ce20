"""The LangGraph face: the registry's tools as one ``langgraph.prebuilt.ToolNode``.

    >>> from agentkit.faces.langgraph import tool_node
    >>> graph.add_node("tools", tool_node(runner))

The node's ``wrap_tool_call``/``awrap_tool_call`` send every tool call to the runner (``call``
or ``acall``) with the model's tool-call id as the runner's ``call_id``; the node's own
execution and error handling are never used, so agentkit's policy is the only one (a
``ToolNode`` has no timeout, and LangChain's retry middleware would retry any exception). The
model reads a ``ToolMessage``: the result's ``data``, or the JSON text of a failed result with
``status="error"`` — a normal tool result, never an exception that stops the graph.

An irreversible write calls :func:`langgraph.types.interrupt` (the graph needs a checkpointer):
the graph stops with the pending call (tool, arguments, tool_call_id), a person decides, and
``graph.invoke(Command(resume=True | False), config)`` resumes it. ``True`` (exactly) asks
agentkit for its approval of exactly these arguments and settles it; anything else sends the
model agentkit's ``forbidden`` and runs nothing. LangGraph re-runs the whole node from its top
on resume: the node remembers the approved calls it settled, so an approved write runs once
however often the node re-runs, and the model reads its own result (a read in the same node
may run again). With the
budget spent no person is asked: the call answers ``budget_exhausted``. Importing this module
imports LangGraph (extra ``agentkit[langgraph]``).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any

from agentkit.boundary.canonical import canonical_json
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.faces.framework import FORBIDDEN, MissingFramework, call_approved, model_text
from agentkit.policy.runner import ToolRunner

try:
    from langchain_core.messages import ToolMessage
    from langchain_core.runnables import RunnableConfig, ensure_config
    from langchain_core.tools import BaseTool, StructuredTool
    from langgraph.prebuilt import ToolNode
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command, interrupt
except ModuleNotFoundError as missing:  # one clear line in a notebook, not a traceback
    raise MissingFramework('langgraph', 'langgraph', missing) from None

__all__ = ["tool_node", "tools"]


def tool_node(runner: ToolRunner, *, name: str = "tools") -> ToolNode:
    """A ``ToolNode`` whose every call goes through ``runner``."""
    approved = _Approved(runner)

    def wrap(request: ToolCallRequest,
             execute: Callable[[ToolCallRequest], ToolMessage | Command[Any]]) -> ToolMessage:
        call = request.tool_call
        tool, call_id = call["name"], call.get("id")
        if _irreversible(runner, tool):
            key = _key(request)
            if approved.get(key) is not None or runner.budget.can_spend(Effect.IRREVERSIBLE_WRITE):
                if _decision(tool, call) is not True:
                    return _message(FORBIDDEN, tool, call_id)
                return _message(approved.run(key, tool, call["args"], call_id).result(), tool, call_id)
        return _message(runner.call(tool, call["args"], call_id=call_id), tool, call_id)

    async def awrap(
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage:
        call = request.tool_call
        tool, call_id = call["name"], call.get("id")
        if _irreversible(runner, tool):
            key = _key(request)
            if approved.get(key) is not None or runner.budget.can_spend(Effect.IRREVERSIBLE_WRITE):
                if _decision(tool, call) is not True:  # before any await: calls keep their order
                    return _message(FORBIDDEN, tool, call_id)
                settled = await asyncio.wrap_future(approved.run(key, tool, call["args"], call_id))
                return _message(settled, tool, call_id)
        return _message(await runner.acall(tool, call["args"], call_id=call_id), tool, call_id)

    return _InModelOrder(tools(runner), name=name, handle_tool_errors=False,
                         wrap_tool_call=wrap, awrap_tool_call=awrap)


class _InModelOrder(ToolNode):
    """A ``ToolNode`` whose sync path runs its tool calls one after another, in the model's order.

    LangGraph gives a resumed node its resume values by the *order* of its ``interrupt()``
    calls. The stock sync path runs a node's tool calls on parallel threads, so two
    irreversible calls could reach ``interrupt()`` in either order and one could receive the
    answer a person gave for the other. In order, each answer goes to the call it was shown
    for. (The async path already starts its calls in order, and each reaches ``interrupt()``
    before it awaits anything.)
    """

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        config["max_concurrency"] = 1
        return super().invoke(input, config, **kwargs)


def tools(runner: ToolRunner) -> list[BaseTool]:
    """The registry's tools as LangChain tools (name, description, JSON Schema), each calling
    the runner: bound to a chat model they describe the tools; invoked outside the node an
    irreversible write only answers ``approval_required`` (nobody approved it)."""
    return [_tool(runner, spec) for spec in runner.registry]


def _tool(runner: ToolRunner, spec: ToolSpec) -> BaseTool:
    name = spec.name

    def run(**arguments: Any) -> str:
        return model_text(runner.call(name, arguments))

    async def arun(**arguments: Any) -> str:
        return model_text(await runner.acall(name, arguments))

    return StructuredTool.from_function(
        func=run, coroutine=arun, name=name, description=spec.description,
        args_schema=dict(spec.parameters or {}),
    )


def _irreversible(runner: ToolRunner, tool: Any) -> bool:
    spec = runner.registry.get(tool) if isinstance(tool, str) else None
    return spec is not None and spec.effect is Effect.IRREVERSIBLE_WRITE


def _key(request: ToolCallRequest) -> tuple[str, ...]:
    """One tool call of one conversation: the graph's thread and namespace, the model's
    tool-call id, the tool and its arguments (canonical JSON)."""
    call = request.tool_call
    configurable = (request.runtime.config or {}).get("configurable", {}) if request.runtime else {}
    try:
        arguments = canonical_json(call["args"])
    except (TypeError, ValueError):
        arguments = repr(call["args"])
    return (str(configurable.get("thread_id", "")), str(configurable.get("checkpoint_ns", "")),
            str(call.get("id") or ""), str(call["name"]), arguments)


class _Approved:
    """The approved calls this node settled (or is settling), by conversation and tool call.

    A re-run node asks for each approved call again, and gets:

    - the run still under way, when another call of the same node stopped the node with
      ``interrupt()`` while this write was settling (the re-run joins it instead of reading
      ``in_progress``). Each settling runs on its own thread, which an abandoned node cannot
      cancel;
    - the settled result, even when the budget is spent by now: a known call asks
      ``interrupt()`` again (which returns the stored answer, so later calls keep their
      answers' order) instead of being refused ``budget_exhausted`` for a write that ran.

    The most recent :data:`KEEP` settled calls are kept; an older one falls back to the
    runner, which replays a settled approval while budget remains.
    """

    KEEP = 1024

    def __init__(self, runner: ToolRunner) -> None:
        self.runner = runner
        self._lock = threading.Lock()
        self._calls: OrderedDict[tuple[str, ...], Future[dict[str, Any]]] = OrderedDict()

    def get(self, key: tuple[str, ...]) -> Future[dict[str, Any]] | None:
        with self._lock:
            return self._calls.get(key)

    def run(self, key: tuple[str, ...], tool: str, arguments: Any,
            call_id: str | None) -> Future[dict[str, Any]]:
        """The settlement of this approved call: the one under way or done, else a new one."""
        with self._lock:
            known = self._calls.get(key)
            if known is not None:
                self._calls.move_to_end(key)
                return known
            future: Future[dict[str, Any]] = Future()
            self._calls[key] = future
            while len(self._calls) > self.KEEP:
                oldest = next(iter(self._calls))
                if not self._calls[oldest].done():
                    break
                del self._calls[oldest]
        worker = threading.Thread(target=self._settle, args=(future, tool, arguments, call_id),
                                  name="agentkit-langgraph-approved", daemon=True)
        worker.start()
        return future

    def _settle(self, future: Future[dict[str, Any]], tool: str, arguments: Any,
                call_id: str | None) -> None:
        try:
            future.set_result(call_approved(self.runner, tool, arguments, call_id))
        except BaseException as exc:  # never raised for model input; passed on, not lost
            future.set_exception(exc)


def _decision(tool: str, call: Any) -> Any:
    """The person's answer to this call, through LangGraph's ``interrupt`` (the resume value)."""
    return interrupt({"tool": tool, "arguments": call["args"], "tool_call_id": call.get("id")})


def _message(result: dict[str, Any], tool: str, call_id: str | None) -> ToolMessage:
    return ToolMessage(content=model_text(result), name=tool, tool_call_id=call_id or "",
                       status="success" if result.get("ok") else "error")
