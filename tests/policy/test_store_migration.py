"""Store schema versions (docs/design.md#stores): a store made by release 1 (two tables, a
claim and a result per key) is migrated in place to one row per key, and a store newer than
this code is refused with a clear error.

Release 1's own code (its store modules, read from git at the commit that shipped them)
makes the old file and the old tables, so the test migrates what users really have.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from test_stores import (  # tests/ is on sys.path (pytest rootdir-relative import)
    OK,
    UNKNOWN,
    Backend,
    Clock,
    Lookup,
    Op,
)

from agentkit.policy.stores import SQLiteIdempotencyStore, StoreError

ROOT = Path(__file__).resolve().parents[2]
RELEASE_1 = "3ebacbae9a5aec6523066a3e5671b4034bac10ae"  # the last commit with schema version 1
RECEIPT = {"ok": True, "data": "found by the lookup"}

# Release 1's SQLite tables, for a checkout without that commit in its history.
RELEASE_1_SQLITE_DDL = """
CREATE TABLE results (key TEXT PRIMARY KEY, fingerprint TEXT, result TEXT NOT NULL,
    completed_at REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE claims (key TEXT PRIMARY KEY, token TEXT NOT NULL, fingerprint TEXT,
    host TEXT NOT NULL, pid INTEGER NOT NULL, start_time INTEGER, lease_until REAL NOT NULL,
    claimed_at REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE approvals (approval_id TEXT PRIMARY KEY, state TEXT NOT NULL,
    record TEXT NOT NULL, updated_at REAL NOT NULL);
"""


def release_1(name: str) -> Any:
    """``agentkit/policy/stores/<name>.py`` as release 1 shipped it, over release 1's own
    algorithm module (loaded from git; skipped where that history is not available)."""
    return release(name, RELEASE_1)


def release(name: str, commit: str) -> Any:
    """``agentkit/policy/stores/<name>.py`` as ``commit`` had it, over that commit's own
    algorithm module (loaded from git; skipped where that history is not available)."""

    def source(path: str) -> str:
        try:
            done = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{commit}:{path}"],
                capture_output=True, text=True, check=True, timeout=60,
            )
        except (OSError, subprocess.SubprocessError):
            pytest.skip(f"git history with {commit[:7]} is not available")
        return done.stdout

    modules = {}
    for module in ("algorithm", name):
        text = source(f"agentkit/policy/stores/{module}.py").replace(
            "from agentkit.policy.stores.algorithm import",
            f"from release_{commit[:7]}_algorithm import",
        ).replace(  # an older store's run_once drove the policy's steps from their old home
            "from agentkit.policy.steps import invoke, once",
            "from agentkit.policy.once import invoke, once",
        )
        loaded = types.ModuleType(f"release_{commit[:7]}_{module}")
        sys.modules[loaded.__name__] = loaded  # dataclasses look their module up
        exec(compile(text, f"{commit[:7]}/{module}.py", "exec"), loaded.__dict__)  # noqa: S102 - our own release, from git
        modules[module] = loaded
    return modules[name]


def fill(store: Any) -> None:
    """What a user's store holds: a completed key, a claim whose outcome is unknown, and
    approvals in creation order."""
    assert store.run_once("done", lambda: dict(OK), "fp") == OK
    assert store.run_once("hung", lambda: dict(UNKNOWN), "fp") == UNKNOWN
    store.create_approval("a1", {"state": "pending", "n": 1})
    store.create_approval("a2", {"state": "pending", "n": 2})
    assert store.update_approval("a1", "pending", {"state": "approved", "n": 1})


def check_migrated(store: Any, let_lease_pass: Any) -> None:
    """Every promise holds on the migrated store; nothing runs twice."""
    op = Op(OK)
    assert store.run_once("done", op, "fp") == {**OK, "replayed": True}
    assert store.run_once("done", op, "other")["error"] == "idempotency_conflict"
    assert store.run_once("hung", op, "fp")["error"] == "in_progress"  # its lease holds
    let_lease_pass()
    lookup = Lookup(RECEIPT)
    assert store.run_once("hung", op, "fp", recover=lookup) == RECEIPT
    assert store.run_once("hung", op, "fp") == {**RECEIPT, "replayed": True}
    assert store.list_approvals() == [{"state": "approved", "n": 1}, {"state": "pending", "n": 2}]
    assert store.run_once("new", op, "fp") == OK
    assert (op.calls, lookup.calls) == (1, 1)


@pytest.mark.parametrize("made_by", ["release 1", "release 1 DDL"])
def test_sqlite_file_of_release_1_is_migrated_in_place(made_by: str, tmp_path: Path) -> None:
    path, clock = tmp_path / "store.sqlite", Clock()
    if made_by == "release 1":
        with release_1("sqlite").SQLiteIdempotencyStore(path, clock=clock) as old:
            fill(old)
    else:
        conn = sqlite3.connect(path)
        conn.executescript(RELEASE_1_SQLITE_DDL)
        conn.executemany("INSERT INTO results VALUES (?, 'fp', ?, 0)", [
            ("done", '{"data":"written","ok":true}')])
        conn.execute(
            "INSERT INTO claims VALUES ('hung', 'tok', 'fp', 'elsewhere', 1, NULL, ?, 0)",
            (clock.now + 300,),
        )
        conn.executemany("INSERT INTO approvals VALUES (?, ?, ?, 0)", [
            ("a1", "approved", '{"n":1,"state":"approved"}'),
            ("a2", "pending", '{"n":2,"state":"pending"}')])
        conn.commit()
        conn.close()

    def let_lease_pass() -> None:
        clock.now += 301

    with SQLiteIdempotencyStore(path, clock=clock) as store:
        check_migrated(store, let_lease_pass)
    with SQLiteIdempotencyStore(path, clock=clock) as store:  # opened again: nothing to do
        assert store.result("hung") == RECEIPT
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (3,)  # release 3: the audit log
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {"keys", "approvals", "audit"}
    finally:
        conn.close()


def test_sqlite_a_newer_schema_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    SQLiteIdempotencyStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match=r"schema version 99, newer than this agentkit") as info:
        SQLiteIdempotencyStore(path)
    assert str(path) in str(info.value)


def test_sqlite_a_database_of_something_else_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE results (x)")
    conn.close()
    with pytest.raises(StoreError, match="not an agentkit store"):
        SQLiteIdempotencyStore(path)


@pytest.fixture
def pg(tmp_path: Path):
    backend = Backend("postgres", tmp_path)
    yield backend
    backend.close()


def test_pg_tables_of_release_1_are_migrated_in_place(pg: Backend) -> None:
    assert pg.pg is not None
    with release_1("postgres").PostgresIdempotencyStore(pg.pg.dsn) as old:
        fill(old)
    store = pg()
    check_migrated(store, lambda: pg.advance(400))
    assert pg.sql("SELECT version FROM agentkit_schema ORDER BY version") == [(1,), (3,)]
    assert pg.sql(
        "SELECT to_regclass('agentkit_results'), to_regclass('agentkit_claims')"
    ) == [(None, None)]
    assert pg().result("hung") == RECEIPT  # another store: nothing left to migrate
