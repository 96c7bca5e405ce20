"""Policy events: what a call did, step by step, for whoever watches (the trace, spans, logs).

The policy (:mod:`agentkit.policy.steps`) makes a :class:`CallEvent` at every step a person
or a tool might want to see and hands it to the runner's observers (:class:`Observers`) at
once. The steps run in their driver's frame, so that is on the caller's thread (sync driver)
or in the caller's task context (async driver), never from a handler's worker thread: an observer may take the
contextvars-current span as its parent. The in-memory :class:`~agentkit.policy.trace.Trace`
is one observer; the OpenTelemetry one lives in ``agentkit.faces`` (docs/design.md#events).

Per public entry point (``call``/``acall``, ``approve``/``aapprove``, ``deny``/``adeny``):
exactly one ``call_started`` first and one ``call_ended`` last (with the result the model
sees), with the same ``call_id`` and the same ``serial`` (the runner's own number of the call, so two
calls a host gave one ``call_id`` are told apart). In between, every handler attempt is ``attempt_started`` then
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
read) tells it only ``attempt_ended`` (:attr:`Listeners.live` says whether anyone else listens).
A call is told to the observers there were when it began (:meth:`Observers.begin`): an
observer added mid-call sees whole calls only.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentkit.boundary.attempt import Attempt

__all__ = ["KINDS", "CallEvent", "Emit", "Listeners", "Observer", "Observers"]

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
    # the runner's own number of the call this event belongs to, unique in the process: two
    # calls a host gave one call_id (frameworks reuse "call_0") are told apart by it
    serial: int = 0


def _fast_init(
    self: CallEvent, kind: str, call_id: str, tool: str, effect: str, at: float, number: int = 0,
    outcome: str = "", handler_ran: bool = False, approval_id: str = "", operation: str = "call",
    result: Mapping[str, Any] | None = None, attempt: Attempt | None = None, serial: int = 0,
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
    _set_serial(self, serial)


_slots = CallEvent.__dict__
(_set_kind, _set_call_id, _set_tool, _set_effect, _set_at, _set_number, _set_outcome,
 _set_handler_ran, _set_approval_id, _set_operation, _set_result, _set_attempt, _set_serial) = (
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


class Listeners:
    """Who the events of one call are told: fixed when the call begins, for the whole call.

    ``emit`` tells them one event (an :class:`Emit`); ``live`` is True when an observer other
    than the first (the trace) listens: only then does an event that starts something
    (``call_started``, ``attempt_started``, ``lookup_started``), or ``call_ended``, matter to
    anyone, the first observer recording steps as they end (with ``since``). The policy's
    hottest path leaves those events untold when it is False. A call keeps the listeners it
    began with, so an observer added mid-call sees none of that call (never a lone
    ``attempt_ended``), and one removed mid-call still sees it end."""

    __slots__ = ("emit", "live", "observers")

    def __init__(self, emit: Emit, live: bool, observers: tuple[Observer, ...] = ()) -> None:
        self.emit = emit
        self.live = live
        self.observers = observers


class Observers:
    """The observers of one runner, and :meth:`begin`, which fixes who one call tells.

    ``first`` (the in-memory trace) is told each event first, as its fields (an :class:`Emit`:
    it must log its own failures, never raise); every observer added is handed a
    :class:`CallEvent`, made once per event and only when there is one to hand it to, stamped
    with the call's :attr:`CallEvent.serial`. Adding and removing (one at a time, under a lock)
    swap the immutable :attr:`current` listeners, so beginning a call (on the hot path, from
    many threads) takes no lock, and with no observer but ``first`` it is one attribute read
    and ``emit`` is ``first`` itself."""

    __slots__ = ("_added", "_first", "_lock", "_quiet", "current")

    def __init__(self, first: Emit | None = None) -> None:
        self._first = first
        # each registration as its own one-item list, so removing one removes only it
        self._added: tuple[list[Observer], ...] = ()
        self._lock = threading.Lock()  # adding and removing (never emitting)
        self._quiet = Listeners(first if first is not None else _nobody, False)
        self.current = self._quiet

    @property
    def live(self) -> bool:
        """Whether an observer has been added (see :class:`Listeners`)."""
        return self.current.live

    @property
    def emit(self) -> Emit:
        """Tell the observers there are now one event (outside any call: a call tells the
        :class:`Listeners` it began with)."""
        return self.current.emit

    def begin(self) -> Listeners:
        """The listeners of a call that begins now: the observers added by now, for all of
        its events, each stamped with this call's own serial number."""
        current = self.current
        if not current.live:
            return current
        return Listeners(_emitter(self._first, current.observers, next(_serials)), True,
                         current.observers)

    def add(self, observer: Observer) -> Callable[[], None]:
        """Register ``observer`` (once more, if it is already); returns a function that
        removes this registration again (calling it twice does nothing more)."""
        if not callable(observer):
            raise TypeError("an observer must be callable with one CallEvent")
        registration = [observer]
        with self._lock:
            self._added = (*self._added, registration)
            self._swap()

        def remove() -> None:
            with self._lock:
                self._added = tuple(r for r in self._added if r is not registration)
                self._swap()

        return remove

    def _swap(self) -> None:
        observers = tuple(r[0] for r in self._added)
        self.current = Listeners(_emitter(self._first, observers, 0), True, observers) \
            if observers else self._quiet


#: The runner's own numbers of the calls observers are told about (unique in the process).
_serials = itertools.count(1)


def _emitter(first: Emit | None, observers: tuple[Observer, ...], serial: int) -> Emit:
    """Tell ``first`` an event's fields, then each of ``observers`` the event itself."""

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
        _set_serial(event, serial)
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
