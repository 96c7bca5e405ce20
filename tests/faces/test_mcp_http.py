"""``serve-mcp --transport streamable-http`` (issue 44, docs/design.md#mcp): the same server as stdio, on
the SDK's streamable HTTP transport, behind a token, on the loopback unless told otherwise.

Every server here is a real process (tests/faces/_http_serve.py) driven by the official client
over HTTP, and every write is counted for real: the counted tools append a line to a file per
call; the demo tools' writes land in the workspace. The stdio tests of test_mcp.py and
test_mcp_hardening.py that apply to HTTP (a write across a restart, approvals, hostile input)
are played again here.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp")

import httpx2
from _http_serve import serve_http, stop
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

from agentkit.demo.tools import outbox_lines
from agentkit.faces import cli, mcp_http

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

MESSAGE = {"to": "Ada", "body": "The brief is ready."}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

COUNTED_TOOLS = '''
import logging
import threading

from agentkit import ToolRegistry, ToolSpec, current_call

log = logging.getLogger("counted")
both_in = threading.Barrier(2, timeout=20)


def _count(name: str) -> None:
    with open("calls.txt", "a", encoding="utf-8") as calls:
        calls.write(name + "\\n")


def echo(text: str) -> str:
    _count("echo")
    log.info("echo %s", text)
    return text


def meet(job: str) -> str:
    _count("meet")
    both_in.wait()  # both sessions' calls are in their handlers at once
    call = current_call()
    log.debug("%s debug", job)
    log.warning("%s met", job)
    call.report_progress(5, total=10, message=job)
    call.report_progress(10, total=10, message=job)
    return job


def ship(order: str) -> str:
    _count("ship")
    return "shipped " + order


registry = ToolRegistry([
    ToolSpec("echo", "Echo a text.", "read", 5.0, 1, 200, echo),
    ToolSpec("meet", "Wait for another call.", "read", 30.0, 1, 200, meet),
    ToolSpec("ship", "Ship an order.", "irreversible_write", 5.0, 1, 200, ship),
])
'''


@pytest.fixture
def counted(tmp_path: Path) -> Path:
    """A folder with the counted tools (counted_tools:registry); calls.txt gets a line a call."""
    (tmp_path / "counted_tools.py").write_text(COUNTED_TOOLS, encoding="utf-8")
    return tmp_path


def calls(folder: Path) -> list[str]:
    path = folder / "calls.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    return dict(result.structured_content)


async def call_once(server: Any, name: str, arguments: dict[str, Any], **options: Any) -> types.CallToolResult:
    async with Client(server, read_timeout_seconds=60, **options) as client:
        return await client.call_tool(name, arguments)


# --------------------------------------------------------------------------- the token


def test_without_the_token_nothing_runs(counted: Path) -> None:
    with serve_http(counted / "ws", "--registry", "counted_tools:registry", cwd=counted) as served:
        token = served.url.split("?token=", 1)[1]
        tool_call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "echo", "arguments": {"text": "x"}}}
        refused = []
        with httpx2.Client(timeout=30) as http:
            for body in (INITIALIZE, tool_call):
                for url, headers in [
                    (served.base, {}),
                    (f"{served.base}?token=not-{token}", {}),
                    (f"{served.base}?tok={token}", {}),
                    (served.base, {"Authorization": f"Bearer not-{token}"}),
                    (served.base, {"Authorization": f"Basic {token}"}),
                    (served.base, {"Authorization": token}),
                    (f"{served.base}?token=", {}),
                ]:
                    answer = http.post(url, json=body, headers={**ACCEPT, **headers})
                    refused.append(answer.status_code)
                    assert answer.headers["www-authenticate"].startswith("Bearer")
                    assert token not in answer.text and answer.json()["error"] == "unauthorized"
            refused += [http.get(served.base, headers=ACCEPT).status_code,
                        http.delete(served.base).status_code]
        assert set(refused) == {401} and len(refused) == 16
        assert calls(counted) == []  # nothing ran

        # With the token, as a query parameter (the printed URL) or a bearer header: it runs.
        by_query = anyio.run(call_once, served.url, "echo", {"text": "q"})

        async def by_header() -> types.CallToolResult:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
            async with http:
                return await call_once(streamable_http_client(served.base, http_client=http),
                                       "echo", {"text": "h"})

        assert structured(by_query)["data"] == "q" and structured(anyio.run(by_header))["data"] == "h"
        assert calls(counted) == ["echo", "echo"]
    assert token not in served.stderr()  # no access log, no URL with the token


def test_a_foreign_host_or_origin_is_refused_even_with_the_token(counted: Path) -> None:
    """The SDK's DNS-rebinding protection, kept: a page of evil.example cannot reach it."""
    with serve_http(counted / "ws", "--registry", "counted_tools:registry", cwd=counted) as served:
        with httpx2.Client(timeout=30) as http:
            host = http.post(served.url, json=INITIALIZE,
                             headers={**ACCEPT, "Host": "evil.example:80"}).status_code
            origin = http.post(served.url, json=INITIALIZE,
                               headers={**ACCEPT, "Origin": "http://evil.example"}).status_code
            local = http.post(served.url, json=INITIALIZE,
                              headers={**ACCEPT, "Origin": "http://localhost:6274"}).status_code
        assert (host, origin, local) == (421, 403, 200)
        assert calls(counted) == []


@pytest.mark.parametrize("given", ["flag", "environment"])
def test_a_token_given_is_the_one_required_and_is_not_printed(counted: Path, given: str) -> None:
    token = "given-token-0123456789"
    flags = ["--token", token] if given == "flag" else []
    env = {mcp_http.TOKEN_ENV: token} if given == "environment" else {mcp_http.TOKEN_ENV: ""}
    if given == "flag":
        env = {mcp_http.TOKEN_ENV: "not-this-one"}  # the flag wins
    with serve_http(counted / "ws", "--registry", "counted_tools:registry", *flags, cwd=counted,
                    env=env) as served:
        assert "?" not in served.url and served.url.startswith("http://127.0.0.1:")
        with httpx2.Client(timeout=30) as http:
            wrong = http.post(f"{served.url}?token=not-this-one", json=INITIALIZE, headers=ACCEPT)
        assert wrong.status_code == 401
        result = anyio.run(call_once, f"{served.url}?token={token}", "echo", {"text": "t"})
        assert structured(result)["data"] == "t" and calls(counted) == ["echo"]


def test_the_url_printed_is_one_line_on_stdout_and_a_stop_is_clean(tmp_path: Path) -> None:
    with serve_http(tmp_path / "ws") as served:
        assert served.url.startswith("http://127.0.0.1:") and "/mcp?token=" in served.url
        token = served.url.split("?token=", 1)[1]
        assert len(token) >= 40
        listed = anyio.run(_list_tools, served.url)
        assert {"search_local_sources", "send_message"} <= set(listed)
        stop(served.child)
        assert served.child.returncode == 0
        err = served.stderr()
    assert "Traceback" not in err and token not in err
    assert "listening on http://127.0.0.1:" in err


async def _list_tools(url: str) -> list[str]:
    async with Client(url, read_timeout_seconds=60) as client:
        return [tool.name for tool in (await client.list_tools()).tools]


# --------------------------------------------------------------------------- serve-mcp's flags


@pytest.fixture
def never_served(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, int]]:
    """serve-mcp's HTTP path with binding and serving replaced by recorders."""
    bound: list[tuple[str, int]] = []

    def bind(host: str, port: int) -> socket.socket:
        bound.append((host, port))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        return sock

    async def serve(server: Any, sock: socket.socket, *, ready: Any = None, **kwargs: Any) -> None:
        if ready is not None:
            ready(sock.getsockname()[1])
        sock.close()

    monkeypatch.setattr(mcp_http, "bind", bind)
    monkeypatch.setattr(mcp_http, "serve_http", serve)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv(mcp_http.TOKEN_ENV, raising=False)
    return bound


@pytest.mark.parametrize(("flags", "said"), [
    (["--host", "0.0.0.0"], "--host 0.0.0.0 is not the loopback: anyone who reaches it could "
                            "call the tools, so give the token explicitly (--token, or "
                            "$AGENTKIT_MCP_TOKEN)"),
    (["--host", "192.0.2.7", "--port", "9"], "--host 192.0.2.7 is not the loopback"),
    (["--token", "two words"], "--token: a token holds no space, control or invisible character"),
    (["--token", ""], "--token: a token is 1 to 1,000 characters"),
    (["--port", "70000"], "--port: 70000 is not a port"),
    (["--host", "bad host"], "--host: give an address"),
])
def test_serve_mcp_refuses_what_would_serve_unguarded_in_one_line(
    tmp_path: Path, never_served: list[tuple[str, int]], flags: list[str], said: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["serve-mcp", "--transport", "streamable-http", "--workspace",
                     str(tmp_path / "ws"), *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"agentkit serve-mcp: {said}")
    assert "two words" not in captured.err
    assert never_served == [] and not (tmp_path / "ws").exists()  # nothing bound, nothing made


def test_http_flags_without_the_http_transport_are_refused(
    tmp_path: Path, never_served: list[tuple[str, int]], capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["serve-mcp", "--workspace", str(tmp_path / "ws"), "--port", "9000",
                     "--token", "t"]) == 2
    err = capsys.readouterr().err
    assert err == "agentkit serve-mcp: --port, --token: only with --transport streamable-http\n"


@pytest.mark.parametrize("source", ["flag", "environment"])
def test_another_host_serves_with_an_explicit_token(
    tmp_path: Path, never_served: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], source: str,
) -> None:
    flags = ["--token", "explicit-token"] if source == "flag" else []
    if source == "environment":
        monkeypatch.setenv(mcp_http.TOKEN_ENV, "explicit-token")
    assert cli.main(["serve-mcp", "--transport", "streamable-http", "--host", "0.0.0.0",
                     "--port", "0", "--workspace", str(tmp_path / "ws"), "--log-level", "ERROR",
                     *flags]) == 0
    assert never_served == [("0.0.0.0", 0)]
    out = capsys.readouterr().out
    assert out.startswith("http://0.0.0.0:") and "token" not in out  # given: never printed


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "agentkit", "serve-mcp", "--transport", "streamable-http",
             "--port", str(port), "--workspace", str(tmp_path / "ws")],
            capture_output=True, text=True, timeout=60, check=False,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        )
    assert done.returncode == 2 and done.stdout == ""
    [line] = [text for text in done.stderr.splitlines() if "agentkit serve-mcp:" in text]
    assert line.startswith(f"agentkit serve-mcp: cannot listen on 127.0.0.1 port {port}: ")
    assert "Traceback" not in done.stderr


def test_the_help_says_how_to_serve_over_http() -> None:
    done = subprocess.run([sys.executable, "-m", "agentkit", "serve-mcp", "--help"],
                          capture_output=True, text=True, timeout=60, check=True)
    text = " ".join(done.stdout.split())
    for said in ("--transport {stdio,streamable-http}", "--host ADDRESS", "--port N",
                 "--token TOKEN", "Authorization: Bearer TOKEN", "$AGENTKIT_MCP_TOKEN",
                 "as one URL"):
        assert said in text, said


# --------------------------------------------------------------------------- logging and progress


def test_two_sessions_each_hear_only_their_own_call(counted: Path) -> None:
    """Two clients' calls in their handlers at once (a barrier in the server): each client gets
    its own call's lines at its own level and its own progress, never the other's."""
    heard: dict[str, dict[str, list[Any]]] = {job: {"logs": [], "progress": []} for job in "ab"}
    levels = {"a": "debug", "b": "warning"}

    async def session(url: str, job: str) -> None:
        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            heard[job]["logs"].append((params.level, params.logger, params.data))

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            heard[job]["progress"].append((progress, total, message))

        async with Client(url, mode="legacy", logging_callback=on_log,
                          read_timeout_seconds=60) as client:
            await client.set_logging_level(levels[job])  # type: ignore[arg-type]
            result = await client.call_tool("meet", {"job": job}, progress_callback=on_progress)
            assert result.is_error is False

    async def both(url: str) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(session, url, "a")
            group.start_soon(session, url, "b")

    with serve_http(counted / "ws", "--registry", "counted_tools:registry", cwd=counted) as served:
        anyio.run(both, served.url)
    assert sorted(calls(counted)) == ["meet", "meet"]
    assert heard["a"]["logs"] == [("debug", "counted", "a debug"), ("warning", "counted", "a met")]
    assert heard["b"]["logs"] == [("warning", "counted", "b met")]
    for job in "ab":
        assert heard[job]["progress"] == [(5.0, 10.0, job), (10.0, 10.0, job)]


def test_the_server_declares_logging_and_its_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    async def go(url: str) -> tuple[types.Implementation | None, types.ServerCapabilities | None]:
        async with Client(url, mode="legacy", read_timeout_seconds=60) as client:
            return client.server_info, client.server_capabilities

    with serve_http(tmp_path / "ws") as served:
        info, capabilities = anyio.run(go, served.url)
    assert info is not None and info.version == version("agentkit-boundary")
    assert capabilities is not None and capabilities.logging is not None


# --------------------------------------------------------------------------- stdio's tests, on HTTP


def test_a_write_survives_a_restart_and_an_invalid_call_runs_nothing(tmp_path: Path) -> None:
    arguments = {"path": "briefs/a.md", "content": "# Brief\n"}
    runner = cli.workspace_runner(tmp_path / "ws")
    spec = runner.registry.get("save_brief")
    runner.store.close()
    assert spec is not None and spec.parameters is not None
    if "task_id" in spec.parameters["properties"]:
        arguments["task_id"] = "t-1"

    async def session(url: str) -> list[types.CallToolResult]:
        async with Client(url, read_timeout_seconds=60) as client:
            return [await client.call_tool("get_document", {}),
                    await client.call_tool("save_brief", arguments)]

    with serve_http(tmp_path / "ws") as served:
        invalid, first = anyio.run(session, served.url)
    assert invalid.is_error is True and structured(invalid)["error"] == "invalid_arguments"
    assert structured(first)["replayed"] is False
    brief = tmp_path / "ws" / "files" / "briefs" / "a.md"
    inode = brief.stat().st_ino
    with serve_http(tmp_path / "ws") as served:  # a new server process, a new token
        _, again = anyio.run(session, served.url)
    assert structured(again)["ok"] is True and structured(again)["replayed"] is True
    assert brief.stat().st_ino == inode


def test_by_default_a_person_approves_through_the_cli_and_a_self_accepting_client_does_not(
    tmp_path: Path,
) -> None:
    seen: list[str] = []

    async def accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params.message)
        return types.ElicitResult(action="accept", content={})

    workspace = tmp_path / "ws"
    with serve_http(workspace) as served:
        asked = anyio.run(lambda: call_once(served.url, "send_message", MESSAGE,
                                            elicitation_callback=accept))
        assert structured(asked)["error"] == "approval_required" and seen == []
        assert outbox_lines(workspace / "files") == 0
        done = subprocess.run(
            [sys.executable, "-m", "agentkit", "approvals", "approve", structured(asked)["approval_id"],
             "--workspace", str(workspace)], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        settled = anyio.run(call_once, served.url, "send_message", MESSAGE)
    assert structured(settled)["ok"] is True and structured(settled)["replayed"] is True
    assert outbox_lines(workspace / "files") == 1


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_with_elicit_the_clients_user_approves_once(tmp_path: Path, mode: str) -> None:
    seen: list[str] = []

    async def accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params.message)
        return types.ElicitResult(action="accept", content={})

    workspace = tmp_path / "ws"
    with serve_http(workspace, "--approvals", "elicit") as served:
        sent, again = (anyio.run(lambda: call_once(served.url, "send_message", MESSAGE,
                                                   elicitation_callback=accept, mode=mode))
                       for _ in range(2))
    assert structured(sent)["ok"] is True and structured(again)["replayed"] is True
    assert len(seen) == 1 and "send_message" in seen[0]
    assert outbox_lines(workspace / "files") == 1


def test_hostile_requests_are_answered_and_run_nothing(tmp_path: Path) -> None:
    """Deep nesting, a number too long to read, a bidi name, 1 MB: an answer each, no write."""
    workspace = tmp_path / "ws"
    nested = "[" * 20_000 + '"q"' + "]" * 20_000
    with serve_http(workspace) as served, httpx2.Client(timeout=60) as http:
        opened = http.post(served.url, json=INITIALIZE, headers=ACCEPT)
        session = {"mcp-session-id": opened.headers["mcp-session-id"],
                   "mcp-protocol-version": "2025-11-25", **ACCEPT}
        http.post(served.url, headers=session,
                  json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        answers = []
        for number, arguments in enumerate([
            '{"to": ' + nested + ', "body": "x"}',
            '{"to": "Ada", "body": ' + "9" * 5_000 + "}",
            json.dumps({"to": "Ada\u202eeve", "body": "x" * 1_000_000}),
        ], start=2):
            body = (f'{{"jsonrpc": "2.0", "id": {number}, "method": "tools/call", "params": '
                    f'{{"name": "send_message", "arguments": {arguments}}}}}')
            answers.append(http.post(served.url, content=body.encode(), headers=session))
        unknown = http.post(served.url, headers=session, json={
            "jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "send\u202emessage", "arguments": {}}})
    for answer in answers[:2]:  # the SDK's parser cannot read it: a JSON-RPC parse error
        assert answer.status_code == 400 and answer.json()["error"]["code"] == -32700
    assert answers[2].status_code == 200 and '"error":"invalid_arguments"' in answers[2].text
    assert "Traceback" not in "".join(answer.text for answer in answers)
    assert '"code":-32602' in unknown.text.replace(" ", "")
    assert outbox_lines(workspace / "files") == 0
