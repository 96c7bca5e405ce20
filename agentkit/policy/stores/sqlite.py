"""The SQLite store: durable across restarts, safe between processes on one machine.

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

Failures
    Every ``sqlite3`` error (a lock held past ``busy_timeout``, a corrupt or read-only file,
    a full disk) comes out as :class:`~agentkit.policy.stores.algorithm.StoreError` naming
    the file and the reason, and ``run_once`` turns it into ``busy`` or ``outcome_unknown``.
    Opening a store on a path it cannot use fails at once, with one error saying what is
    wrong: a folder that does not exist and cannot be made, a read-only folder or file, a
    folder where the file should be, a file that is not an SQLite database.

Owners
    A claim's owner (host, pid, start time; see :mod:`~agentkit.policy.stores.owner`) lets
    a claim left by a killed process be recovered at once instead of after its lease.
    Not for a network file system: SQLite's locks (and WAL's shared memory) need one
    machine's kernel, and the owner checks need to see the owner's processes.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from agentkit.policy.stores.algorithm import Claim, StoreBase, StoreError
from agentkit.policy.stores.owner import owner_gone

__all__ = ["BUSY_TIMEOUT_SECONDS", "SQLiteIdempotencyStore", "SQLiteTransaction"]

logger = logging.getLogger("agentkit.policy.stores")

#: How long a connection waits for another writer before giving up (SQLite ``busy_timeout``).
BUSY_TIMEOUT_SECONDS = 10.0

# results and claims are keyed by their text key alone: WITHOUT ROWID keeps each in one
# b-tree instead of a rowid table plus the primary key's index, so a new key's claim and
# result write half the pages (a store file made before this keeps its tables; the queries
# are the same). approvals keep their rowid: it is the creation order list_approvals uses.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    fingerprint TEXT,
    result TEXT NOT NULL,
    completed_at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    fingerprint TEXT,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    start_time INTEGER,
    lease_until REAL NOT NULL,
    claimed_at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS approvals (
    approval_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    record TEXT NOT NULL,
    updated_at REAL NOT NULL
);
"""

_CLAIM_COLUMNS = "token, fingerprint, host, pid, start_time, lease_until"


class SQLiteTransaction:
    """The :class:`~agentkit.policy.stores.algorithm.Transaction` of the SQLite store, on one
    connection inside ``BEGIN IMMEDIATE`` (writes) or autocommit (reads)."""

    def __init__(self, conn: sqlite3.Connection, clock: Callable[[], float]) -> None:
        self._c = conn
        self._clock = clock

    def now(self) -> float:
        return self._clock()

    def lock(self, name: str) -> None:
        pass  # BEGIN IMMEDIATE already holds the database's write lock

    def result(self, key: str) -> tuple[str | None, str] | None:
        row = self._c.execute(
            "SELECT fingerprint, result FROM results WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def claim(self, key: str) -> Claim | None:
        row = self._c.execute(
            f"SELECT {_CLAIM_COLUMNS} FROM claims WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else Claim(*row)

    def insert_claim(self, key: str, claim: Claim) -> bool:
        cur = self._c.execute(
            f"INSERT OR IGNORE INTO claims (key, {_CLAIM_COLUMNS}, claimed_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (key, *_claim_row(claim), time.time()),
        )
        return cur.rowcount == 1

    def replace_claim(self, key: str, token: str, claim: Claim) -> bool:
        cur = self._c.execute(
            "UPDATE claims SET token = ?, fingerprint = ?, host = ?, pid = ?, start_time = ?,"
            " lease_until = ?, claimed_at = ? WHERE key = ? AND token = ?",
            (*_claim_row(claim), time.time(), key, token),
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
            "INSERT OR IGNORE INTO results (key, fingerprint, result, completed_at)"
            " VALUES (?, ?, ?, ?)",
            (key, fingerprint, text, time.time()),
        )

    def approval(self, approval_id: str) -> str | None:
        row = self._c.execute(
            "SELECT record FROM approvals WHERE approval_id = ?", (approval_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    def insert_approval(self, approval_id: str, state: str, text: str) -> None:
        self._c.execute(
            "INSERT INTO approvals (approval_id, state, record, updated_at) VALUES (?, ?, ?, ?)",
            (approval_id, state, text, time.time()),
        )

    def replace_approval(self, approval_id: str, state: str, text: str) -> None:
        # An UPDATE keeps the row's rowid, which is the creation order list_approvals uses.
        self._c.execute(
            "UPDATE approvals SET state = ?, record = ?, updated_at = ? WHERE approval_id = ?",
            (state, text, time.time(), approval_id),
        )

    def approvals(self, state: str | None) -> list[str]:
        if state is None:
            rows = self._c.execute("SELECT record FROM approvals ORDER BY rowid").fetchall()
        else:
            rows = self._c.execute(
                "SELECT record FROM approvals WHERE state = ? ORDER BY rowid", (state,)
            ).fetchall()
        return [str(row[0]) for row in rows]


def _claim_row(claim: Claim) -> tuple[Any, ...]:
    """A claim's fields in ``_CLAIM_COLUMNS`` order. (``dataclasses.astuple`` deep-copies
    every field: a sixth of the whole time of a new-key ``run_once``.)"""
    return (claim.token, claim.fingerprint, claim.host, claim.pid, claim.start_time,
            claim.lease_until)


def _is_locked(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _check_path(path: str) -> None:
    """Refuse, with one clear reason, a path where SQLite could not keep a store."""
    if os.path.isdir(path):
        raise StoreError(f"{path}: is a folder; give the path of a database file inside it")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"{path}: its folder {folder} does not exist and cannot be created"
            f" ({exc.strerror or exc})"
        ) from exc
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StoreError(
            f"{path}: the folder {folder} is read-only (SQLite writes its journal files"
            " beside the database)"
        )
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        raise StoreError(f"{path}: the file is read-only (the store writes every claim)")


class SQLiteIdempotencyStore(StoreBase):
    """Durable across restarts, safe between threads and between processes on one machine.

    ``busy_timeout_seconds`` bounds the wait for another writer (then the call is ``busy``);
    ``clock`` (default ``time.time``) times the leases. Not for a network file system: SQLite's locks (and WAL's shared memory) need one
    machine's kernel, and the owner checks need to see the owner's processes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        claim_ttl_seconds: float = 300,
        *,
        busy_timeout_seconds: float = BUSY_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(claim_ttl_seconds)
        self.path = os.fspath(path)
        self.clock = clock
        self.busy_timeout_seconds = float(busy_timeout_seconds)
        if self.path in ("", ":memory:"):
            raise ValueError("a durable store needs a file path; use IdempotencyStore in memory")
        if not self.busy_timeout_seconds >= 0:
            raise ValueError("busy_timeout_seconds must be >= 0")
        _check_path(self.path)
        self._pool_lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._inherited: list[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._closed = False
        conn = self._connect()
        try:
            self._setup(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"{self.path}: not a usable SQLite database ({exc})") from exc
        except BaseException:
            conn.close()
            raise
        self._idle.append(conn)

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_seconds,
                isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
                check_same_thread=False,  # pooled: one thread at a time, maybe not the creator
            )
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open the database ({exc})") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_seconds * 1000)}")
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            conn.close()
            if _is_locked(exc):
                raise StoreError(f"{self.path}: {self._reason(exc)}") from exc
            raise StoreError(f"{self.path}: not a usable SQLite database ({exc})") from exc
        return conn

    def _reason(self, exc: sqlite3.Error) -> str:
        if _is_locked(exc):
            return (f"{exc} (another connection held the write lock for more than"
                    f" busy_timeout, {self.busy_timeout_seconds:g} s)")
        return str(exc)

    def _setup(self, conn: sqlite3.Connection) -> None:
        """WAL and tables; retried because processes opening a new file at once may deadlock.

        Switching to WAL needs an exclusive lock, and SQLite answers "locked" at once,
        without waiting, when two connections would otherwise wait for each other.
        """
        deadline = time.monotonic() + self.busy_timeout_seconds
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
                raise StoreError(f"{self.path}: the store is closed")
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
    def transaction(self, *, write: bool, full_sync: bool = False) -> Iterator[SQLiteTransaction]:
        """A write is one BEGIN IMMEDIATE transaction; a read is a single autocommit SELECT."""
        conn = self._checkout()
        full_sync = write and full_sync
        healthy = True
        try:
            try:
                if full_sync:
                    conn.execute("PRAGMA synchronous = FULL")
                if write:
                    conn.execute("BEGIN IMMEDIATE")
                yield SQLiteTransaction(conn, self.clock)
                if write:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                healthy = _is_locked(exc)  # a lock timeout leaves the connection usable
                raise StoreError(f"{self.path}: {self._reason(exc)}") from exc
        finally:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if full_sync:
                    conn.execute("PRAGMA synchronous = NORMAL")
            except sqlite3.Error:
                healthy = False  # do not mask the error propagating; never reuse it
            self._checkin(conn, healthy=healthy)

    # ---- staleness

    def owner_gone(self, claim: Claim) -> bool:
        return owner_gone(claim.host, claim.pid, claim.start_time, local_host=self.host)

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
