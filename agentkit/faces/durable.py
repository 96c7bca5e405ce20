"""What the durable-engine faces share: one runner per workflow, named by the workflow id.

The engine faces (:mod:`~agentkit.faces.dbos`, :mod:`~agentkit.faces.temporal`) run every
tool call inside a workflow, as a step or an activity that the engine may run more than once.
Each workflow gets its own :class:`~agentkit.policy.runner.ToolRunner` whose task id is the
workflow id, so a call's idempotency key is the same in every attempt, in every process and
after every recovery, and differs between workflows. The workflow id is the business identity
of the run: a new run under the same id replays what the earlier one settled.

The workflow also owns the approvals its runner opens (each record's ``workflow``:
``{"engine": …, "id": workflow_id}``): a decision on one goes to that workflow, never to a
plain runner (docs/design.md#approvals), and when the workflow ends :meth:`WorkflowRunners.close`
settles what it left pending as ``forbidden``.

This module imports no engine.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from agentkit.boundary.context import CallContext
from agentkit.boundary.errors import ErrorCode, failure
from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.spec import Effect
from agentkit.policy.budget import Budget
from agentkit.policy.drivers import run_store_steps
from agentkit.policy.results import finish
from agentkit.policy.runner import ToolRunner
from agentkit.policy.stores.algorithm import StoreError
from agentkit.policy.stores.memory import IdempotencyStore

__all__ = ["STILL_RUNNING", "WorkflowRunners", "call_id"]

log = logging.getLogger("agentkit")

#: The codes that say an earlier attempt of the same call may still be running (``in_progress``)
#: or that nothing could start yet (``busy``): nothing ran, so the engine may try again later.
STILL_RUNNING = frozenset({ErrorCode.IN_PROGRESS.value, ErrorCode.BUSY.value})

#: A budget for every workflow (shared), or a function of the workflow id giving each its own.
BudgetChoice = Budget | Callable[[str], Budget] | None


def call_id(workflow_id: str, part: object) -> str:
    """The call id of one step or activity: ``"{workflow_id}:{step or activity id}"``, the same
    in every attempt of it."""
    return f"{workflow_id}:{part}"


class WorkflowRunners:
    """The runner of each workflow, made on first use and kept for the most recent :data:`KEEP`
    workflows (an older one is made again when it comes back: its policy and its keys live in
    the store, only its in-memory trace starts afresh).

    ``budget``: a :class:`~agentkit.Budget` that all workflows share, a function of the
    workflow id that gives each workflow its own, or None (unlimited). A budget lives in
    memory: a worker that recovers a workflow after a crash starts it with a fresh one.
    ``options`` are :class:`~agentkit.ToolRunner`'s keywords (``sleep``, ``clock``,
    ``approval_ttl_seconds``, ...), checked now; a ``context`` gives the principal and scopes,
    and its task id is replaced by the workflow id. ``engine`` (``"dbos"``, ``"temporal"``)
    names the engine whose workflows own the approvals their runners open; None: no owner.
    """

    KEEP = 1024

    def __init__(self, registry: ToolRegistry, store: Any, budget: BudgetChoice,
                 options: Mapping[str, Any], *, engine: str | None = None) -> None:
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"registry must be a ToolRegistry, not {type(registry).__name__}")
        if store is None:
            raise ValueError("a durable face needs a durable store (SQLiteIdempotencyStore, "
                             "PostgresIdempotencyStore): the workers, and the process that "
                             "recovers a crashed one, must all see the same keys")
        if isinstance(store, IdempotencyStore):
            log.warning("a durable face on the in-memory IdempotencyStore: its keys die with "
                        "this process, so a workflow recovered elsewhere may write again; give "
                        "it a SQLiteIdempotencyStore or a PostgresIdempotencyStore")
        options = dict(options)
        context = options.pop("context", None) or CallContext()
        if not isinstance(context, CallContext):
            raise TypeError(f"context must be a CallContext, not {type(context).__name__}")
        # An unknown or misspelled option fails here, not inside the first workflow.
        inspect.signature(ToolRunner).bind(registry, store=store, budget=None, context=context,
                                           **options)
        if budget is not None and not isinstance(budget, Budget) and not callable(budget):
            raise TypeError("budget must be a Budget, a function of the workflow id, or None")
        self.registry = registry
        self.store = store
        self._budget = budget
        self._context = context
        self._options = options
        self.engine = engine
        self._lock = threading.Lock()
        self._runners: OrderedDict[str, ToolRunner] = OrderedDict()

    def get(self, workflow_id: str, *, owned: bool = True) -> ToolRunner:
        """The runner of workflow ``workflow_id`` (task id = the workflow id); its approvals
        are the workflow's (``owned``; False for a task that is no engine workflow)."""
        with self._lock:
            runner = self._runners.get(workflow_id)
            if runner is not None:
                self._runners.move_to_end(workflow_id)
                return runner
        runner = self._make(workflow_id, owned)
        with self._lock:
            known = self._runners.setdefault(workflow_id, runner)
            self._runners.move_to_end(workflow_id)
            while len(self._runners) > self.KEEP:
                self._runners.popitem(last=False)
        return known

    def close(self, workflow_id: str, *, strict: bool = False) -> list[str]:
        """Workflow ``workflow_id`` ended (its function returned or raised): settle every
        approval it still has pending as ``forbidden`` (nothing will ever decide them) and
        return their ids. A store that fails is logged: those stay pending, and a decision
        routed to the ended workflow settles them (the approvals CLI); ``strict`` raises it
        instead (an engine that retries the step: Temporal's ``agentkit_close``)."""
        owner = self.get(workflow_id).approvals.workflow
        if owner is None:
            return []
        denied = finish(failure(ErrorCode.FORBIDDEN), 0, False, Effect.IRREVERSIBLE_WRITE.value)
        runner = self.get(workflow_id)
        try:
            closed: list[str] = run_store_steps(self.store,
                                                runner.approvals.close_owned(owner, denied))
        except StoreError as exc:
            log.error("workflow %s ended; its pending approvals could not be settled: %s",
                      workflow_id, exc)
            if strict:
                raise
            return []
        if closed:
            log.info("workflow %s ended: its pending approvals %s settled forbidden",
                     workflow_id, ", ".join(closed))
        return closed

    def _make(self, workflow_id: str, owned: bool) -> ToolRunner:
        budget = self._budget
        if budget is not None and not isinstance(budget, Budget):
            budget = budget(workflow_id)
        context = dataclasses.replace(self._context, task_id=workflow_id)
        runner = ToolRunner(self.registry, store=self.store, budget=budget, context=context,
                            **self._options)
        if owned and self.engine is not None:
            runner.approvals.workflow = {"engine": self.engine, "id": workflow_id}
        return runner
