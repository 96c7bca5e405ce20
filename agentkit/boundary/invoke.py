"""``invoke_tool``: one attempt through the whole pipeline, in the order of the picture.

    schema check → authorization → concurrency/timeout → handler → redact/truncate → stable error

It never raises for anything a model can send: any name, any arguments value. What reaches
the model is a small JSON-serialisable dict; what went wrong in detail reaches the
``agentkit`` logger, with the exception, the tool name and a call id. Only exceptions that
are not ``Exception`` subclasses (KeyboardInterrupt, SystemExit) propagate, because those are
the person at the keyboard or the interpreter asking to stop, not the tool failing.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

from agentkit.boundary.attempt import Attempt
from agentkit.boundary.authorization import authorize
from agentkit.boundary.call_info import InvokedCall
from agentkit.boundary.cancellation import HandlerCancelled
from agentkit.boundary.concurrency import arun_limited, run_here, run_limited
from agentkit.boundary.context import CallContext
from agentkit.boundary.errors import (
    ErrorCode,
    InvalidInput,
    NotStarted,
    classify_exception,
    failure,
    handler_failure,
    safe_detail,
)
from agentkit.boundary.redaction import safe_name, shape_output, type_name
from agentkit.boundary.registry import RegisteredTool, ToolRegistry
from agentkit.boundary.schema import check_arguments
from agentkit.boundary.spec import Effect, ToolSpec

log = logging.getLogger("agentkit")

_call_numbers = itertools.count(1)


def new_call_id() -> str:
    """A call id that is unique in this process and the same on every fresh run (no randomness:
    notebooks show these ids and nbval compares them)."""
    return f"call-{next(_call_numbers):04d}"


def invoke_tool(
    registry: ToolRegistry,
    name: Any,
    arguments: Any,
    context: CallContext | None = None,
    *,
    call_id: str | None = None,
) -> dict[str, Any]:
    """Run one attempt of a tool call through the boundary and return what the model sees."""
    result, _ = invoke_attempt(registry, name, arguments, context, call_id=call_id)
    return result


async def ainvoke_tool(
    registry: ToolRegistry,
    name: Any,
    arguments: Any,
    context: CallContext | None = None,
    *,
    call_id: str | None = None,
) -> dict[str, Any]:
    """:func:`invoke_tool` for async hosts: the same pipeline and the same results.

    The checks before the handler (microseconds) run here on the caller's loop; then
    :func:`aexecute` runs the attempt: a coroutine handler on this loop under
    ``asyncio.timeout`` (no thread hand-off), a sync handler on a worker thread (one hand-off
    there and one back). Only the caller's own cancellation propagates.
    """
    context = _context(context)
    call_id = call_id or new_call_id()
    try:
        entry, checked, refusal = preflight(registry, name, arguments, context, call_id)
        if refusal is not None:
            return refusal
        assert entry is not None and checked is not None
        # aexecute, one frame less (this is every async call's path).
        slot = entry.slot
        spec = entry.spec
        attempt = Attempt(spec.name, call_id,
                          InvokedCall(call_id, context.task_id, spec.name, spec.effect._value_))
        if entry.coroutine and (slot is None or slot.acquire(blocking=False)):
            # The common case: the handler runs right here.
            status = await run_here(spec.handler, checked, attempt, spec.timeout_seconds, slot,
                                    renderer(registry, spec, call_id), renders_large)
        else:
            status = await arun_limited(
                spec.handler, checked, attempt=attempt, timeout=spec.timeout_seconds, slot=slot,
                finish=renderer(registry, spec, call_id), heavy=renders_large,
                coroutine=entry.coroutine, pace=entry.pace,
            )
        return conclude(entry, attempt, status, call_id)
    except Exception:  # a bug in the boundary itself must still not reach the model
        log.exception("%s %s: the boundary failed", call_id, safe_name(name))
        return failure(ErrorCode.TOOL_FAILURE)


#: The context of a call that names none (frozen, so one instance serves every call).
_DEFAULT_CONTEXT = CallContext()


def _context(context: CallContext | None) -> CallContext:
    if context is None:
        return _DEFAULT_CONTEXT
    if not isinstance(context, CallContext):
        raise TypeError("context must be a CallContext or None")
    return context


def invoke_attempt(
    registry: ToolRegistry,
    name: Any,
    arguments: Any,
    context: CallContext | None = None,
    *,
    call_id: str | None = None,
) -> tuple[dict[str, Any], Attempt | None]:
    """Like :func:`invoke_tool`, and also the :class:`Attempt` when a handler was submitted,
    so the runner can tell whether the handler ran and whether it is still running."""
    context = _context(context)
    call_id = call_id or new_call_id()
    try:
        return _pipeline(registry, name, arguments, context, call_id)
    except Exception:  # a bug in the boundary itself must still not reach the model
        log.exception("%s %s: the boundary failed", call_id, safe_name(name))
        return failure(ErrorCode.TOOL_FAILURE), None


def preflight(
    registry: ToolRegistry, name: Any, arguments: Any, context: CallContext, call_id: str
) -> tuple[RegisteredTool | None, dict[str, Any] | None, dict[str, Any] | None]:
    """The stages before anything runs: lookup, schema check, authorization.

    Returns ``(entry, checked_arguments, None)`` when the call may run, else
    ``(entry_or_None, None, failure)``. The runner uses it to refuse a call before it spends
    budget or builds an idempotency key from arguments that were never valid.
    """
    entry = registry.entry(name)
    if entry is None:
        log.info("%s %s: unknown tool", call_id, safe_name(name))
        return None, None, failure(ErrorCode.UNKNOWN_TOOL)
    spec = entry.spec
    checked, refusal = check_arguments(
        arguments, spec.parameters or {}, entry.validator, spec.max_argument_chars
    )
    if refusal is not None:
        log.info("%s %s: invalid arguments: %s", call_id, spec.name, refusal["detail"])
        return entry, None, refusal
    assert checked is not None
    reason = authorize(spec, checked, context, registry.policies)
    if reason is not None:
        log.warning("%s %s: forbidden for %s: %s", call_id, spec.name, context.principal, reason)
        return entry, None, failure(ErrorCode.FORBIDDEN)
    return entry, checked, None


def _pipeline(
    registry: ToolRegistry, name: Any, arguments: Any, context: CallContext, call_id: str
) -> tuple[dict[str, Any], Attempt | None]:
    entry, checked, refusal = preflight(registry, name, arguments, context, call_id)
    if refusal is not None:
        return refusal, None
    assert entry is not None and checked is not None
    spec = entry.spec
    about = InvokedCall(call_id, context.task_id, spec.name, spec.effect._value_)
    return execute(registry, entry, checked, call_id, Attempt(spec.name, call_id, about))


def execute(
    registry: ToolRegistry, entry: RegisteredTool, checked: dict[str, Any], call_id: str,
    attempt: Attempt | None = None,
) -> tuple[dict[str, Any], Attempt]:
    """The stages after authorization: limits, handler, redact/truncate, stable error.

    ``attempt`` is the record to run it in, when the caller made it beforehand (the policy
    does: it must know the attempt even when the wait is interrupted); else a new one."""
    spec = entry.spec
    if attempt is None:
        attempt = Attempt(tool=spec.name, call_id=call_id)
    status = run_limited(
        spec.handler,
        checked,
        attempt=attempt,
        timeout=spec.timeout_seconds,
        slot=entry.slot,
        finish=renderer(registry, spec, call_id),
    )
    return conclude(entry, attempt, status, call_id), attempt


async def aexecute(
    registry: ToolRegistry, entry: RegisteredTool, checked: dict[str, Any], call_id: str,
    attempt: Attempt | None = None,
) -> tuple[dict[str, Any], Attempt]:
    """:func:`execute` for a caller on an event loop: the same result dict and the same
    :class:`Attempt` (started, running, done callbacks, ``mark_landed``), under the same
    concurrency slot as sync callers (see :func:`~agentkit.boundary.concurrency.arun_limited`).

    A coroutine handler runs on this loop under ``asyncio.timeout`` with no thread hand-off,
    and holds no thread while it awaits; a sync handler runs on a worker thread (two
    hand-offs). A large value (:func:`renders_large`) is rendered on a worker, never on the
    loop. Raises only ``CancelledError``, when the awaiting task itself is cancelled (the
    attempt then ends as a sync caller that gave up would leave it). ``attempt``: as for
    :func:`execute`.
    """
    spec = entry.spec
    if attempt is None:
        attempt = Attempt(spec.name, call_id)
    if entry.coroutine and (entry.slot is None or entry.slot.acquire(blocking=False)):
        # The common case in one step less: no slot to wait for, the handler runs right here.
        status = await run_here(spec.handler, checked, attempt, spec.timeout_seconds, entry.slot,
                                renderer(registry, spec, call_id), renders_large)
        return conclude(entry, attempt, status, call_id), attempt
    status = await arun_limited(
        spec.handler,
        checked,
        attempt=attempt,
        timeout=spec.timeout_seconds,
        slot=entry.slot,
        finish=renderer(registry, spec, call_id),
        heavy=renders_large,
        coroutine=entry.coroutine,
        pace=entry.pace,
    )
    return conclude(entry, attempt, status, call_id), attempt


#: Rendered text longer than this (an estimate, read before rendering) is redacted and cut on
#: a worker thread rather than on an event loop: about a millisecond of work at most there.
RENDER_ON_LOOP_MAX_CHARS = 65_536

#: How many items of a dict/list value :func:`renders_large` looks at before it calls the
#: value large without looking further (a value that big is rendered on a worker anyway).
_ESTIMATE_ITEMS = 1_024


def renders_large(value: Any) -> bool:
    """Whether ``value``'s rendered text may exceed :data:`RENDER_ON_LOOP_MAX_CHARS`, decided
    without rendering it: a str by its length, a number, bool or None never, a dict, list or
    tuple by the lengths of what it holds (at most ``_ESTIMATE_ITEMS`` items looked at, else
    large), and any other object (whose ``__str__`` may do anything) always."""
    kind = type(value)
    if kind is str:
        return len(value) > RENDER_ON_LOOP_MAX_CHARS
    if kind is list or kind is tuple:  # the common small result: a few short strings
        if len(value) <= 16:
            size = 0
            for item in value:
                if type(item) is not str:
                    break
                size += len(item)
            else:
                return size * _ESCAPED > RENDER_ON_LOOP_MAX_CHARS
    elif value is None or kind is bool or kind is float or (kind is int and value.bit_length() < 64):
        return False
    elif kind is not dict:
        return not isinstance(value, str) or str.__len__(value) > RENDER_ON_LOOP_MAX_CHARS
    return _estimate_large(value)


#: JSON text of a string inside a value is at most this many times its length (a control
#: character becomes ``\u0001``): the estimate assumes the worst.
_ESCAPED = 6


def _estimate_large(value: Any) -> bool:
    size = 0
    seen = 0
    stack = [value]
    while stack:
        item = stack.pop()
        seen += 1
        if seen > _ESTIMATE_ITEMS:
            return True
        kind = type(item)
        if kind is str:
            size += len(item) * _ESCAPED + 2
        elif kind is dict:
            for key, inner in item.items():
                if type(key) is not str:
                    return True
                size += len(key) * _ESCAPED + 4
                stack.append(inner)
        elif kind is list or kind is tuple:
            size += 2
            stack.extend(item)
        elif item is None or kind is bool or kind is float or (kind is int and item.bit_length() < 64):
            size += 24
        else:
            return True  # an object of its own (or a subclass): rendering may run its code
        if size > RENDER_ON_LOOP_MAX_CHARS:
            return True
    return False


def conclude(entry: RegisteredTool, attempt: Attempt, status: str, call_id: str) -> dict[str, Any]:
    """What the model sees of an attempt that ended (or was given up on): ``busy``,
    ``outcome_unknown``, the handler's error as a stable code, or its rendered value."""
    spec = entry.spec
    if status == "busy":
        log.warning("%s %s: busy, no slot within %ss", call_id, spec.name, spec.timeout_seconds)
        return failure(ErrorCode.BUSY)
    if status == "timeout":
        log.warning(
            "%s %s: no answer within %ss; the handler may still complete",
            call_id, spec.name, spec.timeout_seconds,
        )
        attempt.add_done_callback(lambda: _log_late_finish(attempt))
        return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=spec.effect is Effect.READ)

    if attempt.error is not None:
        if not isinstance(attempt.error, Exception):
            raise attempt.error
        if isinstance(attempt.error, HandlerCancelled):
            log.warning(
                "%s %s: the handler raised CancelledError (nobody cancelled the call), so it "
                "returned no value; the outcome is unknown",
                call_id, spec.name,
            )
            return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=spec.effect is Effect.READ)
        if isinstance(attempt.error, NotStarted):  # the kit's own wrapper: nothing ran
            log.info("%s %s: not started: %s", call_id, spec.name, attempt.error)
            return failure(ErrorCode.BUSY)
        if isinstance(attempt.error, InvalidInput):
            # The model's mistake, not the tool's: said like the schema's own refusal, at
            # INFO and without a traceback. The detail logged is what the model reads:
            # redacted as the tool's output is, so a secret in the message reaches neither.
            refused = handler_failure(attempt.error, ErrorCode.INVALID_ARGUMENTS, entry.redactor)
            log.info(
                "%s %s: invalid arguments (the handler's %s): %s",
                call_id, spec.name, type(attempt.error).__name__, refused["detail"],
            )
            return refused
        code = classify_exception(attempt.error)
        if code is ErrorCode.TRANSIENT_FAILURE:
            # A dependency's passing fault (ConnectionError, the handler's own TimeoutError):
            # the runner's backoff is there for it, so one WARNING line, no traceback. What
            # the message says is shown as a result's detail would be (redacted, one line).
            log.warning(
                "%s %s: transient failure (the handler's %s: %s) -> %s",
                call_id, spec.name, type(attempt.error).__name__,
                _said(attempt.error, entry), code.value,
            )
        else:
            log.error(
                "%s %s: handler raised %s -> %s",
                call_id, spec.name, type(attempt.error).__name__, code.value,
                exc_info=attempt.error,
            )
        return handler_failure(attempt.error, code, entry.redactor)

    shaped: dict[str, Any] = attempt.value  # rendered on the worker, inside the attempt
    return dict(shaped)


def _said(exc: Exception, entry: RegisteredTool) -> str:
    """An exception's message fit for one log line: redacted as the tool's output is and
    cleaned like a result's detail; "" when its ``__str__`` itself fails."""
    try:
        return safe_detail(str(exc), redactor=entry.redactor)
    except Exception:
        return ""


def renderer(registry: ToolRegistry, spec: ToolSpec, call_id: str) -> Callable[[Any], dict[str, Any]]:
    """The redact/truncate stage for one attempt, run on the worker as soon as the handler
    returns, so that ``timeout_seconds`` covers it and the raw value is never kept.

    The handler did return, so the result is ok whatever happens here: a value that cannot be
    rendered at all is shown as ``<unrenderable TYPE>`` (and a write's store records it).
    """
    redactor = registry.redactor if spec.redact else None

    def render(value: Any) -> dict[str, Any]:
        try:
            return shape_output(value, spec.max_output_chars, redactor)
        except Exception as exc:  # a bug in redaction must not undo a write that happened
            log.error("%s %s: result could not be rendered", call_id, spec.name, exc_info=exc)
            return {"ok": True, "data": f"<unrenderable {type_name(value)}>"[: spec.max_output_chars]}

    return render


def _log_late_finish(attempt: Attempt) -> None:
    outcome = "ok" if attempt.error is None else type(attempt.error).__name__
    log.warning(
        "%s %s: handler finished after the caller gave up (%s)",
        attempt.call_id, attempt.tool, outcome,
    )

