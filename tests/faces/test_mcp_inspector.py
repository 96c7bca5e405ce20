"""Interop beyond the Python SDK: the MCP Inspector's CLI mode (Node, from npm) lists the tools
of ``python -m agentkit serve-mcp`` and calls them (issue 12), over stdio and over streamable
HTTP with the URL the server prints (issue 44).

Marked ``interop`` and run by ``make test-interop`` (and so by ``.ci/run``). Locally it skips
when ``npx`` is missing or npm cannot fetch the Inspector; under CI (``CI`` set) those are
failures, never skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.interop

#: Pinned, so a new Inspector release cannot change what this test means.
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
NETWORK_TROUBLE = ("ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "ECONNREFUSED", "ECONNRESET", "E404",
                   "ENETUNREACH", "network")


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the MCP Inspector must run in CI: {reason}")
    pytest.skip(reason)


def inspector(workspace: Path, *method: str, url: str | None = None) -> dict[str, Any]:
    npx = shutil.which("npx")
    if npx is None:
        unavailable("npx is not installed (Debian: apt-get install nodejs npm)")
    server = ([url, "--transport", "http"] if url is not None else
              [sys.executable, "-m", "agentkit", "serve-mcp", "--workspace", str(workspace)])
    command = [npx, "-y", INSPECTOR, "--cli", *server, *method]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        unavailable("the Inspector did not answer within 300 s (first run downloads it)")
    if done.returncode != 0 and any(word in done.stderr for word in NETWORK_TROUBLE):
        unavailable(f"npm could not fetch {INSPECTOR}: {done.stderr[-300:]}")
    # Exit status 5: the tool result has isError true (the Inspector still prints it).
    is_error_result = done.returncode == 5 and "tool_is_error" in done.stderr
    assert done.returncode == 0 or is_error_result, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_inspector_lists_the_tools_with_their_annotations(tmp_path: Path) -> None:
    listed = inspector(tmp_path, "--method", "tools/list")
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert set(tools) == {"search_local_sources", "get_document", "save_brief", "send_message"}
    assert tools["search_local_sources"]["annotations"]["readOnlyHint"] is True
    assert tools["send_message"]["annotations"]["destructiveHint"] is True
    assert tools["search_local_sources"]["inputSchema"]["required"] == ["query"]


def test_the_inspector_calls_a_read_and_is_refused_an_unapproved_write(tmp_path: Path) -> None:
    read = inspector(tmp_path, "--method", "tools/call", "--tool-name", "search_local_sources",
                     "--tool-arg", "query=timeout", "--tool-arg", "limit=2")
    assert read["structuredContent"]["ok"] is True
    assert read["content"][0]["text"] == read["structuredContent"]["data"]
    assert len(json.loads(read["structuredContent"]["data"])) == 2

    write = inspector(tmp_path, "--method", "tools/call", "--tool-name", "send_message",
                      "--tool-arg", "to=Ada", "--tool-arg", "body=hello")
    assert write["isError"] is True
    assert write["structuredContent"]["error"] == "approval_required"
    assert not (tmp_path / "files" / "outbox.jsonl").exists()


def test_the_inspector_connects_over_http_with_the_printed_url(tmp_path: Path) -> None:
    from _http_serve import serve_http

    with serve_http(tmp_path / "ws") as served:
        listed = inspector(tmp_path, "--method", "tools/list", url=served.url)
        read = inspector(tmp_path, "--method", "tools/call", "--tool-name", "search_local_sources",
                         "--tool-arg", "query=timeout", url=served.url)
    assert {tool["name"] for tool in listed["tools"]} >= {"search_local_sources", "send_message"}
    assert read["structuredContent"]["ok"] is True
