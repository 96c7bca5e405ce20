"""Operating a store: what it holds, copying it to another store, and purging what is past
retention (docs/design.md#operating-the-stores).

Every backend is an :class:`OperableStore`: the shared ``run_once`` algorithm
(:class:`~agentkit.policy.stores.algorithm.StoreBase`) plus the few reads and writes an
operator needs, each one bounded: listing goes page by page in key order, copying inserts in
batches, and purging deletes window by window.

Retention
    A completed key is kept at least ``retention_seconds`` (default 7 days; None keeps it
    forever) after it completed; :meth:`OperableStore.purge` deletes those older than that,
    and the settled or expired approvals last changed before it (a pending approval whose
    time to live ran out more than ``retention_seconds`` ago is expired: nobody can approve
    it any more). It never deletes a claim, live or stale (a stale claim waits for the status
    lookup or a person's ``release``), nor an approval that can still be decided or is
    running. A purged key is a key that may run again: keep retention longer than the
    longest time in which a retry can come (payment APIs keep their keys 24 hours).

Why purging never holds a claim up
    A purge walks the key space in windows of the primary key: it reads where the next window
    ends (a read takes no lock) and deletes the expired keys of that window in one short
    statement, so one step touches at most a window of rows and a claim (one row, found
    through the primary key: O(log n)) never waits for more than one step. The window grows
    or shrinks (at most 1,024 keys; a step's time is far from linear in its size on a busy
    disk) so that one step stays near :data:`PURGE_STEP_SECONDS`. After every step that
    deleted something the backend may tidy (SQLite checkpoints the log, so that no claim's
    commit carries the purge's log; PostgreSQL's steps commit durably, flushing their own)
    and the purge pauses: the rest after the tidying lasts at least as long as the step and
    the tidying took, and the whole pause at least the backend's pause (SQLite: 25 ms, so
    that a writer waiting for its one write lock, which sleeps and retries, gets it before
    the next step). A store whose steps tell the log they wrote (PostgreSQL) is also paced
    by it (:class:`LogPace`): a claim's commit waits for the log flushed before its record,
    so the window shrinks until a step writes at most so many bytes, and the rest lasts
    until the purge's log stays under so many bytes a second. ``make bench`` measures
    the worst ``run_once`` of a worker during the purge of 1M keys (benchmarks/purge.py).

Copying
    :func:`copy_store` copies every key (completed results and claims, with their owners and
    leases as they are) and every approval record (in creation order) that the target does
    not hold yet; a key or approval the target holds already is left as the target has it.
    Switching a service from SQLite to PostgreSQL is: stop it, copy, start it on the new
    store; a write asked again then replays instead of running again.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from agentkit.policy.stores.algorithm import Claim, StoreBase

__all__ = [
    "DEFAULT_RETENTION_SECONDS",
    "PURGE_STEP_SECONDS",
    "ApprovalEntry",
    "Copied",
    "KeyEntry",
    "LogPace",
    "OperableStore",
    "Purged",
    "copy_store",
    "expired_before",
    "next_window",
    "purge_in_windows",
    "rest_after",
    "retention",
]

#: How long a completed key is kept by default: 7 days.
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600.0

#: The longest one purge step (one window's DELETE) should take; the window adapts to it.
PURGE_STEP_SECONDS = 0.005
_FIRST_WINDOW, _MIN_WINDOW, _MAX_WINDOW = 256, 16, 1024

# The approval states (agentkit.policy.approvals, which sits above the stores): a settled or
# expired record is history; a pending or running one is not.
PENDING = "pending"
HISTORY = ("settled", "expired")


def retention(value: float | None) -> float | None:
    """A checked ``retention_seconds``: None (keep forever) or a number > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("retention_seconds must be a number of seconds or None")
    seconds = float(value)
    if not seconds > 0 or math.isinf(seconds):  # also refuses NaN
        raise ValueError("retention_seconds must be > 0 and finite, or None to keep forever")
    return seconds


@dataclass(frozen=True)
class KeyEntry:
    """One key as a store holds it: a completed result (``result`` set, ``claim`` None) or a
    claim (``claim`` set, ``result`` None). ``result`` is the stored JSON text;
    ``updated_at`` (seconds since the epoch, by the store's clock) is when it completed or
    was last claimed, None where the store does not know (a claim in the memory store)."""

    key: str
    fingerprint: str | None
    result: str | None
    claim: Claim | None
    updated_at: float | None

    @property
    def state(self) -> str:
        """``"completed"`` or ``"claimed"``."""
        return "claimed" if self.result is None else "completed"


@dataclass(frozen=True)
class ApprovalEntry:
    """One approval record as a store holds it: its JSON text and when it last changed."""

    approval_id: str
    state: str
    record: str
    updated_at: float | None


@dataclass(frozen=True)
class Purged:
    """What one purge deleted: completed keys and approvals last changed before ``before``
    (seconds since the epoch: the purge's ``now`` less ``retention_seconds``)."""

    keys: int
    approvals: int
    before: float | None  # None: retention is off, nothing was looked at

    @property
    def total(self) -> int:
        return self.keys + self.approvals


@dataclass(frozen=True)
class Copied:
    """What :func:`copy_store` did: records copied, and records the target held already."""

    keys: int
    keys_present: int
    approvals: int
    approvals_present: int


#: One purge step: ``(after, before, window) -> (where the window ended, rows deleted, bytes
#: of log written meanwhile)``; the end is None once no row follows ``after``, the bytes None
#: where the store does not measure its log (SQLite).
PurgeStep = Callable[[str | None, float, int], "tuple[str | None, int, int | None]"]


@dataclass(frozen=True)
class LogPace:
    """How much write-ahead log a purge may write (PostgreSQL's: see
    :data:`~agentkit.policy.stores.postgres.PURGE_LOG_PACE`). A claim's commit waits for the
    log flushed before its own record, so a step writes at most ``step_bytes`` (its window
    shrinks to fit, at most as many keys as the time allows) and rests until its log,
    spread over the step and the rest, stays under ``bytes_per_second``."""

    step_bytes: int
    bytes_per_second: float

    def __post_init__(self) -> None:
        if self.step_bytes <= 0 or not self.bytes_per_second > 0:
            raise ValueError("a log pace needs step_bytes > 0 and bytes_per_second > 0")


class OperableStore(StoreBase):
    """A store an operator can look into, copy and purge; every backend is one.

    A backend provides :meth:`store_now`, the pages, the ``add_*`` batches and
    :meth:`purge_before`; the durable ones purge through :func:`purge_in_windows`.
    """

    def __init__(
        self, claim_ttl_seconds: float,
        retention_seconds: float | None = DEFAULT_RETENTION_SECONDS,
    ) -> None:
        super().__init__(claim_ttl_seconds)
        self.retention_seconds = retention(retention_seconds)

    # ---- what a backend provides

    def store_now(self) -> float:
        """Seconds since the epoch by the store's clock (the database's for PostgreSQL)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def key_page(self, after: str | None = None, limit: int = 1000) -> list[KeyEntry]:
        """Up to ``limit`` keys after ``after`` (from the first when None), in key order."""
        raise NotImplementedError  # pragma: no cover - abstract

    def key_entry(self, key: str) -> KeyEntry | None:
        """One key as the store holds it, or None."""
        raise NotImplementedError  # pragma: no cover - abstract

    def approval_page(self, state: str | None = None) -> list[ApprovalEntry]:
        """Every approval record (only those in ``state`` when given), in creation order."""
        raise NotImplementedError  # pragma: no cover - abstract

    def add_keys(self, entries: list[KeyEntry]) -> int:
        """Insert the keys the store does not hold (one atomic batch); returns how many."""
        raise NotImplementedError  # pragma: no cover - abstract

    def add_approvals(self, entries: list[ApprovalEntry]) -> int:
        """Insert, in this order, the approvals the store does not hold; returns how many."""
        raise NotImplementedError  # pragma: no cover - abstract

    def purge_before(self, before: float) -> tuple[int, int]:
        """Delete the completed keys and the settled or expired approvals last changed before
        ``before``, and the pending approvals whose time ran out before it, in short steps;
        returns (keys, approvals) deleted."""
        raise NotImplementedError  # pragma: no cover - abstract

    # ---- the operations

    def purge(self, now: float | None = None) -> int:
        """Delete the completed keys and the settled or expired approvals past retention;
        returns how many records were deleted. ``now`` (seconds since the epoch, by the
        store's clock) defaults to the store's own clock. Never a claim (live or stale),
        never an approval that can still be decided or is running; with
        ``retention_seconds=None`` nothing is deleted. Raises ``StoreError``."""
        return self.purge_counts(now).total

    def purge_counts(self, now: float | None = None) -> Purged:
        """:meth:`purge`, telling keys from approvals, and the time before which it purged."""
        if now is not None and (isinstance(now, bool) or not isinstance(now, (int, float))
                                or not math.isfinite(now)):
            raise ValueError("now must be a finite number of seconds since the epoch")
        if self.retention_seconds is None:
            return Purged(0, 0, None)
        before = (self.store_now() if now is None else float(now)) - self.retention_seconds
        keys, approvals = self.purge_before(before)
        return Purged(keys, approvals, before)

    def entries(self, page: int = 1000) -> Iterator[KeyEntry]:
        """Every key in key order, read ``page`` at a time (a long listing holds nothing)."""
        after: str | None = None
        while True:
            entries = self.key_page(after, page)
            yield from entries
            if len(entries) < page:
                return
            after = entries[-1].key


def purge_in_windows(
    before: float, *, keys: PurgeStep, approvals: PurgeStep, pending: list[ApprovalEntry],
    delete_pending: Callable[[str, str], bool], pause: float,
    tidy: Callable[[], None] | None = None, log_pace: LogPace | None = None,
) -> tuple[int, int]:
    """A durable store's purge: its keys, then its settled or expired approvals, window by
    window of the primary key, each window one short step, with a pause after every step
    that deleted something, which begins with ``tidy()`` when given (SQLite: the purge
    checkpoints the log it wrote, so that no claim's commit has to) and then rests at least
    as long as the step and the tidying took, the whole pause lasting at least ``pause``;
    then the ``pending`` approvals whose time ran out before ``before``.

    With ``log_pace`` (a store whose steps tell the log they wrote), the window also shrinks
    so that a step writes at most ``log_pace.step_bytes``, and the rest also lasts until the
    step's log, spread over the step and its rest, is under ``log_pace.bytes_per_second``."""
    deleted_keys = _paced(keys, before, pause, tidy, log_pace)
    deleted_approvals = _paced(approvals, before, pause, tidy, log_pace)
    for entry in pending:
        if expired_before(entry.record, before) and delete_pending(entry.approval_id, entry.record):
            deleted_approvals += 1
    return deleted_keys, deleted_approvals


def _paced(
    step: PurgeStep, before: float, pause: float, tidy: Callable[[], None] | None,
    pace: LogPace | None,
) -> int:
    after: str | None = None
    deleted, window = 0, _FIRST_WINDOW
    while True:
        began = time.monotonic()
        end, gone, logged = step(after, before, window)
        took = time.monotonic() - began
        deleted += gone
        if end is None:
            return deleted
        after = end
        window = next_window(window, took, logged, pace)
        if gone:
            tidied = 0.0
            if tidy is not None:
                began = time.monotonic()
                tidy()
                tidied = time.monotonic() - began
            time.sleep(rest_after(took + tidied, pause - tidied, logged, pace))


def next_window(window: int, took: float, logged: int | None, pace: LogPace | None) -> int:
    """The next step's window, after a step of ``window`` rows that took ``took`` seconds and
    wrote ``logged`` bytes of log: halved above :data:`PURGE_STEP_SECONDS`, doubled under
    half of it (between 16 and 1,024 rows), and with a ``pace``, no larger than the window
    that would have written ``pace.step_bytes`` at this step's bytes of log per row (so it
    grows only as far as the log allows, and shrinks at once when the log grows)."""
    if took > PURGE_STEP_SECONDS:
        following = max(_MIN_WINDOW, window // 2)
    elif took < PURGE_STEP_SECONDS / 2:
        following = min(_MAX_WINDOW, window * 2)
    else:
        following = window
    if pace is not None and logged:
        following = max(_MIN_WINDOW, min(following, window * pace.step_bytes // logged))
    return following


def rest_after(work: float, pause: float, logged: int | None, pace: LogPace | None) -> float:
    """How long the purge rests after a step that deleted something, its work (the step and
    the tidying) having taken ``work`` seconds: at least as long again (so a purge takes at
    most half the time), at least ``pause``, and with a ``pace``, long enough that the
    step's ``logged`` bytes over its work and its rest stay under ``pace.bytes_per_second``."""
    rest = max(0.0, pause, work)
    if pace is not None and logged:
        rest = max(rest, logged / pace.bytes_per_second - work)
    return rest


def expired_before(record: str, before: float) -> bool:
    """A pending record whose time to live ended before ``before``."""
    try:
        expires = json.loads(record).get("expires_at")
    except (ValueError, AttributeError):
        return False
    return isinstance(expires, (int, float)) and not isinstance(expires, bool) and expires < before


def copy_store(source: OperableStore, target: OperableStore, *, batch: int = 1000) -> Copied:
    """Copy every key and approval of ``source`` that ``target`` does not hold (see the
    module docstring); ``source`` is left as it is. Raises ``StoreError``."""
    target.key_page(None, 1)  # a target that cannot be used fails before anything is read
    keys = present = 0
    for chunk in _chunks(source.entries(batch), batch):
        added = target.add_keys(chunk)
        keys += added
        present += len(chunk) - added
    approvals = source.approval_page()
    approvals_added = 0
    for part in _chunks(iter(approvals), batch):
        approvals_added += target.add_approvals(part)
    return Copied(keys, present, approvals_added, len(approvals) - approvals_added)


def _chunks(items: Iterator[Any], size: int) -> Iterable[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
