"""``python -m agentkit keys list|show|purge|copy`` and ``AGENTKIT_STORE``
(docs/design.md#command-line, #operating-the-stores).

The store is named by ``--store URL`` (or an SQLite path), ``--workspace DIR`` or
``AGENTKIT_STORE``; output is plain text, or one JSON document with ``--json``. Every path,
URL or store the command cannot use is one line on stderr and exit status 2, never a
traceback, and never a password. Switching a service from SQLite to PostgreSQL with
``keys copy`` does not run a write again: the tests count the handler's real calls.
"""

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
from urllib.parse import quote

import pytest
from test_stores import WAIT, PgSchema, free_port, pg_dsn

from agentkit import ToolRegistry, ToolRunner, ToolSpec, open_store
from agentkit.faces import cli
from agentkit.policy.stores.audit import export_lines, verify_lines

DAY = 86_400.0
PASSWORD = "s3cret-pw"


class Tickets:
    """The practitioner's tool: ``create_ticket``, an id-keyed reversible write, counted."""

    def __init__(self) -> None:
        self.calls = 0

    def create_ticket(self, request_id: str, title: str) -> dict[str, Any]:
        self.calls += 1
        return {"ticket": f"T-{self.calls}", "title": title}

    def registry(self) -> ToolRegistry:
        return ToolRegistry([
            ToolSpec("create_ticket", "Open a ticket.", "reversible_write", 5.0, 2, 500,
                     self.create_ticket,
                     idempotency_key=lambda context, args: f"ticket:{args['request_id']}"),
            ToolSpec("send_refund", "Refund a customer.", "irreversible_write", 5.0, 1, 500,
                     lambda order: {"refunded": order}),
        ])


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *names: str) -> str:
    """The command exits 2 with one line on stderr naming each of ``names``, no password."""
    assert cli.main(argv) == 2, argv
    captured = capsys.readouterr()
    err = captured.err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and captured.out == ""
    assert PASSWORD not in err
    for name in names:
        assert name in err, (name, err)
    return err


def run(argv: list[str], capsys: pytest.CaptureFixture[str], status: int = 0) -> str:
    assert cli.main(argv) == status, argv
    captured = capsys.readouterr()
    assert captured.err == "" if status == 0 else True
    return captured.out


@pytest.fixture
def filled(tmp_path: Path) -> tuple[Path, Tickets]:
    """An SQLite store with one ticket created ten days ago, a write whose outcome is
    unknown, and a pending approval."""
    path = tmp_path / "service.sqlite3"
    tickets = Tickets()
    store = open_store(f"sqlite:///{path}", clock=lambda: time.time() - 10 * DAY)
    runner = ToolRunner(tickets.registry(), store=store)
    try:
        assert runner.call("create_ticket", {"request_id": "r-1", "title": "Printer"})["ok"]
        assert runner.call("send_refund", {"order": "o-9"})["error"] == "approval_required"
    finally:
        store.close()
    with open_store(f"sqlite:///{path}") as fresh:
        fresh.run_once("unknown-write", lambda: {"ok": False, "error": "outcome_unknown",
                                                  "retryable": False}, "fp")
    return path, tickets


def mark_stale(path: Path, key: str) -> None:
    """Mark ``key``'s claim stale, as the runner does once an ``outcome_unknown`` attempt has
    returned (its lease no longer protects a running write)."""
    with open_store(f"sqlite:///{path}") as store:
        entry = store.key_entry(key)
        assert entry is not None and entry.claim is not None
        store.abandon(key, entry.claim.token)


# --------------------------------------------------------------------------- what people see


def test_list_and_show_in_plain_text_and_json(filled: tuple[Path, Tickets],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = filled
    out = run(["keys", "list", "--store", f"sqlite:///{path}"], capsys)
    lines = out.splitlines()
    assert lines[-1] == "2 keys: 1 completed, 1 claimed"
    assert lines[0].startswith("completed  ") and lines[0].endswith("  ticket:r-1")
    assert lines[1].startswith("claimed    ") and "unknown-write  lease until " in lines[1]
    listed = json.loads(run(["keys", "list", "--store", str(path), "--json"], capsys))
    assert [(k["key"], k["state"]) for k in listed] == [
        ("ticket:r-1", "completed"), ("unknown-write", "claimed")]
    assert listed[1]["stale"] is False
    assert run(["keys", "list", "--store", str(path), "--limit", "1"], capsys).splitlines()[-1] == (
        "1 key: 1 completed, 0 claimed; more not shown (--limit 1)")

    shown = run(["keys", "show", "ticket:r-1", "--store", str(path)], capsys)
    assert "state        completed" in shown and "result       {" in shown and "T-1" in shown
    whole = json.loads(run(["keys", "show", "ticket:r-1", "--store", str(path), "--json"], capsys))
    assert json.loads(whole["result"]["data"]) == {"ticket": "T-1", "title": "Printer"}
    assert whole["state"] == "completed" and whole["updated_at"] < time.time() - 9 * DAY
    claim = run(["keys", "show", "unknown-write", "--store", str(path)], capsys)
    assert "state        claimed" in claim and "owner        host " in claim

    assert cli.main(["keys", "show", "nope", "--store", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "agentkit keys show: no key 'nope' in the store\n"


def test_an_empty_store_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    open_store(f"sqlite:///{tmp_path / 'empty.sqlite3'}").close()
    assert run(["keys", "list", "--store", str(tmp_path / "empty.sqlite3")], capsys) == "no keys\n"
    assert run(["keys", "list", "--store", str(tmp_path / "empty.sqlite3"), "--json"],
               capsys) == "[]\n"


def test_purge_keeps_what_is_younger_than_retention(filled: tuple[Path, Tickets],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path, tickets = filled
    out = run(["keys", "purge", "--store", str(path), "--retention-seconds", str(30 * DAY)],
              capsys)
    assert out.startswith("purged 0 completed keys and 0 approvals last changed before ")
    assert out.endswith("(retention 30 days)\n")
    done = json.loads(run(["keys", "purge", "--store", str(path), "--json"], capsys))
    assert (done["keys"], done["approvals"], done["retention_seconds"]) == (1, 0, 7 * DAY)
    listed = json.loads(run(["keys", "list", "--store", str(path), "--json"], capsys))
    assert [k["key"] for k in listed] == ["unknown-write"]  # a claim is never purged
    with open_store(f"sqlite:///{path}") as store:  # the purged ticket may run again
        runner = ToolRunner(tickets.registry(), store=store)
        assert [a["tool"] for a in runner.pending_approvals()] == ["send_refund"]
        assert runner.call("create_ticket", {"request_id": "r-1", "title": "Printer"})["ok"]
    assert tickets.calls == 2


def test_the_workspace_and_agentkit_store_name_the_store(
    filled: tuple[Path, Tickets], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, _ = filled
    monkeypatch.setenv(cli.STORE_ENV, f"sqlite:///{path}")
    assert run(["keys", "list"], capsys).splitlines()[-1] == "2 keys: 1 completed, 1 claimed"
    assert "send_refund" in run(["approvals", "list"], capsys)
    refused(["approvals", "approve", "apr-x"], capsys, "$AGENTKIT_STORE", "--registry")
    workspace = tmp_path / "ws"
    cli.workspace_runner(workspace).store.close()
    # a flag wins over the environment: the workspace's own (empty) store
    assert run(["keys", "list", "--workspace", str(workspace)], capsys) == "no keys\n"
    assert run(["approvals", "list", "--workspace", str(workspace)], capsys) == (
        "no pending approvals\n")
    monkeypatch.setenv(cli.STORE_ENV, f"mysql://agent:{PASSWORD}@db/agents")
    for command in (["keys", "list"], ["approvals", "list"], ["serve-mcp"]):
        refused(command, capsys, "unknown store scheme 'mysql'", "$AGENTKIT_STORE")


def test_serve_mcp_serves_on_the_store_agentkit_store_names(
    filled: tuple[Path, Tickets], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("mcp")
    from agentkit.faces import mcp as mcp_face

    path, _ = filled
    served: list[Any] = []

    async def serve(runner: ToolRunner, **kwargs: Any) -> None:
        served.append(runner.store)
        runner.store.close()

    monkeypatch.setattr(mcp_face, "serve_stdio", serve)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv(cli.STORE_ENV, f"sqlite:///{path}")
    assert cli.main(["serve-mcp", "--log-level", "ERROR"]) == 0
    assert [getattr(store, "path", None) for store in served] == [str(path)]
    assert (tmp_path / "home" / ".agentkit" / cli.SECRET_NAME).exists()


# --------------------------------------------------------------------------- copy


def test_copy_into_a_new_sqlite_file(filled: tuple[Path, Tickets], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    path, tickets = filled
    mark_stale(path, "unknown-write")  # as the runner leaves it: a live claim is not copied
    target = tmp_path / "moved" / "new.sqlite3"
    with open_store(f"sqlite:///{path}") as store:  # one entry in its audit log
        store.append_audit({"action": "note", "who": "ops", "note": "before the move"})
    out = run(["keys", "copy", "--store", str(path), "--to", f"sqlite:///{target}"], capsys)
    assert out == (f"copied 2 keys, 1 approval and 1 audit entry from {path} to"
                   f" sqlite:///{target}\n")
    again = json.loads(run(["keys", "copy", "--store", str(path), "--to",
                            f"sqlite:///{target}", "--json"], capsys))
    assert (again["keys"], again["keys_present"], again["approvals"],
            again["approvals_present"], again["audit"], again["audit_present"]) == (
                0, 2, 0, 1, 0, 1)
    with open_store(f"sqlite:///{target}") as moved:  # the same chain: it verifies there
        assert [json.loads(e)["note"] for e in moved.audit_entries()] == ["before the move"]
        assert verify_lines(export_lines(moved.audit_entries(), 0.0, None)) == 1
    with open_store(f"sqlite:///{target}") as store:
        runner = ToolRunner(tickets.registry(), store=store)
        replay = runner.call("create_ticket", {"request_id": "r-1", "title": "Printer"})
        assert replay["ok"] and replay["replayed"] is True
        assert [a["tool"] for a in runner.pending_approvals()] == ["send_refund"]
    assert tickets.calls == 1


def pg_url(schema: PgSchema) -> str:
    """The test server's URL, with the schema's search_path as a libpq option."""
    base = pg_dsn()
    assert base.startswith("postgresql://")
    return f"{base}?options={quote(f'-c search_path={schema.name}')}"


def test_copy_from_sqlite_to_postgresql_does_not_run_a_write_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 30: switching SQLite -> PostgreSQL re-ran create_ticket and made T-2."""
    schema = PgSchema()
    try:
        url = pg_url(schema)
        tickets = Tickets()
        with open_store(f"sqlite:///{tmp_path / 'service.sqlite3'}") as sqlite_store:
            runner = ToolRunner(tickets.registry(), store=sqlite_store)
            first = runner.call("create_ticket", {"request_id": "r-1", "title": "Printer"})
            assert json.loads(first["data"])["ticket"] == "T-1"
            assert runner.call("send_refund", {"order": "o-9"})["error"] == "approval_required"
        assert tickets.calls == 1
        out = run(["keys", "copy", "--store", f"sqlite:///{tmp_path / 'service.sqlite3'}",
                   "--to", url], capsys)
        assert out.startswith("copied 1 key, 1 approval and 0 audit entries from sqlite:///")
        with open_store(url) as pg_store:
            runner = ToolRunner(tickets.registry(), store=pg_store)
            again = runner.call("create_ticket", {"request_id": "r-1", "title": "Printer"})
            assert again["replayed"] is True and json.loads(again["data"])["ticket"] == "T-1"
            assert [a["tool"] for a in runner.pending_approvals()] == ["send_refund"]
        assert tickets.calls == 1  # no T-2
        listed = json.loads(run(["keys", "list", "--store", url, "--json"], capsys))
        assert [k["key"] for k in listed] == ["ticket:r-1"]
    finally:
        schema.drop()


# --------------------------------------------------------------------------- what cannot be used


def bad_inputs(tmp_path: Path) -> list[tuple[list[str], list[str]]]:
    """(argv, what the one line must name): every kind of path, URL or store."""
    folder = tmp_path / "a-folder"
    folder.mkdir()
    corrupt = tmp_path / "corrupt.sqlite3"
    corrupt.write_bytes(b"this is not a database" * 100)
    foreign = tmp_path / "foreign.sqlite3"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE keys (nonsense TEXT)")
    good = tmp_path / "good.sqlite3"
    open_store(f"sqlite:///{good}").close()
    down = f"postgresql://agent:{PASSWORD}@127.0.0.1:{free_port()}/agents"
    return [
        (["keys", "list", "--store", str(tmp_path / "missing.sqlite3")], ["no such store"]),
        (["keys", "list", "--store", f"sqlite:///{tmp_path / 'missing.sqlite3'}"],
         ["missing.sqlite3", "no such store"]),
        (["keys", "list", "--store", str(folder)], ["a-folder", "not a file"]),
        (["keys", "list", "--store", str(corrupt)], ["corrupt.sqlite3", "not a usable SQLite"]),
        (["keys", "list", "--store", str(foreign)], ["foreign.sqlite3"]),
        (["keys", "list", "--store", "sqlite://"], ["sqlite://", "file path"]),
        (["keys", "list", "--store", "sqlite://db.example/x.sqlite3"], ["not on host"]),
        (["keys", "list", "--store", f"sqlite:///{good}?mode=ro"], ["takes no query"]),
        (["keys", "list", "--store", f"mysql://agent:{PASSWORD}@db/agents"],
         ["unknown store scheme 'mysql'", "mysql://agent:***@db/agents"]),
        (["keys", "list", "--store", "memory:"], ["memory store lives in one process"]),
        (["keys", "list", "--store", down], ["127.0.0.1", "no connection", "Connection refused"]),
        (["keys", "list", "--store", f"postgresql://agent:{PASSWORD}@db/agents?nosuch=1"],
         ["not a PostgreSQL URL libpq can read", "nosuch"]),
        (["keys", "list", "--store", f"postgresql://agent:{PASSWORD}@[db/agents"],
         ["not a PostgreSQL URL libpq can read"]),  # libpq's message quotes the URL
        (["keys", "list", "--workspace", str(tmp_path / "nowhere")], ["no such folder"]),
        (["keys", "list", "--workspace", str(folder)], ["not an agentkit workspace"]),
        (["keys", "show", "--store", str(good)], ["give the KEY"]),
        (["keys", "list", "extra", "--store", str(good)], ["takes no KEY"]),
        (["keys", "copy", "--store", str(good)], ["--to URL"]),
        (["keys", "purge", "--store", str(good), "--to", "sqlite:///x.sqlite3"], ["--to is for copy"]),
        (["keys", "copy", "--store", str(good), "--to", str(tmp_path / "plain-path")],
         ["as a URL"]),
        (["keys", "copy", "--store", str(good), "--to", "memory:"], ["would keep nothing"]),
        (["keys", "copy", "--store", str(good), "--to", f"oracle://agent:{PASSWORD}@db/x"],
         ["unknown store scheme 'oracle'"]),
        (["keys", "copy", "--store", str(good), "--to", f"sqlite:///{corrupt}"],
         ["corrupt.sqlite3"]),
        (["keys", "copy", "--store", str(good), "--to", "sqlite:////proc/agentkit/x.sqlite3"],
         ["/proc/agentkit"]),
        (["keys", "copy", "--store", str(good), "--to", down],
         ["127.0.0.1", "no connection"]),
        (["approvals", "list", "--store", f"mysql://agent:{PASSWORD}@db/agents"],
         ["unknown store scheme 'mysql'"]),
        (["approvals", "list", "--store", down], ["no connection"]),
    ]


def test_every_unusable_path_url_or_store_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("psycopg")
    monkeypatch.setattr(cli, "POSTGRES_CONNECT_TIMEOUT_SECONDS", 0.5)
    monkeypatch.chdir(tmp_path)
    for argv, names in bad_inputs(tmp_path):
        for extra in ([], ["--json"]) if argv[0] == "keys" else ([],):
            refused([*argv, *extra], capsys, *names)


def test_no_traceback_in_a_subprocess(tmp_path: Path) -> None:
    env = {**os.environ, cli.STORE_ENV: f"mysql://agent:{PASSWORD}@db/agents"}
    for command in (["keys", "list"], ["keys", "list", "--store", str(tmp_path / "no.sqlite3")],
                    ["keys", "copy", "--store", "sqlite://", "--to", "memory:"]):
        done = subprocess.run([sys.executable, "-m", "agentkit", *command], capture_output=True,
                              text=True, timeout=60, check=False, env=env, cwd=tmp_path)
        assert done.returncode == 2 and done.stdout == "", done
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert PASSWORD not in done.stderr


def test_someone_elses_database_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = tmp_path / "app.sqlite3"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE keys (nonsense TEXT)")
        conn.execute("CREATE TABLE users (name TEXT)")
    before = foreign.read_bytes()
    for command in (["keys", "list"], ["keys", "purge"], ["approvals", "list"]):
        refused([*command, "--store", str(foreign)], capsys, "app.sqlite3",
                "not an agentkit store (tables ['keys', 'users'])")
    assert foreign.read_bytes() == before


# --------------------------------------------------------------------------- seams (issue 39)


class GatedTickets(Tickets):
    """``create_ticket`` that, for the request ids in ``gated``, waits inside the handler
    until ``go`` is set: a worker in the middle of a write."""

    def __init__(self, *gated: str) -> None:
        super().__init__()
        self.gated = set(gated)
        self.entered, self.go = threading.Event(), threading.Event()

    def create_ticket(self, request_id: str, title: str) -> dict[str, Any]:
        if request_id in self.gated:
            self.entered.set()
            assert self.go.wait(WAIT)
        return super().create_ticket(request_id, title)


def pg_tables(schema: PgSchema) -> list[str]:
    return [row[0] for row in schema.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename",
        (schema.name,))]


def with_password(url: str, password: str) -> str:
    """The test server's URL with ``password`` typed into its user part (trust auth: the
    server never asks for it, so a copy through it succeeds)."""
    scheme, rest = url.split("://", 1)
    user, at, server = rest.partition("@")
    assert at, url
    return f"{scheme}://{user}:{password}@{server}"


@pytest.mark.parametrize("theirs", [[], ["orders", "users"]])
def test_postgresql_without_agentkit_tables_is_refused_and_nothing_is_created(
    theirs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 39: `keys list` on an empty database created agentkit's tables and said "no keys"."""
    schema = PgSchema()
    try:
        for table in theirs:
            schema.execute(f"CREATE TABLE {table} (id integer)")
        url = pg_url(schema)
        says = f"tables {theirs}" if theirs else "holds no tables"
        for command in (["keys", "list"], ["keys", "list", "--json"], ["keys", "show", "k"],
                        ["keys", "release", "k"], ["keys", "purge"],
                        ["keys", "copy", "--to", f"sqlite:///{tmp_path / 'to.sqlite3'}"],
                        ["approvals", "list"]):
            refused([*command, "--store", url], capsys, "not an agentkit store",
                    f"schema {schema.name}", says)
        assert pg_tables(schema) == theirs  # no agentkit_keys, _approvals, _schema
        assert not (tmp_path / "to.sqlite3").exists()  # nor a target for nothing
    finally:
        schema.drop()


def test_an_empty_postgresql_database_is_refused_and_left_empty(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import psycopg

    base = pg_dsn()
    name = f"agentkit_empty_{os.urandom(4).hex()}"
    schema = PgSchema()  # holds the server for the test (and its admin session)
    schema.execute(f"CREATE DATABASE {name}")
    try:
        url = base.rsplit("/", 1)[0] + f"/{name}"
        for command in (["keys", "list"], ["approvals", "list"]):
            refused([*command, "--store", url], capsys, "not an agentkit store", "schema public")
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                                ).fetchone() == (0,)
    finally:
        schema.execute(f"DROP DATABASE {name} WITH (FORCE)")
        schema.drop()


def test_an_sqlite_file_without_agentkit_tables_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    empty = tmp_path / "empty.sqlite3"
    empty.touch()
    blank = tmp_path / "blank.sqlite3"
    sqlite3.connect(blank).close()
    for path in (empty, blank):
        before = path.read_bytes()
        for command in (["keys", "list"], ["keys", "purge"], ["keys", "release", "k"],
                        ["approvals", "list"]):
            for store in (str(path), f"sqlite:///{path}"):
                refused([*command, "--store", store], capsys, path.name,
                        "not an agentkit store (an empty database, no tables)")
        assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blank.sqlite3", "empty.sqlite3"]


def test_a_copy_while_a_worker_writes_is_refused_and_no_intent_writes_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 39: `keys copy` SQLite -> PostgreSQL while a worker kept writing said exit 0,
    and after the switch 145 of 250 intents wrote twice."""
    schema = PgSchema()
    try:
        source_url, target_url = f"sqlite:///{tmp_path / 'service.sqlite3'}", pg_url(schema)
        tickets = GatedTickets("r-5")
        intents = [{"request_id": f"r-{i}", "title": f"T{i}"} for i in range(6)]
        answers: list[dict[str, Any]] = []
        with open_store(source_url) as sqlite_store:
            runner = ToolRunner(tickets.registry(), store=sqlite_store)
            for intent in intents[:5]:
                assert runner.call("create_ticket", intent)["ok"]
            worker = threading.Thread(
                target=lambda: answers.append(runner.call("create_ticket", intents[5])))
            worker.start()
            try:
                assert tickets.entered.wait(WAIT)  # the worker is inside its write
                err = refused(["keys", "copy", "--store", source_url, "--to", target_url],
                              capsys, "1 open claim", "nothing was copied", "copy again")
                assert err.startswith(f"agentkit keys copy: {source_url}: ")
                assert json.loads(run(["keys", "list", "--store", target_url, "--json"],
                                      capsys)) == []
            finally:
                tickets.go.set()
                worker.join(WAIT)
        assert answers[0]["ok"] and tickets.calls == 6
        out = run(["keys", "copy", "--store", source_url, "--to", target_url], capsys)
        assert out.startswith("copied 6 keys, 0 approvals and 0 audit entries from sqlite:///")
        with open_store(target_url) as pg_store:  # the switch: every intent asked again
            runner = ToolRunner(tickets.registry(), store=pg_store)
            for intent in intents:
                assert runner.call("create_ticket", intent)["replayed"] is True
        assert tickets.calls == 6  # one real write per intent
    finally:
        schema.drop()


def test_a_copy_onto_its_own_source_is_refused(
    filled: tuple[Path, Tickets], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path, _ = filled
    mark_stale(path, "unknown-write")
    link = tmp_path / "link.sqlite3"
    link.symlink_to(path)
    for target in (f"sqlite:///{path}", f"sqlite:///{link}",
                   f"sqlite:///{path.parent}/./{path.name}"):
        refused(["keys", "copy", "--store", str(path), "--to", target], capsys,
                "the target is the source itself")
    schema = PgSchema()
    try:
        url = pg_url(schema)
        assert run(["keys", "copy", "--store", str(path), "--to", url], capsys).startswith(
            "copied 2 keys")
        refused(["keys", "copy", "--store", url, "--to", url], capsys,
                "the target is the source itself")
        refused(["keys", "copy", "--store", url, "--to", with_password(url, "Pw?s3cret-pw")],
                capsys, "the target is the source itself")
    finally:
        schema.drop()


def test_release_clears_a_stale_claim_and_refuses_everything_else(
    filled: tuple[Path, Tickets], capsys: pytest.CaptureFixture[str],
) -> None:
    path, _ = filled
    store = ["--store", str(path)]
    # 'unknown-write' is claimed by this process (alive), its lease not over: it may be writing
    err = refused(["keys", "release", "unknown-write", *store], capsys, "its claim is live",
                  "pid", "release it once it is stale")
    assert err.startswith("agentkit keys release: 'unknown-write': ")
    refused(["keys", "release", "ticket:r-1", *store], capsys, "completed, not claimed")
    refused(["keys", "release", "nope", *store], capsys, "no such key")
    refused(["keys", "release", *store], capsys, "give the KEY to release")
    assert [k["key"] for k in json.loads(run(["keys", "list", "--json", *store], capsys))] == [
        "ticket:r-1", "unknown-write"]  # nothing changed
    mark_stale(path, "unknown-write")  # as the runner leaves an outcome_unknown claim
    assert "(1 stale: a status lookup, or `keys release KEY` once you checked" in run(
        ["keys", "list", *store], capsys)
    out = run(["keys", "release", "unknown-write", *store], capsys)
    assert out.startswith("released the stale claim on 'unknown-write' (owner host ")
    assert out.count("\n") == 1
    assert run(["keys", "list", *store], capsys).splitlines()[-1] == (
        "1 key: 1 completed, 0 claimed")
    refused(["keys", "release", "unknown-write", *store], capsys, "no such key")


def test_release_never_frees_a_write_that_is_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"sqlite:///{tmp_path / 'service.sqlite3'}"
    tickets = GatedTickets("r-1")
    answers: list[dict[str, Any]] = []
    with open_store(url) as store:
        runner = ToolRunner(tickets.registry(), store=store)
        worker = threading.Thread(target=lambda: answers.append(
            runner.call("create_ticket", {"request_id": "r-1", "title": "Printer"})))
        worker.start()
        try:
            assert tickets.entered.wait(WAIT)
            refused(["keys", "release", "ticket:r-1", "--store", url], capsys,
                    "its claim is live")
        finally:
            tickets.go.set()
            worker.join(WAIT)
        again = runner.call("create_ticket", {"request_id": "r-1", "title": "Printer"})
    assert answers[0]["ok"] and again["replayed"] is True
    assert tickets.calls == 1


def test_release_of_a_stuck_claim_lets_the_intent_run_once_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """A person checked that the stuck write did not happen, and releases it: it runs once."""
    url = f"sqlite:///{tmp_path / 'service.sqlite3'}"
    intent = {"request_id": "r-1", "title": "P"}
    with open_store("memory:") as scratch:  # the runner's fingerprint of this intent
        assert ToolRunner(Tickets().registry(), store=scratch).call("create_ticket", intent)["ok"]
        fingerprint = scratch.key_entry("ticket:r-1").fingerprint
    tickets = Tickets()
    with open_store(url) as store:
        stuck = store.run_once("ticket:r-1", lambda: {"ok": False, "error": "outcome_unknown",
                                                      "retryable": False}, fingerprint)
        assert stuck["error"] == "outcome_unknown"
        entry = store.key_entry("ticket:r-1")
        assert entry is not None and entry.claim is not None
        store.abandon("ticket:r-1", entry.claim.token)
        runner = ToolRunner(tickets.registry(), store=store)
        assert runner.call("create_ticket", intent)["error"] == "outcome_unknown"
        assert tickets.calls == 0
        assert run(["keys", "release", "ticket:r-1", "--store", url, "--json"], capsys).count(
            '"released": true') == 1
        assert runner.call("create_ticket", intent)["ok"]
        assert runner.call("create_ticket", intent)["replayed"]
    assert tickets.calls == 1


HOSTILE = ["Pw?s3cret-pw", "Pw#s3cret-pw", "p@ss@s3cret-pw", "pa/ss/s3cret-pw",
           "p%40s3cret-pw", "pa:ss:s3cret-pw", "a?b@c?d#s3cret-pw"]


@pytest.mark.parametrize("password", HOSTILE)
def test_no_command_prints_a_password_libpq_reads(
    password: str, filled: tuple[Path, Tickets], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 39: `keys copy --to postgresql://u:Pw?s3cret@…` printed the password (text and
    --json "to"), and so did `keys list --store`'s exit-2 line."""
    monkeypatch.setattr(cli, "POSTGRES_CONNECT_TIMEOUT_SECONDS", 0.5)
    path, _ = filled
    mark_stale(path, "unknown-write")
    secrets = {password, password.replace("%40", "@"), "s3cret"}  # not even a piece of it
    schema = PgSchema()
    try:
        url = with_password(pg_url(schema), password)
        for argv in (["keys", "copy", "--store", str(path), "--to", url],
                     ["keys", "copy", "--store", str(path), "--to", url, "--json"],
                     ["keys", "list", "--store", url]):
            status = cli.main(argv)
            captured = capsys.readouterr()
            for secret in secrets:
                assert secret not in captured.out + captured.err, (argv, captured)
            if "@" in password or "/" in password:  # libpq reads another server: refused
                assert status == 2 and captured.err.count("\n") == 1
            else:  # trust auth: the password is never asked for, the copy goes through
                assert status == 0, captured.err
                if "--json" in argv:
                    assert json.loads(captured.out)["to"].startswith("postgresql://")
        down = f"postgresql://agent:{password}@127.0.0.1:{free_port()}/agents"
        for command in (["keys", "list"], ["approvals", "list"]):
            assert cli.main([*command, "--store", down]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and not any(s in err for s in secrets), err
    finally:
        schema.drop()
