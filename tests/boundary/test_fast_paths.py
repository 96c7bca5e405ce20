"""The shortcuts taken for speed (issue 13) keep the boundary's promises.

- ``DoneFlag`` behaves as the ``threading.Event`` it replaced, for every waiter;
- ``ainvoke_tool`` awaits a coroutine handler in the caller's own task (no thread hop), and
  cancelling the caller cancels the handler, frees its slot and propagates.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

from agentkit import ToolRegistry, ToolSpec, ainvoke_tool
from agentkit.boundary.attempt import DoneFlag

WAIT = 10.0


def test_done_flag_wakes_every_waiter_and_times_out_before_it_is_set() -> None:
    flag = DoneFlag()
    assert not flag.is_set() and flag.wait(0) is False and flag.wait(0.0) is False
    started = threading.Barrier(4)
    woke: list[bool] = []

    def waiter() -> None:
        started.wait(WAIT)
        woke.append(flag.wait(WAIT))

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for thread in threads:
        thread.start()
    started.wait(WAIT)
    flag.set()
    flag.set()  # a second set changes nothing
    for thread in threads:
        thread.join(WAIT)
    assert woke == [True, True, True]
    assert flag.is_set() and flag.wait() is True and flag.wait(0) is True


_CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="none")


def test_a_coroutine_handler_is_awaited_in_the_callers_own_task() -> None:
    seen: list[Any] = []

    async def where(query: str) -> str:
        seen.append((_CALLER.get(), asyncio.current_task(), threading.current_thread()))
        return query

    registry = ToolRegistry([ToolSpec("where", "Where it runs.", "read", 2.0, 1, 100, where)])

    async def go() -> tuple[dict[str, Any], Any]:
        _CALLER.set("the caller")
        return await ainvoke_tool(registry, "where", {"query": "q"}), asyncio.current_task()

    result, task = asyncio.run(go())
    assert result == {"ok": True, "data": "q"}
    assert seen == [("the caller", task, threading.current_thread())]


def test_cancelling_the_caller_cancels_the_handler_frees_its_slot_and_propagates() -> None:
    events: list[str] = []
    started: list[asyncio.Event] = []

    async def slow(query: str) -> str:
        if query == "second":
            return "second ran"
        started[0].set()
        try:
            await asyncio.sleep(WAIT)
        except asyncio.CancelledError:
            events.append("handler cancelled")
            raise
        return "never"

    spec = ToolSpec("slow", "One at a time.", "read", WAIT, 1, 100, slow, max_concurrency=1)
    registry = ToolRegistry([spec])

    async def go() -> dict[str, Any]:
        started.append(asyncio.Event())
        first = asyncio.ensure_future(ainvoke_tool(registry, "slow", {"query": "first"}))
        await started[0].wait()  # the handler holds the slot and waits
        first.cancel()
        try:
            await first
        except asyncio.CancelledError:
            events.append("caller saw CancelledError")
        return await ainvoke_tool(registry, "slow", {"query": "second"})  # the slot is free

    assert asyncio.run(go()) == {"ok": True, "data": "second ran"}
    assert events == ["handler cancelled", "caller saw CancelledError"]


def test_import_agentkit_does_not_import_asyncio() -> None:
    """asyncio (with ssl) is about a third of ``import agentkit``; sync programs never need it."""
    import subprocess
    import sys

    code = "import sys, agentkit; print('asyncio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
