"""Irreversible writes: nothing runs until a person approves that exact call, and then once.

An **irreversible write** runs nothing on its first call: it returns ``approval_required``
with an approval id (:mod:`agentkit.policy.approvals`: the record, its states and their
compare-and-swap moves), and a person's ``approve(id)`` runs exactly that call once, with no
retry, through the idempotency store's claim (:mod:`agentkit.policy.once`), so an approver
that died mid-run is recovered by the status lookup, never simply run again. If that one
attempt ends in doubt (a disconnect, a timeout), the status lookup decides: done → the
receipt; not done → ``transient_failure``, not retryable; unknown or no lookup →
``outcome_unknown``. ``deny(id)`` settles the approval as ``forbidden``. With the budget
spent, no person is asked. A store that cannot be used answers ``busy``: nothing ran.

``approve`` and ``deny`` are operations of their own, between their own ``call_started`` and
``call_ended`` events (:func:`_framed`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from agentkit.boundary.context import CallContext
from agentkit.boundary.errors import ErrorCode, failure
from agentkit.boundary.invoke import preflight
from agentkit.boundary.redaction import safe_name
from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.spec import Effect
from agentkit.policy.approvals import (
    DENIED,
    PENDING,
    REFUSED,
    REPLAY,
    RUN,
    RUNNING,
    SETTLED,
    WAITING,
    Approvals,
    Step,
    public_view,
    settled_result,
)
from agentkit.policy.budget import Budget
from agentkit.policy.calls import ApprovedRun, Call
from agentkit.policy.effects import PROTECT, Steps, StoreStep
from agentkit.policy.events import Listeners, Observers
from agentkit.policy.once import once
from agentkit.policy.results import finish, outcome
from agentkit.policy.stores.algorithm import Claim, StoreError
from agentkit.policy.writes import Writes

__all__ = ["IrreversibleWrites"]

log = logging.getLogger("agentkit")

_IRREVERSIBLE = Effect.IRREVERSIBLE_WRITE.value
_SPENT = ErrorCode.BUDGET_EXHAUSTED.value


class IrreversibleWrites:
    """The steps of an irreversible write: the approval asked for, approved (one run) or
    denied, and the approvals still waiting."""

    __slots__ = ("approvals", "budget", "context", "observers", "registry", "store", "writes")

    def __init__(self, registry: ToolRegistry, store: Any, budget: Budget, context: CallContext,
                 approvals: Approvals, observers: Observers, writes: Writes) -> None:
        self.registry = registry
        self.store = store
        self.budget = budget
        self.context = context
        self.approvals = approvals
        self.observers = observers
        self.writes = writes

    def ask(self, call: Call) -> Steps[dict[str, Any]]:
        """The first call of an irreversible write: open (or find) its approval; nothing runs.
        With the budget spent no person is asked: ``budget_exhausted``, unless this intent's
        approval was settled already (its result is told, as approving again would).

        A call that finds its approval ``running`` goes the way ``approve`` does: in progress
        while its run may still be under way, and once that run's lease has passed (its
        approver died mid-write) it is recovered through the store, whose claim and status
        lookup settle it (the receipt, or ``outcome_unknown`` without a lookup), never simply
        run twice."""
        spec = call.spec
        yield PROTECT
        spent = not self.budget.can_spend(spec.effect)
        try:
            if spent:
                record = yield from self.approvals.find(call.key)
            else:
                record = yield from self.approvals.open(call.key, call.fingerprint, spec.name,
                                                        call.arguments, self.context,
                                                        budget_remaining=self.budget.remaining)
        except StoreError as exc:
            if spent:
                record = None
            else:
                log.error("%s %s: the store failed, no approval opened: %s", call.call_id,
                          spec.name, exc)
                call.event("refused", outcome=ErrorCode.BUSY.value)
                return _busy()
        if spent and (record is None or record["state"] == PENDING):
            call.event("refused", outcome=_SPENT)
            return finish(failure(ErrorCode.BUDGET_EXHAUSTED), 0, False, _IRREVERSIBLE)
        assert record is not None
        if record["fingerprint"] != call.fingerprint:
            call.event("refused", outcome=ErrorCode.IDEMPOTENCY_CONFLICT.value)
            return finish(failure(ErrorCode.IDEMPOTENCY_CONFLICT), 0, False, _IRREVERSIBLE)
        if record["state"] == SETTLED:
            return _replay_settled(call.observers, call.call_id, spec.name,
                                   settled_result(record), call.started)
        if record["state"] == RUNNING:  # approved already: the same steps as approve's
            return (yield from self._approve(record["approval_id"], call.call_id, call.started,
                                             call.observers))
        call.event("approval_asked", approval_id=record["approval_id"],
                   outcome=ErrorCode.APPROVAL_REQUIRED.value)
        asked = failure(ErrorCode.APPROVAL_REQUIRED, approval_id=record["approval_id"])
        return finish(asked, 0, False, _IRREVERSIBLE)

    def approve(self, approval_id: Any, call_id: str,
                approver: str | None = None) -> Steps[dict[str, Any]]:
        """Run the one call this approval was asked for, once; again returns the same result.

        The state machine (:mod:`agentkit.policy.approvals`) decides whether this approver
        runs it (``approver``: the person, recorded with the decision and in the audit log;
        an approval that needs more people only counts it); the run goes through the
        idempotency store, so an approver that died mid-run is recovered by the status lookup
        (or ``outcome_unknown``), never simply run again. A store that cannot be used answers
        ``busy``: nothing ran.
        """
        return (yield from self._operation("approve", self._approve, approval_id, call_id, approver))

    def _operation(self, operation: str, body: Callable[..., Steps[dict[str, Any]]],
                   approval_id: Any, call_id: str,
                   approver: str | None) -> Steps[dict[str, Any]]:
        """A person's operation on an approval (``approve``, ``deny``, ``recheck``): its
        ``body(approval_id, call_id, started, listeners, approver)`` between the operation's
        own ``call_started`` and ``call_ended`` events (:func:`_framed`)."""
        started = time.monotonic()
        yield PROTECT
        tool, effect = yield from self._named(approval_id)
        listeners = self.observers.begin()
        steps = body(approval_id, call_id, started, listeners, approver)
        return (yield from _framed(steps, operation, call_id, tool, effect, started, listeners))

    def _approve(self, approval_id: Any, call_id: str, started: float,
                 listeners: Listeners, approver: str | None = None) -> Steps[dict[str, Any]]:
        prepared: list[Call] = []
        try:
            step = yield from self.approvals.begin(
                approval_id,
                lambda record: self._prepare(call_id, record, prepared, started, listeners),
                approver)
            if step.action != RUN:
                return _answer_approval(listeners, call_id, approval_id, step, started)
            assert step.record is not None and prepared
            call, record = prepared[-1], step.record
            result = yield from self._run_approved(call, record)
        except StoreError as exc:
            log.error("%s approve %s: the store failed before anything ran: %s",
                      call_id, safe_name(approval_id), exc)
            return _busy()
        settled = finish({k: v for k, v in result.items() if k != "replayed"}, call.attempts,
                         False, _IRREVERSIBLE)
        try:
            if (yield from self.approvals.finish(record, settled, ran=call.attempts > 0)):
                call.event("approval_settled", approval_id=record["approval_id"],
                           outcome=outcome(settled))
        except StoreError as exc:  # the run's outcome is known and returned; the record waits
            log.error("%s %s: the approval could not be settled in the store: %s",
                      call_id, call.spec.name, exc)
        return finish(result, call.attempts, bool(result.get("replayed")), _IRREVERSIBLE)

    def deny(self, approval_id: Any, call_id: str,
             approver: str | None = None) -> Steps[dict[str, Any]]:
        """Settle a pending approval as ``forbidden``: nothing runs, now or later
        (``approver``: the person, recorded with the decision and in the audit log)."""
        return (yield from self._operation("deny", self._deny, approval_id, call_id, approver))

    def _deny(self, approval_id: Any, call_id: str, started: float,
              listeners: Listeners, approver: str | None = None) -> Steps[dict[str, Any]]:
        denied = finish(failure(ErrorCode.FORBIDDEN), 0, False, _IRREVERSIBLE)
        try:
            step = yield from self.approvals.deny(approval_id, denied, approver)
        except StoreError as exc:
            log.error("%s deny %s: the store failed: %s", call_id, safe_name(approval_id), exc)
            return _busy()
        if step.action == DENIED:
            assert step.record is not None
            _tell(listeners, "approval_settled", call_id, step.record["tool"], _IRREVERSIBLE,
                  started, approval_id=step.record["approval_id"],
                  outcome=ErrorCode.FORBIDDEN.value)
            return dict(denied)
        if step.action == REPLAY:
            assert step.record is not None and step.result is not None
            return _replay_settled(listeners, call_id, step.record["tool"], step.result, started)
        assert step.result is not None
        return finish(step.result, 0, False, _IRREVERSIBLE)

    def pending(self) -> Steps[list[dict[str, Any]]]:
        """What a person is shown of every approval still waiting in the store."""
        return [public_view(record) for record in (yield from self.approvals.pending())]

    def recheck(self, approval_id: Any, call_id: str,
                approver: str | None = None) -> Steps[dict[str, Any]]:
        """Ask the status lookup again about an approved call that ended in doubt (a person
        on the desk: "ask the lookup again"). A ``running`` approval whose approver is gone
        is recovered as :meth:`approve` recovers it. A settled one whose result is
        ``outcome_unknown`` takes its key's claim over (only a stale one: a live claim is
        ``in_progress``) and asks the lookup: done → the receipt becomes its result, the key
        completed; not done → ``transient_failure``, not retryable (nothing was sent), the
        key freed; still unknown → ``outcome_unknown``, the claim kept, stale. Nothing is
        ever run: the handler is not called. Any other approval answers what approving it
        again would. The person and what the lookup said go to the audit log."""
        return (yield from self._operation("recheck", self._recheck, approval_id, call_id, approver))

    def _recheck(self, approval_id: Any, call_id: str, started: float, listeners: Listeners,
                 approver: str | None) -> Steps[dict[str, Any]]:
        try:
            record = yield from self.approvals.read(approval_id)
        except StoreError as exc:
            log.error("%s recheck %s: the store failed: %s", call_id, safe_name(approval_id), exc)
            return _busy()
        doubt = (record is not None and record["state"] == SETTLED
                 and settled_result(record).get("error") == ErrorCode.OUTCOME_UNKNOWN.value)
        if record is None or not doubt:
            if record is not None and record["state"] == RUNNING:
                return (yield from self._approve(approval_id, call_id, started, listeners))
            if record is not None and record["state"] == SETTLED:
                return _replay_settled(listeners, call_id, record["tool"],
                                       settled_result(record), started)
            return finish(failure(ErrorCode.FORBIDDEN), 0, False, _IRREVERSIBLE)
        prepared: list[Call] = []
        refusal, _ = self._prepare(call_id, record, prepared, started, listeners)
        if refusal is not None:
            return finish(refusal, 0, False, _IRREVERSIBLE)
        call = prepared[-1]
        recover = self.writes.recoverer(call)
        if recover is None or call.spec.transactional:  # nothing to ask: it stays in doubt
            return finish(settled_result(record), 0, True, _IRREVERSIBLE)
        asked: list[bool] = []
        tokens: list[str] = []
        asked_by_run: list[bool] = []

        def ask() -> Steps[dict[str, Any] | None]:
            asked.append(True)
            assert recover is not None
            return (yield from recover())

        def run(mine: Claim) -> Steps[dict[str, Any]]:
            if not asked:  # the key was not claimed (released meanwhile): ask now
                asked_by_run.append(True)
                try:
                    receipt = yield from ask()
                except Exception:
                    return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
                if receipt is not None:
                    ok = isinstance(receipt, dict) and receipt.get("ok") is True
                    return receipt if ok else failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
            return failure(ErrorCode.TRANSIENT_FAILURE, retryable=False)  # not done: nothing sent

        try:
            result = yield from once(
                self.store, record["key"], record["fingerprint"], self.writes.lease(call),
                run=run, recover=ask, full_sync=True, on_claim=tokens.append)
            if result.get("error") == ErrorCode.OUTCOME_UNKNOWN.value and tokens and asked_by_run:
                yield StoreStep("abandon", (record["key"], tokens[-1]))  # stale: ask again later
            if result.get("error") == ErrorCode.IN_PROGRESS.value:
                return finish(result, 0, False, _IRREVERSIBLE)
            settled = finish({k: v for k, v in result.items() if k != "replayed"}, 0, False,
                             _IRREVERSIBLE)
            yield from self.approvals.relooked(record, settled, approver)
        except StoreError as exc:
            log.error("%s recheck %s: the store failed: %s", call_id, safe_name(approval_id), exc)
            return _busy()
        call.event("approval_settled", approval_id=record["approval_id"], outcome=outcome(settled))
        return settled

    def _named(self, approval_id: Any) -> Steps[tuple[str, str]]:
        """The tool and effect an approval id names (for its call's first event)."""
        try:
            record = yield from self.approvals.read(approval_id)
        except StoreError:
            record = None  # the operation itself will meet the store's failure and say busy
        if record is None:
            return safe_name(approval_id), ""
        return str(record.get("tool", "")), _IRREVERSIBLE

    def _prepare(self, call_id: str, record: dict[str, Any], prepared: list[Call],
                 started: float, listeners: Listeners) -> tuple[dict[str, Any] | None, float]:
        """Check an approved call again before it runs (the tool or the caller's rights may
        have changed since it was asked for): a refusal, or None and the run's lease."""
        entry, checked, refusal = preflight(
            self.registry, record["tool"], record["arguments"], self.context, call_id
        )
        if refusal is not None:
            return refusal, 0.0
        assert entry is not None and checked is not None
        call = ApprovedRun(call_id, entry, checked, listeners, started, record["key"],
                           record["fingerprint"],
                           task_id=str(record.get("task_id", self.context.task_id)))
        prepared.append(call)
        return None, self.writes.lease(call)

    def _run_approved(self, call: Call, record: dict[str, Any]) -> Steps[dict[str, Any]]:
        """The one run of an approved irreversible write, under its key's claim."""
        result = yield from once(
            self.store, record["key"], record["fingerprint"], self.writes.lease(call),
            run=lambda mine: self._irreversible_attempt(call, mine),
            recover=self.writes.recoverer(call), full_sync=True, keep_unknown_live=True,
            interrupted=self.writes.interrupted(
                call, full_sync=True, then=lambda late: self._settle_late(record, late)),
            completes_itself=call.spec.transactional,
        )
        if result.get("replayed"):
            call.event("replay", outcome=outcome(result))
        return result

    def _settle_late(self, record: dict[str, Any], result: dict[str, Any] | None) -> Steps[bool]:
        """The approver went away mid-run (an interrupt, a loop that ended) and the run's
        attempt has now returned, or never started: its approval records what it did, as
        :meth:`_approve` would have (see :meth:`~agentkit.policy.approvals.Approvals.after_run`).
        Until then the approval stayed ``running``: never run again beside its attempt."""
        if result is not None and result.get("error") != ErrorCode.OUTCOME_UNKNOWN.value:
            result = finish(result if result["ok"] else {**result, "retryable": False}, 1,
                            False, _IRREVERSIBLE)
        return (yield from self.approvals.after_run(record, result))

    def _irreversible_attempt(self, call: Call, mine: Claim) -> Steps[dict[str, Any]]:
        """The one attempt (max_attempts is 1), and after a doubt the status lookup (rev 3):
        never ``transient_failure`` for a call that may have landed; never retryable."""
        result = yield from self.writes.attempts(call, mine)
        return result if result["ok"] else {**result, "retryable": False}


def _answer_approval(listeners: Listeners, call_id: str, approval_id: Any, step: Step,
                     started: float) -> dict[str, Any]:
    """Announce an approval decision that ran nothing."""
    assert step.result is not None
    tool = step.record["tool"] if step.record else safe_name(approval_id)
    if step.action == REPLAY:
        return _replay_settled(listeners, call_id, tool, step.result, started)
    code = step.result.get("error", "")
    if step.action == WAITING:  # counted as a sign-off (or not): it still waits, nothing ran
        return finish(step.result, 0, False, _IRREVERSIBLE)
    if step.action == REFUSED:
        _tell(listeners, "refused", call_id, tool, _IRREVERSIBLE, started, outcome=code)
    elif code != ErrorCode.IN_PROGRESS.value:  # unknown, expired: the answer is final
        effect = _IRREVERSIBLE if step.record else ""
        _tell(listeners, "approval_settled", call_id, tool, effect, started,
              approval_id=safe_name(approval_id), outcome=code)
    return finish(step.result, 0, False, _IRREVERSIBLE)


def _replay_settled(listeners: Listeners, call_id: str, tool: str, result: dict[str, Any],
                    started: float) -> dict[str, Any]:
    _tell(listeners, "replay", call_id, tool, _IRREVERSIBLE, started, outcome=outcome(result))
    return finish(result, 0, True, _IRREVERSIBLE)


def _tell(listeners: Listeners, kind: str, call_id: str, tool: str, effect: str, started: float,
          *, outcome: str, approval_id: str = "") -> None:
    """Tell the listeners an event of a step that has no :class:`Call` (of the operation that
    began at ``started``)."""
    listeners.emit(kind, call_id, tool, effect, time.monotonic(),
                   outcome=outcome, approval_id=approval_id, since=started)


def _framed(body: Steps[dict[str, Any]], operation: str, call_id: str, tool: str, effect: str,
            started: float, observers: Listeners) -> Steps[dict[str, Any]]:
    """An approval's operation between its ``call_started`` and ``call_ended`` events; the
    ending is announced even when the caller is interrupted or cancelled (then as ``busy``:
    what the person learns is that the decision may not have been recorded). A model's call
    has its own frame, :meth:`agentkit.policy.steps.Policy.call`."""
    observers.emit("call_started", call_id, tool, effect, started, operation=operation)
    try:
        result = yield from body
    except GeneratorExit:
        raise
    except BaseException:
        observers.emit("call_ended", call_id, tool, effect, time.monotonic(),
                       operation=operation, result=_busy())
        raise
    observers.emit("call_ended", call_id, tool, effect, time.monotonic(),
                   operation=operation, result=result)
    return result


def _busy() -> dict[str, Any]:
    return finish(failure(ErrorCode.BUSY), 0, False, _IRREVERSIBLE)
