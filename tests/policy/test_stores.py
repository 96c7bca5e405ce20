"""Idempotency stores (docs/design.md#stores): every test counts the operation's real runs.

A result code alone cannot show that a write happened twice, so each test holds a counter
(or, across processes, a log file on disk) and asserts how often the operation really ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import apsw
import pytest

from agentkit.policy.stores import (
    IdempotencyStore,
    PostgresIdempotencyStore,
    SQLiteIdempotencyStore,
    StoreError,
)
from agentkit.policy.stores.sqlite import journal_choice, sqlite_version

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("_store_worker.py")
TINY_TTL = 0.05  # seconds; tests let LEASE_PASSES go by on the store's clock
LEASE_PASSES = 1.0
WAIT = 10.0  # upper bound on every wait for another thread or process

OK = {"ok": True, "data": "written"}
UNKNOWN = {"ok": False, "error": "outcome_unknown", "retryable": False}
FAILED = {"ok": False, "error": "tool_failure", "retryable": False}


class Op:
    """A counting operation: returns its results in turn (the last one repeats)."""

    def __init__(self, *results: dict[str, Any], raises: BaseException | None = None) -> None:
        self.results = list(results) or [OK]
        self.raises = raises
        self.calls = 0

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if self.raises is not None:
            raise self.raises
        return dict(self.results[min(self.calls, len(self.results)) - 1])


class Lookup:
    """A counting status lookup: returns ``answer`` or raises it."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self) -> dict[str, Any] | None:
        self.calls += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


class Clock:
    """An injected wall clock: time passes only when a test says so."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------- PostgreSQL

PG_DSN = os.environ.get("AGENTKIT_TEST_PG_DSN", "")
IN_CI = os.environ.get("CI", "").lower() == "true"
PG_CLUSTER = ROOT / "tools" / "pg_cluster.sh"


def pg_unavailable(reason: str) -> None:
    """Skip, with the reason, where PostgreSQL is optional; fail in CI, where it is not."""
    if IN_CI:
        pytest.fail(f"CI=true, so the PostgreSQL store tests must run, but {reason}")
    pytest.skip(reason)


def pg_dsn() -> str:
    """The test server's DSN, checked reachable once per test that needs it."""
    if not PG_DSN:
        pg_unavailable(
            "AGENTKIT_TEST_PG_DSN is not set: run `make test-postgres`, or"
            ' eval "$(tools/pg_cluster.sh start)" first'
        )
    try:
        import psycopg
    except ImportError:
        pg_unavailable("psycopg is not installed: pip install -e '.[postgres]'")
    # Under the server's shared lock: a test in another process that restarts the server
    # has brought it back by the time this check gets the lock (:class:`ServerUse`).
    with ServerUse.held():
        try:
            psycopg.connect(PG_DSN, connect_timeout=5).close()
        except psycopg.Error as exc:
            pg_unavailable(f"no PostgreSQL server answers at AGENTKIT_TEST_PG_DSN ({exc})")
    return PG_DSN


class ServerUse:
    """Every test on the test server holds a shared lock on it, and a test that restarts or
    stops the server holds it exclusively (``flock`` on a file beside the cluster's state).
    ``make test`` runs test files in parallel: a file that stops the server must not pull it
    away from another file's test, which then waits for it to be back."""

    holders = 0
    file: Any = None
    alone = False  # this process has the server to itself (until its last holder leaves)

    @classmethod
    def enter(cls) -> None:
        import fcntl
        import tempfile

        if cls.holders == 0:
            state = os.environ.get("AGENTKIT_PG_STATE") or os.path.join(
                tempfile.gettempdir(), "agentkit-pg-tests")
            cls.file = open(f"{state}.tests.lock", "a+")  # noqa: SIM115 - held across calls
            fcntl.flock(cls.file, fcntl.LOCK_SH)
        cls.holders += 1

    @classmethod
    def leave(cls) -> None:
        import fcntl

        cls.holders -= 1
        if cls.holders == 0:
            cls.alone = False
            fcntl.flock(cls.file, fcntl.LOCK_UN)
            cls.file.close()

    @classmethod
    @contextlib.contextmanager
    def held(cls) -> Iterator[None]:
        """The shared lock for the block's length (:meth:`enter`, then :meth:`leave`)."""
        cls.enter()
        try:
            yield
        finally:
            cls.leave()

    @classmethod
    def exclusive(cls, wait: float = 300.0) -> None:
        """Until this test's schemas are dropped: no other process's test uses the server.
        Skips if other processes keep using it for ``wait`` seconds (two restarting tests in
        two processes would otherwise wait for each other forever)."""
        import fcntl

        if not cls.holders or cls.alone:  # (a restart asks again: it has the server already)
            return
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(cls.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    fcntl.flock(cls.file, fcntl.LOCK_SH)
                    pytest.skip("another test process kept using the server; it cannot be"
                                " restarted under it")
                time.sleep(0.05)  # a lock wait, not a synchronisation of the test's own steps
                continue
            # On Linux a conversion that fails drops the shared lock (flock(2): it is not
            # atomic), so while this test waited another process's test may have had the
            # server alone, and ended every session or restarted it: this process's admin
            # sessions are opened anew (they are all it opened before asking).
            cls.alone = True
            for schema in list(PgSchema.living):
                schema.reconnect()
            return


class PgSchema:
    """A fresh schema per test (its own tables), reached through the DSN's search_path; while
    it lives, its process uses the server (:class:`ServerUse`)."""

    #: The schemas of this process not dropped yet (:meth:`ServerUse.exclusive` renews their
    #: admin sessions).
    living: ClassVar[weakref.WeakSet[PgSchema]] = weakref.WeakSet()

    def __init__(self) -> None:
        import psycopg
        from psycopg.conninfo import make_conninfo

        ServerUse.enter()  # first: a test restarting the server brings it back before this
        self.holds = True
        try:
            self._create(pg_dsn(), psycopg, make_conninfo)
        except BaseException:
            self.holds = False
            ServerUse.leave()
            raise

    def _create(self, base: str, psycopg: Any, make_conninfo: Any) -> None:
        self.name = f"t_{os.urandom(6).hex()}"
        self.admin = psycopg.connect(base, autocommit=True)
        self.admin.execute(f"CREATE SCHEMA {self.name}")
        self.admin.execute(f"SET search_path = {self.name}")
        self.dsn = make_conninfo(base, options=f"-c search_path={self.name}")
        PgSchema.living.add(self)

    def reconnect(self) -> None:
        """The same schema on a new admin session (the old one died with the server, or was
        ended by another process's test)."""
        import psycopg

        with contextlib.suppress(psycopg.Error):
            self.admin.close()
        self.admin = psycopg.connect(pg_dsn(), autocommit=True)
        self.admin.execute(f"SET search_path = {self.name}")

    def execute(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cur = self.admin.execute(statement, params)
        return cur.fetchall() if cur.description else []

    def drop(self) -> None:
        import psycopg

        PgSchema.living.discard(self)
        try:
            if self.admin.closed:  # a test that restarts the server closed it first
                self.admin = psycopg.connect(pg_dsn(), autocommit=True)
            self.admin.execute(f"DROP SCHEMA {self.name} CASCADE")
            self.admin.close()
        finally:
            if self.holds:
                self.holds = False
                ServerUse.leave()


class Backend:
    """Makes stores of one kind and lets time pass on their clock (no sleeps)."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.clock = Clock()
        self.made: list[Any] = []
        self.pg = PgSchema() if kind == "postgres" else None

    def __call__(self, claim_ttl_seconds: float = 300, **options: Any) -> Any:
        if self.kind == "memory":
            store: Any = IdempotencyStore(claim_ttl_seconds, clock=self.clock, **options)
        elif self.kind == "sqlite":
            store = SQLiteIdempotencyStore(self.path, claim_ttl_seconds, clock=self.clock, **options)
        else:
            assert self.pg is not None
            store = PostgresIdempotencyStore(self.pg.dsn, claim_ttl_seconds, **options)
        self.made.append(store)
        return store

    @property
    def path(self) -> Path:
        return self.tmp_path / "store.sqlite"

    @property
    def spec(self) -> str:
        """How a child process opens the same store (tests/policy/_store_worker.py)."""
        if self.pg is not None:
            return f"postgres:{self.pg.dsn}"
        assert self.kind == "sqlite"
        return f"sqlite:{self.path}"

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run SQL on the store's tables, written for PostgreSQL (``agentkit_keys``, %s)."""
        if self.pg is not None:
            return self.pg.execute(statement, params)
        # apsw, the store's own binding: a second SQLite library (the stdlib's) in this
        # process would not see the store's locks, and closing it would drop them.
        conn = apsw.Connection(str(self.path))
        try:
            rows = conn.execute(
                statement.replace("agentkit_", "").replace("%s", "?"), params
            ).fetchall()
        finally:
            conn.close()
        return rows

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass for every lease in the store."""
        if self.pg is None:
            self.clock.now += seconds
        elif self.pg.execute("SELECT to_regclass('agentkit_keys') IS NOT NULL")[0][0]:
            # The database's clock cannot be moved: move the deadlines back instead.
            self.pg.execute(
                "UPDATE agentkit_keys SET lease_until = lease_until - %s", (seconds,)
            )

    def close(self) -> None:
        for store in self.made:
            store.close()
        if self.pg is not None:
            self.pg.drop()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path):
    """Every store, same tests: the semantics are one contract."""
    backend = Backend(request.param, tmp_path)
    yield backend
    backend.close()


@pytest.fixture(params=["sqlite", "postgres"])
def durable(request: pytest.FixtureRequest, tmp_path: Path):
    """The stores that several processes share."""
    backend = Backend(request.param, tmp_path)
    yield backend
    backend.close()


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "db" / "store.sqlite"


# --------------------------------------------------------------------------- helpers


def stale_unknown_claim(make_store: Backend, store: Any, key: str = "k") -> Op:
    """Leave a claim whose outcome is unknown, then let its (tiny) lease pass."""
    op = Op(UNKNOWN)
    assert store.run_once(key, op, "fp") == UNKNOWN
    make_store.advance(LEASE_PASSES)
    return op


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("ttl", [0, -1, float("nan")])
def test_claim_ttl_must_be_positive(kind: str, ttl: float, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        if kind == "memory":
            IdempotencyStore(claim_ttl_seconds=ttl)
        else:
            SQLiteIdempotencyStore(tmp_path / "s.sqlite", claim_ttl_seconds=ttl)


# --------------------------------------------------------------------------- completed keys


def test_completed_key_replays_and_runs_once(make_store) -> None:
    store, op = make_store(), Op(OK)
    assert store.run_once("k", op, "fp") == OK  # a fresh run is returned unchanged
    again = store.run_once("k", op, "fp")
    assert again == {**OK, "replayed": True}
    assert store.run_once("k", op) == {**OK, "replayed": True}  # no fingerprint: no check
    assert op.calls == 1
    assert store.result("k") == OK
    assert store.result("other") is None


def test_replay_is_a_fresh_copy(make_store) -> None:
    store, op = make_store(), Op({"ok": True, "data": {"id": 1}})
    store.run_once("k", op)
    store.run_once("k", op)["data"]["id"] = 99
    assert store.run_once("k", op)["data"] == {"id": 1}
    assert op.calls == 1


def test_other_payload_after_completion_is_a_conflict(make_store) -> None:
    store, op = make_store(), Op(OK)
    store.run_once("k", op, "fp-1")
    result = store.run_once("k", op, "fp-2")
    assert result == {"ok": False, "error": "idempotency_conflict", "retryable": False}
    assert op.calls == 1


def test_fingerprint_given_for_a_key_stored_without_one_is_a_conflict(make_store) -> None:
    store, op = make_store(), Op(OK)
    store.run_once("k", op)
    assert store.run_once("k", op, "fp")["error"] == "idempotency_conflict"
    assert op.calls == 1


def test_other_payload_while_claimed_is_a_conflict(make_store) -> None:
    store, op = make_store(), Op(UNKNOWN)
    store.run_once("k", op, "fp-1")
    assert store.run_once("k", op, "fp-2")["error"] == "idempotency_conflict"
    in_progress = {"ok": False, "error": "in_progress", "retryable": True}
    assert store.run_once("k", op, "fp-1") == in_progress
    assert op.calls == 1


# --------------------------------------------------------------------------- failures and claims


def test_failed_operation_leaves_the_key_free(make_store) -> None:
    store, op = make_store(), Op(FAILED, OK)
    assert store.run_once("k", op, "fp") == FAILED
    assert store.result("k") is None  # only ok results are stored
    assert store.run_once("k", op, "fp") == OK
    assert op.calls == 2


def test_outcome_unknown_keeps_the_claim(make_store) -> None:
    store, op = make_store(), Op(UNKNOWN, OK)
    assert store.run_once("k", op, "fp") == UNKNOWN
    lookup = Lookup(OK)
    assert store.run_once("k", op, "fp", recover=lookup)["error"] == "in_progress"
    assert (op.calls, lookup.calls) == (1, 0)  # a live claim is never recovered


def test_abandon_makes_our_own_claim_stale_at_once(make_store) -> None:
    store, op = make_store(), Op(UNKNOWN, OK)
    tokens: list[str] = []
    assert store.run_once("k", op, "fp", on_claim=tokens.append) == UNKNOWN
    lookup = Lookup(None)
    # The caller took the token: its claim stays live (never stale) until it gives it back.
    assert store.run_once("k", op, "fp", recover=lookup)["error"] == "in_progress"
    store.abandon("k", tokens[0])  # our attempt really returned: nothing of ours runs any more
    assert store.run_once("k", op, "fp", recover=lookup) == OK
    assert (op.calls, lookup.calls) == (2, 1)  # the lookup was asked before running again
    store.abandon("no-such-key", "no-such-token")  # nothing to do, no error


def test_lease_seconds_extends_the_claim(make_store) -> None:
    store, op = make_store(TINY_TTL), Op(UNKNOWN)
    store.run_once("k", op, "fp", lease_seconds=30)
    make_store.advance(LEASE_PASSES)  # past claim_ttl_seconds, well within lease_seconds
    lookup = Lookup(OK)
    assert store.run_once("k", op, "fp", recover=lookup)["error"] == "in_progress"
    assert (op.calls, lookup.calls) == (1, 0)


def test_stale_claim_with_receipt_is_settled_without_running(make_store) -> None:
    store = make_store(TINY_TTL)
    op = stale_unknown_claim(make_store, store)
    receipt = {"ok": True, "data": "found it"}
    lookup = Lookup(receipt)
    assert store.run_once("k", op, "fp", recover=lookup) == receipt
    assert (op.calls, lookup.calls) == (1, 1)
    assert store.result("k") == receipt
    assert store.run_once("k", op, "fp", recover=lookup) == {**receipt, "replayed": True}
    assert (op.calls, lookup.calls) == (1, 1)


def test_stale_claim_not_done_runs_the_operation(make_store) -> None:
    store = make_store(TINY_TTL)
    op = stale_unknown_claim(make_store, store)
    op.results = [OK]
    lookup = Lookup(None)
    assert store.run_once("k", op, "fp", recover=lookup) == OK
    assert (op.calls, lookup.calls) == (2, 1)
    assert store.result("k") == OK


@pytest.mark.parametrize(
    "answer", [RuntimeError("lookup down"), {"ok": False, "error": "x"}, "yes"]
)
def test_stale_claim_with_unknown_lookup_stays_unknown(make_store, answer: Any) -> None:
    store = make_store(TINY_TTL)
    op = stale_unknown_claim(make_store, store)
    lookup = Lookup(answer)
    expected = {"ok": False, "error": "outcome_unknown", "retryable": False}
    assert store.run_once("k", op, "fp", recover=lookup) == expected
    # The claim stays, and is still stale: the next caller asks the lookup again.
    assert store.run_once("k", op, "fp", recover=lookup) == expected
    assert (op.calls, lookup.calls) == (1, 2)
    assert store.result("k") is None


def test_stale_claim_without_lookup_is_unknown_until_released(make_store) -> None:
    store = make_store(TINY_TTL)
    op = stale_unknown_claim(make_store, store)
    op.results = [OK]
    for _ in range(2):
        assert store.run_once("k", op, "fp") == {
            "ok": False, "error": "outcome_unknown", "retryable": False,
        }
    assert op.calls == 1
    store.release("k")
    assert store.run_once("k", op, "fp") == OK
    assert op.calls == 2
    store.release("k")  # release never clears a completed result
    assert store.run_once("k", op, "fp")["replayed"] is True
    assert op.calls == 2


def test_takeover_of_a_stale_claim_is_exclusive(make_store) -> None:
    store = make_store(TINY_TTL)
    op = stale_unknown_claim(make_store, store)
    entered, go = threading.Event(), threading.Event()
    receipt = {"ok": True, "data": "found"}

    def slow_lookup() -> dict[str, Any]:
        entered.set()
        assert go.wait(WAIT)
        return receipt

    answers: list[dict[str, Any]] = []
    first = threading.Thread(
        target=lambda: answers.append(
            store.run_once("k", op, "fp", recover=slow_lookup, lease_seconds=30)
        )
    )
    first.start()
    try:
        assert entered.wait(WAIT)
        second_lookup = Lookup(receipt)
        assert store.run_once("k", op, "fp", recover=second_lookup)["error"] == "in_progress"
        assert second_lookup.calls == 0
    finally:
        go.set()
        first.join(WAIT)
    assert answers == [receipt]
    assert op.calls == 1


def test_operation_raising_releases_the_claim(make_store) -> None:
    store = make_store()
    boom = Op(raises=RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        store.run_once("k", boom, "fp")
    op = Op(OK)
    assert store.run_once("k", op, "fp") == OK
    assert (boom.calls, op.calls) == (1, 1)


def test_unstorable_ok_result_raises_and_keeps_the_key_claimed(make_store) -> None:
    store, op = make_store(), Op({"ok": True, "data": object()})
    with pytest.raises(TypeError):
        store.run_once("k", op, "fp")
    # It happened but could not be kept: nothing may run again without a lookup.
    assert store.run_once("k", op, "fp")["error"] == "outcome_unknown"
    assert op.calls == 1


# --------------------------------------------------------------------------- live claims


class Hung:
    """An operation that blocks until released: a write hung past any lease."""

    def __init__(self, result: dict[str, Any] | None = None) -> None:
        self.entered, self.go = threading.Event(), threading.Event()
        self.result = result or OK
        self.calls = 0

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        self.entered.set()
        assert self.go.wait(WAIT)
        return dict(self.result)


def test_a_claim_whose_operation_still_runs_here_is_never_stale(make_store) -> None:
    """Issue 10 point 2: a lease shorter than the hung write must not start a second one."""
    store, hung = make_store(0.1), Hung()
    answers: list[dict[str, Any]] = []
    first = threading.Thread(
        target=lambda: answers.append(store.run_once("k", hung, "fp", recover=Lookup(None)))
    )
    first.start()
    try:
        assert hung.entered.wait(WAIT)
        make_store.advance(3600)  # an hour past the 0.1 s lease: the owner is still running
        second, lookup = Op(OK), Lookup(None)
        for _ in range(3):
            assert store.run_once("k", second, "fp", recover=lookup)["error"] == "in_progress"
        assert (second.calls, lookup.calls) == (0, 0)
    finally:
        hung.go.set()
        first.join(WAIT)
    assert answers == [OK]
    assert store.run_once("k", second, "fp")["replayed"] is True
    assert (hung.calls, second.calls) == (1, 0)


def test_an_unknown_claim_stays_live_until_its_token_is_abandoned(make_store) -> None:
    store, op = make_store(0.1), Op(UNKNOWN, OK)
    tokens: list[str] = []
    assert store.run_once("k", op, "fp", on_claim=tokens.append) == UNKNOWN
    make_store.advance(3600)
    lookup = Lookup(None)
    assert store.run_once("k", op, "fp", recover=lookup)["error"] == "in_progress"
    assert (op.calls, lookup.calls) == (1, 0)
    store.abandon("k", tokens[0])
    assert store.run_once("k", op, "fp", recover=lookup) == OK
    assert (op.calls, lookup.calls) == (2, 1)


def test_abandon_acts_only_on_its_own_token(make_store) -> None:
    """A late return of the first attempt must not mark the newer live claim stale."""
    store, op = make_store(0.1), Op(UNKNOWN, UNKNOWN, OK)
    first: list[str] = []
    second: list[str] = []
    assert store.run_once("k", op, "fp", on_claim=first.append) == UNKNOWN
    store.abandon("k", first[0])  # the first attempt returned: its claim may be recovered
    lookup = Lookup(None)
    assert store.run_once("k", op, "fp", recover=lookup, on_claim=second.append) == UNKNOWN
    assert (op.calls, lookup.calls) == (2, 1)
    assert first != second
    store.abandon("k", first[0])  # late and stale: the newer claim is not touched
    make_store.advance(3600)
    assert store.run_once("k", op, "fp", recover=lookup)["error"] == "in_progress"
    assert (op.calls, lookup.calls) == (2, 1)
    store.abandon("k", second[0])
    assert store.run_once("k", op, "fp", recover=lookup) == OK
    assert (op.calls, lookup.calls) == (3, 2)


def test_without_on_claim_an_unknown_claim_is_left_to_its_lease(make_store) -> None:
    store, op = make_store(TINY_TTL), Op(UNKNOWN, OK)
    assert store.run_once("k", op, "fp") == UNKNOWN  # nobody holds a token to give back
    make_store.advance(LEASE_PASSES)
    lookup = Lookup(None)
    assert store.run_once("k", op, "fp", recover=lookup) == OK
    assert (op.calls, lookup.calls) == (2, 1)


def test_release_clears_a_live_claim(make_store) -> None:
    store, op = make_store(), Op(UNKNOWN, OK)
    assert store.run_once("k", op, "fp", on_claim=lambda token: None) == UNKNOWN
    store.release("k")  # a person checked: it did not happen
    assert store.run_once("k", op, "fp") == OK
    assert op.calls == 2


# --------------------------------------------------------------------------- threads


def test_eight_threads_run_the_operation_once(make_store) -> None:
    store = make_store()
    n = 8
    start = threading.Barrier(n, timeout=WAIT)
    others_answered = threading.Event()
    lock = threading.Lock()
    calls = 0
    answers: list[dict[str, Any]] = []

    def operation() -> dict[str, Any]:
        nonlocal calls
        with lock:
            calls += 1
        others_answered.wait(WAIT)  # hold the claim until every other thread has answered
        return dict(OK)

    def caller() -> None:
        start.wait()
        result = store.run_once("k", operation, "fp")
        with lock:
            answers.append(result)
            if sum(1 for a in answers if a != OK) == n - 1:
                others_answered.set()

    threads = [threading.Thread(target=caller) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert calls == 1
    assert len(answers) == n
    assert answers.count(OK) == 1
    rest = [a for a in answers if a != OK]
    assert all(a["error"] == "in_progress" or a.get("replayed") for a in rest)
    assert others_answered.is_set()


# --------------------------------------------------------------------------- approvals


def test_approvals_compare_and_swap(make_store) -> None:
    store = make_store()
    assert store.get_approval("a1") is None
    assert store.update_approval("a1", "pending", {"state": "approved"}) is False
    store.create_approval("a1", {"state": "pending", "tool": "send", "args": {"to": "bob"}})
    record = store.get_approval("a1")
    assert record == {"state": "pending", "tool": "send", "args": {"to": "bob"}}
    record["state"] = "mutated"  # a copy: the store is untouched
    assert store.get_approval("a1")["state"] == "pending"
    assert store.update_approval("a1", "approved", {"state": "denied"}) is False
    assert store.update_approval("a1", "pending", {"state": "approved", "n": 1}) is True
    assert store.update_approval("a1", "pending", {"state": "denied"}) is False  # used once
    assert store.get_approval("a1") == {"state": "approved", "n": 1}


def test_create_approval_inserts_only_if_absent(make_store) -> None:
    store = make_store()
    first = {"state": "pending", "tool": "send", "n": 1}
    assert store.create_approval("a1", first) == first
    assert store.create_approval("a1", {"state": "pending", "n": 2}) == first  # existing wins
    assert store.update_approval("a1", "pending", {"state": "settled", "n": 3})
    assert store.create_approval("a1", first) == {"state": "settled", "n": 3}
    assert store.get_approval("a1") == {"state": "settled", "n": 3}


def test_concurrent_create_approval_makes_one_record(make_store) -> None:
    store, n = make_store(), 8
    start = threading.Barrier(n, timeout=WAIT)
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()

    def opener(i: int) -> None:
        start.wait()
        record = store.create_approval("a1", {"state": "pending", "opener": i})
        with lock:
            answers.append(record)

    threads = [threading.Thread(target=opener, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert len(answers) == n
    assert all(a == answers[0] for a in answers)  # every opener sees the one winner
    assert store.list_approvals() == [answers[0]]


def test_list_approvals_in_creation_order_and_by_state(make_store) -> None:
    store = make_store()
    assert store.list_approvals() == []
    for i in (3, 1, 2):
        store.create_approval(f"a{i}", {"state": "pending", "i": i})
    assert store.update_approval("a3", "pending", {"state": "settled", "i": 3})
    assert [r["i"] for r in store.list_approvals()] == [3, 1, 2]  # an update keeps its place
    assert [r["i"] for r in store.list_approvals("pending")] == [1, 2]
    assert store.list_approvals("settled") == [{"state": "settled", "i": 3}]
    store.list_approvals()[0]["i"] = 99  # copies
    assert store.get_approval("a3") == {"state": "settled", "i": 3}


@pytest.mark.parametrize("record", [{"no": "state"}, {"state": 1}, ["state"]])
def test_approval_record_needs_a_state(make_store, record: Any) -> None:
    store = make_store()
    with pytest.raises(ValueError):
        store.create_approval("a1", record)
    with pytest.raises(ValueError):
        store.update_approval("a1", "pending", record)
    assert store.list_approvals() == []


# --------------------------------------------------------------------------- SQLite: durability


def test_sqlite_creates_the_directory_and_uses_the_journal_of_its_sqlite(sqlite_path: Path) -> None:
    """WAL only on a SQLite without the WAL-reset bug (issue 39): the store runs on apsw's
    bundled SQLite, which has the fix, whatever the stdlib's sqlite3 links (3.40.1 here);
    WAL is the file's (byte 18 of its header: 2), so any reader sees it."""
    with SQLiteIdempotencyStore(sqlite_path) as store:
        store.run_once("k", Op(OK))
        assert store.journal.journal_mode == "wal"
        assert sqlite_version() == tuple(map(int, apsw.sqlite_lib_version().split(".")))
        assert sqlite_version() >= (3, 51, 3)
    assert sqlite_path.exists()
    assert sqlite_path.read_bytes()[18] == 2
    conn = sqlite3.connect(sqlite_path)  # (the store is closed: another library may look)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_sqlite_restart_replays_and_keeps_approvals(sqlite_path: Path) -> None:
    op = Op(OK)
    with SQLiteIdempotencyStore(sqlite_path) as store:
        assert store.run_once("k", op, "fp", full_sync=True) == OK
        store.create_approval("a1", {"state": "pending"})
        assert store.update_approval("a1", "pending", {"state": "approved"})
    with SQLiteIdempotencyStore(sqlite_path) as store:
        assert store.run_once("k", op, "fp") == {**OK, "replayed": True}
        assert store.run_once("k", op, "other")["error"] == "idempotency_conflict"
        assert store.get_approval("a1") == {"state": "approved"}
    assert op.calls == 1


@pytest.fixture(params=["bundled", "affected"])
def bundled_or_affected(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """apsw's bundled SQLite (WAL), and one with the WAL-reset bug as an apsw built against
    an older system SQLite would report (a rollback journal: the store's other journal,
    run on the bundled SQLite for the test's few connections)."""
    if request.param == "affected":
        monkeypatch.setattr(apsw, "sqlite_lib_version", lambda: "3.40.1")
    return str(request.param)


def traced(conn: apsw.Connection, seen: Callable[[str], object]) -> None:
    """Call ``seen`` with every statement ``conn`` runs (apsw's exec tracer)."""

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        seen(sql)
        return True

    conn.set_exec_trace(tracer)


@pytest.mark.parametrize("full_sync", [False, True])
def test_sqlite_only_the_claim_is_flushed_on_its_own_connection(
    sqlite_path: Path, bundled_or_affected: str, full_sync: bool
) -> None:
    """Every claim, full_sync or not, commits on a connection that is always
    synchronous=FULL; in WAL the result on one that is always NORMAL (a lost result leaves
    the claim for the lookup), in a rollback journal on the same, FULL, connection; no
    PRAGMA is toggled per call."""
    with SQLiteIdempotencyStore(sqlite_path) as store:
        wal = store.journal.journal_mode == "wal"
        assert wal == (bundled_or_affected == "bundled") == (journal_choice().journal_mode == "wal")
        store.run_once("warm-up", Op(OK), full_sync=full_sync)  # a connection of each level
        statements: list[tuple[int, str]] = []
        pools = {claims: idle for claims, idle in store._idle.items() if idle}
        assert sorted(pools) == ([False, True] if wal else [False])
        for claims, idle in pools.items():
            [conn] = idle
            level = conn.execute("PRAGMA synchronous").fetchone()[0]
            assert level == (2 if claims or not wal else 1)  # FULL, NORMAL
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == store.journal.journal_mode

            def trace(statement: str, level: int = level) -> None:
                statements.append((level, statement))

            traced(conn, trace)
        assert store.run_once("k", Op(OK), "fp", full_sync=full_sync) == OK
        claimed = [level for level, sql in statements if sql.startswith("INSERT OR IGNORE")]
        results = [level for level, sql in statements if sql.startswith("UPDATE keys SET result")]
        assert (claimed, results) == ([2], [1 if wal else 2])
        assert not any("PRAGMA" in sql for _, sql in statements)
        assert len(statements) == 2  # the claim, the result: no read, no BEGIN, no COMMIT


def _files(path: Path) -> dict[str, tuple[int, int]]:
    """The size and modification time of the database and its log or journal."""
    found = {}
    for name in (str(path), f"{path}-wal", f"{path}-journal"):
        with contextlib.suppress(FileNotFoundError):
            stat = os.stat(name)
            found[name] = (stat.st_size, stat.st_mtime_ns)
    return found


def test_sqlite_a_new_key_is_one_insert_and_a_replay_writes_nothing(
    sqlite_path: Path, bundled_or_affected: str
) -> None:
    """The claim is the INSERT itself (no read before it); a key that has a row is read after
    its INSERT found it, and that INSERT changed nothing and wrote nothing to the file, its
    log or its journal (so a replay flushes nothing either)."""
    with SQLiteIdempotencyStore(sqlite_path) as store:
        op = Op(OK)
        assert store.run_once("k", op, "fp", full_sync=True) == OK
        statements: list[str] = []
        conns = [conn for idle in store._idle.values() for conn in idle]
        wal = store.journal.journal_mode == "wal"
        assert len(conns) == (2 if wal else 1)  # WAL: NORMAL (the result), FULL (the claim)
        for conn in conns:
            traced(conn, statements.append)
        changes, files = sum(conn.total_changes() for conn in conns), _files(sqlite_path)
        assert store.run_once("k", op, "fp", full_sync=True) == {**OK, "replayed": True}
        assert store.run_once("k", op, "fp") == {**OK, "replayed": True}
        assert store.run_once("k", op, "other")["error"] == "idempotency_conflict"
        assert op.calls == 1
        assert sum(conn.total_changes() for conn in conns) == changes
        assert _files(sqlite_path) == files
        assert [sql.split()[0] for sql in statements] == ["INSERT", "SELECT"] * 3
        statements.clear()
        new = Op(OK)
        assert store.run_once("new", new) == OK and new.calls == 1
        assert [sql.split()[0] for sql in statements] == ["INSERT", "UPDATE"]


def test_sqlite_replays_a_completed_key_when_the_file_cannot_be_written(
    sqlite_path: Path,
) -> None:
    """A replay needs no write: when the claim's INSERT fails (a full disk, a read-only
    file), a completed key still replays; a new key is busy, and nothing runs."""
    with SQLiteIdempotencyStore(sqlite_path) as store:
        op = Op(OK)
        assert store.run_once("k", op, "fp") == OK
        [conn] = store._idle[True]  # the claims' connection (WAL: FULL)
        conn.execute("PRAGMA query_only = 1")  # every write now fails, as on a full disk
        assert store.run_once("k", op, "fp") == {**OK, "replayed": True}
        assert store.run_once("k", op, "other")["error"] == "idempotency_conflict"
        assert store.run_once("new", op, "fp") == BUSY
        assert op.calls == 1
        assert store._idle[True] == []  # the connection that could not write is closed
        assert store.run_once("new", op, "fp") == OK and op.calls == 2  # a new one can


def test_sqlite_a_connection_given_back_after_close_is_closed(sqlite_path: Path) -> None:
    """A connection in use while the store closes is closed when it is given back, never
    left open in the pool."""
    store = SQLiteIdempotencyStore(sqlite_path)
    conn = store._checkout(False)  # in use, as during a claim
    store.close()
    store._checkin(conn, healthy=True)
    assert store._idle == {False: [], True: []}
    with pytest.raises(apsw.ConnectionClosedError):
        conn.execute("SELECT 1")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sqlite_a_forked_child_opens_its_own_connections(sqlite_path: Path) -> None:
    with SQLiteIdempotencyStore(sqlite_path) as store:
        assert store.run_once("parent", Op(OK)) == OK
        pools = {level: list(idle) for level, idle in store._idle.items()}
        inherited = [conn for idle in pools.values() for conn in idle]
        assert len(inherited) == 2  # WAL: the claims' connection and the results'
        [reader] = pools[False]
        pid = os.fork()
        if pid == 0:  # the child: its own connections, the parent's set aside (never closed)
            status = 1
            try:
                child_op = Op(OK)
                ok = store.run_once("child", child_op) == OK and child_op.calls == 1
                own = [conn for idle in store._idle.values() for conn in idle]
                fresh = len(own) == 2 and not {id(c) for c in own} & {id(c) for c in inherited}
                status = 0 if ok and fresh and store._inherited == inherited else 1
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert store._idle == pools  # the parent's pools are its own
        assert reader.execute("SELECT count(*) FROM keys").fetchone() == (2,)
        assert store.result("child") == OK


def test_sqlite_closed_store_refuses_work(sqlite_path: Path) -> None:
    store = SQLiteIdempotencyStore(sqlite_path)
    store.close()
    store.close()  # idempotent
    op = Op(OK)
    assert store.run_once("k", op) == {"ok": False, "error": "busy", "retryable": True}
    with pytest.raises(StoreError, match="closed"):
        store.result("k")
    assert op.calls == 0


# --------------------------------------------------------------------------- processes


#: The worker's driver: run_once, or the store's steps from an event loop (async twins).
DRIVERS = pytest.mark.parametrize("driver", ["sync", "async"])


def start_workers(
    mode: str, durable: Backend, work: Path, n: int, key: str = "k", driver: str = "sync"
) -> None:
    """Run ``n`` workers at once on the durable store; each must exit 0."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), mode, durable.spec, key, str(work), str(n)],
            env={**worker_env(), "AGENTKIT_TEST_DRIVER": driver},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(n)
    ]
    try:
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


@DRIVERS
def test_four_processes_run_the_operation_once(
    durable: Backend, tmp_path: Path, driver: str
) -> None:
    n = 4
    start_workers("race", durable, tmp_path, n, driver=driver)
    assert len(log_lines(tmp_path / "ops.log")) == 1
    answers = [json.loads(line) for line in log_lines(tmp_path / "answers")]
    assert len(answers) == n
    fresh = [a for a in answers if a.get("ok") and not a.get("replayed")]
    assert len(fresh) == 1
    others = [a for a in answers if a not in fresh]
    assert all(a.get("error") == "in_progress" or a.get("replayed") for a in others)


def test_four_processes_by_fifty_keys_run_each_key_exactly_once(
    durable: Backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 14's contention figure: 4 processes × 50 keys against one database."""
    n, keys = 4, 50
    started = time.perf_counter()
    start_workers("many", durable, tmp_path, n)
    elapsed = time.perf_counter() - started
    runs = log_lines(tmp_path / "ops.log")
    assert sorted(runs) == sorted(f"k-{i}" for i in range(keys))  # each key ran exactly once
    answers = [json.loads(line) for line in log_lines(tmp_path / "answers")]
    assert len(answers) == n * keys
    for a in answers:
        assert a.get("ok") or a.get("error") == "in_progress", a
    fresh = [a["key"] for a in answers if a.get("ok") and not a.get("replayed")]
    assert sorted(fresh) == sorted(runs)  # every run was answered fresh exactly once
    with capsys.disabled():
        print(f"\n[{durable.kind}] {n} processes x {keys} keys: {len(runs)} runs,"
              f" {len(answers)} answers, {elapsed:.2f} s")
    store = durable()
    assert all(store.result(f"k-{i}") is not None for i in range(keys))


def run_worker(
    mode: str, durable: Backend, work: Path, driver: str = "sync"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WORKER), mode, durable.spec, "k", str(work)],
        env={**worker_env(), "AGENTKIT_TEST_DRIVER": driver},
        capture_output=True, text=True, timeout=60, check=False,
    )


@DRIVERS
def test_crash_after_the_write_is_recovered_without_a_second_write(
    durable: Backend, tmp_path: Path, driver: str
) -> None:
    """A child claims, writes and is SIGKILLed; a new process's status lookup recovers."""
    child = run_worker("crash_after_write", durable, tmp_path, driver)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert len(log_lines(tmp_path / "ops.log")) == 1
    claims = durable.sql("SELECT host, pid FROM agentkit_keys WHERE result IS NULL")
    assert len(claims) == 1  # the dead child's claim is still there, lease unexpired
    recovered = run_worker("recover", durable, tmp_path, driver)  # the dead pid is gone
    assert recovered.returncode == 0, recovered.stderr
    assert [json.loads(line) for line in log_lines(tmp_path / "answers")] == [
        {"ok": True, "data": "sent"}
    ]
    op = Op(OK)
    store = durable()
    assert store.run_once("k", op, "fp")["replayed"] is True
    assert op.calls == 0
    assert len(log_lines(tmp_path / "ops.log")) == 1  # no key ran twice


@DRIVERS
def test_crash_before_the_write_runs_once_after_recovery(
    durable: Backend, tmp_path: Path, driver: str
) -> None:
    child = run_worker("crash_before_write", durable, tmp_path, driver)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert len(log_lines(tmp_path / "started")) == 1
    assert log_lines(tmp_path / "ops.log") == []
    for _ in range(2):  # the first new process writes; the second finds it done
        recovered = run_worker("recover", durable, tmp_path, driver)
        assert recovered.returncode == 0, recovered.stderr
    answers = [json.loads(line) for line in log_lines(tmp_path / "answers")]
    assert answers == [{"ok": True, "data": "sent"}, {"ok": True, "data": "sent", "replayed": True}]
    assert len(log_lines(tmp_path / "ops.log")) == 1


@DRIVERS
def test_crash_before_the_claim_leaves_the_key_free(
    durable: Backend, tmp_path: Path, driver: str
) -> None:
    child = run_worker("crash_before_claim", durable, tmp_path, driver)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert durable.sql("SELECT key FROM agentkit_keys") == []
    recovered = run_worker("recover", durable, tmp_path, driver)
    assert recovered.returncode == 0, recovered.stderr
    assert [json.loads(line) for line in log_lines(tmp_path / "answers")] == [
        {"ok": True, "data": "sent"}
    ]
    assert len(log_lines(tmp_path / "ops.log")) == 1


@DRIVERS
def test_crash_after_the_result_replays_it(durable: Backend, tmp_path: Path, driver: str) -> None:
    child = run_worker("crash_after_result", durable, tmp_path, driver)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert len(log_lines(tmp_path / "ops.log")) == 1
    assert durable.sql("SELECT token, result FROM agentkit_keys") == [
        (None, '{"data":"sent","ok":true}')
    ]
    recovered = run_worker("recover", durable, tmp_path, driver)
    assert recovered.returncode == 0, recovered.stderr
    assert [json.loads(line) for line in log_lines(tmp_path / "answers")] == [
        {"ok": True, "data": "sent", "replayed": True}
    ]
    assert len(log_lines(tmp_path / "ops.log")) == 1  # no key ran twice


def test_a_live_owner_is_never_taken_over_until_it_dies(durable: Backend, tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, str(WORKER), "hold", durable.spec, "k", str(tmp_path)],
        env=worker_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "claimed"
        op, lookup = Op(OK), Lookup(None)
        store = durable()
        assert store.run_once("k", op, "fp", recover=lookup)["error"] == "in_progress"
        assert (op.calls, lookup.calls) == (0, 0)
        child.kill()
        child.wait(WAIT)
        assert store.run_once("k", op, "fp", recover=lookup) == OK
        assert (op.calls, lookup.calls) == (1, 1)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(WAIT)
        if child.stdin is not None:
            child.stdin.close()
        if child.stdout is not None:
            child.stdout.close()


def test_a_claim_from_another_host_is_judged_by_its_lease_alone(durable: Backend) -> None:
    """A pid means nothing across machines: a foreign claim naming a dead pid stays live."""
    store = durable(TINY_TTL)
    assert store.run_once("k", Op(UNKNOWN), "fp") == UNKNOWN
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    durable.sql(
        "UPDATE agentkit_keys SET host = %s, pid = %s, start_time = NULL,"
        " lease_until = lease_until + 3600",
        ("worker-7.elsewhere", int(gone)),
    )
    op, lookup = Op(OK), Lookup(None)
    assert store.run_once("k", op, "fp", recover=lookup)["error"] == "in_progress"
    assert (op.calls, lookup.calls) == (0, 0)  # that pid is dead *here*: no matter
    durable.advance(3600 + LEASE_PASSES)  # the foreign lease passes
    assert store.run_once("k", op, "fp", recover=lookup) == OK
    assert (op.calls, lookup.calls) == (1, 1)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_claim_of_an_earlier_process_with_our_pid_is_stale(durable: Backend) -> None:
    """A container restart gives the new process the old pid: the start time tells them apart."""
    op = Op(UNKNOWN, OK)
    store = durable()
    store.run_once("k", op, "fp")
    assert store.run_once("k", op, "fp")["error"] == "in_progress"  # ours, alive
    durable.sql("UPDATE agentkit_keys SET start_time = start_time - 1")
    assert store.run_once("k", op, "fp", recover=Lookup(None)) == OK
    assert op.calls == 2


def _start_time(pid: int) -> int:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return int(data[data.rindex(b")") + 2 :].split()[19])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_reused_pid_is_told_apart_by_its_start_time(durable: Backend) -> None:
    """A claim names a live pid (our parent): alive if the start time matches, else gone."""
    parent = os.getppid()
    op, lookup = Op(UNKNOWN, OK), Lookup(None)
    store = durable()
    store.run_once("k", op, "fp")
    durable.sql(
        "UPDATE agentkit_keys SET pid = %s, start_time = %s", (parent, _start_time(parent))
    )
    assert store.run_once("k", op, "fp", recover=lookup)["error"] == "in_progress"
    assert (op.calls, lookup.calls) == (1, 0)
    durable.sql("UPDATE agentkit_keys SET start_time = start_time + 1")
    assert store.run_once("k", op, "fp", recover=lookup) == OK
    assert (op.calls, lookup.calls) == (2, 1)


# --------------------------------------------------------------------------- memory: max_keys


def test_memory_max_keys_evicts_the_oldest_completed_key() -> None:
    store = IdempotencyStore(max_keys=2)
    ops = {k: Op(OK) for k in ("k1", "k2", "k3")}
    for k, op in ops.items():
        assert store.run_once(k, op, "fp") == OK
    assert store.result("k1") is None  # evicted: the oldest completed
    assert store.run_once("k3", ops["k3"], "fp")["replayed"] is True
    assert store.run_once("k2", ops["k2"], "fp")["replayed"] is True
    assert store.run_once("k1", ops["k1"], "fp") == OK  # forgotten, so it runs again
    assert [op.calls for op in ops.values()] == [2, 1, 1]


def test_memory_max_keys_never_evicts_a_claim() -> None:
    store = IdempotencyStore(max_keys=1)
    held = Op(UNKNOWN)
    assert store.run_once("held", held, "fp") == UNKNOWN
    for i in range(5):
        store.run_once(f"done-{i}", Op(OK), "fp")
    again = Op(OK)
    assert store.run_once("held", again, "fp")["error"] == "in_progress"
    assert (held.calls, again.calls) == (1, 0)


@pytest.mark.parametrize("max_keys", [0, -1, 1.5, "10"])
def test_memory_max_keys_must_be_a_positive_int(max_keys: Any) -> None:
    with pytest.raises(ValueError):
        IdempotencyStore(max_keys=max_keys)


# --------------------------------------------------------------------------- SQLite: failures


BUSY = {"ok": False, "error": "busy", "retryable": True}


@pytest.fixture
def locked_db(sqlite_path: Path):
    """A second connection that can hold the database's write lock (apsw, the store's own
    SQLite: locks between two SQLite libraries in one process do not see each other)."""
    SQLiteIdempotencyStore(sqlite_path).close()
    conn = apsw.Connection(str(sqlite_path))
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


def test_sqlite_locked_before_the_claim_is_busy_and_runs_nothing(
    sqlite_path: Path, locked_db: apsw.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    store = SQLiteIdempotencyStore(sqlite_path, busy_timeout_seconds=0.01)
    op = Op(OK)
    locked_db.execute("BEGIN IMMEDIATE")
    with caplog.at_level("ERROR", logger="agentkit"):
        assert store.run_once("k", op, "fp") == BUSY
    assert op.calls == 0
    assert str(sqlite_path) in caplog.text and "locked" in caplog.text
    locked_db.execute("ROLLBACK")
    assert store.run_once("k", op, "fp") == OK  # nothing was claimed: the key is free
    assert op.calls == 1
    store.close()


def test_sqlite_locked_past_the_busy_timeout_still_replays_a_completed_key(
    sqlite_path: Path, locked_db: apsw.Connection
) -> None:
    """The claim's INSERT waits for the write lock even for a completed key; past the busy
    timeout the key is read, and a completed one replays (a replay needs no write)."""
    store = SQLiteIdempotencyStore(sqlite_path, busy_timeout_seconds=0.01)
    op = Op(OK)
    assert store.run_once("k", op, "fp") == OK
    locked_db.execute("BEGIN IMMEDIATE")
    assert store.run_once("k", op, "fp") == {**OK, "replayed": True}
    assert store.run_once("k", op, "other")["error"] == "idempotency_conflict"
    assert store.run_once("new", op, "fp") == BUSY
    assert op.calls == 1
    locked_db.execute("ROLLBACK")
    store.close()


def test_sqlite_failing_after_the_operation_ran_is_outcome_unknown(
    sqlite_path: Path, locked_db: apsw.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    store = SQLiteIdempotencyStore(sqlite_path, busy_timeout_seconds=0.01, clock=Clock())
    calls = 0

    def operation() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        locked_db.execute("BEGIN IMMEDIATE")  # the store loses its database mid-call
        return dict(OK)

    with caplog.at_level("ERROR", logger="agentkit"):
        assert store.run_once("k", operation, "fp") == UNKNOWN
    assert calls == 1
    assert str(sqlite_path) in caplog.text and "outcome unknown" in caplog.text
    locked_db.execute("ROLLBACK")
    # The write may have landed: nothing runs again without a lookup.
    assert store.run_once("k", operation, "fp")["error"] in ("in_progress", "outcome_unknown")
    assert calls == 1
    store.close()


def test_sqlite_other_methods_raise_store_error_naming_the_file(
    sqlite_path: Path, locked_db: apsw.Connection
) -> None:
    store = SQLiteIdempotencyStore(sqlite_path, busy_timeout_seconds=0.01)
    locked_db.execute("BEGIN EXCLUSIVE")
    for call in (
        lambda: store.create_approval("a1", {"state": "pending"}),
        lambda: store.update_approval("a1", "pending", {"state": "settled"}),
        lambda: store.abandon("k", "token"),
        lambda: store.release("k"),
    ):
        with pytest.raises(StoreError, match="locked") as info:
            call()
        assert str(sqlite_path) in str(info.value)
    store.close()


@pytest.fixture
def read_only():
    """Make a file or folder read-only for this process, root included.

    Root ignores permission bits, so as root the immutable attribute (``chattr +i``) is
    what makes a path unwritable; it is cleared at the end so the folder can be removed.
    """
    made: list[Path] = []

    def make(path: Path) -> None:
        if os.geteuid() != 0:
            path.chmod(0o555 if path.is_dir() else 0o444)
        elif subprocess.run(["chattr", "+i", str(path)], check=False, capture_output=True).returncode:
            pytest.skip("as root, read-only needs chattr +i, which is not available here")
        made.append(path)
        assert not os.access(path, os.W_OK)

    yield make
    for path in made:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        else:
            path.chmod(0o755 if path.is_dir() else 0o644)


def test_sqlite_refuses_a_read_only_folder(tmp_path: Path, read_only) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    read_only(folder)
    path = folder / "store.sqlite"
    with pytest.raises(StoreError, match="read-only") as info:
        SQLiteIdempotencyStore(path)
    assert str(path) in str(info.value) and "folder" in str(info.value)
    assert not path.exists()


def test_sqlite_refuses_a_read_only_file(tmp_path: Path, read_only) -> None:
    path = tmp_path / "store.sqlite"
    SQLiteIdempotencyStore(path).close()
    read_only(path)
    with pytest.raises(StoreError, match="the file is read-only") as info:
        SQLiteIdempotencyStore(path)
    assert str(path) in str(info.value)


def test_sqlite_refuses_a_folder_that_cannot_be_made(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    path = blocker / "sub" / "store.sqlite"
    with pytest.raises(StoreError, match="cannot be created") as info:
        SQLiteIdempotencyStore(path)
    assert str(path) in str(info.value)


def test_sqlite_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a database\n" * 200)
    with pytest.raises(StoreError, match="not a usable SQLite database") as info:
        SQLiteIdempotencyStore(path)
    assert str(path) in str(info.value)
    assert path.read_text().startswith("these are my notes")  # left as it was


def test_sqlite_refuses_a_folder_given_as_the_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a folder"):
        SQLiteIdempotencyStore(tmp_path)


# --------------------------------------------------------------------------- approvals: processes


def test_an_approval_opened_by_another_process_is_listed_here(durable: Backend, tmp_path: Path) -> None:
    store = durable()
    store.create_approval("mine", {"state": "pending", "opened_by": os.getpid()})
    child = run_worker("open_approval", durable, tmp_path)  # key "k" is the approval id
    assert child.returncode == 0, child.stderr
    [theirs] = [json.loads(line) for line in log_lines(tmp_path / "answers")]
    assert theirs["opened_by"] != os.getpid()
    assert store.list_approvals("pending") == [
        {"state": "pending", "opened_by": os.getpid()}, theirs,
    ]


# --------------------------------------------------------------------------- PostgreSQL only


@pytest.fixture
def pg(tmp_path: Path):
    backend = Backend("postgres", tmp_path)
    yield backend
    backend.close()


def own_pg_cluster() -> None:
    """Skip (never fail, in CI too) unless AGENTKIT_TEST_PG_DSN is the server of
    tools/pg_cluster.sh: only that one may be restarted or stopped by a test. Called before
    the test touches anything, so its fixtures tear down as usual."""
    state = os.environ.get("AGENTKIT_PG_STATE", "")
    try:
        text = Path(state).read_text() if state else ""
    except OSError:
        text = ""
    if not text or f"PG_DSN='{PG_DSN}'" not in text:
        pytest.skip(
            "this test restarts the server, so it needs the cluster of tools/pg_cluster.sh"
            " (AGENTKIT_PG_STATE does not describe AGENTKIT_TEST_PG_DSN's server)"
        )
    ServerUse.exclusive()


def pg_cluster(command: str) -> None:
    """Restart, stop or start the test server (it must be tools/pg_cluster.sh's)."""
    own_pg_cluster()
    subprocess.run([str(PG_CLUSTER), command], check=True, capture_output=True, timeout=120)


def test_pg_a_test_that_waited_for_the_server_alone_has_its_own_session_again(
    pg: Backend,
) -> None:
    """While a test waits for the server alone, its shared lock is gone (a failed flock
    conversion drops it), and another process's test may end every session meanwhile: once
    it has the server, its schema answers on a live admin session (it failed with
    AdminShutdown in pg.sql under pytest -n 2's --dist load)."""
    import psycopg

    assert pg.pg is not None
    ended = pg.sql("SELECT pg_backend_pid()")[0][0]
    with psycopg.connect(pg_dsn(), autocommit=True) as other:  # the other process's test
        other.execute("SELECT pg_terminate_backend(%s, 5000)", (ended,))
    ServerUse.exclusive()
    assert pg.sql("SELECT current_schema(), pg_backend_pid() <> %s", (ended,)) == [
        (pg.pg.name, True)]
    store, op = pg(), Op(OK)
    assert store.run_once("k", op, "fp") == OK
    assert pg.sql("SELECT count(*) FROM agentkit_keys") == [(1,)]


def test_pg_schema_is_created_once_by_workers_starting_together(pg: Backend) -> None:
    n = 6
    stores = [pg() for _ in range(n)]
    start = threading.Barrier(n, timeout=WAIT)
    answers: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def first_use(store: Any) -> None:
        start.wait()
        try:
            answers.append(store.run_once("k", Op(OK), "fp"))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=first_use, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert errors == []
    assert sum(1 for a in answers if a == OK) == 1
    assert pg.sql("SELECT version FROM agentkit_schema") == [(3,)]


def _truncatable(pg: Backend) -> list[tuple[str, bool]]:
    """Each store table, and whether VACUUM may truncate it (its ``vacuum_truncate``)."""
    return [(name, not {"vacuum_truncate=false", "vacuum_truncate=off"} & set(options or []))
            for name, options in pg.sql(
                "SELECT c.relname, c.reloptions FROM pg_class AS c"
                " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
                " WHERE n.nspname = current_schema()"
                " AND c.relname IN ('agentkit_keys', 'agentkit_approvals') ORDER BY c.relname")]


def test_pg_vacuum_never_truncates_the_tables_a_purge_empties(pg: Backend) -> None:
    """After a purge empties a table's end, VACUUM's truncation would hold every claim behind
    an ACCESS EXCLUSIVE lock: the store's tables are made untruncatable once, new ones and
    existing ones alike (a table of an older kit gets it when a store first opens it)."""
    store = pg()
    assert store.run_once("k", Op(OK), "fp") == OK
    assert _truncatable(pg) == [("agentkit_approvals", False), ("agentkit_keys", False)]
    pg.sql("ALTER TABLE agentkit_keys RESET (vacuum_truncate)")  # as an older kit left it
    assert _truncatable(pg) == [("agentkit_approvals", False), ("agentkit_keys", True)]
    again = pg()
    assert again.run_once("k", Op(OK), "fp") == {**OK, "replayed": True}
    assert _truncatable(pg) == [("agentkit_approvals", False), ("agentkit_keys", False)]
    # Once set, a store that opens the tables alters nothing (an ALTER rewrites the table's
    # catalog row, a new xmin).
    def catalog_rows() -> list[tuple[Any, ...]]:
        return pg.sql("SELECT relname, xmin::text FROM pg_class WHERE relname IN"
                      " ('agentkit_keys', 'agentkit_approvals')"
                      " AND relnamespace = (SELECT oid FROM pg_namespace"
                      " WHERE nspname = current_schema()) ORDER BY relname")

    rows = catalog_rows()
    assert pg().run_once("k", Op(OK), "fp") == {**OK, "replayed": True}
    assert catalog_rows() == rows


def test_pg_a_newer_schema_is_refused_with_a_clear_error(
    pg: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    pg().result("k")  # creates the schema
    pg.sql("INSERT INTO agentkit_schema (version) VALUES (99)")
    store, op = pg(), Op(OK)
    with pytest.raises(StoreError, match="schema version 99, newer than this agentkit"):
        store.result("k")
    with caplog.at_level("ERROR", logger="agentkit"):
        assert store.run_once("k", op, "fp") == BUSY
    assert op.calls == 0
    assert "schema version 99" in caplog.text


def test_pg_commits_wait_for_the_wal_flush_on_the_durable_pool_only(pg: Backend) -> None:
    store = pg()
    store.result("k")
    with store._current_pool(True).connection() as conn:  # claims, full_sync, approvals
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
    with store._current_pool(False).connection() as conn:  # results, freed claims
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)


def test_pg_only_claims_and_approvals_wait_for_the_flush(
    pg: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim (and every approval) is durable before the call goes on; a stored result may
    skip the flush wait, even for full_sync (a lost one leaves the claim for the lookup).
    Each level has its own connections: nothing is toggled per call."""
    import psycopg

    store = pg(pool_size=1)  # one session per level
    store.result("warm-up")
    durable_sessions = set()
    for level in (True, False):
        with store._current_pool(level).connection() as conn:
            setting = conn.execute("SHOW synchronous_commit").fetchone()
            assert setting == ("on" if level else "off",)
            if level:
                durable_sessions.add(conn.info.backend_pid)
    sent: list[tuple[str, bool]] = []
    execute = psycopg.Connection.execute

    def recording(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append((str(query), self.info.backend_pid in durable_sessions))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", recording)
    for full_sync in (False, True):
        sent.clear()
        assert store.run_once(f"k{full_sync}", Op(OK), "fp", full_sync=full_sync) == OK
        [(claim, claim_durable), (result, result_durable)] = sent
        assert claim.startswith("WITH mine AS (INSERT") and claim_durable
        assert result.startswith("UPDATE agentkit_keys SET result") and not result_durable
    sent.clear()
    store.create_approval("a1", {"state": "pending"})
    assert sent and all(durable for _, durable in sent)
    assert not any("synchronous_commit" in query for query, _ in sent)


def test_pg_lease_deadlines_come_from_the_database_clock(pg: Backend) -> None:
    store = pg(claim_ttl_seconds=300)
    assert store.run_once("k", Op(UNKNOWN), "fp") == UNKNOWN
    [(behind,)] = pg.sql(
        "SELECT lease_until - extract(epoch FROM clock_timestamp()) FROM agentkit_keys"
    )
    assert 290 < behind <= 300


def test_pg_killed_connections_are_replaced_before_the_next_call(pg: Backend) -> None:
    ServerUse.exclusive()  # it ends every session of the database, other processes' too
    store, op = pg(), Op(OK, OK)
    assert store.run_once("a", op, "fp") == OK
    # The store's sessions end (and their sockets close) before the function returns.
    pg.sql(
        "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    assert store.run_once("b", op, "fp") == OK
    assert store.run_once("a", op, "fp")["replayed"] is True
    assert op.calls == 2


def test_pg_a_connection_killed_mid_call_is_busy_or_ok_never_an_error(pg: Backend) -> None:
    ServerUse.exclusive()  # it ends every session of the database, other processes' too
    store, op = pg(pool_size=1), Op(OK, OK)  # one connection: both steps of a call share it
    assert store.run_once("a", op, "fp") == OK
    pg.sql(  # no wait: the next call may find its connection dying under it
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    first = store.run_once("b", op, "fp")
    assert first in (OK, BUSY)
    assert store.run_once("b", op, "fp") in (OK, {**OK, "replayed": True})
    assert op.calls == 2  # b ran once, whichever way the first try went


def test_pg_a_server_restart_between_two_calls_costs_nothing(pg: Backend) -> None:
    own_pg_cluster()
    store, op = pg(), Op(OK, OK)
    assert store.run_once("a", op, "fp") == OK
    pg.pg.admin.close()  # type: ignore[union-attr]
    pg_cluster("restart")
    pg.pg.reconnect()  # type: ignore[union-attr]
    assert store.run_once("b", op, "fp") == OK
    assert store.run_once("a", op, "fp")["replayed"] is True  # semantics hold: stored
    assert op.calls == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_pg_a_forked_child_opens_its_own_connections(pg: Backend) -> None:
    store, op = pg(), Op(OK)
    assert store.run_once("parent-1", op, "fp") == OK
    pid = os.fork()
    if pid == 0:  # the child: the parent's pool must not be touched
        try:
            ok = store.run_once("child", lambda: {"ok": True, "data": "child"}, "fp")["ok"]
        finally:
            os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.run_once("parent-2", op, "fp") == OK  # the parent's sessions still work
    assert store.result("child") == {"ok": True, "data": "child"}
    assert op.calls == 2


def runner_with(store: Any, calls: list[int]) -> Any:
    from agentkit import ToolRegistry, ToolRunner, ToolSpec

    def save(name: str) -> dict[str, Any]:
        calls.append(1)
        return {"saved": name}

    spec = ToolSpec("save", "Save a file.", "reversible_write", 5.0, 3, 200, save)
    return ToolRunner(ToolRegistry([spec]), store=store, sleep=lambda s: None)


def test_pg_server_down_is_busy_through_the_runner_and_nothing_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pg_dsn()  # the driver is installed (skip or fail otherwise)
    calls: list[int] = []
    port = free_port()  # nothing listens there: a server that is down
    store = PostgresIdempotencyStore(
        f"postgresql://agent:secret@127.0.0.1:{port}/jobs", connect_timeout_seconds=0.5
    )
    try:
        runner = runner_with(store, calls)
        with caplog.at_level("ERROR", logger="agentkit"):
            result = runner.call("save", {"name": "a.md"})
        assert result["error"] == "busy" and result["retryable"] is True
        assert calls == []
        assert f"127.0.0.1:{port}/jobs" in caplog.text and "no connection" in caplog.text
        assert "secret" not in caplog.text and "secret" not in repr(store)
    finally:
        store.close()


def test_pg_server_stopped_then_started_busy_then_works(
    pg: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    own_pg_cluster()
    calls: list[int] = []
    store = PostgresIdempotencyStore(pg.pg.dsn, connect_timeout_seconds=1)  # type: ignore[union-attr]
    pg.made.append(store)
    runner = runner_with(store, calls)
    assert runner.call("save", {"name": "a.md"})["ok"] is True
    pg.pg.admin.close()  # type: ignore[union-attr]
    pg_cluster("down")
    try:
        with caplog.at_level("ERROR", logger="agentkit"):
            result = runner.call("save", {"name": "b.md"})
        assert result["error"] == "busy"
        assert calls == [1]
        assert "could not claim key" in caplog.text
    finally:
        pg_cluster("up")
        pg.pg.reconnect()  # type: ignore[union-attr]
    assert runner.call("save", {"name": "b.md"})["ok"] is True
    assert runner.call("save", {"name": "a.md"})["replayed"] is True
    assert calls == [1, 1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_pg_restart_tests_skip_on_a_server_not_started_by_pg_cluster(
    pg: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AGENTKIT_TEST_PG_DSN may point at any server (README): a test that would restart it
    skips before it touches anything, and its fixture then tears down cleanly."""
    monkeypatch.setenv("AGENTKIT_PG_STATE", str(pg.tmp_path / "no-such-state.env"))
    with pytest.raises(pytest.skip.Exception, match="cluster of tools/pg_cluster.sh"):
        test_pg_a_server_restart_between_two_calls_costs_nothing(pg)
    assert pg.pg is not None and not pg.pg.admin.closed  # the fixture can drop its schema


def test_pg_the_dsn_and_its_password_stay_private(pg: Backend) -> None:
    from psycopg.conninfo import make_conninfo

    dsn = make_conninfo(pg.pg.dsn, password="s3cret-pw")  # type: ignore[union-attr]
    store = PostgresIdempotencyStore(dsn)
    try:
        public = {k: v for k, v in vars(store).items() if not k.startswith("_")}
        assert "s3cret-pw" not in repr(public) + repr(store)
        assert not hasattr(store, "dsn")
        assert store.address.startswith("postgresql://postgres@127.0.0.1:")
    finally:
        store.close()


# --------------------------------------------------------------------------- PostgreSQL: round trips


class RoundTrips:
    """A TCP proxy in front of the test server that counts round trips: one each time the
    server answers after the client has sent something. A statement queued in a pipeline
    travels in the same trip as the rest; an empty Sync costs one. A message that asks for
    no answer costs none, even when it leaves after the answer: psycopg closes a pipeline
    with a Sync and then a Flush, and that Flush may reach the proxy after the Sync's
    answer has passed through it (counting the client's sends instead counted it, now and
    then, as a trip of its own)."""

    def __init__(self, dsn: str, port: int = 0) -> None:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        parts = conninfo_to_dict(dsn)
        self.upstream = (str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432))
        self.listener = socket.create_server(("127.0.0.1", port))
        self.dsn = make_conninfo(dsn, host="127.0.0.1", port=self.listener.getsockname()[1])
        self.trips = 0
        self.lock = threading.Lock()
        self.sockets: list[Any] = []
        self.closed = False
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            turn = ["server"]  # who sent last on this connection
            with self.lock:
                if self.closed:  # accepted while closing: no connection outlives close()
                    client.close()
                    server.close()
                    return
                self.sockets += [client, server]
            for src, dst, side in ((client, server, "client"), (server, client, "server")):
                threading.Thread(target=self.pump, args=(src, dst, side, turn), daemon=True).start()

    def pump(self, src: Any, dst: Any, side: str, turn: list[str]) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:  # one side left: both go
                _shut_down(src, dst)
                return
            with self.lock:  # counted before the client can have the answer
                if side == "server" and turn[0] == "client":
                    self.trips += 1
                turn[0] = side
            try:
                dst.sendall(data)
            except OSError:
                return

    def take(self) -> int:
        with self.lock:
            trips, self.trips = self.trips, 0
        return trips

    def close(self) -> None:
        with self.lock:
            self.closed = True
        _shut_down(self.listener, *self.sockets)
        for s in (self.listener, *self.sockets):
            s.close()


def _shut_down(*sockets: Any) -> None:
    """Shut sockets down, which wakes a thread blocked in recv() on one and ends its
    connection (a close() alone does neither while that thread holds it)."""
    for s in sockets:
        with contextlib.suppress(OSError):  # shut down already, or closed
            s.shutdown(socket.SHUT_RDWR)


def test_round_trips_counts_the_server_answering_not_the_client_sending() -> None:
    """The proxy itself, against a stand-in server that answers each b"S" with b"Z" and
    nothing else: a Flush sent after the answer came back is no trip, and messages sent
    one by one before a Sync are one trip with it. Closing the proxy ends the server's
    side of every connection, though the client's stays open."""
    upstream = socket.create_server(("127.0.0.1", 0))
    heard: list[bytes] = []
    got = threading.Condition()

    def serve() -> None:
        conn, _ = upstream.accept()
        with conn:
            while data := conn.recv(16):
                with got:
                    heard.append(data)
                    got.notify_all()
                conn.sendall(b"Z" * data.count(b"S"))

    def until_heard(n: int) -> None:
        with got:
            assert got.wait_for(lambda: len(b"".join(heard)) >= n, timeout=10)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    proxy = RoundTrips(f"host=127.0.0.1 port={upstream.getsockname()[1]} dbname=x")
    port = proxy.listener.getsockname()[1]
    try:
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"S")
            assert client.recv(1) == b"Z"  # the answer came back...
            client.sendall(b"H")  # ...and then a message that asks for none
            until_heard(2)
            assert proxy.take() == 1
            for sent, message in enumerate((b"P", b"B", b"S"), start=3):  # queued, then
                client.sendall(message)  # synced: one trip
                until_heard(sent)
            assert client.recv(1) == b"Z"
            assert proxy.take() == 1
            client.sendall(b"S")  # an empty Sync costs one
            assert client.recv(1) == b"Z"
            assert proxy.take() == 1
            proxy.close()
            server.join(timeout=10)
            assert not server.is_alive()  # the server saw its connection end
    finally:
        proxy.close()
        upstream.close()


@pytest.fixture
def counted(pg: Backend):
    assert pg.pg is not None
    proxy = RoundTrips(pg.pg.dsn)
    yield proxy
    proxy.close()


def test_pg_a_new_key_costs_two_round_trips_and_a_replay_one(
    pg: Backend, counted: RoundTrips
) -> None:
    store = PostgresIdempotencyStore(counted.dsn, pool_size=1)
    pg.made.append(store)
    op = Op(OK)
    assert store.run_once("warm-up", op, "fp") == OK  # connects, creates the tables
    counted.take()
    assert store.run_once("new", op, "fp") == OK
    assert counted.take() == 2  # the claim, the completion
    assert store.run_once("new", op, "fp") == {**OK, "replayed": True}
    assert counted.take() == 1
    assert store.run_once("new", op, "other")["error"] == "idempotency_conflict"
    assert counted.take() == 1
    assert store.run_once("new-sync", op, "fp", full_sync=True) == OK
    assert counted.take() == 2
    assert op.calls == 3
    # the careful path (a key claimed already) keeps its transaction: still no empty trips
    assert store.run_once("hung", Op(UNKNOWN), "fp") == UNKNOWN
    counted.take()
    assert store.run_once("hung", op, "fp")["error"] == "in_progress"
    assert counted.take() == 3  # the fast claim, then the lock and read, then the commit
    assert op.calls == 3
    assert store.result("new") == OK  # a read: one statement, no transaction
    assert counted.take() == 1
    assert store.create_approval("a1", {"state": "pending"}) == {"state": "pending"}
    assert counted.take() == 2  # the lock and read, then the insert and commit
    assert store.update_approval("a1", "pending", {"state": "approved"})
    assert counted.take() == 2
    assert store.get_approval("a1") == {"state": "approved"}
    assert store.list_approvals() == [{"state": "approved"}]
    assert counted.take() == 2  # one each


def test_pg_async_steps_cost_the_same_round_trips(pg: Backend, counted: RoundTrips) -> None:
    import asyncio

    from agentkit.policy.stores.algorithm import CLAIMED

    store = PostgresIdempotencyStore(counted.dsn, pool_size=1)
    pg.made.append(store)

    async def main() -> list[int]:
        trips = []
        for key in ("warm-up", "new"):
            counted.take()
            decision = await store.aclaim(key, "fp", 300, may_take_over=False)
            assert isinstance(decision, tuple) and decision[0] == CLAIMED
            await store.acomplete(key, decision[1], dict(OK))
            trips.append(counted.take())
        replay = await store.aclaim("new", "fp", 300, may_take_over=False)
        assert replay == {**OK, "replayed": True}
        trips.append(counted.take())
        held = await store.aclaim("held", "fp", 300, may_take_over=False)
        assert isinstance(held, tuple)
        counted.take()
        busy = await store.aclaim("held", "fp", 300, may_take_over=True)  # the careful path
        assert isinstance(busy, dict) and busy["error"] == "in_progress"
        trips.append(counted.take())
        assert await store.acreate_approval("a1", {"state": "pending"}) == {"state": "pending"}
        trips.append(counted.take())
        assert await store.aupdate_approval("a1", "pending", {"state": "approved"})
        trips.append(counted.take())
        assert await store.alist_approvals() == [{"state": "approved"}]
        trips.append(counted.take())
        await store.aclose()
        return trips

    # new key, replay, careful path (fast try + lock and read + commit), approvals
    assert asyncio.run(main())[1:] == [2, 1, 3, 2, 2, 1]


# --------------------------------------------------------------------------- PostgreSQL: held locks


@pytest.fixture
def other_session(pg: Backend):
    """A second, real session on the same schema, free to hold locks."""
    import psycopg

    assert pg.pg is not None
    conn = psycopg.connect(pg.pg.dsn, autocommit=True)
    yield conn
    conn.close()


def test_pg_a_key_lock_held_elsewhere_is_busy_within_its_bound(
    pg: Backend, other_session: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = pg(TINY_TTL, busy_timeout_seconds=0.2)
    assert store.run_once("k", Op(UNKNOWN), "fp") == UNKNOWN
    pg.advance(LEASE_PASSES)  # stale: the next caller needs the careful path, under the lock
    other_session.execute("SELECT pg_advisory_lock(hashtextextended('k', 0))")
    op, lookup = Op(OK), Lookup(None)
    started = time.monotonic()
    with caplog.at_level("ERROR", logger="agentkit"):
        assert store.run_once("k", op, "fp", recover=lookup) == BUSY
    assert time.monotonic() - started < WAIT  # bounded: it used to wait forever
    assert (op.calls, lookup.calls) == (0, 0)
    assert "lock timeout" in caplog.text and "busy_timeout, 0.2 s" in caplog.text
    assert store.run_once("free", op, "fp") == OK  # other keys never wait for that lock
    other_session.execute("SELECT pg_advisory_unlock_all()")
    assert store.run_once("k", op, "fp", recover=lookup) == OK
    assert (op.calls, lookup.calls) == (2, 1)


def test_pg_a_locked_table_is_busy_through_the_runner_and_nothing_runs(
    pg: Backend, other_session: Any
) -> None:
    store = pg(busy_timeout_seconds=0.2)
    calls: list[int] = []
    runner = runner_with(store, calls)
    assert runner.call("save", {"name": "a.md"})["ok"] is True  # the tables exist
    other_session.execute("BEGIN")
    other_session.execute("LOCK TABLE agentkit_keys IN ACCESS EXCLUSIVE MODE")
    op = Op(OK)
    started = time.monotonic()
    assert store.run_once("new", op, "fp") == BUSY
    result = runner.call("save", {"name": "b.md"})
    assert time.monotonic() - started < WAIT
    assert result["error"] == "busy" and result["retryable"] is True
    assert (op.calls, calls) == (0, [1])
    other_session.execute("ROLLBACK")
    assert runner.call("save", {"name": "b.md"})["ok"] is True
    assert calls == [1, 1]


# --------------------------------------------------------------------------- PostgreSQL: async twins


def test_pg_async_twins_keep_every_step_s_semantics(pg: Backend) -> None:
    """Interface B's async twins answer as the sync steps do: claim, replay, conflict,
    in_progress, a stale claim (taken over, or unknown without a lookup), drop, abandon, and
    the approval records' insert-if-absent and compare-and-swap."""
    import asyncio

    from agentkit.policy.stores.algorithm import CLAIMED, TAKEN_OVER

    store = pg(TINY_TTL)
    sync_view = pg()

    async def main() -> None:
        first = await store.aclaim("k", "fp", 300, may_take_over=False)
        assert isinstance(first, tuple) and first[0] == CLAIMED
        mine = first[1]
        assert await store.aclaim("k", "fp", 300, may_take_over=True) == {
            "ok": False, "error": "in_progress", "retryable": True}
        assert (await store.aclaim("k", "other", 300, may_take_over=False))["error"] == (
            "idempotency_conflict")
        await store.acomplete("k", mine, dict(OK))
        assert await store.aclaim("k", "fp", 300, may_take_over=False) == {**OK, "replayed": True}

        dropped = await store.aclaim("d", "fp", 300, may_take_over=False)
        assert isinstance(dropped, tuple)
        await store.adrop("d", dropped[1])
        again = await store.aclaim("d", "fp", 300, may_take_over=False)
        assert isinstance(again, tuple) and again[0] == CLAIMED  # the key was free

        stale = await store.aclaim("s", "fp", 300, may_take_over=False)
        assert isinstance(stale, tuple)
        await store.aabandon_claim("s", stale[1])  # stale at once
        assert (await store.aclaim("s", "fp", 300, may_take_over=False))["error"] == (
            "outcome_unknown")
        taken = await store.aclaim("s", "fp", 300, may_take_over=True)
        assert isinstance(taken, tuple) and taken[0] == TAKEN_OVER
        assert taken[1].token != stale[1].token
        await store.acomplete("s", stale[1], {"ok": True, "data": "late"})  # lost: kept anyway
        await store.acomplete("s", taken[1], dict(OK))  # the first result wins

        record = {"state": "pending", "n": 1}
        assert await store.acreate_approval("a1", record) == record
        assert await store.acreate_approval("a1", {"state": "other"}) == record
        assert await store.aupdate_approval("a1", "pending", {"state": "approved"})
        assert not await store.aupdate_approval("a1", "pending", {"state": "denied"})
        assert await store.aget_approval("a1") == {"state": "approved"}
        assert await store.aget_approval("nope") is None
        assert await store.alist_approvals("approved") == [{"state": "approved"}]
        await store.aclose()

    asyncio.run(main())
    assert sync_view.result("k") == OK
    assert sync_view.result("s") == {"ok": True, "data": "late"}
    assert sync_view.list_approvals() == [{"state": "approved"}]


def test_blocking_says_which_steps_may_run_on_an_event_loop(tmp_path: Path) -> None:
    assert IdempotencyStore.blocking is False  # a dict under a lock held for microseconds
    assert SQLiteIdempotencyStore.blocking is True
    assert PostgresIdempotencyStore.blocking is True
    assert not hasattr(SQLiteIdempotencyStore, "aclaim")  # the driver uses a worker thread
    assert all(hasattr(PostgresIdempotencyStore, name) for name in (
        "aclaim", "acomplete", "adrop", "aabandon_claim", "acreate_approval", "aget_approval",
        "aupdate_approval", "alist_approvals"))


def test_pg_a_completion_whose_connection_died_is_sent_again(
    pg: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Completing, freeing and abandoning act only on our own token, so a connection that
    dies under them (unnoticed before use) is replaced and the step repeated: the call is
    ok, not outcome_unknown. A claim is never repeated this way."""
    from agentkit.policy.stores import postgres

    store, op = pg(pool_size=1), Op(OK)
    assert store.run_once("a", op, "fp") == OK
    with store._current_pool(False).connection() as conn:
        relaxed = conn.info.backend_pid
    monkeypatch.setattr(postgres, "looks_dead", lambda conn: False)  # the race, made certain
    pg.sql("SELECT pg_terminate_backend(%s, 10000)", (relaxed,))
    assert store.run_once("b", op, "fp") == OK
    assert store.result("b") == OK
    assert op.calls == 2
