"""MCP conversations that do not share keys, and approvals a client cannot grant itself
(issue 39; docs/design.md#mcp: conversations do not share keys, elicitation is not a person
by default).

- A call's ``_meta`` may name its task (``"agentkit/task_id"``): it runs under that task id,
  with its own keys and approvals; without one, the server's task id (``--task-id``, default
  ``"mcp"``) serves the whole host. A bad task id is ``invalid_arguments``; nothing runs.
- ``make_server`` / ``serve-mcp`` settle approvals through a person's channel by default: a
  client whose elicitation callback accepts by itself is never asked, nothing runs.
  ``approvals="elicit"`` (the old ``auto``) asks it.

Every write is counted by a counter around its handler.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp")

from mcp import Client, types
from test_mcp import MESSAGE, World, answering, assert_failure, brief_arguments, structured

from agentkit import Budget, ToolRunner
from agentkit.demo.tools import make_demo_registry
from agentkit.faces import cli
from agentkit.faces.mcp import MAX_TASK_ID_CHARS, TASK_META, make_server


def in_task(task_id: Any) -> dict[str, Any]:
    return {TASK_META: task_id}


# --------------------------------------------------------------------------- who approves


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_by_default_a_client_that_accepts_by_itself_approves_nothing(tmp_path: Path, mode: str) -> None:
    world = World(tmp_path, approvals=None)  # make_server's default
    seen: list[str] = []

    async def go() -> list[types.CallToolResult]:
        async with Client(world.server, mode=mode, elicitation_callback=answering("accept", seen)) as client:
            return [await client.call_tool("send_message", MESSAGE) for _ in range(2)]

    first, again = anyio.run(go)
    asked = assert_failure(first, "approval_required")
    assert assert_failure(again, "approval_required")["approval_id"] == asked["approval_id"]
    assert seen == []  # never elicited
    assert world.calls("send_message") == 0 and world.outbox == 0
    assert [r["approval_id"] for r in world.runner.pending_approvals()] == [asked["approval_id"]]


@pytest.mark.parametrize("approvals", ["elicit", "auto"])
def test_elicit_asks_the_clients_user_and_runs_once(
    tmp_path: Path, approvals: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="agentkit"):
        world = World(tmp_path, approvals=approvals)
    assert ("the old name of 'elicit'" in caplog.text) == (approvals == "auto")
    seen: list[str] = []

    async def go() -> types.CallToolResult:
        async with Client(world.server, elicitation_callback=answering("accept", seen)) as client:
            return await client.call_tool("send_message", MESSAGE)

    sent = structured(anyio.run(go))
    assert sent["ok"] is True and len(seen) == 1
    assert world.calls("send_message") == 1 and world.outbox == 1


def test_an_unknown_approvals_mode_is_refused(tmp_path: Path) -> None:
    runner = cli.workspace_runner(tmp_path)
    try:
        with pytest.raises(ValueError, match="'cli' or 'elicit'"):
            make_server(runner, approvals="sometimes")  # type: ignore[arg-type]
    finally:
        runner.store.close()


# --------------------------------------------------------------------------- conversations


def test_two_conversations_each_run_their_own_write(tmp_path: Path) -> None:
    """Issue 39: the second conversation's identical write came back ``replayed`` and was
    never made. Each conversation's key is its own; the same conversation again replays."""
    world = World(tmp_path)
    arguments = brief_arguments(world.runner)

    async def session(task: str | None, times: int = 1) -> list[dict[str, Any]]:
        meta = None if task is None else in_task(task)
        async with Client(world.server) as client:
            return [structured(await client.call_tool("save_brief", arguments, meta=meta))
                    for _ in range(times)]

    [a] = anyio.run(session, "conversation-a")
    [b] = anyio.run(session, "conversation-b")
    assert a["ok"] and b["ok"] and not a["replayed"] and not b["replayed"]
    assert world.calls("save_brief") == 2  # once per conversation
    a_again, a_third = anyio.run(session, "conversation-a", 2)  # a new session, the same task
    assert a_again["replayed"] is True and a_third["replayed"] is True
    assert world.calls("save_brief") == 2
    [host] = anyio.run(session, None)  # no _meta: the server's own task, "mcp"
    assert host["replayed"] is False and world.calls("save_brief") == 3
    [named] = anyio.run(session, "mcp")  # naming the server's own task is the same task
    assert named["replayed"] is True and world.calls("save_brief") == 3
    assert world.tasks == ["conversation-a", "conversation-b"]  # one runner each, kept


def test_each_conversation_asks_its_own_approval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = World(tmp_path, approvals=None)

    async def ask(task: str) -> dict[str, Any]:
        async with Client(world.server) as client:
            return structured(await client.call_tool("send_message", MESSAGE, meta=in_task(task)))

    a, b = anyio.run(ask, "conversation-a"), anyio.run(ask, "conversation-b")
    assert a["error"] == b["error"] == "approval_required"
    assert a["approval_id"] != b["approval_id"]
    assert cli.main(["approvals", "list", "--workspace", str(tmp_path), "--json"]) == 0
    owners = {r["approval_id"]: r["task_id"] for r in json.loads(capsys.readouterr().out)}
    assert owners == {a["approval_id"]: "conversation-a", b["approval_id"]: "conversation-b"}
    assert cli.main(["approvals", "approve", a["approval_id"], "--workspace", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    settled = anyio.run(ask, "conversation-a")
    assert settled["ok"] is True and settled["replayed"] is True
    assert anyio.run(ask, "conversation-b")["error"] == "approval_required"
    assert world.outbox == 1  # conversation-a's message, sent once by the CLI


@pytest.mark.parametrize("task_id", [
    123, "", "x" * (MAX_TASK_ID_CHARS + 1), "line\nbreak", "tab\there", "bidi\u202eeve",
    "nul\x00", ["a"],
])
def test_a_bad_task_id_is_invalid_arguments_and_runs_nothing(tmp_path: Path, task_id: Any) -> None:
    world = World(tmp_path)
    arguments = brief_arguments(world.runner)

    async def go() -> types.CallToolResult:
        async with Client(world.server) as client:
            return await client.call_tool("save_brief", arguments, meta=in_task(task_id))

    result = anyio.run(go)
    body = assert_failure(result, "invalid_arguments")
    assert body["detail"].startswith(f"_meta {TASK_META}: a task id ")
    if isinstance(task_id, str) and task_id:
        assert task_id not in json.dumps(body)  # never echoed
    assert world.calls("save_brief") == 0 and world.tasks == []


def test_the_longest_task_id_is_taken(tmp_path: Path) -> None:
    world = World(tmp_path)
    arguments = brief_arguments(world.runner)

    async def go() -> dict[str, Any]:
        async with Client(world.server) as client:
            return structured(await client.call_tool(
                "save_brief", arguments, meta=in_task("é" * MAX_TASK_ID_CHARS)))

    assert anyio.run(go)["ok"] is True and world.calls("save_brief") == 1


def test_a_conversations_default_runner_shares_the_servers_store_and_budget(tmp_path: Path) -> None:
    """Without ``runner_for``: a twin of the server's runner. Naming a new task never buys a
    new budget; the task's approvals land in the same store."""
    base = cli.workspace_runner(tmp_path)
    budget = Budget(max_attempts=1)
    runner = ToolRunner(make_demo_registry(tmp_path / "files"), store=base.store, budget=budget,
                        context=base.context, sleep=lambda seconds: None)
    server = make_server(runner, secret=b"s" * 32)

    async def go() -> list[dict[str, Any]]:
        async with Client(server) as client:
            return [structured(await client.call_tool(
                "search_local_sources", {"query": "retry"}, meta=in_task(task)))
                for task in ("conversation-a", "conversation-b")]

    try:
        first, second = anyio.run(go)
        assert first["ok"] is True
        assert second["error"] == "budget_exhausted"  # the host's one unit is spent
        assert budget.used == 1
    finally:
        base.store.close()


def test_over_stdio_each_conversation_named_in_meta_writes_once(tmp_path: Path) -> None:
    """serve-mcp itself: one session, three calls of the same write. Conversation a writes,
    b writes again (its own key: the file is rewritten, a new inode), a again replays."""
    from test_mcp import stdio_params

    runner = cli.workspace_runner(tmp_path)
    arguments = brief_arguments(runner)
    runner.store.close()
    brief = tmp_path / "files" / "briefs" / "a.md"
    inodes: list[int] = []

    async def session() -> list[dict[str, Any]]:
        out = []
        async with Client(stdio_params(tmp_path), read_timeout_seconds=60) as client:
            for task in ("conversation-a", "conversation-b", "conversation-a"):
                out.append(structured(await client.call_tool("save_brief", arguments,
                                                             meta=in_task(task))))
                inodes.append(brief.stat().st_ino)
        return out

    a, b, a_again = anyio.run(session)
    assert (a["replayed"], b["replayed"], a_again["replayed"]) == (False, False, True)
    assert inodes[0] != inodes[1] == inodes[2]  # two real writes, then a replay
