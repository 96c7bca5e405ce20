"""The PostgreSQL store: the same algorithm, for agent workers on several machines.

Install with the ``postgres`` extra (``pip install 'agentkit[postgres]'``: psycopg 3 and its
connection pool). Nothing here is imported by ``import agentkit``: the class is loaded the
first time ``agentkit.PostgresIdempotencyStore`` is used.

One clock
    Workers on several hosts do not share a clock, so every lease deadline is decided by
    the database: a claim's ``lease_until`` is the server's ``clock_timestamp()`` plus the
    lease, and it is compared with the server's clock again when someone asks whether it is
    stale (:meth:`PostgresTransaction.now`).

Owners on other hosts
    A claim still records its owner (host, pid, start time). On the owner's own host a dead
    pid makes the claim stale at once, as with SQLite; from any other host a pid means
    nothing, so a foreign claim is judged by its lease alone.

Atomic sections
    One row per key (``agentkit_keys``): a claim while ``result`` is NULL, a completed key
    once it is set. A new key's claim is one statement, an ``INSERT ... ON CONFLICT DO
    NOTHING`` (atomic on the primary key) that also reads the row already there, and its
    completion one ``UPDATE ... WHERE key = %s AND token = %s``. A key claimed already takes
    the careful path: one transaction that first takes a transaction-scoped advisory lock on
    the key (``pg_advisory_xact_lock``), so its check-then-write is serialised across
    connections and hosts, while different keys never wait for each other; a takeover
    compares-and-swaps on the claim's token.

Durability
    A claim lost in a server crash could let a worker on another host run a write that is
    still running, so claims (and approvals) go through sessions with ``synchronous_commit =
    on``: the commit returns once it is flushed to the write-ahead log. Results, freed and
    abandoned claims go through sessions with ``synchronous_commit = off``, even for
    ``full_sync`` calls: a server crash may forget them, and then the durable claim comes
    back and the status lookup settles it, so nothing runs twice. Each level is its own
    connection pool, whose sessions are set once when they connect.

Lock bounds
    Every session runs with ``lock_timeout = busy_timeout_seconds`` (10 s) and
    ``statement_timeout`` four times that: a key's advisory lock, a row or a ``LOCK TABLE``
    held by another session (a stuck worker, an operator) makes the step fail with
    :class:`~agentkit.policy.stores.algorithm.StoreError` within that bound, and a claim that
    could not be taken is ``busy``, nothing ran.

Schema and connections
    The tables (``agentkit_keys``, ``agentkit_approvals``) are created on first use inside
    one transaction guarded by an advisory lock, so workers that start at once create them
    once; the version is recorded in ``agentkit_schema``. Version 1's tables
    (``agentkit_results`` and ``agentkit_claims``) are migrated in place; a database whose
    version is newer than this code knows is refused with a clear error. VACUUM never
    truncates the tables (``vacuum_truncate = off``, set once per table): after a purge
    empties a table's end, truncating it would hold every claim behind an ACCESS EXCLUSIVE
    lock. The sync steps'
    connections come from ``psycopg_pool`` pools; the async twins' from each event loop's
    own (see "Event loops"). One the server has left (a restart, ``pg_terminate_backend``)
    is recognised before use, without a round trip, by its socket having something to read,
    and replaced: a restart costs the next call only a reconnect. A server that cannot be
    reached makes ``run_once`` answer ``busy`` (logged with the address, never the
    password); a connection that dies during a call makes that call ``busy`` before the
    claim, ``outcome_unknown`` after the operation ran.

Event loops
    psycopg's async connections belong to the event loop that made them, so every live loop
    that awaits the store (``acall``) has its own (per durability level, at most
    ``pool_size`` open at once, idle ones kept for the next step), and they are closed with
    the loop: the first step on a loop starts a small task that ``asyncio.run`` (or
    ``asyncio.Runner``, Python 3.10 to 3.13) cancels with the loop's other leftover tasks as
    it ends the loop, and that task closes the loop's connections right then. They run no
    task of their own (psycopg_pool's async pool does, and a worker of it cancelled while it
    connects swallows the cancellation, so ``asyncio.run`` never returned): a program that
    runs one ``asyncio.run`` per request always returns, holds no async connection between
    requests, and leaves no task pending. The server connections of one store are at most
    ``pool_size`` per durability level for the sync steps and as many per live loop. A
    store step still asked for while the loop ends (a call's cleanup, as its task is
    cancelled) runs on a thread, through the sync pools. ``await store.aclose()`` closes
    the store from async code (``close()`` from sync code); a loop ended some other way
    (``loop.close()`` without cancelling its tasks) should await it first.

Purging
    :meth:`PostgresIdempotencyStore.purge` deletes window by window of the primary key, each
    DELETE committed durably (see :meth:`~PostgresIdempotencyStore.purge_before`). A claim
    that commits while a step's commit is flushing waits for that flush: what a claim can
    wait behind the purge is the log of one step. So each step measures the write-ahead log
    it wrote (``pg_current_wal_insert_lsn()`` before its read, after its DELETE), and the
    purge is paced by it (:data:`PURGE_LOG_PACE`): the window shrinks so that a step writes
    at most 256 KiB, and the purge rests until its log stays under 8 MiB a second, so the
    server's disk flushes the claims' records beside it. A DELETE logs a whole image of
    every page it is first to change after a checkpoint (once per page, in whatever order
    its keys go): about 350 bytes per key in all, so 1M keys take a minute or more. A server
    that refuses the function (Aurora, a standby) is purged by time alone.

Round trips
    A new key costs two round trips (the claim, the completion) and one WAL flush wait (the
    claim's), against two and one for a bare INSERT and COMMIT; a replay costs one. The
    careful path and the approval records run in pipeline mode: statements whose answer the
    algorithm does not need (BEGIN, the lock, the COMMIT) travel with the next one that is
    answered, and no Sync is sent empty.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from agentkit.boundary.errors import ErrorCode, failure
from agentkit.policy.stores.address import scrub
from agentkit.policy.stores.algorithm import (
    CLAIMED,
    Claim,
    Result,
    StoreError,
    check_claim,
    let_go,
    loads,
    record_text,
)
from agentkit.policy.stores.operations import (
    DEFAULT_RETENTION_SECONDS,
    HISTORY,
    PENDING,
    ApprovalEntry,
    KeyEntry,
    LogPace,
    OperableStore,
    purge_in_windows,
)
from agentkit.policy.stores.owner import owner_gone, this_process
from agentkit.policy.stores.postgres_loop_connections import (
    AsyncConnections,
    LoopEnding,
    LoopPools,
    looks_dead,
    on_a_thread_if_the_loop_ends,
)
from agentkit.policy.stores.postgres_outages import (
    outage_begins,
    outage_ends,
    outages,
    pool_name,
    retired,
    shown_address,
    why_unreachable,
)

if TYPE_CHECKING:
    import asyncio

    import psycopg
    import psycopg_pool

__all__ = ["BUSY_TIMEOUT_SECONDS", "SCHEMA_VERSION", "PostgresIdempotencyStore",
           "PostgresTransaction"]

_T = TypeVar("_T")

logger = logging.getLogger("agentkit.policy.stores")

#: The version of the tables below; a database with a lower one is migrated in place, one
#: with a higher one is refused. (3: the audit log, ``agentkit_audit``.)
SCHEMA_VERSION = 3

#: How long a statement waits for a lock held by another session (``lock_timeout``) before
#: the call gives up as ``busy``; no statement runs longer than four times this
#: (``statement_timeout``).
BUSY_TIMEOUT_SECONDS = 10.0

#: How often a call waiting for its first connection looks whether the server refused it.
_REFUSAL_POLL_SECONDS = 0.05
#: libpq's words for a server that answered and will not let us in: no wait can change that.
_REFUSALS = ("password authentication failed", "no password supplied", "authentication failed",
             "no pg_hba.conf entry", "does not exist")


def refused(reason: str) -> bool:
    """Whether a failed connection attempt's reason says the server refused us (a wrong
    password, an unknown role or database), rather than that it could not be reached."""
    return any(words in reason for words in _REFUSALS)


# Any fixed 64-bit number: the advisory lock that serialises schema creation.
_SCHEMA_LOCK = 0x6167_656E_746B_6974  # "agentkit"

# The audit log (version 3; agentkit.policy.stores.audit): one row per entry, in order,
# appended under the advisory lock of AUDIT_LOCK inside the transaction it records.
_AUDIT = """CREATE TABLE IF NOT EXISTS agentkit_audit (
    seq bigint PRIMARY KEY,
    hash text NOT NULL,
    entry text NOT NULL
)"""
# One row per key: a claim (token set, result NULL) or a completed result (token NULL).
_KEYS = """CREATE TABLE IF NOT EXISTS agentkit_keys (
    key text PRIMARY KEY,
    token text,
    fingerprint text,
    host text,
    pid integer,
    start_time bigint,
    lease_until double precision,
    result text,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
)"""
_SCHEMA = [
    _KEYS,
    """CREATE TABLE IF NOT EXISTS agentkit_approvals (
        seq bigserial NOT NULL,
        approval_id text PRIMARY KEY,
        state text NOT NULL,
        record text NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )""",
    "CREATE INDEX IF NOT EXISTS agentkit_approvals_by_state ON agentkit_approvals (state, seq)",
    _AUDIT,
]
# Version 1 kept results and claims in two tables; a key in both is completed.
_MIGRATE_FROM_1 = [
    _KEYS,
    (
        "INSERT INTO agentkit_keys (key, fingerprint, result, updated_at)"
        " SELECT key, fingerprint, result, completed_at FROM agentkit_results"
    ),
    (
        "INSERT INTO agentkit_keys (key, token, fingerprint, host, pid, start_time, lease_until,"
        " updated_at) SELECT key, token, fingerprint, host, pid, start_time, lease_until,"
        " claimed_at FROM agentkit_claims ON CONFLICT (key) DO NOTHING"
    ),
    "DROP TABLE agentkit_results, agentkit_claims",
]

# A purge empties the end of a table; VACUUM would then truncate it, under an ACCESS
# EXCLUSIVE lock that holds every claim waiting (tens of ms) long after the purge ended. The
# space is the next keys' anyway: no table of the store is truncated (PostgreSQL >= 12;
# setting it takes a SHARE UPDATE EXCLUSIVE lock, which no claim waits for, once per table).
_UNTRUNCATED = (
    "SELECT c.relname FROM pg_class AS c"
    " WHERE c.relname IN ('agentkit_keys', 'agentkit_approvals')"
    " AND c.relnamespace = (SELECT n.oid FROM pg_namespace AS n WHERE n.nspname = current_schema())"
    " AND NOT coalesce(c.reloptions && ARRAY['vacuum_truncate=false', 'vacuum_truncate=off'], false)"
    " AND current_setting('server_version_num')::int >= 120000"
    " ORDER BY c.relname"
)


# Whether the search path holds an agentkit store, and what the first schema holds else.
_AGENTKIT_HERE = (
    "SELECT to_regclass('agentkit_schema') IS NOT NULL, current_schema(),"
    " coalesce((SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class AS c"
    " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
    " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f')),"
    " ARRAY[]::text[])"
)
# A store's identity: the server (when its postmaster started, to the microsecond: any
# role may read it), the database, and the schema that holds its keys.
_IDENTITY = (
    "SELECT pg_postmaster_start_time()::text, current_database(),"
    " (SELECT n.nspname::text FROM pg_class AS c JOIN pg_namespace AS n"
    " ON n.oid = c.relnamespace WHERE c.oid = to_regclass('agentkit_keys'))"
)


def _untruncated(conn: psycopg.Connection[Any]) -> list[str]:
    """The store's tables that VACUUM may still truncate (none on PostgreSQL < 12)."""
    return [row[0] for row in conn.execute(_UNTRUNCATED).fetchall()]


_CLAIM_COLUMNS = "token, fingerprint, host, pid, start_time, lease_until"
_NOW = "extract(epoch FROM clock_timestamp())::float8"

# The fast claim, one statement and one round trip: insert the claim unless the key has a
# row, and read the row that was there (the SELECT sees the snapshot before the INSERT).
# Its lease is the database's clock plus the ttl.
_CLAIM = (
    "WITH mine AS ("
    f"INSERT INTO agentkit_keys (key, {_CLAIM_COLUMNS})"
    f" VALUES (%s, %s, %s, %s, %s, %s, {_NOW} + %s::float8)"
    " ON CONFLICT (key) DO NOTHING RETURNING lease_until)"
    " SELECT (SELECT lease_until FROM mine), k.result, k.fingerprint"
    " FROM (SELECT 1) AS one LEFT JOIN agentkit_keys AS k ON k.key = %s"
)
_ENTRY = (
    f"SELECT {_NOW}, k.result, k.fingerprint, {', '.join('k.' + c for c in _CLAIM_COLUMNS.split(', '))}"
    " FROM (SELECT 1) AS one LEFT JOIN agentkit_keys AS k ON k.key = %s"
)
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
_INSERT_CLAIM = (
    f"INSERT INTO agentkit_keys (key, {_CLAIM_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (key) DO NOTHING"
)
_REPLACE_CLAIM = (
    "UPDATE agentkit_keys SET token = %s, fingerprint = %s, host = %s, pid = %s,"
    " start_time = %s, lease_until = %s, updated_at = clock_timestamp()"
    " WHERE key = %s AND token = %s"
)
_COMPLETE = (
    "UPDATE agentkit_keys SET result = %s, token = NULL, updated_at = clock_timestamp()"
    " WHERE key = %s AND token = %s"
)
# The claim was lost (taken over, released): keep the result anyway, unless one is there.
_COMPLETE_LOST = (
    "INSERT INTO agentkit_keys (key, fingerprint, result) VALUES (%s, %s, %s)"
    " ON CONFLICT (key) DO UPDATE SET result = excluded.result, token = NULL,"
    " fingerprint = excluded.fingerprint, updated_at = clock_timestamp()"
    " WHERE agentkit_keys.result IS NULL"
)
_DROP = "DELETE FROM agentkit_keys WHERE key = %s AND token = %s"
_ABANDON = (
    "UPDATE agentkit_keys SET lease_until = 0, updated_at = clock_timestamp()"
    " WHERE key = %s AND token = %s"
)
_APPROVAL = "SELECT record FROM agentkit_approvals WHERE approval_id = %s"
_INSERT_APPROVAL = "INSERT INTO agentkit_approvals (approval_id, state, record) VALUES (%s, %s, %s)"
_REPLACE_APPROVAL = (
    "UPDATE agentkit_approvals SET state = %s, record = %s, updated_at = clock_timestamp()"
    " WHERE approval_id = %s"
)
_APPROVALS = "SELECT record FROM agentkit_approvals ORDER BY seq"
_APPROVALS_IN = "SELECT record FROM agentkit_approvals WHERE state = %s ORDER BY seq"

# Operating the store (agentkit.policy.stores.operations).
_ENTRY_COLUMNS = (
    f"key, {_CLAIM_COLUMNS}, result, extract(epoch FROM updated_at)::float8"
)
_ADD_KEYS = (
    f"INSERT INTO agentkit_keys (key, {_CLAIM_COLUMNS}, result, updated_at)"
    " SELECT k, t, f, h, p, s, l, r, coalesce(to_timestamp(u), clock_timestamp())"
    " FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::integer[], %s::bigint[],"
    " %s::float8[], %s::text[], %s::float8[]) AS x(k, t, f, h, p, s, l, r, u)"
    " ON CONFLICT (key) DO NOTHING"
)
_ADD_APPROVALS = (
    "INSERT INTO agentkit_approvals (approval_id, state, record, updated_at)"
    " SELECT i, s, r, coalesce(to_timestamp(u), clock_timestamp())"
    " FROM unnest(%s::text[], %s::text[], %s::text[], %s::float8[]) WITH ORDINALITY"
    " AS x(i, s, r, u, n) ORDER BY n"  # in order: seq keeps the creation order
    " ON CONFLICT (approval_id) DO NOTHING"
)
# A purge window: where the next ``window`` rows end and whether any is expired (a read);
# then, only if so, one DELETE bounded by the window, which locks only the rows it deletes.
_KEY_WINDOW = (
    "SELECT max(key), count(*) FILTER (WHERE result IS NOT NULL AND updated_at < to_timestamp(%s)){log}"
    " FROM (SELECT key, result, updated_at FROM agentkit_keys {lower} ORDER BY key LIMIT %s) AS w"
)
_PURGE_KEYS = (
    "DELETE FROM agentkit_keys WHERE {lower} key <= %s AND result IS NOT NULL"
    " AND updated_at < to_timestamp(%s)"
)
_HISTORY = "state IN ({})".format(", ".join(f"'{state}'" for state in HISTORY))
_APPROVAL_WINDOW = (
    f"SELECT max(approval_id), count(*) FILTER (WHERE {_HISTORY}"
    " AND updated_at < to_timestamp(%s)){log} FROM (SELECT approval_id, state, updated_at"
    " FROM agentkit_approvals {lower} ORDER BY approval_id LIMIT %s) AS w"
)
_PURGE_APPROVALS = (
    f"DELETE FROM agentkit_approvals WHERE {{lower}} approval_id <= %s AND {_HISTORY}"
    " AND updated_at < to_timestamp(%s)"
)
# Where the write-ahead log ends (read with a window, then after its DELETE): the log a step
# wrote. (A server that refuses it, such as Aurora, is purged without a log pace.)
_LOG_AT = ", pg_current_wal_insert_lsn()::text"
_LOG_SINCE = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn)::bigint"

#: How much write-ahead log the purge may write (see "Purging" above): at most 256 KiB a
#: step (a claim committing meanwhile waits for at most that flush), at most 8 MiB a second
#: (the disk's time is mostly the workers').
PURGE_LOG_PACE = LogPace(step_bytes=256 * 1024, bytes_per_second=8 * 1024 * 1024)


def _claim_row(claim: Claim) -> tuple[Any, ...]:
    return (claim.token, claim.fingerprint, claim.host, claim.pid, claim.start_time,
            claim.lease_until)


class PostgresTransaction:
    """The :class:`~agentkit.policy.stores.algorithm.Transaction` of the PostgreSQL store, on
    one pooled connection inside one transaction, in pipeline mode (the careful paths).

    Statements whose answer the algorithm does not need (the lock, a queued write) are only
    queued; the next statement that must be answered sends them all in one round trip, and
    the COMMIT travels with the pipeline's closing sync. The server still runs them in
    order, so a read queued after the lock runs once the lock is held.
    """

    def __init__(self, conn: psycopg.Connection[Any], pipe: psycopg.Pipeline | None) -> None:
        self._c = conn
        self._pipe = pipe  # None: each statement sent and answered at once
        self._row: tuple[str, tuple[Any, ...]] | None = None  # (key, _ENTRY row)
        self.claimed = False  # took a claim: its commit must wait for the WAL flush

    def _answered(self, query: str, params: tuple[Any, ...] = ()) -> psycopg.Cursor[Any]:
        cur = self._c.execute(query, params)
        if self._pipe is not None:
            self._pipe.sync()
        return cur

    def _entry(self, key: str) -> tuple[Any, ...]:
        if self._row is None or self._row[0] != key:
            row = self._answered(_ENTRY, (key,)).fetchone()
            assert row is not None
            self._row = (key, row)
        return self._row[1]

    @property
    def connection(self) -> psycopg.Connection[Any]:
        """The ``psycopg`` connection inside this transaction (``%s`` placeholders)."""
        return self._c

    def now(self) -> float:
        if self._row is None:
            row = self._answered(f"SELECT {_NOW}").fetchone()
            assert row is not None
            return float(row[0])
        return float(self._row[1][0])

    def lock(self, name: str) -> None:
        self._c.execute(_LOCK, (name,))

    def result(self, key: str) -> tuple[str | None, str] | None:
        row = self._entry(key)
        return None if row[1] is None else (row[2], row[1])

    def claim(self, key: str) -> Claim | None:
        row = self._entry(key)
        return None if row[1] is not None or row[3] is None else Claim(*row[3:])

    def insert_claim(self, key: str, claim: Claim) -> bool:
        cur = self._answered(_INSERT_CLAIM, (key, *_claim_row(claim)))
        self.claimed = self.claimed or cur.rowcount == 1
        return cur.rowcount == 1

    def replace_claim(self, key: str, token: str, claim: Claim) -> bool:
        cur = self._answered(_REPLACE_CLAIM, (*_claim_row(claim), key, token))
        if cur.rowcount == 1 and claim.lease_until > 0:  # a takeover, not an abandon
            self.claimed = True
        return cur.rowcount == 1

    def delete_claim(self, key: str, token: str | None) -> bool:
        if token is None:
            cur = self._answered(
                "DELETE FROM agentkit_keys WHERE key = %s AND result IS NULL", (key,)
            )
        else:
            cur = self._answered(_DROP, (key, token))
        return cur.rowcount == 1

    def complete(self, key: str, token: str, fingerprint: str | None, text: str) -> bool:
        if self._answered(_COMPLETE, (text, key, token)).rowcount == 1:
            return True
        self._c.execute(_COMPLETE_LOST, (key, fingerprint, text))
        return False

    def approval(self, approval_id: str) -> str | None:
        row = self._answered(_APPROVAL, (approval_id,)).fetchone()
        return None if row is None else str(row[0])

    def insert_approval(self, approval_id: str, state: str, text: str) -> None:
        self._c.execute(_INSERT_APPROVAL, (approval_id, state, text))

    def replace_approval(self, approval_id: str, state: str, text: str) -> None:
        self._c.execute(_REPLACE_APPROVAL, (state, text, approval_id))

    def approvals(self, state: str | None) -> list[str]:
        if state is None:
            rows = self._answered(_APPROVALS).fetchall()
        else:
            rows = self._answered(_APPROVALS_IN, (state,)).fetchall()
        return [str(row[0]) for row in rows]

    def audit_tail(self) -> tuple[int, str] | None:
        row = self._answered(
            "SELECT seq, hash FROM agentkit_audit ORDER BY seq DESC LIMIT 1").fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def insert_audit(self, seq: int, digest: str, text: str) -> None:
        self._c.execute("INSERT INTO agentkit_audit (seq, hash, entry) VALUES (%s, %s, %s)",
                        (seq, digest, text))


_SESSION = (
    "SELECT set_config('synchronous_commit', %s, false), set_config('lock_timeout', %s, false),"
    " set_config('statement_timeout', %s, false)"
)


def _session(*, durable: bool, busy_timeout: float) -> tuple[str, str, str]:
    """A pooled session's settings: its durability level and its lock bounds (one statement,
    once per connection; not startup ``options``, which connection poolers such as
    PgBouncer refuse)."""
    lock_ms = max(1, round(busy_timeout * 1000))
    return ("on" if durable else "off", f"{lock_ms}ms", f"{4 * lock_ms}ms")


class PostgresIdempotencyStore(OperableStore):
    """Durable and shared by the workers of several hosts (docs/design.md#stores); the
    database's clock decides every lease.

    ``dsn`` is a libpq connection string or URI; it is kept private (it may hold a
    password), and :attr:`address` is what logs and ``repr`` show. ``pool_size`` bounds the
    connections of each pool this store opens; ``connect_timeout_seconds`` bounds the wait
    for one, and ``busy_timeout_seconds`` the wait for a lock held by another session (then
    the call is ``busy``, nothing ran); ``retention_seconds`` (default 7 days, None: forever)
    is how long :meth:`purge` keeps a completed key, by the database's clock. Nothing
    connects until the first call, so a runner can be made while the server is still down. The steps have async twins (``aclaim``,
    ``acomplete``, …) on psycopg's async connection pool.

    ``create_tables=False`` is the operator's mode (``agentkit keys``, ``agentkit
    approvals``, through :func:`~agentkit.policy.stores.address.open_existing_store`): the
    database must hold agentkit's tables already (``agentkit_schema`` in the search path);
    a database or schema without them is refused on first use with :class:`StoreError`
    naming what it holds, and nothing is created there (a store of release 1 is still
    migrated in place).
    """

    read_before_claim = False  # the claiming statement reads the row anyway

    def __init__(
        self,
        dsn: str,
        claim_ttl_seconds: float = 300,
        *,
        pool_size: int = 4,
        connect_timeout_seconds: float = 5.0,
        busy_timeout_seconds: float = BUSY_TIMEOUT_SECONDS,
        retention_seconds: float | None = DEFAULT_RETENTION_SECONDS,
        create_tables: bool = True,
    ) -> None:
        super().__init__(claim_ttl_seconds, retention_seconds)
        try:
            import psycopg  # noqa: F401 - checked here for a clear message
            import psycopg_pool  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "PostgresIdempotencyStore needs psycopg 3 and psycopg-pool:"
                " pip install 'agentkit[postgres]'"
            ) from exc
        if not isinstance(dsn, str):
            raise TypeError("dsn must be a str")
        if pool_size < 1:
            raise ValueError("pool_size must be >= 1")
        busy = float(busy_timeout_seconds)
        if not busy > 0:
            raise ValueError("busy_timeout_seconds must be > 0")
        self._dsn = dsn
        self.address = shown_address(dsn)
        self.create_tables = bool(create_tables)
        self.connect_timeout_seconds = float(connect_timeout_seconds)
        self.busy_timeout_seconds = busy
        self.pool_size = pool_size
        self._schema_lock = threading.Lock()
        self._schema_ready = False
        # One pool per durability level (the session's synchronous_commit): True for claims,
        # full_sync writes and approvals, False for results, freed and abandoned claims.
        self._pools: dict[bool, psycopg_pool.ConnectionPool[Any]] = {}
        self._pool_pid = 0
        self._inherited: list[psycopg_pool.ConnectionPool[Any]] = []
        # The async pools of each live event loop (psycopg's async connections belong to
        # one loop), closed with their loop (see "Event loops" above).
        self._apools: dict[asyncio.AbstractEventLoop, LoopPools] = {}
        self._closed = False

    # ---- connections

    def _kwargs(self) -> dict[str, Any]:
        return {"autocommit": True, "connect_timeout": max(1, round(self.connect_timeout_seconds))}

    def _settings(self, durable: bool) -> tuple[str, str, str]:
        return _session(durable=durable, busy_timeout=self.busy_timeout_seconds)

    def _new_pool(self, durable: bool) -> psycopg_pool.ConnectionPool[Any]:
        from psycopg_pool import ConnectionPool

        settings = self._settings(durable)

        def configure(conn: psycopg.Connection[Any]) -> None:
            conn.execute(_SESSION, settings)

        pool: psycopg_pool.ConnectionPool[Any] = ConnectionPool(
            self._dsn,
            min_size=1,
            max_size=self.pool_size,
            open=False,
            kwargs=self._kwargs(),
            configure=configure,
            timeout=self.connect_timeout_seconds,
            # No background retries with growing back-off: a failed connect gives up at
            # once, and the next call that needs a connection tries afresh, so a server
            # that is back serves the very next call.
            reconnect_timeout=0,
            name=pool_name(self.address, "durable" if durable else "relaxed"),
        )
        pool.open(wait=False)
        return pool

    def _reason(self, exc: BaseException) -> str:
        text = str(exc).strip().splitlines()
        reason = f"{type(exc).__name__}: {scrub(text[0], self._dsn) if text else 'no detail'}"
        state = getattr(exc, "sqlstate", None)
        if state == "55P03":  # lock_timeout
            reason += (f" (a lock held by another session for more than busy_timeout,"
                       f" {self.busy_timeout_seconds:g} s)")
        elif state == "57014":  # statement_timeout (or a cancel)
            reason += f" (statement_timeout is {4 * self.busy_timeout_seconds:g} s)"
        return reason

    def _current_pool(self, durable: bool) -> psycopg_pool.ConnectionPool[Any]:
        with self._schema_lock:
            if self._closed:
                raise StoreError(f"{self.address}: the store is closed")
            if self._pool_pid != this_process()[0]:
                # A forked child must not use, nor close, its parent's connections
                # (closing would end the parent's sessions): keep them untouched.
                self._inherited.extend(self._pools.values())
                self._pools, self._pool_pid = {}, this_process()[0]
            pool = self._pools.get(durable)
            if pool is None:
                pool = self._pools[durable] = self._new_pool(durable)
            return pool

    @contextmanager
    def _connection(self, durable: bool = True) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection that is not known dead, with the schema in place; every
        psycopg error is a StoreError.

        An idle connection has nothing to read unless the server has left: a restart or
        ``pg_terminate_backend`` sends a last message and closes the socket. Such a
        connection is dropped (the pool reconnects) before anything is sent on it, so the
        first call after a restart costs a reconnect and no error.
        """
        import psycopg

        pool = self._current_pool(durable)
        for _ in range(self.pool_size + 1):
            conn = self._getconn(pool)
            if looks_dead(conn):
                retired.add(conn)
                conn.close()
                pool.putconn(conn)  # closed: the pool discards it and makes another
                continue
            try:
                self._ensure_schema(conn)
            except psycopg.Error as exc:
                pool.putconn(conn)
                raise StoreError(f"{self.address}: {self._reason(exc)}") from exc
            except BaseException:
                pool.putconn(conn)
                raise
            break
        else:
            raise StoreError(f"{self.address}: every connection failed (server restarting?)")
        if outages:
            outage_ends(self.address)
        try:
            yield conn
        except psycopg.Error as exc:
            if conn.broken:  # its call fails with the reason; the pool need not warn again
                retired.add(conn)
            raise StoreError(f"{self.address}: {self._reason(exc)}") from exc
        finally:
            pool.putconn(conn)

    def _getconn(self, pool: psycopg_pool.ConnectionPool[Any]) -> psycopg.Connection[Any]:
        """A connection from ``pool`` within the connect bound; given up at once when the
        server answered and refused us (a wrong password, an unknown role or database, no
        pg_hba.conf entry): waiting cannot help, and "no connection within 5 s" would be
        untrue. The pool is asked in short slices, between which the reason of its last
        failed attempt (kept by PoolNoise, without the password) is read."""
        import time

        import psycopg_pool

        deadline = time.monotonic() + self.connect_timeout_seconds
        while True:
            left = deadline - time.monotonic()
            try:
                conn: psycopg.Connection[Any] = pool.getconn(
                    timeout=max(0.001, min(left, _REFUSAL_POLL_SECONDS)))
                return conn
            except psycopg_pool.PoolTimeout as exc:
                reason = why_unreachable(self.address, self._dsn)
                if refused(reason):
                    raise StoreError(f"{self.address}: the server answered and refused the"
                                     f" login ({reason})") from exc
                if left <= _REFUSAL_POLL_SECONDS:
                    raise self._unreachable() from exc

    def _unreachable(self) -> StoreError:
        """No connection within the bound: the outage is logged once (the calls stay busy)."""
        waited = self.connect_timeout_seconds
        outage_begins(self.address, waited, self._dsn)
        return StoreError(f"{self.address}: no connection within {waited:g} s"
                          f" ({why_unreachable(self.address, self._dsn)})")

    def _ensure_schema(self, conn: psycopg.Connection[Any]) -> None:
        """Create the tables once, or migrate older ones, under an advisory lock; refuse a
        newer schema."""
        if self._schema_ready:
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            if not self.create_tables:
                self._refuse_unless_agentkit(conn)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS agentkit_schema ("
                " version integer NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            )
            row = conn.execute("SELECT max(version) FROM agentkit_schema").fetchone()
            found = None if row is None else row[0]
            if found is not None and found > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.address}: the database holds agentkit store schema version"
                    f" {found}, newer than this agentkit understands ({SCHEMA_VERSION});"
                    " upgrade agentkit, or use another database"
                )
            if found is None or found < SCHEMA_VERSION:
                # (from version 2: only the audit log is new; _SCHEMA's tables exist already)
                for statement in _MIGRATE_FROM_1 if found == 1 else _SCHEMA:
                    conn.execute(statement)
                if found == 1:
                    for statement in _SCHEMA[1:]:
                        conn.execute(statement)
                conn.execute("INSERT INTO agentkit_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
            for table in _untruncated(conn):
                conn.execute(f"ALTER TABLE {table} SET (vacuum_truncate = off)")
        self._schema_ready = True

    def _refuse_unless_agentkit(self, conn: psycopg.Connection[Any]) -> None:
        """``create_tables=False``: refuse, before anything is created, a database whose
        search path holds no agentkit store (read only; the caller's transaction)."""
        row = conn.execute(_AGENTKIT_HERE).fetchone()
        assert row is not None
        has_schema_table, schema, tables = row
        if has_schema_table:
            return
        held = (f"schema {schema} holds tables {sorted(tables)[:8]}"
                + (" …" if len(tables) > 8 else "")) if tables else (
            f"schema {schema} holds no tables" if schema else "no schema in its search path")
        raise StoreError(f"{self.address}: not an agentkit store ({held}, no agentkit_schema);"
                         " give the store a runner or serve-mcp made, nothing was created here")

    def identity(self) -> tuple[Any, ...]:
        """The server (its start time), database and schema whose ``agentkit_keys`` this
        store uses: two stores with the same identity are one store."""
        with self._connection(durable=False) as conn:
            row = conn.execute(_IDENTITY).fetchone()
        assert row is not None
        return ("postgresql", *row)

    @contextmanager
    def transaction(
        self, *, write: bool, full_sync: bool = False
    ) -> Iterator[PostgresTransaction]:
        """One transaction (the careful paths, approvals). A write's commit waits for the
        WAL flush when it took a claim or ``full_sync`` is set, and only then (see
        "Durability"). A read is one autocommit SELECT: one round trip, no transaction."""
        import psycopg

        if not write:
            with self._connection() as conn:
                yield PostgresTransaction(conn, None)
            return
        relaxed = not full_sync
        with self._connection() as conn, conn.pipeline() as pipe:
            conn.execute("BEGIN")
            if relaxed:
                conn.execute("SET LOCAL synchronous_commit = off")
            tx = PostgresTransaction(conn, pipe)
            try:
                yield tx
            except BaseException:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
                raise
            if relaxed and tx.claimed:
                conn.execute("SET LOCAL synchronous_commit = on")
            conn.execute("COMMIT")  # sent with the pipeline's closing sync

    holds_effects = True

    @contextmanager
    def effect_transaction(self, key: str, mine: Claim) -> Iterator[PostgresTransaction]:
        """One transaction, not pipelined (the handler's statements are answered as they
        run), committed with the WAL flush, under the key's advisory lock: a transactional
        handler's effect and the key's result (see
        :meth:`~agentkit.policy.stores.algorithm.StoreBase.effect_transaction`)."""
        import psycopg

        with self._connection() as conn:
            conn.execute("BEGIN")
            tx = PostgresTransaction(conn, None)
            try:
                check_claim(tx, key, mine)
                yield tx
            except BaseException:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # ---- the steps: a new key in two round trips (claim, complete), a replay in one

    def claim(
        self, key: str, fingerprint: str | None, ttl: float, *, may_take_over: bool,
        full_sync: bool = False, flush: bool = True,
    ) -> Result | tuple[str, Claim]:
        """One statement: the claim's INSERT (unless the key has a row) and a read of the
        row; a key claimed already takes the careful path (one transaction under the key's
        advisory lock). With ``flush=False`` (a transactional write's claim) it commits
        without waiting for the WAL flush: the effect's flushed commit, later in the same
        log, carries it, and a claim a crash forgot left nothing behind."""
        mine = self.new_claim(fingerprint, 0.0, ttl)
        with self._connection(flush) as conn:
            row = conn.execute(_CLAIM, (key, *_claim_row(mine)[:-1], ttl, key)).fetchone()
        decided = self._claimed(row, mine, fingerprint)
        if decided is not None:
            return decided
        return self.claim_carefully(key, fingerprint, ttl, may_take_over, full_sync)

    def _claimed(
        self, row: tuple[Any, ...] | None, mine: Claim, fingerprint: str | None
    ) -> Result | tuple[str, Claim] | None:
        assert row is not None
        if row[0] is not None:
            return (CLAIMED, _with_lease(mine, float(row[0])))
        if row[1] is not None:
            return self._replay((row[2], row[1]), fingerprint)
        return None

    def complete(self, key: str, mine: Claim, result: Result, full_sync: bool = False) -> None:
        """One UPDATE on the claim's row, without waiting for the WAL flush even for
        ``full_sync`` (only the claim needs it: a lost result leaves the claim for the
        status lookup)."""
        text = self.result_text(key, mine, result)

        def work(conn: psycopg.Connection[Any]) -> bool:
            if conn.execute(_COMPLETE, (text, key, mine.token)).rowcount == 1:
                return True
            conn.execute(_COMPLETE_LOST, (key, mine.fingerprint, text))
            return False

        if not self._again_if_lost(work):
            self.claim_lost(key)

    def drop(self, key: str, mine: Claim) -> None:
        self._again_if_lost(lambda conn: conn.execute(_DROP, (key, mine.token)))

    def abandon_claim(self, key: str, mine: Claim) -> None:
        let_go(mine.token)
        self._again_if_lost(lambda conn: conn.execute(_ABANDON, (key, mine.token)))

    def _again_if_lost(self, work: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """Run a step that is safe to repeat (it acts only on our own token) on the relaxed
        pool; a connection that dies under it (a server restart, ``pg_terminate_backend``)
        is replaced and the step sent once more."""
        try:
            with self._connection(durable=False) as conn:
                return work(conn)
        except StoreError as exc:
            if not _lost(exc.__cause__):
                raise
        with self._connection(durable=False) as conn:
            return work(conn)

    # ---- async twins (interface B): psycopg's async pool, no thread parked on the network

    def _loop_connections(self, durable: bool) -> AsyncConnections:
        """This loop's async connections of that durability, made on first use; the first of
        a loop also starts the task that closes the loop's connections with it. Raises
        :class:`LoopEnding` once that task has run: the loop is ending."""
        import asyncio

        loop = asyncio.get_running_loop()
        with self._schema_lock:
            if self._closed:
                raise StoreError(f"{self.address}: the store is closed")
            mine = self._apools.get(loop)
            if mine is None:
                # Forget the loops that have closed since (their connections closed with them,
                # or, for a loop closed without cancelling its tasks, with the objects).
                for gone in [other for other in self._apools if other.is_closed()]:
                    del self._apools[gone]
                mine = self._apools[loop] = LoopPools()
                mine.closer = loop.create_task(self._close_with(loop, mine),
                                               name=f"agentkit {self.address} closer")
            if mine.ending:
                raise LoopEnding
            pool = mine.pools.get(durable)
            if pool is None:
                pool = mine.pools[durable] = AsyncConnections(
                    partial(self._aconnect, durable), self.pool_size,
                    self.connect_timeout_seconds)
            return pool

    async def _aconnect(self, durable: bool) -> Any:
        """A new async connection with the session settings of its durability level."""
        import psycopg

        conn = await psycopg.AsyncConnection.connect(self._dsn, **self._kwargs())
        try:
            await conn.execute(_SESSION, self._settings(durable))
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _close_with(self, loop: asyncio.AbstractEventLoop, mine: LoopPools) -> None:
        """Wait for the end of ``loop``, then close its connections.

        ``asyncio.run`` (and ``asyncio.Runner``), on Python 3.10 to 3.13, cancels every task
        still pending before it closes the loop, and waits for them: this task is one, and
        its cancellation is the loop ending. From then on a store step on this loop runs on
        a thread (see :class:`LoopEnding`)."""
        try:
            await loop.create_future()  # nothing sets it: only a cancellation ends this wait
        finally:
            with self._schema_lock:
                mine.ending = True
                pools = list(mine.pools.values())
            for pool in pools:
                await pool.close()

    @asynccontextmanager
    async def _aconnection(self, durable: bool = True) -> AsyncIterator[Any]:
        """:meth:`_connection` on this loop's own connections; every psycopg error (a server
        that cannot be reached included) is a StoreError."""
        import asyncio

        import psycopg

        pool = self._loop_connections(durable)
        if not self._schema_ready:
            await _to_thread(self._schema_once)
        try:
            conn = await pool.get()
        except asyncio.TimeoutError as exc:
            raise StoreError(
                f"{self.address}: no connection within {self.connect_timeout_seconds:g} s"
                f" (all {self.pool_size} in use)"
            ) from exc
        except psycopg.Error as exc:
            outage_begins(self.address, self.connect_timeout_seconds, self._dsn)
            raise StoreError(
                f"{self.address}: cannot connect ({self._reason(exc)}; is the server up and"
                " reachable?)"
            ) from exc
        if outages:
            outage_ends(self.address)
        try:
            yield conn
        except psycopg.Error as exc:
            if conn is not None and conn.broken:
                retired.add(conn)
            raise StoreError(f"{self.address}: {self._reason(exc)}") from exc
        finally:
            await pool.put(conn)

    def _schema_once(self) -> None:
        with self._connection():
            pass

    @asynccontextmanager
    async def _apipeline(self) -> AsyncIterator[tuple[Any, Any]]:
        """A write transaction in pipeline mode on the durable pool: statements travel
        together until one is answered (``await pipe.sync()``), and the COMMIT goes with the
        pipeline's closing sync."""
        import psycopg

        async with self._aconnection() as conn, conn.pipeline() as pipe:
            await conn.execute("BEGIN")
            try:
                yield conn, pipe
            except BaseException:
                with contextlib.suppress(psycopg.Error):
                    await conn.execute("ROLLBACK")
                raise
            await conn.execute("COMMIT")

    @on_a_thread_if_the_loop_ends
    async def aclaim(
        self, key: str, fingerprint: str | None, ttl: float, *, may_take_over: bool,
        full_sync: bool = False, flush: bool = True,
    ) -> Result | tuple[str, Claim]:
        """:meth:`claim` on the event loop: one round trip for a new key or a replay, two
        more for the careful path."""
        mine = self.new_claim(fingerprint, 0.0, ttl)
        async with self._aconnection() as conn:
            cur = await conn.execute(_CLAIM, (key, *_claim_row(mine)[:-1], ttl, key))
            row = await cur.fetchone()
        decided = self._claimed(row, mine, fingerprint)
        if decided is not None:
            return decided
        async with self._apipeline() as (conn, pipe):
            await conn.execute(_LOCK, (key,))
            cur = await conn.execute(_ENTRY, (key,))
            await pipe.sync()
            row = await cur.fetchone()
            assert row is not None
            stored = None if row[1] is None else (row[2], row[1])
            claim = None if stored is not None or row[3] is None else Claim(*row[3:])
            plan = self.judge(stored, claim, float(row[0]), fingerprint, ttl,
                              may_take_over=may_take_over)
            if isinstance(plan, dict):
                return plan
            kind, mine, old_token = plan
            if old_token is None:
                cur = await conn.execute(_INSERT_CLAIM, (key, *_claim_row(mine)))
            else:
                cur = await conn.execute(_REPLACE_CLAIM, (*_claim_row(mine), key, old_token))
        if cur.rowcount != 1:  # answered with the COMMIT
            return failure(ErrorCode.IN_PROGRESS)
        return (kind, mine)

    @on_a_thread_if_the_loop_ends
    async def acomplete(
        self, key: str, mine: Claim, result: Result, full_sync: bool = False
    ) -> None:
        """:meth:`complete` on the event loop."""
        text = self.result_text(key, mine, result)

        async def work(conn: Any) -> bool:
            if (await conn.execute(_COMPLETE, (text, key, mine.token))).rowcount == 1:
                return True
            await conn.execute(_COMPLETE_LOST, (key, mine.fingerprint, text))
            return False

        if not await self._aagain_if_lost(work):
            self.claim_lost(key)

    @on_a_thread_if_the_loop_ends
    async def adrop(self, key: str, mine: Claim) -> None:
        """:meth:`drop` on the event loop."""

        async def work(conn: Any) -> None:
            await conn.execute(_DROP, (key, mine.token))

        await self._aagain_if_lost(work)

    @on_a_thread_if_the_loop_ends
    async def aabandon_claim(self, key: str, mine: Claim) -> None:
        """:meth:`abandon_claim` on the event loop."""
        let_go(mine.token)

        async def work(conn: Any) -> None:
            await conn.execute(_ABANDON, (key, mine.token))

        await self._aagain_if_lost(work)

    async def _aagain_if_lost(self, work: Callable[[Any], Awaitable[_T]]) -> _T:
        """:meth:`_again_if_lost` on the event loop."""
        try:
            async with self._aconnection(durable=False) as conn:
                return await work(conn)
        except StoreError as exc:
            if not _lost(exc.__cause__):
                raise
        async with self._aconnection(durable=False) as conn:
            return await work(conn)

    @on_a_thread_if_the_loop_ends
    async def acreate_approval(self, approval_id: str, record: dict[str, Any]) -> dict[str, Any]:
        """:meth:`create_approval` on the event loop."""
        text = record_text(record)
        async with self._apipeline() as (conn, pipe):
            await conn.execute(_LOCK, (approval_id,))
            cur = await conn.execute(_APPROVAL, (approval_id,))
            await pipe.sync()
            row = await cur.fetchone()
            if row is None:
                await conn.execute(_INSERT_APPROVAL, (approval_id, record["state"], text))
        return loads(text if row is None else str(row[0]))

    @on_a_thread_if_the_loop_ends
    async def aget_approval(self, approval_id: str) -> dict[str, Any] | None:
        """:meth:`get_approval` on the event loop."""
        async with self._aconnection() as conn:
            row = await (await conn.execute(_APPROVAL, (approval_id,))).fetchone()
        return None if row is None else loads(str(row[0]))

    @on_a_thread_if_the_loop_ends
    async def aupdate_approval(
        self, approval_id: str, expected_state: str, record: dict[str, Any]
    ) -> bool:
        """:meth:`update_approval` on the event loop."""
        text = record_text(record)
        async with self._apipeline() as (conn, pipe):
            await conn.execute(_LOCK, (approval_id,))
            cur = await conn.execute(_APPROVAL, (approval_id,))
            await pipe.sync()
            row = await cur.fetchone()
            if row is None or loads(str(row[0])).get("state") != expected_state:
                return False
            await conn.execute(_REPLACE_APPROVAL, (record["state"], text, approval_id))
            return True

    @on_a_thread_if_the_loop_ends
    async def alist_approvals(self, state: str | None = None) -> list[dict[str, Any]]:
        """:meth:`list_approvals` on the event loop."""
        async with self._aconnection() as conn:
            if state is None:
                rows = await (await conn.execute(_APPROVALS)).fetchall()
            else:
                rows = await (await conn.execute(_APPROVALS_IN, (state,))).fetchall()
        return [loads(str(row[0])) for row in rows]

    # ---- operating the store (agentkit.policy.stores.operations)

    def store_now(self) -> float:
        """The database's clock."""
        with self._connection(durable=False) as conn:
            row = conn.execute(f"SELECT {_NOW}").fetchone()
        assert row is not None
        return float(row[0])

    def key_page(self, after: str | None = None, limit: int = 1000) -> list[KeyEntry]:
        lower, args = ("WHERE key > %s", (after,)) if after is not None else ("", ())
        with self._connection(durable=False) as conn:
            rows = conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM agentkit_keys {lower} ORDER BY key LIMIT %s",
                (*args, limit),
            ).fetchall()
        return [_key_entry(row) for row in rows]

    def key_entry(self, key: str) -> KeyEntry | None:
        with self._connection(durable=False) as conn:
            row = conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM agentkit_keys WHERE key = %s", (key,)
            ).fetchone()
        return None if row is None else _key_entry(row)

    def approval_page(self, state: str | None = None) -> list[ApprovalEntry]:
        where, args = ("WHERE state = %s", (state,)) if state is not None else ("", ())
        with self._connection(durable=False) as conn:
            rows = conn.execute(
                "SELECT approval_id, state, record, extract(epoch FROM updated_at)::float8"
                f" FROM agentkit_approvals {where} ORDER BY seq", args,
            ).fetchall()
        return [ApprovalEntry(*row) for row in rows]

    def audit_page(self, after: int = 0, limit: int = 1000) -> list[tuple[int, str]]:
        with self._connection(durable=False) as conn:
            rows = conn.execute(
                "SELECT seq, entry FROM agentkit_audit WHERE seq > %s ORDER BY seq LIMIT %s",
                (after, limit),
            ).fetchall()
        return [(int(row[0]), str(row[1])) for row in rows]

    def add_keys(self, entries: list[KeyEntry]) -> int:
        """One statement (arrays of the columns), committed with the WAL flush: a copied
        claim may be an irreversible write's."""
        columns: list[list[Any]] = [[] for _ in range(9)]
        for entry in entries:
            for column, value in zip(columns, _key_row(entry), strict=True):
                column.append(value)
        with self._connection() as conn:
            return conn.execute(_ADD_KEYS, columns).rowcount

    def add_approvals(self, entries: list[ApprovalEntry]) -> int:
        columns = [[e.approval_id for e in entries], [e.state for e in entries],
                   [e.record for e in entries], [e.updated_at for e in entries]]
        with self._connection() as conn:
            return conn.execute(_ADD_APPROVALS, columns).rowcount

    def purge_before(self, before: float) -> tuple[int, int]:
        """Window by window of the primary key: a read, then (only if the window holds
        something to delete) one DELETE bounded by the window, which locks only the rows it
        deletes; no other key waits for it. Each DELETE commits on a durable session: it
        waits for the log it wrote to be flushed, as a claim's commit does. (Committed
        without waiting, a step's log, a whole image of every page it is first to change
        after a checkpoint, about 300 bytes per key, would be flushed by the next claim's
        commit, which would then wait for the purge's megabytes instead of its own record:
        the claims beside such a purge wait in ``IO:WALSync``, never on a lock.) A claim
        committing meanwhile still waits for the step's flush: the purge is paced by the log
        it writes (:data:`PURGE_LOG_PACE`), each step measuring it, so that flush stays
        small and the disk is never the purge's for long. The purge also rests as long as
        each step took, its flush included, so it takes at most half of the server's time
        (and its disk's) from the workers."""
        measured = self._log_measurable()
        return purge_in_windows(
            before,
            keys=lambda after, cut, n: self._purge_window(
                _KEY_WINDOW, _PURGE_KEYS, "key", after, cut, n, measured),
            approvals=lambda after, cut, n: self._purge_window(
                _APPROVAL_WINDOW, _PURGE_APPROVALS, "approval_id", after, cut, n, measured),
            pending=self.approval_page(PENDING),
            delete_pending=self._delete_pending,
            pause=0.0,
            log_pace=PURGE_LOG_PACE if measured else None,
        )

    def _log_measurable(self) -> bool:
        """Whether this server tells where its write-ahead log ends (Aurora, a standby and
        a user refused the function do not: their purge is paced by time alone)."""
        import psycopg

        with self._connection(durable=False) as conn:
            try:
                conn.execute(f"SELECT 1{_LOG_AT}").fetchone()
            except psycopg.Error:
                return False
        return True

    def _purge_window(
        self, window_sql: str, delete_sql: str, column: str, after: str | None, before: float,
        window: int, measured: bool = False,
    ) -> tuple[str | None, int, int | None]:
        lower, args = (f"WHERE {column} > %s", (after,)) if after is not None else ("", ())
        with self._connection(durable=True) as conn:  # its log flushed by its own commit
            row = conn.execute(window_sql.format(lower=lower, log=_LOG_AT if measured else ""),
                               (before, *args, window)).fetchone()
            assert row is not None
            end, expired = row[0], row[1]
            if end is None or not expired:
                return end, 0, 0 if measured else None
            bound = f"{column} > %s AND" if after is not None else ""
            cur = conn.execute(delete_sql.format(lower=bound), (*args, end, before))
            logged = conn.execute(_LOG_SINCE, (row[2],)).fetchone() if measured else None
        return end, cur.rowcount, None if logged is None else int(logged[0])

    def _delete_pending(self, approval_id: str, record: str) -> bool:
        with self._connection(durable=False) as conn:
            cur = conn.execute(
                "DELETE FROM agentkit_approvals WHERE approval_id = %s AND state = %s"
                " AND record = %s", (approval_id, PENDING, record),
            )
        return cur.rowcount == 1

    # ----

    def owner_gone(self, claim: Claim) -> bool:
        return owner_gone(claim.host, claim.pid, claim.start_time, local_host=self.host)

    def close(self) -> None:
        """Close the store: the sync pools' connections, and every live loop's async ones
        (on their loop: at once if it is not running, else scheduled there; this thread
        does not wait for a loop that runs)."""
        with self._schema_lock:
            if self._closed:
                return
            self._closed = True
            pools = list(self._pools.values()) if self._pool_pid == this_process()[0] else []
            loops, self._apools = list(self._apools.items()), {}
        for pool in pools:
            pool.close()
        for loop, mine in loops:
            if loop.is_closed() or mine.closer is None:
                continue
            if loop.is_running():
                loop.call_soon_threadsafe(mine.closer.cancel)  # it closes them, on its loop
            else:
                mine.closer.cancel()
                with contextlib.suppress(BaseException):
                    loop.run_until_complete(mine.closer)

    async def aclose(self) -> None:
        """Close the store from async code: this loop's async connections (awaited), then
        everything :meth:`close` closes. A loop's connections are closed with the loop
        anyway when ``asyncio.run`` or ``asyncio.Runner`` ends it (docs/design.md#stores); a
        loop ended another way (``loop.close()`` without cancelling its tasks) should
        ``await store.aclose()`` before."""
        import asyncio

        loop = asyncio.get_running_loop()
        with self._schema_lock:
            mine = self._apools.pop(loop, None)
            if mine is not None:
                mine.ending = True
        if mine is not None:
            for pool in mine.pools.values():
                await pool.close()
            if mine.closer is not None:
                mine.closer.cancel()
        await asyncio.to_thread(self.close)

    def __repr__(self) -> str:
        ttl = self.claim_ttl_seconds
        return f"PostgresIdempotencyStore({self.address!r}, claim_ttl_seconds={ttl:g})"


def _key_entry(row: tuple[Any, ...]) -> KeyEntry:
    """A ``_ENTRY_COLUMNS`` row as a :class:`KeyEntry`."""
    key, token, fingerprint, host, pid, start_time, lease_until, result, updated_at = row
    claim = None if result is not None else Claim(
        token, fingerprint, host, pid, start_time, lease_until)
    return KeyEntry(key, fingerprint, result, claim, updated_at)


def _key_row(entry: KeyEntry) -> tuple[Any, ...]:
    """A :class:`KeyEntry` as the columns of ``_ADD_KEYS`` (a completed key has no claim)."""
    claim = None if entry.result is not None else entry.claim
    if entry.result is None and claim is None:
        raise ValueError(f"key {entry.key!r}: an entry holds a result or a claim")
    fields = _claim_row(claim) if claim is not None else (None, entry.fingerprint, None, None, None, None)
    return (entry.key, *fields, entry.result, entry.updated_at)


def _with_lease(claim: Claim, lease_until: float) -> Claim:
    return Claim(claim.token, claim.fingerprint, claim.host, claim.pid, claim.start_time,
                 lease_until)


async def _to_thread(fn: Any) -> None:
    import asyncio

    await asyncio.to_thread(fn)


def _lost(exc: BaseException | None) -> bool:
    """The connection died under the statement (not a timeout, not a refusal)."""
    import psycopg

    if not isinstance(exc, psycopg.OperationalError):
        return False
    return getattr(exc, "sqlstate", None) in (None, "57P01", "57P02", "57P03")  # shutdowns
