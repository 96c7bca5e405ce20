"""The MCP face under hostile input (issue 17): every request with an id is answered, what a
person approves is exactly what runs, ``--approvals cli`` leaves approvals to a person, and
the README's "serve your own tools" script works as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters, types

from agentkit import ToolRunner
from agentkit.demo import faults
from agentkit.demo.tools import make_demo_registry, outbox_lines
from agentkit.faces import cli
from agentkit.faces.mcp import APPROVAL_INPUT, WIRE_DEPTH, guard_line, make_server

ROOT = Path(__file__).resolve().parents[2]
TRICKY = {"to": "Ada\u202eeve@evil.example", "body": "pay \u200bnow" + " and more" * 200 + " THE END"}


def deep(levels: int, inner: Any = "q") -> Any:
    value = inner
    for _ in range(levels):
        value = [value]
    return value


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    return dict(result.structured_content)


def stdio_params(workspace: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentkit", "serve-mcp", "--workspace", str(workspace), *extra],
        env={"HOME": str(workspace)},
    )


# --------------------------------------------------------------------------- deep requests


def test_a_deep_tools_call_over_stdio_is_answered_and_runs_nothing(tmp_path: Path) -> None:
    async def session() -> list[types.CallToolResult]:
        async with Client(stdio_params(tmp_path), read_timeout_seconds=60) as client:
            return [
                await client.call_tool("send_message", {"to": deep(WIRE_DEPTH + 20), "body": "x"}),
                await client.call_tool("search_local_sources", {"query": deep(WIRE_DEPTH - 10)}),
                await client.call_tool("search_local_sources", {"query": "timeout"}),
            ]

    too_deep, deep_but_readable, after = anyio.run(session)
    for result in (too_deep, deep_but_readable):
        assert result.is_error is True and structured(result)["error"] == "invalid_arguments"
        assert "Traceback" not in json.dumps(structured(result))
    assert structured(after)["ok"] is True  # the session goes on
    assert not (tmp_path / "files" / "outbox.jsonl").exists()


def test_requests_the_sdks_parser_cannot_read_get_an_answer(tmp_path: Path) -> None:
    """Raw JSON-RPC lines a client library would refuse to build: 300 and 20,000 levels, a
    number of 5,000 digits."""
    def call(request_id: Any, method: str, params: str) -> str:
        return (f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "method": "{method}", '
                f'"params": {params}}}')

    def nested(levels: int) -> str:  # JSON text, built as text: json.dumps would recurse
        return "[" * levels + '"q"' + "]" * levels

    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        call(2, "tools/call", f'{{"name": "send_message", "arguments": {{"to": {nested(300)}, "body": "x"}}}}'),
        call("three", "tools/call", f'{{"name": "send_message", "arguments": {{"to": {nested(20_000)}}}}}'),
        call(4, "resources/read", f'{{"uri": {nested(300)}}}'),
        call(5, "tools/call", f'{{"name": "send_message", "arguments": {{}}, "_meta": {{"x": {nested(300)}}}}}'),
        f'{{"jsonrpc": "2.0", "method": "notifications/x", "params": {nested(300)}}}',
        call(6, "tools/call", '{"name": "search_local_sources", "arguments": {"query": "timeout"}}'),
        call(7, "tools/call", '{"name": "send_message", "arguments": {"to": "Ada", "body": '
             + "9" * 5_000 + "}}"),
        call(8, "tools/call", '{"name": "send_message", "arguments": {"to": "Ada"}, "_meta": {"n": -'
             + "9" * 5_000 + "}}"),
    ]
    child = subprocess.Popen(
        [sys.executable, "-m", "agentkit", "serve-mcp", "--workspace", str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    watchdog = threading.Timer(60, child.kill)  # an unanswered request fails, never hangs
    watchdog.start()
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("\n".join(lines) + "\n")
        child.stdin.flush()
        answers = [json.loads(child.stdout.readline()) for _ in range(8)]  # ids 1 to 8
        child.stdin.close()
        child.wait(timeout=60)
    finally:
        watchdog.cancel()
    by_id = {answer["id"]: answer for answer in answers}
    assert set(by_id) == {1, 2, "three", 4, 5, 6, 7, 8}
    for request_id in (2, "three"):
        body = by_id[request_id]["result"]["structuredContent"]
        assert body["error"] == "invalid_arguments" and "deeper than" in body["detail"]
    body = by_id[7]["result"]["structuredContent"]  # a number the SDK's parser cannot read
    assert body["error"] == "invalid_arguments" and "number too long" in body["detail"]
    for request_id in (4, 5, 8):  # not a tool's arguments: a JSON-RPC error with the id
        assert by_id[request_id]["error"]["code"] == -32601
    assert by_id[6]["result"]["structuredContent"]["ok"] is True
    assert not (tmp_path / "files" / "outbox.jsonl").exists()


def test_the_guard_is_linear_and_leaves_ordinary_lines_alone() -> None:
    refused: dict[str, str] = {}
    ordinary = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "t", "arguments": {"xs": [[1]] * 5_000}}})
    assert guard_line(ordinary, refused) == ordinary and not refused
    hostile = '{"id": 1, "method": "tools/call", "params": ' + '"\\"' * 50_000 + "[" * 200
    answered = json.loads(guard_line(hostile, refused))  # unreadable, but its id is: answered
    assert answered == {"jsonrpc": "2.0", "id": 1, "method": "agentkit/unreadable-request"}
    no_id = '{"method": "x", "params": ' + "[" * 300
    assert guard_line(no_id, refused) == no_id  # nothing to answer: passed on
    unbalanced = "]" * 300
    assert guard_line(unbalanced, refused) == unbalanced


# --------------------------------------------------------------------------- what is approved


class World:
    def __init__(self, root: Path, approvals: str = "elicit") -> None:
        base = cli.workspace_runner(root)
        self.counter: faults.Fault | None = None

        def counted(name: str, handler: Any) -> Any:
            wrapped = faults.count_calls(handler)
            if name == "send_message":
                self.counter = wrapped
            return wrapped

        registry = make_demo_registry(root / "files", wrap=counted)
        self.runner = ToolRunner(registry, store=base.store, context=base.context,
                                 sleep=lambda seconds: None)
        self.server = make_server(self.runner, secret=b"s" * 32, approvals=approvals)  # type: ignore[arg-type]

    @property
    def sends(self) -> int:
        assert self.counter is not None
        return self.counter.calls


def answering(action: str, seen: list[str]) -> Any:
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params.message)
        return types.ElicitResult(action=action, content={} if action == "accept" else None)  # type: ignore[arg-type]

    return elicit


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_elicitation_shows_the_whole_arguments_escaped(tmp_path: Path, mode: str) -> None:
    world = World(tmp_path)
    seen: list[str] = []

    async def go() -> types.CallToolResult:
        async with Client(world.server, mode=mode, elicitation_callback=answering("decline", seen)) as client:
            return await client.call_tool("send_message", TRICKY)

    run = anyio.run(go)
    assert structured(run)["error"] == "forbidden"
    [message] = seen
    assert "\u202e" not in message and "\u200b" not in message
    assert "Ada\\u202eeve@evil.example" in message and "THE END" in message
    shown = re.search(r"with (\{.*\})\? It cannot be undone", message)
    assert shown is not None and json.loads(shown.group(1)) == TRICKY  # exactly what would run
    assert world.sends == 0


def test_approvals_cli_mode_never_elicits_and_ignores_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = World(tmp_path, approvals="cli")
    seen: list[str] = []
    message = {"to": "Ada", "body": "hello"}

    async def ask(**extra: Any) -> types.CallToolResult:
        async with Client(world.server, elicitation_callback=answering("accept", seen)) as client:
            if not extra:
                return await client.call_tool("send_message", message)
            return await client.session.call_tool("send_message", message, **extra)  # type: ignore[attr-defined]

    asked = structured(anyio.run(ask))
    assert asked["error"] == "approval_required" and seen == []
    assert world.sends == 0
    assert cli.main(["approvals", "list", "--workspace", str(tmp_path)]) == 0
    assert asked["approval_id"] in capsys.readouterr().out
    assert cli.main(["approvals", "approve", asked["approval_id"], "--workspace", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    settled = structured(anyio.run(ask))
    assert settled["ok"] is True and settled["replayed"] is True
    assert outbox_lines(tmp_path / "files") == 1 and seen == []


def test_approvals_cli_mode_does_not_take_a_clients_own_answer(tmp_path: Path) -> None:
    world = World(tmp_path, approvals="cli")
    message = {"to": "Ada", "body": "hello"}
    # A request_state minted by an auto server for these very arguments, answered "accept".
    from agentkit.faces.mcp import RequestStateSeal

    asked = world.runner.call("send_message", message)
    state = RequestStateSeal(b"s" * 32).seal(asked["approval_id"], "send_message", message)

    async def answer() -> types.CallToolResult:
        async with Client(world.server) as client:
            return await client.session.call_tool(  # type: ignore[attr-defined]
                "send_message", message, request_state=state,
                input_responses={APPROVAL_INPUT: types.ElicitResult(action="accept", content={})},
            )

    try:
        result = structured(anyio.run(answer))
    except TypeError:
        pytest.skip("this SDK's session.call_tool takes no request_state")
    assert result["error"] == "approval_required"
    assert world.sends == 0 and outbox_lines(tmp_path / "files") == 0


# --------------------------------------------------------------------------- the README script


def readme_server() -> str:
    text = (ROOT / "docs" / "hosts" / "mcp.md").read_text(encoding="utf-8")  # the docs page
    found = re.search(r"<!-- serve-your-own:start -->\s*```python\n(.*?)```\s*<!-- serve-your-own:end -->",
                      text, re.DOTALL)
    assert found, "docs/hosts/mcp.md lost its serve-your-own script"
    return found.group(1)


def test_the_readme_script_serves_its_tools_and_a_person_approves_with_the_cli(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "my_server.py").write_text(readme_server(), encoding="utf-8")
    workspace = tmp_path / "state"
    env = {"HOME": str(tmp_path), "MY_SERVER_WORKSPACE": str(workspace)}
    params = StdioServerParameters(command=sys.executable, args=[str(folder / "my_server.py")],
                                   env=env, cwd=str(folder))
    refund = {"order_id": "o-1", "cents": 500}

    async def session() -> list[types.CallToolResult]:
        async with Client(params, read_timeout_seconds=60) as client:
            return [await client.call_tool("order_status", {"order_id": "o-1"}),
                    await client.call_tool("refund", refund)]

    status, asked = anyio.run(session)
    assert structured(status)["ok"] is True
    approval_id = structured(asked)["approval_id"]
    store = workspace / "agentkit.sqlite3"
    command = [sys.executable, "-m", "agentkit", "approvals"]
    run_env = {**os.environ, "MY_SERVER_WORKSPACE": str(workspace)}
    listed = subprocess.run([*command, "list", "--store", str(store)], cwd=folder, env=run_env,
                            capture_output=True, text=True, timeout=60, check=True)
    assert approval_id in listed.stdout and '"cents": 500' in listed.stdout
    subprocess.run([*command, "approve", approval_id, "--store", str(store),
                    "--registry", "my_server:registry"], cwd=folder, env=run_env,
                   capture_output=True, text=True, timeout=60, check=True)
    assert len((workspace / "refunds.jsonl").read_text().splitlines()) == 1

    (_, settled) = anyio.run(session)  # a new server process: the store kept it
    assert structured(settled)["ok"] is True and structured(settled)["replayed"] is True
    assert len((workspace / "refunds.jsonl").read_text().splitlines()) == 1
    secret = (workspace / "mcp-secret").read_bytes()
    anyio.run(session)
    assert (workspace / "mcp-secret").read_bytes() == secret  # kept across restarts


def test_the_readme_scripts_reversible_write_runs_once_per_request_across_a_restart(
    tmp_path: Path,
) -> None:
    """create_ticket is id-addressed: the same request replays (in the server and after its
    restart, from the SQLite store), the same request_id with another title is a conflict;
    one ticket in the ledger."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "my_server.py").write_text(readme_server(), encoding="utf-8")
    workspace = tmp_path / "state"
    env = {"HOME": str(tmp_path), "MY_SERVER_WORKSPACE": str(workspace)}
    params = StdioServerParameters(command=sys.executable, args=[str(folder / "my_server.py")],
                                   env=env, cwd=str(folder))
    ticket = {"request_id": "r-7", "title": "Printer jam"}

    async def session(*calls: dict[str, Any]) -> list[dict[str, Any]]:
        async with Client(params, read_timeout_seconds=60) as client:
            return [structured(await client.call_tool("create_ticket", call)) for call in calls]

    made, again = anyio.run(session, ticket, ticket)
    assert made["ok"] is True and made["replayed"] is False and made["attempts"] == 1
    assert json.loads(made["data"])["ticket"] == "T-r-7"
    assert again["ok"] is True and again["replayed"] is True and again["data"] == made["data"]
    (after_restart, changed) = anyio.run(session, ticket, {**ticket, "title": "Paper jam"})
    assert after_restart["replayed"] is True and after_restart["data"] == made["data"]
    assert changed["error"] == "idempotency_conflict"
    assert len((workspace / "tickets.jsonl").read_text().splitlines()) == 1  # one real call


def test_the_readme_script_accepts_an_answer_across_a_restart(tmp_path: Path) -> None:
    """Elicitation state survives a restart: a request_state minted by one server process is
    accepted by the next, because the secret lives in the workspace."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "my_server.py").write_text(readme_server(), encoding="utf-8")
    workspace = tmp_path / "state"
    env = {"HOME": str(tmp_path), "MY_SERVER_WORKSPACE": str(workspace)}
    params = StdioServerParameters(command=sys.executable, args=[str(folder / "my_server.py")],
                                   env=env, cwd=str(folder))
    refund = {"order_id": "o-2", "cents": 700}
    seen: list[str] = []

    async def first() -> types.CallToolResult:
        async with Client(params, read_timeout_seconds=60,
                          elicitation_callback=answering("accept", seen)) as client:
            return await client.call_tool("refund", refund)

    done = anyio.run(first)
    assert structured(done)["ok"] is True and len(seen) == 1
    assert "\\u" not in seen[0] and '"cents": 700' in seen[0]
    assert len((workspace / "refunds.jsonl").read_text().splitlines()) == 1


def test_serve_mcp_serves_a_users_registry_with_approvals_left_to_the_cli(tmp_path: Path) -> None:
    (tmp_path / "shop_tools.py").write_text(
        "from agentkit import ToolRegistry, ToolSpec\n"
        "def ship(order: str) -> str:\n"
        "    open('shipped.txt', 'a').write(order + '\\n')\n"
        "    return 'shipped'\n"
        "registry = ToolRegistry([ToolSpec('ship', 'Ship an order.', 'irreversible_write',"
        " 5.0, 1, 200, ship)])\n",
        encoding="utf-8",
    )
    workspace = tmp_path / "ws"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentkit", "serve-mcp", "--workspace", str(workspace),
              "--registry", "shop_tools:registry", "--approvals", "cli"],
        env={"HOME": str(tmp_path)}, cwd=str(tmp_path),
    )
    seen: list[str] = []

    async def session() -> tuple[list[str], types.CallToolResult]:
        async with Client(params, read_timeout_seconds=60,
                          elicitation_callback=answering("accept", seen)) as client:
            listed = await client.list_tools()
            return [t.name for t in listed.tools], await client.call_tool("ship", {"order": "o-1"})

    names, asked = anyio.run(session)
    assert names == ["ship"]
    assert structured(asked)["error"] == "approval_required" and seen == []  # never elicited
    assert not (tmp_path / "shipped.txt").exists()
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "approvals", "approve", structured(asked)["approval_id"],
         "--workspace", str(workspace), "--registry", "shop_tools:registry"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "shipped.txt").read_text() == "o-1\n"


# --------------------------------------------------------------------------- serve-mcp's flags


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What ``serve-mcp`` would serve (its runner's task id, the approvals mode), with
    ``serve_stdio`` replaced by a recorder."""
    from agentkit.faces import mcp as mcp_face

    seen: list[dict[str, Any]] = []

    async def serve(runner: ToolRunner, **kwargs: Any) -> None:
        seen.append({"task_id": runner.context.task_id, **kwargs})
        runner.store.close()

    monkeypatch.setattr(mcp_face, "serve_stdio", serve)
    monkeypatch.setenv("HOME", str(tmp_path))
    return seen


@pytest.mark.parametrize(("flags", "approvals", "task_id"), [
    ([], "cli", "mcp"),
    (["--approvals", "elicit", "--task-id", "desk-7"], "elicit", "desk-7"),
])
def test_serve_mcp_defaults_to_a_persons_channel_and_one_task(
    tmp_path: Path, served: list[dict[str, Any]], flags: list[str], approvals: str, task_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["serve-mcp", "--workspace", str(tmp_path), "--log-level", "ERROR",
                     *flags]) == 0
    assert capsys.readouterr().err == ""
    [seen] = served
    assert (seen["approvals"], seen["task_id"]) == (approvals, task_id)


def test_serve_mcp_takes_auto_as_elicit_with_a_warning(
    tmp_path: Path, served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["serve-mcp", "--workspace", str(tmp_path), "--log-level", "ERROR",
                     "--approvals", "auto"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--approvals auto is the old name of --approvals elicit" in err
    assert served[0]["approvals"] == "elicit"


@pytest.mark.parametrize("task_id", ["", "x" * 201, "two\nlines", "bidi\u202e"])
def test_serve_mcp_refuses_a_bad_task_id_in_one_line(
    tmp_path: Path, served: list[dict[str, Any]], task_id: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["serve-mcp", "--workspace", str(tmp_path), "--task-id", task_id]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("agentkit serve-mcp: --task-id: a task id ")
    assert served == [] and not (tmp_path / cli.STORE_NAME).exists()
