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
on resume: the approved write then finds its settled approval and replays its result, so it
runs once however often the node re-runs (a read in the same node may run again). With the
budget spent no person is asked: the call answers ``budget_exhausted``. Importing this module
imports LangGraph (extra ``agentkit[langgraph]``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, interrupt

from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.faces.framework import FORBIDDEN, call_approved, model_text
from agentkit.policy.runner import ToolRunner

__all__ = ["tool_node", "tools"]


def tool_node(runner: ToolRunner, *, name: str = "tools") -> ToolNode:
    """A ``ToolNode`` whose every call goes through ``runner``."""
    settling = _Settling(runner)

    def wrap(request: ToolCallRequest,
             execute: Callable[[ToolCallRequest], ToolMessage | Command[Any]]) -> ToolMessage:
        call = request.tool_call
        tool, call_id = call["name"], call.get("id")
        if _asks_a_person(runner, tool):
            if _decision(tool, call) is not True:
                return _message(FORBIDDEN, tool, call_id)
            return _message(settling.run(tool, call["args"], call_id).result(), tool, call_id)
        return _message(runner.call(tool, call["args"], call_id=call_id), tool, call_id)

    async def awrap(
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage:
        call = request.tool_call
        tool, call_id = call["name"], call.get("id")
        if _asks_a_person(runner, tool):
            if _decision(tool, call) is not True:
                return _message(FORBIDDEN, tool, call_id)
            settled = await asyncio.wrap_future(settling.run(tool, call["args"], call_id))
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


def _asks_a_person(runner: ToolRunner, tool: Any) -> bool:
    spec = runner.registry.get(tool) if isinstance(tool, str) else None
    # With the budget spent nobody is asked: the runner answers budget_exhausted.
    return (spec is not None and spec.effect is Effect.IRREVERSIBLE_WRITE
            and runner.budget.can_spend(spec.effect))


class _Settling:
    """The approved writes being settled now, by tool-call id.

    When one approved call of a node is running and another call of the same node stops the
    node with ``interrupt()``, LangGraph abandons the node and re-runs it on the next resume,
    possibly while the first write is still settling (its approval ``in_progress``). The
    re-run then joins that settling instead of asking again, so the model reads the write's
    own result. Each settling runs on its own thread, which an abandoned node cannot cancel.
    """

    def __init__(self, runner: ToolRunner) -> None:
        self.runner = runner
        self._lock = threading.Lock()
        self._running: dict[str, Future[dict[str, Any]]] = {}

    def run(self, tool: str, arguments: Any, call_id: str | None) -> Future[dict[str, Any]]:
        key = call_id or ""
        with self._lock:
            running = self._running.get(key) if key else None
            if running is not None:
                return running
            future: Future[dict[str, Any]] = Future()
            if key:
                self._running[key] = future
        worker = threading.Thread(target=self._settle, args=(future, key, tool, arguments, call_id),
                                  name="agentkit-langgraph-approved", daemon=True)
        worker.start()
        return future

    def _settle(self, future: Future[dict[str, Any]], key: str, tool: str, arguments: Any,
                call_id: str | None) -> None:
        try:
            future.set_result(call_approved(self.runner, tool, arguments, call_id))
        except BaseException as exc:  # never raised for model input; passed on, not lost
            future.set_exception(exc)
        finally:
            with self._lock:
                if key and self._running.get(key) is future:
                    del self._running[key]


def _decision(tool: str, call: Any) -> Any:
    """The person's answer to this call, through LangGraph's ``interrupt`` (the resume value)."""
    return interrupt({"tool": tool, "arguments": call["args"], "tool_call_id": call.get("id")})


def _message(result: dict[str, Any], tool: str, call_id: str | None) -> ToolMessage:
    return ToolMessage(content=model_text(result), name=tool, tool_call_id=call_id or "",
                       status="success" if result.get("ok") else "error")
