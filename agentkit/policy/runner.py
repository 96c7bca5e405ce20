"""The runner: the policy of each side-effect level, above the one-attempt boundary.

The chapter's rule: *a timeout does not prove a write failed.* So

- a **read** may simply be asked again: transient failures, timeouts and ``busy`` are retried
  up to ``max_attempts`` attempts in all, with jittered backoff;
- a **reversible write** runs under an idempotency key that names the business intent. A
  completed key replays its stored result. After a disconnect or a timeout the runner first
  asks the tool's status lookup whether the write already took effect: done → the receipt is
  the result; not done → retry with the same key (never beside a timed-out attempt that is
  still running, whose "not done" proves nothing); unknown, or no lookup → ``outcome_unknown``,
  and it never rewrites blindly;
- an **irreversible write** runs nothing on its first call: it returns ``approval_required``,
  and ``approve(id)`` runs exactly that call once, with no retry.

Every handler attempt and status lookup spends one unit of the task's :class:`Budget`.

The retry loop is written out here rather than borrowed from tenacity or stamina: between
attempts of a write it must call the status lookup, it must reserve and refund budget units
per attempt, and it must know whether the last attempt's handler is still running. Those
libraries retry a function; this loop has to look at what the function left behind.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentkit.boundary.canonical import fingerprint_of
from agentkit.boundary.concurrency import Attempt, WorkerUnavailable, run_limited, run_on_worker
from agentkit.boundary.context import CallContext
from agentkit.boundary.errors import ErrorCode, failure
from agentkit.boundary.invoke import execute, new_call_id, preflight, renderer
from agentkit.boundary.redaction import safe_name
from agentkit.boundary.registry import RegisteredTool, ToolRegistry
from agentkit.boundary.spec import Effect, ToolSpec
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
from agentkit.policy.stores import IdempotencyStore, StoreError
from agentkit.policy.trace import DEFAULT_MAX_RECORDS, Trace, TraceRecord

log = logging.getLogger("agentkit")

_READ_RETRY = {ErrorCode.TRANSIENT_FAILURE.value, ErrorCode.OUTCOME_UNKNOWN.value, ErrorCode.BUSY.value}
_UNSURE = {ErrorCode.TRANSIENT_FAILURE.value, ErrorCode.OUTCOME_UNKNOWN.value}


@dataclass
class _Call:
    """One ``call``/``approve`` in progress: what runs, and how many handler attempts it made."""

    call_id: str
    entry: RegisteredTool
    arguments: dict[str, Any]
    key: str = ""  # the idempotency key, for writes
    token: str = ""  # the store's claim on the key, while this call holds it
    number: int = 0  # steps that tried to run the handler (busy ones included)
    attempts: int = 0  # handler attempts that really started

    @property
    def spec(self) -> ToolSpec:
        return self.entry.spec


class ToolRunner:
    """Applies the policy of each tool's effect; the agent loop talks only to a runner.

    ``sleep`` is injected so tests and notebooks never wait on the wall clock (see also
    :func:`agentkit.set_testing`); ``clock`` (wall time) decides approval expiry.
    ``max_trace_records`` bounds :attr:`trace` (the most recent records are kept; None keeps
    all), so a long-running kernel or server does not grow without end.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        store: Any = None,
        budget: Budget | None = None,
        context: CallContext | None = None,
        sleep: Callable[[float], Any] = time.sleep,
        approval_ttl_seconds: float = 3600.0,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.time,
        max_trace_records: int | None = DEFAULT_MAX_RECORDS,
    ) -> None:
        self.registry = registry
        self.store = store if store is not None else IdempotencyStore()
        self.budget = budget if budget is not None else Budget()
        self.context = context if context is not None else CallContext()
        self.trace = Trace(max_trace_records)
        self.approvals = Approvals(self.store, approval_ttl_seconds, clock)
        self._sleep = sleep
        self._backoff = backoff if backoff is not None else Backoff()

    # ------------------------------------------------------------------ public

    def call(self, name: Any, arguments: Any, *, call_id: str | None = None) -> dict[str, Any]:
        """Run one model tool call under its effect's policy; never raises for model input.

        ``call_id`` is the host's own tool-call id (a framework's or an MCP request's); it then
        names this call in the trace and the log. Without one the runner makes its own.

        A bug anywhere below (a hostile argument object, a misbehaving policy or store) is
        logged and answered as a stable error: ``tool_failure`` when nothing ran,
        ``outcome_unknown`` (not retryable) when a handler attempt had started.
        """
        call_id = call_id if isinstance(call_id, str) and call_id else new_call_id()
        holder: list[_Call] = []
        try:
            return self._call(call_id, name, arguments, holder)
        except Exception:
            log.exception("%s %s: the runner failed", call_id, safe_name(name))
            return self._runner_failed(holder)

    def _call(self, call_id: str, name: Any, arguments: Any, holder: list[_Call]) -> dict[str, Any]:
        started = time.monotonic()
        entry, checked, refusal = preflight(self.registry, name, arguments, self.context, call_id)
        if refusal is not None:
            effect = entry.spec.effect.value if entry else ""
            tool = entry.spec.name if entry else safe_name(name)
            self._note(call_id, tool, effect, "refused", 0, refusal["error"], started)
            return _finish(refusal, 0, False, effect)
        assert entry is not None and checked is not None
        call = _Call(call_id, entry, checked)
        holder.append(call)
        if entry.spec.effect is Effect.READ:
            return self._read(call)
        try:
            key = self._key(call)
        except Exception:
            log.exception("%s %s: idempotency_key failed", call_id, entry.spec.name)
            self._note(call_id, entry.spec.name, entry.spec.effect.value, "refused", 0,
                       ErrorCode.TOOL_FAILURE.value, started)
            return _finish(failure(ErrorCode.TOOL_FAILURE), 0, False, entry.spec.effect)
        call.key = key
        if entry.spec.effect is Effect.REVERSIBLE_WRITE:
            return self._reversible(call, key)
        return self._ask_approval(call, key)

    @staticmethod
    def _runner_failed(holder: list[_Call]) -> dict[str, Any]:
        """The answer when the runner itself failed: honest about whether anything ran."""
        call = holder[0] if holder else None
        effect: Effect | str = call.spec.effect if call is not None else ""
        if call is not None and call.attempts:
            unknown = failure(ErrorCode.OUTCOME_UNKNOWN, retryable=effect is Effect.READ)
            return _finish(unknown, call.attempts, False, effect)
        return _finish(failure(ErrorCode.TOOL_FAILURE), 0, False, effect)

    def approve(self, approval_id: Any) -> dict[str, Any]:
        """Run the one call this approval was asked for, once; again returns the same result.

        The state machine (:mod:`agentkit.policy.approvals`) decides whether this approver
        runs it; the run goes through the idempotency store, so an approver that died mid-run
        is recovered by the status lookup (or ``outcome_unknown``), never simply run again.
        A store that cannot be used answers ``busy``: nothing ran.
        """
        call_id = new_call_id()
        started = time.monotonic()
        try:
            return self._approve(call_id, approval_id, started)
        except StoreError as exc:
            log.error("%s approve %s: the store failed before anything ran: %s",
                      call_id, safe_name(approval_id), exc)
            return _finish(failure(ErrorCode.BUSY), 0, False, Effect.IRREVERSIBLE_WRITE)

    def _approve(self, call_id: str, approval_id: Any, started: float) -> dict[str, Any]:
        prepared: list[_Call] = []
        step = self.approvals.begin(approval_id, lambda record: self._prepare(call_id, record, prepared))
        if step.action != RUN:
            return self._answer_approval(call_id, approval_id, step, started)
        assert step.record is not None and prepared
        call, record = prepared[-1], step.record
        result = self._run_approved(call, record, started)
        settled = _finish({k: v for k, v in result.items() if k != "replayed"}, call.attempts,
                          False, Effect.IRREVERSIBLE_WRITE)
        try:
            self.approvals.finish(record, settled, ran=call.attempts > 0)
        except StoreError as exc:  # the run's outcome is known and returned; the record waits
            log.error("%s %s: the approval could not be settled in the store: %s",
                      call_id, call.spec.name, exc)
        return _finish(result, call.attempts, bool(result.get("replayed")), Effect.IRREVERSIBLE_WRITE)

    def _prepare(self, call_id: str, record: dict[str, Any], prepared: list[_Call]) -> tuple[dict[str, Any] | None, float]:
        """Check an approved call again before it runs (the tool or the caller's rights may
        have changed since it was asked for): a refusal, or None and the run's lease."""
        entry, checked, refusal = preflight(
            self.registry, record["tool"], record["arguments"], self.context, call_id
        )
        if refusal is not None:
            return refusal, 0.0
        assert entry is not None and checked is not None
        call = _Call(call_id, entry, checked, key=record["key"])
        prepared.append(call)
        return None, self._lease(call)

    def _run_approved(self, call: _Call, record: dict[str, Any], started: float) -> dict[str, Any]:
        """The one run of an approved irreversible write, under its key's claim."""
        result = self.store.run_once(
            record["key"],
            lambda: self._irreversible_attempt(call),
            record["fingerprint"],
            recover=self._recoverer(call),
            lease_seconds=self._lease(call),
            full_sync=True,
        )
        if result.get("replayed"):
            self._note(call.call_id, call.spec.name, call.spec.effect.value, "replay", 0, "ok", started)
        return result

    def _answer_approval(self, call_id: str, approval_id: Any, step: Step,
                         started: float) -> dict[str, Any]:
        """Trace and stamp an approval decision that ran nothing."""
        assert step.result is not None
        tool = step.record["tool"] if step.record else safe_name(approval_id)
        if step.action == REPLAY:
            return self._replay_settled(call_id, tool, step.result, started)
        code = step.result.get("error", "")
        if step.action == REFUSED:
            self._note(call_id, tool, Effect.IRREVERSIBLE_WRITE.value, "refused", 0, code, started)
        elif code != ErrorCode.IN_PROGRESS.value:
            effect = Effect.IRREVERSIBLE_WRITE.value if step.record else ""
            self._note(call_id, tool, effect, "approval", 0, code, started)
        return _finish(step.result, 0, False, Effect.IRREVERSIBLE_WRITE)

    def deny(self, approval_id: Any) -> dict[str, Any]:
        """Settle a pending approval as ``forbidden``: nothing runs, now or later."""
        call_id = new_call_id()
        started = time.monotonic()
        denied = _finish(failure(ErrorCode.FORBIDDEN), 0, False, Effect.IRREVERSIBLE_WRITE)
        try:
            step = self.approvals.deny(approval_id, denied)
        except StoreError as exc:
            log.error("%s deny %s: the store failed: %s", call_id, safe_name(approval_id), exc)
            return _finish(failure(ErrorCode.BUSY), 0, False, Effect.IRREVERSIBLE_WRITE)
        if step.action == DENIED:
            assert step.record is not None
            self._note(call_id, step.record["tool"], Effect.IRREVERSIBLE_WRITE.value, "approval", 0,
                       ErrorCode.FORBIDDEN.value, started)
            return dict(denied)
        if step.action == REPLAY:
            assert step.record is not None and step.result is not None
            return self._replay_settled(call_id, step.record["tool"], step.result, started)
        assert step.result is not None
        return _finish(step.result, 0, False, Effect.IRREVERSIBLE_WRITE)

    # ------------------------------------------------------------------ async hosts

    async def acall(
        self, name: Any, arguments: Any, *, call_id: str | None = None
    ) -> dict[str, Any]:
        """:meth:`call` for async hosts: the same policy, the same results.

        The policy itself (retries, status lookups, store calls, the injected ``sleep``) runs on
        a worker thread, so the event loop never waits on SQLite, a slot or a backoff; a
        coroutine handler or status lookup is sent back to this loop and runs there under
        ``asyncio.timeout``. Sharing one code path is what makes the results identical. If the
        awaiting task is cancelled, the call goes on to its end and its outcome is recorded.
        """
        return await self._off_loop(lambda: self.call(name, arguments, call_id=call_id))

    async def aapprove(self, approval_id: Any) -> dict[str, Any]:
        """:meth:`approve` for async hosts (see :meth:`acall`)."""
        return await self._off_loop(lambda: self.approve(approval_id))

    async def adeny(self, approval_id: Any) -> dict[str, Any]:
        """:meth:`deny` for async hosts (see :meth:`acall`)."""
        return await self._off_loop(lambda: self.deny(approval_id))

    async def _off_loop(self, method: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            return await run_on_worker(method)
        except WorkerUnavailable:
            log.warning("busy: no worker thread could be started for a runner call")
            return _finish(failure(ErrorCode.BUSY), 0, False, "")

    def pending_approvals(self) -> list[dict[str, Any]]:
        """The approvals in the store that still wait for a decision, oldest first: those
        this runner opened and those any earlier process (a restarted kernel, the CLI,
        another host) opened in the same store. Each has ``approval_id``, ``tool``,
        ``arguments``, ``task_id`` and ``principal``. Raises ``StoreError`` if the store
        cannot be read (this is a person's view, not model input)."""
        return [public_view(record) for record in self.approvals.pending()]

    # ------------------------------------------------------------------ reads

    def _read(self, call: _Call) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for number in range(1, call.spec.max_attempts + 1):
            if number > 1:
                self._pause(number - 1)
            result, attempt = self._attempt(call)
            if attempt is None or result["ok"] or result["error"] not in _READ_RETRY:
                break
        return _finish(result, call.attempts, False, Effect.READ)

    # ------------------------------------------------------------------ reversible writes

    def _key(self, call: _Call) -> str:
        spec = call.spec
        if spec.idempotency_key is not None:
            return str(spec.idempotency_key(self.context, call.arguments))
        return f"{self.context.task_id}:{spec.name}:{fingerprint_of(call.arguments)}"

    def _fingerprint(self, call: _Call) -> str:
        return fingerprint_of({"tool": call.spec.name, "arguments": call.arguments})

    def _reversible(self, call: _Call, key: str) -> dict[str, Any]:
        started = time.monotonic()
        result = self.store.run_once(
            key,
            lambda: self._write_attempts(call),
            self._fingerprint(call),
            recover=self._recoverer(call),
            lease_seconds=self._lease(call),
            on_claim=lambda token: setattr(call, "token", token),
        )
        replayed = bool(result.get("replayed"))
        if replayed or (call.number == 0 and not result["ok"]):
            outcome = "ok" if result["ok"] else result["error"]
            step = "replay" if replayed else "refused"
            self._note(call.call_id, call.spec.name, call.spec.effect.value, step, 0, outcome, started)
        return _finish(result, call.attempts, replayed, Effect.REVERSIBLE_WRITE)

    def _write_attempts(self, call: _Call) -> dict[str, Any]:
        """Inside the key's claim: attempt, and after any doubt ask before acting again."""
        max_attempts = call.spec.max_attempts
        for number in range(1, max_attempts + 1):
            result, attempt = self._attempt(call)
            if attempt is None or result["ok"]:
                return result
            code = result["error"]
            if code == ErrorCode.BUSY.value:  # nothing ran: safe to try again
                if number < max_attempts:
                    self._pause(number)
                    continue
                return result
            if code not in _UNSURE:
                return result
            if call.spec.status_lookup is None:
                return self._unknown(call, attempt)
            self._pause(number)
            # Decided before the lookup starts: a write that lands while the lookup runs would
            # make its "not done" stale, so "not done" counts only if the attempt had already
            # returned when the lookup began.
            returned_before_lookup = not attempt.running
            status, receipt = self._lookup(call)
            if status == "done":
                return receipt  # type: ignore[return-value]
            if status == "not_done" and returned_before_lookup:
                if number < max_attempts:
                    continue
                # Known not done, attempts used up: a plain failure, safe to ask again later.
                return failure(ErrorCode.TRANSIENT_FAILURE)
            return self._unknown(call, attempt)
        return failure(ErrorCode.TRANSIENT_FAILURE)  # not reached: the loop always returns

    def _unknown(self, call: _Call, attempt: Attempt) -> dict[str, Any]:
        """End a write as ``outcome_unknown``. The key's claim stays (nothing may rewrite
        blindly), and goes stale the moment our attempt has really returned, so that the
        next caller asks the status lookup instead of hearing ``in_progress`` for a lease."""
        key, token = call.key, call.token
        attempt.add_done_callback(lambda: self._abandon(key, token))
        return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)

    def _abandon(self, key: str, token: str) -> None:
        """Our late attempt returned: its claim (that token only) may be recovered now."""
        try:
            self.store.abandon(key, token)
        except StoreError as exc:
            # The claim keeps its lease; the next caller waits it out, then asks the lookup.
            log.error("could not mark the claim on key %r stale: %s", key, exc)

    def _lookup(self, call: _Call) -> tuple[str, dict[str, Any] | None]:
        """Ask the tool whether the write took effect: ``done`` (with the receipt as an ok
        result), ``not_done`` or ``unknown``. Spends one budget unit."""
        spec = call.spec
        started = time.monotonic()
        if not self.budget.spend(spec.effect):
            self._note(call.call_id, spec.name, spec.effect.value, "status_lookup", call.number,
                       "budget_exhausted", started)
            return "unknown", None
        probe = Attempt(tool=spec.name, call_id=call.call_id)
        lookup = spec.status_lookup
        assert lookup is not None
        render = renderer(self.registry, spec, call.call_id)
        status = run_limited(
            lookup, call.arguments, attempt=probe, timeout=spec.timeout_seconds, slot=None,
            finish=lambda value: None if value is None else render(value),
        )
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
            receipt = dict(probe.value)  # rendered on the worker, like a handler's value
        self._note(call.call_id, spec.name, spec.effect.value, "status_lookup", call.number, outcome, started)
        return outcome, receipt

    def _recoverer(self, call: _Call) -> Callable[[], dict[str, Any] | None] | None:
        """For a stale claim (its owner died mid-write): the status lookup decides."""
        if call.spec.status_lookup is None:
            return None

        def recover() -> dict[str, Any] | None:
            status, receipt = self._lookup(call)
            if status == "unknown":
                raise RuntimeError("status unknown")
            return receipt

        return recover

    def _lease(self, call: _Call) -> float:
        """The claim must outlive the owner's worst case: every attempt, lookup and pause."""
        spec = call.spec
        return spec.max_attempts * (2 * spec.timeout_seconds + self._backoff.cap) + spec.timeout_seconds

    # ------------------------------------------------------------------ irreversible writes

    def _ask_approval(self, call: _Call, key: str) -> dict[str, Any]:
        """The first call of an irreversible write: open (or find) its approval; nothing runs.
        With the budget spent no person is asked: ``budget_exhausted``."""
        started = time.monotonic()
        spec = call.spec
        if not self.budget.can_spend(spec.effect):
            self._note(call.call_id, spec.name, spec.effect.value, "refused", 0,
                       ErrorCode.BUDGET_EXHAUSTED.value, started)
            return _finish(failure(ErrorCode.BUDGET_EXHAUSTED), 0, False, spec.effect)
        fingerprint = self._fingerprint(call)
        try:
            record = self.approvals.open(key, fingerprint, spec.name, call.arguments, self.context)
        except StoreError as exc:
            log.error("%s %s: the store failed, no approval opened: %s", call.call_id, spec.name, exc)
            self._note(call.call_id, spec.name, spec.effect.value, "refused", 0,
                       ErrorCode.BUSY.value, started)
            return _finish(failure(ErrorCode.BUSY), 0, False, spec.effect)
        if record["fingerprint"] != fingerprint:
            self._note(call.call_id, spec.name, spec.effect.value, "refused", 0,
                       ErrorCode.IDEMPOTENCY_CONFLICT.value, started)
            return _finish(failure(ErrorCode.IDEMPOTENCY_CONFLICT), 0, False, spec.effect)
        if record["state"] == SETTLED:
            return self._replay_settled(call.call_id, spec.name, settled_result(record), started)
        if record["state"] == RUNNING:
            return _finish(failure(ErrorCode.IN_PROGRESS), 0, False, spec.effect)
        self._note(call.call_id, spec.name, spec.effect.value, "approval", 0,
                   ErrorCode.APPROVAL_REQUIRED.value, started)
        asked = failure(ErrorCode.APPROVAL_REQUIRED, approval_id=record["approval_id"])
        return _finish(asked, 0, False, spec.effect)

    def _irreversible_attempt(self, call: _Call) -> dict[str, Any]:
        result, _ = self._attempt(call)
        return result if result["ok"] else {**result, "retryable": False}

    def _replay_settled(self, call_id: str, tool: str, result: dict[str, Any], started: float) -> dict[str, Any]:
        outcome = "ok" if result.get("ok") else result.get("error", "")
        self._note(call_id, tool, Effect.IRREVERSIBLE_WRITE.value, "replay", 0, outcome, started)
        return _finish(result, 0, True, Effect.IRREVERSIBLE_WRITE)

    # ------------------------------------------------------------------ shared steps

    def _attempt(self, call: _Call) -> tuple[dict[str, Any], Attempt | None]:
        """One handler attempt through the boundary, paid for from the budget."""
        spec = call.spec
        started = time.monotonic()
        if not self.budget.spend(spec.effect):
            self._note(call.call_id, spec.name, spec.effect.value, "refused", call.number,
                       ErrorCode.BUDGET_EXHAUSTED.value, started)
            return failure(ErrorCode.BUDGET_EXHAUSTED), None
        call.number += 1
        result, attempt = execute(self.registry, call.entry, call.arguments, call.call_id)
        if attempt.started:
            call.attempts += 1
        else:
            self.budget.refund(spec.effect)
        outcome = "ok" if result["ok"] else result["error"]
        self.trace.add(TraceRecord(
            call.call_id, spec.name, spec.effect.value, "attempt", call.number, outcome,
            attempt.started, False, started, time.monotonic(), attempt,
        ))
        return result, attempt

    def _pause(self, retry: int) -> None:
        self._sleep(self._backoff.delay(retry))

    def _note(self, call_id: str, tool: str, effect: str, step: str, number: int,
              outcome: str, started: float) -> None:
        self.trace.add(TraceRecord(
            call_id, tool, effect, step, number, outcome, False, step == "replay",
            started, time.monotonic(),
        ))


def _finish(result: dict[str, Any], attempts: int, replayed: bool, effect: Effect | str) -> dict[str, Any]:
    """Stamp ``attempts``/``replayed``; a write whose outcome is unknown is never retryable."""
    out = dict(result, attempts=attempts, replayed=replayed)
    if effect and Effect(effect).is_write and out.get("error") == ErrorCode.OUTCOME_UNKNOWN.value:
        out["retryable"] = False
    # Stored results come back with sorted keys: print every result in one order.
    return dict(sorted(out.items(), key=lambda item: _ORDER.get(item[0], len(_ORDER))))


_ORDER = {key: n for n, key in enumerate([
    "ok", "data", "error", "retryable", "detail", "truncated", "original_chars", "redactions",
    "approval_id", "attempts", "replayed",
])}
