"""The MCP server's logging and progress (issue 44, docs/design.md#mcp), with the official client in
memory: what is logged inside a call (the kit's own lines, the handler's through Python
``logging``) reaches that call's client at or above its session's level, and a call's progress
(the kit's steps, the handler's ``current_call().report_progress``) reaches it increasing,
all before the call's result, and never another session's.

The same over HTTP, in a real server process: tests/faces/test_mcp_http.py.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp")

from mcp import Client, types
from test_mcp import World  # tests/ is on sys.path (pytest rootdir-relative import)

from agentkit import ToolRegistry, ToolRunner, ToolSpec, current_call
from agentkit.demo import faults
from agentkit.demo.tools import make_demo_registry, outbox_lines
from agentkit.faces.mcp import make_server

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

MESSAGE = {"to": "Ada", "body": "The brief is ready."}
tool_log = logging.getLogger("tests.mcp_notifications.tool")


@pytest.fixture(autouse=True)
def let_the_tools_log_everything() -> Any:
    before = tool_log.level
    tool_log.setLevel(logging.DEBUG)  # (the client's level decides what it gets)
    yield
    tool_log.setLevel(before)


class Heard:
    """What one client was told: log lines and progress, in order, and when the result came."""

    def __init__(self) -> None:
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.progress: list[tuple[float, float | None, str | None]] = []

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, total, message))

    def texts(self, logger: str | None = None) -> list[str]:
        return [str(p.data) for p in self.logs if logger is None or p.logger == logger]


def call(server: Any, heard: Heard, name: str, arguments: dict[str, Any], *,
         level: str | None = None, **options: Any) -> types.CallToolResult:
    async def go() -> types.CallToolResult:
        async with Client(server, mode="legacy", logging_callback=heard.on_log, **options) as client:
            if level is not None:
                await client.set_logging_level(level)  # type: ignore[arg-type]
            return await client.call_tool(name, arguments, progress_callback=heard.on_progress)

    result: types.CallToolResult = anyio.run(go)
    return result


# --------------------------------------------------------------------------- the kit's own steps


def test_a_retry_is_told_as_it_happens(tmp_path: Path) -> None:
    demo = World(tmp_path, wrap={"search_local_sources": lambda fn: faults.fail_times(fn, 2)},
                 approvals="cli")
    heard = Heard()
    result = call(demo.server, heard, "search_local_sources", {"query": "retry"})
    assert result.structured_content is not None and result.structured_content["attempts"] == 3
    assert demo.calls("search_local_sources") == 3
    kit = heard.texts("agentkit.mcp")
    assert "search_local_sources: retrying, attempt 2 of 3" in kit
    assert "search_local_sources: retrying, attempt 3 of 3" in kit
    assert any(t.startswith("search_local_sources: attempt 1 of 3 failed") for t in kit)
    assert [m for _, _, m in heard.progress] == ["search_local_sources: attempt 2 of 3",
                                                "search_local_sources: attempt 3 of 3"]
    values = [p for p, _, _ in heard.progress]
    assert values == sorted(values) and len(set(values)) == len(values)


def test_a_status_lookup_asked_is_told(tmp_path: Path) -> None:
    """The write lands, its answer is lost: the lookup is asked, and the client told."""
    demo = World(tmp_path, wrap={"save_brief": lambda fn: faults.fail_times(fn, 1, after_call=True)},
                 approvals="cli")
    heard = Heard()
    arguments = {"path": "briefs/a.md", "content": "# Brief\n"}
    spec = demo.runner.registry.get("save_brief")
    assert spec is not None and spec.parameters is not None
    if "task_id" in spec.parameters["properties"]:
        arguments["task_id"] = "t-1"
    result = call(demo.server, heard, "save_brief", arguments)
    assert result.structured_content is not None and result.structured_content["ok"] is True
    assert demo.calls("save_brief") == 1  # the lookup settled it: no second write
    kit = heard.texts("agentkit.mcp")
    assert "save_brief: asking the status lookup whether the write landed" in kit
    assert "save_brief: the status lookup answered done" in kit
    assert [m for _, _, m in heard.progress] == ["save_brief: asking the status lookup"]


def test_an_approval_asked_is_told_and_the_person_is_waited_for(tmp_path: Path) -> None:
    demo = World(tmp_path, approvals="cli")
    heard = Heard()
    result = call(demo.server, heard, "send_message", MESSAGE)
    assert result.structured_content is not None
    approval_id = result.structured_content["approval_id"]
    assert f"send_message: waiting for a person to approve it (approval {approval_id})" in \
        heard.texts("agentkit.mcp")
    assert heard.progress == [(1.0, None, f"send_message: waiting for a person (approval {approval_id})")]
    assert demo.calls("send_message") == 0


def test_with_elicitation_the_waiting_is_told_before_the_question(tmp_path: Path) -> None:
    demo = World(tmp_path)
    heard = Heard()
    told_before: list[int] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        told_before.append(len(heard.progress))
        return types.ElicitResult(action="accept", content={})

    result = call(demo.server, heard, "send_message", MESSAGE, elicitation_callback=elicit)
    assert result.structured_content is not None and result.structured_content["ok"] is True
    assert told_before == [1]  # "waiting for a person" came before the elicitation
    assert demo.calls("send_message") == 1 and outbox_lines(tmp_path / "files") == 1


# --------------------------------------------------------------------------- the handler's own


def logging_server(released: threading.Event | None = None,
                   both_in: threading.Barrier | None = None) -> tuple[Any, list[str]]:
    """A server of one read that logs at every level and reports progress, its calls counted."""
    calls: list[str] = []

    def work(job: str, lines: int = 1) -> str:
        calls.append(job)
        if both_in is not None:
            both_in.wait()
        current = current_call()
        assert current is not None
        for number in range(lines):
            tool_log.debug("%s debug %d", job, number)
            tool_log.info("%s info %d", job, number)
            tool_log.warning("%s warning %d", job, number)
        for value in (10, 5, 10, 20):  # 5 and the second 10 do not increase: dropped
            current.report_progress(value, total=20, message=f"{job} {value}")
        tool_log.error("%s error with a secret traceback", job, exc_info=ValueError("sk-1"))
        return job

    registry = ToolRegistry([ToolSpec("work", "Work.", "read", 20.0, 1, 100, work)])
    return make_server(ToolRunner(registry)), calls


@pytest.mark.parametrize(("level", "kinds"), [
    (None, ["info", "warning", "error"]),  # the default: info
    ("debug", ["debug", "info", "warning", "error"]),
    ("warning", ["warning", "error"]),
    ("critical", []),
])
def test_the_handlers_lines_reach_its_client_at_or_above_the_sessions_level(
    level: str | None, kinds: list[str],
) -> None:
    server, calls = logging_server()
    heard = Heard()
    result = call(server, heard, "work", {"job": "a"}, level=level)
    assert result.is_error is False and calls == ["a"]
    mine = [p for p in heard.logs if p.logger == tool_log.name]
    assert [p.level for p in mine] == kinds
    if "error" in kinds:
        assert mine[-1].data == "a error with a secret traceback"  # the message, no traceback
    assert "sk-1" not in repr(heard.logs)
    assert heard.progress == [(10.0, 20.0, "a 10"), (20.0, 20.0, "a 20")]


def test_every_line_and_progress_reaches_the_client_before_the_result() -> None:
    server, calls = logging_server()
    heard = Heard()
    result = call(server, heard, "work", {"job": "a", "lines": 200}, level="debug")
    assert result.is_error is False and calls == ["a"]
    mine = heard.texts(tool_log.name)
    assert len(mine) == 601  # 200 x 3 levels, then the error line: all of them, in order
    assert mine[:3] == ["a debug 0", "a info 0", "a warning 0"] and mine[-2] == "a warning 199"
    assert [p for p, _, _ in heard.progress] == [10.0, 20.0]


def test_one_sessions_lines_and_progress_never_reach_another() -> None:
    """Two sessions, each with a call in its handler at the same time (a barrier), on one
    server: each client hears its own call only."""
    server, calls = logging_server(both_in=threading.Barrier(2, timeout=10))
    heard = {"a": Heard(), "b": Heard()}
    levels = {"a": "debug", "b": "warning"}

    async def session(job: str) -> None:
        async with Client(server, mode="legacy", logging_callback=heard[job].on_log) as client:
            await client.set_logging_level(levels[job])  # type: ignore[arg-type]
            result = await client.call_tool("work", {"job": job},
                                            progress_callback=heard[job].on_progress)
            assert result.is_error is False

    async def both() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(session, "a")
            group.start_soon(session, "b")

    anyio.run(both)
    assert sorted(calls) == ["a", "b"]
    assert heard["a"].texts(tool_log.name) == [
        "a debug 0", "a info 0", "a warning 0", "a error with a secret traceback"]
    assert heard["b"].texts(tool_log.name) == ["b warning 0", "b error with a secret traceback"]
    for job in ("a", "b"):
        assert heard[job].progress == [(10.0, 20.0, f"{job} 10"), (20.0, 20.0, f"{job} 20")]


def test_lines_logged_outside_any_call_reach_no_client() -> None:
    server, calls = logging_server()
    heard = Heard()

    async def go() -> None:
        async with Client(server, mode="legacy", logging_callback=heard.on_log) as client:
            await client.set_logging_level("debug")
            await client.list_tools()
            tool_log.warning("nobody's call")  # the test's own task, in no call
            thread = threading.Thread(target=tool_log.warning, args=("nobody's thread",))
            thread.start()
            thread.join()
            await client.call_tool("work", {"job": "a"})

    anyio.run(go)
    assert calls == ["a"]
    assert not any("nobody's" in text for text in heard.texts())


def test_a_request_names_its_own_level_on_the_2026_protocol() -> None:
    """2026-07-28 has no logging/setLevel: a request asks for its lines in its _meta."""
    server, calls = logging_server()
    heard = {"asked": Heard(), "silent": Heard()}

    async def go(which: str, meta: dict[str, Any] | None) -> str:
        async with Client(server, logging_callback=heard[which].on_log) as client:
            await client.call_tool("work", {"job": which}, meta=meta)  # type: ignore[arg-type]
            return client.protocol_version

    assert anyio.run(go, "asked", {"io.modelcontextprotocol/logLevel": "warning"}) == "2026-07-28"
    anyio.run(go, "silent", None)
    assert sorted(calls) == ["asked", "silent"]
    assert heard["asked"].texts(tool_log.name) == ["asked warning 0",
                                                   "asked error with a secret traceback"]
    assert heard["silent"].logs == []


def test_a_runner_for_a_task_tells_its_steps_once(tmp_path: Path) -> None:
    """A runner_for that shares the server runner's observers (runner.for_task) is told once."""
    registry = make_demo_registry(tmp_path / "files",
                                  wrap=lambda name, fn: faults.fail_times(fn, 1)
                                  if name == "search_local_sources" else fn)
    base = ToolRunner(registry, sleep=lambda seconds: None)
    server = make_server(base, runner_for=base.for_task)
    heard = Heard()

    async def go() -> None:
        async with Client(server, mode="legacy", logging_callback=heard.on_log) as client:
            await client.session.call_tool(
                "search_local_sources", {"query": "retry"}, meta={"agentkit/task_id": "conv-2"},
                progress_callback=heard.on_progress)

    anyio.run(go)
    assert heard.texts("agentkit.mcp").count("search_local_sources: retrying, attempt 2 of 3") == 1
    assert len(heard.progress) == 1
    assert dataclasses.replace(base.context, task_id="conv-2") == base.for_task("conv-2").context


@pytest.mark.parametrize("released", ["during the session", "after the loop closed"])
def test_a_handler_that_outlives_its_call_is_heard_no_more(released: str) -> None:
    """A read that times out runs on; what it logs and reports after its call ended goes
    nowhere (not to the next call, not as an error), even once the server's loop is gone."""
    go_on, finished = threading.Event(), threading.Event()
    raised: list[BaseException] = []

    def slow(job: str) -> str:
        if job == "slow":
            go_on.wait(timeout=20)
            try:
                current = current_call()
                assert current is not None
                tool_log.warning("late line")
                current.report_progress(99, message="late")
            except BaseException as exc:  # the test fails on any
                raised.append(exc)
            finally:
                finished.set()
        return job

    registry = ToolRegistry([ToolSpec("slow", "Slow.", "read", 0.2, 1, 100, slow)])
    server = make_server(ToolRunner(registry, sleep=lambda seconds: None))
    heard = Heard()

    async def go() -> list[types.CallToolResult]:
        async with Client(server, mode="legacy", logging_callback=heard.on_log) as client:
            first = await client.call_tool("slow", {"job": "slow"},
                                           progress_callback=heard.on_progress)
            if released == "during the session":
                go_on.set()
                await anyio.to_thread.run_sync(finished.wait, 20)
            return [first, await client.call_tool("slow", {"job": "next"},
                                                  progress_callback=heard.on_progress)]

    timed_out, after = anyio.run(go)
    go_on.set()
    assert finished.wait(20) and raised == []
    assert timed_out.is_error is True  # the caller stopped waiting; the handler ran on
    assert after.structured_content is not None and after.structured_content["data"] == "next"
    assert "late line" not in heard.texts() and heard.progress == []


def test_progress_that_is_not_a_number_is_dropped_and_a_message_is_made_safe() -> None:
    def odd(job: str) -> str:
        current = current_call()
        assert current is not None
        for value in (True, float("nan"), float("inf"), "50", None, [1]):
            current.report_progress(value, total=10)  # type: ignore[arg-type]
        current.report_progress(5, total="ten", message="pay\u202eeve " * 500)  # type: ignore[arg-type]
        return job

    registry = ToolRegistry([ToolSpec("odd", "Odd progress.", "read", 5.0, 1, 100, odd)])
    heard = Heard()
    result = call(make_server(ToolRunner(registry)), heard, "odd", {"job": "a"})
    assert result.is_error is False
    [(progress, total, message)] = heard.progress
    assert (progress, total) == (5.0, None)
    assert message is not None and len(message) == 1000 and "\u202e" not in message
    assert message.startswith("pay\\u202eeve ")
