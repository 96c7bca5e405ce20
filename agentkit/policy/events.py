"""Policy events: what a call did, step by step, for whoever watches (the trace, spans, logs).

The policy (:mod:`agentkit.policy.steps`) makes a :class:`CallEvent` at every step a person
or a tool might want to see and hands it to the runner's observers (:class:`Observers`) at
once. The steps run in their driver's frame, so that is on the caller's thread (sync driver)
or in the caller's task context (async driver), never from a handler's worker thread: an observer may take the
contextvars-current span as its parent. The in-memory :class:`~agentkit.policy.trace.Trace`
is one observer; the OpenTelemetry one lives in ``agentkit.faces`` (docs/design.md#events).

Per public entry point (``call``/``acall``, ``approve``/``aapprove``, ``deny``/``adeny``):
exactly one ``call_started`` first and one ``call_ended`` last (with the result the model
sees), with the same ``call_id``. In between, every handler attempt is ``attempt_started`` then
``attempt_ended`` (same ``number``), every status lookup ``lookup_started`` then
``lookup_ended``; a stored result returned is ``replay``; a refusal that ran nothing is
``refused``; an approval opened (or found pending) is ``approval_asked``, one settled by a
person is ``approval_settled``.

An observer that raises is logged on the ``agentkit`` logger and ignored: no observer can
change a result.

The runner's first observer, its :class:`~agentkit.policy.trace.Trace`, is told each event's
fields as arguments, and with them ``since``: when the step this event ends began (the
attempt's or lookup's ``*_started``, else the call's ``call_started``). The trace records a
step when it ends, so it needs no start event; with no observer added, the hottest path (a
read) tells it only ``attempt_ended`` (:attr:`Observers.live` says whether anyone else listens).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentkit.boundary.attempt import Attempt

__all__ = ["KINDS", "CallEvent", "Emit", "Observer", "Observers"]

log = logging.getLogger("agentkit")

KINDS = (
    "call_started", "call_ended", "attempt_started", "attempt_ended",
    "lookup_started", "lookup_ended", "replay", "refused",
    "approval_asked", "approval_settled",
)


@dataclass(frozen=True, slots=True)
class CallEvent:
    """One step of one call. ``at`` is ``time.monotonic()``; ``outcome`` is ``"ok"``, an
    ``ErrorCode`` value, or for lookups ``"done"``/``"not_done"``/``"unknown"``."""

    kind: str  # one of KINDS
    call_id: str
    tool: str  # the tool's name (safe_name(name) when unknown)
    effect: str  # Effect value; "" when the tool is unknown
    at: float  # time.monotonic()
    number: int = 0  # attempt / lookup number within the call (1-based); 0 otherwise
    outcome: str = ""
    handler_ran: bool = False  # attempt_ended: the handler really started
    approval_id: str = ""  # approval_asked / approval_settled
    operation: str = "call"  # call_started/call_ended: "call" | "approve" | "deny"
    result: Mapping[str, Any] | None = None  # call_ended: the final result dict the model sees
    # attempt_ended: the boundary's Attempt (its times), for the Trace; observers must not keep it
    attempt: Attempt | None = field(default=None, repr=False, compare=False)


def _fast_init(
    self: CallEvent, kind: str, call_id: str, tool: str, effect: str, at: float, number: int = 0,
    outcome: str = "", handler_ran: bool = False, approval_id: str = "", operation: str = "call",
    result: Mapping[str, Any] | None = None, attempt: Attempt | None = None,
) -> None:
    """The dataclass's own ``__init__``, without its per-field ``object.__setattr__`` lookups:
    each slot is filled by its descriptor (an event is made at every step of every call)."""
    _set_kind(self, kind)
    _set_call_id(self, call_id)
    _set_tool(self, tool)
    _set_effect(self, effect)
    _set_at(self, at)
    _set_number(self, number)
    _set_outcome(self, outcome)
    _set_handler_ran(self, handler_ran)
    _set_approval_id(self, approval_id)
    _set_operation(self, operation)
    _set_result(self, result)
    _set_attempt(self, attempt)


_slots = CallEvent.__dict__
(_set_kind, _set_call_id, _set_tool, _set_effect, _set_at, _set_number, _set_outcome,
 _set_handler_ran, _set_approval_id, _set_operation, _set_result, _set_attempt) = (
    _slots[name].__set__ for name in CallEvent.__dataclass_fields__)
CallEvent.__init__ = _fast_init  # type: ignore[method-assign]
_new = object.__new__

#: An observer is any callable taking one event; its return value is ignored.
Observer = Callable[[CallEvent], None]


class Emit(Protocol):
    """How the policy tells its observers one event: the :class:`CallEvent`'s fields, in its
    order (the event itself is made only if an observer takes events), then ``since``, when
    the step this event ends began (None: at ``at``); only the first observer is told it."""

    def __call__(self, kind: str, call_id: str, tool: str, effect: str, at: float,
                 number: int = 0, outcome: str = "", handler_ran: bool = False,
                 approval_id: str = "", operation: str = "call",
                 result: Mapping[str, Any] | None = None,
                 attempt: Attempt | None = None, since: float | None = None) -> None: ...


class Observers:
    """The observers of one runner, and :attr:`emit`, the one function that tells them all.

    ``first`` (the in-memory trace) is told each event first, as its fields (an :class:`Emit`:
    it must log its own failures, never raise); every observer added is handed a
    :class:`CallEvent`, made once per event and only when there is one to hand it to. Adding
    and removing (one at a time, under a lock) swap an immutable tuple and the :attr:`emit`
    made for it, so emitting (on the hot path, from many threads) takes no lock, and with no
    observer but ``first`` it is ``first`` itself.

    :attr:`live` is True while an observer has been added: only then does an event that
    starts something (``call_started``, ``attempt_started``, ``lookup_started``), or
    ``call_ended``, matter to anyone, the first observer recording steps as they end (with
    ``since``). The policy's hottest path leaves those events untold when it is False."""

    __slots__ = ("_added", "_first", "_lock", "emit", "live")

    def __init__(self, first: Emit | None = None) -> None:
        self._first = first
        # each registration as its own one-item list, so removing one removes only it
        self._added: tuple[list[Observer], ...] = ()
        self._lock = threading.Lock()  # adding and removing (never emitting)
        self.live = False
        self.emit: Emit = self._emitter()

    def add(self, observer: Observer) -> Callable[[], None]:
        """Register ``observer`` (once more, if it is already); returns a function that
        removes this registration again (calling it twice does nothing more)."""
        if not callable(observer):
            raise TypeError("an observer must be callable with one CallEvent")
        registration = [observer]
        with self._lock:
            self._added = (*self._added, registration)
            self.emit = self._emitter()
            self.live = True

        def remove() -> None:
            with self._lock:
                self._added = tuple(r for r in self._added if r is not registration)
                self.emit = self._emitter()
                self.live = bool(self._added)

        return remove

    def _emitter(self) -> Emit:
        first, observers = self._first, tuple(r[0] for r in self._added)
        if not observers:
            return first if first is not None else _nobody

        def emit(kind: str, call_id: str, tool: str, effect: str, at: float, number: int = 0,
                 outcome: str = "", handler_ran: bool = False, approval_id: str = "",
                 operation: str = "call", result: Mapping[str, Any] | None = None,
                 attempt: Attempt | None = None, since: float | None = None) -> None:
            if first is not None:
                first(kind, call_id, tool, effect, at, number, outcome, handler_ran, approval_id,
                      operation, result, attempt, since)
            # CallEvent(...), its __init__ spelled out: no type call and no frame per event
            event = _new(CallEvent)
            _set_kind(event, kind)
            _set_call_id(event, call_id)
            _set_tool(event, tool)
            _set_effect(event, effect)
            _set_at(event, at)
            _set_number(event, number)
            _set_outcome(event, outcome)
            _set_handler_ran(event, handler_ran)
            _set_approval_id(event, approval_id)
            _set_operation(event, operation)
            _set_result(event, result)
            _set_attempt(event, attempt)
            for observer in observers:
                try:
                    observer(event)
                except Exception:
                    log.exception("%s: an observer failed on %s", call_id, kind)

        return emit


def _nobody(kind: str, call_id: str, tool: str, effect: str, at: float, number: int = 0,
            outcome: str = "", handler_ran: bool = False, approval_id: str = "",
            operation: str = "call", result: Mapping[str, Any] | None = None,
            attempt: Attempt | None = None, since: float | None = None) -> None:
    """The emit of a runner nobody observes."""
