"""The SQLite store never risks the WAL-reset bug, and every claim is flushed before its
handler runs (docs/design.md#stores).

SQLite 3.7.0 to 3.51.2 (but 3.44.6+ and 3.50.7+) can corrupt a WAL database when two
connections checkpoint while a third commits. This machine's Python links 3.40.1: the store
runs a rollback journal there, WAL only on a fixed SQLite (simulated here by the version the
store reads, ``sqlite3.sqlite_version_info``)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentkit.policy.stores import SQLiteIdempotencyStore, StoreError
from agentkit.policy.stores.sqlite import journal_choice

ROOT = Path(__file__).resolve().parents[2]
OK = {"ok": True, "data": "written"}
AFFECTED = journal_choice((3, 51, 2))
FIXED = (3, 51, 3)


class Op:
    """A counting operation."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        return dict(OK)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


# --------------------------------------------------------------------------- the decision


@pytest.mark.parametrize(("version", "wal"), [
    ((3, 6, 23), False),  # before WAL existed
    ((3, 7, 0), False),
    ((3, 40, 1), False),  # Debian 12, this machine
    ((3, 44, 5), False),
    ((3, 44, 6), True),  # the 3.44 backport
    ((3, 44, 9), True),
    ((3, 45, 0), False),  # a later line without the backport
    ((3, 46, 1), False),
    ((3, 50, 6), False),
    ((3, 50, 7), True),  # the 3.50 backport
    ((3, 51, 0), False),
    ((3, 51, 2), False),
    ((3, 51, 3), True),  # the fix
    ((3, 52, 0), True),
    ((3, 53, 4), True),
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


def test_the_default_is_the_linked_sqlite(monkeypatch: pytest.MonkeyPatch) -> None:
    assert journal_choice() == journal_choice(sqlite3.sqlite_version_info)
    monkeypatch.setattr(sqlite3, "sqlite_version_info", FIXED)
    assert journal_choice().journal_mode == "wal"


# --------------------------------------------------------------------------- this machine


def test_this_machine_runs_a_rollback_journal_on_every_connection(tmp_path: Path) -> None:
    """On the linked SQLite (3.40.1 here) every connection the store opens, in four threads at
    once and in a second process, runs journal_mode=TRUNCATE at synchronous=FULL; the file
    is never WAL (byte 18 of its header: 1) and no log is ever made."""
    if journal_choice().journal_mode == "wal":
        pytest.skip(f"SQLite {sqlite3.sqlite_version} has the WAL-reset fix")
    path = tmp_path / "store.sqlite"
    barrier = threading.Barrier(4, timeout=10)
    op = Op()
    with SQLiteIdempotencyStore(path) as store:

        def hold(n: int) -> dict[str, Any]:
            barrier.wait()  # four operations running at once: four claims on four connections
            return op()

        threads = [threading.Thread(target=store.run_once, args=(f"k{n}", lambda n=n: hold(n)))
                   for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert op.calls == 4
        conns = [conn for pool in store._idle.values() for conn in pool]
        assert len(conns) >= 4 and store._idle[True] == []  # one level, one pool
        for conn in conns:
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("truncate",)
            assert conn.execute("PRAGMA synchronous").fetchone() == (2,)
        child = subprocess.run(
            [sys.executable, "-c", (
                "import json, sys\n"
                "from agentkit.policy.stores import SQLiteIdempotencyStore\n"
                "with SQLiteIdempotencyStore(sys.argv[1]) as store:\n"
                "    assert store.run_once('child', lambda: {'ok': True})['ok']\n"
                "    conns = [c for pool in store._idle.values() for c in pool]\n"
                "    print(json.dumps([[c.execute('PRAGMA journal_mode').fetchone()[0],"
                " c.execute('PRAGMA synchronous').fetchone()[0]] for c in conns]))\n"
            ), str(path)],
            env=_env(), capture_output=True, text=True, timeout=60, check=True,
        )
        assert json.loads(child.stdout) == [["truncate", 2]]
        assert store.result("child") == {"ok": True}
        assert not Path(f"{path}-wal").exists()
    assert path.read_bytes()[18:20] == b"\x01\x01"


def test_every_claim_commits_at_full_before_its_handler_runs(tmp_path: Path) -> None:
    """A reversible write (full_sync=False) and an irreversible one alike: the trace sees the
    claim's INSERT on a connection at synchronous=FULL, and the handler runs after it."""
    with SQLiteIdempotencyStore(tmp_path / "store.sqlite") as store:
        store.run_once("warm-up", Op())
        seen: list[tuple[str, int]] = []
        for conn in [c for pool in store._idle.values() for c in pool]:
            level: int = conn.execute("PRAGMA synchronous").fetchone()[0]

            def trace(sql: str, level: int = level) -> None:
                seen.append((sql.split()[0], level))

            conn.set_trace_callback(trace)
        for full_sync in (False, True):
            seen.clear()

            def handler() -> dict[str, Any]:
                seen.append(("handler", -1))
                return dict(OK)

            assert store.run_once(f"k{full_sync}", handler, "fp", full_sync=full_sync) == OK
            assert seen[:2] == [("INSERT", 2), ("handler", -1)], full_sync


def test_the_careful_path_claims_at_full_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim taken over (the careful path: a stale claim, its lookup saying not done) is a
    claim: its transaction runs on a FULL connection, even in WAL with full_sync=False."""
    monkeypatch.setattr(sqlite3, "sqlite_version_info", FIXED)  # WAL: two levels to tell apart
    now = [1000.0]
    with SQLiteIdempotencyStore(tmp_path / "store.sqlite", 1, clock=lambda: now[0]) as store:
        assert store.journal.journal_mode == "wal"
        assert store.run_once("k", lambda: {"ok": False, "error": "outcome_unknown"})["error"] \
            == "outcome_unknown"
        now[0] += 10  # the claim's lease has passed
        seen: list[tuple[int, str]] = []
        for pool in store._idle.values():
            for conn in pool:
                level: int = conn.execute("PRAGMA synchronous").fetchone()[0]

                def trace(sql: str, level: int = level) -> None:
                    seen.append((level, sql))

                conn.set_trace_callback(trace)
        op = Op()
        assert store.run_once("k", op, recover=lambda: None) == OK
        assert op.calls == 1
        takeover = [level for level, sql in seen if sql.startswith("UPDATE keys SET token")]
        assert takeover == [2]
        assert {level for level, sql in seen if sql in ("BEGIN IMMEDIATE", "COMMIT")} == {2}


# --------------------------------------------------------------------------- an older file


def _leave_wal(path: Path, keys: int) -> None:
    """A store of an older release (WAL), killed after ``keys`` new keys: its log still
    holds them (no checkpoint ran: it never closed)."""
    subprocess.run(
        [sys.executable, "-c", (
            "import os, sqlite3, sys\n"
            "sqlite3.sqlite_version_info = (3, 51, 3)  # the store runs WAL, as releases did\n"
            "from agentkit.policy.stores import SQLiteIdempotencyStore\n"
            "store = SQLiteIdempotencyStore(sys.argv[1])\n"
            "for i in range(int(sys.argv[2])):\n"
            "    assert store.run_once(f'k{i}', lambda: {'ok': True, 'data': i}, 'fp')['ok']\n"
            "os._exit(0)  # killed: nothing closes, nothing checkpoints\n"
        ), str(path), str(keys)],
        env=_env(), timeout=60, check=True,
    )


def test_a_file_left_in_wal_is_switched_and_keeps_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    _leave_wal(path, 20)
    assert path.read_bytes()[18] == 2  # WAL
    assert os.path.getsize(f"{path}-wal") > 0  # the keys are in the log alone
    op = Op()
    with SQLiteIdempotencyStore(path) as store:
        assert (store.journal.journal_mode, store.journal.claims) == (AFFECTED.journal_mode, "FULL")
        for i in range(20):
            assert store.run_once(f"k{i}", op, "fp") == {"ok": True, "data": i, "replayed": True}
        assert store.run_once("new", op, "fp") == OK
        [conn] = store._idle[False]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("truncate",)
    assert op.calls == 1  # only the new key ran
    assert path.read_bytes()[18] == 1  # a rollback journal now
    assert not Path(f"{path}-wal").exists()
    with SQLiteIdempotencyStore(path) as store:  # and again: nothing to switch
        assert store.run_once("k3", op, "fp") == {"ok": True, "data": 3, "replayed": True}


def test_a_wal_file_another_process_holds_is_switched_once_it_lets_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leaving WAL needs every other connection closed: SQLite answers "locked" at once, and
    the store retries (its busy handling) until the other lets go; past busy_timeout it
    refuses, saying why, and the file stays WAL with its keys."""
    path = tmp_path / "store.sqlite"
    _leave_wal(path, 3)
    other = sqlite3.connect(path, isolation_level=None)  # an older worker still running
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


def test_a_new_connection_refuses_a_file_put_back_in_wal(tmp_path: Path) -> None:
    """A process that puts the file back in WAL (an older release started again) and holds
    it: a new connection of the store cannot leave WAL and is refused, one error saying why,
    rather than run in WAL on an affected SQLite. (A connection already pooled follows the
    file into WAL: stop the old workers before upgrading, as for a schema migration.)"""
    path = tmp_path / "store.sqlite"
    with SQLiteIdempotencyStore(path, busy_timeout_seconds=0.1) as store:
        assert store.run_once("k", Op()) == OK
        other = sqlite3.connect(path, isolation_level=None)
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
