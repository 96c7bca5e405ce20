"""Idempotency stores: how a write that may be asked for twice is done at most once.

A retry is only safe if the caller can tell "not done" from "done, but the answer was lost".
The store remembers, per idempotency key, either a *claim* (someone is running it now) or a
*completed result* (it is done: replay it). Both stores below share one algorithm,
``_StoreBase.run_once``, written against a tiny transaction interface; the in-memory store
implements that interface with a lock and dicts, the SQLite store with ``BEGIN IMMEDIATE``
transactions. Writing the algorithm once is what makes "identical semantics" true rather
than hoped for. Results and approval records are kept as JSON text in both stores, so a
replay returns a fresh copy that no caller can have mutated, and a value the durable store
could not keep fails in the memory store too.

Why a claim records its owner
    A claim must never be taken over while its owner may still be running, or two writers
    run at once. A lease alone cannot know that a process was killed a second after it
    claimed (the key would be stuck for the whole lease), and a pid alone is reused by the
    operating system. So a claim records the host, the pid and the process start time
    (field 22 of ``/proc/<pid>/stat``), and a wall-clock lease deadline (wall clock because
    other processes compare it). It is stale when the lease has passed, or when the owner is
    provably gone: same host, and the pid no longer exists, is a zombie, or belongs to a
    process that started at another time (a container restart gives the new process the
    old pid). The memory store lives and dies with its process, so only the lease applies.

Why recovery asks before it runs
    A stale claim means a write *may* have landed. The taker-over first asks ``recover``
    (the tool's status lookup): a receipt settles the key as done, None means "not done"
    and the operation runs, an exception means "unknown" and nothing runs. Without a lookup
    the answer is ``outcome_unknown`` until a human calls ``release(key)``. A lookup that
    cannot say leaves the claim in place but already stale, so the next caller asks again
    instead of waiting out a lease nobody is using.

Smaller choices, each on the safe side
    A given fingerprint must equal the stored one, and a key stored *without* one conflicts
    with any fingerprint: the store cannot prove the payloads match. An operation that
    raises an ``Exception`` frees the key (nothing useful happened); one interrupted by
    ``KeyboardInterrupt`` or ``SystemExit`` may have half-written, so its claim is kept
    and marked stale for the lookup to settle. An ok result that is not JSON-serialisable
    cannot be kept: the claim is kept (stale) and ``TypeError`` is raised.

SQLite durability (``PRAGMA synchronous``)
    The file runs in WAL mode: readers never block the writer, and a process killed at any
    point leaves the database consistent. With ``synchronous=NORMAL`` (the default here) a
    commit survives a crash of the *process* but the last commits may be lost if the
    *machine* loses power, because the WAL is only fsynced at checkpoints. That is
    acceptable for reversible writes: a lost claim or result only means the tool's status
    lookup is asked again, and it re-checks the real output. It is not acceptable for an
    irreversible write, whose claim must be on disk *before* the message or payment goes
    out, or a reboot could forget it and send it twice. So ``run_once(..., full_sync=True)``
    and every approval write commit with ``synchronous=FULL`` (fsync at every commit).

SQLite concurrency
    Every check-then-write (claim, takeover, completion, approval compare-and-swap) runs in
    a ``BEGIN IMMEDIATE`` transaction, which takes the database's write lock up front, so
    two processes can never both see "free" and both claim. The operation and the status
    lookup run outside any transaction: a slow tool never holds the lock. Storing the
    result and removing the claim is one transaction, so no crash can leave "done" without
    a result or a result still claimed. Connections are pooled per store and never used by
    two threads at once; a busy database is waited for up to ``busy_timeout`` (10 s).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from agentkit.boundary.canonical import canonical_json
from agentkit.boundary.errors import ErrorCode, failure

__all__ = [
    "IdempotencyStore",
    "SQLiteIdempotencyStore",
]

logger = logging.getLogger(__name__)

Result = dict[str, Any]

#: How long a connection waits for another writer before giving up (SQLite ``busy_timeout``).
BUSY_TIMEOUT_SECONDS = 10.0


# --------------------------------------------------------------------------- owners


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) of a Linux process, or None where /proc says nothing.

    The command name (field 2) may contain spaces and parentheses, so fields are counted
    from the last ")".
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2 :].split()
        return fields[0].decode("ascii", "replace"), int(fields[19])  # fields 3 and 22
    except (OSError, ValueError, IndexError):
        return None


_self_identity: tuple[int, int | None] | None = None


def _this_process() -> tuple[int, int | None]:
    """This process's (pid, start time); recomputed after a fork, since the pid changed."""
    global _self_identity
    pid = os.getpid()
    if _self_identity is None or _self_identity[0] != pid:
        stat = _proc_stat(pid)
        _self_identity = (pid, stat[1] if stat else None)
    return _self_identity


@dataclass(frozen=True)
class _Claim:
    """Who runs a key now, and until when they may be presumed alive."""

    token: str  # unique per claim: the compare-and-swap handle
    fingerprint: str | None
    host: str
    pid: int
    start_time: int | None
    lease_until: float  # wall clock (time.time()): compared across processes


def _owner_gone(claim: _Claim, host: str) -> bool:
    """True only when the owner is *provably* gone; any doubt leaves it to the lease."""
    if claim.host != host or claim.pid <= 0:
        return False  # another machine's processes cannot be seen from here
    my_pid, my_start = _this_process()
    if claim.pid == my_pid:
        # Our own process is never gone, but an earlier process with our pid is.
        return None not in (claim.start_time, my_start) and claim.start_time != my_start
    if os.name != "posix":
        return False  # os.kill(pid, 0) would *terminate* the process on Windows
    try:
        os.kill(claim.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, under another user
    except OSError:
        return False
    stat = _proc_stat(claim.pid)
    if stat is None:
        return False  # no /proc (macOS): the pid exists, trust the lease
    state, start = stat
    if state in ("Z", "X"):
        return True  # exited, not yet reaped by its parent
    return claim.start_time is not None and start != claim.start_time


def _conflicts(given: str | None, stored: str | None) -> bool:
    """A given fingerprint must equal the stored one; None given means "do not check".

    A key first used without a fingerprint and later with one is a conflict: the store
    cannot prove the payloads match, and refusing is the safe side.
    """
    return given is not None and given != stored


def _is_ok(result: Any) -> bool:
    return isinstance(result, dict) and result.get("ok") is True


def _check_record(record: Any) -> str:
    if not isinstance(record, dict) or not isinstance(record.get("state"), str):
        raise ValueError('an approval record must be a dict with a str "state"')
    return canonical_json(record)


# --------------------------------------------------------------------------- the algorithm


class _Tx(Protocol):
    """What run_once needs from a backend inside one atomic section."""

    def result(self, key: str) -> tuple[str | None, str] | None: ...
    def claim(self, key: str) -> _Claim | None: ...
    def insert_claim(self, key: str, claim: _Claim) -> None: ...
    def replace_claim(self, key: str, token: str, claim: _Claim) -> bool: ...
    def delete_claim(self, key: str, token: str | None) -> bool: ...
    def insert_result(self, key: str, fingerprint: str | None, text: str) -> None: ...
    def approval(self, approval_id: str) -> str | None: ...
    def put_approval(self, approval_id: str, state: str, text: str) -> None: ...


_S = TypeVar("_S", bound="_StoreBase")
_CLAIMED = "claimed"
_TAKEN_OVER = "taken_over"


class _StoreBase:
    """run_once and the approval records, over a backend's ``_tx``."""

    def __init__(self, claim_ttl_seconds: float) -> None:
        ttl = float(claim_ttl_seconds)
        if not ttl > 0:  # also refuses NaN
            raise ValueError("claim_ttl_seconds must be > 0")
        self.claim_ttl_seconds = ttl
        self._host = socket.gethostname()

    # Backends provide these two.
    def _tx(self, *, write: bool, full_sync: bool = False) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _is_stale(self, claim: _Claim, now: float) -> bool:  # pragma: no cover
        raise NotImplementedError

    # ---- public interface

    def run_once(
        self,
        key: str,
        operation: Callable[[], Result],
        fingerprint: str | None = None,
        *,
        recover: Callable[[], Result | None] | None = None,
        lease_seconds: float | None = None,
        full_sync: bool = False,
    ) -> Result:
        """Run ``operation`` at most once per key; see the module docstring and DESIGN §7.

        ``lease_seconds`` is the caller's worst case for one run (its timeout and then
        some): the claim is not presumed abandoned before it passes, even if it is longer
        than ``claim_ttl_seconds``. ``full_sync`` makes the durable store fsync this call's
        claim and result, for writes that must not happen twice even across a power cut.
        """
        if not isinstance(key, str):
            raise TypeError("key must be a str")
        with self._tx(write=False) as tx:  # fast path: a replay takes no write lock
            stored = tx.result(key)
        if stored is not None:
            return self._replay(stored, fingerprint)

        pid, start = _this_process()
        ttl = max(self.claim_ttl_seconds, lease_seconds or 0.0)
        mine = _Claim(os.urandom(16).hex(), fingerprint, self._host, pid, start, time.time() + ttl)
        with self._tx(write=True, full_sync=full_sync) as tx:
            decision = self._decide(tx, key, fingerprint, mine, may_take_over=recover is not None)
        if isinstance(decision, dict):
            return decision
        kind, mine = decision
        if kind == _TAKEN_OVER:
            assert recover is not None
            outcome = self._recover(key, mine, recover, full_sync)
            if outcome is not None:
                return outcome
        return self._run(key, mine, operation, full_sync)

    def release(self, key: str) -> None:
        """Clear a claim, whoever holds it: a human's "I checked, it did not happen"."""
        with self._tx(write=True) as tx:
            tx.delete_claim(key, None)

    def abandon(self, key: str) -> None:
        """Mark this process's claim on ``key`` stale now: its owner is running nothing more.

        The runner calls it when a write ended ``outcome_unknown`` and its attempt has really
        returned: the next caller then asks the status lookup at once, instead of being told
        ``in_progress`` until a lease that nobody is using runs out. Claims held by another
        process are left alone; their owner check and lease decide.
        """
        pid, _ = _this_process()
        with self._tx(write=True) as tx:
            claim = tx.claim(key)
            if claim is not None and claim.host == self._host and claim.pid == pid:
                tx.replace_claim(key, claim.token, dataclasses.replace(claim, lease_until=0.0))

    def result(self, key: str) -> Result | None:
        """The stored completed result (a fresh copy), or None."""
        with self._tx(write=False) as tx:
            stored = tx.result(key)
        return None if stored is None else json.loads(stored[1])

    def put_approval(self, approval_id: str, record: dict[str, Any]) -> None:
        """Insert or replace; committed with a full fsync in the durable store."""
        text = _check_record(record)
        with self._tx(write=True, full_sync=True) as tx:
            tx.put_approval(approval_id, record["state"], text)

    def get_approval(self, approval_id: str) -> dict[str, Any] | None:
        """A fresh copy of the record, or None."""
        with self._tx(write=False) as tx:
            text = tx.approval(approval_id)
        return None if text is None else json.loads(text)

    def update_approval(
        self, approval_id: str, expected_state: str, record: dict[str, Any]
    ) -> bool:
        """Compare-and-swap on ``state``: approve and deny racing each other cannot both win."""
        text = _check_record(record)
        with self._tx(write=True, full_sync=True) as tx:
            current = tx.approval(approval_id)
            if current is None or json.loads(current).get("state") != expected_state:
                return False
            tx.put_approval(approval_id, record["state"], text)
            return True

    def close(self) -> None:
        """Release resources; the memory store has none."""

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- steps of run_once

    @staticmethod
    def _replay(stored: tuple[str | None, str], fingerprint: str | None) -> Result:
        if _conflicts(fingerprint, stored[0]):
            return failure(ErrorCode.IDEMPOTENCY_CONFLICT)
        result = json.loads(stored[1])
        result["replayed"] = True
        return result

    def _decide(
        self, tx: _Tx, key: str, fingerprint: str | None, mine: _Claim, *, may_take_over: bool
    ) -> Result | tuple[str, _Claim]:
        """Inside one atomic section: a final answer, or the claim this caller now holds."""
        stored = tx.result(key)
        if stored is not None:  # completed since the fast path looked
            return self._replay(stored, fingerprint)
        claim = tx.claim(key)
        if claim is None:
            tx.insert_claim(key, mine)
            return (_CLAIMED, mine)
        if _conflicts(fingerprint, claim.fingerprint):
            return failure(ErrorCode.IDEMPOTENCY_CONFLICT)
        if not self._is_stale(claim, time.time()):
            return failure(ErrorCode.IN_PROGRESS)
        if not may_take_over:
            # Nobody can say whether the write landed; leave the claim for a lookup or a human.
            return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
        mine = dataclasses.replace(mine, fingerprint=claim.fingerprint)
        if not tx.replace_claim(key, claim.token, mine):
            return failure(ErrorCode.IN_PROGRESS)
        return (_TAKEN_OVER, mine)

    def _recover(
        self, key: str, mine: _Claim, recover: Callable[[], Result | None], full_sync: bool
    ) -> Result | None:
        """Ask the status lookup: a result to return, or None when the operation should run."""
        try:
            receipt = recover()
        except Exception:
            logger.warning("status lookup for key %r raised; outcome unknown", key, exc_info=True)
            self._abandon(key, mine)
            return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
        except BaseException:
            self._abandon(key, mine)
            raise
        if receipt is None:
            return None  # not done: the caller runs the operation under this claim
        if not _is_ok(receipt):
            self._abandon(key, mine)
            return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
        assert isinstance(receipt, dict)
        self._complete(key, mine, receipt, full_sync)
        return receipt

    def _run(
        self, key: str, mine: _Claim, operation: Callable[[], Result], full_sync: bool
    ) -> Result:
        try:
            result = operation()
        except Exception:
            self._drop(key, mine)
            raise
        except BaseException:
            # Interrupted mid-write: the outcome is unknown, but nobody runs it any more.
            self._abandon(key, mine)
            raise
        if _is_ok(result):
            self._complete(key, mine, result, full_sync)
        elif isinstance(result, dict) and result.get("error") == ErrorCode.OUTCOME_UNKNOWN:
            pass  # it may still be running: the claim stays until its lease or owner ends
        else:
            self._drop(key, mine)
            if not isinstance(result, dict):
                raise TypeError(f"operation must return a dict, not {type(result).__name__}")
        return result

    def _complete(self, key: str, mine: _Claim, result: Result, full_sync: bool) -> None:
        """Store the result and drop the claim in one atomic section."""
        try:
            text = canonical_json(result)
        except (TypeError, ValueError) as exc:
            self._abandon(key, mine)  # it happened, but cannot be kept: let a lookup decide
            raise TypeError("an ok result must be JSON-serialisable to be stored") from exc
        with self._tx(write=True, full_sync=full_sync) as tx:
            if tx.result(key) is None:
                tx.insert_result(key, mine.fingerprint, text)
            still_mine = tx.delete_claim(key, mine.token)
        if not still_mine:
            logger.warning(
                "claim on key %r was lost before the run finished (lease too short?)", key
            )

    def _drop(self, key: str, mine: _Claim) -> None:
        """Free the key, unless someone else holds it by now."""
        with self._tx(write=True) as tx:
            tx.delete_claim(key, mine.token)

    def _abandon(self, key: str, mine: _Claim) -> None:
        """Keep the claim but mark it stale at once, so the next caller asks the lookup."""
        with self._tx(write=True) as tx:
            tx.replace_claim(key, mine.token, dataclasses.replace(mine, lease_until=0.0))


# --------------------------------------------------------------------------- in memory


class _MemoryTx:
    def __init__(self, store: IdempotencyStore) -> None:
        self._s = store

    def result(self, key: str) -> tuple[str | None, str] | None:
        return self._s._results.get(key)

    def claim(self, key: str) -> _Claim | None:
        return self._s._claims.get(key)

    def insert_claim(self, key: str, claim: _Claim) -> None:
        self._s._claims[key] = claim

    def replace_claim(self, key: str, token: str, claim: _Claim) -> bool:
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

    def insert_result(self, key: str, fingerprint: str | None, text: str) -> None:
        self._s._results[key] = (fingerprint, text)

    def approval(self, approval_id: str) -> str | None:
        return self._s._approvals.get(approval_id)

    def put_approval(self, approval_id: str, state: str, text: str) -> None:
        self._s._approvals[approval_id] = text


class IdempotencyStore(_StoreBase):
    """In memory and thread safe: for one process that may forget everything when it ends.

    A claim is stale only when its lease passes: a worker thread that died is not visible
    from here, and the lease covers it.
    """

    def __init__(self, claim_ttl_seconds: float = 300) -> None:
        super().__init__(claim_ttl_seconds)
        self._lock = threading.Lock()
        self._results: dict[str, tuple[str | None, str]] = {}
        self._claims: dict[str, _Claim] = {}
        self._approvals: dict[str, str] = {}

    @contextmanager
    def _tx(self, *, write: bool, full_sync: bool = False) -> Iterator[_MemoryTx]:
        with self._lock:
            yield _MemoryTx(self)

    def _is_stale(self, claim: _Claim, now: float) -> bool:
        return claim.lease_until <= now

    def __repr__(self) -> str:
        return f"IdempotencyStore(claim_ttl_seconds={self.claim_ttl_seconds:g})"


# --------------------------------------------------------------------------- SQLite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    fingerprint TEXT,
    result TEXT NOT NULL,
    completed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    fingerprint TEXT,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    start_time INTEGER,
    lease_until REAL NOT NULL,
    claimed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS approvals (
    approval_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    record TEXT NOT NULL,
    updated_at REAL NOT NULL
);
"""

_CLAIM_COLUMNS = "token, fingerprint, host, pid, start_time, lease_until"


class _SQLiteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._c = conn

    def result(self, key: str) -> tuple[str | None, str] | None:
        row = self._c.execute(
            "SELECT fingerprint, result FROM results WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def claim(self, key: str) -> _Claim | None:
        row = self._c.execute(
            f"SELECT {_CLAIM_COLUMNS} FROM claims WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else _Claim(*row)

    def insert_claim(self, key: str, claim: _Claim) -> None:
        self._c.execute(
            f"INSERT INTO claims (key, {_CLAIM_COLUMNS}, claimed_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (key, *dataclasses.astuple(claim), time.time()),
        )

    def replace_claim(self, key: str, token: str, claim: _Claim) -> bool:
        cur = self._c.execute(
            "UPDATE claims SET token = ?, fingerprint = ?, host = ?, pid = ?, start_time = ?,"
            " lease_until = ?, claimed_at = ? WHERE key = ? AND token = ?",
            (*dataclasses.astuple(claim), time.time(), key, token),
        )
        return cur.rowcount == 1

    def delete_claim(self, key: str, token: str | None) -> bool:
        if token is None:
            cur = self._c.execute("DELETE FROM claims WHERE key = ?", (key,))
        else:
            cur = self._c.execute("DELETE FROM claims WHERE key = ? AND token = ?", (key, token))
        return cur.rowcount == 1

    def insert_result(self, key: str, fingerprint: str | None, text: str) -> None:
        self._c.execute(
            "INSERT INTO results (key, fingerprint, result, completed_at) VALUES (?, ?, ?, ?)",
            (key, fingerprint, text, time.time()),
        )

    def approval(self, approval_id: str) -> str | None:
        row = self._c.execute(
            "SELECT record FROM approvals WHERE approval_id = ?", (approval_id,)
        ).fetchone()
        return None if row is None else row[0]

    def put_approval(self, approval_id: str, state: str, text: str) -> None:
        self._c.execute(
            "INSERT OR REPLACE INTO approvals (approval_id, state, record, updated_at)"
            " VALUES (?, ?, ?, ?)",
            (approval_id, state, text, time.time()),
        )


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SQLiteIdempotencyStore(_StoreBase):
    """Durable across restarts, safe between threads and between processes on one machine.

    Not for a network file system: SQLite's locks (and WAL's shared memory) need one
    machine's kernel, and the owner checks need to see the owner's processes.
    """

    def __init__(self, path: str | os.PathLike[str], claim_ttl_seconds: float = 300) -> None:
        super().__init__(claim_ttl_seconds)
        self.path = os.fspath(path)
        if self.path in ("", ":memory:"):
            raise ValueError("a durable store needs a file path; use IdempotencyStore in memory")
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._pool_lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._inherited: list[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._closed = False
        conn = self._connect()
        try:
            self._setup(conn)
        except BaseException:
            conn.close()
            raise
        self._idle.append(conn)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=BUSY_TIMEOUT_SECONDS,
            isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
            check_same_thread=False,  # pooled: one thread at a time, maybe not the creator
        )
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def _setup(self, conn: sqlite3.Connection) -> None:
        """WAL and tables; retried because processes opening a new file at once may deadlock.

        Switching to WAL needs an exclusive lock, and SQLite answers "locked" at once,
        without waiting, when two connections would otherwise wait for each other.
        """
        deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                break
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        if str(mode).lower() != "wal":
            logger.warning(
                "%s: WAL unavailable (journal_mode=%s); readers will wait", self.path, mode
            )

    # ---- connection pool

    def _checkout(self) -> sqlite3.Connection:
        with self._pool_lock:
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed store.")
            if self._pid != os.getpid():
                # A forked child must not use (or close) its parent's connections.
                self._inherited.extend(self._idle)
                self._idle = []
                self._pid = os.getpid()
            if self._idle:
                return self._idle.pop()
        return self._connect()

    def _checkin(self, conn: sqlite3.Connection, *, healthy: bool) -> None:
        with self._pool_lock:
            if healthy and not self._closed and self._pid == os.getpid():
                self._idle.append(conn)
                return
        conn.close()

    @contextmanager
    def _tx(self, *, write: bool, full_sync: bool = False) -> Iterator[_SQLiteTx]:
        """A write is one BEGIN IMMEDIATE transaction; a read is a single autocommit SELECT."""
        conn = self._checkout()
        full_sync = write and full_sync
        try:
            if full_sync:
                conn.execute("PRAGMA synchronous = FULL")
            if write:
                conn.execute("BEGIN IMMEDIATE")
            yield _SQLiteTx(conn)
            if write:
                conn.execute("COMMIT")
        finally:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if full_sync:
                    conn.execute("PRAGMA synchronous = NORMAL")
            except sqlite3.Error:
                # Do not mask the error already propagating; just never reuse this connection.
                self._checkin(conn, healthy=False)
            else:
                self._checkin(conn, healthy=True)

    # ---- staleness

    def _is_stale(self, claim: _Claim, now: float) -> bool:
        return claim.lease_until <= now or _owner_gone(claim, self._host)

    def close(self) -> None:
        """Close pooled connections; ones in use close when their transaction ends."""
        with self._pool_lock:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __repr__(self) -> str:
        ttl = self.claim_ttl_seconds
        return f"SQLiteIdempotencyStore({self.path!r}, claim_ttl_seconds={ttl:g})"
