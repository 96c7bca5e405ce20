"""A tool's pace (agentkit/boundary/pace.py, docs/design.md#async-path): a quick sync
handler's answer is waited for on the loop's own thread, for at most QUICK_WAIT_SECONDS; a
slower one gives the loop back and is awaited; every way out of that wait leaves the attempt
honest (one that never started never runs, one that started runs on and keeps its slot)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agentkit import ToolRegistry, ToolSpec, ainvoke_tool, invoke_tool
from agentkit.boundary import pace as paces
from agentkit.boundary import workers
from agentkit.boundary.attempt import Attempt, DoneFlag
from agentkit.boundary.invoke import aexecute
from agentkit.boundary.pace import Pace
from agentkit.boundary.registry import RegisteredTool

WAIT = 10.0  # an upper bound for events that come at once; never a sleep
FREE = "<Slot 1/1 free, 0 waiting>"


def quick_tool(calls: list[str], release: threading.Event | None = None,
               timeout: float = WAIT, started: threading.Event | None = None,
               threads: list[str] | None = None) -> ToolRegistry:
    def lookup(query: str) -> str:
        calls.append(query)
        if threads is not None:
            threads.append(threading.current_thread().name)
        if started is not None:
            started.set()
        if release is not None and query == "wait":
            assert release.wait(WAIT)
        return query

    return ToolRegistry([ToolSpec("find", "Find.", "read", timeout, 1, 100, lookup,
                                  max_concurrency=1)])


def entry_of(registry: ToolRegistry) -> RegisteredTool:
    entry = registry.entry("find")
    assert entry is not None
    return entry


def test_a_pace_learns_from_each_attempt_waited_for() -> None:
    pace = Pace()
    assert pace.quick and repr(pace) == "<Pace quick>"
    attempt = Attempt("find", "call-1")
    pace.note(attempt)  # never ran
    assert not pace.quick and repr(pace) == "<Pace slow>"
    attempt.started_at, attempt.finished_at = 10.0, 10.0 + paces.QUICK_SECONDS / 2
    pace.note(attempt)
    assert pace.quick
    attempt.finished_at = 10.0 + paces.QUICK_SECONDS * 2
    pace.note(attempt)
    assert not pace.quick
    attempt.finished_at = None  # the caller gave up before it returned
    pace.note(attempt)
    assert not pace.quick


def test_a_quick_sync_handler_answers_an_async_caller_without_a_turn_of_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A quick tool is waited for on the loop's thread: the answer comes back with no turn of
    the loop (a callback scheduled before the call has not run when it returns), from a
    worker thread, through the same slot. (The bound is raised here, so a loaded machine
    cannot make the call fall back to an await.)"""
    monkeypatch.setattr(paces, "QUICK_WAIT_SECONDS", WAIT)
    monkeypatch.setattr(paces, "QUICK_SECONDS", WAIT)
    calls: list[str] = []
    threads: list[str] = []
    registry = quick_tool(calls, threads=threads)
    entry = entry_of(registry)

    async def go() -> tuple[dict[str, Any], list[int]]:
        turned: list[int] = []
        asyncio.get_running_loop().call_soon(turned.append, 1)
        result = await ainvoke_tool(registry, "find", {"query": "q"})
        return result, list(turned)  # (asyncio.run turns the loop again as it closes)

    result, turned = asyncio.run(go())
    assert result == {"ok": True, "data": "q"} and turned == [] and calls == ["q"]
    assert threads and threads[0].startswith("agentkit-worker")
    assert entry.pace.quick
    result2, attempt = asyncio.run(aexecute(registry, entry, {"query": "r"}, "call-q"))
    assert result2 == {"ok": True, "data": "r"} and attempt.started and attempt.done.is_set()
    assert repr(entry.slot) == FREE


def test_a_sync_handler_slower_than_the_quick_wait_gives_the_loop_back() -> None:
    """The loop's thread waits at most QUICK_WAIT_SECONDS: a handler that needs the loop to
    run something else before it can return (here, a callback that releases it) is then
    awaited, and the tool is no longer quick, so the next call does not hold the loop."""
    release = threading.Event()
    calls: list[str] = []
    registry = quick_tool(calls, release)
    entry = entry_of(registry)

    async def go() -> dict[str, Any]:
        asyncio.get_running_loop().call_soon(release.set)
        return await ainvoke_tool(registry, "find", {"query": "wait"})

    assert entry.pace.quick
    assert asyncio.run(go()) == {"ok": True, "data": "wait"}
    assert calls == ["wait"] and not entry.pace.quick

    async def turns() -> list[int]:
        turned: list[int] = []
        asyncio.get_running_loop().call_soon(turned.append, 1)
        assert await ainvoke_tool(registry, "find", {"query": "q"}) == {"ok": True, "data": "q"}
        return list(turned)

    assert asyncio.run(turns()) == [1]  # awaited: the loop ran the callback meanwhile
    assert calls == ["wait", "q"] and repr(entry.slot) == FREE


def test_a_quick_tool_that_hangs_is_outcome_unknown_at_its_deadline_and_keeps_its_slot() -> None:
    release = threading.Event()
    calls: list[str] = []
    registry = quick_tool(calls, release, timeout=0.05)
    entry = entry_of(registry)
    try:
        result, attempt = asyncio.run(aexecute(registry, entry, {"query": "wait"}, "call-h"))
        assert result == {"ok": False, "error": "outcome_unknown", "retryable": True}
        assert attempt.started and attempt.running and calls == ["wait"]
        assert repr(entry.slot) == "<Slot 0/1 free, 0 waiting>"  # kept until it returns
        assert not entry.pace.quick
    finally:
        release.set()
    assert attempt.done.wait(WAIT)
    assert repr(entry.slot) == FREE  # released before the done flag is set
    assert calls == ["wait"]


def test_cancelling_a_caller_past_the_quick_wait_lets_the_started_handler_finish() -> None:
    release, started = threading.Event(), threading.Event()
    calls: list[str] = []
    registry = quick_tool(calls, release, started=started)
    entry = entry_of(registry)
    attempt = Attempt("find", "call-c")

    async def go() -> None:
        task = asyncio.ensure_future(aexecute(registry, entry, {"query": "wait"}, "call-c",
                                              attempt))
        while not started.is_set():  # the call's task waits at most QUICK_WAIT_SECONDS
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert calls == ["wait"] and attempt.running
    assert repr(entry.slot) == "<Slot 0/1 free, 0 waiting>"
    release.set()
    assert attempt.done.wait(WAIT) and attempt.value == {"ok": True, "data": "wait"}
    assert repr(entry.slot) == FREE
    assert invoke_tool(registry, "find", {"query": "again"}) == {"ok": True, "data": "again"}
    assert calls == ["wait", "again"]


def interrupt_the_quick_wait(monkeypatch: pytest.MonkeyPatch,
                             before: Callable[[], None]) -> None:
    """The loop's thread is interrupted (KeyboardInterrupt, as Ctrl-C raises it) while it
    waits for a quick tool's answer, once ``before()`` has returned."""
    original = DoneFlag.wait
    loop_thread = threading.get_ident()

    def wait(self: DoneFlag, timeout: float | None = None) -> bool:
        if threading.get_ident() == loop_thread and timeout is not None \
                and timeout <= paces.QUICK_WAIT_SECONDS:
            before()
            raise KeyboardInterrupt
        return original(self, timeout)

    monkeypatch.setattr(DoneFlag, "wait", wait)


def test_an_interrupt_in_the_quick_wait_before_the_handler_started_means_it_never_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    registry = quick_tool(calls)
    entry = entry_of(registry)
    held: list[Callable[[], None]] = []

    class Held:  # the pool, holding the task back: the handler has not started yet
        def submit(self, task: Callable[[], None]) -> None:
            held.append(task)

    monkeypatch.setattr(workers, "POOL", Held())
    interrupt_the_quick_wait(monkeypatch, lambda: None)
    attempt = Attempt("find", "call-i")
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(aexecute(registry, entry, {"query": "q"}, "call-i", attempt))
    assert attempt.cancelled and not attempt.started
    assert repr(entry.slot) == FREE
    monkeypatch.undo()
    (task,) = held
    task()  # the worker comes to it after all: it must not run
    assert calls == [] and not attempt.started
    assert invoke_tool(registry, "find", {"query": "after"}) == {"ok": True, "data": "after"}
    assert calls == ["after"]


def test_an_interrupt_in_the_quick_wait_after_the_handler_started_lets_it_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release, started = threading.Event(), threading.Event()
    calls: list[str] = []
    registry = quick_tool(calls, release, started=started)
    entry = entry_of(registry)
    interrupt_the_quick_wait(monkeypatch, lambda: started.wait(WAIT) and None)
    attempt = Attempt("find", "call-j")
    try:
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(aexecute(registry, entry, {"query": "wait"}, "call-j", attempt))
        assert attempt.running and not attempt.cancelled
        assert repr(entry.slot) == "<Slot 0/1 free, 0 waiting>"  # held while it runs
    finally:
        release.set()
    assert attempt.done.wait(WAIT) and attempt.value == {"ok": True, "data": "wait"}
    assert calls == ["wait"] and repr(entry.slot) == FREE
