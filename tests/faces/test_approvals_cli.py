"""``python -m agentkit approvals list | approve ID | deny ID --workspace DIR``: a person settles,
out of band, the approvals an MCP client (or any runner on the workspace's store) asked for.
No MCP needed here: the command works on a plain install."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentkit import ToolRunner
from agentkit.demo.tools import outbox_lines
from agentkit.faces import cli
from agentkit.faces.approvals_command import when

MESSAGE = {"to": "Ada", "body": "hello"}


def ask(workspace: Path) -> str:
    """What serve-mcp's runner does for a client: ask for send_message, once."""
    return ask_for(workspace, MESSAGE)


def ask_for(workspace: Path, message: dict[str, str]) -> str:
    runner = cli.workspace_runner(workspace)
    try:
        result = runner.call("send_message", message)
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


def record_of(workspace: Path, approval_id: str) -> dict[str, Any]:
    runner = cli.workspace_runner(workspace)
    try:
        record = runner.approvals.get(approval_id)
    finally:
        runner.store.close()
    assert record is not None
    return record


def one_line(captured: Any) -> str:
    """The one line a refusal prints on stderr (nothing on stdout, no traceback)."""
    assert captured.out == "" and "Traceback" not in captured.err
    assert captured.err.endswith("\n") and captured.err.count("\n") == 1, captured.err
    return str(captured.err)


def test_deny_then_approve_is_refused_naming_the_denial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    approval_id = ask(tmp_path)
    assert cli.main(["approvals", "deny", approval_id, "--workspace", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["error"] == "forbidden"
    denied_at = when(record_of(tmp_path, approval_id)["decided_at"])
    assert cli.main(["approvals", "approve", approval_id, "--workspace", str(tmp_path)]) == 1
    line = one_line(capsys.readouterr())
    assert f"{approval_id}: already denied at {denied_at}" in line
    # the same decision again replays, exit 0, and says it was decided before
    assert cli.main(["approvals", "deny", approval_id, "--workspace", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    replayed = json.loads(captured.out)
    assert replayed["error"] == "forbidden" and replayed["replayed"] is True
    assert f"already denied at {denied_at}" in captured.err
    assert outbox_lines(tmp_path / "files") == 0


def test_approve_then_deny_is_refused_naming_the_approval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    approval_id = ask(tmp_path)
    assert cli.main(["approvals", "approve", approval_id, "--workspace", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    approved_at = when(record_of(tmp_path, approval_id)["decided_at"])
    assert cli.main(["approvals", "deny", approval_id, "--workspace", str(tmp_path)]) == 1
    line = one_line(capsys.readouterr())
    assert f"{approval_id}: already approved at {approved_at} (outcome: ok)" in line
    record = record_of(tmp_path, approval_id)
    assert record["state"] == "settled" and record["decision"] == "approved"
    assert cli.main(["approvals", "approve", approval_id, "--workspace", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["replayed"] is True
    assert outbox_lines(tmp_path / "files") == 1  # sent once; the deny undid nothing


def test_unknown_and_expired_ids_are_told_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli.workspace_runner(tmp_path).store.close()
    base = cli.workspace_runner(tmp_path)
    old = ToolRunner(base.registry, store=base.store, context=base.context,
                     clock=lambda: 1_000.0, approval_ttl_seconds=60.0)  # expired long ago
    try:
        expired_id = old.call("send_message", MESSAGE)["approval_id"]
    finally:
        base.store.close()
    for action in ("approve", "deny"):
        assert cli.main(["approvals", action, "apr-nope", "--workspace", str(tmp_path)]) == 1
        assert "apr-nope: no such approval in this store" in one_line(capsys.readouterr())
        assert cli.main(["approvals", action, expired_id, "--workspace", str(tmp_path)]) == 1
        line = one_line(capsys.readouterr())
        assert f"{expired_id}: expired at 1970-01-01T00:17:40Z before anyone decided" in line
    assert outbox_lines(tmp_path / "files") == 0


def test_approve_and_deny_json_say_what_the_model_is_not_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The model sees ``forbidden`` for an unknown, denied or refused id; a person's --json
    tells them apart, with the owner and the first decision."""
    ws = ["--workspace", str(tmp_path)]
    sent = ask(tmp_path)
    refused = ask_for(tmp_path, {"to": "Eve", "body": "no"})

    def decided(*argv: str) -> tuple[int, dict[str, Any]]:
        status = cli.main(["approvals", *argv, *ws, "--json"])
        captured = capsys.readouterr()
        assert captured.err == ""
        return status, json.loads(captured.out)

    status, unknown = decided("approve", "apr-nope")
    assert status == 1 and unknown["status"] == "unknown" and unknown["result"] is None
    assert unknown["approval"] is None and "no such approval" in unknown["message"]
    status, done = decided("approve", sent)
    assert status == 0 and done["status"] == "settled" and done["result"]["ok"] is True
    facts = done["approval"]
    assert (facts["decision"], facts["outcome"], facts["task_id"], facts["workflow"]) == (
        "approved", "ok", "mcp", None)
    assert facts["decided_at"] == record_of(tmp_path, sent)["decided_at"]
    status, contradicted = decided("deny", sent)
    assert status == 1 and contradicted["status"] == "settled" and contradicted["result"] is None
    assert "already approved at" in contradicted["message"]
    status, denied = decided("deny", refused)
    assert status == 0 and denied["status"] == "denied" and denied["result"]["error"] == "forbidden"
    status, again = decided("approve", refused)
    assert status == 1 and again["status"] == "denied" and "already denied at" in again["message"]
    assert outbox_lines(tmp_path / "files") == 1


def test_list_shows_the_owner_and_has_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = ask(tmp_path)
    second = ask_for(tmp_path, {"to": "Bob", "body": "hi"})
    runner = cli.workspace_runner(tmp_path)
    try:  # an approval a workflow owns (the durable faces record it so)
        record = runner.approvals.get(second)
        assert record is not None
        owned = {**record, "workflow": {"engine": "dbos", "id": "invoice-42"}}
        assert runner.store.update_approval(second, "pending", owned)
    finally:
        runner.store.close()
    assert cli.main(["approvals", "list", "--workspace", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{first}  send_message  task mcp  workflow -  {{")
    assert lines[1].startswith(f"{second}  send_message  task mcp  workflow dbos:invoice-42  {{")
    assert cli.main(["approvals", "list", "--workspace", str(tmp_path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [a["approval_id"] for a in listed] == [first, second]
    assert listed[0]["arguments"] == MESSAGE and listed[0]["status"] == "pending"
    assert (listed[0]["task_id"], listed[0]["workflow"], listed[0]["decision"]) == ("mcp", None, None)
    assert listed[1]["workflow"] == {"engine": "dbos", "id": "invoice-42"}
    assert listed[0]["expires_at"] == record_of(tmp_path, first)["expires_at"]
    cli.main(["approvals", "deny", first, "--workspace", str(tmp_path)])
    capsys.readouterr()
    # a plain decision on the workflow's approval is refused (it goes to the workflow): it stays
    for action in ("approve", "deny"):
        assert cli.main(["approvals", action, second, "--workspace", str(tmp_path)]) == 2
        line = one_line(capsys.readouterr())
        assert f"approval {second} belongs to DBOS workflow invoice-42" in line
    assert outbox_lines(tmp_path / "files") == 0
    assert cli.main(["approvals", "list", "--workspace", str(tmp_path), "--json"]) == 0
    assert [a["approval_id"] for a in json.loads(capsys.readouterr().out)] == [second]


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


def test_decide_itself_refuses_a_workflows_approval(tmp_path: Path) -> None:
    """The command's own check, beneath the CLI's routing: a workflow's approval is never
    decided on a plain runner, whatever calls ``decide``."""
    import io

    from agentkit.faces.approvals_command import decide

    approval_id = ask(tmp_path)
    runner = cli.workspace_runner(tmp_path)
    try:
        record = runner.approvals.get(approval_id)
        assert record is not None
        owned = {**record, "workflow": {"engine": "temporal", "id": "wf-9"}}
        assert runner.store.update_approval(approval_id, "pending", owned)
        for action in ("approve", "deny"):
            out, err = io.StringIO(), io.StringIO()
            assert decide(runner, approval_id, action, as_json=False, out=out, err=err,
                          command="agentkit approvals") == 2
            assert out.getvalue() == ""
            assert f"approval {approval_id} belongs to Temporal workflow wf-9" in err.getvalue()
        assert [r["approval_id"] for r in runner.pending_approvals()] == [approval_id]
    finally:
        runner.store.close()
    assert outbox_lines(tmp_path / "files") == 0


def test_a_decision_that_loses_the_race_names_the_one_that_won(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second person denies between this command's look at the approval and its approve:
    the approve runs nothing, and the person is told the deny came first, exit 1."""
    import io

    from agentkit.faces.approvals_command import decide

    approval_id = ask(tmp_path)
    runner, other = cli.workspace_runner(tmp_path), cli.workspace_runner(tmp_path)
    real_approve = runner.approve

    def approve_just_after_a_deny(target: Any, **options: Any) -> dict[str, Any]:
        assert other.deny(target)["error"] == "forbidden"  # the other person, first
        return real_approve(target, **options)

    monkeypatch.setattr(runner, "approve", approve_just_after_a_deny)
    out, err = io.StringIO(), io.StringIO()
    try:
        status = decide(runner, approval_id, "approve", as_json=False, out=out, err=err,
                        command="agentkit approvals approve")
        denied_at = when(record_of(tmp_path, approval_id)["decided_at"])
    finally:
        runner.store.close()
        other.store.close()
    assert status == 1 and out.getvalue() == ""
    assert f"{approval_id}: already denied at {denied_at}" in err.getvalue()
    assert outbox_lines(tmp_path / "files") == 0
