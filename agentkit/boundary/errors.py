"""Stable error codes: the last stage of the pipeline, and the only failure vocabulary the model sees.

A model cannot read a stack trace, and should never be shown one: it may leak secrets, and
its wording changes with every refactor. So every failure leaves the boundary as one of a
fixed set of codes, each with a ``retryable`` flag that tells the caller whether asking again
can possibly help. The exception itself goes to the ``agentkit`` logger.
"""

from __future__ import annotations

import enum
import unicodedata
from typing import Any

from agentkit.boundary.redaction import REDACTED, Redactor, shape_output


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


#: The longest ``detail`` an :class:`InvalidInput` message may give the model.
MAX_DETAIL_CHARS = 200


class InvalidInput(Exception):
    """Raised by a handler to say "your input was wrong", not "I have a bug".

    The schema cannot know every wrong value: a document id that does not exist, a date in
    the past. A handler that finds one raises ``InvalidInput("no document with that id: search
    first")``; the boundary answers ``invalid_arguments`` (not retryable: the runner never asks
    again) with the message as ``detail``, bounded to :data:`MAX_DETAIL_CHARS` characters with
    control, bidirectional and zero-width characters removed, and logs it. The message is the
    one text of a handler that reaches the model: write it for the model (what was wrong,
    what to do instead), and do not put secrets or a stack trace in it; it goes through the
    same redaction as the tool's output all the same, before it is cut. Any other exception
    stays ``tool_failure``, whose text never reaches the model.

    A subclass that does not call ``super().__init__`` is still ``invalid_arguments``: its
    message is then ``str(exc)`` (the arguments it was raised with).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = str(message)

    @property
    def detail(self) -> str:
        """The message as the model sees it: :func:`safe_detail` (a tool's result also
        redacts it with the registry's redactor: :func:`handler_failure`)."""
        return safe_detail(message_of(self))


class NotApplied(Exception):
    """Raised by a write's handler to say "nothing took effect": a declined card, a refusal
    the downstream service gave before it acted.

    A write's handler that raises anything else has not been shown to fail: it may have
    landed first and then raised (a bug reading the response). The runner treats such an
    exception as doubt: it asks the tool's status lookup before the key is freed or the
    approval settled, and without a lookup answers ``outcome_unknown`` and keeps the claim
    (docs/design.md#a-writes-exception-is-doubt). ``NotApplied`` is the handler's word that nothing happened: the
    result is ``tool_failure``, not retryable, and the key is free at once (the same intent
    may be asked for again). Its message, like any exception's, is logged and never reaches
    the model.

    Raise it only when the write is known not to have happened. A subclass that is also a
    ``PermissionError`` (a downstream refusal) answers ``forbidden`` instead, and still frees
    the key.
    """


class NotStarted(Exception):
    """Raised by a wrapper the kit itself puts around a handler, before the handler starts,
    to say "nothing ran": a transactional write's transaction found its key settled by
    another call meanwhile, or could not begin (docs/design.md#transactional-writes). The
    boundary answers ``busy`` and logs one INFO line, with no traceback; the policy that
    raised it reads its own answer from it (:attr:`answer`). Not for handlers: a handler
    that did not act raises :class:`NotApplied`."""

    def __init__(self, message: str, answer: dict[str, Any]) -> None:
        super().__init__(message)
        self.answer = answer


def message_of(exc: InvalidInput) -> str:
    """An :class:`InvalidInput`'s message, also for a subclass that skipped
    ``super().__init__`` (then ``str(exc)``); "" when even that fails."""
    try:
        message = exc.__dict__.get("message")
        return str.__str__(message) if isinstance(message, str) else str.__str__(str(exc))
    except Exception:  # a subclass's own __str__ raised: the default detail says enough
        return ""


#: How much of a message is scanned for secrets before it is cleaned and cut to its limit:
#: white space collapses when it is cleaned, so more than the limit may end up shown.
_SCANNED_PER_SHOWN = 8


def safe_detail(text: str, limit: int = MAX_DETAIL_CHARS, redactor: Redactor | None = None) -> str:
    """``text`` fit for a result's ``detail``: control and invisible format characters (line
    breaks, bidirectional overrides, zero-width characters) become spaces, runs of white
    space one space, and the whole at most ``limit`` characters (cut with "…").

    With a ``redactor`` (the registry's, for a tool that redacts its output) every secret is
    replaced with ``[REDACTED]`` before anything is cut, as in an output: before the text is
    cleaned (a secret written across lines) and again after (one that cleaning joined); the
    cut never shows a key's head, nor half a marker."""
    raw = str.__str__(str(text))
    if redactor is not None:  # a bounded prefix, a secret across its end replaced whole
        raw = shape_output(raw, limit * _SCANNED_PER_SHOWN, redactor)["data"]
    cleaned = "".join(" " if unicodedata.category(char)[0] in "CZ" else char for char in raw)
    cleaned = " ".join(cleaned.split())
    if redactor is not None:
        cleaned = redactor.redact(cleaned)[0]
    if len(cleaned) > limit:
        end = limit - 1
        marker = cleaned.find(REDACTED, max(0, end - len(REDACTED) + 1), end + len(REDACTED))
        if 0 <= marker < end:  # the cut falls inside a marker: leave the marker out whole
            end = marker
        cleaned = cleaned[:end].rstrip() + "…"
    return cleaned or "the tool refused this input"


def handler_failure(exc: BaseException, code: ErrorCode | None = None,
                    redactor: Redactor | None = None) -> dict[str, Any]:
    """The result of a handler that raised ``exc``: its code (:func:`classify_exception`, or
    ``code`` when already classified) and, for :class:`InvalidInput`, its safe ``detail``
    (redacted with ``redactor``: the registry's, for a tool that redacts its output)."""
    if isinstance(exc, InvalidInput):
        return failure(ErrorCode.INVALID_ARGUMENTS,
                       detail=safe_detail(message_of(exc), redactor=redactor))
    return failure(classify_exception(exc) if code is None else code)


def classify_exception(exc: BaseException) -> ErrorCode:
    """Map an exception raised *by a handler* to a code.

    ``TimeoutError`` raised by the handler itself (a socket timeout, say) is a transient
    failure of the handler's own dependency, not the boundary's timeout, which is reported
    as ``outcome_unknown`` by the concurrency stage. ``TypeError`` is a bug in the handler:
    the arguments were already checked against the schema, so it is a ``tool_failure``.
    :class:`InvalidInput` is the handler saying the input was wrong: ``invalid_arguments``.
    """
    if isinstance(exc, InvalidInput):
        return ErrorCode.INVALID_ARGUMENTS
    if isinstance(exc, PermissionError):
        return ErrorCode.FORBIDDEN
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return ErrorCode.TRANSIENT_FAILURE
    return ErrorCode.TOOL_FAILURE
