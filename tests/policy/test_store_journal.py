"""The SQLite store never risks the WAL-reset bug, and every claim is flushed before its
handler runs (docs/design.md#stores).

SQLite 3.7.0 to 3.51.2 (but 3.44.6+ and 3.50.7+) can corrupt a WAL database when two
connections checkpoint while a third commits. The store runs on apsw, whose wheels bundle
their own SQLite (3.54.1 here, with the fix), not on the stdlib's sqlite3 (this machine's
Python links 3.40.1, affected): WAL, claims at synchronous=FULL, results at NORMAL. The
decision still reads the bundled version (``apsw.sqlite_lib_version()``) and falls back to a
rollback journal on an affected one (an apsw built against an old system SQLite), simulated
here by the version the store reads; that fallback runs on real connections below too.

Every connection that holds a lock in these tests is apsw's: two SQLite libraries in one
process do not see each other's locks (https://sqlite.org/howtocorrupt.html, 2.2.1), so the
stdlib's sqlite3 only looks at files no store has open, or runs in another process."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentkit.policy.stores import SQLiteIdempotencyStore, StoreError
from agentkit.policy.stores.sqlite import journal_choice, sqlite_version

ROOT = Path(__file__).resolve().parents[2]
OK = {"ok": True, "data": "written"}
AFFECTED = "3.40.1"  # Debian 12's, which the stdlib's sqlite3 links here
#: The release that ran a rollback journal (TRUNCATE, every commit at FULL) on the stdlib's
#: affected SQLite: the files it left are the ones this release switches back to WAL.
TRUNCATE_RELEASE = "344b3bc0de8163794e78ee50d98fbd4c6c19ece0"


class Op:
    """A counting operation."""

    def __init__(self, result: dict[str, Any] | None = None) -> None:
        self.calls = 0
        self.result = dict(OK) if result is None else result

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        return dict(self.result)


def _env(pythonpath: str = str(ROOT)) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    return env


def _pooled(store: SQLiteIdempotencyStore) -> list[apsw.Connection]:
    return [conn for pool in store._idle.values() for conn in pool]


def _trace(conn: apsw.Connection, seen: Any) -> None:
    """``seen(sql)`` for every statement ``conn`` runs (apsw's exec tracer)."""

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: Any) -> bool:
        seen(sql)
        return True

    conn.set_exec_trace(tracer)


@pytest.fixture
def affected(monkeypatch: pytest.MonkeyPatch) -> str:
    """An apsw whose SQLite has the WAL-reset bug (as one built against Debian 12's system
    SQLite would be): the store's fallback, run on the bundled SQLite's real connections."""
    monkeypatch.setattr(apsw, "sqlite_lib_version", lambda: AFFECTED)
    return AFFECTED


# --------------------------------------------------------------------------- the decision


@pytest.mark.parametrize(("version", "wal"), [
    ((3, 6, 23), False),  # before WAL existed
    ((3, 7, 0), False),
    ((3, 40, 1), False),  # Debian 12, this machine's stdlib sqlite3
    ((3, 44, 5), False),
    ((3, 44, 6), True),  # the 3.44 backport
    ((3, 44, 9), True),
    ((3, 45, 0), False),  # a later line without the backport
    ((3, 46, 1), False),
    ((3, 50, 6), False),
    ((3, 50, 7), True),  # the 3.50 backport
    ((3, 51, 0), False),
    ((3, 51, 2), False),
    ((3, 51, 3), True),  # the fix: apsw 3.51.3.0 bundles it (the floor in pyproject.toml)
    ((3, 52, 0), True),
    ((3, 54, 1), True),  # apsw 3.54.1.0, installed here
    ((4, 0, 0), True),
])
def test_the_journal_is_wal_only_on_a_sqlite_with_the_fix(version: tuple[int, int, int], wal: bool) -> None:
    choice = journal_choice(version)
    shown = ".".join(map(str, version))
    if wal:
        assert (choice.journal_mode, choice.claims, choice.results) == ("wal", "FULL", "NORMAL")
        assert choice.why == f"SQLite {shown} has the WAL-reset fix"
    else:
        assert (choice.journal_mode, choice.claims, choice.results) == ("truncate", "FULL", "FULL")
        assert choice.why.startswith(f"SQLite {shown} has the WAL-reset bug")


def test_the_store_runs_the_sqlite_apsw_bundles_not_the_stdlibs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default is apsw's SQLite, which has the fix (WAL), whatever the stdlib's sqlite3
    links; an apsw reporting an affected SQLite gets the rollback journal."""
    bundled = tuple(int(part) for part in apsw.sqlite_lib_version().split("."))
    assert sqlite_version() == bundled >= (3, 51, 3)
    assert journal_choice() == journal_choice(bundled)
    assert journal_choice().journal_mode == "wal"
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 40, 1))  # not what it reads
    assert journal_choice().journal_mode == "wal"
    for reported, expected in [("3.40.1", (3, 40, 1)), ("3.51.2", (3, 51, 2)),
                               ("3.50.7", (3, 50, 7)), ("3.53.0.1", (3, 53, 0)),
                               ("3.52", (3, 52))]:
        monkeypatch.setattr(apsw, "sqlite_lib_version", lambda reported=reported: reported)
        assert sqlite_version() == expected
        assert journal_choice().journal_mode == journal_choice(expected).journal_mode
    monkeypatch.setattr(apsw, "sqlite_lib_version", lambda: "3.40.1")
    assert journal_choice().journal_mode == "truncate"


# --------------------------------------------------------------------------- this machine


def test_this_machine_runs_wal_with_claims_at_full_and_results_at_normal(tmp_path: Path) -> None:
    """On the bundled SQLite every connection the store opens, in four threads and in a
    second process, runs WAL: the claims' connections at synchronous=FULL (2), the
    results' at NORMAL (1); the file's header says WAL (bytes 18-19: 2)."""
    assert journal_choice().journal_mode == "wal"
    path = tmp_path / "store.sqlite"
    barrier = threading.Barrier(4, timeout=10)
    op = Op()
    with SQLiteIdempotencyStore(path) as store:

        def hold() -> dict[str, Any]:
            barrier.wait()  # four operations running at once: four claims on four connections
            return op()

        threads = [threading.Thread(target=store.run_once, args=(f"k{n}", hold))
                   for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert op.calls == 4
        assert store._idle[True] and store._idle[False]  # (claims may reuse a connection)
        for full, pool in store._idle.items():
            for conn in pool:
                assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
                assert conn.execute("PRAGMA synchronous").fetchone() == ((2,) if full else (1,))
        assert path.read_bytes()[18:20] == b"\x02\x02"
        child = subprocess.run(
            [sys.executable, "-c", (
                "import json, sys\n"
                "from agentkit.policy.stores import SQLiteIdempotencyStore\n"
                "with SQLiteIdempotencyStore(sys.argv[1]) as store:\n"
                "    assert store.run_once('child', lambda: {'ok': True})['ok']\n"
                "    print(json.dumps({str(full): [[c.execute('PRAGMA journal_mode').fetchone()[0],"
                " c.execute('PRAGMA synchronous').fetchone()[0]] for c in pool]"
                " for full, pool in store._idle.items()}))\n"
            ), str(path)],
            env=_env(), capture_output=True, text=True, timeout=60, check=True,
        )
        assert json.loads(child.stdout) == {"True": [["wal", 2]], "False": [["wal", 1]]}
        assert store.result("child") == {"ok": True}


def test_every_claim_commits_at_full_before_its_handler_runs(tmp_path: Path) -> None:
    """A reversible write (full_sync=False) and an irreversible one alike: the trace sees the
    claim's INSERT on a connection at synchronous=FULL, then the handler, then the result's
    UPDATE on one at NORMAL."""
    with SQLiteIdempotencyStore(tmp_path / "store.sqlite") as store:
        store.run_once("warm-up", Op())
        seen: list[tuple[str, int]] = []
        conns = _pooled(store)
        assert len(conns) == 2  # one connection a level
        for conn in conns:
            level: int = conn.execute("PRAGMA synchronous").fetchone()[0]
            _trace(conn, lambda sql, level=level: seen.append((sql.split()[0], level)))
        for full_sync in (False, True):
            seen.clear()
            op = Op()

            def handler(op: Op = op) -> dict[str, Any]:
                seen.append(("handler", -1))
                return op()

            assert store.run_once(f"k{full_sync}", handler, "fp", full_sync=full_sync) == OK
            assert seen == [("INSERT", 2), ("handler", -1), ("UPDATE", 1)], full_sync
            assert op.calls == 1


def test_the_careful_path_claims_at_full_too(tmp_path: Path) -> None:
    """A claim taken over (the careful path: a stale claim, its lookup saying not done) is a
    claim: its transaction runs on a FULL connection, even with full_sync=False."""
    now = [1000.0]
    with SQLiteIdempotencyStore(tmp_path / "store.sqlite", 1, clock=lambda: now[0]) as store:
        assert store.journal.journal_mode == "wal"
        assert store.run_once("k", lambda: {"ok": False, "error": "outcome_unknown"})["error"] \
            == "outcome_unknown"
        now[0] += 10  # the claim's lease has passed
        seen: list[tuple[int, str]] = []
        for conn in _pooled(store):
            level: int = conn.execute("PRAGMA synchronous").fetchone()[0]
            _trace(conn, lambda sql, level=level: seen.append((level, sql)))
        op = Op()
        assert store.run_once("k", op, recover=lambda: None) == OK
        assert op.calls == 1
        takeover = [level for level, sql in seen if sql.startswith("UPDATE keys SET token")]
        assert takeover == [2]
        assert {level for level, sql in seen if sql in ("BEGIN IMMEDIATE", "COMMIT")} == {2}


def test_an_affected_sqlite_runs_a_rollback_journal_on_every_connection(
    tmp_path: Path, affected: str
) -> None:
    """The fallback, on real connections: an affected SQLite gets journal_mode=TRUNCATE at
    synchronous=FULL on every connection (one pool), the file is never WAL (header: 1) and
    no log is made; claims still commit before their handler runs."""
    path = tmp_path / "store.sqlite"
    with SQLiteIdempotencyStore(path) as store:
        assert store.journal == journal_choice((3, 40, 1))
        seen: list[str] = []
        op = Op()

        def handler() -> dict[str, Any]:
            seen.append("handler")
            return op()

        assert store.run_once("warm-up", Op(), full_sync=True) == OK
        [conn] = store._idle[False]
        assert store._idle[True] == []
        _trace(conn, lambda sql: seen.append(sql.split()[0]))
        assert store.run_once("k", handler, "fp") == OK
        assert seen == ["INSERT", "handler", "UPDATE"] and op.calls == 1
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("truncate",)
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)
        assert not Path(f"{path}-wal").exists()
    assert path.read_bytes()[18:20] == b"\x01\x01"


# --------------------------------------------------------------------------- older files


def _previous_release(tmp_path: Path) -> Path:
    """The agentkit package of the release that ran a rollback journal, from git (skipped
    where that history is not available), to run in a process of its own."""
    folder = tmp_path / "truncate-release"
    folder.mkdir()
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", TRUNCATE_RELEASE, "agentkit"],
                                 capture_output=True, check=True, timeout=60)
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True,
                       timeout=60)
    except (OSError, subprocess.SubprocessError):
        pytest.skip(f"git history with {TRUNCATE_RELEASE[:7]} is not available")
    return folder


def test_a_file_left_in_truncate_by_the_previous_release_is_switched_to_wal_and_keeps_its_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The previous release (stdlib sqlite3 3.40.1: TRUNCATE) fills a store, leaves a claim
    its process never completes and an approval, then is killed in the middle of a
    transaction that deletes every key, its changes already spilled to the file: a hot
    journal. This release's store rolls it back, switches the file to WAL, and every key is
    there: the completed ones replay (0 runs), the dead worker's claim is recovered by its
    lookup, the approval is kept."""
    package = _previous_release(tmp_path)
    path = tmp_path / "store.sqlite"
    child = subprocess.run(
        [sys.executable, "-c", (
            "import json, os, sqlite3, sys\n"
            "from agentkit.policy.stores import SQLiteIdempotencyStore, sqlite\n"
            "store = SQLiteIdempotencyStore(sys.argv[1])\n"
            "for i in range(200):\n"
            "    assert store.run_once(f'k{i}', lambda: {'ok': True, 'data': i}, 'fp')['ok']\n"
            "assert store.run_once('hung', lambda: {'ok': False, 'error': 'outcome_unknown'},"
            " 'fp')['error'] == 'outcome_unknown'\n"
            "store.create_approval('a1', {'state': 'pending'})\n"
            "conn = store._checkout(True)\n"
            "print(json.dumps([sqlite.__file__, sqlite3.sqlite_version, store.journal.journal_mode,"
            " conn.execute('PRAGMA journal_mode').fetchone()[0]]), flush=True)\n"
            "conn.execute('PRAGMA cache_size = 1')  # spill: the file changes before COMMIT\n"
            "conn.execute('BEGIN IMMEDIATE')\n"
            "conn.execute('DELETE FROM keys')\n"
            "os._exit(0)  # killed mid-transaction: a hot journal, nothing closed\n"
        ), str(path)],
        env=_env(str(package)), cwd=package, capture_output=True, text=True, timeout=120,
        check=True,
    )
    module, linked, chosen, mode = json.loads(child.stdout)
    assert module.startswith(str(package))  # the previous release ran, not this one
    if chosen != "truncate":
        pytest.skip(f"the stdlib's SQLite {linked} is fixed: the previous release ran WAL")
    assert mode == "truncate"
    assert path.read_bytes()[18] == 1  # a rollback journal's file
    journal = Path(f"{path}-journal")
    assert journal.stat().st_size > 0  # hot: the killed transaction's pages

    op, lookups = Op(), []
    with caplog.at_level(logging.INFO, logger="agentkit"), SQLiteIdempotencyStore(path) as store:
        assert store.journal.journal_mode == "wal"
        assert path.read_bytes()[18:20] == b"\x02\x02"  # switched, at once
        for i in range(200):
            assert store.run_once(f"k{i}", op, "fp") == {"ok": True, "data": i, "replayed": True}
        assert op.calls == 0
        assert store.run_once("hung", op, "fp", recover=lambda: lookups.append(1)) == OK
        assert (op.calls, len(lookups)) == (1, 1)  # its owner is gone: recovered at once
        assert store.get_approval("a1") == {"state": "pending"}
        for conn in _pooled(store):
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert "switched from a rollback journal" in caplog.text
    assert not journal.exists() or journal.stat().st_size == 0
    with SQLiteIdempotencyStore(path) as store:  # and again: nothing to switch
        assert store.run_once("k3", op, "fp") == {"ok": True, "data": 3, "replayed": True}
        assert store.run_once("hung", op, "fp") == {**OK, "replayed": True}
    assert op.calls == 1


def test_the_previous_release_refuses_a_file_this_release_holds_in_wal(tmp_path: Path) -> None:
    """An old worker started while this release has the file open in WAL does not run WAL on
    its affected SQLite: it refuses, saying why (the file's newer schema, once this release
    has migrated it, else the WAL it cannot leave while this release holds it), and the
    file stays WAL."""
    package = _previous_release(tmp_path)
    path = tmp_path / "store.sqlite"
    op = Op()
    with SQLiteIdempotencyStore(path) as store:
        assert store.run_once("k", op, "fp") == OK
        child = subprocess.run(
            [sys.executable, "-c", (
                "import sqlite3, sys\n"
                "from agentkit.policy.stores import SQLiteIdempotencyStore, StoreError\n"
                "if sqlite3.sqlite_version_info >= (3, 51, 3):\n"
                "    print('fixed'); sys.exit(0)\n"
                "try:\n"
                "    SQLiteIdempotencyStore(sys.argv[1], busy_timeout_seconds=0.2)\n"
                "except StoreError as exc:\n"
                "    print(exc)\n"
            ), str(path)],
            env=_env(str(package)), cwd=package, capture_output=True, text=True, timeout=120,
        check=True,
        )
        if child.stdout.strip() == "fixed":
            pytest.skip("the stdlib's SQLite is fixed: the previous release ran WAL")
        assert ("WAL mode and another process has it open" in child.stdout
                or "newer than this agentkit understands" in child.stdout), child.stdout
        assert store.run_once("k", op, "fp") == {**OK, "replayed": True}
        assert store.run_once("new", op, "fp") == OK
    assert op.calls == 2
    assert path.read_bytes()[18] == 2


def _leave_wal(path: Path, keys: int) -> None:
    """A store of this release (WAL), killed after ``keys`` new keys: its log still holds
    them (no checkpoint ran: it never closed)."""
    subprocess.run(
        [sys.executable, "-c", (
            "import os, sys\n"
            "from agentkit.policy.stores import SQLiteIdempotencyStore\n"
            "store = SQLiteIdempotencyStore(sys.argv[1])\n"
            "assert store.journal.journal_mode == 'wal'\n"
            "for i in range(int(sys.argv[2])):\n"
            "    assert store.run_once(f'k{i}', lambda: {'ok': True, 'data': i}, 'fp')['ok']\n"
            "os._exit(0)  # killed: nothing closes, nothing checkpoints\n"
        ), str(path), str(keys)],
        env=_env(), timeout=60, check=True,
    )


def test_a_killed_wal_store_keeps_its_keys_in_the_log(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    _leave_wal(path, 20)
    assert path.read_bytes()[18] == 2  # WAL
    assert os.path.getsize(f"{path}-wal") > 0  # the keys are in the log alone
    op = Op()
    with SQLiteIdempotencyStore(path) as store:
        for i in range(20):
            assert store.run_once(f"k{i}", op, "fp") == {"ok": True, "data": i, "replayed": True}
        assert store.run_once("new", op, "fp") == OK
    assert op.calls == 1  # only the new key ran


def test_on_an_affected_sqlite_a_file_left_in_wal_is_switched_and_keeps_its_keys(
    tmp_path: Path, affected: str
) -> None:
    path = tmp_path / "store.sqlite"
    _leave_wal(path, 20)
    assert os.path.getsize(f"{path}-wal") > 0
    op = Op()
    with SQLiteIdempotencyStore(path) as store:
        assert (store.journal.journal_mode, store.journal.claims) == ("truncate", "FULL")
        for i in range(20):
            assert store.run_once(f"k{i}", op, "fp") == {"ok": True, "data": i, "replayed": True}
        assert store.run_once("new", op, "fp") == OK
        [conn] = store._idle[False]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("truncate",)
    assert op.calls == 1  # only the new key ran
    assert path.read_bytes()[18] == 1  # a rollback journal now
    assert not Path(f"{path}-wal").exists()


def test_on_an_affected_sqlite_a_wal_file_another_connection_holds_is_switched_once_it_lets_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, affected: str
) -> None:
    """Leaving WAL needs every other connection closed: SQLite answers "locked" at once, and
    the store retries (its busy handling) until the other lets go; past busy_timeout it
    refuses, saying why, and the file stays WAL with its keys."""
    path = tmp_path / "store.sqlite"
    _leave_wal(path, 3)
    other = apsw.Connection(str(path))  # a worker still running on it
    assert other.execute("SELECT count(*) FROM keys").fetchone() == (3,)
    with pytest.raises(StoreError, match="WAL mode and another process has it open"):
        SQLiteIdempotencyStore(path, busy_timeout_seconds=0.1)
    assert path.read_bytes()[18] == 2

    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the store's retry pause: the other worker stops
        sleeps.append(seconds)
        other.close()

    monkeypatch.setattr(time, "sleep", sleep)  # (the module the store's retry loop sleeps with)
    op = Op()
    with SQLiteIdempotencyStore(path) as store:
        assert store.run_once("k1", op, "fp") == {"ok": True, "data": 1, "replayed": True}
    assert len(sleeps) == 1 and op.calls == 0
    assert path.read_bytes()[18] == 1


def test_on_an_affected_sqlite_a_new_connection_refuses_a_file_put_back_in_wal(
    tmp_path: Path, affected: str
) -> None:
    """A connection that puts the file back in WAL and holds it: a new connection of the
    store cannot leave WAL and is refused, one error saying why, rather than run in WAL on
    an affected SQLite."""
    path = tmp_path / "store.sqlite"
    with SQLiteIdempotencyStore(path, busy_timeout_seconds=0.1) as store:
        assert store.run_once("k", Op()) == OK
        other = apsw.Connection(str(path))
        try:
            assert other.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
            assert other.execute("SELECT count(*) FROM keys").fetchone() == (1,)  # it holds it
            with pytest.raises(StoreError, match="put back in WAL mode"):
                store._connect(full_sync=False)
        finally:
            other.close()
        conn = store._connect(full_sync=False)  # once it let go, a new connection switches it back
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("truncate",)
        finally:
            conn.close()


def test_a_transactional_write_is_one_commit_its_claim_effect_and_result(tmp_path: Path) -> None:
    """A transactional write's new key is one commit (docs/design.md#transactional-writes):
    the key is read, and its claim is written in the effect's own ``BEGIN IMMEDIATE``
    transaction with the handler's INSERT and the key's result, committed once at FULL. No
    statement writes before it, and nothing commits after it."""
    from agentkit import CallContext, ToolRegistry, ToolRunner, ToolSpec, current_call

    def note(ref: str) -> str:
        call = current_call()
        assert call is not None
        call.connection.execute("INSERT INTO notes (ref) VALUES (?)", (ref,))
        seen.append(("handler", -1))
        return "noted"

    seen: list[tuple[str, int]] = []
    with SQLiteIdempotencyStore(tmp_path / "store.sqlite") as store:
        with store.transaction(write=True) as tx:
            tx.connection.execute("CREATE TABLE notes (ref TEXT)")
        store.run_once("warm-up", Op())
        for conn in _pooled(store):
            level: int = conn.execute("PRAGMA synchronous").fetchone()[0]
            _trace(conn, lambda sql, level=level: seen.append((sql.split()[0], level)))
        spec = ToolSpec("note", "Note.", "reversible_write", 5.0, 1, 100, note, transactional=True)
        runner = ToolRunner(ToolRegistry([spec]), store=store, context=CallContext(task_id="t"))
        assert runner.call("note", {"ref": "r1"})["ok"]
        assert runner.call("note", {"ref": "r1"})["replayed"]  # a read, nothing written
        with store.transaction(write=False) as tx:
            assert tx.connection.execute("SELECT count(*) FROM notes").fetchone() == (1,)
    writes = [step for step in seen if step[0] != "SELECT"]
    assert writes == [("BEGIN", 2), ("INSERT", 2), ("INSERT", 2), ("handler", -1),
                      ("UPDATE", 2), ("COMMIT", 2)]  # the claim, the effect, the result: one commit
    assert seen[0] == ("SELECT", 2)  # the key's read, on the effect transaction's connection


