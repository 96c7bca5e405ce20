"""The runner's policy, written once: plain steps that decide, and ask for every effect.

The chapter's rule: *a timeout does not prove a write failed.* So

- a **read** may simply be asked again: transient failures, timeouts and ``busy`` are retried
  up to ``max_attempts`` attempts in all, with jittered backoff;
- a **reversible write** runs under an idempotency key that names the business intent. A
  completed key replays its stored result. After a disconnect or a timeout the policy first
  asks the tool's status lookup whether the write already took effect: done → the receipt is
  the result; not done → retry with the same key (never beside a timed-out attempt that is
  still running, whose "not done" proves nothing); unknown, or no lookup → ``outcome_unknown``,
  and it never rewrites blindly;
- an **irreversible write** runs nothing on its first call: it returns ``approval_required``,
  and ``approve(id)`` runs exactly that call once, with no retry. If that one attempt ends in
  doubt (a disconnect, a timeout), the status lookup decides: done → the receipt; not done →
  ``transient_failure``, not retryable; unknown or no lookup → ``outcome_unknown``.

Every handler attempt and status lookup spends one unit of the task's :class:`Budget`.

How it is written (docs/design.md#drivers). Every step is a generator: it decides, and for
anything that touches the world it *yields* a request (:mod:`agentkit.policy.effects`: run an
attempt, ask the status lookup, pause, one store step) and receives the answer, or the
exception, at the ``yield``. At each step worth watching it tells the runner's observers a
:class:`~agentkit.policy.events.CallEvent` (not an effect: nothing answers it, and the steps
run in the driver's frame, on the caller's thread or task, where events must be told). It performs no I/O itself, so one policy serves two drivers
(:mod:`agentkit.policy.drivers`): ``call``/``approve``/``deny``/``run_once`` and
``acall``/``aapprove``/``adeny`` get the same results by construction. A failure is thrown into
the step that asked, so cleanup that writes (dropping or abandoning a claim) is a step like
any other, on both drivers.

The retry loop is written out here rather than borrowed from tenacity or stamina: between
attempts of a write it must call the status lookup, it must reserve and refund budget units
per attempt, and it must know whether the last attempt's handler is still running. Those
libraries retry a function; this loop has to look at what the function left behind
(tenacity's "decide, then act" split of ``iter()`` is the ancestor of these steps).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from agentkit.boundary.attempt import Attempt
from agentkit.boundary.canonical import canonical_json
from agentkit.boundary.context import CallContext
from agentkit.boundary.errors import ErrorCode, failure
from agentkit.boundary.invoke import preflight, renderer
from agentkit.boundary.redaction import safe_name
from agentkit.boundary.registry import RegisteredTool, ToolRegistry
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.boundary.workers import WorkerUnavailable
from agentkit.policy.approvals import (
    DENIED,
    REFUSED,
    REPLAY,
    RUN,
    RUNNING,
    SETTLED,
    Approvals,
    Step,
    public_view,
    settled_result,
)
from agentkit.policy.backoff import Backoff
from agentkit.policy.budget import Budget
from agentkit.policy.effects import (
    PROTECT,
    AskLookup,
    Invoke,
    Pause,
    RunAttempt,
    Steps,
    StoreStep,
    WhenDone,
)
from agentkit.policy.events import Observers
from agentkit.policy.stores.algorithm import (
    TAKEN_OVER,
    Claim,
    Result,
    StoreError,
    hold,
    is_live,
    is_ok,
    let_go,
)

__all__ = ["Call", "Policy", "finish", "invoke", "once"]

log = logging.getLogger("agentkit")
store_log = logging.getLogger("agentkit.policy.stores")

_READ_RETRY = {ErrorCode.TRANSIENT_FAILURE.value, ErrorCode.OUTCOME_UNKNOWN.value, ErrorCode.BUSY.value}
_UNSURE = {ErrorCode.TRANSIENT_FAILURE.value, ErrorCode.OUTCOME_UNKNOWN.value}
_IRREVERSIBLE = Effect.IRREVERSIBLE_WRITE.value
_READ = Effect.READ.value
_REVERSIBLE = Effect.REVERSIBLE_WRITE.value
_UNKNOWN = ErrorCode.OUTCOME_UNKNOWN.value
_monotonic = time.monotonic
_READ_EFFECT = Effect.READ
_new = object.__new__


class Call(RunAttempt):
    """One call or approved run in progress: what runs, and how many attempts it made. It is
    also the effect that asks for one attempt of itself (``yield call``)."""

    __slots__ = ("attempts", "effect", "fingerprint", "key", "number", "observers", "spec",
                 "started", "tool")

    #: The public operation whose events this call's are (``CallEvent.operation``).
    operation = "call"

    def __init__(self, call_id: str, entry: RegisteredTool, arguments: dict[str, Any],
                 observers: Observers, started: float, key: str = "",
                 fingerprint: str = "") -> None:
        self.call_id = call_id
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


class Policy:
    """The policy of one runner: each public operation is a generator of steps."""

    __slots__ = ("approvals", "backoff", "budget", "context", "observers", "registry", "store")

    def __init__(self, registry: ToolRegistry, store: Any, budget: Budget, context: CallContext,
                 backoff: Backoff, approvals: Approvals,
                 observers: Observers) -> None:
        self.registry = registry
        self.observers = observers  # told every event, at once
        self.store = store
        self.budget = budget
        self.context = context
        self.backoff = backoff
        self.approvals = approvals

    # ------------------------------------------------------------------ entry points

    def call(self, name: Any, arguments: Any, call_id: str) -> Steps[dict[str, Any]]:
        """One model tool call under its effect's policy; never raises for model input.

        A bug anywhere below (a hostile argument object, a misbehaving policy or store) is
        logged and answered as a stable error: ``tool_failure`` when nothing ran,
        ``outcome_unknown`` (not retryable) when a handler attempt had started.

        A read is asked again after a transient failure, a timeout or ``busy``, up to
        ``max_attempts`` attempts in all, with backoff. Its steps are written out right here
        (its framing as :meth:`_call`'s, each attempt as :meth:`_attempt`'s): this is the
        path of every read, and a nested step costs a generator per level.
        """
        started = _monotonic()
        entry, checked, refusal = preflight(self.registry, name, arguments, self.context, call_id)
        if refusal is not None or entry is None or entry.spec.effect is not _READ_EFFECT:
            return (yield from self._call(name, entry, checked, refusal, call_id, started))
        assert checked is not None
        observers, spec = self.observers, entry.spec
        # Call(call_id, entry, checked, observers, started), its __init__ spelled out: every
        # read makes one, and this saves it a frame
        call = _new(Call)
        call.call_id = call_id
        call.entry = entry
        call.arguments = checked
        call.observers = observers
        call.started = started
        call.spec = spec
        call.tool = tool = spec.name
        call.effect = effect = spec.effect._value_
        call.key = call.fingerprint = ""
        call.number = call.attempts = 0
        live = observers.live  # else only the trace listens, and it needs no start event
        if live:
            observers.emit("call_started", call_id, tool, effect, call.started)
        try:
            budget = self.budget
            result: dict[str, Any]  # (max_attempts >= 1: the loop sets it)
            number, max_attempts = 0, spec.max_attempts
            while number < max_attempts:  # (a range() costs more than this whole test)
                number += 1
                if number > 1:
                    yield Pause(self.backoff.delay(number - 1))
                if not budget.spend(spec.effect):
                    result = _budget_refusal(call)
                    break
                call.number = number
                # the first attempt began with the call: its checks are the attempt's own first
                # stages (as invoke_tool's pipeline counts them); a retry begins after its pause
                began = started if number == 1 else _monotonic()
                if live:
                    observers.emit("attempt_started", call_id, tool, effect, began, number)
                try:
                    result, attempt = yield call  # a RunAttempt
                except WorkerUnavailable:  # no thread for the handler: nothing ran
                    result, attempt = _no_worker(call)
                except GeneratorExit:
                    raise
                except BaseException:  # the caller went away mid-attempt: it may have run
                    _interrupted(call, began)
                    raise
                if attempt.started:
                    call.attempts += 1
                else:
                    budget.refund(spec.effect)
                ok = result["ok"]
                # it ended when its handler returned (the boundary's own time), unless the
                # caller stopped waiting first or nothing ran: then now
                ended = attempt.finished_at
                if ended is None or attempt.timed_out:
                    ended = _monotonic()
                observers.emit("attempt_ended", call_id, tool, effect, ended, number,
                               "ok" if ok else _outcome(result), attempt.started, "", "call",
                               None, attempt, began)
                if ok or result["error"] not in _READ_RETRY:
                    break
            # finish(result, ...), in place: every result here is a fresh dict of the
            # boundary's, its keys already in finish's order (tests/test_result_order.py)
            result["attempts"] = call.attempts
            result["replayed"] = False
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

    def _call(self, name: Any, entry: RegisteredTool | None, checked: dict[str, Any] | None,
              refusal: dict[str, Any] | None, call_id: str,
              started: float) -> Steps[dict[str, Any]]:
        """A write's call, or a refusal's, between its ``call_started`` and ``call_ended``."""
        tool = entry.spec.name if entry is not None else safe_name(name)
        effect: str = entry.spec.effect._value_ if entry is not None else ""
        observers = self.observers
        live = observers.live  # else only the trace listens: it records steps as they end
        if live:
            observers.emit("call_started", call_id, tool, effect, started)
        call: Call | None = None
        try:
            if refusal is not None:
                observers.emit("refused", call_id, tool, effect, time.monotonic(),
                               outcome=refusal["error"], since=started)
                result = finish(refusal, 0, False, effect)
            else:
                assert entry is not None and checked is not None
                call = Call(call_id, entry, checked, observers, started)
                result = yield from self._write(call)
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

    def _write(self, call: Call) -> Steps[dict[str, Any]]:
        try:
            self._keys(call)
        except Exception:
            log.exception("%s %s: idempotency_key failed", call.call_id, call.spec.name)
            call.event("refused", outcome=ErrorCode.TOOL_FAILURE.value)
            return finish(failure(ErrorCode.TOOL_FAILURE), 0, False, call.spec.effect.value)
        if call.spec.effect is Effect.REVERSIBLE_WRITE:
            return (yield from self._reversible(call))
        return (yield from self._ask_approval(call))

    def approve(self, approval_id: Any, call_id: str) -> Steps[dict[str, Any]]:
        """Run the one call this approval was asked for, once; again returns the same result.

        The state machine (:mod:`agentkit.policy.approvals`) decides whether this approver
        runs it; the run goes through the idempotency store, so an approver that died mid-run
        is recovered by the status lookup (or ``outcome_unknown``), never simply run again.
        A store that cannot be used answers ``busy``: nothing ran.
        """
        started = time.monotonic()
        yield PROTECT
        tool, effect = yield from self._named(approval_id)
        body = self._approve(approval_id, call_id, started)
        return (yield from _framed(body, "approve", call_id, tool, effect, started, self.observers))

    def _approve(self, approval_id: Any, call_id: str, started: float) -> Steps[dict[str, Any]]:
        prepared: list[Call] = []
        try:
            step = yield from self.approvals.begin(
                approval_id, lambda record: self._prepare(call_id, record, prepared, started))
            if step.action != RUN:
                return self._answer_approval(call_id, approval_id, step, started)
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
                           outcome=_outcome(settled))
        except StoreError as exc:  # the run's outcome is known and returned; the record waits
            log.error("%s %s: the approval could not be settled in the store: %s",
                      call_id, call.spec.name, exc)
        return finish(result, call.attempts, bool(result.get("replayed")), _IRREVERSIBLE)

    def deny(self, approval_id: Any, call_id: str) -> Steps[dict[str, Any]]:
        """Settle a pending approval as ``forbidden``: nothing runs, now or later."""
        started = time.monotonic()
        yield PROTECT
        tool, effect = yield from self._named(approval_id)
        body = self._deny(approval_id, call_id, started)
        return (yield from _framed(body, "deny", call_id, tool, effect, started, self.observers))

    def _deny(self, approval_id: Any, call_id: str, started: float) -> Steps[dict[str, Any]]:
        denied = finish(failure(ErrorCode.FORBIDDEN), 0, False, _IRREVERSIBLE)
        try:
            step = yield from self.approvals.deny(approval_id, denied)
        except StoreError as exc:
            log.error("%s deny %s: the store failed: %s", call_id, safe_name(approval_id), exc)
            return _busy()
        if step.action == DENIED:
            assert step.record is not None
            self._tell("approval_settled", call_id, step.record["tool"], _IRREVERSIBLE, started,
                       approval_id=step.record["approval_id"], outcome=ErrorCode.FORBIDDEN.value)
            return dict(denied)
        if step.action == REPLAY:
            assert step.record is not None and step.result is not None
            return self._replay_settled(call_id, step.record["tool"], step.result, started)
        assert step.result is not None
        return finish(step.result, 0, False, _IRREVERSIBLE)

    def _tell(self, kind: str, call_id: str, tool: str, effect: str, started: float, *,
              outcome: str, approval_id: str = "") -> None:
        """Tell the observers an event of a step that has no :class:`Call` (of the operation
        that began at ``started``)."""
        self.observers.emit(kind, call_id, tool, effect, time.monotonic(),
                            outcome=outcome, approval_id=approval_id, since=started)

    def pending(self) -> Steps[list[dict[str, Any]]]:
        """What a person is shown of every approval still waiting in the store."""
        return [public_view(record) for record in (yield from self.approvals.pending())]

    # ------------------------------------------------------------------ reads

    # ------------------------------------------------------------------ reversible writes

    def _keys(self, call: Call) -> None:
        """The idempotency key and the payload's fingerprint, from one canonical text of the
        arguments (the fingerprint's text is that of ``{"arguments": …, "tool": …}``)."""
        spec = call.spec
        text = canonical_json(call.arguments)
        if spec.idempotency_key is not None:
            call.key = str(spec.idempotency_key(self.context, call.arguments))
        else:
            call.key = f"{self.context.task_id}:{spec.name}:{_sha256(text)}"
        call.fingerprint = _sha256(f'{{"arguments":{text},"tool":{canonical_json(spec.name)}}}')

    def _reversible(self, call: Call) -> Steps[dict[str, Any]]:
        yield PROTECT
        result = yield from once(
            self.store, call.key, call.fingerprint, self._lease(call),
            run=lambda mine: self._write_attempts(call, mine),
            recover=self._recoverer(call), keep_unknown_live=True,
        )
        replayed = bool(result.get("replayed"))
        if replayed:
            call.event("replay", outcome=_outcome(result))
        elif call.number == 0 and not result["ok"]:
            call.event("refused", outcome=result["error"])
        return finish(result, call.attempts, replayed, _REVERSIBLE)

    def _write_attempts(self, call: Call, mine: Claim) -> Steps[dict[str, Any]]:
        """Inside the key's claim: attempt, and after any doubt ask before acting again."""
        spec = call.spec
        max_attempts = spec.max_attempts
        for number in range(1, max_attempts + 1):
            result, attempt = yield from self._attempt(call)
            if attempt is None or result["ok"]:
                return result
            code = result["error"]
            if code == ErrorCode.BUSY.value:  # nothing ran: safe to try again
                if number < max_attempts:
                    yield Pause(self.backoff.delay(number))
                    continue
                return result
            if code not in _UNSURE:
                return result
            if spec.status_lookup is None:
                return (yield from self._unknown(call, mine, attempt))
            yield Pause(self.backoff.delay(number))
            # Decided before the lookup starts: a write that lands while the lookup runs would
            # make its "not done" stale, so "not done" counts only if the attempt had already
            # returned when the lookup began.
            returned_before_lookup = not attempt.running
            status, receipt = yield from self._lookup(call)
            if status == "done":
                assert receipt is not None
                return receipt
            if status == "not_done" and returned_before_lookup:
                if number < max_attempts:
                    continue
                # Known not done, attempts used up: a plain failure, safe to ask again later.
                return failure(ErrorCode.TRANSIENT_FAILURE)
            return (yield from self._unknown(call, mine, attempt))
        return failure(ErrorCode.TRANSIENT_FAILURE)  # not reached: the loop always returns

    def _unknown(self, call: Call, mine: Claim, attempt: Attempt) -> Steps[dict[str, Any]]:
        """End a write as ``outcome_unknown``. The key's claim stays (nothing may rewrite
        blindly), and goes stale the moment our attempt has really returned, so that the
        next caller asks the status lookup instead of hearing ``in_progress`` for a lease."""
        try:
            yield WhenDone(attempt, StoreStep("abandon", (call.key, mine.token)))
        except StoreError as exc:
            # The claim keeps its lease; the next caller waits it out, then asks the lookup.
            log.error("could not mark the claim on key %r stale: %s", call.key, exc)
        return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)

    def _lookup(self, call: Call) -> Steps[tuple[str, dict[str, Any] | None]]:
        """Ask the tool whether the write took effect: ``done`` (with the receipt as an ok
        result), ``not_done`` or ``unknown``. Spends one budget unit."""
        spec = call.spec
        began = _monotonic()
        call.event("lookup_started", number=call.number, at=began)
        if not self.budget.spend(spec.effect):
            call.event("lookup_ended", number=call.number, outcome="budget_exhausted", since=began)
            return "unknown", None
        lookup = spec.status_lookup
        assert lookup is not None
        probe = Attempt(tool=spec.name, call_id=call.call_id)
        render = renderer(self.registry, spec, call.call_id)
        try:
            status = yield AskLookup(lookup, call.arguments, spec.timeout_seconds, probe,
                                     lambda value: None if value is None else render(value))
        except WorkerUnavailable:
            status = "busy"
        receipt = None
        if status != "finished":
            outcome = "unknown"
            log.warning("%s %s: status lookup gave no answer in time", call.call_id, spec.name)
        elif probe.error is not None:
            if not isinstance(probe.error, Exception):
                raise probe.error
            outcome = "unknown"
            log.error("%s %s: status lookup failed", call.call_id, spec.name, exc_info=probe.error)
        elif probe.value is None:
            outcome = "not_done"
        else:
            outcome = "done"
            receipt = dict(probe.value)  # rendered inside the lookup, like a handler's value
        call.event("lookup_ended", number=call.number, outcome=outcome, since=began)
        return outcome, receipt

    def _recoverer(self, call: Call) -> Callable[[], Steps[Result | None]] | None:
        """For a stale claim (its owner died mid-write): the status lookup decides."""
        if call.spec.status_lookup is None:
            return None

        def recover() -> Steps[Result | None]:
            status, receipt = yield from self._lookup(call)
            if status == "unknown":
                raise RuntimeError("status unknown")
            return receipt

        return recover

    def _lease(self, call: Call) -> float:
        """The claim must outlive the owner's worst case: every attempt, lookup and pause."""
        spec = call.spec
        return spec.max_attempts * (2 * spec.timeout_seconds + self.backoff.cap) + spec.timeout_seconds

    # ------------------------------------------------------------------ irreversible writes

    def _ask_approval(self, call: Call) -> Steps[dict[str, Any]]:
        """The first call of an irreversible write: open (or find) its approval; nothing runs.
        With the budget spent no person is asked: ``budget_exhausted``."""
        spec = call.spec
        yield PROTECT
        if not self.budget.can_spend(spec.effect):
            call.event("refused", outcome=ErrorCode.BUDGET_EXHAUSTED.value)
            return finish(failure(ErrorCode.BUDGET_EXHAUSTED), 0, False, _IRREVERSIBLE)
        try:
            record = yield from self.approvals.open(call.key, call.fingerprint, spec.name,
                                                    call.arguments, self.context)
        except StoreError as exc:
            log.error("%s %s: the store failed, no approval opened: %s", call.call_id, spec.name, exc)
            call.event("refused", outcome=ErrorCode.BUSY.value)
            return _busy()
        if record["fingerprint"] != call.fingerprint:
            call.event("refused", outcome=ErrorCode.IDEMPOTENCY_CONFLICT.value)
            return finish(failure(ErrorCode.IDEMPOTENCY_CONFLICT), 0, False, _IRREVERSIBLE)
        if record["state"] == SETTLED:
            return self._replay_settled(call.call_id, spec.name, settled_result(record),
                                        call.started)
        if record["state"] == RUNNING:
            return finish(failure(ErrorCode.IN_PROGRESS), 0, False, _IRREVERSIBLE)
        call.event("approval_asked", approval_id=record["approval_id"],
                   outcome=ErrorCode.APPROVAL_REQUIRED.value)
        asked = failure(ErrorCode.APPROVAL_REQUIRED, approval_id=record["approval_id"])
        return finish(asked, 0, False, _IRREVERSIBLE)

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
                 started: float) -> tuple[dict[str, Any] | None, float]:
        """Check an approved call again before it runs (the tool or the caller's rights may
        have changed since it was asked for): a refusal, or None and the run's lease."""
        entry, checked, refusal = preflight(
            self.registry, record["tool"], record["arguments"], self.context, call_id
        )
        if refusal is not None:
            return refusal, 0.0
        assert entry is not None and checked is not None
        call = ApprovedRun(call_id, entry, checked, self.observers, started, record["key"],
                           record["fingerprint"])
        prepared.append(call)
        return None, self._lease(call)

    def _run_approved(self, call: Call, record: dict[str, Any]) -> Steps[dict[str, Any]]:
        """The one run of an approved irreversible write, under its key's claim."""
        result = yield from once(
            self.store, record["key"], record["fingerprint"], self._lease(call),
            run=lambda mine: self._irreversible_attempt(call, mine),
            recover=self._recoverer(call), full_sync=True, keep_unknown_live=True,
        )
        if result.get("replayed"):
            call.event("replay", outcome=_outcome(result))
        return result

    def _irreversible_attempt(self, call: Call, mine: Claim) -> Steps[dict[str, Any]]:
        """The one attempt (max_attempts is 1), and after a doubt the status lookup (rev 3):
        never ``transient_failure`` for a call that may have landed; never retryable."""
        result = yield from self._write_attempts(call, mine)
        return result if result["ok"] else {**result, "retryable": False}

    def _answer_approval(self, call_id: str, approval_id: Any, step: Step,
                         started: float) -> dict[str, Any]:
        """Announce an approval decision that ran nothing."""
        assert step.result is not None
        tool = step.record["tool"] if step.record else safe_name(approval_id)
        if step.action == REPLAY:
            return self._replay_settled(call_id, tool, step.result, started)
        code = step.result.get("error", "")
        if step.action == REFUSED:
            self._tell("refused", call_id, tool, _IRREVERSIBLE, started, outcome=code)
        elif code != ErrorCode.IN_PROGRESS.value:  # unknown, expired: the answer is final
            effect = _IRREVERSIBLE if step.record else ""
            self._tell("approval_settled", call_id, tool, effect, started,
                       approval_id=safe_name(approval_id), outcome=code)
        return finish(step.result, 0, False, _IRREVERSIBLE)

    def _replay_settled(self, call_id: str, tool: str, result: dict[str, Any],
                        started: float) -> dict[str, Any]:
        self._tell("replay", call_id, tool, _IRREVERSIBLE, started, outcome=_outcome(result))
        return finish(result, 0, True, _IRREVERSIBLE)

    # ------------------------------------------------------------------ one attempt

    def _attempt(self, call: Call) -> Steps[tuple[dict[str, Any], Attempt | None]]:
        """One handler attempt through the boundary, paid for from the budget (a read's
        attempts are written out in :meth:`_read`, the same steps)."""
        spec = call.spec
        if not self.budget.spend(spec.effect):
            return _budget_refusal(call), None
        call.number += 1
        began = _monotonic()
        observers = call.observers
        # call.event(...), spelled out here and below: two of every call's events
        if observers.live:  # (the trace needs no start event: see Observers.live)
            observers.emit("attempt_started", call.call_id, call.tool, call.effect, began,
                           call.number, operation=call.operation)
        try:
            result, attempt = yield call  # a RunAttempt
        except WorkerUnavailable:  # no thread for the handler: nothing ran
            result, attempt = _no_worker(call)
        except GeneratorExit:
            raise
        except BaseException:  # the caller went away mid-attempt: it may have run
            _interrupted(call, began)
            raise
        if attempt.started:
            call.attempts += 1
        else:
            self.budget.refund(spec.effect)
        ended = attempt.finished_at  # (as a read's attempt: see Policy.call)
        if ended is None or attempt.timed_out:
            ended = _monotonic()
        observers.emit("attempt_ended", call.call_id, call.tool, call.effect, ended,
                       call.number, "ok" if result.get("ok") else _outcome(result),
                       attempt.started, "", call.operation, None, attempt, began)
        return result, attempt


def _budget_refusal(call: Call) -> dict[str, Any]:
    """The budget has no unit left for ``call``'s next attempt: nothing runs."""
    call.event("refused", number=call.number, outcome=ErrorCode.BUDGET_EXHAUSTED.value)
    return failure(ErrorCode.BUDGET_EXHAUSTED)


def _no_worker(call: Call) -> tuple[dict[str, Any], Attempt]:
    """No thread could be started for the handler: ``busy``, and nothing ran."""
    log.warning("%s %s: busy, no worker thread could be started", call.call_id, call.tool)
    return failure(ErrorCode.BUSY), Attempt(tool=call.tool, call_id=call.call_id)


def _interrupted(call: Call, began: float) -> None:
    """The caller went away mid-attempt (begun at ``began``): the handler may have run."""
    call.attempts += 1
    call.event("attempt_ended", number=call.number, outcome=ErrorCode.OUTCOME_UNKNOWN.value,
               handler_ran=True, since=began)


# ---------------------------------------------------------------------- run once per key


def once(
    store: Any,
    key: str,
    fingerprint: str | None,
    lease_seconds: float | None,
    *,
    run: Callable[[Claim], Steps[Result]],
    recover: Callable[[], Steps[Result | None]] | None = None,
    full_sync: bool = False,
    keep_unknown_live: bool = False,
    on_claim: Callable[[str], None] | None = None,
) -> Steps[Result]:
    """The store's claim → run → complete, with recovery (docs/design.md#stores): ``run`` at
    most once per key. Each store step is one atomic section of the store (interface B).

    A store that fails before the claim gives ``busy`` (nothing ran); one that fails after
    the run ``outcome_unknown``. ``run`` raising an ``Exception`` frees the key; anything else
    (an interrupt, a cancellation) may have half-written, so the claim is kept and marked
    stale for the lookup to settle. With ``keep_unknown_live`` an ``outcome_unknown`` run keeps
    its claim live in this process until its attempt hands it back (``store.abandon``).
    """
    if not isinstance(key, str):
        raise TypeError("key must be a str")
    ttl = max(store.claim_ttl_seconds, lease_seconds or 0.0)
    try:
        decision = yield StoreStep("claim", (key, fingerprint, ttl),
                                   {"may_take_over": recover is not None, "full_sync": full_sync})
    except StoreError as exc:
        store_log.error("could not claim key %r, nothing ran (busy): %s", key, exc)
        return failure(ErrorCode.BUSY)
    if isinstance(decision, dict):
        return decision
    kind, mine = decision
    hold(mine.token)
    keep_live = False
    try:
        if on_claim is not None:
            try:
                yield Invoke(lambda: on_claim(mine.token))
            except GeneratorExit:
                raise
            except BaseException:
                yield from _quietly(StoreStep("drop", (key, mine)), key, "the claim stays until its lease")
                raise
        if kind == TAKEN_OVER:
            assert recover is not None
            outcome = yield from _recover(key, mine, recover, full_sync)
            if outcome is not None:
                return outcome
        result = yield from _run(key, mine, run, full_sync)
        keep_live = keep_unknown_live and _is_unknown(result) and is_live(mine.token)
        return result
    finally:
        if not keep_live:
            let_go(mine.token)


def _recover(key: str, mine: Claim, recover: Callable[[], Steps[Result | None]],
             full_sync: bool) -> Steps[Result | None]:
    """Ask the status lookup: a result to return, or None when the operation should run."""
    abandon = StoreStep("abandon_claim", (key, mine))
    try:
        receipt = yield from recover()
    except GeneratorExit:
        raise
    except Exception:
        store_log.warning("status lookup for key %r raised; outcome unknown", key, exc_info=True)
        yield from _quietly(abandon, key, "the claim keeps its lease")
        return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
    except BaseException:
        yield from _quietly(abandon, key, "the claim keeps its lease")
        raise
    if receipt is None:
        return None  # not done: the caller runs the operation under this claim
    if not is_ok(receipt):
        yield from _quietly(abandon, key, "the claim keeps its lease")
        return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
    try:
        yield StoreStep("complete", (key, mine, receipt, full_sync))
    except StoreError as exc:
        # The lookup found the write done: say so; the next caller asks the lookup again.
        store_log.error("could not record the receipt of key %r: %s", key, exc)
    return receipt


def _run(key: str, mine: Claim, run: Callable[[Claim], Steps[Result]], full_sync: bool) -> Steps[Result]:
    try:
        result = yield from run(mine)
    except GeneratorExit:
        raise
    except Exception:
        yield from _quietly(StoreStep("drop", (key, mine)), key, "the claim stays until its lease")
        raise
    except BaseException:
        # Interrupted mid-write: the outcome is unknown, but nobody runs it any more.
        yield from _quietly(StoreStep("abandon_claim", (key, mine)), key, "the claim keeps its lease")
        raise
    if is_ok(result):
        try:
            yield StoreStep("complete", (key, mine, result, full_sync))
        except StoreError as exc:
            store_log.error("key %r ran but its result could not be recorded, outcome unknown: %s",
                            key, exc)
            yield from _quietly(StoreStep("abandon_claim", (key, mine)), key, "the claim keeps its lease")
            return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
    elif _is_unknown(result):
        pass  # it may still be running: the claim stays until its lease or owner ends
    else:
        yield from _quietly(StoreStep("drop", (key, mine)), key, "the claim stays until its lease")
        if not isinstance(result, dict):
            raise TypeError(f"operation must return a dict, not {type(result).__name__}")
    return result


def _quietly(step: StoreStep, key: str, consequence: str) -> Steps[None]:
    """Tidy a claim after the operation; a failing store is logged, never raised."""
    try:
        yield step
    except StoreError as exc:
        store_log.error("could not update the claim on key %r (%s): %s", key, consequence, exc)


def invoke(function: Callable[[], Any]) -> Steps[Any]:
    """A plain function given from outside, as one step (``run_once``'s operation)."""
    return (yield Invoke(function))


# ---------------------------------------------------------------------- results


def _framed(body: Steps[dict[str, Any]], operation: str, call_id: str, tool: str, effect: str,
            started: float, observers: Observers) -> Steps[dict[str, Any]]:
    """An approval's operation between its ``call_started`` and ``call_ended`` events; the
    ending is announced even when the caller is interrupted or cancelled (then as ``busy``;
    ``call`` frames itself the same way, inline, being the hot path)."""
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


def runner_failed(call: Call | None) -> dict[str, Any]:
    """The answer when the runner itself failed: honest about whether anything ran."""
    effect = call.spec.effect.value if call is not None else ""
    if call is not None and call.attempts:
        unknown = failure(ErrorCode.OUTCOME_UNKNOWN, retryable=call.spec.effect is Effect.READ)
        return finish(unknown, call.attempts, False, effect)
    return finish(failure(ErrorCode.TOOL_FAILURE), 0, False, effect)


def _busy() -> dict[str, Any]:
    return finish(failure(ErrorCode.BUSY), 0, False, _IRREVERSIBLE)


def _outcome(result: Any) -> str:
    return "ok" if result.get("ok") else str(result.get("error", ""))


def _is_unknown(result: Any) -> bool:
    return isinstance(result, dict) and result.get("error") == _UNKNOWN


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_WRITES = {_REVERSIBLE, _IRREVERSIBLE}
#: The order every result's keys are given in (stored results come back with sorted keys).
_ORDER = ("ok", "data", "error", "retryable", "detail", "truncated", "original_chars",
          "redactions", "approval_id", "attempts", "replayed")


def finish(result: dict[str, Any], attempts: int, replayed: bool, effect: str) -> dict[str, Any]:
    """Stamp ``attempts``/``replayed``; a write whose outcome is unknown is never retryable.
    Keys come in one order: the known ones as in ``_ORDER``, any other after them as given."""
    if effect in _WRITES and result.get("error") == _UNKNOWN:
        result = {**result, "retryable": False}
    keys = tuple(result)
    order = _ORDERS.get(keys)
    if order is None:
        order = _order(keys)
    if order is _AS_GIVEN:  # the usual case: the boundary's keys, already in order
        out = dict(result)
        out["attempts"] = attempts
        out["replayed"] = replayed
        return out
    out = dict(result, attempts=attempts, replayed=replayed)
    return {key: out[key] for key in order}


_RANK = {key: n for n, key in enumerate(_ORDER)}
#: ``_order``'s answer: the keys are in order already, ``attempts`` and ``replayed`` go last.
_AS_GIVEN: tuple[str, ...] = ("(as given)",)
#: ``_order``'s answers for key sequences of known keys only (so it stays small).
_ORDERS: dict[tuple[str, ...], tuple[str, ...]] = {}


def _order(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The order of a finished result's keys, for a result with ``keys``."""
    if "attempts" not in keys and "replayed" not in keys and _in_order(keys):
        order = _AS_GIVEN
    else:
        present = {*keys, "attempts", "replayed"}
        order = (*(key for key in _ORDER if key in present),
                 *(key for key in keys if key not in _RANK))
    if all(key in _RANK for key in keys):
        _ORDERS[keys] = order
    return order


def _in_order(keys: tuple[str, ...]) -> bool:
    """Whether every key is a known one and they come in ``_ORDER``'s order."""
    last = -1
    for key in keys:
        rank = _RANK.get(key, -1)
        if rank <= last:
            return False
        last = rank
    return True
