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

from agentkit.boundary.authorization import authorize
from agentkit.boundary.concurrency import (
    Attempt,
    WorkerUnavailable,
    is_coroutine_handler,
    run_limited,
    run_on_this_loop,
    run_on_worker,
)
from agentkit.boundary.context import CallContext
from agentkit.boundary.errors import ErrorCode, classify_exception, failure, handler_failure
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

    A coroutine handler whose slot is free (or that has no limit) runs every stage right here
    on the caller's loop, the handler under ``asyncio.timeout``: the checks before it take
    microseconds, and a thread hop there and back would cost several times all of them.
    Otherwise (a sync handler, or a slot to wait for) the pipeline runs on a worker thread, so
    the loop is never blocked, and a coroutine handler is sent back to this loop. Both ways
    share :func:`preflight`, the renderer and :func:`conclude`, so their results cannot drift.
    """
    entry = registry.entry(name)
    if entry is not None and is_coroutine_handler(entry.spec.handler):
        slot = entry.slot
        if slot is None or slot.acquire(blocking=False):
            return await _ainvoke_here(registry, entry, name, arguments, context, call_id)
    try:
        return await run_on_worker(invoke_tool, registry, name, arguments, context, call_id=call_id)
    except WorkerUnavailable:
        log.warning("%s: busy, no worker thread could be started", safe_name(name))
        return failure(ErrorCode.BUSY)


async def _ainvoke_here(
    registry: ToolRegistry,
    entry: RegisteredTool,
    name: Any,
    arguments: Any,
    context: CallContext | None,
    call_id: str | None,
) -> dict[str, Any]:
    """Every stage on this loop, for a coroutine handler whose slot (if any) is already held."""
    held = entry.slot
    try:
        context = _context(context)
        call_id = call_id or new_call_id()
        try:
            _, checked, refusal = preflight(registry, name, arguments, context, call_id)
            if refusal is not None:
                return refusal
            assert checked is not None
            spec = entry.spec
            attempt = Attempt(tool=spec.name, call_id=call_id)
            held = None  # from here the attempt releases the slot when the handler ends
            status = await run_on_this_loop(
                spec.handler, checked, attempt=attempt, timeout=spec.timeout_seconds,
                slot=entry.slot, finish=renderer(registry, spec, call_id),
            )
            return conclude(entry, attempt, status, call_id)
        except Exception:  # a bug in the boundary itself must still not reach the model
            log.exception("%s %s: the boundary failed", call_id, safe_name(name))
            return failure(ErrorCode.TOOL_FAILURE)
    finally:
        if held is not None:
            held.release()


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
    return execute(registry, entry, checked, call_id)


def execute(
    registry: ToolRegistry, entry: RegisteredTool, checked: dict[str, Any], call_id: str
) -> tuple[dict[str, Any], Attempt]:
    """The stages after authorization: limits, handler, redact/truncate, stable error."""
    spec = entry.spec
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
        code = classify_exception(attempt.error)
        log.error(
            "%s %s: handler raised %s -> %s",
            call_id, spec.name, type(attempt.error).__name__, code.value,
            exc_info=attempt.error,
        )
        return handler_failure(attempt.error, code)

    shaped: dict[str, Any] = attempt.value  # rendered on the worker, inside the attempt
    return dict(shaped)


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

