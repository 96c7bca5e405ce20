"""The Pydantic AI face: the registry's tools as a toolset, ``Agent(model, toolsets=[...])``.

    >>> from pydantic_ai import Agent, DeferredToolRequests
    >>> from agentkit.faces.pydantic_ai import toolset
    >>> agent = Agent(model, toolsets=[toolset(runner)], output_type=[str, DeferredToolRequests])

Every call goes through ``runner.acall`` with Pydantic AI's ``tool_call_id`` as the runner's
``call_id``, so agentkit's policy is the only one: the tools have no Pydantic AI ``timeout``
(whose expiry becomes a retry prompt while the abandoned thread's write still lands) and
``max_retries=0``; arguments go to the boundary's own schema check unvalidated, and the call
never raises, so the model reads the result's ``data`` or the JSON text of a failed result as a
normal tool return, never a retry prompt.

An irreversible write raises :class:`~pydantic_ai.ApprovalRequired`: the run ends with
``DeferredToolRequests``, a person decides, and the next run gets
``DeferredToolResults(approvals={tool_call_id: approved() | denied()})``. After an approval the
tool asks agentkit for its approval of exactly these arguments and settles it, so the write runs
once; :func:`denied` sends the model agentkit's ``forbidden``. With the budget spent no person
is asked: the call answers ``budget_exhausted``. Importing this module imports Pydantic AI
(extra ``agentkit[pydantic-ai]``).

**Each conversation is a task of its own.** A call runs under the runner's task for its run's
``RunContext.conversation_id`` (:func:`~agentkit.faces.framework.task_runner`): Pydantic AI's
own identity of a conversation, the ``conversation_id`` given to ``Agent.run``, else the most
recent one on ``message_history``, else a new one (inside a durable workflow, one derived from
the run id). So its idempotency keys and approvals are its own: two conversations asking for
the same refund each get it, once; a run that continues a conversation (the resume with
``DeferredToolResults``, a later turn, another process that loads the saved history or passes
the same ``conversation_id``) finds its own. A run that starts without history and without a
``conversation_id`` is a new conversation. (A ``RunContext`` without one, made by hand or by
an older Pydantic AI, runs under the runner's own task id, which serves one conversation at a
time.)
"""

from __future__ import annotations

from typing import Any, Literal

from agentkit.boundary.spec import Effect
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
    from pydantic_ai import ApprovalRequired, RunContext, ToolApproved, ToolDenied
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
except ModuleNotFoundError as missing:  # one clear line in a notebook, not a traceback
    raise MissingFramework('pydantic_ai', 'pydantic-ai', missing) from None

__all__ = ["AgentkitToolset", "approved", "denied", "toolset"]

#: The key under which arguments that are not a JSON object travel to ``call_tool``.
_RAW = "\x00agentkit raw arguments"


class _Unchecked:
    """The tools' argument "validator": it passes the model's arguments on as they are, so the
    boundary checks them and answers ``invalid_arguments`` as a tool result. (A failed Pydantic
    validation would be a retry prompt, and with ``max_retries=0`` the end of the run.)"""

    def validate_json(self, input: str | bytes | bytearray, *,
                      allow_partial: bool | Literal["off", "on", "trailing-strings"] = False,
                      **kwargs: Any) -> Any:
        return self.validate_python(parse_arguments(input))

    def validate_python(self, input: Any, *,
                        allow_partial: bool | Literal["off", "on", "trailing-strings"] = False,
                        **kwargs: Any) -> Any:
        return input if isinstance(input, dict) else {_RAW: input}


_UNCHECKED = _Unchecked()


class AgentkitToolset(AbstractToolset[Any]):
    """One Pydantic AI tool per registered tool, each call through the runner."""

    def __init__(self, runner: ToolRunner, *, id: str | None = None) -> None:
        self.runner = runner
        self._id = id

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        return {
            spec.name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=spec.name,
                    description=spec.description,
                    parameters_json_schema=dict(spec.parameters or {}),
                    timeout=None,  # agentkit's timeout is the only one
                ),
                max_retries=0,
                args_validator=_UNCHECKED,
            )
            for spec in self.runner.registry
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> str:
        arguments: Any = tool_args[_RAW] if set(tool_args) == {_RAW} else tool_args
        # the conversation's own keys and approvals (getattr: an older Pydantic AI names none)
        runner = task_runner(self.runner, getattr(ctx, "conversation_id", None))
        spec = runner.registry.get(name)
        if spec is not None and spec.effect is Effect.IRREVERSIBLE_WRITE:
            # Only the host's DeferredToolResults sets tool_call_approved: the model's own
            # call can never approve itself.
            if ctx.tool_call_approved:
                return model_text(await run_approved(runner, name, arguments, ctx.tool_call_id))
            if runner.budget.can_spend(spec.effect):  # spent: nobody is asked
                raise ApprovalRequired()
        return model_text(await runner.acall(name, arguments, call_id=ctx.tool_call_id))


def toolset(runner: ToolRunner, *, id: str | None = None) -> AgentkitToolset:
    """The registry's tools as a Pydantic AI toolset, every call through ``runner``."""
    return AgentkitToolset(runner, id=id)


def approved() -> ToolApproved:
    """A person's approval, for ``DeferredToolResults(approvals={tool_call_id: approved()})``."""
    return ToolApproved()


def denied() -> ToolDenied:
    """A person's rejection: nothing runs, and the model reads agentkit's ``forbidden``."""
    return ToolDenied(forbidden_text())
