"""The Temporal face: the registry's tools as Temporal activities, every call through agentkit.

    >>> from temporalio.worker import Worker
    >>> from agentkit.faces.temporal import activities
    >>> worker = Worker(client, task_queue="agents", workflows=[PaymentWorkflow],
    ...                 activities=activities(registry, SQLiteIdempotencyStore("agentkit.sqlite3")))

Four activities: ``agentkit_call(name, arguments) -> dict``, ``agentkit_approve(approval_id)``,
``agentkit_deny(approval_id)`` and ``agentkit_close()``, which the workflow calls as it ends
(in a ``finally``): what it left pending is settled ``forbidden``, so a workflow that ended
leaves no approval pending. Temporal runs an activity **at least once**: it retries a
failed or timed-out attempt (by default without limit), and a timed-out attempt may still be
running when the next one starts. Each attempt goes through one runner per workflow, whose task
id is the workflow id, so every attempt of a call has the same idempotency key, and whose call
id is ``"{workflow_id}:{activity_id}"`` (the same on every retry). The result dict is the
activity's result, never an exception, with one exception: while an earlier attempt of the same
call still runs (``in_progress``), or nothing could start yet (``busy``), the activity raises a
retryable ``ApplicationError`` (type: the code, details: the result), so Temporal retries after
its backoff and the later attempt replays the write or settles it by the status lookup. Give
the activity a ``start_to_close_timeout`` longer than twice the tool's ``timeout_seconds`` (the
boundary's worst case), so a live attempt is not timed out by the server.

An approval belongs to the workflow that asked (its record's ``workflow``: ``{"engine":
"temporal", "id": …}``): only that workflow's ``agentkit_approve``/``agentkit_deny`` decide it;
any other runner's ``approve``/``deny`` is refused (``forbidden``; it stays pending), and the
approvals CLI refuses it (exit 2) and says to signal the workflow. A person's decision reaches
the workflow as a Signal. The workflow (Temporal's sandbox runs it;
it never touches agentkit itself, only the activities by name)::

    from datetime import timedelta

    from temporalio import workflow

    CALL = {"start_to_close_timeout": timedelta(seconds=30)}


    @workflow.defn
    class PaymentWorkflow:
        def __init__(self) -> None:
            self.decisions: dict[str, bool] = {}

        @workflow.signal
        def decide(self, approval_id: str, approved: bool) -> None:
            self.decisions[approval_id] = approved

        @workflow.run
        async def run(self, to: str, cents: int) -> dict:
            try:
                asked = await workflow.execute_activity(
                    "agentkit_call", args=["send_payment", {"to": to, "cents": cents}], **CALL)
                if asked.get("error") != "approval_required":
                    return asked
                approval_id = asked["approval_id"]
                await workflow.wait_condition(lambda: approval_id in self.decisions)
                settle = "agentkit_approve" if self.decisions[approval_id] is True else "agentkit_deny"
                return await workflow.execute_activity(settle, approval_id, **CALL)
            finally:  # ended (returned, raised or cancelled): nothing left pending
                await workflow.execute_activity("agentkit_close", **CALL)

and a person's channel (a web page, a CLI) signals it::

    await client.get_workflow_handle(workflow_id).signal(PaymentWorkflow.decide,
                                                         args=[approval_id, True])

The workflow id is the business identity of the run: a new run under the same id replays what
the earlier one settled. Importing this module imports the Temporal SDK (extra
``agentkit[temporal]``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agentkit.boundary.registry import ToolRegistry
from agentkit.faces.durable import STILL_RUNNING, WorkflowRunners, call_id
from agentkit.faces.framework import MissingFramework
from agentkit.policy.runner import ToolRunner

try:
    from temporalio import activity
    from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
except ModuleNotFoundError as missing:  # one clear line in a notebook, not a traceback
    raise MissingFramework("temporal", "temporal", missing, "engine") from None

__all__ = ["ToolActivities", "activities"]


def activities(registry: ToolRegistry, store: Any, **runner_options: Any) -> list[Callable[..., Any]]:
    """The four activity definitions, to pass to a ``Worker(activities=...)``:
    ``agentkit_call``, ``agentkit_approve``, ``agentkit_deny`` and ``agentkit_close`` (the
    bound methods of one :class:`ToolActivities`, whose ``runner_for`` each has as
    ``__self__``)."""
    tools = ToolActivities(registry, store, **runner_options)
    return [tools.call, tools.approve, tools.deny, tools.close]


class ToolActivities:
    """The registry's tools as four Temporal activities sharing one runner per workflow.

    ``store`` is a durable agentkit store every worker shares (SQLite on one machine,
    PostgreSQL for several hosts). ``runner_options`` are :class:`~agentkit.ToolRunner`'s
    keywords, plus ``budget`` (a :class:`~agentkit.Budget` for all workflows, or a function of
    the workflow id giving each its own; in memory); a ``context`` gives the principal and
    scopes, its task id becomes the workflow id. The activities are ``async``: they run on the
    worker's event loop, a sync handler on agentkit's worker threads, so the Worker needs no
    ``activity_executor``.
    """

    def __init__(self, registry: ToolRegistry, store: Any, **runner_options: Any) -> None:
        budget = runner_options.pop("budget", None)
        self._runners = WorkflowRunners(registry, store, budget, runner_options, engine="temporal")
        self.registry = registry
        self.store = store

    def runner_for(self, workflow_id: str) -> ToolRunner:
        """The runner of workflow ``workflow_id`` (its task id), from anywhere."""
        return self._runners.get(workflow_id)

    @activity.defn(name="agentkit_call")
    async def call(self, name: Any, arguments: Any) -> dict[str, Any]:
        """One model tool call through agentkit's policy."""
        runner, this = self._here()
        return _answer(await runner.acall(name, arguments, call_id=this))

    @activity.defn(name="agentkit_approve")
    async def approve(self, approval_id: Any) -> dict[str, Any]:
        """A person approved: run the call once (again: the same result)."""
        runner, this = self._here()
        return _answer(await runner.aapprove(approval_id, call_id=this))

    @activity.defn(name="agentkit_deny")
    async def deny(self, approval_id: Any) -> dict[str, Any]:
        """A person denied: settle the call as ``forbidden``; nothing runs."""
        runner, this = self._here()
        return _answer(await runner.adeny(approval_id, call_id=this))

    @activity.defn(name="agentkit_close")
    async def close(self) -> list[str]:
        """The calling workflow ends (call it in the workflow's ``finally``: returned, raised
        or cancelled): every approval it still has pending is settled ``forbidden``, for
        nothing will ever decide it; returns their ids. Idempotent: a retry settles nothing
        more. A store that fails raises, so Temporal retries it."""
        info = activity.info()
        if info.workflow_id is None:
            return []
        return await asyncio.to_thread(self._runners.close, info.workflow_id, strict=True)

    def _here(self) -> tuple[ToolRunner, str]:
        """This activity's runner and call id: its workflow's, and
        ``workflow_id:activity_id``. An activity started on its own (no workflow) is named by
        its own id, which its retries keep."""
        info = activity.info()
        if info.workflow_id is None:
            return self._runners.get(f"activity:{info.activity_id}", owned=False), info.activity_id
        return self._runners.get(info.workflow_id), call_id(info.workflow_id, info.activity_id)


def _answer(result: dict[str, Any]) -> dict[str, Any]:
    """The result as the activity's result, except a call that could not start yet: a
    retryable ``ApplicationError`` (benign: Temporal logs it at DEBUG, as an expected retry)."""
    code = result.get("error")
    if code in STILL_RUNNING:
        raise ApplicationError(
            f"agentkit: {code} (an earlier attempt of this call may still be running; "
            "nothing ran in this one)",
            result, type=code, non_retryable=False, category=ApplicationErrorCategory.BENIGN)
    return result
