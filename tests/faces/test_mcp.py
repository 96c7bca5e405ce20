"""The registry served over MCP (issue 12), tested with the official ``mcp`` client: in memory,
and over a real stdio subprocess of ``python -m agentkit serve-mcp``.

Every write is counted for real: by a counter around the handler in memory, and by what landed
in the workspace (outbox lines, a file's inode) across processes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters, types
from mcp.shared.exceptions import MCPError

from agentkit import ToolRunner
from agentkit.demo import faults
from agentkit.demo.tools import make_demo_registry, outbox_lines
from agentkit.faces import cli
from agentkit.faces.mcp import APPROVAL_INPUT, RequestStateSeal, make_server

MESSAGE = {"to": "Ada", "body": "The brief is ready."}


def run(coroutine_function: Callable[[], Any]) -> Any:
    return anyio.run(coroutine_function)


class World:
    """The demo tools in a workspace, each handler counted, behind a runner and an MCP server
    (``approvals="elicit"`` unless told: most tests here are about the elicitation; the
    default's own tests pass ``approvals=None``, make_server's default)."""

    def __init__(self, root: Path, wrap: dict[str, Callable[[Any], faults.Fault]] | None = None,
                 approvals: str | None = "elicit"):
        self.root = root
        self.counters: dict[str, faults.Fault] = {}
        wrappers = wrap or {}

        def counted(name: str, handler: Any) -> Any:
            self.counters[name] = wrappers.get(name, faults.count_calls)(handler)
            return self.counters[name]

        base = cli.workspace_runner(root)  # the store and context serve-mcp uses
        registry = make_demo_registry(root / "files", wrap=counted)
        self.runner = ToolRunner(registry, store=base.store, context=base.context,
                                 sleep=lambda seconds: None)
        self.tasks: list[str] = []  # the conversations' runners made, in order

        def runner_for(task_id: str) -> ToolRunner:
            self.tasks.append(task_id)
            return ToolRunner(registry, store=base.store, sleep=lambda seconds: None,
                              context=dataclasses.replace(base.context, task_id=task_id))

        options: dict[str, Any] = {} if approvals is None else {"approvals": approvals}
        self.server = make_server(self.runner, secret=b"s" * 32, runner_for=runner_for, **options)

    def calls(self, name: str) -> int:
        return self.counters[name].calls

    @property
    def outbox(self) -> int:
        return outbox_lines(self.root / "files")


def brief_arguments(runner: ToolRunner, content: str = "# Brief\n") -> dict[str, Any]:
    """save_brief's arguments, whatever the demo's schema asks for beside path and content."""
    spec = runner.registry.get("save_brief")
    assert spec is not None and spec.parameters is not None
    arguments: dict[str, Any] = {"path": "briefs/a.md", "content": content}
    if "task_id" in spec.parameters["properties"]:
        arguments["task_id"] = "t-1"
    return arguments


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    return dict(result.structured_content)


def text(result: types.CallToolResult) -> str:
    [block] = result.content
    assert isinstance(block, types.TextContent)
    return block.text


def assert_failure(result: types.CallToolResult, error: str) -> dict[str, Any]:
    """isError, the runner's dict as structuredContent, its JSON as the text, no traceback."""
    body = structured(result)
    assert result.is_error is True
    assert body["ok"] is False and body["error"] == error
    assert json.loads(text(result)) == body
    assert "Traceback" not in text(result)
    return body


def answering(action: str, seen: list[str]) -> Any:
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params.message)
        return types.ElicitResult(action=action, content={} if action == "accept" else None)  # type: ignore[arg-type]

    return elicit


# --------------------------------------------------------------------------- in memory


def test_tools_list_is_describe_mcp_with_annotations(tmp_path: Path) -> None:
    world = World(tmp_path)

    async def go() -> types.ListToolsResult:
        async with Client(world.server) as client:
            return await client.list_tools()

    listed = {tool.name: tool for tool in run(go).tools}
    described = {entry["name"]: entry for entry in world.runner.registry.describe("mcp")}
    assert set(listed) == set(described) == {
        "search_local_sources", "get_document", "save_brief", "send_message"}
    for name, tool in listed.items():
        dumped = tool.model_dump(by_alias=True, exclude_none=True)
        assert dumped["inputSchema"] == described[name]["inputSchema"]
        assert dumped["annotations"] == described[name]["annotations"]
    hints = {name: (t.annotations.read_only_hint, t.annotations.destructive_hint,  # type: ignore[union-attr]
                    t.annotations.idempotent_hint) for name, t in listed.items()}  # type: ignore[union-attr]
    assert hints == {
        "search_local_sources": (True, False, True),
        "get_document": (True, False, True),
        "save_brief": (False, False, True),
        "send_message": (False, True, False),
    }


def test_a_read_returns_data_as_text_and_the_whole_result_as_structured_content(tmp_path: Path) -> None:
    world = World(tmp_path)

    async def go() -> types.CallToolResult:
        async with Client(world.server) as client:
            return await client.call_tool("search_local_sources", {"query": "idempotency", "limit": 2})

    result = run(go)
    body = structured(result)
    assert result.is_error is False
    assert body["ok"] is True and body["attempts"] == 1 and body["replayed"] is False
    assert text(result) == body["data"] and json.loads(body["data"])
    assert world.calls("search_local_sources") == 1


def test_an_invalid_call_is_invalid_arguments_with_no_traceback(tmp_path: Path) -> None:
    world = World(tmp_path)

    async def go() -> list[types.CallToolResult]:
        async with Client(world.server) as client:
            return [
                await client.call_tool("search_local_sources", {"query": "x", "limit": 99}),
                await client.call_tool("search_local_sources", {"query": "x", "secret": "sk-1"}),
                await client.call_tool("search_local_sources", None),
            ]

    too_many, extra, missing = run(go)
    body = assert_failure(too_many, "invalid_arguments")
    assert "limit" in body["detail"]
    assert "sk-1" not in text(extra) and assert_failure(extra, "invalid_arguments")
    assert_failure(missing, "invalid_arguments")  # input validation stays a result (SEP-1303)
    assert world.calls("search_local_sources") == 0


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_tool_that_does_not_exist_is_a_protocol_error(tmp_path: Path, mode: str) -> None:
    """The spec (2025-11-25): JSON-RPC -32602, not a result; the session goes on."""
    world = World(tmp_path)

    async def go() -> tuple[list[MCPError], types.CallToolResult]:
        errors: list[MCPError] = []
        async with Client(world.server, mode=mode) as client:
            for name in ("no_such_tool", "search_local_source", "x" * 300 + "\u202e"):
                with pytest.raises(MCPError) as raised:
                    await client.call_tool(name, {"query": "x"})
                errors.append(raised.value)
            return errors, await client.call_tool("search_local_sources", {"query": "x"})

    errors, after = run(go)
    assert [e.error.code for e in errors] == [types.INVALID_PARAMS] * 3
    assert errors[0].error.message == "Unknown tool: no_such_tool"
    assert len(errors[2].error.message) < 120 and "\u202e" not in errors[2].error.message
    assert structured(after)["ok"] is True
    assert world.calls("search_local_sources") == 1


def test_server_info_names_the_kits_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    world = World(tmp_path)

    async def go() -> types.Implementation:
        async with Client(world.server, mode="legacy") as client:
            assert client.server_info is not None
            return client.server_info

    info = run(go)
    assert info.name == "agentkit" and info.version == version("agentkit-boundary") != ""


def test_a_transient_failure_is_retried_and_counted(tmp_path: Path) -> None:
    world = World(tmp_path, wrap={"search_local_sources": lambda fn: faults.fail_times(fn, 2)})

    async def go() -> types.CallToolResult:
        async with Client(world.server) as client:
            return await client.call_tool("search_local_sources", {"query": "retry"})

    result = run(go)
    assert result.is_error is False
    assert structured(result)["attempts"] == 3
    assert world.calls("search_local_sources") == 3


def test_a_repeated_write_runs_once_and_the_second_is_replayed(tmp_path: Path) -> None:
    world = World(tmp_path)
    arguments = brief_arguments(world.runner)

    async def go() -> list[types.CallToolResult]:
        async with Client(world.server) as client:
            return [await client.call_tool("save_brief", arguments) for _ in range(2)]

    first, second = run(go)
    assert structured(first)["replayed"] is False and structured(second)["replayed"] is True
    assert text(first) == text(second)
    assert world.calls("save_brief") == 1
    assert (tmp_path / "files" / "briefs" / "a.md").read_text() == "# Brief\n"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_elicitation_accept_runs_the_write_once(tmp_path: Path, mode: str) -> None:
    """2026-07-28: an InputRequiredResult round trip; legacy: an elicitation/create request."""
    world = World(tmp_path)
    seen: list[str] = []

    async def go() -> tuple[str, list[types.CallToolResult]]:
        async with Client(world.server, mode=mode, elicitation_callback=answering("accept", seen)) as client:
            results = [await client.call_tool("send_message", MESSAGE) for _ in range(2)]
            return client.protocol_version, results

    version, (sent, again) = run(go)
    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    assert structured(sent)["ok"] is True and structured(sent)["attempts"] == 1
    assert structured(again)["replayed"] is True  # the settled result, no second question
    assert len(seen) == 1 and "send_message" in seen[0] and "Ada" in seen[0]
    assert world.calls("send_message") == 1 and world.outbox == 1


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_elicitation_decline_or_cancel_settles_forbidden(tmp_path: Path, action: str) -> None:
    world = World(tmp_path)
    seen: list[str] = []

    async def go() -> list[types.CallToolResult]:
        async with Client(world.server, elicitation_callback=answering(action, seen)) as client:
            return [await client.call_tool("send_message", MESSAGE) for _ in range(2)]

    refused, again = run(go)
    assert_failure(refused, "forbidden")
    assert assert_failure(again, "forbidden")["replayed"] is True
    assert len(seen) == 1
    assert world.calls("send_message") == 0 and world.outbox == 0
    assert world.runner.pending_approvals() == []


def test_without_elicitation_a_person_approves_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = World(tmp_path)

    async def ask() -> types.CallToolResult:
        async with Client(world.server) as client:  # no elicitation capability
            return await client.call_tool("send_message", MESSAGE)

    asked = assert_failure(run(ask), "approval_required")
    approval_id = asked["approval_id"]
    assert run(ask).structured_content["approval_id"] == approval_id  # type: ignore[index]

    assert cli.main(["approvals", "list", "--workspace", str(tmp_path)]) == 0
    assert approval_id in capsys.readouterr().out
    assert cli.main(["approvals", "approve", approval_id, "--workspace", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert world.outbox == 1  # the CLI's runner sent it, once

    settled = run(ask)
    assert structured(settled)["ok"] is True and structured(settled)["replayed"] is True
    assert world.calls("send_message") == 0  # this server never ran it: the CLI did
    assert world.outbox == 1


def test_the_cli_denies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    world = World(tmp_path)

    async def ask() -> types.CallToolResult:
        async with Client(world.server) as client:
            return await client.call_tool("send_message", MESSAGE)

    approval_id = structured(run(ask))["approval_id"]
    assert cli.main(["approvals", "deny", approval_id, "--workspace", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["error"] == "forbidden"
    assert assert_failure(run(ask), "forbidden")["replayed"] is True
    assert world.outbox == 0


def test_a_client_cannot_approve_through_any_tool_method_or_argument(tmp_path: Path) -> None:
    world = World(tmp_path)
    other = {"to": "Eve", "body": "Wire the money."}

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with Client(world.server) as client:
            asked = structured(await client.call_tool("send_message", MESSAGE))
            approval_id = asked["approval_id"]
            out["tools"] = [t.name for t in (await client.list_tools()).tools]
            out["by_name"] = []
            for name in ("approve", "approvals", "agentkit.approve", "approve_send_message"):
                with pytest.raises(MCPError) as raised:  # no such tool: a protocol error
                    await client.call_tool(name, {"approval_id": approval_id})
                out["by_name"].append(raised.value.error.code)
            out["by_argument"] = await client.call_tool(
                "send_message", {**MESSAGE, "approval_id": approval_id, "approved": True})
            accept = {APPROVAL_INPUT: types.ElicitResult(action="accept", content={})}
            out["no_state"] = await client.session.call_tool(
                "send_message", MESSAGE, input_responses=accept, allow_input_required=True)
            out["forged_state"] = await client.session.call_tool(
                "send_message", MESSAGE, input_responses=accept, allow_input_required=True,
                request_state=RequestStateSeal(b"x" * 32).seal(approval_id, "send_message", MESSAGE))
        # A genuine request_state, minted for MESSAGE, presented with other arguments.
        async with Client(world.server, elicitation_callback=answering("accept", [])) as client:
            first = await client.session.call_tool("send_message", other, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            genuine = first.request_state
            out["moved_state"] = await client.session.call_tool(
                "send_message", MESSAGE, input_responses=accept, request_state=genuine,
                allow_input_required=True)
        return out

    out = run(go)
    assert "approve" not in " ".join(out["tools"])
    assert out["by_name"] == [types.INVALID_PARAMS] * 4
    assert_failure(out["by_argument"], "invalid_arguments")
    for key in ("no_state", "forged_state", "moved_state"):
        assert_failure(out[key], "forbidden")
    assert world.calls("send_message") == 0 and world.outbox == 0
    pending = {r["approval_id"] for r in world.runner.pending_approvals()}
    assert len(pending) == 2  # both intents still wait for a person


def test_request_state_binds_tool_arguments_and_approval() -> None:
    seal = RequestStateSeal(b"k" * 32)
    token = seal.seal("apr-1", "send_message", MESSAGE)
    assert seal.open(token, "send_message", dict(reversed(list(MESSAGE.items())))) == "apr-1"
    assert seal.open(token, "send_message", {**MESSAGE, "to": "Eve"}) is None
    assert seal.open(token, "save_brief", MESSAGE) is None
    assert RequestStateSeal(b"j" * 32).open(token, "send_message", MESSAGE) is None
    version, body, mac = token.split(".")
    assert seal.open(f"{version}.{body}x.{mac}", "send_message", MESSAGE) is None
    assert seal.open("garbage", "send_message", MESSAGE) is None
    assert seal.open(None, "send_message", MESSAGE) is None
    assert seal.open(token, "send_message", {**MESSAGE, "to": "\ud800"}) is None  # lone surrogate
    with pytest.raises(ValueError):
        RequestStateSeal(b"short")


# --------------------------------------------------------------------------- over stdio


def stdio_params(workspace: Path, *flags: str) -> StdioServerParameters:
    """``python -m agentkit serve-mcp`` as a desktop host would start it. The SDK gives the
    child an allow-listed environment; it needs nothing more than HOME."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentkit", "serve-mcp", "--workspace", str(workspace), *flags],
        env={"HOME": str(workspace)},
    )


def test_over_stdio_list_read_invalid_and_a_write_that_survives_a_restart(tmp_path: Path) -> None:
    runner = cli.workspace_runner(tmp_path)
    arguments = brief_arguments(runner)
    runner.store.close()

    async def session(calls: list[tuple[str, dict[str, Any] | None]]) -> list[Any]:
        async with Client(stdio_params(tmp_path), read_timeout_seconds=60) as client:
            out: list[Any] = [await client.list_tools()]
            for name, args in calls:
                out.append(await client.call_tool(name, args))
            return out

    listed, read, invalid, first = anyio.run(session, [
        ("search_local_sources", {"query": "timeout"}),
        ("get_document", {}),
        ("save_brief", arguments),
    ])
    assert {t.name for t in listed.tools} >= {"search_local_sources", "send_message"}
    assert read.is_error is False and structured(read)["ok"] is True
    assert_failure(invalid, "invalid_arguments")
    assert structured(first)["replayed"] is False
    brief = tmp_path / "files" / "briefs" / "a.md"
    inode = brief.stat().st_ino  # an atomic rewrite would give the file a new inode

    (_, again) = anyio.run(session, [("save_brief", arguments)])  # a new server process
    assert structured(again)["ok"] is True and structured(again)["replayed"] is True
    assert brief.stat().st_ino == inode


def test_over_stdio_approval_through_the_cli_then_replayed(tmp_path: Path) -> None:
    async def send() -> types.CallToolResult:
        async with Client(stdio_params(tmp_path), read_timeout_seconds=60) as client:
            return await client.call_tool("send_message", MESSAGE)

    asked = assert_failure(anyio.run(send), "approval_required")
    command = [sys.executable, "-m", "agentkit", "approvals"]
    listed = subprocess.run([*command, "list", "--workspace", str(tmp_path)],
                            check=True, capture_output=True, text=True, timeout=60)
    assert asked["approval_id"] in listed.stdout
    subprocess.run([*command, "approve", asked["approval_id"], "--workspace", str(tmp_path)],
                   check=True, capture_output=True, text=True, timeout=60)
    settled = anyio.run(send)
    assert structured(settled)["ok"] is True and structured(settled)["replayed"] is True
    assert outbox_lines(tmp_path / "files") == 1


def test_over_stdio_a_client_that_accepts_by_itself_approves_nothing_by_default(
    tmp_path: Path,
) -> None:
    """Issue 39: an agent client whose elicitation callback accepts by itself. serve-mcp's
    default is a person's channel: never elicited, nothing sent, the approval waits."""
    seen: list[str] = []

    async def send() -> types.CallToolResult:
        async with Client(stdio_params(tmp_path), read_timeout_seconds=60,
                          elicitation_callback=answering("accept", seen)) as client:
            return await client.call_tool("send_message", MESSAGE)

    asked = assert_failure(anyio.run(send), "approval_required")
    assert seen == [] and not (tmp_path / "files" / "outbox.jsonl").exists()
    runner = cli.workspace_runner(tmp_path)
    try:
        assert [r["approval_id"] for r in runner.pending_approvals()] == [asked["approval_id"]]
    finally:
        runner.store.close()


@pytest.mark.parametrize("flag", ["elicit", "auto"])
def test_over_stdio_elicitation_accept_when_asked_for(tmp_path: Path, flag: str) -> None:
    seen: list[str] = []

    async def send() -> types.CallToolResult:
        async with Client(stdio_params(tmp_path, "--approvals", flag), read_timeout_seconds=60,
                          elicitation_callback=answering("accept", seen)) as client:
            return await client.call_tool("send_message", MESSAGE)

    sent = anyio.run(send)
    assert structured(sent)["ok"] is True and len(seen) == 1
    assert outbox_lines(tmp_path / "files") == 1


def test_serve_mcp_writes_only_protocol_to_stdout_and_logs_to_stderr(tmp_path: Path) -> None:
    """A raw JSON-RPC session: every stdout line is a JSON-RPC message; logs are on stderr."""
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "search_local_sources", "arguments": {"query": 5}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "get_document", "arguments": {"doc_id": "no-such-note"}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "search_local_sources", "arguments": [1, 2]}},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "send_message", "arguments": MESSAGE, "requestState": "ak1.forged.mac",
            "inputResponses": {APPROVAL_INPUT: {"action": "accept"}}}},
    ]
    child = subprocess.Popen(  # (elicit: a forged answer must be refused, not just ignored)
        [sys.executable, "-m", "agentkit", "serve-mcp", "--workspace", str(tmp_path),
         "--approvals", "elicit"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    watchdog = threading.Timer(60, child.kill)  # a hung server fails the test, never hangs it
    watchdog.start()
    try:
        assert child.stdin is not None and child.stdout is not None
        for line in lines:
            child.stdin.write(json.dumps(line) + "\n")
        child.stdin.flush()
        out = []  # up to the answers to ids 1 to 5 (log notifications come in between)
        while len([line for line in out if '"id"' in line]) < 5:
            out.append(child.stdout.readline())
        child.stdin.close()  # end of the session: the server exits
        child.wait(timeout=60)
        assert child.stderr is not None
        rest, err = child.stdout.read(), child.stderr.read()
    finally:
        watchdog.cancel()
    stdout = "".join(out) + rest
    assert child.returncode == 0, err[-2000:]
    messages = [json.loads(line) for line in stdout.splitlines()]
    assert all(m.get("jsonrpc") == "2.0" for m in messages)
    assert {m["method"] for m in messages if "id" not in m} <= {"notifications/message"}
    by_id = {m["id"]: m for m in messages if "id" in m}
    assert by_id[2]["result"]["isError"] is True
    assert by_id[2]["result"]["structuredContent"]["error"] == "invalid_arguments"
    assert by_id[3]["result"]["structuredContent"]["error"] == "invalid_arguments"  # a guessed id
    assert by_id[4]["error"]["code"] == -32602  # the SDK: invalid params, never -32603 internal
    assert by_id[5]["result"]["structuredContent"]["error"] == "forbidden"
    assert not (tmp_path / "files" / "outbox.jsonl").exists()
    assert "Traceback" not in stdout
    assert "invalid arguments" in err  # the agentkit logger, on stderr
    assert "UnknownDocument" in err  # the exception, for the operator only
