"""Policy events (docs/design.md#events): the same sequence through both drivers, emitted on
the caller's thread or task, one call_started first and one call_ended last; an observer that
raises changes nothing; the Trace is fed as one observer and records nothing twice."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from typing import Any

import pytest

from agentkit import ToolRegistry, ToolRunner, ToolSpec
from agentkit.policy.events import KINDS, CallEvent

TIMEOUT = 5.0

#: A context variable an observer reads: it must see the caller's value (its span).
CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="")


class Recorder:
    def __init__(self) -> None:
        self.events: list[CallEvent] = []
        self.threads: set[str] = set()
        self.callers: set[str] = set()

    def __call__(self, event: CallEvent) -> None:
        self.events.append(event)
        self.threads.add(threading.current_thread().name)
        self.callers.add(CALLER.get())

    def kinds(self) -> list[tuple[Any, ...]]:
        """Each event as (kind, number, outcome, handler_ran, operation of call events)."""
        out: list[tuple[Any, ...]] = []
        for e in self.events:
            operation = e.operation if e.kind in ("call_started", "call_ended") else ""
            out.append((e.kind, e.number, e.outcome, e.handler_ran, operation))
        return out


def run(kind: str, method: str, runner: ToolRunner, *args: Any) -> dict[str, Any]:
    CALLER.set("the caller")
    if kind == "sync":
        return getattr(runner, method)(*args)  # type: ignore[no-any-return]

    async def go() -> dict[str, Any]:
        return await getattr(runner, "a" + method)(*args)  # type: ignore[no-any-return]

    return asyncio.run(go())


def flaky_search(failures: int) -> Any:
    left = [failures]

    def search(query: str) -> str:
        if left[0]:
            left[0] -= 1
            raise ConnectionError("dropped")
        return "found"

    return search


def tools() -> tuple[ToolRegistry, dict[str, Any]]:
    ledger: dict[str, Any] = {"calls": 0, "landed": {}}

    def save(item: str) -> dict[str, Any]:
        ledger["calls"] += 1
        ledger["landed"][item] = True
        raise ConnectionError("dropped after the write")

    def status(item: str) -> dict[str, Any] | None:
        return {"item": item} if item in ledger["landed"] else None

    def send(item: str) -> dict[str, Any]:
        ledger["calls"] += 1
        return {"sent": item}

    key = {"idempotency_key": lambda context, arguments: f"k:{arguments['item']}"}
    return ToolRegistry([
        ToolSpec("search", "Search.", "read", TIMEOUT, 3, 100, flaky_search(1)),
        ToolSpec("save", "Save.", "reversible_write", TIMEOUT, 3, 100, save,
                 status_lookup=status, **key),
        ToolSpec("send", "Send.", "irreversible_write", TIMEOUT, 1, 100, send, **key),
    ]), ledger


def sequence(kind: str) -> tuple[list[list[tuple[Any, ...]]], Recorder, dict[str, Any]]:
    registry, ledger = tools()
    runner = ToolRunner(registry, sleep=lambda seconds: None)
    recorder = Recorder()
    runner.add_observer(recorder)
    seen: list[list[tuple[Any, ...]]] = []

    def step(method: str, *args: Any) -> dict[str, Any]:
        recorder.events.clear()
        result = run(kind, method, runner, *args)
        seen.append(recorder.kinds())
        call_ids = {e.call_id for e in recorder.events}
        assert len(call_ids) == 1  # one call, one id
        assert recorder.events[0].kind == "call_started" and recorder.events[-1].kind == "call_ended"
        assert recorder.events[-1].result == result
        assert all(e.kind in KINDS for e in recorder.events)
        return result

    step("call", "search", {"query": "q"})  # a read retried
    step("call", "save", {"item": "a"})  # a reversible write settled by the lookup
    step("call", "save", {"item": "a"})  # a replay
    asked = step("call", "send", {"item": "b"})  # an approval asked ...
    step("approve", asked["approval_id"])  # ... approved
    other = step("call", "send", {"item": "c"})
    step("deny", other["approval_id"])  # ... denied
    step("call", "nope", {})  # refused: nothing ran
    return seen, recorder, ledger


EXPECTED = [
    [("call_started", 0, "", False, "call"),
     ("attempt_started", 1, "", False, ""), ("attempt_ended", 1, "transient_failure", True, ""),
     ("attempt_started", 2, "", False, ""), ("attempt_ended", 2, "ok", True, ""),
     ("call_ended", 0, "", False, "call")],
    [("call_started", 0, "", False, "call"),
     ("attempt_started", 1, "", False, ""), ("attempt_ended", 1, "transient_failure", True, ""),
     ("lookup_started", 1, "", False, ""), ("lookup_ended", 1, "done", False, ""),
     ("call_ended", 0, "", False, "call")],
    [("call_started", 0, "", False, "call"), ("replay", 0, "ok", False, ""),
     ("call_ended", 0, "", False, "call")],
    [("call_started", 0, "", False, "call"), ("approval_asked", 0, "approval_required", False, ""),
     ("call_ended", 0, "", False, "call")],
    [("call_started", 0, "", False, "approve"),
     ("attempt_started", 1, "", False, ""), ("attempt_ended", 1, "ok", True, ""),
     ("approval_settled", 0, "ok", False, ""), ("call_ended", 0, "", False, "approve")],
    [("call_started", 0, "", False, "call"), ("approval_asked", 0, "approval_required", False, ""),
     ("call_ended", 0, "", False, "call")],
    [("call_started", 0, "", False, "deny"), ("approval_settled", 0, "forbidden", False, ""),
     ("call_ended", 0, "", False, "deny")],
    [("call_started", 0, "", False, "call"), ("refused", 0, "unknown_tool", False, ""),
     ("call_ended", 0, "", False, "call")],
]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_event_sequence_is_the_same_through_both_drivers(kind: str) -> None:
    seen, recorder, ledger = sequence(kind)
    assert seen == EXPECTED
    assert ledger["calls"] == 2  # the save once, the approved send once
    # on the caller's thread (the event loop's, for async), in the caller's context
    assert recorder.threads == {threading.current_thread().name}
    assert recorder.callers == {"the caller"}


def test_events_name_the_tool_effect_approval_and_attempt() -> None:
    registry, _ = tools()
    runner = ToolRunner(registry)
    recorder = Recorder()
    runner.add_observer(recorder)
    asked = runner.call("send", {"item": "x"}, call_id="host-7")
    runner.approve(asked["approval_id"])
    first = recorder.events[0]
    assert (first.call_id, first.tool, first.effect) == ("host-7", "send", "irreversible_write")
    approval = [e for e in recorder.events if e.kind.startswith("approval_")]
    assert [e.approval_id for e in approval] == [asked["approval_id"]] * 2
    ended = next(e for e in recorder.events if e.kind == "attempt_ended")
    assert ended.attempt is not None and ended.attempt.started_at is not None
    assert all(a.at <= b.at for a, b in zip(recorder.events, recorder.events[1:], strict=False))


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_raising_observer_changes_nothing(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    quiet_seen, _, _ = sequence(kind)

    registry, _ = tools()
    runner = ToolRunner(registry, sleep=lambda seconds: None)

    def boom(event: CallEvent) -> None:
        raise RuntimeError("observer bug")

    runner.add_observer(boom)
    recorder = Recorder()
    runner.add_observer(recorder)  # after the raising one: still told everything
    with caplog.at_level(logging.ERROR, logger="agentkit"):
        result = run(kind, "call", runner, "search", {"query": "q"})
    assert result == {"ok": True, "data": "found", "attempts": 2, "replayed": False}
    assert recorder.kinds() == quiet_seen[0]
    assert any("an observer failed" in r.getMessage() and r.exc_info for r in caplog.records)
    assert runner.trace.call_counts() == {"search": 2}


def test_removing_an_observer_stops_its_events_and_the_trace_records_once() -> None:
    registry, _ = tools()
    runner = ToolRunner(registry, sleep=lambda seconds: None)
    recorder = Recorder()
    remove = runner.add_observer(recorder)
    runner.call("search", {"query": "q"})
    remove()
    runner.call("search", {"query": "again"})
    assert len([e for e in recorder.events if e.kind == "call_started"]) == 1
    steps = [(r.step, r.outcome) for r in runner.trace.records]
    assert steps == [("attempt", "transient_failure"), ("attempt", "ok"), ("attempt", "ok")]
    with pytest.raises(TypeError):
        runner.add_observer("not callable")  # type: ignore[arg-type]


def test_a_cancelled_read_still_ends_its_call_for_the_observers() -> None:
    entered = asyncio.Event()

    async def hang(query: str) -> str:
        entered.set()
        await asyncio.Event().wait()
        return query

    runner = ToolRunner(ToolRegistry([ToolSpec("hang", "Hang.", "read", 30.0, 1, 100, hang)]))
    recorder = Recorder()
    runner.add_observer(recorder)

    async def go() -> None:
        task = asyncio.ensure_future(runner.acall("hang", {"query": "q"}))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    kinds = [e.kind for e in recorder.events]
    assert kinds == ["call_started", "attempt_started", "attempt_ended", "call_ended"]
    ended = recorder.events[-1]
    assert ended.result is not None and ended.result["error"] == "outcome_unknown"


def test_each_registration_is_removed_on_its_own_and_removing_twice_does_nothing() -> None:
    registry, _ = tools()
    runner = ToolRunner(registry, sleep=lambda seconds: None)
    recorder = Recorder()
    first = runner.add_observer(recorder)
    second = runner.add_observer(recorder)  # the same function, registered twice
    runner.call("search", {"query": "q"})
    assert [e.kind for e in recorder.events].count("call_started") == 2
    first()
    first()  # a second removal of the same registration removes nothing more
    runner.call("search", {"query": "again"})
    assert [e.kind for e in recorder.events].count("call_started") == 3  # told once more
    second()
    runner.call("search", {"query": "quiet"})
    assert [e.kind for e in recorder.events].count("call_started") == 3


def test_observers_added_from_many_threads_at_once_are_all_kept() -> None:
    import threading

    registry, _ = tools()
    runner = ToolRunner(registry, sleep=lambda seconds: None)
    seen: list[list[str]] = [[] for _ in range(16)]
    start = threading.Barrier(len(seen))

    def add(box: list[str]) -> None:
        start.wait()
        runner.add_observer(lambda event: box.append(event.kind))

    threads = [threading.Thread(target=add, args=(box,)) for box in seen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    runner.call("search", {"query": "q"})
    assert all(box and box[0] == "call_started" and box[-1] == "call_ended" for box in seen)


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("tool", ["search", "save", "send"])
def test_a_spent_budget_is_refused_once(kind: str, tool: str) -> None:
    """Nothing runs and the refusal is told once, whatever the effect (a reversible write was
    told twice: notebook 09 showed "refused, refused")."""
    from agentkit import Budget

    registry, ledger = tools()
    runner = ToolRunner(registry, budget=Budget(0), sleep=lambda seconds: None)
    recorder = Recorder()
    runner.add_observer(recorder)
    result = run(kind, "call", runner, tool, {"item": "x"} if tool != "search" else {"query": "q"})
    assert result["error"] == "budget_exhausted" and result["attempts"] == 0
    assert [e.kind for e in recorder.events] == ["call_started", "refused", "call_ended"]
    assert [(r.step, r.outcome) for r in runner.trace.records] == [("refused", "budget_exhausted")]
    assert ledger["calls"] == 0
