"""The approvals CLI on a user's own server, and on paths it cannot use (issue 17).

``agentkit approvals`` opens only an existing store (``--workspace DIR`` or ``--store PATH``)
and runs the tools named by ``--registry module:attribute``; it never creates anything. A
folder that is not a workspace, a corrupt store or an unusable path is one line on stderr
naming the path and the reason, exit status 2, never a traceback, and nothing is created.
``serve-mcp`` shares the code and refuses the same way before serving.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentkit.faces import cli

MODULE = textwrap.dedent(
    """
    import json
    from pathlib import Path

    from agentkit import ToolRegistry, ToolSpec

    LEDGER = Path(__file__).with_name("ledger.jsonl")


    def pay(invoice: str, cents: int) -> dict:
        with open(LEDGER, "a", encoding="utf-8") as out:
            out.write(json.dumps({"invoice": invoice, "cents": cents}) + "\\n")
        return {"paid": cents}


    registry = ToolRegistry([
        ToolSpec("pay", "Pay an invoice.", "irreversible_write", 5.0, 1, 500, pay),
    ])


    def make_registry():
        return registry

    not_a_registry = 42
    """
)


def snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *names: str) -> str:
    """The command exits 2 with one line on stderr that names each of ``names``."""
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and captured.out == ""
    for name in names:
        assert name in err, (name, err)
    return err


@pytest.fixture
def own_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's module ``my_tools.py`` in the current folder, and its store with one pending
    approval for ``pay``."""
    (tmp_path / "my_tools.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_tools", None)
    store = tmp_path / "state" / "server.sqlite3"
    registry = cli.load_registry("my_tools:registry")
    runner = cli.workspace_runner(tmp_path / "state", registry=registry, store=store)
    try:
        asked = runner.call("pay", {"invoice": "inv-7", "cents": 1200})
    finally:
        runner.store.close()
    assert asked["error"] == "approval_required"
    return store


def test_list_and_approve_a_users_own_tools(own_server: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["approvals", "list", "--store", str(own_server)]) == 0
    line = capsys.readouterr().out
    approval_id = line.split()[0]
    assert f"{approval_id}  pay  " in line and '"invoice": "inv-7"' in line
    for registry in ("my_tools:registry", "my_tools:make_registry"):
        assert cli.main(["approvals", "approve", approval_id, "--store", str(own_server),
                         "--registry", registry]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["ok"] is True
    assert len((tmp_path / "ledger.jsonl").read_text().splitlines()) == 1  # ran once, replayed
    assert cli.main(["approvals", "list", "--store", str(own_server)]) == 0
    assert capsys.readouterr().out == "no pending approvals\n"


def test_approving_with_a_store_needs_the_registry(own_server: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    refused(["approvals", "approve", "apr-x", "--store", str(own_server)], capsys, "--registry")
    assert not (tmp_path / "ledger.jsonl").exists()


@pytest.mark.parametrize(("registry", "why"), [
    ("my_tools", "module:attribute"),
    ("no_such_module_xyz:registry", "cannot import no_such_module_xyz"),
    ("my_tools:nothing", "has no nothing"),
    ("my_tools:not_a_registry", "not a ToolRegistry"),
])
def test_a_registry_that_cannot_be_used_is_one_line(own_server: Path, registry: str, why: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    refused(["approvals", "approve", "apr-x", "--store", str(own_server), "--registry", registry],
            capsys, registry, why)


def test_list_never_creates_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = tmp_path / "missing"
    refused(["approvals", "list", "--workspace", str(empty)], capsys, str(empty),
            "not an agentkit workspace")
    refused(["approvals", "list", "--workspace", str(missing)], capsys, str(missing), "no such folder")
    store = tmp_path / "nowhere.sqlite3"
    refused(["approvals", "list", "--store", str(store)], capsys, str(store), "no such store")
    refused(["approvals", "deny", "apr-x", "--workspace", str(empty)], capsys, str(empty))
    assert snapshot(tmp_path) == {"empty"}


def _unusable(tmp_path: Path) -> list[tuple[str, Path, str]]:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    return [
        ("a file", a_file, "not a folder"),
        ("under a file", a_file / "inside", ""),
        ("a name too long", tmp_path / ("n" * 300), "too long"),
    ]


@pytest.mark.parametrize("case", ["a file", "under a file", "a name too long"])
def test_an_unusable_workspace_is_one_line_for_both_commands(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    [(_, path, why)] = [c for c in _unusable(tmp_path) if c[0] == case]
    before = snapshot(tmp_path)
    refused(["approvals", "list", "--workspace", str(path)], capsys, str(path), why)
    refused(["serve-mcp", "--workspace", str(path)], capsys, str(path), why)
    assert snapshot(tmp_path) == before


def test_an_unwritable_place_is_one_line_for_serve_mcp(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # /proc refuses new folders even to root; a read-only folder refuses everyone else.
    place = Path("/proc/agentkit-workspace")
    if not Path("/proc").is_dir():
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        place = locked / "workspace"
        if os.access(locked, os.W_OK):
            pytest.skip("no place this user cannot write")
    refused(["serve-mcp", "--workspace", str(place)], capsys, str(place))
    assert not place.exists()


@pytest.mark.parametrize("content", [b"this is not a database" * 100, b""])
def test_a_corrupt_store_is_one_line(tmp_path: Path, content: bytes,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / cli.STORE_NAME
    if content:
        store.write_bytes(content)
    else:  # an SQLite file whose approvals table is not ours
        with sqlite3.connect(store) as conn:
            conn.execute("CREATE TABLE approvals (nonsense TEXT)")
    refused(["approvals", "list", "--workspace", str(tmp_path)], capsys, str(store))
    refused(["approvals", "list", "--store", str(store)], capsys, str(store))
    refused(["serve-mcp", "--workspace", str(tmp_path)], capsys, str(store))


def test_the_commands_print_no_traceback_in_a_subprocess(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for command in (["approvals", "list"], ["serve-mcp"]):
        done = subprocess.run(
            [sys.executable, "-m", "agentkit", *command, "--workspace", str(a_file / "under")],
            capture_output=True, text=True, timeout=60, check=False,
        )
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert str(a_file / "under") in done.stderr


def test_list_escapes_what_would_read_differently(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    runner = cli.workspace_runner(tmp_path)
    try:
        runner.call("send_message", {"to": "Ada\u202eeve@evil.example", "body": "hi\u200b there"})
    finally:
        runner.store.close()
    assert cli.main(["approvals", "list", "--workspace", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "\u202e" not in out and "\u200b" not in out
    assert "Ada\\u202eeve@evil.example" in out and "hi\\u200b there" in out
    shown = out.split("  ", 4)[4]  # ID  TOOL  task T  workflow W  ARGUMENTS
    assert json.loads(shown) == {"to": "Ada\u202eeve@evil.example", "body": "hi\u200b there"}


@pytest.fixture
def served_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """``serve-mcp --registry my_tools:registry --workspace WS`` asked for ``pay`` (the store
    is the workspace's own): the workspace and the approval id."""
    (tmp_path / "my_tools.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_tools", None)
    workspace = tmp_path / "ws"
    runner = cli.workspace_runner(workspace, registry=cli.load_registry("my_tools:registry"))
    try:
        asked = runner.call("pay", {"invoice": "inv-9", "cents": 300})
    finally:
        runner.store.close()
    assert asked["error"] == "approval_required"
    return workspace, str(asked["approval_id"])


def pending_ids(workspace: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert cli.main(["approvals", "list", "--workspace", str(workspace), "--json"]) == 0
    return [a["approval_id"] for a in json.loads(capsys.readouterr().out)]


@pytest.mark.parametrize("action", ["approve", "deny"])
def test_a_registry_without_the_tool_settles_nothing(
    served_workspace: tuple[Path, str], tmp_path: Path, action: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 39: approving as the README shows it, without the server's --registry, loads the
    demo tools, which cannot run ``pay``: exit 2, one line, and the approval stays pending;
    approving with the right --registry then pays once."""
    workspace, approval_id = served_workspace
    ledger = tmp_path / "ledger.jsonl"
    err = refused(["approvals", action, approval_id, "--workspace", str(workspace)], capsys,
                  "pay is not in the loaded registry", "--registry MODULE:ATTRIBUTE", approval_id)
    assert "stays pending" in err
    assert pending_ids(workspace, capsys) == [approval_id]
    assert cli.main(["approvals", action, approval_id, "--workspace", str(workspace),
                     "--json"]) == 2
    told = json.loads(capsys.readouterr().out)
    assert told["status"] == "pending" and "not in the loaded registry" in told["message"]
    assert pending_ids(workspace, capsys) == [approval_id]
    assert not ledger.exists()
    assert cli.main(["approvals", "approve", approval_id, "--workspace", str(workspace),
                     "--registry", "my_tools:registry"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert cli.main(["approvals", "approve", approval_id, "--workspace", str(workspace),
                     "--registry", "my_tools:registry"]) == 0
    assert json.loads(capsys.readouterr().out)["replayed"] is True
    assert len(ledger.read_text().splitlines()) == 1  # paid once, by the runner that holds pay
    assert pending_ids(workspace, capsys) == []
