"""A coroutine handler's first step runs before any timer is set (docs/design.md#async-path):
one that returns without giving the loop a turn needs no deadline (nothing could fire it),
and one that suspends is awaited on under the same deadline, the futures it awaits, the values
they bring and the exceptions they raise passing through to it exactly as ``await`` would."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from agentkit import ToolRegistry, ToolSpec, ainvoke_tool, invoke_tool


def test_a_handler_that_never_suspends_returns_its_value_with_no_timer() -> None:
    calls: list[str] = []

    async def look(query: str) -> list[str]:
        calls.append(query)
        return [query] * 2

    registry = ToolRegistry([ToolSpec("look", "Look.", "read", 2.0, 1, 100, look)])

    async def go() -> tuple[dict[str, Any], int]:
        loop = asyncio.get_running_loop()
        timers = len(loop._scheduled)  # type: ignore[attr-defined]
        result = await ainvoke_tool(registry, "look", {"query": "q"})
        return result, len(loop._scheduled) - timers  # type: ignore[attr-defined]

    assert asyncio.run(go()) == ({"ok": True, "data": '["q", "q"]'}, 0)
    assert calls == ["q"]


def test_values_and_exceptions_reach_a_suspended_handler_as_await_would_bring_them() -> None:
    calls: list[str] = []

    async def relay(query: str) -> dict[str, Any]:
        calls.append(query)
        loop = asyncio.get_running_loop()
        first: asyncio.Future[int] = loop.create_future()
        loop.call_soon(first.set_result, 5)
        got = await first
        await asyncio.sleep(0)  # a bare yield
        second: asyncio.Future[int] = loop.create_future()
        loop.call_soon(second.set_exception, ValueError("no"))
        try:
            await second
        except ValueError as exc:
            caught = str(exc)
        return {"got": got, "caught": caught}

    registry = ToolRegistry([ToolSpec("relay", "Relay.", "read", 2.0, 1, 100, relay)])
    expected = {"ok": True, "data": '{"got": 5, "caught": "no"}'}
    assert invoke_tool(registry, "relay", {"query": "s"}) == expected
    assert asyncio.run(ainvoke_tool(registry, "relay", {"query": "a"})) == expected
    assert calls == ["s", "a"]


def test_a_handler_that_cancels_itself_after_suspending_is_outcome_unknown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    async def gives_up(ref: str) -> str:
        calls.append(ref)
        await asyncio.sleep(0)
        raise asyncio.CancelledError  # nobody cancelled the caller

    registry = ToolRegistry([ToolSpec("w", "Write.", "reversible_write", 2.0, 1, 100, gives_up)])

    async def go() -> tuple[dict[str, Any], bool]:
        result = await ainvoke_tool(registry, "w", {"ref": "a"})
        task = asyncio.current_task()
        assert task is not None
        return result, task.cancelled()

    with caplog.at_level(logging.WARNING, logger="agentkit"):
        assert asyncio.run(go()) == ({"ok": False, "error": "outcome_unknown", "retryable": False}, False)
    assert calls == ["a"]
    assert sum("raised CancelledError" in r.getMessage() for r in caplog.records) == 1


def test_a_suspended_handler_past_its_deadline_is_cancelled_there() -> None:
    calls: list[str] = []
    cancelled: list[str] = []

    async def waits(query: str) -> str:
        calls.append(query)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(query)
            raise
        return "never"

    registry = ToolRegistry([ToolSpec("wait", "Wait.", "read", 0.01, 1, 100, waits)])
    result = asyncio.run(ainvoke_tool(registry, "wait", {"query": "q"}))
    assert result == {"ok": False, "error": "outcome_unknown", "retryable": True}
    assert calls == cancelled == ["q"]
