"""The OpenAI Agents SDK face: the registry's tools as ``agents.FunctionTool`` objects.

    >>> from agents import Agent
    >>> from agentkit.faces.openai_agents import function_tools
    >>> agent = Agent(name="research", model=..., tools=function_tools(runner))

Every call goes through ``runner.acall`` with the SDK's ``tool_call_id`` as the runner's
``call_id``, so agentkit's policy is the only one: the tools have no SDK timeout
(``timeout_seconds=None``) and no failure formatter, because ``on_invoke_tool`` never raises;
the model reads the result's ``data``, or the JSON text of a failed result (never the SDK's
"Please try again"). The SDK does not check the schema (``strict_json_schema=False``): the
boundary does, and answers ``invalid_arguments``.

An irreversible write has ``needs_approval``: the run stops with an interruption, a person
decides, and the run resumes. :func:`approve` and :func:`reject` settle an interruption; after
an approval the tool asks agentkit for its approval of exactly these arguments and settles it,
so the write runs once; a rejection sends the model agentkit's ``forbidden``. With the budget
spent no person is asked: the call answers ``budget_exhausted``. Importing this module imports
the SDK (extra ``agentkit[openai-agents]``).

**The host names each conversation.** The SDK hands a tool no identity of the conversation it
serves: a ``Session``'s id stays with the session, a server-side ``conversation_id`` with the
run, and ``RunConfig.group_id`` is a tracing label ("a chat thread ID" or a process). What
reaches every tool is the run's ``context``, the host's own object, kept in a ``RunState``
across interruptions. So the host names the conversation: ``function_tools(runner,
task_id=lambda ctx: ctx.context.conversation_id)`` (a function of the ``RunContextWrapper``),
or ``task_id="conversation-7"`` for tools made for one conversation. Each call then runs under
the runner's task for that conversation (:func:`~agentkit.faces.framework.task_runner`), with
its own idempotency keys and approvals: two conversations asking for the same refund each get
it, once; the same conversation again (a resumed ``RunState``, a later turn, another process)
finds its own. Without ``task_id`` (or where it gives None) every call runs under the runner's
own task id, which serves one conversation at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.faces.framework import (
    MissingFramework,
    forbidden_text,
    model_text,
    parse_arguments,
    run_approved,
    task_runner,
)
from agentkit.policy.runner import ToolRunner

try:
    from agents import FunctionTool, RunContextWrapper, RunState, Tool, ToolApprovalItem
    from agents.tool_context import ToolContext
except ModuleNotFoundError as missing:  # one clear line in a notebook, not a traceback
    raise MissingFramework('openai_agents', 'openai-agents', missing) from None

__all__ = ["approve", "function_tools", "reject"]

#: The conversation a call belongs to: a task id, or a function of the run's context that
#: gives one (None: the runner's own task id).
TaskId = str | Callable[[RunContextWrapper[Any]], Any] | None


def function_tools(runner: ToolRunner, *, task_id: TaskId = None) -> list[Tool]:
    """One ``FunctionTool`` per registered tool: its name, description and JSON Schema.

    ``task_id`` names the conversation each call belongs to (see the module's docs): a str,
    or a function of the ``RunContextWrapper`` (``lambda ctx: ctx.context.conversation_id``)
    called for every call; None (or a function that gives None) runs the call under the
    runner's own task id, which serves one conversation at a time.

    Typed as the SDK's own ``list[Tool]``, what ``Agent(tools=...)`` takes (a list is
    invariant: a ``list[FunctionTool]`` would not check there)."""
    if task_id is not None and not isinstance(task_id, str) and not callable(task_id):
        raise TypeError("task_id must be a str, a function of the run's context, or None, "
                        f"not {type(task_id).__name__}")
    return [_function_tool(runner, spec, task_id) for spec in runner.registry]


def approve(state: RunState[Any, Any], item: ToolApprovalItem) -> None:
    """A person approves one interruption; resume the run with ``Runner.run(agent, state)``."""
    state.approve(item)


def reject(state: RunState[Any, Any], item: ToolApprovalItem) -> None:
    """A person rejects one interruption: nothing runs, and the model reads ``forbidden``."""
    state.reject(item, rejection_message=forbidden_text())


def _function_tool(runner: ToolRunner, spec: ToolSpec, task_id: TaskId) -> FunctionTool:
    name = spec.name
    irreversible = spec.effect is Effect.IRREVERSIBLE_WRITE

    async def invoke(ctx: ToolContext[Any], raw: str) -> str:
        arguments = parse_arguments(raw)
        call_id = ctx.tool_call_id
        # the conversation's own keys and approvals
        task = task_runner(runner, task_id(ctx) if callable(task_id) else task_id)
        # Only the SDK's own record of a person's decision settles agentkit's approval: a
        # call the model makes can never approve itself.
        if irreversible and ctx.is_tool_approved(name, call_id) is True:
            return model_text(await run_approved(task, name, arguments, call_id))
        return model_text(await task.acall(name, arguments, call_id=call_id))

    async def needs_approval(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        # With the budget spent, no person is asked (the call answers budget_exhausted).
        return runner.budget.can_spend(spec.effect)

    return FunctionTool(
        name=name,
        description=spec.description,
        params_json_schema=dict(spec.parameters or {}),
        on_invoke_tool=invoke,
        strict_json_schema=False,
        needs_approval=needs_approval if irreversible else False,
        timeout_seconds=None,
    )
