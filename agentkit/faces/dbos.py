"""The DBOS face: the registry's tools as DBOS steps, every call through agentkit's policy.

    >>> from dbos import DBOS
    >>> from agentkit.faces.dbos import DurableTools, send_decision
    >>> tools = DurableTools(registry, SQLiteIdempotencyStore("agentkit.sqlite3"))
    >>>
    >>> @tools.workflow()  # DBOS.workflow(), and what it leaves pending is settled at its end
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

Only a settled answer is checkpointed. While an earlier run of the same call is still running
(``in_progress``: another process recovering the same workflow) or nothing could start yet
(``busy``), the step raises :class:`StillRunning` and DBOS retries it after a pause
(:attr:`DurableTools.RETRY`); the later attempt replays, or settles by the status lookup. A
step that checkpointed ``in_progress`` would end its workflow for good with nothing paid. An
approved payment whose worker died mid-step is settled on recovery at once: its approval and
its claim name the dead process, which the owner check sees gone (same host), so the status
lookup decides (the receipt, or it runs once); with no lookup, ``outcome_unknown``.

A person's decision waits durably, with DBOS's own messages: :meth:`DurableTools.wait_for_decision`
is ``DBOS.recv`` on a topic named for the approval, and :func:`send_decision` (``DBOS.send``,
or a ``DBOSClient``'s from outside the application) answers it. The wait survives a crash: the
approval lives in agentkit's store, its id in the workflow's checkpoint, and a decision sent
while no worker runs is received by the one that recovers the workflow. From a terminal,
``python -m agentkit approvals approve ID --dbos-workflow WF --dbos-system-database URL`` sends
it (:func:`deliver_decision`: it checks the workflow first, and creates nothing).

An approval belongs to the workflow that asked (its record's ``workflow``: ``{"engine": "dbos",
"id": …}``): a decision on it goes to that workflow, and any other runner's ``approve`` or
``deny`` is refused (``forbidden``; it stays pending), so a cancelled workflow's approval pays
nothing unless the workflow is resumed and receives the decision. The approvals CLI routes a
decision by the record (``--dbos-workflow`` may be left out; :func:`route_decision`), and
refuses a second one that contradicts the first. A workflow decorated with
:meth:`DurableTools.workflow` settles what it left pending as ``forbidden`` when its function
returns or raises (not when it is cancelled: it may be resumed); under a plain
``DBOS.workflow()`` that happens when a decision is routed to the ended workflow.

The workflow id is the business identity of the run (an order, an invoice): a new run under
the same id replays what the earlier one settled. Importing this module imports DBOS (extra
``agentkit[dbos]``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

from agentkit.boundary.canonical import escape_invisible
from agentkit.boundary.errors import ErrorCode, failure
from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.spec import Effect
from agentkit.faces.durable import STILL_RUNNING, BudgetChoice, WorkflowRunners, call_id
from agentkit.faces.framework import MissingFramework
from agentkit.policy.approvals import EXPIRED, PENDING, RUNNING, SETTLED, Approvals
from agentkit.policy.drivers import run_store_steps
from agentkit.policy.results import finish
from agentkit.policy.runner import ToolRunner

try:
    from dbos import DBOS, DBOSClient, StepOptions
    from dbos import error as dbos_error
except ModuleNotFoundError as missing:  # one clear line in a notebook, not a traceback
    raise MissingFramework("dbos", "dbos", missing, "engine") from None

__all__ = [
    "DecisionNotSent",
    "DurableTools",
    "StillRunning",
    "decision_topic",
    "deliver_decision",
    "route_decision",
    "send_decision",
    "send_decision_async",
]

F = TypeVar("F", bound=Callable[..., Any])


class StillRunning(Exception):
    """Raised inside a step whose call could not settle yet (``in_progress``: an earlier run
    of it is still under way; ``busy``: nothing could start): DBOS retries the step, and
    never checkpoints such an answer as its output. ``result`` is the runner's answer."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result)
        self.result = result

    def __str__(self) -> str:
        code = self.result.get("error") if isinstance(self.result, dict) else None
        return (f"agentkit: {code} (an earlier run of this call may still be running, or "
                "nothing could start; nothing ran in this attempt): DBOS retries the step")


def _still_running(error: BaseException) -> bool:
    return isinstance(error, StillRunning)

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

    #: How DBOS retries a step that raised :class:`StillRunning` (its ``StepOptions``): the
    #: pauses grow from ``interval_seconds`` by ``backoff_rate`` (DBOS caps each at an hour),
    #: so the attempts outlast any claim's lease (after which the status lookup settles it);
    #: past ``max_attempts`` the step fails with ``DBOSMaxStepRetriesExceeded``.
    RETRY: ClassVar[Mapping[str, float]] = {"interval_seconds": 0.5, "backoff_rate": 2.0,
                                            "max_attempts": 16}

    def __init__(self, registry: ToolRegistry, store: Any, *, budget: BudgetChoice = None,
                 **runner_options: Any) -> None:
        self._runners = WorkflowRunners(registry, store, budget, runner_options, engine="dbos")
        self.registry = registry
        self.store = store

    def workflow(self, **dbos_options: Any) -> Callable[[F], F]:
        """``DBOS.workflow(**dbos_options)`` for a function that uses these tools, which also
        settles, when the function returns or raises, every approval this workflow left
        pending as ``forbidden`` (nothing will ever decide them). A cancelled workflow (DBOS
        raises ``DBOSWorkflowCancelledError``, a ``BaseException``) keeps them: it may be
        resumed and receive the decision."""

        def decorate(function: F) -> F:
            if inspect.iscoroutinefunction(function):

                @functools.wraps(function)
                async def run_async(*args: Any, **kwargs: Any) -> Any:
                    workflow_id = DBOS.workflow_id
                    try:
                        result = await function(*args, **kwargs)
                    except Exception:
                        await asyncio.to_thread(self._ended, workflow_id)
                        raise
                    await asyncio.to_thread(self._ended, workflow_id)
                    return result

                return cast(F, DBOS.workflow(**dbos_options)(run_async))

            @functools.wraps(function)
            def run(*args: Any, **kwargs: Any) -> Any:
                workflow_id = DBOS.workflow_id
                try:
                    result = function(*args, **kwargs)
                except Exception:
                    self._ended(workflow_id)
                    raise
                self._ended(workflow_id)
                return result

            return cast(F, DBOS.workflow(**dbos_options)(run))

        return decorate

    def _ended(self, workflow_id: str | None) -> None:
        if workflow_id is not None:
            self._runners.close(workflow_id)

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
        # DBOS retries the step only when it raised StillRunning (nothing ran in it).
        known = isinstance(name, str) and self.registry.get(name) is not None
        return {"name": f"agentkit.{operation}:{name}" if known else f"agentkit.{operation}",
                "retries_allowed": True, "should_retry": _still_running,
                "interval_seconds": float(self.RETRY["interval_seconds"]),
                "backoff_rate": float(self.RETRY["backoff_rate"]),
                "max_attempts": int(self.RETRY["max_attempts"])}

    def _here(self) -> tuple[ToolRunner, str]:
        workflow_id, step_id = DBOS.workflow_id, DBOS.step_id
        assert workflow_id is not None  # DBOS.run_step runs this inside the workflow's step
        return self._runners.get(workflow_id), call_id(workflow_id, step_id)

    def _call(self, name: Any, arguments: Any) -> dict[str, Any]:
        runner, step = self._here()
        return _settled(runner.call(name, arguments, call_id=step))

    async def _acall(self, name: Any, arguments: Any) -> dict[str, Any]:
        runner, step = self._here()
        return _settled(await runner.acall(name, arguments, call_id=step))

    def _approve(self, approval_id: Any) -> dict[str, Any]:
        runner, step = self._here()
        return _settled(runner.approve(approval_id, call_id=step))

    async def _aapprove(self, approval_id: Any) -> dict[str, Any]:
        runner, step = self._here()
        return _settled(await runner.aapprove(approval_id, call_id=step))

    def _deny(self, approval_id: Any) -> dict[str, Any]:
        runner, step = self._here()
        return _settled(runner.deny(approval_id, call_id=step))

    async def _adeny(self, approval_id: Any) -> dict[str, Any]:
        runner, step = self._here()
        return _settled(await runner.adeny(approval_id, call_id=step))


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
#: The states of a workflow that has ended for good: what it left pending is settled.
ENDED_STATES = frozenset({"SUCCESS", "ERROR"})


def deliver_decision(system_database_url: str, workflow_id: str, approval_id: str,
                     approved: bool, *, dbos_system_schema: str = "dbos") -> None:
    """Send a person's decision from a process that is not the DBOS application (the approvals
    CLI): open DBOS's system database with a ``DBOSClient`` (creating nothing: a SQLite file
    must exist), check that the workflow exists and has not ended, then :func:`send_decision`.
    Anything that stops it is :class:`DecisionNotSent`, one line. (:func:`route_decision`
    also checks the approval in agentkit's store, and refuses a contradicting decision.)"""
    client = _client(system_database_url, dbos_system_schema)
    try:
        status = _status(client, system_database_url, workflow_id)
        if status not in WAITING_STATES:
            raise DecisionNotSent(f"DBOS workflow {workflow_id!r} is {status}: nothing waits "
                                  "for a decision there")
        _send(client, system_database_url, workflow_id, approval_id, approved)
    finally:
        client.destroy()


def route_decision(approvals: Approvals, approval_id: str, approved: bool, *,
                   system_database_url: str, workflow_id: str | None = None,
                   dbos_system_schema: str = "dbos",
                   approver: str | None = None) -> tuple[int, str]:
    """A person's decision on ``approval_id``, routed to the DBOS workflow that owns it (the
    approvals CLI; ``approvals`` is a runner's, on agentkit's store): returns the exit
    status and one line for the person (0: sent, or the same decision again; 1: refused for
    good; 2: it cannot be delivered now, nothing changed).

    The owner is read from the record (``workflow``; ``workflow_id``, when given, must be
    it). The first decision is kept in the record (``decision``, ``decided_at``) before it is
    sent, so a second that contradicts it is refused (1, "already approved at …") even while
    no worker runs, and the same decision again is sent again (DBOS keeps one message per
    approval). A workflow that has ended (SUCCESS, ERROR) never acts on it: the approval is
    settled ``forbidden`` (1). A cancelled workflow is told nothing and the approval stays
    pending (2): it pays only if resumed and it then receives a decision. ``approver``
    names the person (kept with the decision and in the store's audit log). Raises
    ``StoreError`` (agentkit's store) and :class:`DecisionNotSent` (DBOS's)."""
    mine = _APPROVED if approved else _DENIED
    shown = escape_invisible(approval_id)
    for _ in range(3):  # a record moved by someone else meanwhile is read again
        record = approvals.get(approval_id)
        if record is None:
            return 2, f"no pending approval {shown} in the store (unknown id, or another store)"
        owner = record.get("workflow")
        if isinstance(owner, dict):
            if owner.get("engine") != "dbos":
                return 2, (f"approval {shown} belongs to {escape_invisible(str(owner.get('engine')))}"
                           f" workflow {escape_invisible(str(owner.get('id')))}: send the decision "
                           "to it as that workflow's own message (this command reaches DBOS only)")
            owner_id = str(owner.get("id"))
        elif workflow_id is not None:
            owner_id = str(record.get("task_id"))  # a record from before approvals had owners
        else:
            return 2, (f"approval {shown} belongs to no DBOS workflow: decide it in the store "
                       "(without --dbos-system-database; give --registry)")
        wf = escape_invisible(owner_id)
        if workflow_id is not None and workflow_id != owner_id:
            return 2, (f"approval {shown} was asked by workflow {wf}, "
                       f"not {escape_invisible(workflow_id)}")
        decided = _decided_already(record, mine, shown, wf)
        if decided is not None:
            return decided
        first = record.get("decision")
        client = _client(system_database_url, dbos_system_schema)
        try:
            status = _status(client, system_database_url, owner_id)
            if status in ENDED_STATES:
                denied = finish(failure(ErrorCode.FORBIDDEN), 0, False,
                                Effect.IRREVERSIBLE_WRITE.value)
                if not run_store_steps(approvals.store, approvals.close(record, denied)):
                    continue
                return 1, (f"DBOS workflow {wf} has ended ({status}) without a decision on "
                           f"{shown}: settled forbidden, nothing ran")
            if status not in WAITING_STATES:
                return 2, (f"DBOS workflow {wf} is {status}: nothing waits for the decision; "
                           f"{shown} stays pending (resume the workflow, then decide again)")
            if first is None and not run_store_steps(
                    approvals.store, approvals.record_decision(record, mine, approver)):
                continue
            _send(client, system_database_url, owner_id, approval_id, approved)
        finally:
            client.destroy()
        again = " again" if first == mine else ""
        return 0, (f"sent{again}: {'approve' if approved else 'deny'} {shown} to DBOS workflow "
                   f"{wf} (its own step settles the call)")
    return 2, f"approval {shown} keeps changing under this decision; ask again"


_APPROVED, _DENIED = "approved", "denied"


def _decided_already(record: dict[str, Any], mine: str, shown: str,
                     wf: str) -> tuple[int, str] | None:
    """What a person is told when ``record`` is no longer open to this decision: a replay
    (0) or a refusal (1), or None when it waits for a decision."""
    state = record.get("state")
    if state == EXPIRED:
        return 1, (f"{shown}: expired at {_when(record.get('expires_at'))} before anyone "
                   "decided; nothing ran")
    result = record.get("result") if isinstance(record.get("result"), dict) else None
    if state == SETTLED and record.get("closed"):
        return 1, (f"{shown}: settled forbidden when DBOS workflow {wf} ended without a "
                   "decision; nothing ran")
    first = record.get("decision")
    if first is None and state == RUNNING:
        first = _APPROVED
    if first is None and state == SETTLED:
        first = _APPROVED if result is not None and result.get("ok") else None
    if state == SETTLED and first is None:
        return 1, f"{shown}: already settled ({_outcome(result)}); there is nothing to decide"
    if first is None or first == mine and state == PENDING:
        return None  # pending: send it (again)
    at = _when(record.get("decided_at"))
    if first != mine:
        what = "deny" if mine == _DENIED else "approval"
        return 1, f"{shown}: already {first} at {at}; a {what} now would contradict it"
    done = "its run is under way" if state == RUNNING else f"outcome: {_outcome(result)}"
    return 0, f"{shown}: already {first} at {at} ({done}); nothing sent again"


def _outcome(result: dict[str, Any] | None) -> str:
    if result is None:
        return "forbidden"
    return "ok" if result.get("ok") else str(result.get("error"))


def _when(seconds: Any) -> str:
    """A time the store keeps (seconds since the epoch) as UTC ISO 8601, or ``-``."""
    import datetime

    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{seconds:g}"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _client(system_database_url: str, dbos_system_schema: str) -> DBOSClient:
    """A ``DBOSClient`` on an existing system database (a SQLite file must exist)."""
    where = _safe_url(system_database_url)
    if system_database_url.startswith("sqlite"):
        path = system_database_url.split("///", 1)[1] if "///" in system_database_url else ""
        if not path or not Path(path).is_file():
            raise DecisionNotSent(f"{where}: no such DBOS system database (give an existing one)")
    try:
        return DBOSClient(system_database_url=system_database_url,
                          dbos_system_schema=dbos_system_schema, retry_connection_errors=False)
    except Exception as exc:
        raise DecisionNotSent(f"{where}: cannot open the DBOS system database "
                              f"({_reason(exc, system_database_url)})") from None


def _status(client: DBOSClient, system_database_url: str, workflow_id: str) -> str:
    where = _safe_url(system_database_url)
    try:
        return str(client.retrieve_workflow(workflow_id).get_status().status)
    except dbos_error.DBOSNonExistentWorkflowError:
        raise DecisionNotSent(f"no DBOS workflow {workflow_id!r} in {where}") from None
    except Exception as exc:
        raise DecisionNotSent(f"{where}: cannot read DBOS workflow {workflow_id!r} "
                              f"({_reason(exc, system_database_url)})") from None


def _send(client: DBOSClient, system_database_url: str, workflow_id: str, approval_id: str,
          approved: bool) -> None:
    try:
        send_decision(workflow_id, approval_id, approved, client=client)
    except Exception as exc:
        raise DecisionNotSent(f"{_safe_url(system_database_url)}: the decision was not sent "
                              f"({_reason(exc, system_database_url)})") from None


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


def _settled(result: dict[str, Any]) -> dict[str, Any]:
    """A step's answer, when it is settled; else :class:`StillRunning`, for DBOS to retry."""
    if result.get("error") in STILL_RUNNING:
        raise StillRunning(result)
    return result


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
