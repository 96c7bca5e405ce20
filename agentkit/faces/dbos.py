"""The DBOS face: the registry's tools as DBOS steps, every call through agentkit's policy.

    >>> from dbos import DBOS
    >>> from agentkit.faces.dbos import DurableTools, send_decision
    >>> tools = DurableTools(registry, SQLiteIdempotencyStore("agentkit.sqlite3"))
    >>>
    >>> @DBOS.workflow()
    ... def pay(to: str, cents: int) -> dict:
    ...     asked = tools.call("send_payment", {"to": to, "cents": cents})
    ...     if asked.get("error") != "approval_required":
    ...         return asked
    ...     approval_id = asked["approval_id"]
    ...     decision = tools.wait_for_decision(approval_id, timeout_seconds=3600)
    ...     return tools.approve(approval_id) if decision else tools.deny(approval_id)
    >>>
    >>> # elsewhere, a person's channel (a web page, the CLI, a notebook):
    >>> send_decision(workflow_id, approval_id, True)

DBOS runs a step **at least once**: a step that was running when its worker died runs again
when a new process recovers the workflow (``DBOS.launch()``). A tool call that is one step
of its own goes through agentkit's policy on that second run too: the runner's task id is the
workflow id, so the call's idempotency key is the same as the first run's, and its call id is
``"{workflow_id}:{step_id}"``. A write that finished replays its stored result; a write whose
worker died mid-way is settled by the tool's status lookup (or answers ``outcome_unknown``,
never a second blind write). DBOS's own retries are off for these steps (agentkit's policy is
the only retry policy), and ``call`` never raises for model input: every answer is the result
dict, which DBOS checkpoints as the step's output.

A person's decision waits durably, with DBOS's own messages: :meth:`DurableTools.wait_for_decision`
is ``DBOS.recv`` on a topic named for the approval, and :func:`send_decision` (``DBOS.send``,
or a ``DBOSClient``'s from outside the application) answers it. The wait survives a crash: the
approval lives in agentkit's store, its id in the workflow's checkpoint, and a decision sent
while no worker runs is received by the one that recovers the workflow. From a terminal,
``python -m agentkit approvals approve ID --dbos-workflow WF --dbos-system-database URL`` sends
it (:func:`deliver_decision`: it checks the workflow first, and creates nothing).

The workflow id is the business identity of the run (an order, an invoice): a new run under
the same id replays what the earlier one settled. Importing this module imports DBOS (extra
``agentkit[dbos]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentkit.boundary.registry import ToolRegistry
from agentkit.faces.durable import BudgetChoice, WorkflowRunners, call_id
from agentkit.faces.framework import MissingFramework
from agentkit.policy.runner import ToolRunner

try:
    from dbos import DBOS, DBOSClient, StepOptions
    from dbos import error as dbos_error
except ModuleNotFoundError as missing:  # one clear line in a notebook, not a traceback
    raise MissingFramework("dbos", "dbos", missing, "engine") from None

__all__ = [
    "DecisionNotSent",
    "DurableTools",
    "decision_topic",
    "deliver_decision",
    "send_decision",
    "send_decision_async",
]

#: What the topic of an approval's decision starts with; the approval id follows.
TOPIC_PREFIX = "agentkit.approval:"


def decision_topic(approval_id: str) -> str:
    """The ``DBOS.recv``/``DBOS.send`` topic on which the decision on ``approval_id`` travels."""
    if not isinstance(approval_id, str) or not approval_id:
        raise TypeError("approval_id must be a non-empty str (the result's approval_id)")
    return TOPIC_PREFIX + approval_id


class DurableTools:
    """The registry's tools for DBOS workflows: each call, approval and denial one DBOS step.

    ``store`` is a durable agentkit store that every worker shares (SQLite on one machine,
    PostgreSQL for several hosts; it may be the PostgreSQL server DBOS itself uses).
    ``budget``: a :class:`~agentkit.Budget` for all workflows, a function of the workflow id
    giving each workflow its own, or None (unlimited); it lives in memory, so a recovered
    workflow starts with a fresh one. ``runner_options`` are :class:`~agentkit.ToolRunner`'s
    keywords; a ``context`` gives the principal and scopes (its task id becomes the workflow
    id). Set ``approval_ttl_seconds`` longer than the longest wait for a person.
    """

    def __init__(self, registry: ToolRegistry, store: Any, *, budget: BudgetChoice = None,
                 **runner_options: Any) -> None:
        self._runners = WorkflowRunners(registry, store, budget, runner_options)
        self.registry = registry
        self.store = store

    @property
    def runner(self) -> ToolRunner:
        """The runner of the workflow running now (its task id is the workflow id)."""
        workflow_id = DBOS.workflow_id
        if workflow_id is None:
            raise RuntimeError("DurableTools.runner: no DBOS workflow is running here")
        return self._runners.get(workflow_id)

    def runner_for(self, workflow_id: str) -> ToolRunner:
        """The runner of workflow ``workflow_id``, from anywhere (a test, an admin page)."""
        return self._runners.get(workflow_id)

    # ------------------------------------------------------------------ steps

    def call(self, name: Any, arguments: Any) -> dict[str, Any]:
        """Run one model tool call as one DBOS step; never raises for model input."""
        _in_workflow("call")
        return DBOS.run_step(self._options("call", name), self._call, name, arguments)

    async def acall(self, name: Any, arguments: Any) -> dict[str, Any]:
        """:meth:`call` in an async workflow: one step, the runner's ``acall``."""
        _in_workflow("acall")
        return await DBOS.run_step_async(self._options("call", name), self._acall, name,
                                         arguments)

    def approve(self, approval_id: Any) -> dict[str, Any]:
        """Settle an approval as approved, as one step: the write runs once (a recovered
        workflow replays the step, or the store replays the settled result)."""
        _in_workflow("approve")
        return DBOS.run_step(self._options("approve"), self._approve, approval_id)

    async def aapprove(self, approval_id: Any) -> dict[str, Any]:
        """:meth:`approve` in an async workflow."""
        _in_workflow("aapprove")
        return await DBOS.run_step_async(self._options("approve"), self._aapprove, approval_id)

    def deny(self, approval_id: Any) -> dict[str, Any]:
        """Settle an approval as denied (``forbidden``), as one step: nothing runs."""
        _in_workflow("deny")
        return DBOS.run_step(self._options("deny"), self._deny, approval_id)

    async def adeny(self, approval_id: Any) -> dict[str, Any]:
        """:meth:`deny` in an async workflow."""
        _in_workflow("adeny")
        return await DBOS.run_step_async(self._options("deny"), self._adeny, approval_id)

    # ------------------------------------------------------------------ a person's decision

    def wait_for_decision(self, approval_id: str, timeout_seconds: float) -> bool | None:
        """Wait durably for a person's decision on ``approval_id`` (``DBOS.recv``): True to
        approve, False to deny, None when none came within ``timeout_seconds``. Only the
        message True approves; any other message is a refusal."""
        _in_workflow("wait_for_decision")
        return _decision(DBOS.recv(decision_topic(approval_id), timeout_seconds))

    async def await_decision(self, approval_id: str, timeout_seconds: float) -> bool | None:
        """:meth:`wait_for_decision` in an async workflow (``DBOS.recv_async``)."""
        _in_workflow("await_decision")
        return _decision(await DBOS.recv_async(decision_topic(approval_id), timeout_seconds))

    # ------------------------------------------------------------------ inside the step

    def _options(self, operation: str, name: Any = None) -> StepOptions:
        # The tool's name, when it is one of the registry's, names the step in DBOS's records.
        known = isinstance(name, str) and self.registry.get(name) is not None
        return {"name": f"agentkit.{operation}:{name}" if known else f"agentkit.{operation}",
                "retries_allowed": False}

    def _here(self) -> tuple[ToolRunner, str]:
        workflow_id, step_id = DBOS.workflow_id, DBOS.step_id
        assert workflow_id is not None  # DBOS.run_step runs this inside the workflow's step
        return self._runners.get(workflow_id), call_id(workflow_id, step_id)

    def _call(self, name: Any, arguments: Any) -> dict[str, Any]:
        runner, step = self._here()
        return runner.call(name, arguments, call_id=step)

    async def _acall(self, name: Any, arguments: Any) -> dict[str, Any]:
        runner, step = self._here()
        return await runner.acall(name, arguments, call_id=step)

    def _approve(self, approval_id: Any) -> dict[str, Any]:
        runner, step = self._here()
        return runner.approve(approval_id, call_id=step)

    async def _aapprove(self, approval_id: Any) -> dict[str, Any]:
        runner, step = self._here()
        return await runner.aapprove(approval_id, call_id=step)

    def _deny(self, approval_id: Any) -> dict[str, Any]:
        runner, step = self._here()
        return runner.deny(approval_id, call_id=step)

    async def _adeny(self, approval_id: Any) -> dict[str, Any]:
        runner, step = self._here()
        return await runner.adeny(approval_id, call_id=step)


def send_decision(workflow_id: str, approval_id: str, approved: bool, *,
                  client: DBOSClient | None = None) -> None:
    """Send a person's decision on ``approval_id`` to the workflow that waits for it.

    Without ``client`` this is ``DBOS.send`` from this (launched) DBOS application; a process
    that is not the application (a CLI, a web server of its own) passes a
    ``DBOSClient(system_database_url=...)``. The message is durable: a workflow that is not
    running now (its worker died) receives it when it is recovered. Only the first decision
    on an approval counts (the message's idempotency key is the approval); nothing the model
    sends can reach this channel.
    """
    topic, key = _message(workflow_id, approval_id, approved)
    if client is None:
        DBOS.send(workflow_id, approved, topic, idempotency_key=key)
    else:
        client.send(workflow_id, approved, topic, key)


async def send_decision_async(workflow_id: str, approval_id: str, approved: bool, *,
                              client: DBOSClient | None = None) -> None:
    """:func:`send_decision` for async hosts."""
    topic, key = _message(workflow_id, approval_id, approved)
    if client is None:
        await DBOS.send_async(workflow_id, approved, topic, idempotency_key=key)
    else:
        await client.send_async(workflow_id, approved, topic, key)


class DecisionNotSent(Exception):
    """A decision :func:`deliver_decision` could not send; its text is one line naming the
    workflow or the database (never its password) and the reason."""


#: The workflow states in which a workflow may still receive a decision.
WAITING_STATES = frozenset({"PENDING", "ENQUEUED", "DELAYED"})


def deliver_decision(system_database_url: str, workflow_id: str, approval_id: str,
                     approved: bool, *, dbos_system_schema: str = "dbos") -> None:
    """Send a person's decision from a process that is not the DBOS application (the approvals
    CLI): open DBOS's system database with a ``DBOSClient`` (creating nothing: a SQLite file
    must exist), check that the workflow exists and has not ended, then :func:`send_decision`.
    Anything that stops it is :class:`DecisionNotSent`, one line."""
    where = _safe_url(system_database_url)
    if system_database_url.startswith("sqlite"):
        path = system_database_url.split("///", 1)[1] if "///" in system_database_url else ""
        if not path or not Path(path).is_file():
            raise DecisionNotSent(f"{where}: no such DBOS system database (give an existing one)")
    try:
        client = DBOSClient(system_database_url=system_database_url,
                            dbos_system_schema=dbos_system_schema, retry_connection_errors=False)
    except Exception as exc:
        raise DecisionNotSent(f"{where}: cannot open the DBOS system database "
                              f"({_reason(exc, system_database_url)})"
                              ) from None
    try:
        try:
            status = client.retrieve_workflow(workflow_id).get_status().status
        except dbos_error.DBOSNonExistentWorkflowError:
            raise DecisionNotSent(f"no DBOS workflow {workflow_id!r} in {where}") from None
        except Exception as exc:
            raise DecisionNotSent(f"{where}: cannot read DBOS workflow {workflow_id!r} "
                                  f"({_reason(exc, system_database_url)})") from None
        if status not in WAITING_STATES:
            raise DecisionNotSent(f"DBOS workflow {workflow_id!r} is {status}: nothing waits "
                                  "for a decision there")
        try:
            send_decision(workflow_id, approval_id, approved, client=client)
        except Exception as exc:
            raise DecisionNotSent(f"{where}: the decision was not sent "
                                  f"({_reason(exc, system_database_url)})") from None
    finally:
        client.destroy()


def _safe_url(url: str) -> str:
    """The URL as it may be shown: no password."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "the DBOS system database URL (unreadable)"


def _reason(exc: BaseException, url: str) -> str:
    """The error's first 200 characters on one line, without the URL's password."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    try:
        from sqlalchemy.engine import make_url

        password = make_url(url).password
    except Exception:
        password = None
    if password:
        text = text.replace(str(password), "***")
    return text[:200]


def _message(workflow_id: str, approval_id: str, approved: bool) -> tuple[str, str]:
    if not isinstance(workflow_id, str) or not workflow_id:
        raise TypeError("workflow_id must be a non-empty str")
    if not isinstance(approved, bool):
        raise TypeError(f"approved must be True or False, not {type(approved).__name__}")
    topic = decision_topic(approval_id)
    return topic, f"agentkit.decision:{workflow_id}:{approval_id}"


def _decision(message: Any) -> bool | None:
    if message is None:
        return None
    return message is True


def _in_workflow(what: str) -> None:
    """Refuse a call made outside a workflow, or from inside a step: it would have no
    workflow id to key on, or no step of its own."""
    if DBOS.workflow_id is None:
        raise RuntimeError(f"DurableTools.{what} runs inside a @DBOS.workflow() function; "
                           "no workflow is running here")
    if DBOS.step_id is not None:
        raise RuntimeError(f"DurableTools.{what} is a step of its own: call it from the "
                           "workflow, not from inside another step")
