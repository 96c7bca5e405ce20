"""Reversible writes: one key per business intent, and after any doubt, ask before acting again.

A **reversible write** runs under an idempotency key that names the business intent (the
tool's ``idempotency_key``, or the task, the tool and the arguments). A completed key replays
its stored result (:mod:`agentkit.policy.once`). After a disconnect or a timeout the policy
first asks the tool's status lookup whether the write already took effect: done → the receipt
is the result; not done → retry with the same key (never beside a timed-out attempt that is
still running, whose "not done" proves nothing); unknown, or no lookup → ``outcome_unknown``,
and it never rewrites blindly. ``busy`` (nothing ran) is simply tried again.

Any other exception the handler raised is doubt too (:func:`in_doubt`): it may have landed
and then failed reading the response. The lookup is asked before the key is freed: done →
the receipt; not done → the failure stands and the key is free; unknown, or no lookup →
``outcome_unknown`` with the claim kept. Only :class:`~agentkit.InvalidInput` and
:class:`~agentkit.NotApplied` (the handler's word that nothing took effect) free the key at
once.

An approved irreversible write (:mod:`agentkit.policy.irreversible`) runs through the same
steps with one attempt: :meth:`Writes.attempts` under its key's claim, the status lookup
after a doubt, the claim's lease from :meth:`Writes.lease`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from functools import partial
from typing import Any

from agentkit.boundary.attempt import Attempt
from agentkit.boundary.canonical import canonical_json, intent_json
from agentkit.boundary.context import CallContext
from agentkit.boundary.errors import ErrorCode, InvalidInput, NotApplied, NotStarted, failure
from agentkit.boundary.invoke import conclude, renderer
from agentkit.boundary.registry import RegisteredTool, ToolRegistry
from agentkit.boundary.spec import Effect, with_handler
from agentkit.boundary.workers import WorkerUnavailable
from agentkit.policy.backoff import Backoff
from agentkit.policy.budget import Budget
from agentkit.policy.calls import Call, one_attempt
from agentkit.policy.effects import PROTECT, AskLookup, Pause, Steps, StoreStep, WhenDone
from agentkit.policy.once import once
from agentkit.policy.results import finish, outcome
from agentkit.policy.stores.algorithm import Claim, ClaimLost, Result, StoreError, let_go

__all__ = ["Writes", "in_doubt", "refuse_transactional"]

log = logging.getLogger("agentkit")

_UNSURE = {ErrorCode.TRANSIENT_FAILURE.value, ErrorCode.OUTCOME_UNKNOWN.value}
_REVERSIBLE = Effect.REVERSIBLE_WRITE.value
_SPENT = ErrorCode.BUDGET_EXHAUSTED.value


class Writes:
    """The steps of a write: its key, its attempts under the key's claim, the status lookup."""

    __slots__ = ("backoff", "budget", "context", "registry", "store")

    def __init__(self, registry: ToolRegistry, store: Any, budget: Budget, context: CallContext,
                 backoff: Backoff) -> None:
        self.registry = registry
        self.store = store
        self.budget = budget
        self.context = context
        self.backoff = backoff

    def keys(self, call: Call) -> bool:
        """Set the call's idempotency key and the payload's fingerprint, from one canonical
        text of the arguments (the fingerprint's text is that of ``{"arguments": …, "tool":
        …}``). False, logged and told as ``refused``, when the tool's ``idempotency_key``
        raised: nothing may run without a key."""
        spec = call.spec
        if spec.transactional and not getattr(self.store, "holds_effects", False):
            # (the runner refused this when it was made: the tool joined the registry later)
            log.error("%s %s: transactional, but %s cannot commit a handler's effect with its"
                      " result", call.call_id, spec.name, type(self.store).__name__)
            call.event("refused", outcome=ErrorCode.TOOL_FAILURE.value)
            return False
        try:
            text = intent_json(call.arguments)  # numbers equal in value: one intent
            if spec.idempotency_key is not None:
                call.key = str(spec.idempotency_key(self.context, call.arguments))
            else:
                call.key = f"{self.context.task_id}:{spec.name}:{_sha256(text)}"
            call.fingerprint = _sha256(f'{{"arguments":{text},"tool":{canonical_json(spec.name)}}}')
        except Exception:
            log.exception("%s %s: idempotency_key failed", call.call_id, spec.name)
            call.event("refused", outcome=ErrorCode.TOOL_FAILURE.value)
            return False
        return True

    def reversible(self, call: Call) -> Steps[dict[str, Any]]:
        """A reversible write's call: run once under its key, or replay the key's result."""
        yield PROTECT
        result = yield from once(
            self.store, call.key, call.fingerprint, self.lease(call),
            run=lambda mine: self.attempts(call, mine),
            recover=self.recoverer(call), keep_unknown_live=True,
            interrupted=self.interrupted(call), completes_itself=call.spec.transactional,
        )
        replayed = bool(result.get("replayed"))
        if replayed:
            call.event("replay", outcome=outcome(result))
        elif call.number == 0 and not result["ok"] and result["error"] != _SPENT:
            # (a spent budget was told by budget_refusal, where it was found)
            call.event("refused", outcome=result["error"])
        return finish(result, call.attempts, replayed, _REVERSIBLE)

    def attempts(self, call: Call, mine: Claim) -> Steps[dict[str, Any]]:
        """Inside the key's claim: attempt, and after any doubt ask before acting again."""
        spec = call.spec
        if spec.transactional:
            call.entry = self._in_transaction(call, mine)
        max_attempts = spec.max_attempts
        for number in range(1, max_attempts + 1):
            result, attempt = yield from one_attempt(call, self.budget)
            if attempt is None or result["ok"]:
                return result
            if isinstance(attempt.error, NotStarted):
                # A transactional write's transaction ran nothing: the key was settled by
                # another call meanwhile (its answer: a replay, or in progress), or it could
                # not begin (busy, below). No attempt of this call's, nor its budget unit.
                call.attempts -= 1
                self.budget.refund(spec.effect)
                if isinstance(attempt.error, ClaimLost):
                    return attempt.error.answer
            code = result["error"]
            if code == ErrorCode.BUSY.value:  # nothing ran: safe to try again
                if number < max_attempts:
                    yield Pause(self.backoff.delay(number))
                    continue
                return result
            if not in_doubt(result, attempt):
                return result
            if spec.transactional:  # the store itself knows: the effect commits with the result
                returned_before_lookup = not attempt.running
                status, receipt = yield from self._committed(call)
            elif spec.status_lookup is None:
                return (yield from self._unknown(call, mine, attempt))
            else:
                yield Pause(self.backoff.delay(number))
                # Decided before the lookup starts: a write that lands while the lookup runs
                # would make its "not done" stale, so "not done" counts only if the attempt had
                # already returned when the lookup began.
                returned_before_lookup = not attempt.running
                status, receipt = yield from self._lookup(call)
            if status == "done":
                assert receipt is not None
                return receipt
            if status == "not_done" and returned_before_lookup:
                if code not in _UNSURE:
                    # It raised and did not land: the failure stands (the key is freed).
                    return result
                if number < max_attempts:
                    continue
                # Known not done, attempts used up: a plain failure, safe to ask again later.
                return failure(ErrorCode.TRANSIENT_FAILURE)
            return (yield from self._unknown(call, mine, attempt))
        return failure(ErrorCode.TRANSIENT_FAILURE)  # not reached: the loop always returns

    def recoverer(self, call: Call) -> Callable[[], Steps[Result | None]] | None:
        """For a stale claim (its owner died mid-write): the status lookup decides. A
        transactional write's effect commits with its result, so a stale claim with no
        result is a write that did not happen: it runs."""
        if call.spec.transactional:
            return _not_done
        if call.spec.status_lookup is None:
            return None

        def recover() -> Steps[Result | None]:
            status, receipt = yield from self._lookup(call)
            if status == "unknown":
                raise RuntimeError("status unknown")
            return receipt

        return recover

    def interrupted(
        self, call: Call, *, full_sync: bool = False,
        then: Callable[[dict[str, Any] | None], Steps[Any]] | None = None,
    ) -> Callable[[Claim], Steps[bool]]:
        """For a caller that goes away while its write holds the key's claim (an interrupt, a
        cancelled task, a loop that ends): the claim is settled by what the call's latest
        attempt did, once it has really returned.

        A claim held by an attempt that still runs in this process is never stale, so the
        claim stays live (``in_progress`` to the next caller) until the handler returns;
        then :meth:`_settle` records it: an ok value is stored (the next caller replays it),
        a failure that proves nothing landed frees the key, a doubt marks the claim stale
        for the status lookup. An attempt that never started frees the key at once (nothing
        ran). ``then(result)`` follows with what was recorded (an approval's own record).
        Says True when the claim stays live until the attempt returns.
        """

        def settle_claim(mine: Claim) -> Steps[bool]:
            attempt = call.attempt
            settle = partial(self._settle, call, mine, attempt, full_sync, then)
            if attempt is None or not attempt.started:
                yield from settle()
                return False
            yield WhenDone(attempt, settle)
            return True

        return settle_claim

    def _settle(
        self, call: Call, mine: Claim, attempt: Attempt | None, full_sync: bool,
        then: Callable[[dict[str, Any] | None], Steps[Any]] | None,
    ) -> Steps[None]:
        """Record what the attempt of a call whose caller went away did (it has returned, or
        never started): its ok result (``complete``), a failure that proves nothing landed
        (``drop``), or a doubt (``abandon_claim``: stale, for the status lookup). Then
        ``then`` with that result: None when nothing ran, ``outcome_unknown`` for a doubt.
        A store that fails here is logged, never raised: these steps may run while the
        caller's own interrupt is on its way out, which nothing may replace."""
        key = call.key
        result = _late_result(call, attempt)
        step: StoreStep | None
        if result is None or (not result["ok"] and not in_doubt(result, attempt)):
            step = StoreStep("drop", (key, mine))
        elif result["ok"]:
            # (a transactional write completed its key in its own transaction)
            step = None if call.spec.transactional else StoreStep(
                "complete", (key, mine, result, full_sync))
        else:
            step = StoreStep("abandon_claim", (key, mine))
            result = failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
        try:
            if step is not None:
                yield step
        except StoreError as exc:  # the claim keeps its lease; the lookup settles it later
            assert step is not None
            log.error("%s %s: the key %r could not be settled (%s) after its caller went"
                      " away: %s", call.call_id, call.tool, key, step.name, exc)
        finally:
            let_go(mine.token)
        if then is not None:
            try:
                yield from then(result)
            except StoreError as exc:
                log.error("%s %s: the approval of key %r could not be settled after its"
                          " caller went away: %s", call.call_id, call.tool, key, exc)

    def lease(self, call: Call) -> float:
        """The claim must outlive the owner's worst case: every attempt, lookup and pause."""
        spec = call.spec
        return spec.max_attempts * (2 * spec.timeout_seconds + self.backoff.cap) + spec.timeout_seconds

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

    def _in_transaction(self, call: Call, mine: Claim) -> RegisteredTool:
        """The call's tool with its handler run inside the store's effect transaction
        (docs/design.md#transactional-writes): under the key's lock, only while the key's
        claim is this call's or the key is free (then the claim is written in it: on SQLite
        a new key's claim is never committed before); ``current_call().connection`` is the
        transaction's connection; the handler's value, rendered as the model will see it,
        completes the key in the same transaction, so the claim, the effect and the result
        commit as one. A handler that raises rolls its effect back. A key settled by another
        call meanwhile, or a transaction that cannot begin, runs nothing
        (:class:`~agentkit.boundary.errors.NotStarted`)."""
        entry, store, key = call.entry, self.store, call.key
        handler = entry.spec.handler
        render = renderer(self.registry, entry.spec, call.call_id)

        def in_transaction(**arguments: Any) -> Any:
            with ExitStack() as stack:
                try:
                    tx = stack.enter_context(store.effect_transaction(key, mine))
                except StoreError as exc:  # it could not begin (a lock held too long)
                    raise NotStarted(f"the key's transaction could not begin: {exc}",
                                     failure(ErrorCode.BUSY)) from exc
                call.connection = tx.connection
                try:
                    value = handler(**arguments)
                finally:
                    call.connection = None
                tx.complete(key, mine.token, mine.fingerprint, canonical_json(render(value)))
            return value

        return replace(entry, spec=with_handler(entry.spec, in_transaction))

    def _committed(self, call: Call) -> Steps[tuple[str, dict[str, Any] | None]]:
        """A transactional write's status, from the store: its key's result is there exactly
        when its effect committed (``done`` with that result), else ``not_done``; a store
        that cannot say, ``unknown``."""
        try:
            stored = yield StoreStep("result", (call.key,))
        except StoreError as exc:
            log.error("%s %s: the store could not say whether the write committed: %s",
                      call.call_id, call.tool, exc)
            return "unknown", None
        if stored is None:
            return "not_done", None
        return ("done", dict(stored)) if stored.get("ok") is True else ("unknown", None)

    def _lookup(self, call: Call) -> Steps[tuple[str, dict[str, Any] | None]]:
        """Ask the tool whether the write took effect: ``done`` (with the receipt as an ok
        result), ``not_done`` or ``unknown``. Spends one budget unit."""
        spec = call.spec
        began = time.monotonic()
        call.event("lookup_started", number=call.number, at=began)
        if not self.budget.spend(spec.effect):
            call.event("lookup_ended", number=call.number, outcome="budget_exhausted", since=began)
            return "unknown", None
        lookup = spec.status_lookup
        assert lookup is not None
        probe = Attempt(spec.name, call.call_id, call)
        render = renderer(self.registry, spec, call.call_id)
        try:
            status = yield AskLookup(lookup, call.arguments, spec.timeout_seconds, probe,
                                     lambda value: None if value is None else render(value))
        except WorkerUnavailable:
            status = "busy"
        receipt = None
        if status != "finished":
            found = "unknown"
            log.warning("%s %s: status lookup gave no answer in time", call.call_id, spec.name)
        elif probe.error is not None:
            if not isinstance(probe.error, Exception):
                raise probe.error
            found = "unknown"
            log.error("%s %s: status lookup failed", call.call_id, spec.name, exc_info=probe.error)
        elif probe.value is None:
            found = "not_done"
        else:
            found = "done"
            receipt = dict(probe.value)  # rendered inside the lookup, like a handler's value
        call.event("lookup_ended", number=call.number, outcome=found, since=began)
        return found, receipt


def in_doubt(result: dict[str, Any], attempt: Attempt | None) -> bool:
    """Whether a write's failed attempt may still have landed (docs/design.md#a-writes-exception-is-doubt): a
    disconnect or a timeout (``transient_failure``, ``outcome_unknown``), or any exception
    its handler raised but :class:`~agentkit.InvalidInput` (the input was wrong) and
    :class:`~agentkit.NotApplied` (the handler's word that nothing took effect). A handler
    that raises after its write landed (a bug reading the response) must not be run again
    blindly: the status lookup decides, or the outcome is unknown."""
    if result["ok"]:
        return False
    if result["error"] in _UNSURE:
        return True
    error = None if attempt is None else attempt.error
    return isinstance(error, Exception) and not isinstance(error, (InvalidInput, NotApplied))


def refuse_transactional(registry: ToolRegistry, store: Any) -> None:
    """``ValueError`` when a tool of ``registry`` is transactional and ``store`` cannot hold
    a handler's effect in its own transaction (the memory store)."""
    if getattr(store, "holds_effects", False):
        return
    for spec in registry:
        if spec.transactional:
            raise ValueError(
                f"{spec.name} is transactional, and {type(store).__name__} cannot commit a"
                " handler's effect with its result: use SQLiteIdempotencyStore or"
                " PostgresIdempotencyStore")


def _not_done() -> Steps[Result | None]:
    """A transactional write's recovery of a stale claim: no result, so it did not commit."""
    yield from ()
    return None


def _late_result(call: Call, attempt: Attempt | None) -> dict[str, Any] | None:
    """What a returned attempt did, as the policy reads a result: None when it never started
    (nothing ran); a doubt (``outcome_unknown``) when it gave no value (its deadline passed,
    it raised a ``BaseException`` of its own)."""
    if attempt is None or not attempt.started:
        return None
    error = attempt.error
    if error is None and isinstance(attempt.value, dict):
        return dict(attempt.value)  # rendered on the worker, inside the attempt
    if isinstance(error, Exception):
        return conclude(call.entry, attempt, "finished", call.call_id)
    return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
