"""The async boundary (docs/design.md#async-path): ``aexecute`` and ``arun_limited``, the
async twins of ``execute`` and ``run_limited`` that the runner's async driver uses.

- a coroutine handler runs on the caller's loop, with no thread hand-off and no thread held
  while it awaits; a sync handler goes to a worker and back;
- the result dict and the :class:`Attempt` are those of the sync path (started, running,
  done callbacks, ``mark_landed``), and one concurrency slot serves both kinds of caller;
- a handler that raises ``CancelledError`` by itself is ``outcome_unknown`` on both paths,
  while the caller's own cancellation propagates;
- rendering a large value never stalls the loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from agentkit import ToolRegistry, ToolSpec, ainvoke_tool, invoke_tool
from agentkit.boundary.attempt import Attempt, mark_landed
from agentkit.boundary.concurrency import arun_limited, run_limited
from agentkit.boundary.invoke import (
    RENDER_ON_LOOP_MAX_CHARS,
    aexecute,
    execute,
    renderer,
    renders_large,
)
from agentkit.boundary.registry import RegisteredTool
from agentkit.boundary.slot import Slot
from agentkit.boundary.workers import POOL

WAIT = 10.0  # an upper bound for events that come at once; never a sleep


def entry_of(registry: ToolRegistry, name: str) -> RegisteredTool:
    entry = registry.entry(name)
    assert entry is not None
    return entry


# --------------------------------------------------------------------------- aexecute


def test_aexecute_runs_a_coroutine_handler_on_the_callers_loop_with_no_thread() -> None:
    seen: list[tuple[asyncio.AbstractEventLoop, str]] = []

    async def save(ref: str) -> dict[str, Any]:
        seen.append((asyncio.get_running_loop(), threading.current_thread().name))
        mark_landed()
        await asyncio.sleep(0)
        return {"ref": ref, "saved": True}

    registry = ToolRegistry([ToolSpec("save", "Save.", "reversible_write", 2.0, 1, 100, save)])
    entry = entry_of(registry, "save")
    sync_result, sync_attempt = execute(registry, entry, {"ref": "r1"}, "call-s")

    async def go() -> tuple[dict[str, Any], Attempt, asyncio.AbstractEventLoop, int]:
        started = POOL.threads_started
        result, attempt = await aexecute(registry, entry, {"ref": "r1"}, "call-a")
        return result, attempt, asyncio.get_running_loop(), POOL.threads_started - started

    result, attempt, loop, new_threads = asyncio.run(go())
    assert result == sync_result == {"ok": True, "data": '{"ref": "r1", "saved": true}'}
    assert seen[1] == (loop, threading.main_thread().name) and new_threads == 0
    for one in (sync_attempt, attempt):
        assert one.started and one.done.is_set() and not one.running and not one.timed_out
        assert one.started_at is not None and one.landed_at is not None and one.finished_at is not None
        assert one.started_at <= one.landed_at <= one.finished_at
    assert attempt.call_id == "call-a" and attempt.tool == "save"
    called: list[str] = []
    attempt.add_done_callback(lambda: called.append("now"))  # already done: runs at once
    assert called == ["now"]


def test_aexecute_runs_a_sync_handler_on_a_worker_and_matches_execute() -> None:
    threads: list[str] = []

    def lookup(query: str) -> str:
        threads.append(threading.current_thread().name)
        return f"found {query}"

    registry = ToolRegistry([ToolSpec("find", "Find.", "read", 2.0, 1, 100, lookup)])
    entry = entry_of(registry, "find")
    expected, _ = execute(registry, entry, {"query": "q"}, "call-s")
    result, attempt = asyncio.run(aexecute(registry, entry, {"query": "q"}, "call-a"))
    assert result == expected == {"ok": True, "data": "found q"}
    assert attempt.started and attempt.done.is_set()
    assert len(threads) == 2 and all(name.startswith("agentkit-worker") for name in threads)


def test_ainvoke_tool_checks_on_the_loop_and_makes_one_hop_for_a_sync_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    where: dict[str, list[str]] = {"policy": [], "handler": []}
    submitted: list[object] = []

    def policy(spec: Any, arguments: Any, context: Any) -> None:
        where["policy"].append(threading.current_thread().name)

    def lookup(query: str) -> str:
        where["handler"].append(threading.current_thread().name)
        return query

    registry = ToolRegistry([ToolSpec("find", "Find.", "read", 2.0, 1, 100, lookup)], policies=[policy])
    submit = POOL.submit

    def counting(task: Any) -> None:
        submitted.append(task)
        submit(task)

    monkeypatch.setattr(POOL, "submit", counting)
    assert asyncio.run(ainvoke_tool(registry, "find", {"query": "q"})) == {"ok": True, "data": "q"}
    assert where["policy"] == [threading.main_thread().name]  # the checks ran on the loop
    assert len(where["handler"]) == 1 and where["handler"][0].startswith("agentkit-worker")
    assert len(submitted) == 1  # one hand-off to a worker (and one back)


@pytest.mark.parametrize("kind", ["coroutine", "sync"])
def test_aexecute_reports_a_handler_still_running_at_its_deadline(kind: str) -> None:
    release = threading.Event()
    calls: list[str] = []

    async def hangs_async(ref: str) -> str:
        calls.append(ref)
        await asyncio.Event().wait()  # only the deadline ends it
        return "never"

    def hangs_sync(ref: str) -> str:
        calls.append(ref)
        release.wait(WAIT)
        return "late"

    handler = hangs_async if kind == "coroutine" else hangs_sync
    registry = ToolRegistry([ToolSpec("w", "Write.", "reversible_write", 0.05, 1, 100, handler)])
    try:
        result, attempt = asyncio.run(aexecute(registry, entry_of(registry, "w"), {"ref": "a"}, "c"))
        assert result == {"ok": False, "error": "outcome_unknown", "retryable": False}
        assert attempt.started and calls == ["a"]
        if kind == "sync":
            assert attempt.running  # the caller gave up; the handler goes on
    finally:
        release.set()
    assert attempt.done.wait(WAIT) and not attempt.running


def test_arun_limited_runs_a_status_lookup_like_run_limited() -> None:
    """The twin the runner's async driver uses for status lookups: same statuses, same
    ``finish``, a coroutine lookup on the loop and a sync one on a worker."""
    ledger = {"d-1": "text"}

    async def async_lookup(draft_id: str) -> dict[str, Any] | None:
        await asyncio.sleep(0)
        return {"draft_id": draft_id} if draft_id in ledger else None

    def sync_lookup(draft_id: str) -> dict[str, Any] | None:
        return {"draft_id": draft_id} if draft_id in ledger else None

    registry = ToolRegistry([ToolSpec("s", "S.", "reversible_write", 2.0, 1, 100, sync_lookup)])
    render = renderer(registry, entry_of(registry, "s").spec, "c")

    def finish(value: Any) -> Any:
        return None if value is None else render(value)

    def sync(lookup: Any, draft_id: str) -> tuple[str, Any]:
        probe = Attempt("s", "c")
        status = run_limited(lookup, {"draft_id": draft_id}, attempt=probe, timeout=2.0, slot=None,
                             finish=finish)
        return status, probe.value

    async def asynchronous(lookup: Any, draft_id: str) -> tuple[str, Any]:
        probe = Attempt("s", "c")
        status = await arun_limited(lookup, {"draft_id": draft_id}, attempt=probe, timeout=2.0,
                                    slot=None, finish=finish)
        return status, probe.value

    for lookup in (async_lookup, sync_lookup):
        for draft_id in ("d-1", "d-2"):
            assert asyncio.run(asynchronous(lookup, draft_id)) == sync(lookup, draft_id)
    assert sync(sync_lookup, "d-1") == ("finished", {"ok": True, "data": '{"draft_id": "d-1"}'})
    assert sync(sync_lookup, "d-2") == ("finished", None)


# --------------------------------------------------------------------------- one slot


def test_an_async_caller_waits_for_a_slot_held_by_a_sync_caller_without_a_thread() -> None:
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def blocking(query: str) -> str:
        calls.append(query)
        if query == "sync":
            entered.set()
            release.wait(WAIT)
        return query

    spec = ToolSpec("one", "One at a time.", "read", WAIT, 1, 100, blocking, max_concurrency=1)
    registry = ToolRegistry([spec])
    slot = entry_of(registry, "one").slot
    assert isinstance(slot, Slot)
    holder: list[dict[str, Any]] = []
    thread = threading.Thread(target=lambda: holder.append(invoke_tool(registry, "one", {"query": "sync"})))
    thread.start()
    assert entered.wait(WAIT)

    async def go() -> dict[str, Any]:
        waiting = asyncio.ensure_future(ainvoke_tool(registry, "one", {"query": "async"}))
        while "1 waiting" not in repr(slot):  # the task is queued on the slot, holding no thread
            await asyncio.sleep(0)
        assert calls == ["sync"]
        release.set()  # the sync handler returns and hands its slot to the waiting task
        return await waiting

    try:
        assert asyncio.run(go()) == {"ok": True, "data": "async"}
    finally:
        release.set()
        thread.join(WAIT)
    assert holder == [{"ok": True, "data": "sync"}]
    assert calls == ["sync", "async"]
    assert slot.acquire(blocking=False)  # everything was given back
    slot.release()


def test_a_slot_handed_to_a_cancelled_waiter_is_given_back() -> None:
    slot = Slot(1)
    assert slot.acquire(blocking=False)

    async def go() -> None:
        waiter = asyncio.ensure_future(slot.aacquire(WAIT))
        while "1 waiting" not in repr(slot):
            await asyncio.sleep(0)
        slot.release()  # handed to the waiter...
        waiter.cancel()  # ...which is cancelled before it could run
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(go())
    assert slot.acquire(blocking=False)  # not lost
    slot.release()
    with pytest.raises(ValueError, match="too many"):
        slot.release()


def test_a_slot_waiter_that_times_out_is_busy_and_leaves_the_queue() -> None:
    slot = Slot(1)
    assert slot.acquire(blocking=False)
    assert asyncio.run(slot.aacquire(0.01)) is False
    assert slot.acquire(timeout=0.01) is False
    assert "0 waiting" in repr(slot)
    slot.release()
    assert slot.acquire(timeout=0)


# --------------------------------------------------------------------------- CancelledError


def test_a_handler_that_cancels_itself_is_outcome_unknown_on_both_paths(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    async def gives_up(ref: str) -> str:
        calls.append(ref)
        raise asyncio.CancelledError  # nobody cancelled the caller

    registry = ToolRegistry([ToolSpec("w", "Write.", "reversible_write", 2.0, 1, 100, gives_up)])
    expected = {"ok": False, "error": "outcome_unknown", "retryable": False}
    with caplog.at_level(logging.WARNING, logger="agentkit"):
        assert invoke_tool(registry, "w", {"ref": "sync"}) == expected

        async def go() -> tuple[dict[str, Any], bool]:
            result = await ainvoke_tool(registry, "w", {"ref": "async"})
            task = asyncio.current_task()
            assert task is not None
            return result, task.cancelled()

        assert asyncio.run(go()) == (expected, False)  # returned, and the caller goes on
    assert calls == ["sync", "async"]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("raised CancelledError" in m for m in messages) == 2
    assert not any("no answer within" in m for m in messages)


def test_only_the_callers_own_cancellation_propagates() -> None:
    calls: list[str] = []
    cancelled: list[str] = []

    async def waits(ref: str) -> str:
        calls.append(ref)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(ref)
            raise
        return "never"

    registry = ToolRegistry([ToolSpec("w", "Write.", "reversible_write", WAIT, 1, 100, waits,
                                      max_concurrency=1)])
    entry = entry_of(registry, "w")
    attempt = Attempt("w", "c")

    async def go() -> None:
        task = asyncio.ensure_future(arun_limited(waits, {"ref": "a"}, attempt=attempt,
                                                  timeout=WAIT, slot=entry.slot))
        while not calls:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert calls == cancelled == ["a"]
    assert attempt.started and attempt.timed_out and attempt.done.is_set()  # a write may have landed
    assert entry.slot is not None and entry.slot.acquire(blocking=False)  # its slot came back


# --------------------------------------------------------------------------- rendering off the loop


def test_renders_large_reads_the_size_without_rendering() -> None:
    assert not renders_large("x" * RENDER_ON_LOOP_MAX_CHARS)
    assert renders_large("x" * (RENDER_ON_LOOP_MAX_CHARS + 1))
    assert not renders_large({"ref": "r1", "saved": True, "n": 3, "items": [1, 2.5, None]})
    assert renders_large({"rows": ["y" * 1000] * 100})
    assert renders_large(["\x01" * 11_000])  # JSON text: six characters for each
    assert renders_large(list(range(5000)))  # more items than it looks at
    assert renders_large(object()) and renders_large(10**100)
    assert not renders_large(None) and not renders_large(7)


def test_a_large_output_is_rendered_off_the_loop_and_the_loop_keeps_ticking() -> None:
    """100 KB of secret-dense text: rendered on a worker thread, while a ticker on the loop
    measures the largest gap between its ticks."""
    text = ("password=hunter2 token=abc " * 4000)[:100_000]

    async def big(n: int) -> str:
        return text[:n]

    registry = ToolRegistry([ToolSpec("big", "Big.", "read", WAIT, 1, 200_000, big)])
    render_threads: list[str] = []
    redactor = registry.redactor
    cuts = redactor._cuts  # the scan that rendering runs (shape_output calls it per window)

    def spying(window: str) -> Any:
        render_threads.append(threading.current_thread().name)
        return cuts(window)

    redactor._cuts = spying  # type: ignore[method-assign,assignment]
    expected = invoke_tool(registry, "big", {"n": 100_000})
    render_threads.clear()

    async def go() -> tuple[dict[str, Any], float]:
        """One call while a ticker, due every millisecond, notes how late the loop ran it:
        an idle loop, as a server's loop waiting on sockets is."""
        loop = asyncio.get_running_loop()
        gaps: list[float] = []
        last = time.perf_counter()
        ticking = True

        def tick() -> None:
            nonlocal last
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
            if ticking:
                loop.call_later(0.001, tick)

        loop.call_soon(tick)
        await asyncio.sleep(0)
        result = await ainvoke_tool(registry, "big", {"n": 100_000})
        ticking = False
        gaps.append(time.perf_counter() - last)  # the gap up to the answer counts too
        return result, max(gaps)

    # The best of three runs: the machine's other load adds gaps of its own, rendering on the
    # loop adds its whole cost (tens of milliseconds for this text) to every run.
    largest_gap = float("inf")
    for _ in range(3):
        render_threads.clear()
        result, gap = asyncio.run(go())
        assert result == expected and result["redactions"] > 1000
        assert render_threads and all(name.startswith("agentkit-worker") for name in render_threads)
        largest_gap = min(largest_gap, gap)
    assert largest_gap < 0.05
    render_threads.clear()
    assert asyncio.run(ainvoke_tool(registry, "big", {"n": 100}))["ok"]
    assert render_threads == [threading.main_thread().name]  # a small one stays on the loop
