"""Idempotency stores (docs/design.md#stores): every test counts the operation's real runs.

A result code alone cannot show that a write happened twice, so each test holds a counter
(or, across processes, a log file on disk) and asserts how often the operation really ran.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agentkit.policy.stores import IdempotencyStore, SQLiteIdempotencyStore, StoreError

ROOT = Path(__file__).resolve().parents[1]
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


class Backend:
    """Makes stores of one kind and lets time pass on their clock (no sleeps)."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.clock = Clock()
        self.made: list[Any] = []

    def __call__(self, claim_ttl_seconds: float = 300, **options: Any) -> Any:
        if self.kind == "memory":
            store: Any = IdempotencyStore(claim_ttl_seconds, clock=self.clock, **options)
        else:
            store = SQLiteIdempotencyStore(
                self.tmp_path / "store.sqlite", claim_ttl_seconds, clock=self.clock, **options
            )
        self.made.append(store)
        return store

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass for every lease in the store."""
        self.clock.now += seconds

    def close(self) -> None:
        for store in self.made:
            store.close()


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path):
    """Every store, same tests: the semantics are one contract."""
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


def run_worker(mode: str, db: Path, work: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WORKER), mode, str(db), "k", str(work), *extra],
        env=worker_env(), capture_output=True, text=True, timeout=30, check=False,
    )


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
    store.put_approval("a1", {"state": "pending", "tool": "send", "args": {"to": "bob"}})
    record = store.get_approval("a1")
    assert record == {"state": "pending", "tool": "send", "args": {"to": "bob"}}
    record["state"] = "mutated"  # a copy: the store is untouched
    assert store.get_approval("a1")["state"] == "pending"
    assert store.update_approval("a1", "approved", {"state": "denied"}) is False
    assert store.update_approval("a1", "pending", {"state": "approved", "n": 1}) is True
    assert store.update_approval("a1", "pending", {"state": "denied"}) is False  # used once
    assert store.get_approval("a1") == {"state": "approved", "n": 1}
    store.put_approval("a1", {"state": "settled"})  # insert or replace
    assert store.get_approval("a1") == {"state": "settled"}


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
        store.put_approval("a1", record)


# --------------------------------------------------------------------------- SQLite: durability


def test_sqlite_creates_the_directory_and_uses_wal(sqlite_path: Path) -> None:
    with SQLiteIdempotencyStore(sqlite_path) as store:
        store.run_once("k", Op(OK))
    assert sqlite_path.exists()
    conn = sqlite3.connect(sqlite_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_sqlite_restart_replays_and_keeps_approvals(sqlite_path: Path) -> None:
    op = Op(OK)
    with SQLiteIdempotencyStore(sqlite_path) as store:
        assert store.run_once("k", op, "fp", full_sync=True) == OK
        store.put_approval("a1", {"state": "pending"})
        assert store.update_approval("a1", "pending", {"state": "approved"})
    with SQLiteIdempotencyStore(sqlite_path) as store:
        assert store.run_once("k", op, "fp") == {**OK, "replayed": True}
        assert store.run_once("k", op, "other")["error"] == "idempotency_conflict"
        assert store.get_approval("a1") == {"state": "approved"}
    assert op.calls == 1


def test_sqlite_full_sync_is_reset_after_the_call(sqlite_path: Path) -> None:
    with SQLiteIdempotencyStore(sqlite_path) as store:
        store.run_once("k", Op(OK), full_sync=True)
        conn = store._checkout()
        try:
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        finally:
            store._checkin(conn, healthy=True)


def test_sqlite_closed_store_refuses_work(sqlite_path: Path) -> None:
    store = SQLiteIdempotencyStore(sqlite_path)
    store.close()
    store.close()  # idempotent
    op = Op(OK)
    assert store.run_once("k", op) == {"ok": False, "error": "busy", "retryable": True}
    with pytest.raises(StoreError, match="closed"):
        store.result("k")
    assert op.calls == 0


# --------------------------------------------------------------------------- SQLite: processes


def test_four_processes_run_the_operation_once(tmp_path: Path) -> None:
    db, n = tmp_path / "store.sqlite", 4
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "race", str(db), "k", str(tmp_path), str(n)],
            env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(n)
    ]
    try:
        for p in procs:
            _, err = p.communicate(timeout=30)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert len(log_lines(tmp_path / "ops.log")) == 1
    answers = [json.loads(line) for line in log_lines(tmp_path / "answers")]
    assert len(answers) == n
    fresh = [a for a in answers if a.get("ok") and not a.get("replayed")]
    assert len(fresh) == 1
    others = [a for a in answers if a not in fresh]
    assert all(a.get("error") == "in_progress" or a.get("replayed") for a in others)


def test_crash_after_the_write_is_recovered_without_a_second_write(tmp_path: Path) -> None:
    db = tmp_path / "store.sqlite"
    child = run_worker("crash_after_write", db, tmp_path)
    assert child.returncode == 1, child.stderr
    assert len(log_lines(tmp_path / "ops.log")) == 1

    def lookup() -> dict[str, Any] | None:
        sent = tmp_path / "sent.txt"
        return {"ok": True, "data": sent.read_text()} if sent.exists() else None

    op = Op(OK)
    with SQLiteIdempotencyStore(db) as store:  # default lease: the dead pid makes it stale
        assert store.run_once("k", op, "fp", recover=lookup) == {"ok": True, "data": "sent"}
        assert store.run_once("k", op, "fp")["replayed"] is True
    assert op.calls == 0
    assert len(log_lines(tmp_path / "ops.log")) == 1


def test_crash_before_the_write_runs_once_after_recovery(tmp_path: Path) -> None:
    db = tmp_path / "store.sqlite"
    child = run_worker("crash_before_write", db, tmp_path)
    assert child.returncode == 1, child.stderr
    assert len(log_lines(tmp_path / "started")) == 1
    sent, ops = tmp_path / "sent.txt", tmp_path / "ops.log"

    def lookup() -> dict[str, Any] | None:
        return {"ok": True, "data": sent.read_text()} if sent.exists() else None

    def operation() -> dict[str, Any]:
        sent.write_text("sent")
        with open(ops, "a") as f:
            f.write(f"{os.getpid()}\n")
        return {"ok": True, "data": "sent"}

    with SQLiteIdempotencyStore(db) as store:
        assert store.run_once("k", operation, "fp", recover=lookup) == {"ok": True, "data": "sent"}
        assert store.run_once("k", operation, "fp", recover=lookup)["replayed"] is True
    assert log_lines(ops) == [str(os.getpid())]


def test_a_live_owner_is_never_taken_over_until_it_dies(tmp_path: Path) -> None:
    db = tmp_path / "store.sqlite"
    child = subprocess.Popen(
        [sys.executable, str(WORKER), "hold", str(db), "k", str(tmp_path)],
        env=worker_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "claimed"
        op, lookup = Op(OK), Lookup(None)
        with SQLiteIdempotencyStore(db) as store:
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


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_claim_of_an_earlier_process_with_our_pid_is_stale(sqlite_path: Path) -> None:
    """A container restart gives the new process the old pid: the start time tells them apart."""
    op = Op(UNKNOWN, OK)
    with SQLiteIdempotencyStore(sqlite_path) as store:
        store.run_once("k", op, "fp")
        assert store.run_once("k", op, "fp")["error"] == "in_progress"  # ours, alive
        conn = sqlite3.connect(sqlite_path)
        try:
            with conn:
                conn.execute("UPDATE claims SET start_time = start_time - 1")
        finally:
            conn.close()
        assert store.run_once("k", op, "fp", recover=Lookup(None)) == OK
    assert op.calls == 2


def _start_time(pid: int) -> int:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return int(data[data.rindex(b")") + 2 :].split()[19])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_reused_pid_is_told_apart_by_its_start_time(sqlite_path: Path) -> None:
    """A claim names a live pid (our parent): alive if the start time matches, else gone."""
    parent = os.getppid()
    op, lookup = Op(UNKNOWN, OK), Lookup(None)
    with SQLiteIdempotencyStore(sqlite_path) as store:
        store.run_once("k", op, "fp")
        conn = sqlite3.connect(sqlite_path)
        try:
            with conn:
                conn.execute(
                    "UPDATE claims SET pid = ?, start_time = ?", (parent, _start_time(parent))
                )
            assert store.run_once("k", op, "fp", recover=lookup)["error"] == "in_progress"
            assert (op.calls, lookup.calls) == (1, 0)
            with conn:
                conn.execute("UPDATE claims SET start_time = start_time + 1")
        finally:
            conn.close()
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
    """A second connection that can hold the database's write lock."""
    SQLiteIdempotencyStore(sqlite_path).close()
    conn = sqlite3.connect(sqlite_path, isolation_level=None)
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


def test_sqlite_locked_before_the_claim_is_busy_and_runs_nothing(
    sqlite_path: Path, locked_db: sqlite3.Connection, caplog: pytest.LogCaptureFixture
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


def test_sqlite_failing_after_the_operation_ran_is_outcome_unknown(
    sqlite_path: Path, locked_db: sqlite3.Connection, caplog: pytest.LogCaptureFixture
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
    sqlite_path: Path, locked_db: sqlite3.Connection
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
