"""``python -m agentkit audit export|verify|keygen`` and the person each decision records
(docs/design.md#approvals-desk): an export verifies offline, an edited line fails with its
number (exit 1, one line), a signed log verifies with the public key alone, and every
misuse is one line with exit status 2."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from test_approvals_cli import ask_for  # tests/ is on sys.path (pytest rootdir-relative import)

from agentkit.demo.tools import outbox_lines
from agentkit.faces import cli

MESSAGE = {"to": "Ada", "body": "hello"}


def ask(workspace: Path, message: dict[str, str] = MESSAGE) -> str:
    return ask_for(workspace, message)


def one_line(text: str) -> str:
    assert text.endswith("\n") and text.count("\n") == 1, text
    assert "Traceback" not in text
    return text.strip()


@pytest.fixture
def decided(tmp_path: Path, capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace where alice approved one message and the login name denied another."""
    monkeypatch.setattr("getpass.getuser", lambda: "pat")
    sent, denied = ask(tmp_path), ask(tmp_path, {"to": "Bob", "body": "no"})
    assert cli.main(["approvals", "approve", sent, "--workspace", str(tmp_path),
                     "--approver", "alice"]) == 0
    assert cli.main(["approvals", "deny", denied, "--workspace", str(tmp_path)]) == 0
    capsys.readouterr()
    assert outbox_lines(tmp_path / "files") == 1
    return tmp_path


def export(workspace: Path, capsys: pytest.CaptureFixture[str], out: Path) -> list[str]:
    assert cli.main(["audit", "export", "--workspace", str(workspace), "--out", str(out)]) == 0
    assert one_line(capsys.readouterr().err).endswith(" exported")
    return out.read_text(encoding="utf-8").splitlines()


def test_the_cli_records_who_decided(decided: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = export(decided, capsys, decided / "audit.jsonl")
    entries = [json.loads(line) for line in lines[:-1]]
    assert [(e["action"], e["who"], e["tool"]) for e in entries] == [
        ("approve", "alice", "send_message"), ("deny", "pat", "send_message")]
    assert json.loads(lines[-1])["entries"] == 2
    assert cli.main(["approvals", "list", "--workspace", str(decided), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_export_then_verify(decided: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = decided / "audit.jsonl"
    export(decided, capsys, path)
    assert cli.main(["audit", "verify", str(path)]) == 0
    out = one_line(capsys.readouterr().out)
    assert out.startswith(f"{path}: 2 entries, the chain unbroken") and "not checked" in out
    assert cli.main(["audit", "export", "--workspace", str(decided)]) == 0  # to stdout
    assert len(capsys.readouterr().out.splitlines()) == 3


@pytest.mark.parametrize(("edit", "number"), [
    (lambda ls: [ls[0].replace('"alice"', '"mallory"'), *ls[1:]], 1),
    (lambda ls: [ls[1], ls[0], ls[2]], 1),
    (lambda ls: [ls[0], ls[2]], 2),
    (lambda ls: ls[:2], 3),
])
def test_an_edited_export_fails_with_the_entrys_number(
        decided: Path, capsys: pytest.CaptureFixture[str], edit, number: int) -> None:
    path = decided / "audit.jsonl"
    lines = export(decided, capsys, path)
    path.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    assert cli.main(["audit", "verify", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert one_line(captured.err).startswith(f"agentkit audit verify: {path}: entry {number}: ")


def test_a_signed_log_verifies_with_the_public_key_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "keys" / "audit.pem"
    key.parent.mkdir()
    assert cli.main(["audit", "keygen", str(key)]) == 0
    assert "wrote the signing key" in one_line(capsys.readouterr().out)
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert cli.main(["audit", "keygen", str(key)]) == 2  # never over an existing key
    assert "exists already" in one_line(capsys.readouterr().err)
    monkeypatch.setenv("AGENTKIT_AUDIT_SIGNING_KEY", str(key))
    workspace = tmp_path / "ws"
    approval_id = ask(workspace)
    assert cli.main(["approvals", "approve", approval_id, "--workspace", str(workspace),
                     "--approver", "alice"]) == 0
    path = tmp_path / "audit.jsonl"
    lines = export(workspace, capsys, path)
    monkeypatch.delenv("AGENTKIT_AUDIT_SIGNING_KEY")  # verify needs only the public key
    public = f"{key}.pub"
    assert cli.main(["audit", "verify", str(path), "--public-key", public]) == 0
    assert "each signed by ed25519:" in one_line(capsys.readouterr().out)
    entry = json.loads(lines[0])
    entry["who"] = "mallory"
    path.write_text("\n".join([json.dumps(entry), *lines[1:]]) + "\n", encoding="utf-8")
    assert cli.main(["audit", "verify", str(path), "--public-key", public]) == 1
    assert ": entry 1: " in one_line(capsys.readouterr().err)
    assert outbox_lines(workspace / "files") == 1


@pytest.mark.parametrize(("argv", "says"), [
    (["audit", "verify"], "give the FILE to verify"),
    (["audit", "keygen"], "give the FILE to keygen"),
    (["audit", "export", "x.jsonl"], "export takes no FILE"),
    (["audit", "verify", "f", "--out", "o"], "--out is for export"),
    (["audit", "export", "--public-key", "k"], "--public-key is for verify"),
    (["audit", "verify", "f", "--store", "s.sqlite3"], "verify uses no store"),
    (["audit", "verify", "/nonexistent/audit.jsonl"], "cannot read it"),
    (["audit", "export", "--store", "/nonexistent/s.sqlite3"], "no such store"),
])
def test_misuse_is_one_line_and_exit_2(argv: list[str], says: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert says in one_line(captured.err) and captured.out == ""


def test_a_public_key_that_cannot_be_used_is_exit_2(
        decided: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = decided / "audit.jsonl"
    export(decided, capsys, path)
    junk = decided / "junk.pem"
    junk.write_text("not a key")
    assert cli.main(["audit", "verify", str(path), "--public-key", str(junk)]) == 2
    assert "not a PEM public key" in one_line(capsys.readouterr().err)


def test_keys_release_is_in_the_log_with_the_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "ops")
    runner = cli.workspace_runner(tmp_path)
    store = runner.store
    claimed = store.claim("stuck", None, 300, may_take_over=True)
    assert isinstance(claimed, tuple)
    store.abandon("stuck", claimed[1].token)  # stale: its outcome unknown
    store.close()
    assert cli.main(["keys", "release", "stuck", "--workspace", str(tmp_path),
                     "--note", "bank: never paid"]) == 0
    capsys.readouterr()
    lines = export(tmp_path, capsys, tmp_path / "a.jsonl")
    entry = json.loads(lines[0])
    assert (entry["action"], entry["who"], entry["note"], entry["key"]) == (
        "release", "ops", "bank: never paid", "stuck")
