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
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from test_stores import PgSchema, free_port, pg_dsn

from agentkit import ToolRegistry, ToolRunner, ToolSpec, open_store
from agentkit.faces import cli

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
    target = tmp_path / "moved" / "new.sqlite3"
    out = run(["keys", "copy", "--store", str(path), "--to", f"sqlite:///{target}"], capsys)
    assert out == f"copied 2 keys and 1 approval from {path} to sqlite:///{target}\n"
    again = json.loads(run(["keys", "copy", "--store", str(path), "--to",
                            f"sqlite:///{target}", "--json"], capsys))
    assert (again["keys"], again["keys_present"], again["approvals"],
            again["approvals_present"]) == (0, 2, 0, 1)
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
        assert out.startswith("copied 1 key and 1 approval from sqlite:///")
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
