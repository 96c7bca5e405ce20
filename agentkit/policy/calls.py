"""One call in progress: what runs, what it tells its observers, and one attempt of its handler.

A :class:`Call` is the policy's record of a model's tool call (or of an approved run,
:class:`ApprovedRun`) while its steps run: the tool, the checked arguments, the idempotency
key of a write, and how many attempts it made. It is also the effect that asks a driver for
one attempt of itself (``yield call``: a :class:`~agentkit.policy.effects.RunAttempt`), so no
request object is made per attempt. :func:`one_attempt` is one handler attempt paid for from
the task's budget, told to the observers as it starts and ends; a read's retry loop
(:meth:`agentkit.policy.steps.Policy.call`) writes the same steps out in place.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from agentkit.boundary.attempt import Attempt
from agentkit.boundary.call_info import CallInfo
from agentkit.boundary.errors import ErrorCode, failure
from agentkit.boundary.registry import RegisteredTool
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.boundary.workers import WorkerUnavailable
from agentkit.policy.budget import Budget
from agentkit.policy.effects import RunAttempt, Steps
from agentkit.policy.events import Listeners
from agentkit.policy.results import finish, outcome

__all__ = [
    "ApprovedRun",
    "Call",
    "budget_refusal",
    "interrupted",
    "no_worker",
    "one_attempt",
    "runner_failed",
]

log = logging.getLogger("agentkit")

_monotonic = time.monotonic


class Call(RunAttempt):
    """One call or approved run in progress: what runs, and how many attempts it made. It is
    also the effect that asks for one attempt of itself (``yield call``)."""

    __slots__ = ("attempts", "connection", "effect", "fingerprint", "key", "number", "observers",
                 "spec", "started", "task_id", "tool")

    #: The public operation whose events this call's are (``CallEvent.operation``).
    operation = "call"

    def __init__(self, call_id: str, entry: RegisteredTool, arguments: dict[str, Any],
                 observers: Listeners, started: float, key: str = "",
                 fingerprint: str = "", *, task_id: str = "default") -> None:
        self.call_id = call_id
        self.task_id = task_id  # the caller's task (CallContext.task_id): current_call() tells it
        self.connection: Any = None  # a transactional handler's, while it runs (writes.py)
        self.started = started  # when the call (or the approval's operation) began
        self.entry = entry
        self.arguments = arguments
        self.observers = observers
        spec: ToolSpec = entry.spec
        self.spec = spec
        self.tool = spec.name
        self.effect: str = spec.effect._value_  # .value, without the enum's descriptor call
        self.key = key  # the idempotency key, for writes
        self.fingerprint = fingerprint  # the payload's identity, for writes
        self.number = 0  # steps that tried to run the handler (busy ones included)
        self.attempts = 0  # handler attempts that really started
        self.attempt: Attempt | None = None  # the latest attempt asked for (RunAttempt)

    def call_info(self) -> CallInfo:
        """What ``agentkit.current_call()`` tells this call's handler or status lookup
        (:class:`~agentkit.boundary.call_info.CallSource`): in a lookup, ``attempt`` is the
        number of the attempt it asks about (0 when it settles another process's claim)."""
        return CallInfo(self.call_id, self.task_id, self.tool, self.effect, self.key or None,
                        self.number, self.connection)

    def event(self, kind: str, number: int = 0, outcome: str = "", handler_ran: bool = False,
              attempt: Attempt | None = None, approval_id: str = "",
              since: float | None = None, at: float | None = None) -> None:
        """Tell the observers, at once (on the caller's thread or task: steps run there).
        ``since``: when the step this event ends began (by default, when the call did)."""
        self.observers.emit(kind, self.call_id, self.tool, self.effect,
                            _monotonic() if at is None else at, number, outcome, handler_ran,
                            approval_id, self.operation, None, attempt,
                            self.started if since is None else since)


class ApprovedRun(Call):
    """The one run of an approved irreversible write: its events are ``approve``'s."""

    __slots__ = ()
    operation = "approve"


def one_attempt(call: Call, budget: Budget) -> Steps[tuple[dict[str, Any], Attempt | None]]:
    """One handler attempt through the boundary, paid for from the budget: the result and
    the :class:`Attempt`, or a ``budget_exhausted`` refusal and None (nothing ran)."""
    spec = call.spec
    if not budget.spend(spec.effect):
        return budget_refusal(call), None
    call.number += 1
    began = _monotonic()
    observers = call.observers
    # call.event(...), spelled out here and below: two of every attempt's events
    if observers.live:  # (the trace needs no start event: see Listeners.live)
        observers.emit("attempt_started", call.call_id, call.tool, call.effect, began,
                       call.number, operation=call.operation)
    call.attempt = Attempt(call.tool, call.call_id, call)
    try:
        result, attempt = yield call  # a RunAttempt
    except WorkerUnavailable:  # no thread for the handler: nothing ran
        result, attempt = no_worker(call)
    except GeneratorExit:
        raise
    except BaseException:  # the caller went away mid-attempt: it may have run
        interrupted(call, began)
        raise
    if attempt.started:
        call.attempts += 1
    else:
        budget.refund(spec.effect)
    # it ended when its handler returned (the boundary's own time), unless the caller stopped
    # waiting first or nothing ran: then now
    ended = attempt.finished_at
    if ended is None or attempt.timed_out:
        ended = _monotonic()
    observers.emit("attempt_ended", call.call_id, call.tool, call.effect, ended,
                   call.number, "ok" if result.get("ok") else outcome(result),
                   attempt.started, "", call.operation, None, attempt, began)
    return result, attempt


def budget_refusal(call: Call) -> dict[str, Any]:
    """The budget has no unit left for ``call``'s next attempt: nothing runs."""
    call.event("refused", number=call.number, outcome=ErrorCode.BUDGET_EXHAUSTED.value)
    return failure(ErrorCode.BUDGET_EXHAUSTED)


def no_worker(call: Call) -> tuple[dict[str, Any], Attempt]:
    """No thread could be started for the handler: ``busy``, and nothing ran."""
    log.warning("%s %s: busy, no worker thread could be started", call.call_id, call.tool)
    return failure(ErrorCode.BUSY), Attempt(tool=call.tool, call_id=call.call_id)


def interrupted(call: Call, began: float) -> None:
    """The caller went away mid-attempt (begun at ``began``): the handler may have run, and
    may still be running (``call.attempt``); one that had not started never will (the
    boundary cancelled it), and is told as ``busy``."""
    attempt = call.attempt
    ran = attempt is None or attempt.started
    if ran:
        call.attempts += 1
    outcome = ErrorCode.OUTCOME_UNKNOWN.value if ran else ErrorCode.BUSY.value
    call.event("attempt_ended", number=call.number, outcome=outcome, handler_ran=ran,
               since=began)


def runner_failed(call: Call | None) -> dict[str, Any]:
    """The answer when the runner itself failed: honest about whether anything ran."""
    effect = call.spec.effect.value if call is not None else ""
    if call is not None and call.attempts:
        unknown = failure(ErrorCode.OUTCOME_UNKNOWN, retryable=call.spec.effect is Effect.READ)
        return finish(unknown, call.attempts, False, effect)
    return finish(failure(ErrorCode.TOOL_FAILURE), 0, False, effect)
