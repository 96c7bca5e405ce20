"""The runner over its store (docs/design.md#runner-policy, #store-failures): live claims
and store failures, through ToolRunner.call, counting the handler's real runs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentkit import IdempotencyStore, SQLiteIdempotencyStore, ToolRegistry, ToolRunner, ToolSpec
from agentkit.policy.stores import StoreError

WAIT = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Write:
    """A write that hangs until released, and a status lookup that reports what it wrote."""

    def __init__(self, *, hang: bool = True) -> None:
        self.calls = 0
        self.written = 0
        self.entered, self.go = threading.Event(), threading.Event()
        if not hang:
            self.go.set()

    def handler(self, name: str) -> dict[str, Any]:
        self.calls += 1
        self.entered.set()
        assert self.go.wait(WAIT)
        self.written += 1
        return {"saved": name}

    def lookup(self, name: str) -> dict[str, Any] | None:
        return {"saved": name} if self.written else None


def runner_for(
    write: Write, store: Any, *, lookup: bool = True, timeout: float | None = None
) -> ToolRunner:
    """A runner of ``write``: a write that hangs times out at once (50 ms); one that does not
    gets a timeout no loaded machine reaches, so it never passes for a timed-out one."""
    if timeout is None:
        timeout = WAIT if write.go.is_set() else 0.05
    spec = ToolSpec(
        "save", "Save a file.", "reversible_write", timeout, 1, 200, write.handler,
        status_lookup=write.lookup if lookup else None,
        idempotency_key=lambda context, arguments: f"save:{arguments['name']}",
    )
    return ToolRunner(ToolRegistry([spec]), store=store, sleep=lambda s: None)


class AbandonSeen(IdempotencyStore):
    """The memory store, telling the test when the runner gave a claim back."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.abandoned = threading.Event()
        self.tokens: list[str] = []

    def abandon(self, key: str, token: str) -> None:
        super().abandon(key, token)
        self.tokens.append(token)
        self.abandoned.set()


def test_a_hung_write_past_its_lease_never_runs_beside_itself() -> None:
    """Issue 10 point 2, through the runner: lease 0.1 s, write hung for an hour."""
    clock = Clock()
    store = AbandonSeen(claim_ttl_seconds=0.1, clock=clock)
    write = Write()
    runner = runner_for(write, store)
    first = runner.call("save", {"name": "a.md"})
    assert first["error"] == "outcome_unknown" and first["retryable"] is False
    assert write.entered.is_set()
    clock.now += 3600  # far past the claim's computed lease; the handler still hangs
    for _ in range(3):
        assert runner.call("save", {"name": "a.md"})["error"] == "in_progress"
    assert write.calls == 1
    assert not store.abandoned.is_set()
    write.go.set()  # the hung attempt returns: the runner hands its claim back
    assert store.abandoned.wait(WAIT)
    third = runner.call("save", {"name": "a.md"})
    assert third["ok"] is True and '"saved": "a.md"' in third["data"]  # the lookup's receipt
    assert (write.calls, write.written) == (1, 1)
    assert runner.call("save", {"name": "a.md"})["replayed"] is True
    assert write.calls == 1


def test_the_late_return_of_an_old_attempt_leaves_the_newer_claim_alone() -> None:
    clock = Clock()
    store = AbandonSeen(claim_ttl_seconds=0.1, clock=clock)
    old = Write()
    runner = runner_for(old, store, lookup=False)
    assert runner.call("save", {"name": "a.md"})["error"] == "outcome_unknown"
    store.release("save:a.md")  # a person checked and cleared the key
    new = Write()
    runner2 = runner_for(new, store, lookup=False)
    assert runner2.call("save", {"name": "a.md"})["error"] == "outcome_unknown"
    old.go.set()  # the first attempt returns late and gives back *its* token only
    assert store.abandoned.wait(WAIT)
    clock.now += 3600
    assert runner2.call("save", {"name": "a.md"})["error"] == "in_progress"  # still live
    assert (old.calls, new.calls) == (1, 1)
    new.go.set()


# --------------------------------------------------------------------------- store failures


@pytest.fixture
def locked(tmp_path: Path):
    path = tmp_path / "store.sqlite"
    SQLiteIdempotencyStore(path).close()
    conn = apsw.Connection(str(path))  # the store's own SQLite: it sees this lock
    yield path, conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


def test_a_locked_store_before_the_claim_is_busy_through_the_runner(
    locked: tuple[Path, apsw.Connection], caplog: pytest.LogCaptureFixture
) -> None:
    path, conn = locked
    write = Write(hang=False)
    runner = runner_for(write, SQLiteIdempotencyStore(path, busy_timeout_seconds=0.01))
    conn.execute("BEGIN IMMEDIATE")
    with caplog.at_level("ERROR", logger="agentkit"):
        result = runner.call("save", {"name": "a.md"})
    assert result["error"] == "busy" and result["retryable"] is True
    assert write.calls == 0
    assert str(path) in caplog.text
    conn.execute("ROLLBACK")
    assert runner.call("save", {"name": "a.md"})["ok"] is True
    assert write.calls == 1


def test_a_store_failing_after_the_handler_ran_is_outcome_unknown_through_the_runner(
    locked: tuple[Path, apsw.Connection], caplog: pytest.LogCaptureFixture
) -> None:
    path, conn = locked
    write = Write(hang=False)
    inner = write.handler

    def handler(name: str) -> dict[str, Any]:
        out = inner(name)
        conn.execute("BEGIN IMMEDIATE")  # the store becomes unusable while the write lands
        return out

    write.handler = handler  # type: ignore[method-assign]
    runner = runner_for(write, SQLiteIdempotencyStore(path, busy_timeout_seconds=0.01))
    with caplog.at_level("ERROR", logger="agentkit"):
        result = runner.call("save", {"name": "a.md"})
    assert result["error"] == "outcome_unknown" and result["retryable"] is False
    assert write.calls == 1
    assert str(path) in caplog.text
    conn.execute("ROLLBACK")
    again = runner.call("save", {"name": "a.md"})
    assert again["error"] in ("in_progress", "outcome_unknown") or again.get("ok")
    assert write.calls == 1  # never written twice


class FailingAbandon(IdempotencyStore):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tried = threading.Event()

    def abandon(self, key: str, token: str) -> None:
        self.tried.set()
        raise StoreError("memory store: disk on fire")


def test_a_store_error_when_the_late_attempt_returns_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FailingAbandon(claim_ttl_seconds=0.1)
    write = Write()
    runner = runner_for(write, store)
    with caplog.at_level("ERROR", logger="agentkit"):
        assert runner.call("save", {"name": "a.md"})["error"] == "outcome_unknown"
        write.go.set()
        assert store.tried.wait(WAIT)
        assert runner.call("save", {"name": "a.md"})["error"] == "in_progress"
    assert write.calls == 1


def test_a_store_file_corrupted_under_a_running_kit_is_busy_not_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.sqlite"
    write = Write(hang=False)
    runner = runner_for(write, SQLiteIdempotencyStore(path))
    assert runner.call("save", {"name": "a.md"})["ok"] is True
    for file in tmp_path.iterdir():  # the database, its WAL and shared memory: all garbage
        file.write_bytes(b"\x5a" * file.stat().st_size)
    with caplog.at_level("ERROR", logger="agentkit"):
        result = runner.call("save", {"name": "b.md"})
    assert result["error"] == "busy" and result["retryable"] is True
    assert write.calls == 1  # b.md never ran
    assert str(path) in caplog.text and "not a database" in caplog.text


@pytest.mark.parametrize("how", ["folder deleted", "file replaced"])
def test_a_store_whose_file_is_gone_claims_nothing_more_and_a_new_store_starts_afresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """Issue 26: the folder of a running store deleted (or its file replaced by another).
    SQLite would go on committing into the unlinked file, answering ``ok`` where no new
    store on the path can see it, so the same write would run again through the new store.
    The store notices before its next claim: ``busy`` (nothing ran), logged with the path."""
    import asyncio
    import shutil

    folder = tmp_path / "state"
    path = folder / "store.sqlite"
    write = Write(hang=False)
    old = SQLiteIdempotencyStore(path)
    runner = runner_for(write, old)
    assert runner.call("save", {"name": "a.md"})["ok"] is True
    if how == "folder deleted":
        shutil.rmtree(folder)
    else:
        SQLiteIdempotencyStore(tmp_path / "other.sqlite").close()
        (tmp_path / "other.sqlite").replace(path)
    with caplog.at_level("ERROR", logger="agentkit"):
        refused = runner.call("save", {"name": "b.md"})
        refused_async = asyncio.run(runner.acall("save", {"name": "b.md"}))
    for result in (refused, refused_async):
        assert result["error"] == "busy" and result["retryable"] is True
        assert result["attempts"] == 0
    assert write.calls == 1  # b.md never ran through the old store
    assert str(path) in caplog.text
    assert ("deleted" if how == "folder deleted" else "replaced") in caplog.text
    fresh = SQLiteIdempotencyStore(path)  # a store on the (recreated) path works normally
    again = runner_for(write, fresh)
    assert again.call("save", {"name": "b.md"})["ok"] is True
    assert again.call("save", {"name": "b.md"})["replayed"] is True
    assert runner.call("save", {"name": "c.md"})["error"] == "busy"  # the old one, still
    assert write.calls == 2  # a.md and b.md, once each
    with pytest.raises(StoreError, match="open a new store"):
        old.release("save:a.md")
    old.close()
    fresh.close()
