"""The deadlines of async waits for sync handlers share one timer per loop
(docs/design.md#async-path): each wait is still settled at its own deadline, whatever order
the waits come in, and a wait that ended in time, or whose caller went away, is dropped."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from agentkit import ToolRegistry, ToolSpec, ainvoke_tool
from agentkit.boundary.deadlines import Deadlines


class FakeLoop:
    """time() and call_at() of an event loop, with a clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[..., None], tuple[Any, ...]]] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[..., None], *args: Any) -> None:
        self.timers.append((when, callback, args))

    def advance(self, to: float) -> None:
        self.now = to
        due = [t for t in self.timers if t[0] <= to]
        self.timers = [t for t in self.timers if t[0] > to]
        for _, callback, args in sorted(due, key=lambda t: t[0]):
            callback(*args)


class Waiter:
    def __init__(self) -> None:
        self.settled = 0
        self.cancelled = False

    def done(self) -> bool:
        return self.settled > 0 or self.cancelled

    def set_result(self, value: None) -> None:
        assert not self.done()
        self.settled += 1


def test_each_wait_is_settled_at_its_own_deadline_in_any_order() -> None:
    loop = FakeLoop()
    keeper = Deadlines(loop)  # type: ignore[arg-type]
    late, early, middle = Waiter(), Waiter(), Waiter()
    keeper.add(5.0, late)  # type: ignore[arg-type]
    keeper.add(1.0, early)  # type: ignore[arg-type]  # an earlier deadline re-arms the timer
    keeper.add(3.0, middle)  # type: ignore[arg-type]
    loop.advance(0.99)
    assert (early.settled, middle.settled, late.settled) == (0, 0, 0)
    loop.advance(1.0)
    assert (early.settled, middle.settled, late.settled) == (1, 0, 0)
    loop.advance(4.99)
    assert (early.settled, middle.settled, late.settled) == (1, 1, 0)
    loop.advance(100.0)
    assert (early.settled, middle.settled, late.settled) == (1, 1, 1)
    assert loop.timers == []  # nothing left to wait for: no timer pending


def test_waits_that_ended_are_dropped_and_never_settled() -> None:
    loop = FakeLoop()
    keeper = Deadlines(loop)  # type: ignore[arg-type]
    ended = [Waiter() for _ in range(1_000)]
    pending = Waiter()
    keeper.add(2.0, pending)  # type: ignore[arg-type]
    for number, waiter in enumerate(ended):
        loop.now = number * 0.001
        keeper.add(2.0, waiter)  # type: ignore[arg-type]
        waiter.cancelled = True  # ended in time (or its caller went away)
    assert len(keeper._heap) < 600  # compacted as it grew
    assert len(loop.timers) == 1  # one timer for all of them
    loop.advance(2.0)
    assert pending.settled == 1 and all(w.settled == 0 for w in ended)
    loop.advance(10.0)
    assert keeper._heap == [] and loop.timers == []


def test_a_sync_handler_past_its_deadline_is_a_timeout_beside_quick_ones() -> None:
    release = threading.Event()
    calls: list[str] = []

    def slow(query: str) -> str:
        calls.append(query)
        release.wait(10.0)
        return query

    def quick(query: str) -> str:
        calls.append(query)
        return query

    registry = ToolRegistry([
        ToolSpec("slow", "Slow.", "read", 0.05, 1, 100, slow),
        ToolSpec("quick", "Quick.", "read", 10.0, 4, 100, quick),
    ])

    async def go() -> list[dict[str, Any]]:
        slow_call = asyncio.ensure_future(ainvoke_tool(registry, "slow", {"query": "s"}))
        quick_ones = [await ainvoke_tool(registry, "quick", {"query": f"q{n}"}) for n in range(3)]
        return [await slow_call, *quick_ones]

    try:
        results = asyncio.run(go())
    finally:
        release.set()
    assert results[0] == {"ok": False, "error": "outcome_unknown", "retryable": True}
    assert results[1:] == [{"ok": True, "data": f"q{n}"} for n in range(3)]
    assert sorted(calls) == ["q0", "q1", "q2", "s"]
