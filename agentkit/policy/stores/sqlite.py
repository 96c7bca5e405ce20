"""The SQLite store: durable across restarts, safe between processes on one machine.

Journal mode and durability (:func:`journal_choice`)
    The store runs on ``apsw``, a maintained binding that bundles its own SQLite (the
    ``apsw`` wheel 3.54.1.0 bundles SQLite 3.54.1), not on the stdlib ``sqlite3``, whose
    SQLite is the system's (Debian 12's 3.40.1, for one). SQLite 3.7.0 to 3.51.2 has the
    WAL-reset bug (https://sqlite.org/wal.html#walresetbug; fixed in 3.51.3, and in 3.44.6
    and 3.50.7 of those lines): two connections checkpointing while a third commits can
    corrupt a WAL database, and this store opens a connection per thread and per process.
    The bundled SQLite has the fix, and one function, :func:`journal_choice`, still checks
    its version (``apsw.sqlite_lib_version()``: an ``apsw`` built against an older system
    SQLite would report that one), so the safety holds by construction:

    - a fixed SQLite (the bundled one) runs WAL: readers never block the writer; claims and
      approvals commit on connections at ``synchronous=FULL`` (fsync at every commit),
      results, freed and abandoned claims on connections at ``synchronous=NORMAL`` (a pool
      per level: nothing is toggled per call);
    - an affected SQLite runs a rollback journal (``journal_mode=TRUNCATE``), with no WAL and
      no checkpoints at all, and every connection at ``synchronous=FULL`` (in a rollback
      journal, NORMAL saves nothing measurable and may corrupt the file in a power cut on
      older file systems).

    Either way every claim, reversible or irreversible, is on disk before its handler runs:
    a claim a power cut forgot would let the write run again. The result's commit need not
    be flushed (WAL): a power cut that loses it leaves the durable claim, and the status
    lookup settles the key. What it costs (``make bench``, 2 vCPUs): a new key is two
    commits, the claim's flushed (one fsync of the log) and the result's not, about 0.32 ms
    beside 0.17 ms for a plain ``INSERT`` committed at ``FULL``; in a rollback journal each
    commit is about 0.7 ms of fsyncs (the journal, the file, the journal's truncation), and
    a new key 1.5 ms. A file left in a rollback journal by the previous release (which ran
    one on the stdlib's affected SQLite) is switched to WAL when a store opens it, keeping
    its keys (a killed worker's hot journal is rolled back first); a file left in WAL is
    switched to the rollback journal only on an affected SQLite, which needs every other
    connection to the file closed (stop the old workers first), and is retried for
    ``busy_timeout`` like any lock.

    One SQLite library per process on the file: the stdlib's ``sqlite3`` opening the file
    while a store of this process has it open would not see the store's locks, and closing
    it would drop them (https://sqlite.org/howtocorrupt.html, 2.2.1). Look inside through
    ``apsw``, or from another process.

SQLite concurrency and cost
    One row per key (``keys``): a claim while ``result`` is NULL, a completed key once it is
    set. A new key is one ``INSERT OR IGNORE`` (atomic on the primary key: two processes can
    never both claim) and, once the operation returns, one ``UPDATE ... WHERE key = ? AND
    token = ?``: each is its own autocommit transaction, two commits in all, and no read
    before the claim. A key that has a row is read after its INSERT found it (that INSERT
    writes and flushes nothing, but waits for the write lock like any writer): a completed
    key replays; one claimed already (in progress, stale, taken over) takes the careful
    path, a ``BEGIN IMMEDIATE`` transaction that takes the database's write lock up front.
    When the INSERT cannot write at all (a full disk, a lock held past ``busy_timeout``), a
    completed key still replays from a read. The operation and the status lookup run
    outside any transaction: a slow tool never holds the lock. Connections are pooled per
    store and never used by two threads at once; a busy database is waited for up to
    ``busy_timeout`` (10 s).

Schema version
    ``PRAGMA user_version`` holds the layout's version (:data:`SCHEMA_VERSION`). A file of
    version 1 (a ``results`` and a ``claims`` table) or 2 (no ``audit`` table) is migrated
    in place, in one transaction, when a store opens it; a newer one is refused with a
    clear error.

Audit log
    ``audit`` holds the audit log (:mod:`~agentkit.policy.stores.audit`): one row per entry,
    its number the primary key, appended inside the transaction of the decision, release or
    purge it records (which holds the database's write lock: entries are numbered in
    order). A purge never deletes from it.

Failures
    Every SQLite error (``apsw.Error``: a lock held past ``busy_timeout``, a corrupt or
    read-only file, a full disk) comes out as
    :class:`~agentkit.policy.stores.algorithm.StoreError` naming the file and the reason, and ``run_once`` turns it into ``busy`` or ``outcome_unknown``.
    Opening a store on a path it cannot use fails at once, with one error saying what is
    wrong: a folder that does not exist and cannot be made, a read-only folder or file, a
    folder where the file should be, a file that is not an SQLite database. A file deleted
    (its folder removed) or replaced while the store is open is noticed before the next
    claim, by one ``stat``: every claim then fails (``busy``, nothing ran, logged with the
    path), rather than go on in a file no new store would see; a new store on the path
    starts afresh.

Owners
    A claim's owner (host, pid, start time; see :mod:`~agentkit.policy.stores.owner`) lets
    a claim left by a killed process be recovered at once instead of after its lease.
    Not for a network file system: SQLite's locks (and WAL's shared memory) need one
    machine's kernel, and the owner checks need to see the owner's processes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import takewhile
from typing import Any, NoReturn

import apsw

from agentkit.policy.stores.algorithm import (
    CLAIMED,
    Claim,
    Result,
    StoreError,
    check_claim,
    let_go,
)
from agentkit.policy.stores.operations import (
    DEFAULT_RETENTION_SECONDS,
    HISTORY,
    PENDING,
    ApprovalEntry,
    KeyEntry,
    OperableStore,
    purge_in_windows,
)
from agentkit.policy.stores.owner import owner_gone, this_process

__all__ = [
    "BUSY_TIMEOUT_SECONDS", "PURGE_PAUSE_SECONDS", "SCHEMA_VERSION", "WAL_RESET_FIXED",
    "JournalChoice", "SQLiteIdempotencyStore", "SQLiteTransaction", "journal_choice",
    "read_only_look", "sqlite_version",
]

logger = logging.getLogger("agentkit.policy.stores")

#: How long a connection waits for another writer before giving up (SQLite ``busy_timeout``).
BUSY_TIMEOUT_SECONDS = 10.0

#: The pause between two purge steps. A writer that finds the write lock taken sleeps and
#: retries (SQLite's busy handler: after 1, 2, 5, 10, 15, 20, 25, 25 … ms), so a pause at
#: least as long as its longest sleep in the first 50 ms lets every waiting claim in before
#: the purge takes the lock again (docs/design.md#operating-the-stores).
PURGE_PAUSE_SECONDS = 0.025

#: The layout of the tables below (``PRAGMA user_version``). Version 1 (``user_version`` 0,
#: a ``results`` and a ``claims`` table) and version 2 (no ``audit`` table) are migrated in
#: place when a store opens the file; a file with a higher version is refused.
SCHEMA_VERSION = 3

#: The first release of each SQLite line with the WAL-reset fix
#: (https://sqlite.org/wal.html#walresetbug): 3.51.3 and every later release, and the
#: backports 3.44.6 and 3.50.7. Every release from 3.7.0 (the first with WAL) up to 3.51.2
#: that is not one of these backports has the bug.
WAL_RESET_FIXED = ((3, 44, 6), (3, 50, 7), (3, 51, 3))


@dataclass(frozen=True)
class JournalChoice:
    """How the store runs the file on one SQLite: the ``journal_mode``, the ``synchronous``
    of the connections that commit claims and approvals (``claims``) and of those that
    commit results, freed and abandoned claims (``results``), and why."""

    journal_mode: str
    claims: str
    results: str
    why: str


def sqlite_version() -> tuple[int, ...]:
    """The version of the SQLite the store runs on: ``apsw``'s own
    (``apsw.sqlite_lib_version()``, the bundled one in the wheels), never the stdlib
    ``sqlite3``'s."""
    return tuple(int("".join(takewhile(str.isdigit, part)) or 0)
                 for part in apsw.sqlite_lib_version().split(".")[:3])


def journal_choice(version: tuple[int, ...] | None = None) -> JournalChoice:
    """The one decision of the journal: WAL only on a SQLite without the WAL-reset bug.

    ``version`` is a SQLite version (default: the one the store runs on,
    :func:`sqlite_version`). On a fixed one (the SQLite ``apsw`` bundles), WAL, with claims
    committed at ``FULL`` and results at ``NORMAL``. On an affected SQLite (an ``apsw`` built
    against an older system SQLite) a rollback journal (``TRUNCATE``: the journal is emptied,
    not deleted, after each commit, a little cheaper than ``DELETE``) has no WAL, so no
    checkpoint can race a commit, and every connection runs ``synchronous=FULL``. Either way
    a claim is on disk before its handler runs."""
    found = tuple(sqlite_version() if version is None else version)[:3]
    fixed = found >= WAL_RESET_FIXED[-1] or any(
        found[:2] == line[:2] and found >= line for line in WAL_RESET_FIXED[:-1])
    shown = ".".join(str(part) for part in found)
    if fixed:
        return JournalChoice("wal", "FULL", "NORMAL", f"SQLite {shown} has the WAL-reset fix")
    return JournalChoice(
        "truncate", "FULL", "FULL",
        f"SQLite {shown} has the WAL-reset bug (fixed in 3.51.3, 3.50.7, 3.44.6): a rollback"
        " journal, every commit flushed",
    )


# One row per key: a claim (token set, result NULL) or a completed result (token NULL), so a
# new key costs one INSERT to claim and one UPDATE to complete. Keyed by its text key alone:
# WITHOUT ROWID keeps it in one b-tree. approvals keep their rowid: it is the creation order
# list_approvals uses.
_KEYS = """CREATE TABLE IF NOT EXISTS keys (
    key TEXT PRIMARY KEY,
    token TEXT,
    fingerprint TEXT,
    host TEXT,
    pid INTEGER,
    start_time INTEGER,
    lease_until REAL,
    result TEXT,
    updated_at REAL NOT NULL
) WITHOUT ROWID"""
_APPROVALS = """CREATE TABLE IF NOT EXISTS approvals (
    approval_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    record TEXT NOT NULL,
    updated_at REAL NOT NULL
)"""
# The audit log (version 3): one row per entry, in order; never purged.
_AUDIT = """CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY,
    hash TEXT NOT NULL,
    entry TEXT NOT NULL
)"""
# Version 1 kept results and claims in two tables; a key in both is completed.
_MIGRATE_FROM_1 = [
    ("INSERT INTO keys (key, fingerprint, result, updated_at)"
    " SELECT key, fingerprint, result, completed_at FROM results"),
    ("INSERT OR IGNORE INTO keys (key, token, fingerprint, host, pid, start_time, lease_until,"
    " updated_at) SELECT key, token, fingerprint, host, pid, start_time, lease_until,"
    " claimed_at FROM claims"),
    "DROP TABLE results",
    "DROP TABLE claims",
]

_CLAIM_COLUMNS = "token, fingerprint, host, pid, start_time, lease_until"
_ENTRY = "SELECT result, fingerprint FROM keys WHERE key = ?"
_INSERT_CLAIM = (
    f"INSERT OR IGNORE INTO keys (key, {_CLAIM_COLUMNS}, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_COMPLETE = "UPDATE keys SET result = ?, token = NULL, updated_at = ? WHERE key = ? AND token = ?"
# The claim was lost (taken over, released): keep the result anyway, unless one is there.
_COMPLETE_LOST = (
    "INSERT INTO keys (key, fingerprint, result, updated_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (key) DO UPDATE SET result = excluded.result, token = NULL,"
    " fingerprint = excluded.fingerprint, updated_at = excluded.updated_at"
    " WHERE keys.result IS NULL"
)
_DROP = "DELETE FROM keys WHERE key = ? AND token = ?"
_ENTRY_COLUMNS = f"key, {_CLAIM_COLUMNS}, result, updated_at"
_ADD_KEY = f"INSERT OR IGNORE INTO keys ({_ENTRY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
_ADD_APPROVAL = (
    "INSERT OR IGNORE INTO approvals (approval_id, state, record, updated_at) VALUES (?, ?, ?, ?)"
)
# A purge window: where the next ``window`` keys end, and whether any of them is expired (a
# read: no lock); then, only if so, one DELETE bounded by the window.
_KEY_WINDOW = (
    "SELECT max(key), total(result IS NOT NULL AND updated_at < ?) FROM"
    " (SELECT key, result, updated_at FROM keys {lower} ORDER BY key LIMIT ?)"
)
_PURGE_KEYS = "DELETE FROM keys WHERE {lower} key <= ? AND result IS NOT NULL AND updated_at < ?"
_HISTORY = "state IN ({})".format(", ".join(f"'{state}'" for state in HISTORY))
_APPROVAL_WINDOW = (
    f"SELECT max(approval_id), total({_HISTORY} AND updated_at < ?) FROM"
    " (SELECT approval_id, state, updated_at FROM approvals {lower} ORDER BY approval_id LIMIT ?)"
)
_PURGE_APPROVALS = (
    f"DELETE FROM approvals WHERE {{lower}} approval_id <= ? AND {_HISTORY} AND updated_at < ?"
)
_ABANDON = "UPDATE keys SET lease_until = 0.0, updated_at = ? WHERE key = ? AND token = ?"


class SQLiteTransaction:
    """The :class:`~agentkit.policy.stores.algorithm.Transaction` of the SQLite store, on one
    connection inside ``BEGIN IMMEDIATE`` (writes) or autocommit (reads)."""

    def __init__(self, conn: apsw.Connection, clock: Callable[[], float]) -> None:
        self._c = conn
        self._clock = clock

    @property
    def connection(self) -> apsw.Connection:
        """The ``apsw.Connection`` inside this transaction: ``execute(sql, params)`` with ``?``
        placeholders, as ``sqlite3``'s (its cursor has ``fetchone``/``fetchall``; the rows a
        statement changed are ``changes()``)."""
        return self._c

    def now(self) -> float:
        return self._clock()

    def lock(self, name: str) -> None:
        pass  # BEGIN IMMEDIATE already holds the database's write lock

    def result(self, key: str) -> tuple[str | None, str] | None:
        row = self._c.execute(_ENTRY, (key,)).fetchone()
        return None if row is None or row[0] is None else (row[1], row[0])

    def claim(self, key: str) -> Claim | None:
        row = self._c.execute(
            f"SELECT {_CLAIM_COLUMNS} FROM keys WHERE key = ? AND result IS NULL", (key,)
        ).fetchone()
        return None if row is None else Claim(*row)

    def insert_claim(self, key: str, claim: Claim) -> bool:
        self._c.execute(_INSERT_CLAIM, (key, *_claim_row(claim), self._clock()))
        return self._c.changes() == 1

    def replace_claim(self, key: str, token: str, claim: Claim) -> bool:
        self._c.execute(
            "UPDATE keys SET token = ?, fingerprint = ?, host = ?, pid = ?, start_time = ?,"
            " lease_until = ?, updated_at = ? WHERE key = ? AND token = ?",
            (*_claim_row(claim), self._clock(), key, token),
        )
        return self._c.changes() == 1

    def delete_claim(self, key: str, token: str | None) -> bool:
        if token is None:
            self._c.execute("DELETE FROM keys WHERE key = ? AND result IS NULL", (key,))
        else:
            self._c.execute(_DROP, (key, token))
        return self._c.changes() == 1

    def complete(self, key: str, token: str, fingerprint: str | None, text: str) -> bool:
        return _complete(self._c, key, token, fingerprint, text, self._clock())

    def approval(self, approval_id: str) -> str | None:
        row = self._c.execute(
            "SELECT record FROM approvals WHERE approval_id = ?", (approval_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    def insert_approval(self, approval_id: str, state: str, text: str) -> None:
        self._c.execute(
            "INSERT INTO approvals (approval_id, state, record, updated_at) VALUES (?, ?, ?, ?)",
            (approval_id, state, text, self._clock()),
        )

    def replace_approval(self, approval_id: str, state: str, text: str) -> None:
        # An UPDATE keeps the row's rowid, which is the creation order list_approvals uses.
        self._c.execute(
            "UPDATE approvals SET state = ?, record = ?, updated_at = ? WHERE approval_id = ?",
            (state, text, self._clock(), approval_id),
        )

    def approvals(self, state: str | None) -> list[str]:
        if state is None:
            rows = self._c.execute("SELECT record FROM approvals ORDER BY rowid").fetchall()
        else:
            rows = self._c.execute(
                "SELECT record FROM approvals WHERE state = ? ORDER BY rowid", (state,)
            ).fetchall()
        return [str(row[0]) for row in rows]

    def audit_tail(self) -> tuple[int, str] | None:
        row = self._c.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def insert_audit(self, seq: int, digest: str, text: str) -> None:
        self._c.execute("INSERT INTO audit (seq, hash, entry) VALUES (?, ?, ?)", (seq, digest, text))


def _complete(
    conn: apsw.Connection, key: str, token: str, fingerprint: str | None, text: str,
    now: float,
) -> bool:
    """Store the result on our claim's row (one UPDATE; each statement is atomic on its
    own), completed at ``now`` (the store's clock); True when the claim was still ours."""
    conn.execute(_COMPLETE, (text, now, key, token))
    if conn.changes() == 1:
        return True
    conn.execute(_COMPLETE_LOST, (key, fingerprint, text, now))
    return False


def _one(conn: apsw.Connection, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    """The row of a statement that always answers one (a PRAGMA, an aggregate)."""
    row: tuple[Any, ...] | None = conn.execute(sql, params).fetchone()
    if row is None:
        raise apsw.SQLError(f"{sql}: no row")
    return row


def _readable_result(conn: apsw.Connection, key: str) -> tuple[str | None, str] | None:
    """The completed result of ``key`` (fingerprint, text), read after the claim's INSERT
    failed (a replay needs no write); None when the key is not completed, or the read fails
    too."""
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        row = conn.execute(_ENTRY, (key,)).fetchone()
    except apsw.Error:
        return None
    return None if row is None or row[0] is None else (row[1], row[0])


def _claim_row(claim: Claim) -> tuple[Any, ...]:
    """A claim's fields in ``_CLAIM_COLUMNS`` order. (``dataclasses.astuple`` deep-copies
    every field: a sixth of the whole time of a new-key ``run_once``.)"""
    return (claim.token, claim.fingerprint, claim.host, claim.pid, claim.start_time,
            claim.lease_until)


def _key_entry(row: tuple[Any, ...]) -> KeyEntry:
    """A ``_ENTRY_COLUMNS`` row as a :class:`KeyEntry`."""
    key, token, fingerprint, host, pid, start_time, lease_until, result, updated_at = row
    claim = None if result is not None else Claim(
        token, fingerprint, host, pid, start_time, lease_until)
    return KeyEntry(key, fingerprint, result, claim, updated_at)


def _key_row(entry: KeyEntry, now: float) -> tuple[Any, ...]:
    """A :class:`KeyEntry` as a ``_ENTRY_COLUMNS`` row (a completed key has no claim fields)."""
    claim = None if entry.result is not None else entry.claim
    if entry.result is None and claim is None:
        raise ValueError(f"key {entry.key!r}: an entry holds a result or a claim")
    fields = _claim_row(claim) if claim is not None else (None, entry.fingerprint, None, None, None, None)
    return (entry.key, *fields, entry.result, now if entry.updated_at is None else entry.updated_at)


def _is_locked(exc: apsw.Error) -> bool:
    """A lock another connection held (``SQLITE_BUSY``, ``SQLITE_LOCKED``): the connection is
    still usable, and the call is ``busy``."""
    if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
        return True
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _identity(path: str) -> tuple[int, int]:
    """The file at ``path`` (device and inode); raises ``OSError`` when there is none."""
    found = os.stat(path)
    return found.st_dev, found.st_ino


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


def read_only_look(path: str, busy_timeout_seconds: float) -> tuple[int, list[str]]:
    """The schema version (``PRAGMA user_version``) and the tables of the SQLite file at
    ``path``, read through a read-only connection that changes nothing in it (the operator's
    commands look before they open a store: see
    :func:`~agentkit.policy.stores.address.existing_sqlite_store`). Every failure is one
    :class:`StoreError` naming the path: it cannot be opened, it is not a usable SQLite
    database, or another connection held it past ``busy_timeout_seconds``."""
    try:
        conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as exc:
        raise StoreError(f"{path}: cannot open the database ({exc})") from None
    try:
        conn.set_busy_timeout(int(busy_timeout_seconds * 1000))
        version = int(_one(conn, "PRAGMA user_version")[0])
        tables = sorted(str(row[0]) for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"))
    except apsw.Error as exc:
        if _is_locked(exc):
            raise StoreError(f"{path}: {exc} (another connection held it for more than"
                             f" {busy_timeout_seconds:g} s)") from None
        raise StoreError(f"{path}: not a usable SQLite database ({exc})") from None
    finally:
        conn.close()
    return version, tables


class SQLiteIdempotencyStore(OperableStore):
    """Durable across restarts, safe between threads and between processes on one machine.

    ``busy_timeout_seconds`` bounds the wait for another writer (then the call is ``busy``);
    ``clock`` (default ``time.time``) times the leases and dates the rows;
    ``retention_seconds`` (default 7 days, None: forever) is how long :meth:`purge` keeps a
    completed key. Not for a network file system: SQLite's locks (and WAL's shared memory)
    need one machine's kernel, and the owner checks need to see the owner's processes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        claim_ttl_seconds: float = 300,
        *,
        busy_timeout_seconds: float = BUSY_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.time,
        retention_seconds: float | None = DEFAULT_RETENTION_SECONDS,
    ) -> None:
        super().__init__(claim_ttl_seconds, retention_seconds)
        self.path = os.fspath(path)
        self.clock = clock
        self.busy_timeout_seconds = float(busy_timeout_seconds)
        if self.path in ("", ":memory:"):
            raise ValueError("a durable store needs a file path; use IdempotencyStore in memory")
        if not self.busy_timeout_seconds >= 0:
            raise ValueError("busy_timeout_seconds must be >= 0")
        _check_path(self.path)
        #: The journal mode and the ``synchronous`` levels of ``apsw``'s SQLite (see
        #: :func:`journal_choice`: WAL on the bundled SQLite, which has the WAL-reset fix; a
        #: rollback journal on one that has the bug).
        self.journal = journal_choice()
        self._pool_lock = threading.Lock()
        # A dedicated pool per durability level: a connection's ``synchronous`` is set once,
        # never toggled per call. True: the claims' level (claims, approvals); False: the
        # results' level (results, freed and abandoned claims, reads). Where both levels are
        # one (a rollback journal: FULL), every step uses the one pool, False.
        self._idle: dict[bool, list[apsw.Connection]] = {False: [], True: []}
        self._inherited: list[apsw.Connection] = []
        self._pid = this_process()[0]
        self._closed = False
        conn = self._connect(full_sync=False, set_journal=False)  # _setup sets it, retrying
        try:
            self._setup(conn)
        except apsw.Error as exc:
            conn.close()
            raise StoreError(f"{self.path}: not a usable SQLite database ({exc})") from exc
        except BaseException:
            conn.close()
            raise
        self._idle[False].append(conn)
        self._file = _identity(self.path)  # the file this store's connections have open

    def _pool(self, full_sync: bool) -> bool:
        """The pool of a step that asks for the claims' level (``full_sync``) or not: True
        only where that level differs from the results' (WAL)."""
        return full_sync and self.journal.claims != self.journal.results

    def _connect(self, *, full_sync: bool, set_journal: bool = True) -> apsw.Connection:
        """A connection at the claims' level (``full_sync``) or the results'. A rollback
        journal is each connection's own setting (WAL is the file's): it is set here, and a
        connection that cannot have it (the file put back in WAL by another process that
        still has it open) is refused."""
        try:
            # apsw: autocommit unless we BEGIN (we issue BEGIN IMMEDIATE / COMMIT ourselves);
            # pooled, used by one thread at a time, maybe not the one that opened it.
            conn = apsw.Connection(self.path)
        except apsw.Error as exc:
            raise StoreError(f"{self.path}: cannot open the database ({exc})") from exc
        try:
            conn.set_busy_timeout(int(self.busy_timeout_seconds * 1000))
            journal = self.journal
            if set_journal and journal.journal_mode != "wal":
                conn.execute("PRAGMA schema_version").fetchone()  # read the header: WAL?
                try:
                    mode = _one(conn, f"PRAGMA journal_mode = {journal.journal_mode}")[0]
                except apsw.Error as exc:
                    if not _is_locked(exc):
                        raise
                    mode = f"wal ({exc})"
                if str(mode).lower() != journal.journal_mode:
                    conn.close()
                    raise StoreError(
                        f"{self.path}: the file was put back in WAL mode by a process that"
                        f" still has it open (an older agentkit?); this store runs"
                        f" journal_mode={journal.journal_mode} ({journal.why}): stop it"
                    )
            conn.execute(f"PRAGMA synchronous = {journal.claims if full_sync else journal.results}")
        except apsw.Error as exc:
            conn.close()
            if _is_locked(exc):
                raise StoreError(f"{self.path}: {self._reason(exc)}") from exc
            raise StoreError(f"{self.path}: not a usable SQLite database ({exc})") from exc
        return conn

    def _reason(self, exc: apsw.Error) -> str:
        if _is_locked(exc):
            return (f"{exc} (another connection held the write lock for more than"
                    f" busy_timeout, {self.busy_timeout_seconds:g} s)")
        return str(exc)

    def _setup(self, conn: apsw.Connection) -> None:
        """The journal of :func:`journal_choice`, and the tables at this version (created,
        or migrated in place); retried because processes opening a new file at once may
        deadlock.

        Switching to WAL (a new file, or one the previous release left in a rollback journal)
        needs an exclusive lock, and SQLite answers "locked" at once, without waiting, when
        two connections would otherwise wait for each other. Leaving WAL (on an affected
        SQLite only) needs every other connection to the file closed: "locked" until then,
        retried for ``busy_timeout``.
        """
        wanted = self.journal.journal_mode
        fresh = os.path.getsize(self.path) == 0  # a new file: nothing to switch
        deadline = time.monotonic() + self.busy_timeout_seconds
        while True:
            try:
                # Before the journal: someone else's file is left as it was. One read
                # transaction, so that a store another process is creating is seen whole or
                # not at all.
                conn.execute("BEGIN")
                try:
                    self._refuse_foreign(conn)
                finally:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                was = str(_one(conn, "PRAGMA journal_mode")[0]).lower()
                try:
                    mode = str(_one(conn, f"PRAGMA journal_mode = {wanted}")[0])
                except apsw.Error as exc:
                    if was == "wal" and wanted != "wal" and _is_locked(exc) \
                            and time.monotonic() > deadline:
                        raise StoreError(
                            f"{self.path}: the file is in WAL mode and another process has it"
                            f" open, so it cannot be switched to journal_mode={wanted}"
                            f" ({self.journal.why}); stop the processes that use it (an older"
                            " agentkit) and open the store again"
                        ) from exc
                    raise
                if was == "wal" and mode.lower() != "wal":
                    logger.info("%s: switched from WAL to journal_mode=%s (%s)",
                                self.path, mode, self.journal.why)
                elif not fresh and was != "wal" and mode.lower() == "wal":
                    logger.info("%s: switched from a rollback journal (journal_mode=%s) to WAL"
                                " (%s)", self.path, was, self.journal.why)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    self._create_or_migrate(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                break
            except apsw.Error as exc:
                if not _is_locked(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        if mode.lower() != wanted:
            logger.warning(
                "%s: journal_mode=%s unavailable (journal_mode=%s); readers will wait",
                self.path, wanted, mode,
            )

    def _refuse_foreign(self, conn: apsw.Connection) -> set[str]:
        """Read only: refuse a newer layout, or a database that is not an agentkit store;
        returns the tables of a file still to be created or migrated (version 0)."""
        version = int(_one(conn, "PRAGMA user_version")[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: the file holds agentkit store schema version {version}, newer"
                f" than this agentkit understands ({SCHEMA_VERSION}); upgrade agentkit, or use"
                " another file"
            )
        if version == SCHEMA_VERSION:
            return set()
        tables = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )}
        if version == 2:  # keys and approvals; the audit log is added
            if not {"keys", "approvals"} <= tables or tables - {"keys", "approvals", "audit"}:
                raise StoreError(f"{self.path}: not an agentkit store (tables {sorted(tables)})")
            return tables
        old = tables & {"results", "claims"}
        if tables and old != {"results", "claims"} or tables - {"results", "claims", "approvals"}:
            raise StoreError(f"{self.path}: not an agentkit store (tables {sorted(tables)})")
        return tables

    def _create_or_migrate(self, conn: apsw.Connection) -> None:
        """Inside the setup's write transaction: refuse a newer layout or someone else's
        database, create the tables of a new file, migrate an older layout."""
        if int(_one(conn, "PRAGMA user_version")[0]) == SCHEMA_VERSION:
            return
        old = self._refuse_foreign(conn) & {"results", "claims"}
        conn.execute(_KEYS)
        conn.execute(_APPROVALS)
        conn.execute(_AUDIT)
        if old:
            for statement in _MIGRATE_FROM_1:
                conn.execute(statement)
            logger.info("%s: migrated the store to schema version %d", self.path, SCHEMA_VERSION)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # ---- connection pool

    def _checkout(self, full_sync: bool = False) -> apsw.Connection:
        with self._pool_lock:
            if self._closed:
                raise StoreError(f"{self.path}: the store is closed")
            if self._pid != this_process()[0]:
                # A forked child must not use (or close) its parent's connections.
                for idle in self._idle.values():
                    self._inherited.extend(idle)
                    idle.clear()
                self._pid = this_process()[0]
            idle = self._idle[self._pool(full_sync)]
            if idle:
                return idle.pop()
        return self._connect(full_sync=self._pool(full_sync))

    def _checkin(self, conn: apsw.Connection, *, healthy: bool, full_sync: bool = False) -> None:
        with self._pool_lock:
            if healthy and not self._closed and self._pid == this_process()[0]:
                self._idle[self._pool(full_sync)].append(conn)
                return
        conn.close()

    def _failed(self, conn: apsw.Connection, exc: apsw.Error, full_sync: bool) -> NoReturn:
        """Give the connection back (or close it) and raise the StoreError for ``exc``."""
        healthy = _is_locked(exc)  # a lock timeout leaves the connection usable
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except apsw.Error:
            healthy = False
        self._checkin(conn, healthy=healthy, full_sync=full_sync)
        raise StoreError(f"{self.path}: {self._reason(exc)}") from exc

    @contextmanager
    def _connection(self, full_sync: bool) -> Iterator[apsw.Connection]:
        """A pooled connection of that durability; every SQLite error is a StoreError."""
        conn = self._checkout(full_sync)
        healthy = True
        try:
            try:
                yield conn
            except apsw.Error as exc:
                healthy = _is_locked(exc)  # a lock timeout leaves the connection usable
                raise StoreError(f"{self.path}: {self._reason(exc)}") from exc
        finally:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except apsw.Error:
                healthy = False  # do not mask the error propagating; never reuse it
            self._checkin(conn, healthy=healthy, full_sync=full_sync)

    def _same_file(self) -> None:
        """Raise :class:`StoreError` unless the file at :attr:`path` is still the one this
        store opened. A deleted file (or folder) stays open in every connection that has it,
        and SQLite goes on committing into it: answers that no new store on the path would
        see, so a write could run again through it. One ``stat``, before every step that
        claims (or writes an approval); not before a claim's completion, whose write has
        run already."""
        try:
            found = _identity(self.path)
        except OSError as exc:
            raise StoreError(
                f"{self.path}: the database file was deleted while the store was open"
                f" ({exc.strerror or exc}); nothing is claimed in it any more: open a new"
                " store on this path"
            ) from exc
        if found != self._file:
            raise StoreError(
                f"{self.path}: the database file was replaced while the store was open;"
                " nothing is claimed in the old one any more: open a new store on this path"
            )

    @contextmanager
    def transaction(self, *, write: bool, full_sync: bool = False) -> Iterator[SQLiteTransaction]:
        """A write is one BEGIN IMMEDIATE transaction (on the file this store opened: see
        :meth:`_same_file`); a read is a single autocommit SELECT."""
        if write:
            self._same_file()
        with self._connection(write and full_sync) as conn:
            if write:
                conn.execute("BEGIN IMMEDIATE")
            yield SQLiteTransaction(conn, self.clock)
            if write:
                conn.execute("COMMIT")

    holds_effects = True

    @contextmanager
    def effect_transaction(self, key: str, mine: Claim) -> Iterator[SQLiteTransaction]:
        """One ``BEGIN IMMEDIATE`` transaction committed at the claims' level (durable), for
        a transactional handler's effect and the key's result (see
        :meth:`~agentkit.policy.stores.algorithm.StoreBase.effect_transaction`): a free
        key's claim is written in it, so a new key is this one commit."""
        with self.transaction(write=True, full_sync=True) as tx:
            check_claim(tx, key, mine)
            yield tx

    # ---- the steps: a new key is one INSERT, its completion one UPDATE

    def claim(
        self, key: str, fingerprint: str | None, ttl: float, *, may_take_over: bool,
        full_sync: bool = False, flush: bool = True,
    ) -> Result | tuple[str, Claim]:
        """One ``INSERT OR IGNORE`` (the primary key makes it atomic): a free key is claimed
        by it, in one statement, with no read before it. A key that has a row is read after
        its INSERT found it: a completed one replays, one claimed already takes the careful
        path (one ``BEGIN IMMEDIATE`` transaction).

        The INSERT of a key that has a row writes nothing (and so flushes nothing), but waits
        for the write lock like any writer. When it cannot write at all (a full disk, a lock
        held past ``busy_timeout``), a completed key is still replayed from a read.

        Every claim commits at the claims' level (``synchronous=FULL``), ``full_sync`` or
        not: a claim a power cut forgot would let its write run again. Except with
        ``flush=False`` (a transactional write's claim, whose effect commits with its
        result): :meth:`_claim_for_effect`."""
        self._same_file()
        if not flush:
            return self._claim_for_effect(key, fingerprint, ttl, may_take_over, full_sync)
        now = self.clock()
        mine = self.new_claim(fingerprint, now, ttl)
        conn = self._checkout(flush)  # (no context manager: this is the hot path)
        try:
            conn.execute(_INSERT_CLAIM, (key, *_claim_row(mine), now))
            if conn.changes() == 1:
                self._checkin(conn, healthy=True, full_sync=flush)
                return (CLAIMED, mine)
            row = conn.execute(_ENTRY, (key,)).fetchone()
        except apsw.Error as exc:
            stored = _readable_result(conn, key)
            if stored is None:
                self._failed(conn, exc, flush)
            self._checkin(conn, healthy=True, full_sync=flush)  # it read: it works
            return self._replay(stored, fingerprint)
        self._checkin(conn, healthy=True, full_sync=flush)
        if row is not None and row[0] is not None:
            return self._replay((row[1], row[0]), fingerprint)
        return self.claim_carefully(key, fingerprint, ttl, may_take_over, full_sync)

    def _claim_for_effect(
        self, key: str, fingerprint: str | None, ttl: float, may_take_over: bool,
        full_sync: bool,
    ) -> Result | tuple[str, Claim]:
        """A transactional write's claim: one read, no write. A free key's claim is not
        committed here but written by :meth:`effect_transaction`, in the commit of the
        effect and the result (``BEGIN IMMEDIATE`` serialises every writer of the file
        anyway, so a claim of its own would hold nothing off that the transaction does not;
        a call that finds the key settled there runs nothing and answers what it holds). A
        completed key replays; one claimed already (a stale claim to take over, a live one)
        takes the careful path. The read is on the effect transaction's pool, whose
        connection then finds its pages as it left them."""
        now = self.clock()
        conn = self._checkout(True)
        try:
            row = conn.execute(_ENTRY, (key,)).fetchone()
        except apsw.Error as exc:
            self._failed(conn, exc, True)
        self._checkin(conn, healthy=True, full_sync=True)
        if row is None:
            return (CLAIMED, self.new_claim(fingerprint, now, ttl))
        if row[0] is not None:
            return self._replay((row[1], row[0]), fingerprint)
        return self.claim_carefully(key, fingerprint, ttl, may_take_over, full_sync)

    def claim_carefully(
        self, key: str, fingerprint: str | None, ttl: float, may_take_over: bool,
        full_sync: bool,
    ) -> Result | tuple[str, Claim]:
        """The careful path, committed at the claims' level whatever ``full_sync`` says: a
        claim taken over is a claim too."""
        return super().claim_carefully(key, fingerprint, ttl, may_take_over, True)

    def complete(self, key: str, mine: Claim, result: Result, full_sync: bool = False) -> None:
        """One UPDATE on the claim's row, at the results' level even for ``full_sync`` (WAL:
        NORMAL; only the claim needs the fsync: a result lost in a power cut leaves the claim
        for the lookup)."""
        text = self.result_text(key, mine, result)
        conn = self._checkout(False)
        try:
            still_mine = _complete(conn, key, mine.token, mine.fingerprint, text, self.clock())
        except apsw.Error as exc:
            self._failed(conn, exc, False)
        self._checkin(conn, healthy=True)
        if not still_mine:
            self.claim_lost(key)

    def drop(self, key: str, mine: Claim) -> None:
        with self._connection(False) as conn:
            conn.execute(_DROP, (key, mine.token))

    def abandon_claim(self, key: str, mine: Claim) -> None:
        let_go(mine.token)
        with self._connection(False) as conn:
            conn.execute(_ABANDON, (self.clock(), key, mine.token))

    # ---- operating the store (agentkit.policy.stores.operations)

    def store_now(self) -> float:
        return self.clock()

    def key_page(self, after: str | None = None, limit: int = 1000) -> list[KeyEntry]:
        lower, args = ("WHERE key > ?", (after,)) if after is not None else ("", ())
        with self._connection(False) as conn:
            rows = conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM keys {lower} ORDER BY key LIMIT ?", (*args, limit)
            ).fetchall()
        return [_key_entry(row) for row in rows]

    def key_entry(self, key: str) -> KeyEntry | None:
        with self._connection(False) as conn:
            row = conn.execute(f"SELECT {_ENTRY_COLUMNS} FROM keys WHERE key = ?", (key,)).fetchone()
        return None if row is None else _key_entry(row)

    def approval_page(self, state: str | None = None) -> list[ApprovalEntry]:
        where, args = ("WHERE state = ?", (state,)) if state is not None else ("", ())
        with self._connection(False) as conn:
            rows: list[tuple[Any, ...]] = conn.execute(
                f"SELECT approval_id, state, record, updated_at FROM approvals {where}"
                " ORDER BY rowid", args,
            ).fetchall()
        return [ApprovalEntry(*row) for row in rows]

    def audit_page(self, after: int = 0, limit: int = 1000) -> list[tuple[int, str]]:
        with self._connection(False) as conn:
            rows: list[tuple[Any, ...]] = conn.execute(
                "SELECT seq, entry FROM audit WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)
            ).fetchall()
        return [(int(row[0]), str(row[1])) for row in rows]

    def add_keys(self, entries: list[KeyEntry]) -> int:
        """One ``BEGIN IMMEDIATE`` transaction, committed at ``synchronous=FULL``: a copied
        claim may be an irreversible write's."""
        now = self.clock()
        rows = [_key_row(entry, now) for entry in entries]
        with self._connection(True) as conn:
            conn.execute("BEGIN IMMEDIATE")
            changes = conn.total_changes()
            conn.executemany(_ADD_KEY, rows)
            added = conn.total_changes() - changes
            conn.execute("COMMIT")
        return added

    def add_approvals(self, entries: list[ApprovalEntry]) -> int:
        now = self.clock()
        rows = [(e.approval_id, e.state, e.record, now if e.updated_at is None else e.updated_at)
                for e in entries]
        with self._connection(True) as conn:
            conn.execute("BEGIN IMMEDIATE")
            changes = conn.total_changes()
            conn.executemany(_ADD_APPROVAL, rows)  # in order: rowids keep the creation order
            added = conn.total_changes() - changes
            conn.execute("COMMIT")
        return added

    def purge_before(self, before: float) -> tuple[int, int]:
        """Window by window of the primary key; a window with nothing to delete takes no
        lock, one with something takes the write lock for one bounded DELETE, and the purge
        then pauses :data:`PURGE_PAUSE_SECONDS` for the writers that waited."""
        return purge_in_windows(
            before,
            keys=lambda after, cut, n: self._purge_window(_KEY_WINDOW, _PURGE_KEYS, "key", after, cut, n),
            approvals=lambda after, cut, n: self._purge_window(
                _APPROVAL_WINDOW, _PURGE_APPROVALS, "approval_id", after, cut, n),
            pending=self.approval_page(PENDING),
            delete_pending=self._delete_pending,
            pause=PURGE_PAUSE_SECONDS,
            tidy=self._checkpoint if self.journal.journal_mode == "wal" else None,
        )

    def _checkpoint(self) -> None:
        """Copy the log into the database (a passive checkpoint: it waits for nobody, and no
        writer waits for it), so that while a purge runs, the log (its own and the claims')
        is checkpointed by the purge, never by the commit of a claim that happens to cross
        SQLite's 1,000-page threshold (a checkpoint ends in an fsync). WAL only: a rollback
        journal has no log to copy."""
        with self._connection(False) as conn:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _purge_window(
        self, window_sql: str, delete_sql: str, column: str, after: str | None, before: float,
        window: int,
    ) -> tuple[str | None, int, None]:  # (its log is checkpointed after each step instead)
        lower, args = (f"WHERE {column} > ?", (after,)) if after is not None else ("", ())
        with self._connection(False) as conn:
            end, expired = _one(conn, window_sql.format(lower=lower), (before, *args, window))
            if end is None or not expired:
                return end, 0, None
            bound = f"{column} > ? AND" if after is not None else ""
            conn.execute(delete_sql.format(lower=bound), (*args, end, before))
            deleted = conn.changes()
        return end, deleted, None

    def _delete_pending(self, approval_id: str, record: str) -> bool:
        with self._connection(False) as conn:
            conn.execute(
                "DELETE FROM approvals WHERE approval_id = ? AND state = ? AND record = ?",
                (approval_id, PENDING, record),
            )
            return conn.changes() == 1

    # ---- staleness

    def owner_gone(self, claim: Claim) -> bool:
        return owner_gone(claim.host, claim.pid, claim.start_time, local_host=self.host)

    def close(self) -> None:
        """Close pooled connections; ones in use close when their transaction ends."""
        with self._pool_lock:
            if self._closed:
                return
            self._closed = True
            idle = [conn for pool in self._idle.values() for conn in pool]
            for pool in self._idle.values():
                pool.clear()
        for conn in idle:
            conn.close()

    def __repr__(self) -> str:
        ttl = self.claim_ttl_seconds
        return f"SQLiteIdempotencyStore({self.path!r}, claim_ttl_seconds={ttl:g})"
