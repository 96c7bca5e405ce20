"""The runner's trace: one record per step of a call, so what really happened can be counted.

An error code alone cannot show that a tool wrote twice; a trace of every attempt, status
lookup and replay can. Times are kept (for the timeline picture) but left out of
``to_frame()`` by default, because a notebook's checked output must not hold timings.

Memory stays bounded however long a kernel runs: the trace keeps the most recent
``max_records`` records (default :data:`DEFAULT_MAX_RECORDS`; ``call_counts()`` still counts
every handler run ever traced), and a record never keeps a handler's value, exception or
frames alive: it keeps only the attempt's times (:class:`AttemptTimes`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentkit.boundary.attempt import Attempt, DoneFlag
from agentkit.policy.events import CallEvent
from agentkit.policy.tally import Tally

if TYPE_CHECKING:  # pandas is imported only when a frame is asked for
    import pandas

log = logging.getLogger("agentkit")

#: How many records a trace keeps by default (the oldest are dropped first).
DEFAULT_MAX_RECORDS = 10_000

_SET = DoneFlag()
_SET.set()


class AttemptTimes:
    """When one handler attempt started, finished and landed (``time.monotonic()`` values).

    Copied from the :class:`~agentkit.boundary.attempt.Attempt` the moment it really
    returns (at once if it already has), so the trace never holds the attempt itself: not
    the handler's value, not its exception and the frames that exception keeps.
    """

    __slots__ = ("_done", "finished_at", "landed_at", "started_at")

    def __init__(self, attempt: Attempt) -> None:
        self.started_at = attempt.started_at
        self.finished_at: float | None = attempt.finished_at
        self.landed_at: float | None = attempt.landed_at
        self._done: DoneFlag | None = None
        if not attempt.done.is_set():  # a late attempt: copy its times when it returns
            self._done = DoneFlag()
            attempt.add_done_callback(lambda: self._copy(attempt))

    def _copy(self, attempt: Attempt) -> None:
        self.started_at = attempt.started_at
        self.finished_at = attempt.finished_at
        self.landed_at = attempt.landed_at
        assert self._done is not None
        self._done.set()  # after the times: whoever waits on it reads them filled

    @property
    def done(self) -> DoneFlag:
        """Set once the attempt has really returned and its times are copied (for tests that
        wait for a late one)."""
        return self._done if self._done is not None else _SET

#: The record's ``step`` for each event that is one step on its own.
_STEPS = {"replay": "replay", "refused": "refused", "approval_asked": "approval",
          "approval_settled": "approval"}

COLUMNS = ["call_id", "tool", "effect", "step", "attempt", "outcome", "handler_ran", "replayed"]


@dataclass(frozen=True)
class TraceRecord:
    """One step. ``step`` is ``attempt``, ``status_lookup``, ``replay``, ``approval`` or
    ``refused``; ``outcome`` is ``ok``, an error code, or for lookups ``done``/``not_done``/
    ``unknown``."""

    call_id: str
    tool: str
    effect: str
    step: str
    attempt: int
    outcome: str
    handler_ran: bool
    replayed: bool
    started_at: float
    ended_at: float
    # when a finished attempt landed (a float), the times of a late one, or None: no attempt
    _handle: AttemptTimes | Attempt | float | None = field(default=None, repr=False,
                                                          compare=False)

    def __post_init__(self) -> None:
        if isinstance(self._handle, Attempt):  # keep its times, never the attempt itself
            object.__setattr__(self, "_handle", AttemptTimes(self._handle))

    @property
    def duration(self) -> float:
        return self.ended_at - self.started_at

    @property
    def landed_at(self) -> float | None:
        """When the write took effect: the moment the handler marked (``mark_landed``), else
        when it really returned, which after a timeout is later than ``ended_at``."""
        handle = self._handle
        if handle is None or type(handle) is float:
            return handle
        assert not isinstance(handle, (Attempt, float))
        return handle.landed_at if handle.landed_at is not None else handle.finished_at


#: A stored record: :class:`TraceRecord`'s fields in order, its ``_handle`` an
#: :class:`AttemptTimes` (an attempt still running when it was recorded), when the finished
#: attempt landed (its ``landed_at``, else its ``finished_at``), or None. Plain tuples of
#: strings and numbers, as few objects as a row can be: the garbage collector soon stops
#: tracking them, and each one a trace lets go is one more to free.
Row = tuple[str, str, str, str, int, str, bool, bool, float, float,
            "AttemptTimes | float | None"]


def _record(row: Row) -> TraceRecord:
    """The :class:`TraceRecord` of a stored row (made when the records are read)."""
    record = _new_record(TraceRecord)
    _set_dict(record, "__dict__", {
        "call_id": row[0], "tool": row[1], "effect": row[2], "step": row[3], "attempt": row[4],
        "outcome": row[5], "handler_ran": row[6], "replayed": row[7], "started_at": row[8],
        "ended_at": row[9], "_handle": row[10],
    })
    return record


_set_dict = object.__setattr__
_new_record = object.__new__


class Trace:
    """Thread-safe, bounded list of :class:`TraceRecord`; times are ``time.monotonic()``
    values. Keeps the last ``max_records`` records (None: all of them, for a short demo).

    Adding a record takes no lock: a row is appended to a bounded deque, which lets the
    oldest go (each one atomic step), and counted by a :class:`~agentkit.policy.tally.Tally`
    of its tool's rows with a handler run, or of those without one (so :meth:`call_counts`
    counts every run ever traced, and :attr:`dropped` every row let go).
    """

    def __init__(self, max_records: int | None = DEFAULT_MAX_RECORDS) -> None:
        if max_records is not None and (type(max_records) is bool
                                        or not isinstance(max_records, int) or max_records < 1):
            raise ValueError("max_records must be an integer >= 1 or None")
        self.max_records = max_records
        self._records: deque[Row] = deque(maxlen=max_records)
        # rows ever added per tool: [without a handler run, with one] (indexed by handler_ran)
        self._added: tuple[dict[str, Tally], dict[str, Tally]] = ({}, {})
        self._lock = threading.Lock()  # to add a tool's tally
        self._ran: set[str] = set()  # approve operations in progress that recorded a step
        # call_id -> [call started, step started]: for events given to observe() only
        self._open: dict[str, list[float]] = {}

    def observe(self, event: CallEvent) -> None:
        """The trace as an observer of events (docs/design.md#events): one record per attempt,
        status lookup, replay, refusal and approval step, as the tables show. (A runner's own
        trace is told each event's fields instead, with when its step began: :meth:`note`.)"""
        kind, call_id, at = event.kind, event.call_id, event.at
        since: float | None = None
        if kind == "call_started":
            self._open[call_id] = [at, at]
        elif kind == "call_ended":
            self._open.pop(call_id, None)
        else:
            state = self._open.get(call_id)
            if state is not None:
                if kind == "attempt_started" or kind == "lookup_started":
                    state[1] = at
                since = state[1] if kind == "attempt_ended" or kind == "lookup_ended" else state[0]
        self.note(kind, call_id, event.tool, event.effect, at, event.number, event.outcome,
                  event.handler_ran, event.approval_id, event.operation, event.result,
                  event.attempt, since)

    def note(self, kind: str, call_id: str, tool: str, effect: str, at: float, number: int = 0,
             outcome: str = "", handler_ran: bool = False, approval_id: str = "",
             operation: str = "call", result: Mapping[str, Any] | None = None,
             attempt: Attempt | None = None, since: float | None = None) -> None:
        """:meth:`observe` of one event, told as its fields and ``since``, when the step it
        ends began (a runner's first observer: see :class:`~agentkit.policy.events.Observers`).
        A step is recorded when it ends, so events that start one are not needed here. Logs
        its own failures, never raises."""
        try:
            if kind == "attempt_ended":  # every call's one event here, first
                if attempt is None:
                    handle: Any = None
                elif attempt.finished_at is not None:  # it has returned: keep one time only
                    handle = attempt.landed_at
                    if handle is None:
                        handle = attempt.finished_at
                else:  # a late attempt: its times are copied when it returns
                    handle = AttemptTimes(attempt)
                row: Row = (call_id, tool, effect, "attempt", number, outcome, handler_ran, False,
                            at if since is None else since, at, handle)
            elif kind == "lookup_ended":
                row = (call_id, tool, effect, "status_lookup", number, outcome, False, False,
                       at if since is None else since, at, None)
            elif kind in _STEPS:
                if kind == "approval_settled" and operation == "approve" and call_id in self._ran:
                    return  # after the approved run it is that run's end, recorded already
                row = (call_id, tool, effect, _STEPS[kind], number, outcome, False,
                       kind == "replay", at if since is None else since, at, None)
            else:
                if kind == "call_ended" and operation == "approve":
                    self._ran.discard(call_id)
                return
            if operation == "approve":  # a step of an approved run: its settling is recorded
                self._ran.add(call_id)
            self._records.append(row)
            tally = self._added[handler_ran].get(tool)
            (tally if tally is not None else self._tally(tool, handler_ran)).add()
        except Exception:
            log.exception("%s: the trace failed on %s", call_id, kind)

    def _tally(self, tool: str, handler_ran: bool) -> Tally:
        """The count of ``tool``'s rows with (or without) a handler run, made with the first
        (once, under the lock)."""
        with self._lock:
            tallies = self._added[handler_ran]
            tally = tallies.get(tool)
            if tally is None:
                tally = tallies[tool] = Tally()
            return tally

    def add(self, record: TraceRecord) -> None:
        """Keep ``record`` (as a row: see :data:`Row`)."""
        handle = record._handle
        row: Row = (record.call_id, record.tool, record.effect, record.step, record.attempt,
                    record.outcome, record.handler_ran, record.replayed, record.started_at,
                    record.ended_at,
                    AttemptTimes(handle) if isinstance(handle, Attempt) else handle)
        self._records.append(row)
        tally = self._added[record.handler_ran].get(record.tool)
        (tally if tally is not None else self._tally(record.tool, record.handler_ran)).add()

    @property
    def dropped(self) -> int:
        """How many of the oldest records were let go to keep the trace bounded."""
        held = len(self._records)  # (read first: a row is counted just after it is added)
        with self._lock:
            tallies = [*self._added[False].values(), *self._added[True].values()]
        return max(0, sum(tally.value for tally in tallies) - held)

    @property
    def records(self) -> list[TraceRecord]:
        """The records kept, oldest first (made from the stored rows on each read)."""
        return [_record(row) for row in self._rows()]

    def _rows(self) -> list[Row]:
        """The rows kept, oldest first."""
        while True:
            try:  # one step under the GIL; where threads truly run at once, try again
                return list(self._records)
            except RuntimeError:  # appended to while it was copied
                continue

    def __iter__(self) -> Iterator[TraceRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self._records)

    def call_counts(self) -> dict[str, int]:
        """Handler runs per tool: the number a failure table must be honest about. Counts
        every run ever traced, also those whose records were dropped to bound the trace."""
        with self._lock:
            runs = sorted(self._added[True].items())
        return {tool: tally.value for tool, tally in runs}

    def to_frame(self, *, durations: bool = False) -> pandas.DataFrame:
        """A pandas DataFrame, one row per record, in the order the steps happened."""
        import pandas as pd

        rows: list[dict[str, Any]] = []
        for record in self.records:
            row = {column: getattr(record, column) for column in COLUMNS}
            if durations:
                row["duration_s"] = round(record.duration, 4)
            rows.append(row)
        columns = COLUMNS + (["duration_s"] if durations else [])
        # Annotated: pandas-stubs 3 spell DataFrame's constructor with typing.Self, which mypy
        # at python_version 3.10 reads as Any.
        frame: pandas.DataFrame = pd.DataFrame(rows, columns=columns)
        return frame
