"""``current_call().report_progress(progress, total=None, message=None)`` (issue 44, docs/design.md#mcp):
a handler's progress goes to the sink a face set for its call (the MCP server's, for a request
with a progressToken), from the handler's own worker thread; it is a no-op anywhere else and
never raises into the handler."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from agentkit import CallInfo, ToolRegistry, ToolRunner, ToolSpec, current_call, invoke_tool
from agentkit.boundary.call_info import progress_sink


def reporting_registry(calls: list[str], values: tuple[Any, ...] = (1, 2)) -> ToolRegistry:
    def work(job: str) -> str:
        calls.append(threading.current_thread().name)
        call = current_call()
        assert call is not None
        for value in values:
            assert call.report_progress(value, total=2, message=f"{job} {value}") is None
        return "done"

    return ToolRegistry([ToolSpec("work", "Work.", "read", 5.0, 1, 100, work)])


def test_without_a_sink_it_does_nothing_and_the_handler_runs() -> None:
    calls: list[str] = []
    assert invoke_tool(reporting_registry(calls), "work", {"job": "a"})["ok"] is True
    assert len(calls) == 1
    CallInfo("c", "t", "x", "read", None, 1).report_progress(5)  # outside any call: nothing


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_the_sink_the_caller_set_gets_the_handlers_progress_from_its_worker_thread(driver: str) -> None:
    calls: list[str] = []
    got: list[tuple[float, float | None, str | None, str]] = []

    def sink(progress: float, total: float | None, message: str | None) -> None:
        got.append((progress, total, message, threading.current_thread().name))

    runner = ToolRunner(reporting_registry(calls))
    token = progress_sink.set(sink)
    try:
        if driver == "sync":
            result = runner.call("work", {"job": "a"})
        else:
            result = asyncio.run(runner.acall("work", {"job": "a"}))
    finally:
        progress_sink.reset(token)
    assert result["ok"] is True and len(calls) == 1
    assert [(p, t, m) for p, t, m, _ in got] == [(1, 2, "a 1"), (2, 2, "a 2")]
    assert {thread for *_, thread in got} == {calls[0]}  # told on the handler's own thread
    assert progress_sink.get() is None


def test_a_failing_sink_never_fails_the_handler(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    def broken(progress: float, total: float | None, message: str | None) -> None:
        raise RuntimeError("the client went away")

    token = progress_sink.set(broken)
    try:
        with caplog.at_level(logging.WARNING, logger="agentkit"):
            result = invoke_tool(reporting_registry(calls), "work", {"job": "a"})
    finally:
        progress_sink.reset(token)
    assert result["ok"] is True and result["data"] == "done" and len(calls) == 1
    assert sum("a progress report failed" in r.getMessage() for r in caplog.records) == 2


def test_one_calls_sink_is_never_another_calls() -> None:
    """Two calls on two threads, each with its own sink, both in their handlers at once."""
    both_in = threading.Barrier(2, timeout=10)
    got: dict[str, list[str | None]] = {"a": [], "b": []}

    def work(job: str) -> str:
        both_in.wait()
        call = current_call()
        assert call is not None
        call.report_progress(1, message=job)
        return job

    registry = ToolRegistry([ToolSpec("work", "Work.", "read", 10.0, 1, 100, work)])

    def one(job: str) -> None:
        def sink(progress: float, total: float | None, message: str | None) -> None:
            got[job].append(message)

        progress_sink.set(sink)  # (this thread's own context)
        assert invoke_tool(registry, "work", {"job": job})["ok"] is True

    threads = [threading.Thread(target=one, args=(job,)) for job in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert got == {"a": ["a"], "b": ["b"]}
