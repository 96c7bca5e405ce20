"""The runner's trace: one record per step of a call, so what really happened can be counted.

An error code alone cannot show that a tool wrote twice; a trace of every attempt, status
lookup and replay can. Times are kept (for the timeline picture) but left out of
``to_frame()`` by default, because a notebook's checked output must not hold timings.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported only when a frame is asked for
    import pandas

    from agentkit.boundary.concurrency import Attempt

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
    _handle: Attempt | None = field(default=None, repr=False, compare=False)

    @property
    def duration(self) -> float:
        return self.ended_at - self.started_at

    @property
    def landed_at(self) -> float | None:
        """When the write took effect: the moment the handler marked (``mark_landed``), else
        when it really returned, which after a timeout is later than ``ended_at``."""
        handle = self._handle
        if handle is None:
            return None
        return handle.landed_at if handle.landed_at is not None else handle.finished_at


class Trace:
    """Thread-safe list of :class:`TraceRecord`; times are ``time.monotonic()`` values."""

    def __init__(self) -> None:
        self._records: list[TraceRecord] = []
        self._lock = threading.Lock()

    def add(self, record: TraceRecord) -> None:
        with self._lock:
            self._records.append(record)

    @property
    def records(self) -> list[TraceRecord]:
        with self._lock:
            return list(self._records)

    def __iter__(self) -> Iterator[TraceRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self._records)

    def call_counts(self) -> dict[str, int]:
        """Handler runs per tool: the number a failure table must be honest about."""
        counts: Counter[str] = Counter(r.tool for r in self.records if r.handler_ran)
        return dict(sorted(counts.items()))

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
