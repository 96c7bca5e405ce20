"""Stable error codes: the last stage of the pipeline, and the only failure vocabulary the model sees.

A model cannot read a stack trace, and should never be shown one: it may leak secrets, and
its wording changes with every refactor. So every failure leaves the boundary as one of a
fixed set of codes, each with a ``retryable`` flag that tells the caller whether asking again
can possibly help. The exception itself goes to the ``agentkit`` logger.
"""

from __future__ import annotations

import enum
from typing import Any


class ErrorCode(str, enum.Enum):
    """The stable error codes (docs/design.md#error-codes). Values are what the model sees."""

    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    FORBIDDEN = "forbidden"
    TRANSIENT_FAILURE = "transient_failure"
    OUTCOME_UNKNOWN = "outcome_unknown"
    BUSY = "busy"
    TOOL_FAILURE = "tool_failure"
    BUDGET_EXHAUSTED = "budget_exhausted"
    APPROVAL_REQUIRED = "approval_required"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    IN_PROGRESS = "in_progress"

    def __str__(self) -> str:
        return self.value


#: Whether asking again can help, per code. ``outcome_unknown`` is the one code whose answer
#: depends on the tool: a read may be asked again, a write may not (the first may have landed).
RETRYABLE: dict[ErrorCode, bool] = {
    ErrorCode.UNKNOWN_TOOL: False,
    ErrorCode.INVALID_ARGUMENTS: False,
    ErrorCode.FORBIDDEN: False,
    ErrorCode.TRANSIENT_FAILURE: True,
    ErrorCode.OUTCOME_UNKNOWN: True,
    ErrorCode.BUSY: True,
    ErrorCode.TOOL_FAILURE: False,
    ErrorCode.BUDGET_EXHAUSTED: False,
    ErrorCode.APPROVAL_REQUIRED: False,
    ErrorCode.IDEMPOTENCY_CONFLICT: False,
    ErrorCode.IN_PROGRESS: True,
}


def failure(code: ErrorCode | str, *, retryable: bool | None = None, **extra: Any) -> dict[str, Any]:
    """Build the result dict of a failed call: ``ok``, ``error``, ``retryable``, then ``extra``."""
    code = ErrorCode(code)
    result: dict[str, Any] = {
        "ok": False,
        "error": code.value,
        "retryable": RETRYABLE[code] if retryable is None else bool(retryable),
    }
    result.update(extra)
    return result


def classify_exception(exc: BaseException) -> ErrorCode:
    """Map an exception raised *by a handler* to a code.

    ``TimeoutError`` raised by the handler itself (a socket timeout, say) is a transient
    failure of the handler's own dependency, not the boundary's timeout, which is reported
    as ``outcome_unknown`` by the concurrency stage. ``TypeError`` is a bug in the handler:
    the arguments were already checked against the schema, so it is a ``tool_failure``.
    """
    if isinstance(exc, PermissionError):
        return ErrorCode.FORBIDDEN
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return ErrorCode.TRANSIENT_FAILURE
    return ErrorCode.TOOL_FAILURE
