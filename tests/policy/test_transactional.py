"""Transactional writes (docs/design.md#transactional-writes): the handler's effect and the key's
result commit as one, so a kill at any point leaves both or neither and no lookup is needed.

Every test counts the effect's real rows in the store's own database (the table ``effects``)
and the handler's real calls, on SQLite and PostgreSQL, through both drivers; the kill tests
end a real worker process with SIGKILL at each point of the write.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_stores import WAIT, Backend  # tests/ is on sys.path (pytest rootdir-relative import)

from agentkit import (
    CallContext,
    IdempotencyStore,
    InvalidInput,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    current_call,
)

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("_transactional_worker.py")
EFFECTS = "CREATE TABLE effects (ref TEXT NOT NULL, note TEXT NOT NULL, key TEXT)"


@pytest.fixture
def backend(sql_backend: Backend) -> Backend:
    """A durable store with the effect's table beside its own."""
    sql_backend(claim_ttl_seconds=60).close()  # the store's own tables, before the effect's
    sql_backend.sql(EFFECTS)
    return sql_backend


def rows(backend: Backend) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in backend.sql("SELECT ref, note, key FROM effects ORDER BY ref")]


class Insert:
    """A transactional handler: one row through ``current_call().connection``; counts calls."""

    def __init__(self, backend: Backend, *, fail: BaseException | None = None) -> None:
        self.placeholder = "%s" if backend.kind == "postgres" else "?"
        self.calls = 0
        self.fail = fail
        self.seen: list[Any] = []

    def __call__(self, ref: str, note: str) -> dict[str, Any]:
        self.calls += 1
        call = current_call()
        assert call is not None
        self.seen.append(call)
        p = self.placeholder
        call.connection.execute(f"INSERT INTO effects (ref, note, key) VALUES ({p}, {p}, {p})",
                                (ref, note, call.idempotency_key))
        if self.fail is not None:
            error, self.fail = self.fail, None
            raise error
        return {"ref": ref, "inserted": 1}


class Lookup:
    """A status lookup that only counts: a transactional write never needs to ask it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, ref: str, note: str) -> None:
        self.calls += 1


class Held(Insert):
    """A transactional handler that inserts its row, says so (``started``), then waits for
    ``release`` before it returns; with ``first_only`` only its first call waits."""

    def __init__(self, backend: Backend, *, first_only: bool = False) -> None:
        super().__init__(backend)
        self.started, self.release = threading.Event(), threading.Event()
        self.first_only = first_only

    def __call__(self, ref: str, note: str) -> dict[str, Any]:
        value = super().__call__(ref, note)
        if not self.first_only or self.calls == 1:
            self.started.set()
            assert self.release.wait(WAIT)
        return value


def runner_for(backend: Backend, handler: Callable[..., Any], effect: str = "reversible_write",
               lookup: Lookup | None = None, timeout: float = WAIT) -> ToolRunner:
    spec = ToolSpec("insert_effect", "Insert one row.", effect, timeout,
                    2 if effect == "reversible_write" else 1, 500, handler,
                    status_lookup=lookup, transactional=True)
    return ToolRunner(ToolRegistry([spec]), store=backend(claim_ttl_seconds=60),
                      context=CallContext(task_id="conv-tx"), sleep=lambda _s: None)


ARGS = {"ref": "r-1", "note": "one row per key"}


# ------------------------------------------------------------------ the spec and the runner


def test_a_spec_refuses_what_cannot_be_transactional() -> None:
    def read(q: str) -> str:
        return q

    async def awrite(q: str) -> str:
        return q

    with pytest.raises(ValueError, match="read cannot be transactional"):
        ToolSpec("r", "Read.", "read", 1.0, 1, 10, read, transactional=True)
    with pytest.raises(ValueError, match="plain function"):
        ToolSpec("w", "Write.", "reversible_write", 1.0, 1, 10, awrite, transactional=True)
    with pytest.raises(ValueError, match="True or False"):
        ToolSpec("w", "Write.", "reversible_write", 1.0, 1, 10, read, transactional="yes")  # type: ignore[arg-type]


def test_the_memory_store_refuses_a_transactional_tool_when_the_runner_is_made() -> None:
    def write(q: str) -> str:
        return q

    spec = ToolSpec("w", "Write.", "reversible_write", 1.0, 1, 10, write, transactional=True)
    with pytest.raises(ValueError, match="IdempotencyStore cannot commit"):
        ToolRunner(ToolRegistry([spec]))
    with pytest.raises(ValueError, match="cannot commit"):
        ToolRunner(ToolRegistry([spec]), store=IdempotencyStore())
    registry = ToolRegistry()
    runner = ToolRunner(registry)  # a tool that joins later is refused at its call
    registry.register(spec)
    refused = runner.call("w", {"q": "x"})
    assert refused["error"] == "tool_failure" and refused["attempts"] == 0


# ------------------------------------------------------------------ one commit


def test_the_effect_and_the_result_commit_together_and_replay(backend, driver) -> None:
    handler, lookup = Insert(backend), Lookup()
    runner = runner_for(backend, handler, lookup=lookup)
    first = driver(runner, "call", "insert_effect", dict(ARGS))
    assert first["ok"] and json.loads(first["data"]) == {"ref": "r-1", "inserted": 1}
    again = driver(runner, "call", "insert_effect", dict(ARGS))
    assert again["ok"] and again["replayed"] and again["data"] == first["data"]
    key = handler.seen[0].idempotency_key
    assert rows(backend) == [("r-1", "one row per key", key)]
    assert handler.calls == 1 and lookup.calls == 0
    assert current_call() is None


def test_an_exception_rolls_the_effect_back_and_frees_the_key(backend, driver) -> None:
    handler, lookup = Insert(backend, fail=RuntimeError("a bug after the insert")), Lookup()
    runner = runner_for(backend, handler, lookup=lookup)
    failed = driver(runner, "call", "insert_effect", dict(ARGS))
    assert failed["error"] == "tool_failure" and failed["retryable"] is False
    assert rows(backend) == [] and lookup.calls == 0  # rolled back; the store said not done
    assert driver(runner, "call", "insert_effect", dict(ARGS))["ok"]
    assert len(rows(backend)) == 1 and handler.calls == 2


def test_a_disconnect_inside_the_handler_is_retried_under_the_same_key(backend, driver) -> None:
    handler = Insert(backend, fail=ConnectionError("the handler's own dependency dropped"))
    runner = runner_for(backend, handler)
    result = driver(runner, "call", "insert_effect", dict(ARGS))
    assert result["ok"] and result["attempts"] == 2
    assert len(rows(backend)) == 1 and handler.calls == 2
    assert handler.seen[0].idempotency_key == handler.seen[1].idempotency_key


def test_invalid_input_rolls_back_and_is_the_models_mistake(backend, driver) -> None:
    handler = Insert(backend, fail=InvalidInput("no such ref"))
    runner = runner_for(backend, handler)
    result = driver(runner, "call", "insert_effect", dict(ARGS))
    assert result["error"] == "invalid_arguments" and rows(backend) == []


def test_an_approved_irreversible_write_commits_with_its_result(backend, driver) -> None:
    handler = Insert(backend)
    runner = runner_for(backend, handler, effect="irreversible_write")
    asked = driver(runner, "call", "insert_effect", dict(ARGS))
    assert asked["error"] == "approval_required" and rows(backend) == []
    approved = driver(runner, "approve", asked["approval_id"])
    assert approved["ok"] and len(rows(backend)) == 1
    assert driver(runner, "approve", asked["approval_id"])["ok"]
    assert driver(runner, "call", "insert_effect", dict(ARGS))["replayed"]
    assert handler.calls == 1 and len(rows(backend)) == 1


def test_a_handler_past_its_timeout_commits_when_it_returns(backend) -> None:
    inner = Held(backend)
    started, release = inner.started, inner.release
    runner = runner_for(backend, inner, timeout=0.2)
    late = runner.call("insert_effect", dict(ARGS))
    assert late["error"] == "outcome_unknown" and late["retryable"] is False
    assert started.is_set()
    # While it runs, its transaction holds the key's lock (on SQLite the database's write
    # lock): a second caller of this key would wait for it, then replay.
    release.set()
    replay = _until_replayed(runner)
    assert replay["ok"] and replay["replayed"] and inner.calls == 1
    assert len(rows(backend)) == 1


def _until_replayed(runner: ToolRunner) -> dict[str, Any]:
    """Call again until the late attempt has committed (its transaction ends on the worker
    right after the release; each call here is answered at once)."""
    for _ in range(2_000):
        result = runner.call("insert_effect", dict(ARGS))
        if result.get("replayed"):
            return result
        assert result["error"] == "in_progress"
        threading.Event().wait(0.005)
    raise AssertionError("the late attempt never committed")


# ------------------------------------------------------------------ two callers of one key


def _store_of(runner: ToolRunner) -> Any:
    return runner.store


def test_a_second_caller_meanwhile_runs_nothing_and_hears_what_the_key_holds(backend) -> None:
    """Two callers of one key at once: the second runs nothing and replays the first's
    result, with no attempt (nor budget unit) of its own. On SQLite a new key's claim is
    written in the effect's own transaction: the second caller reads a free key, waits for
    the database's write lock inside its attempt, then finds the key completed there. On
    PostgreSQL the claim was committed first: the second caller's claim waits for the key's
    lock, which the first's transaction holds, then finds the result."""
    inner = Held(backend, first_only=True)
    started, release = inner.started, inner.release
    runner = runner_for(backend, inner)
    store = _store_of(runner)
    entered = threading.Event()
    effect_transaction = store.effect_transaction

    def seen_entering(key: str, mine: Any) -> Any:
        if started.is_set():
            entered.set()  # the second caller's attempt, before it waits for the lock
        return effect_transaction(key, mine)

    store.effect_transaction = seen_entering
    answers: dict[str, dict[str, Any]] = {}
    first = threading.Thread(target=lambda: answers.update(
        first=runner.call("insert_effect", dict(ARGS))))
    first.start()
    assert started.wait(WAIT)
    second = threading.Thread(target=lambda: answers.update(
        second=runner.call("insert_effect", dict(ARGS))))
    second.start()
    if backend.kind == "sqlite":
        assert entered.wait(WAIT)  # its read found the key free; it waits for the lock
    release.set()
    second.join(WAIT)
    first.join(WAIT)
    assert answers["first"]["ok"] and not answers["first"]["replayed"]
    assert answers["second"] == {**answers["first"], "attempts": 0, "replayed": True}
    assert inner.calls == 1 and len(rows(backend)) == 1
    if backend.kind == "postgres":
        assert not entered.is_set()  # it never reached a transaction of its own


def test_a_transaction_that_cannot_begin_runs_nothing_and_is_busy(tmp_path: Path) -> None:
    """SQLite: another connection holds the database's write lock past ``busy_timeout``. The
    key's read works, its transaction cannot begin: ``busy`` after each attempt (retryable),
    the handler never called, no attempt counted; once the lock is free the write runs."""
    sql_backend = Backend("sqlite", tmp_path)
    sql_backend(claim_ttl_seconds=60).close()
    sql_backend.sql(EFFECTS)
    handler = Insert(sql_backend)
    spec = ToolSpec("insert_effect", "Insert one row.", "reversible_write", WAIT, 2, 500,
                    handler, transactional=True)
    runner = ToolRunner(ToolRegistry([spec]), store=sql_backend(60, busy_timeout_seconds=0),
                        context=CallContext(task_id="conv-tx"), sleep=lambda _s: None)
    import apsw

    holder = apsw.Connection(str(sql_backend.path))
    holder.execute("BEGIN IMMEDIATE")
    try:
        busy = runner.call("insert_effect", dict(ARGS))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert busy == {"ok": False, "error": "busy", "retryable": True, "attempts": 0,
                    "replayed": False}
    assert handler.calls == 0 and rows(sql_backend) == []
    done = runner.call("insert_effect", dict(ARGS))
    assert done["ok"] and done["attempts"] == 1 and handler.calls == 1
    assert len(rows(sql_backend)) == 1


def test_a_cancelled_caller_leaves_the_transaction_to_commit_once(backend) -> None:
    """``acall`` cancelled while its handler runs inside the transaction: the attempt goes
    on on its worker and commits its effect with its result; the next caller replays it."""
    import asyncio

    inner = Held(backend)
    started, release = inner.started, inner.release
    runner = runner_for(backend, inner)

    async def cancel_midway() -> None:
        task = asyncio.ensure_future(runner.acall("insert_effect", dict(ARGS)))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    release.set()
    replay = _until_replayed(runner)
    assert replay["ok"] and replay["attempts"] == 0
    assert inner.calls == 1 and len(rows(backend)) == 1


# ------------------------------------------------------------------ a worker killed at each point


@pytest.mark.parametrize("where", ["before_handler", "after_insert", "before_commit"])
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_worker_killed_at_any_point_leaves_exactly_one_row(backend, where, driver) -> None:
    spec = backend.spec
    killed = subprocess.run([sys.executable, str(WORKER), spec, where, driver], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert killed.returncode == -9, killed.stderr  # SIGKILL: it really died there
    assert rows(backend) == []  # nothing committed: neither the effect nor the result
    if backend.kind == "sqlite":
        backend.advance(0)  # (the claim's owner is gone: seen at once on this host)
    else:  # the database's clock: the dead worker's lease is moved back
        backend.advance(3_600)
    again = subprocess.run([sys.executable, str(WORKER), spec, "none", driver], cwd=ROOT,
                           capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout.splitlines()[-1])
    assert result["ok"] and result["attempts"] == 1 and not result["replayed"]
    assert [row[:2] for row in rows(backend)] == [("r-1", "one row per key")]
    replay = subprocess.run([sys.executable, str(WORKER), spec, "none", driver], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert json.loads(replay.stdout.splitlines()[-1])["replayed"] is True
    assert len(rows(backend)) == 1
