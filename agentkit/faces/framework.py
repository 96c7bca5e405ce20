"""What the three framework faces share: the model's view of a result, and the approved run.

The faces (:mod:`~agentkit.faces.openai_agents`, :mod:`~agentkit.faces.pydantic_ai`,
:mod:`~agentkit.faces.langgraph`) are thin: each turns one framework tool call into one
``runner.acall`` and the result dict into what the model reads. This module holds the few
lines they would otherwise repeat, and imports no framework.

**Each conversation is a task of its own.** An idempotency key is the task id, the tool and
the arguments' hash, so two conversations that share a task id share their keys: the second
one's identical refund would replay the first one's receipt (no approval asked, no refund
made). A face serving several conversations therefore runs each call under
:func:`task_runner` of its conversation: the runner it was given, with the conversation's
identity as the task id (LangGraph's ``thread_id``, Pydantic AI's ``conversation_id``, the
id an Agents SDK host names; the durable engines' faces use the workflow id). A call that
names no conversation runs under the runner's own task id, which serves one conversation at
a time.

A face imported without its framework (or engine: the durable faces use it too) raises
:class:`MissingFramework`: a ``ModuleNotFoundError`` that says what to install, which a notebook
shows as that one line, never a traceback (a learner whose ``make lab`` left the frameworks out
meets it in the first cell of notebook 08 or 10).
"""

from __future__ import annotations

import json
from typing import Any

from agentkit.boundary.errors import ErrorCode, failure
from agentkit.boundary.schema import MAX_DEPTH
from agentkit.policy.runner import ToolRunner


class MissingFramework(ModuleNotFoundError):
    """A framework face imported where its framework is not installed.

    ``name`` is the missing module. IPython shows an exception's ``_render_traceback_()``
    instead of its traceback: in a notebook the learner reads the one line saying what to
    install, and Run All stops there, before any cell that needs the framework.
    """

    def __init__(
        self, face: str, extra: str, missing: ModuleNotFoundError, kind: str = "framework"
    ) -> None:
        module = missing.name or str(missing)
        super().__init__(
            f"agentkit.faces.{face} needs the {extra} {kind}, which is not installed here "
            f"(no module named {module!r}). In the agentkit repository run `make frameworks` "
            f"(the frameworks of notebook 08 and the engines of notebook 10, left out of `make lab`); "
            f"elsewhere "
            f"`pip install 'agentkit[{extra}]'`. Then restart the kernel.",
            name=module,
        )

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


#: What the model reads when a person rejected a call in the framework's approval flow:
#: agentkit's ``forbidden`` (nothing ran; asking again will not help).
FORBIDDEN: dict[str, Any] = {**failure(ErrorCode.FORBIDDEN), "attempts": 0, "replayed": False}


def model_text(result: dict[str, Any]) -> str:
    """On success the result's ``data``; on failure the JSON text of the whole result dict."""
    if result.get("ok"):
        return str(result.get("data", ""))
    return json.dumps(result, ensure_ascii=False)


def forbidden_text() -> str:
    """The JSON text of :data:`FORBIDDEN`: the message a rejected call gives the model."""
    return json.dumps(FORBIDDEN, ensure_ascii=False)


def parse_arguments(raw: Any) -> Any:
    """A framework's JSON argument text as a value; text that is not JSON is passed on as it
    is, so the runner answers ``invalid_arguments`` (it never raises for model input). Text
    that nests deeper than the parser can follow (two kilobytes of ``[[[…`` raise
    ``RecursionError``) becomes an object nested just past the boundary's limit, so the
    model reads the boundary's own reason: too deep."""
    if not isinstance(raw, (str, bytes, bytearray)):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw
    except RecursionError:
        return too_deep()


def too_deep() -> dict[str, Any]:
    """Arguments that nest one level past :data:`~agentkit.boundary.schema.MAX_DEPTH`: what a
    face passes on for argument text too deep to parse (the boundary refuses it as such)."""
    value: list[Any] = []
    for _ in range(MAX_DEPTH):
        value = [value]
    return {"arguments": value}


async def run_approved(
    runner: ToolRunner, name: str, arguments: Any, call_id: str | None
) -> dict[str, Any]:
    """Run an irreversible call a person approved in the framework's own flow.

    ``acall`` opens (or finds) agentkit's approval for exactly these arguments, and
    ``aapprove`` settles it: the write runs once, named by the framework's ``call_id`` in the
    trace, the log and the spans, as the call that asked was. Run again (a framework that
    re-executes a tool on resume), ``acall`` finds the settled approval and replays its
    result, so nothing runs twice; an approval left running by a process that died mid-write
    is recovered by ``acall`` itself (the status lookup settles it). Any other answer (``budget_exhausted``, ``invalid_arguments``, a
    replay) is returned as it is.
    """
    result = await runner.acall(name, arguments, call_id=call_id)
    if result.get("error") == ErrorCode.APPROVAL_REQUIRED.value:
        return await runner.aapprove(result["approval_id"], call_id=call_id)
    return result


def task_runner(runner: ToolRunner, task_id: Any) -> ToolRunner:
    """``runner`` for one conversation: the same runner under the task id ``task_id``.

    It shares everything of ``runner`` (registry, store, budget, principal and scopes,
    backoff, sleeps, clock, approvals, observers and trace: a call through it is told to
    ``runner``'s observers and kept in ``runner.trace``); only the task id of its context
    differs, so the conversation's idempotency keys and approvals are its own, and the same
    conversation finds them again after a restart. ``task_id`` is the host's conversation
    identity (any value, as its ``str``); None or ``""`` (a host that names no conversation)
    is ``runner`` itself, whose task id serves one conversation at a time. Cheap (a policy
    object over the shared parts): made per call, never kept.
    """
    if task_id is None:
        return runner
    name = task_id if isinstance(task_id, str) else str(task_id)
    if not name or name == runner.context.task_id:
        return runner
    return runner.for_task(name)
