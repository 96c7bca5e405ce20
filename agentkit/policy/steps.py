"""The runner's policy, written once: plain steps that decide, and ask for every effect.

The chapter's rule: *a timeout does not prove a write failed.* So

- a **read** may simply be asked again: transient failures, timeouts and ``busy`` are retried
  up to ``max_attempts`` attempts in all, with jittered backoff (here, in :meth:`Policy.call`);
- a **reversible write** runs under an idempotency key that names the business intent; after
  a doubt it asks the tool's status lookup before it acts again, and it never rewrites
  blindly (:mod:`agentkit.policy.writes`);
- an **irreversible write** runs nothing on its first call: it returns ``approval_required``,
  and ``approve(id)`` runs exactly that call once, with no retry
  (:mod:`agentkit.policy.irreversible`).

Every handler attempt and status lookup spends one unit of the task's :class:`Budget`. Writes
run once per key through the idempotency store (:mod:`agentkit.policy.once`); every result is
stamped alike (:mod:`agentkit.policy.results`); a call in progress and one attempt of it are
:mod:`agentkit.policy.calls`.

How it is written (docs/design.md#drivers). Every step is a generator: it decides, and for
anything that touches the world it *yields* a request (:mod:`agentkit.policy.effects`: run an
attempt, ask the status lookup, pause, one store step) and receives the answer, or the
exception, at the ``yield``. At each step worth watching it tells the runner's observers a
:class:`~agentkit.policy.events.CallEvent` (not an effect: nothing answers it, and the steps
run in the driver's frame, on the caller's thread or task, where events must be told). It
performs no I/O itself, so one policy serves two drivers (:mod:`agentkit.policy.drivers`):
``call``/``approve``/``deny``/``run_once`` and ``acall``/``aapprove``/``adeny`` get the same
results by construction. A failure is thrown into the step that asked, so cleanup that writes
(dropping or abandoning a claim) is a step like any other, on both drivers.

The retry loops are written out rather than borrowed from tenacity or stamina: between
attempts of a write they must call the status lookup, they must reserve and refund budget
units per attempt, and they must know whether the last attempt's handler is still running.
Those libraries retry a function; these loops have to look at what the function left behind
(tenacity's "decide, then act" split of ``iter()`` is the ancestor of these steps).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from agentkit.boundary.attempt import Attempt
from agentkit.boundary.context import CallContext
from agentkit.boundary.errors import ErrorCode, failure
from agentkit.boundary.invoke import preflight
from agentkit.boundary.redaction import safe_name
from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.spec import Effect
from agentkit.boundary.workers import WorkerUnavailable
from agentkit.policy.approvals import Approvals
from agentkit.policy.backoff import Backoff
from agentkit.policy.budget import Budget
from agentkit.policy.calls import Call, budget_refusal, interrupted, no_worker, runner_failed
from agentkit.policy.effects import Pause, Steps
from agentkit.policy.events import Observers
from agentkit.policy.irreversible import IrreversibleWrites
from agentkit.policy.results import finish, outcome
from agentkit.policy.writes import Writes

__all__ = ["Policy"]

log = logging.getLogger("agentkit")

_READ_RETRY = {ErrorCode.TRANSIENT_FAILURE.value, ErrorCode.OUTCOME_UNKNOWN.value, ErrorCode.BUSY.value}
_READ = Effect.READ
_REVERSIBLE = Effect.REVERSIBLE_WRITE
_monotonic = time.monotonic
_new = object.__new__


class Policy:
    """The policy of one runner: each public operation is a generator of steps."""

    __slots__ = ("approvals", "backoff", "budget", "context", "irreversible", "observers",
                 "registry", "store", "writes")

    def __init__(self, registry: ToolRegistry, store: Any, budget: Budget, context: CallContext,
                 backoff: Backoff, approvals: Approvals, observers: Observers) -> None:
        self.registry = registry
        self.observers = observers  # told every event, at once
        self.store = store
        self.budget = budget
        self.context = context
        self.backoff = backoff
        self.approvals = approvals
        self.writes = Writes(registry, store, budget, context, backoff)
        self.irreversible = IrreversibleWrites(registry, store, budget, context, approvals,
                                               observers, self.writes)

    def call(self, name: Any, arguments: Any, call_id: str) -> Steps[dict[str, Any]]:
        """One model tool call under its effect's policy; never raises for model input.

        The call runs between its ``call_started`` and ``call_ended`` events, framed here once
        for every effect: a bug anywhere below (a hostile argument object, a misbehaving
        policy or store) is logged and answered as a stable error, ``tool_failure`` when
        nothing ran, ``outcome_unknown`` (not retryable) when a handler attempt had started;
        a caller that goes away (an interrupt, a cancelled task) still has the end told.

        A read is asked again after a transient failure, a timeout or ``busy``, up to
        ``max_attempts`` attempts in all, with backoff. Its steps are written out right here
        (each attempt as :func:`~agentkit.policy.calls.one_attempt`'s): this is the path of
        every read, and a nested step costs a generator per level. A write goes to
        :class:`~agentkit.policy.writes.Writes` or
        :class:`~agentkit.policy.irreversible.IrreversibleWrites` once its key is known.
        """
        started = _monotonic()
        entry, checked, refusal = preflight(self.registry, name, arguments, self.context, call_id)
        observers = self.observers.begin()  # this call's listeners, fixed as it starts
        if entry is not None:
            spec = entry.spec
            tool, effect = spec.name, spec.effect._value_  # (.value, without the descriptor)
        else:
            tool, effect = safe_name(name), ""
        live = observers.live  # else only the trace listens, and it needs no start event
        if live:
            observers.emit("call_started", call_id, tool, effect, started)
        call: Call | None = None
        result: dict[str, Any]  # (a read's max_attempts >= 1: its loop sets it)
        try:
            if refusal is not None:
                observers.emit("refused", call_id, tool, effect, _monotonic(),
                               outcome=refusal["error"], since=started)
                result = finish(refusal, 0, False, effect)
            elif spec.effect is _READ:
                assert entry is not None and checked is not None
                # Call(call_id, entry, checked, observers, started), its __init__ spelled out:
                # every read makes one, and this saves it a frame
                call = _new(Call)
                call.call_id = call_id
                call.entry = entry
                call.arguments = checked
                call.observers = observers
                call.started = started
                call.spec = spec
                call.tool = tool
                call.effect = effect
                call.key = call.fingerprint = ""
                call.task_id = self.context.task_id
                call.connection = None
                call.number = call.attempts = 0
                call.attempt = None
                budget = self.budget
                number, max_attempts = 0, spec.max_attempts
                while number < max_attempts:  # (a range() costs more than this whole test)
                    number += 1
                    if number > 1:
                        yield Pause(self.backoff.delay(number - 1))
                    # one_attempt(call, budget), spelled out, but for when the attempt began:
                    # the first with the call (its checks are the attempt's own first stages,
                    # as invoke_tool's pipeline counts them); a retry after its pause
                    if not budget.spend(spec.effect):
                        result = budget_refusal(call)
                        break
                    call.number = number
                    began = started if number == 1 else _monotonic()
                    if live:
                        observers.emit("attempt_started", call_id, tool, effect, began, number)
                    call.attempt = Attempt(tool, call_id, call)
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
                    ok = result["ok"]
                    ended = attempt.finished_at  # (as in one_attempt)
                    if ended is None or attempt.timed_out:
                        ended = _monotonic()
                    observers.emit("attempt_ended", call_id, tool, effect, ended, number,
                                   "ok" if ok else outcome(result), attempt.started, "", "call",
                                   None, attempt, began)
                    if ok or result["error"] not in _READ_RETRY:
                        break
                # finish(result, ...), in place: every result here is a fresh dict of the
                # boundary's, its keys already in finish's order (tests/test_result_order.py)
                result["attempts"] = call.attempts
                result["replayed"] = False
            else:  # a write: nothing runs without its idempotency key
                assert entry is not None and checked is not None
                call = Call(call_id, entry, checked, observers, started,
                            task_id=self.context.task_id)
                if not self.writes.keys(call):
                    result = finish(failure(ErrorCode.TOOL_FAILURE), 0, False, effect)
                elif spec.effect is _REVERSIBLE:
                    result = yield from self.writes.reversible(call)
                else:
                    result = yield from self.irreversible.ask(call)
        except GeneratorExit:
            raise
        except Exception:
            log.exception("%s %s: the runner failed", call_id, tool)
            result = runner_failed(call)
        except BaseException:  # the caller went away (an interrupt, a cancelled task)
            if live:
                observers.emit("call_ended", call_id, tool, effect, time.monotonic(),
                               result=runner_failed(call))
            raise
        if live:
            observers.emit("call_ended", call_id, tool, effect, _monotonic(), 0, "", False, "",
                           "call", result)
        return result

    def approve(self, approval_id: Any, call_id: str,
                approver: str | None = None) -> Steps[dict[str, Any]]:
        """Run the one call this approval was asked for, once (see
        :meth:`~agentkit.policy.irreversible.IrreversibleWrites.approve`)."""
        return self.irreversible.approve(approval_id, call_id, approver)

    def deny(self, approval_id: Any, call_id: str,
             approver: str | None = None) -> Steps[dict[str, Any]]:
        """Settle a pending approval as ``forbidden``: nothing runs, now or later."""
        return self.irreversible.deny(approval_id, call_id, approver)

    def recheck(self, approval_id: Any, call_id: str,
                approver: str | None = None) -> Steps[dict[str, Any]]:
        """Ask the status lookup again about an approved call in doubt (see
        :meth:`~agentkit.policy.irreversible.IrreversibleWrites.recheck`)."""
        return self.irreversible.recheck(approval_id, call_id, approver)

    def pending(self) -> Steps[list[dict[str, Any]]]:
        """What a person is shown of every approval still waiting in the store."""
        return self.irreversible.pending()
