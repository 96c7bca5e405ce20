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
    The audit log follows, its entries as they are (:meth:`OperableStore.add_audit`): the
    target's log is then the same chain, and a copy made again adds only what came after.
    A target whose log is its own is refused before anything is written.
    Switching a service from SQLite to PostgreSQL is: stop it, copy, start it on the new
    store; a write asked again then replays instead of running again.

Why a copy never makes a second write possible
    A key the target lacks is a key whose write runs again there. So a copy is refused
    (:class:`CopyRefused`, nothing written) while the source holds an open claim (a write
    running now, its lease not passed and its owner not known gone): its result would land
    in the source after the copy. And the copy reads the source three times: a survey (the
    open claims, and a digest of every key and approval, batch by batch), the copy itself
    (each batch compared with the survey's before it is written: a source that changed
    stops the copy there) and a last survey after it; a source that changed in between is
    refused too (a worker still on it), with what was written so far left in the target.
    What a copy cannot see is a worker that starts on the source after it: stop every
    worker first. A store is never copied onto itself (:meth:`OperableStore.identity`: the
    same file, or the same PostgreSQL server, database and schema).

Releasing a stuck claim
    :meth:`OperableStore.release_stale` is a person's ``keys release KEY``: it clears a
    claim only after the checks a runner makes before taking one over, in one atomic
    section: the key is claimed (not completed, not unknown) and the claim is stale (its
    lease passed, its owner known gone, or it was marked stale after ``outcome_unknown``).
    A live claim is a write that may be running now: releasing it would let the same write
    run beside it, so it is refused. (``release(key)`` clears any claim, unchecked.)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from agentkit.policy.stores.algorithm import Claim, StoreBase, claim_owner, let_go
from agentkit.policy.stores.audit import AUDIT_LOCK, GENESIS

__all__ = [
    "DEFAULT_RETENTION_SECONDS",
    "PURGE_STEP_SECONDS",
    "ApprovalEntry",
    "Copied",
    "CopyRefused",
    "KeyEntry",
    "LogPace",
    "OperableStore",
    "Purged",
    "Released",
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
    #: audit entries copied, and those the target's log held already (the same entries)
    audit: int = 0
    audit_present: int = 0


class CopyRefused(Exception):
    """:func:`copy_store` would make a second write possible (the source has open claims, or
    changed during the copy) or was asked to copy a store onto itself; its text is one line
    saying which and what to do."""


@dataclass(frozen=True)
class Released:
    """What :meth:`OperableStore.release_stale` found: ``outcome`` is ``"released"`` (the
    stale claim is gone), ``"completed"`` (a completed key: nothing to release),
    ``"unknown"`` (the store holds no such key) or ``"live"`` (the claim may still be
    running: left as it is); ``claim`` is the claim released or left (None otherwise)."""

    key: str
    outcome: str
    claim: Claim | None


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

    def audit_page(self, after: int = 0, limit: int = 1000) -> list[tuple[int, str]]:
        """Up to ``limit`` audit entries numbered after ``after``, in order, each as (its
        number, its stored JSON text) (:mod:`~agentkit.policy.stores.audit`)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def add_audit(self, entries: list[tuple[int, str]]) -> int:
        """Append audit entries made elsewhere (another store's, as :meth:`audit_page` gives
        them: number and stored text), as they are, in one atomic section: each must come
        right after the log's last entry, numbered next and chained to its hash, so the log
        stays one chain that verifies (signatures included). Returns how many; raises
        :class:`CopyRefused` (nothing appended) for an entry that does not follow on."""
        if not entries:
            return 0
        with self.transaction(write=True, full_sync=True) as tx:
            tx.lock(AUDIT_LOCK)
            tail = tx.audit_tail()
            last, prev = (0, GENESIS) if tail is None else tail
            hashes = []
            for number, text in entries:  # all checked before any is written
                entry = json.loads(text)
                if number != last + 1 or entry.get("seq") != number or entry.get("prev") != prev:
                    raise CopyRefused(
                        f"audit entry {number} does not follow the target's entry {last}:"
                        " the two logs are not one chain; nothing of this batch was appended")
                last, prev = number, str(entry["hash"])
                hashes.append(prev)
            for (number, text), digest in zip(entries, hashes, strict=True):
                tx.insert_audit(number, digest, text)
        return len(entries)

    # ---- the operations

    def purge(self, now: float | None = None) -> int:
        """Delete the completed keys and the settled or expired approvals past retention;
        returns how many records were deleted. ``now`` (seconds since the epoch, by the
        store's clock) defaults to the store's own clock. Never a claim (live or stale),
        never an approval that can still be decided or is running; with
        ``retention_seconds=None`` nothing is deleted. Raises ``StoreError``."""
        return self.purge_counts(now).total

    def purge_counts(self, now: float | None = None, *, who: str | None = None) -> Purged:
        """:meth:`purge`, telling keys from approvals, and the time before which it purged.
        A purge that deleted something appends to the audit log (``who``: the person who
        asked, when one did)."""
        if now is not None and (isinstance(now, bool) or not isinstance(now, (int, float))
                                or not math.isfinite(now)):
            raise ValueError("now must be a finite number of seconds since the epoch")
        if self.retention_seconds is None:
            return Purged(0, 0, None)
        before = (self.store_now() if now is None else float(now)) - self.retention_seconds
        keys, approvals = self.purge_before(before)
        if keys or approvals:
            self.append_audit({"action": "purge", "who": who, "keys": keys,
                               "approvals": approvals, "before": before})
        return Purged(keys, approvals, before)

    def identity(self) -> tuple[Any, ...]:
        """What tells this store from another: two stores with the same identity hold the same
        keys. A store kept in a file (an SQLite store's ``path``) is that file (device and
        inode, whatever path names it); PostgreSQL's is its server, database and schema; any
        other store is itself."""
        path = getattr(self, "path", None)
        if isinstance(path, str):
            try:
                found = os.stat(path)
            except OSError:
                return ("file", os.path.realpath(path))
            return ("file", found.st_dev, found.st_ino)
        return ("object", id(self))

    def claim_is_stale(self, claim: Claim, now: float) -> bool:
        """Whether ``claim`` may be taken over at ``now`` (by the store's clock), as the runner
        judges it: not running in this process, and its lease passed or its owner known gone."""
        return self._is_stale(claim, now)

    def release_stale(self, key: str, *, who: str | None = None,
                      note: str | None = None) -> Released:
        """Clear ``key``'s claim if it is stale (see the module docstring), in one atomic
        section that also appends the release to the audit log (``who`` released it, and
        the person's ``note``: what they checked); a completed key, a key the store does
        not hold and a live claim are left as they are (the :class:`Released` says which).
        Raises ``StoreError``."""
        with self.transaction(write=True) as tx:
            tx.lock(key)
            if tx.result(key) is not None:
                return Released(key, "completed", None)
            claim = tx.claim(key)
            if claim is None:
                return Released(key, "unknown", None)
            if not self.claim_is_stale(claim, tx.now()):
                return Released(key, "live", claim)
            self.audit_in(tx, {"action": "release", "who": who, "key": key, "checked": True,
                               "owner": claim_owner(claim), "note": note})
            tx.delete_claim(key, claim.token)
        let_go(claim.token)
        return Released(key, "released", claim)

    def audit_entries(self, page: int = 1000) -> Iterator[str]:
        """Every audit entry's stored text, in order, read ``page`` at a time."""
        after = 0
        while True:
            rows = self.audit_page(after, page)
            for _, text in rows:
                yield text
            if len(rows) < page:
                return
            after = rows[-1][0]

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
    """Copy every key and approval of ``source`` that ``target`` does not hold, then the
    audit entries after those ``target`` holds (see the module docstring); ``source`` is
    left as it is. Raises :class:`CopyRefused` (the store onto itself, open claims in the
    source, a target whose audit log is its own: nothing written; a source that changed
    during the copy) and ``StoreError``."""
    if source is target or source.identity() == target.identity():
        raise CopyRefused("the target is the source itself (the same store): nothing to copy;"
                          " give --to the new store")
    target.key_page(None, 1)  # a target that cannot be used fails before anything is read
    audit_present = _audit_in_common(source, target)
    survey = _survey(source, batch)
    if survey.open_claims:
        count = survey.open_claims
        raise CopyRefused(
            f"{count} open claim{'s' if count != 1 else ''} (a write running now, its lease not"
            " passed and its owner not gone): nothing was copied; stop the workers on this"
            " store and copy again once the claims end (a stale claim is copied as it is)")
    keys = present = batches = 0
    for chunk in _chunks(source.entries(batch), batch):
        if batches >= len(survey.key_batches) or _digest(chunk) != survey.key_batches[batches]:
            _changed(keys, 0)  # before this batch is written
        added = target.add_keys(chunk)
        keys += added
        present += len(chunk) - added
        batches += 1
    if batches != len(survey.key_batches):
        _changed(keys, 0)
    approvals = source.approval_page()
    if _digest(approvals) != survey.approvals:
        _changed(keys, 0)
    approvals_added = 0
    for part in _chunks(iter(approvals), batch):
        approvals_added += target.add_approvals(part)
    audit = 0
    after_entry = audit_present
    while True:  # the entries after those the target holds, a page at a time
        page = source.audit_page(after_entry, batch)
        audit += target.add_audit(page)
        if len(page) < batch:
            break
        after_entry = page[-1][0]
    after = _survey(source, batch)
    if (after.key_batches, after.approvals, after.audit) != (
            survey.key_batches, survey.approvals, survey.audit):
        _changed(keys, approvals_added)
    return Copied(keys, present, approvals_added, len(approvals) - approvals_added, audit,
                  audit_present)


@dataclass(frozen=True)
class _Survey:
    open_claims: int
    key_batches: list[str]  # a digest of each batch of keys, in key order
    approvals: str  # a digest of every approval record
    audit: tuple[int, str] | None  # the audit log's last entry: its number and hash


def _survey(store: OperableStore, batch: int) -> _Survey:
    """One read of ``store``: its open claims, and a digest of each batch of keys and of the
    approvals (what a copy compares to see whether the store changed meanwhile)."""
    now = store.store_now()
    open_claims = 0
    digests: list[str] = []
    for chunk in _chunks(store.entries(batch), batch):
        digests.append(_digest(chunk))
        open_claims += sum(1 for entry in chunk
                           if entry.claim is not None and not store.claim_is_stale(entry.claim, now))
    return _Survey(open_claims, digests, _digest(store.approval_page()), _audit_tail(store))


def _audit_tail(store: OperableStore) -> tuple[int, str] | None:
    """The audit log's last entry (its number and hash), or None when it is empty."""
    with store.transaction(write=False) as tx:
        return tx.audit_tail()


def _audit_in_common(source: OperableStore, target: OperableStore) -> int:
    """How many audit entries the target holds of the source's log: all of its own, when
    its log is the start of the source's (empty, or a copy made before: its last entry is
    the source's entry of that number, and the chain makes every earlier one the same too).
    A target whose log is its own raises :class:`CopyRefused`, before anything is written:
    two logs cannot be made one chain, and the source's would be lost in the move."""
    tail = _audit_tail(target)
    if tail is None:
        return 0
    number, digest = tail
    theirs = source.audit_page(number - 1, 1)
    if theirs and theirs[0][0] == number and json.loads(theirs[0][1]).get("hash") == digest:
        return number
    raise CopyRefused(
        f"the target's audit log has {number} entr{'y' if number == 1 else 'ies'} of its own"
        " that are not the start of the source's: the two logs cannot be one chain, and the"
        " source's would be lost in the move; nothing was copied (copy into a store that"
        " has not been used yet)")


def _digest(records: list[Any]) -> str:
    """A digest of key or approval entries, each whole (every field, in order)."""
    digest = hashlib.blake2b(digest_size=16)
    for record in records:
        digest.update(repr(record).encode("utf-8", "backslashreplace"))
        digest.update(b"\0")
    return digest.hexdigest()


def _changed(keys: int, approvals: int) -> None:
    written = ("nothing was copied" if not keys and not approvals else
               f"{keys} keys and {approvals} approvals copied so far stay in the target")
    raise CopyRefused(
        f"the store changed during the copy (a worker is still using it): {written}; stop"
        " every worker on it and copy again (what the target holds already is kept)")


def _chunks(items: Iterator[Any], size: int) -> Iterable[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
