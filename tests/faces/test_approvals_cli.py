"""``python -m agentkit approvals list | approve ID | deny ID --workspace DIR``: a person settles,
out of band, the approvals an MCP client (or any runner on the workspace's store) asked for.
No MCP needed here: the command works on a plain install."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentkit.demo.tools import outbox_lines
from agentkit.faces import cli

MESSAGE = {"to": "Ada", "body": "hello"}


def ask(workspace: Path) -> str:
    """What serve-mcp's runner does for a client: ask for send_message, once."""
    runner = cli.workspace_runner(workspace)
    try:
        result = runner.call("send_message", MESSAGE)
    finally:
        runner.store.close()
    assert result["error"] == "approval_required"
    return str(result["approval_id"])


def test_list_approve_and_the_same_intent_replayed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli.workspace_runner(tmp_path).store.close()  # a workspace serve-mcp made, nothing asked yet
    assert cli.main(["approvals", "list", "--workspace", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "no pending approvals\n"
    approval_id = ask(tmp_path)
    assert cli.main(["approvals", "list", "--workspace", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert listed.startswith(f"{approval_id}  send_message  ") and '"to": "Ada"' in listed
    assert cli.main(["approvals", "approve", approval_id, "--workspace", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert cli.main(["approvals", "approve", approval_id, "--workspace", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["replayed"] is True  # approving again: no resend
    assert outbox_lines(tmp_path / "files") == 1
    runner = cli.workspace_runner(tmp_path)
    again = runner.call("send_message", MESSAGE)
    runner.store.close()
    assert again["ok"] is True and again["replayed"] is True
    assert outbox_lines(tmp_path / "files") == 1


def test_deny_and_unknown_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    approval_id = ask(tmp_path)
    assert cli.main(["approvals", "deny", approval_id, "--workspace", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["error"] == "forbidden"
    assert cli.main(["approvals", "approve", approval_id, "--workspace", str(tmp_path)]) == 1
    assert json.loads(capsys.readouterr().out)["error"] == "forbidden"
    assert cli.main(["approvals", "approve", "apr-nope", "--workspace", str(tmp_path)]) == 1
    assert outbox_lines(tmp_path / "files") == 0


def test_approve_without_an_id_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["approvals", "approve", "--workspace", str(tmp_path)]) == 2
    assert "give the approval ID" in capsys.readouterr().err


def test_the_tools_cannot_reach_the_store_or_the_secret(tmp_path: Path) -> None:
    runner = cli.workspace_runner(tmp_path)
    try:
        spec = runner.registry.get("save_brief")
        assert spec is not None and spec.parameters is not None
        extra = {"task_id": "t"} if "task_id" in spec.parameters["properties"] else {}
        for path in ("../agentkit.sqlite3", "../mcp-secret"):
            result = runner.call("save_brief", {"path": path, "content": "x", **extra})
            assert result["error"] == "forbidden"
    finally:
        runner.store.close()
    assert not (tmp_path / "mcp-secret").exists()
