"""Store operations touch only agentkit stores and never make a second write possible
(docs/design.md#operating-the-stores).

- ``copy_store`` refuses while the source holds an open claim (nothing copied), refuses a
  source that changes during the copy, and never copies a store onto itself;
- ``release_stale`` clears a claim only after the checks a runner makes before taking one
  over: a completed key, an unknown key and a live claim are left as they are;
- ``open_existing_store`` opens only a store that exists with agentkit's tables, and creates
  nothing in a file or database that has none.

Every backend runs each test, and each counts the operation's real runs.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from test_stores import OK, UNKNOWN, WAIT, Backend, Hung, Op, PgSchema

from agentkit.policy.stores import (
    CopyRefused,
    KeyEntry,
    StoreError,
    copy_store,
    open_existing_store,
)
from agentkit.policy.stores.algorithm import Claim
from agentkit.policy.stores.owner import this_process

KINDS = ["memory", "sqlite", "postgres"]


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path):
    made = Backend(request.param, tmp_path)
    yield made
    made.close()


@pytest.fixture(params=KINDS)
def target_backend(request: pytest.FixtureRequest, tmp_path: Path):
    made = Backend(request.param, tmp_path / "target")
    yield made
    made.close()


def keys_of(store: Any) -> dict[str, str]:
    return {entry.key: entry.state for entry in store.entries()}


# --------------------------------------------------------------------------- copy


def test_a_copy_is_refused_while_a_write_is_running_and_nothing_is_copied(
    backend: Backend, target_backend: Backend,
) -> None:
    """Issue 39: a copy while a worker wrote let 145 of 250 intents write twice."""
    source, target = backend(), target_backend()
    done, hung = Op(OK), Hung()
    assert source.run_once("done", done, "fp") == OK
    answers: list[dict[str, Any]] = []
    worker = threading.Thread(target=lambda: answers.append(source.run_once("paying", hung, "fp")))
    worker.start()
    try:
        assert hung.entered.wait(WAIT)  # the handler is writing now: its claim is open
        with pytest.raises(CopyRefused, match=r"^1 open claim .*nothing was copied"):
            copy_store(source, target)
        assert keys_of(target) == {} and target.list_approvals() == []
    finally:
        hung.go.set()
        worker.join(WAIT)
    assert answers == [OK]
    copied = copy_store(source, target)  # the write has ended: its result is copied
    assert (copied.keys, copied.keys_present) == (2, 0)
    again = Op(OK)
    assert target.run_once("paying", again, "fp")["replayed"] is True
    assert target.run_once("done", again, "fp")["replayed"] is True
    assert (hung.calls, done.calls, again.calls) == (1, 1, 0)  # one real write per intent


def test_a_stale_claim_is_copied_as_it_is(backend: Backend, target_backend: Backend) -> None:
    source, target = backend(), target_backend()
    unknown = Op(UNKNOWN)
    assert source.run_once("unknown", unknown, "fp") == UNKNOWN
    with pytest.raises(CopyRefused, match="1 open claim"):  # its lease is not over yet
        copy_store(source, target)
    backend.advance(400)
    assert copy_store(source, target).keys == 1
    again = Op(OK)
    assert target.run_once("unknown", again, "fp")["error"] in ("in_progress", "outcome_unknown")
    assert (unknown.calls, again.calls) == (1, 0)


def test_a_source_that_changes_before_its_batch_is_written_is_refused_with_nothing_copied(
    backend: Backend, target_backend: Backend,
) -> None:
    source, target = backend(), target_backend()
    first, late = Op(OK), Op(OK)
    assert source.run_once("a", first, "fp") == OK
    survey_approvals = source.approval_page

    def a_worker_writes_after_the_survey(state: str | None = None) -> list[Any]:
        read = survey_approvals(state)
        source.approval_page = survey_approvals  # once: the survey's last read
        assert source.run_once("b", late, "fp") == OK
        return read

    source.approval_page = a_worker_writes_after_the_survey
    with pytest.raises(CopyRefused, match=r"changed during the copy.*nothing was copied"):
        copy_store(source, target)
    assert keys_of(target) == {}
    assert keys_of(source) == {"a": "completed", "b": "completed"}
    assert copy_store(source, target).keys == 2  # nothing runs meanwhile: the copy goes
    assert target.run_once("b", late, "fp")["replayed"] is True
    assert (first.calls, late.calls) == (1, 1)


def test_a_source_that_changes_while_the_copy_writes_is_refused(
    backend: Backend, target_backend: Backend,
) -> None:
    source, target = backend(), target_backend()
    assert source.run_once("a", Op(OK), "fp") == OK
    late = Op(OK)
    add_keys = target.add_keys

    def a_worker_writes_meanwhile(entries: list[KeyEntry]) -> int:
        assert source.run_once("z", late, "fp") == OK  # a key after the copied batch
        return add_keys(entries)

    target.add_keys = a_worker_writes_meanwhile
    with pytest.raises(CopyRefused, match=r"changed during the copy.*1 keys and 0 approvals"):
        copy_store(source, target)
    target.add_keys = add_keys
    assert keys_of(target) == {"a": "completed"} and late.calls == 1
    copied = copy_store(source, target)  # once the worker is stopped: the rest
    assert (copied.keys, copied.keys_present) == (1, 1)
    assert target.run_once("z", late, "fp")["replayed"] is True and late.calls == 1


def test_a_source_whose_audit_log_grows_during_the_copy_is_refused(
    backend: Backend, target_backend: Backend,
) -> None:
    """A person's release or a purge on the source while its entries are copied (a worker
    still on it): refused; copying again once it is quiet adds the rest, one chain."""
    source, target = backend(), target_backend()
    source.append_audit({"action": "note", "who": "ops", "n": 1})
    add_audit = target.add_audit

    def a_person_acts_meanwhile(entries: list[tuple[int, str]]) -> int:
        source.append_audit({"action": "note", "who": "ops", "n": 2})
        target.add_audit = add_audit  # once
        return add_audit(entries)

    target.add_audit = a_person_acts_meanwhile
    with pytest.raises(CopyRefused, match="changed during the copy"):
        copy_store(source, target)
    copied = copy_store(source, target)
    assert (copied.audit, copied.audit_present) == (1, 1)
    assert list(target.audit_entries()) == list(source.audit_entries())


def test_a_store_is_never_copied_onto_itself(backend: Backend) -> None:
    store = backend()
    op = Op(OK)
    assert store.run_once("a", op, "fp") == OK
    same = [store] if backend.kind == "memory" else [store, backend()]
    for target in same:
        with pytest.raises(CopyRefused, match="the target is the source itself"):
            copy_store(store, target)
    assert keys_of(store) == {"a": "completed"} and op.calls == 1


def test_the_same_sqlite_file_by_another_path_is_the_same_store(tmp_path: Path) -> None:
    backend = Backend("sqlite", tmp_path)
    try:
        store = backend()
        store.run_once("a", Op(OK), "fp")
        link = tmp_path / "link.sqlite"
        link.symlink_to(backend.path)
        for path in (link, tmp_path / "." / backend.path.name):
            from agentkit import SQLiteIdempotencyStore

            with SQLiteIdempotencyStore(path) as other, pytest.raises(CopyRefused):
                copy_store(store, other)
    finally:
        backend.close()


def test_another_schema_on_the_same_server_is_another_store(tmp_path: Path) -> None:
    one, two = Backend("postgres", tmp_path), Backend("postgres", tmp_path)
    try:
        source, target = one(), two()
        source.run_once("a", Op(OK), "fp")
        assert source.identity() != target.identity()
        assert source.identity() == one().identity()
        assert copy_store(source, target).keys == 1
    finally:
        one.close()
        two.close()


# --------------------------------------------------------------------------- release


def test_release_clears_only_a_stale_claim(backend: Backend) -> None:
    store = backend()
    done, unknown = Op(OK), Op(UNKNOWN)
    assert store.run_once("done", done, "fp") == OK
    assert store.run_once("unknown", unknown, "fp") == UNKNOWN

    refused = store.release_stale("unknown")  # its lease has not passed: it may be running
    assert (refused.outcome, refused.claim is not None) == ("live", True)
    assert store.release_stale("done").outcome == "completed"
    assert store.release_stale("nope").outcome == "unknown"
    assert keys_of(store) == {"done": "completed", "unknown": "claimed"}

    backend.advance(400)
    released = store.release_stale("unknown")
    assert released.outcome == "released" and released.claim is not None
    assert released.claim.fingerprint == "fp"
    assert keys_of(store) == {"done": "completed"}
    assert store.release_stale("unknown").outcome == "unknown"  # a second time: nothing
    again = Op(OK)  # a person checked it did not happen: the key runs once more
    assert store.run_once("unknown", again, "fp") == OK
    assert store.run_once("done", again, "fp")["replayed"] is True
    assert (done.calls, unknown.calls, again.calls) == (1, 1, 1)


def test_release_refuses_a_claim_whose_write_is_running_here(backend: Backend) -> None:
    store, hung = backend(0.05), Hung()
    answers: list[dict[str, Any]] = []
    worker = threading.Thread(target=lambda: answers.append(store.run_once("k", hung, "fp")))
    worker.start()
    try:
        assert hung.entered.wait(WAIT)
        backend.advance(10.0)  # its lease has passed, but the write is still running here
        assert store.release_stale("k").outcome == "live"
    finally:
        hung.go.set()
        worker.join(WAIT)
    assert answers == [OK] and hung.calls == 1
    assert store.run_once("k", hung, "fp")["replayed"] is True and hung.calls == 1


def test_release_clears_a_claim_whose_owner_is_gone_from_this_host(backend: Backend) -> None:
    store = backend()
    pid, start = this_process()
    far = store.store_now() + 3600
    owners = {  # a lease an hour long: only the owner check can call it stale
        "gone": Claim("t-gone", "fp", store.host, pid, (start or 0) + 1, far),  # pid reused
        "alive": Claim("t-alive", "fp", store.host, pid, start, far),
        "elsewhere": Claim("t-far", "fp", "another-host.invalid", 1, None, far),
    }
    store.add_keys([KeyEntry(key, "fp", None, claim, None) for key, claim in owners.items()])
    assert store.release_stale("alive").outcome == "live"
    assert store.release_stale("elsewhere").outcome == "live"  # judged by its lease alone
    expected = "live" if backend.kind == "memory" else "released"  # memory never knows
    assert store.release_stale("gone").outcome == expected
    op = Op(OK)
    for key in owners:
        answer = store.run_once(key, op, "fp")
        assert answer == OK if key == "gone" and expected == "released" else (
            answer["error"] in ("in_progress", "outcome_unknown"))
    assert op.calls == (1 if expected == "released" else 0)


# --------------------------------------------------------------------------- only agentkit stores


def test_an_sqlite_file_without_agentkit_tables_is_refused_and_left_as_it_was(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty.sqlite3"
    empty.touch()
    blank = tmp_path / "blank.sqlite3"
    sqlite3.connect(blank).close()
    theirs = tmp_path / "theirs.sqlite3"
    with sqlite3.connect(theirs) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    cases = [(empty, "an empty database, no tables"), (blank, "an empty database, no tables"),
             (theirs, "tables ['users']")]
    for path, says in cases:
        before = path.read_bytes()
        with pytest.raises(StoreError) as info:
            open_existing_store(f"sqlite:///{path}")
        assert str(info.value).startswith(f"{path}: not an agentkit store ({says})")
        assert path.read_bytes() == before
        assert sorted(os.listdir(tmp_path)) == sorted(p.name for p, _ in cases)
    with pytest.raises(StoreError, match="no such store"):
        open_existing_store(f"sqlite:///{tmp_path / 'missing.sqlite3'}")
    assert not (tmp_path / "missing.sqlite3").exists()


def test_an_existing_sqlite_store_opens_as_before(tmp_path: Path) -> None:
    backend = Backend("sqlite", tmp_path)
    try:
        backend().run_once("a", Op(OK), "fp")
        with open_existing_store(f"sqlite:///{backend.path}") as store:
            assert keys_of(store) == {"a": "completed"}
    finally:
        backend.close()


def agentkit_tables(schema: PgSchema) -> list[str]:
    return [row[0] for row in schema.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename",
        (schema.name,))]


@pytest.mark.parametrize("theirs", [[], ["orders", "users"]])
def test_a_postgresql_schema_without_agentkit_tables_is_refused_and_nothing_created(
    theirs: list[str],
) -> None:
    from psycopg.conninfo import make_conninfo

    schema = PgSchema()
    try:
        for table in theirs:
            schema.execute(f"CREATE TABLE {table} (id integer)")
        url = make_conninfo(schema.dsn)  # key=value words: open it as the class does
        from agentkit import PostgresIdempotencyStore

        with PostgresIdempotencyStore(url, create_tables=False, connect_timeout_seconds=5) as store:
            for step in (lambda: list(store.entries()), store.list_approvals, store.purge,
                         lambda: store.release_stale("k"),
                         lambda: store.run_once("k", lambda: dict(OK), "fp")):
                try:
                    answer = step()
                except StoreError as exc:
                    assert "not an agentkit store" in str(exc)
                    assert f"schema {schema.name}" in str(exc)
                    assert str(theirs) in str(exc) if theirs else "holds no tables" in str(exc)
                else:  # run_once never raises: it answers busy, and ran nothing
                    assert isinstance(answer, dict) and answer["error"] == "busy"
        assert agentkit_tables(schema) == theirs
    finally:
        schema.drop()
