"""The in-memory store: a lock and three dicts behind the shared algorithm.

For one process that may forget everything when it ends (a notebook, a test, a short task).
A claim is stale only when its lease passes (and never while its attempt still runs here):
a worker thread that died is not visible from here, and the lease covers it.

Bounded memory (``max_keys``)
    By default every completed key is kept for the life of the store, so a long-running
    process grows with the keys it has seen. ``max_keys=N`` keeps at most N completed
    results and evicts the *oldest completed* first: an evicted key that is asked for again
    runs again, so choose N larger than any window in which a retry can arrive. Claims are
    never evicted (they are what keeps a running write from running twice) and neither are
    approval records (a person may still decide them).

Retention
    ``purge()`` deletes the completed keys older than ``retention_seconds`` and the settled
    or expired approvals, as the durable stores do (:mod:`~agentkit.policy.stores.operations`),
    a thousand at a time under the store's lock.

Audit log
    The audit log (:mod:`~agentkit.policy.stores.audit`) is a list, kept as long as the
    store: a purge never shortens it.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable

from agentkit.policy.stores.algorithm import CLAIMED, Claim, Result, let_go
from agentkit.policy.stores.operations import (
    DEFAULT_RETENTION_SECONDS,
    HISTORY,
    PENDING,
    ApprovalEntry,
    KeyEntry,
    OperableStore,
    expired_before,
)

__all__ = ["IdempotencyStore", "MemoryTransaction"]


class MemoryTransaction:
    """The :class:`~agentkit.policy.stores.algorithm.Transaction` of the memory store; the
    store's lock is held for its whole life, so every section is atomic."""

    def __init__(self, store: IdempotencyStore) -> None:
        self._s = store

    @property
    def connection(self) -> None:
        """No connection: a handler's effect cannot commit in the memory store."""
        return None

    def now(self) -> float:
        return self._s.clock()

    def lock(self, name: str) -> None:
        pass  # the store's one lock is already held

    def result(self, key: str) -> tuple[str | None, str] | None:
        return self._s._results.get(key)

    def claim(self, key: str) -> Claim | None:
        return self._s._claims.get(key)

    def insert_claim(self, key: str, claim: Claim) -> bool:
        if key in self._s._claims:
            return False
        self._s._claims[key] = claim
        return True

    def replace_claim(self, key: str, token: str, claim: Claim) -> bool:
        current = self._s._claims.get(key)
        if current is None or current.token != token:
            return False
        self._s._claims[key] = claim
        return True

    def delete_claim(self, key: str, token: str | None) -> bool:
        current = self._s._claims.get(key)
        if current is None or (token is not None and current.token != token):
            return False
        del self._s._claims[key]
        return True

    def complete(self, key: str, token: str, fingerprint: str | None, text: str) -> bool:
        current = self._s._claims.pop(key, None)
        results = self._s._results
        if key not in results:
            results[key] = (fingerprint, text)
            self._s._completed_at[key] = self._s.clock()
            limit = self._s.max_keys
            while limit is not None and len(results) > limit:
                oldest = next(iter(results))  # the oldest completed key
                del results[oldest]
                self._s._completed_at.pop(oldest, None)
        return current is not None and current.token == token

    def approval(self, approval_id: str) -> str | None:
        found = self._s._approvals.get(approval_id)
        return None if found is None else found[1]

    def insert_approval(self, approval_id: str, state: str, text: str) -> None:
        self._s._approvals[approval_id] = (state, text)
        self._s._approval_times[approval_id] = self._s.clock()

    def replace_approval(self, approval_id: str, state: str, text: str) -> None:
        self._s._approvals[approval_id] = (state, text)  # keeps its place: creation order
        self._s._approval_times[approval_id] = self._s.clock()

    def approvals(self, state: str | None) -> list[str]:
        return [t for s, t in self._s._approvals.values() if state is None or s == state]

    def audit_tail(self) -> tuple[int, str] | None:
        audit = self._s._audit
        return (len(audit), audit[-1][0]) if audit else None

    def insert_audit(self, seq: int, digest: str, text: str) -> None:
        assert seq == len(self._s._audit) + 1
        self._s._audit.append((digest, text))


class _Section:
    """The store's lock around its one transaction object: no objects made per step."""

    __slots__ = ("_lock", "_tx")

    def __init__(self, lock: threading.Lock, tx: MemoryTransaction) -> None:
        self._lock = lock
        self._tx = tx

    def __enter__(self) -> MemoryTransaction:
        self._lock.acquire()
        return self._tx

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


def _stale(claim: Claim) -> Claim:
    return Claim(claim.token, claim.fingerprint, claim.host, claim.pid, claim.start_time, 0.0)


class IdempotencyStore(OperableStore):
    """In memory and thread safe: for one process that may forget everything when it ends.

    ``max_keys`` bounds the completed results kept (oldest completed evicted first; claims
    and approvals never). ``clock`` (seconds, default ``time.time``) times the leases; tests
    inject one. ``retention_seconds`` (default 7 days, None: forever) is how long
    :meth:`purge` keeps a completed key.
    """

    #: A step holds one in-process lock for microseconds: the async runner calls it on its loop.
    blocking = False

    def __init__(
        self,
        claim_ttl_seconds: float = 300,
        *,
        max_keys: int | None = None,
        clock: Callable[[], float] = time.time,
        retention_seconds: float | None = DEFAULT_RETENTION_SECONDS,
    ) -> None:
        super().__init__(claim_ttl_seconds, retention_seconds)
        if max_keys is not None and (not isinstance(max_keys, int) or max_keys < 1):
            raise ValueError("max_keys must be a positive int or None")
        self.max_keys = max_keys
        self.clock = clock
        self._lock = threading.Lock()
        self._results: dict[str, tuple[str | None, str]] = {}
        self._claims: dict[str, Claim] = {}
        self._approvals: dict[str, tuple[str, str]] = {}  # id -> (state, text)
        self._completed_at: dict[str, float] = {}  # key -> when it completed (store's clock)
        self._approval_times: dict[str, float] = {}  # id -> when it last changed
        self._audit: list[tuple[str, str]] = []  # the audit log: (hash, text), entry n at n-1

        self._tx = MemoryTransaction(self)
        self._section = _Section(self._lock, self._tx)

    def transaction(self, *, write: bool, full_sync: bool = False) -> _Section:
        return self._section  # the store's lock, held around the one reusable transaction

    # ---- the steps, straight on the dicts (the shared decision for a key claimed already)

    def claim(
        self, key: str, fingerprint: str | None, ttl: float, *, may_take_over: bool,
        full_sync: bool = False, flush: bool = True,
    ) -> Result | tuple[str, Claim]:
        with self._lock:
            stored = self._results.get(key)
            if stored is not None:
                return self._replay(stored, fingerprint)
            if key not in self._claims:
                mine = self.new_claim(fingerprint, self.clock(), ttl)
                self._claims[key] = mine
                return (CLAIMED, mine)
            return self._decide(self._tx, key, fingerprint, ttl, may_take_over=may_take_over)

    def complete(self, key: str, mine: Claim, result: Result, full_sync: bool = False) -> None:
        text = self.result_text(key, mine, result)
        with self._lock:
            still_mine = self._tx.complete(key, mine.token, mine.fingerprint, text)
        if not still_mine:
            self.claim_lost(key)

    def drop(self, key: str, mine: Claim) -> None:
        with self._lock:
            current = self._claims.get(key)
            if current is not None and current.token == mine.token:
                del self._claims[key]

    def abandon_claim(self, key: str, mine: Claim) -> None:
        let_go(mine.token)
        with self._lock:
            self._tx.replace_claim(key, mine.token, _stale(mine))

    # ---- operating the store (agentkit.policy.stores.operations)

    def store_now(self) -> float:
        return self.clock()

    def key_page(self, after: str | None = None, limit: int = 1000) -> list[KeyEntry]:
        with self._lock:
            keys = sorted(self._results.keys() | self._claims.keys())
            start = 0 if after is None else bisect.bisect_right(keys, after)
            return [self._entry(key) for key in keys[start:start + limit]]

    def key_entry(self, key: str) -> KeyEntry | None:
        with self._lock:
            return self._entry(key) if key in self._results or key in self._claims else None

    def _entry(self, key: str) -> KeyEntry:
        stored = self._results.get(key)
        if stored is not None:
            return KeyEntry(key, stored[0], stored[1], None, self._completed_at.get(key))
        claim = self._claims[key]
        return KeyEntry(key, claim.fingerprint, None, claim, None)

    def approval_page(self, state: str | None = None) -> list[ApprovalEntry]:
        with self._lock:
            return [ApprovalEntry(approval_id, s, text, self._approval_times.get(approval_id))
                    for approval_id, (s, text) in self._approvals.items()
                    if state is None or s == state]

    def audit_page(self, after: int = 0, limit: int = 1000) -> list[tuple[int, str]]:
        with self._lock:
            start = max(0, after)
            return [(start + n + 1, text)
                    for n, (_, text) in enumerate(self._audit[start:start + limit])]

    def add_keys(self, entries: list[KeyEntry]) -> int:
        added = 0
        with self._lock:
            for entry in entries:
                if entry.key in self._results or entry.key in self._claims:
                    continue
                if entry.result is not None:
                    self._results[entry.key] = (entry.fingerprint, entry.result)
                    at = self.clock() if entry.updated_at is None else entry.updated_at
                    self._completed_at[entry.key] = at
                elif entry.claim is not None:
                    self._claims[entry.key] = entry.claim
                else:
                    raise ValueError(f"key {entry.key!r}: an entry holds a result or a claim")
                added += 1
        return added

    def add_approvals(self, entries: list[ApprovalEntry]) -> int:
        added = 0
        with self._lock:
            for entry in entries:
                if entry.approval_id not in self._approvals:
                    self._approvals[entry.approval_id] = (entry.state, entry.record)
                    at = self.clock() if entry.updated_at is None else entry.updated_at
                    self._approval_times[entry.approval_id] = at
                    added += 1
        return added

    def purge_before(self, before: float) -> tuple[int, int]:
        """A thousand keys at a time under the lock, so claims interleave with the purge."""
        with self._lock:
            completed = list(self._completed_at.items())
        keys = 0
        for start in range(0, len(completed), 1000):
            with self._lock:
                for key, at in completed[start:start + 1000]:
                    if at < before and self._completed_at.get(key) == at:
                        del self._completed_at[key]
                        self._results.pop(key, None)
                        keys += 1
        approvals = 0
        with self._lock:
            for approval_id, (state, text) in list(self._approvals.items()):
                changed = self._approval_times.get(approval_id)
                old = state in HISTORY and changed is not None and changed < before
                if old or (state == PENDING and expired_before(text, before)):
                    del self._approvals[approval_id]
                    self._approval_times.pop(approval_id, None)
                    approvals += 1
        return keys, approvals

    def __repr__(self) -> str:
        extra = "" if self.max_keys is None else f", max_keys={self.max_keys}"
        return f"IdempotencyStore(claim_ttl_seconds={self.claim_ttl_seconds:g}{extra})"
