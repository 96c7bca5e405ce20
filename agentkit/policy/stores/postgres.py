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
    A write runs in one transaction that first takes a transaction-scoped advisory lock on
    the key (``pg_advisory_xact_lock``), so every check-then-write on one key is serialised
    across connections and hosts, while different keys never wait for each other. Inserts
    are ``ON CONFLICT DO NOTHING`` and takeovers compare-and-swap on the claim's token, so
    even without the lock two workers could not both claim.

Durability
    Connections run with ``synchronous_commit = on``: a commit returns only once it is
    flushed to the server's write-ahead log. That is kept for every transaction that takes a
    claim (a new claim or a takeover: a claim lost in a server crash could let a worker on
    another host run a write that is still running) and for every ``full_sync`` one (an
    irreversible write's result, every approval). The other writes of a reversible call (its
    stored result, a freed or abandoned claim) commit with ``synchronous_commit = off``, as
    SQLite's NORMAL mode does: a server crash may forget them, and then the durable claim
    comes back and the status lookup settles it, so nothing runs twice; the call saves one
    WAL flush wait.

Schema and connections
    The tables (``agentkit_results``, ``agentkit_claims``, ``agentkit_approvals``) are
    created on first use inside one transaction guarded by an advisory lock, so workers that
    start at once create them once; the version is recorded in ``agentkit_schema``, and a
    database whose version is newer than this code knows is refused with a clear error.
    Connections come from a ``psycopg_pool.ConnectionPool``. One the server has left (a
    restart, ``pg_terminate_backend``) is recognised before use, without a round trip, by
    its socket having something to read, and replaced: a restart costs the next call only
    a reconnect. A server that cannot be reached makes ``run_once`` answer ``busy`` (logged
    with the address and the reason); a connection that dies during a call makes that call
    ``busy`` before the claim, ``outcome_unknown`` after the operation ran.

Round trips
    Each transaction runs in pipeline mode: statements whose answer the algorithm does not
    need (BEGIN, the per-key lock, the stored result) are queued and travel with the next
    one that is answered. A new key costs about six round trips and one WAL flush wait
    (the claim's), against two and one for a bare INSERT and COMMIT.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from agentkit.policy.stores.algorithm import Claim, StoreBase, StoreError
from agentkit.policy.stores.owner import owner_gone

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["SCHEMA_VERSION", "PostgresIdempotencyStore", "PostgresTransaction"]

#: The version of the tables below; a database with a higher one is refused.
SCHEMA_VERSION = 1

# Any fixed 64-bit number: the advisory lock that serialises schema creation.
_SCHEMA_LOCK = 0x6167_656E_746B_6974  # "agentkit"

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS agentkit_results (
        key text PRIMARY KEY,
        fingerprint text,
        result text NOT NULL,
        completed_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )""",
    """CREATE TABLE IF NOT EXISTS agentkit_claims (
        key text PRIMARY KEY,
        token text NOT NULL,
        fingerprint text,
        host text NOT NULL,
        pid integer NOT NULL,
        start_time bigint,
        lease_until double precision NOT NULL,
        claimed_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )""",
    """CREATE TABLE IF NOT EXISTS agentkit_approvals (
        seq bigserial NOT NULL,
        approval_id text PRIMARY KEY,
        state text NOT NULL,
        record text NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )""",
    "CREATE INDEX IF NOT EXISTS agentkit_approvals_by_state ON agentkit_approvals (state, seq)",
]

_CLAIM_COLUMNS = "token, fingerprint, host, pid, start_time, lease_until"


class PostgresTransaction:
    """The :class:`~agentkit.policy.stores.algorithm.Transaction` of the PostgreSQL store, on
    one pooled connection inside one transaction, in pipeline mode.

    Statements whose answer the algorithm does not need (the lock, the stored result, an
    approval write) are only queued; the next statement that must be answered sends them
    all in one round trip. The server still runs them in order, so a read queued after the
    lock runs once the lock is held.
    """

    def __init__(self, conn: psycopg.Connection[Any], pipe: psycopg.Pipeline) -> None:
        self._c = conn
        self._pipe = pipe
        self._now: float | None = None
        self._prefetched: tuple[str, psycopg.Cursor[Any]] | None = None
        self.claimed = False  # took a claim: its commit must wait for the WAL flush

    def _answered(self, query: str, params: tuple[Any, ...] = ()) -> psycopg.Cursor[Any]:
        cur = self._c.execute(query, params)
        self._pipe.sync()
        return cur

    def _one(self, query: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self._answered(query, params).fetchone()
        return row

    def now(self) -> float:
        if self._now is None:  # claim() reads the clock along with the claim
            row = self._one("SELECT extract(epoch FROM clock_timestamp())::float8")
            assert row is not None
            self._now = float(row[0])
        return self._now

    def lock(self, name: str) -> None:
        self._c.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (name,))

    def result(self, key: str) -> tuple[str | None, str] | None:
        found = self._c.execute(
            "SELECT fingerprint, result FROM agentkit_results WHERE key = %s", (key,)
        )
        # The algorithm asks for the claim next: read it (and the clock) in the same trip.
        claim = self._claim_query(key)
        self._pipe.sync()
        row = found.fetchone()
        self._prefetched = (key, claim)
        return None if row is None else (row[0], row[1])

    def _claim_query(self, key: str) -> psycopg.Cursor[Any]:
        return self._c.execute(
            "SELECT extract(epoch FROM clock_timestamp())::float8,"
            f" {', '.join('c.' + c for c in _CLAIM_COLUMNS.split(', '))}"
            " FROM (SELECT 1) AS one LEFT JOIN agentkit_claims AS c ON c.key = %s",
            (key,),
        )

    def claim(self, key: str) -> Claim | None:
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None and prefetched[0] == key:
            cur = prefetched[1]  # read after the result, under the same lock
        else:
            cur = self._claim_query(key)
            self._pipe.sync()
        row = cur.fetchone()
        assert row is not None
        self._now = float(row[0])
        return None if row[1] is None else Claim(*row[1:])

    def insert_claim(self, key: str, claim: Claim) -> bool:
        cur = self._answered(
            f"INSERT INTO agentkit_claims (key, {_CLAIM_COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (key) DO NOTHING",
            (key, *dataclasses.astuple(claim)),
        )
        self.claimed = self.claimed or cur.rowcount == 1
        return cur.rowcount == 1

    def replace_claim(self, key: str, token: str, claim: Claim) -> bool:
        cur = self._answered(
            "UPDATE agentkit_claims SET token = %s, fingerprint = %s, host = %s, pid = %s,"
            " start_time = %s, lease_until = %s, claimed_at = clock_timestamp()"
            " WHERE key = %s AND token = %s",
            (*dataclasses.astuple(claim), key, token),
        )
        if cur.rowcount == 1 and claim.lease_until > 0:  # a takeover, not an abandon
            self.claimed = True
        return cur.rowcount == 1

    def delete_claim(self, key: str, token: str | None) -> bool:
        if token is None:
            cur = self._answered("DELETE FROM agentkit_claims WHERE key = %s", (key,))
        else:
            cur = self._answered(
                "DELETE FROM agentkit_claims WHERE key = %s AND token = %s", (key, token)
            )
        return cur.rowcount == 1

    def insert_result(self, key: str, fingerprint: str | None, text: str) -> None:
        self._c.execute(
            "INSERT INTO agentkit_results (key, fingerprint, result) VALUES (%s, %s, %s)"
            " ON CONFLICT (key) DO NOTHING",
            (key, fingerprint, text),
        )

    def approval(self, approval_id: str) -> str | None:
        row = self._one(
            "SELECT record FROM agentkit_approvals WHERE approval_id = %s", (approval_id,)
        )
        return None if row is None else str(row[0])

    def insert_approval(self, approval_id: str, state: str, text: str) -> None:
        self._c.execute(
            "INSERT INTO agentkit_approvals (approval_id, state, record) VALUES (%s, %s, %s)",
            (approval_id, state, text),
        )

    def replace_approval(self, approval_id: str, state: str, text: str) -> None:
        self._c.execute(
            "UPDATE agentkit_approvals SET state = %s, record = %s,"
            " updated_at = clock_timestamp() WHERE approval_id = %s",
            (state, text, approval_id),
        )

    def approvals(self, state: str | None) -> list[str]:
        if state is None:
            rows = self._answered("SELECT record FROM agentkit_approvals ORDER BY seq").fetchall()
        else:
            rows = self._answered(
                "SELECT record FROM agentkit_approvals WHERE state = %s ORDER BY seq", (state,)
            ).fetchall()
        return [str(row[0]) for row in rows]


def _address(dsn: str) -> str:
    """The DSN as logs may show it: never the password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:  # an unparsable DSN is reported by connect, not here
        return "postgresql://<unparsable dsn>"
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{host}{port}/{parts.get('dbname') or ''}"


class PostgresIdempotencyStore(StoreBase):
    """Durable and shared by the workers of several hosts (docs/design.md#stores); the
    database's clock decides every lease.

    ``dsn`` is a libpq connection string or URI. ``pool_size`` bounds the connections this
    store opens; ``connect_timeout_seconds`` bounds the wait for one (then the call is
    ``busy``). Nothing connects until the first call, so a runner can be made while the
    server is still down.
    """

    read_before_claim = False  # the claiming transaction reads the result first anyway

    def __init__(
        self,
        dsn: str,
        claim_ttl_seconds: float = 300,
        *,
        pool_size: int = 4,
        connect_timeout_seconds: float = 5.0,
    ) -> None:
        super().__init__(claim_ttl_seconds)
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
        self.dsn = dsn
        self.address = _address(dsn)
        self.connect_timeout_seconds = float(connect_timeout_seconds)
        self.pool_size = pool_size
        self._schema_lock = threading.Lock()
        self._schema_ready = False
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._pool_pid = 0
        self._inherited: list[psycopg_pool.ConnectionPool[Any]] = []
        self._closed = False

    def _new_pool(self) -> psycopg_pool.ConnectionPool[Any]:
        from psycopg_pool import ConnectionPool

        pool: psycopg_pool.ConnectionPool[Any] = ConnectionPool(
            self.dsn,
            min_size=1,
            max_size=self.pool_size,
            open=False,
            kwargs={
                "autocommit": True,
                "connect_timeout": max(1, round(self.connect_timeout_seconds)),
            },
            configure=_configure,
            timeout=self.connect_timeout_seconds,
            # No background retries with growing back-off: a failed connect gives up at
            # once, and the next call that needs a connection tries afresh, so a server
            # that is back serves the very next call.
            reconnect_timeout=0,
            name=f"agentkit {self.address}",
        )
        pool.open(wait=False)
        return pool

    def _reason(self, exc: BaseException) -> str:
        text = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {text[0] if text else 'no detail'}"

    def _current_pool(self) -> psycopg_pool.ConnectionPool[Any]:
        with self._schema_lock:
            if self._closed:
                raise StoreError(f"{self.address}: the store is closed")
            if self._pool is None or self._pool_pid != os.getpid():
                if self._pool is not None:
                    # A forked child must not use, nor close, its parent's connections
                    # (closing would end the parent's sessions): keep them untouched.
                    self._inherited.append(self._pool)
                self._pool, self._pool_pid = self._new_pool(), os.getpid()
            return self._pool

    @contextmanager
    def _live_connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection that is not known dead, with the schema in place.

        An idle connection has nothing to read unless the server has left: a restart or
        ``pg_terminate_backend`` sends a last message and closes the socket. Such a
        connection is dropped (the pool reconnects) before anything is sent on it, so the
        first call after a restart costs a reconnect and no error.
        """
        import psycopg
        import psycopg_pool

        pool = self._current_pool()
        for _ in range(self.pool_size + 1):
            try:
                conn = pool.getconn()
            except psycopg_pool.PoolTimeout as exc:
                raise StoreError(
                    f"{self.address}: no connection within {self.connect_timeout_seconds:g} s"
                    " (is the server up and reachable?)"
                ) from exc
            if _looks_dead(conn):
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
        try:
            yield conn
        finally:
            pool.putconn(conn)

    def _ensure_schema(self, conn: psycopg.Connection[Any]) -> None:
        """Create the tables once, under an advisory lock; refuse a newer schema."""
        if self._schema_ready:
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
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
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute("INSERT INTO agentkit_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
        self._schema_ready = True

    @contextmanager
    def transaction(
        self, *, write: bool, full_sync: bool = False
    ) -> Iterator[PostgresTransaction]:
        """One transaction. A write's commit waits for the WAL flush when it took a claim or
        ``full_sync`` is set, and only then (see "Durability"); a read is read-only."""
        import psycopg

        relaxed = write and not full_sync
        with self._live_connection() as conn:
            try:
                with conn.pipeline() as pipe:
                    conn.execute("BEGIN" if write else "BEGIN READ ONLY")
                    if relaxed:
                        conn.execute("SET LOCAL synchronous_commit = off")
                    tx = PostgresTransaction(conn, pipe)
                    try:
                        yield tx
                    except BaseException:
                        with contextlib.suppress(psycopg.Error):
                            conn.execute("ROLLBACK")
                            pipe.sync()
                        raise
                    if relaxed and tx.claimed:
                        conn.execute("SET LOCAL synchronous_commit = on")
                    conn.execute("COMMIT")
                    pipe.sync()
            except psycopg.Error as exc:
                raise StoreError(f"{self.address}: {self._reason(exc)}") from exc

    def owner_gone(self, claim: Claim) -> bool:
        return owner_gone(claim.host, claim.pid, claim.start_time, local_host=self.host)

    def close(self) -> None:
        """Close the pool's connections."""
        with self._schema_lock:
            if self._closed:
                return
            self._closed = True
            pool = self._pool if self._pool_pid == os.getpid() else None
        if pool is not None:
            pool.close()

    def __repr__(self) -> str:
        ttl = self.claim_ttl_seconds
        return f"PostgresIdempotencyStore({self.address!r}, claim_ttl_seconds={ttl:g})"


def _looks_dead(conn: psycopg.Connection[Any]) -> bool:
    """An idle connection with something to read (the server's goodbye), or closed."""
    if conn.closed or conn.broken:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _configure(conn: psycopg.Connection[Any]) -> None:
    """Every pooled connection: commits wait for the WAL flush (see "Durability")."""
    conn.execute("SET synchronous_commit = on")
