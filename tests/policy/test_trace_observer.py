"""The in-memory trace as the runner's first observer (docs/design.md#events): told each
event's fields directly, it keeps plain rows and makes its records when they are read; a
failure inside it is logged and changes no result, and the observers added after it are
still told every event."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from agentkit import ToolRegistry, ToolRunner, ToolSpec
from agentkit.policy.events import CallEvent


def registry(calls: list[str]) -> ToolRegistry:
    def search(query: str) -> str:
        calls.append(query)
        return "found"

    async def asearch(query: str) -> str:
        calls.append(query)
        return "found"

    return ToolRegistry([
        ToolSpec("search", "Search.", "read", 5.0, 2, 2_000, search),
        ToolSpec("asearch", "Search.", "read", 5.0, 2, 2_000, asearch),
    ])


class BrokenRows:
    """A trace's row store that fails on every append (a bug inside the trace)."""

    def append(self, row: Any) -> None:
        raise RuntimeError("trace bug")


def call(kind: str, runner: ToolRunner, name: str) -> dict[str, Any]:
    if kind == "sync":
        return runner.call(name, {"query": "q"})
    return asyncio.run(runner.acall(name, {"query": "q"}))


@pytest.mark.parametrize(("kind", "name"), [("sync", "search"), ("async", "asearch")])
def test_a_failing_trace_changes_no_result_and_other_observers_see_everything(
    kind: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []
    runner = ToolRunner(registry(calls), sleep=lambda seconds: None)
    seen: list[CallEvent] = []
    runner.add_observer(seen.append)
    runner.trace._records = BrokenRows()  # type: ignore[assignment]
    with caplog.at_level(logging.ERROR, logger="agentkit"):
        result = call(kind, runner, name)
    assert result == {"ok": True, "data": "found", "attempts": 1, "replayed": False}
    assert calls == ["q"]
    assert [e.kind for e in seen] == ["call_started", "attempt_started", "attempt_ended",
                                      "call_ended"]
    assert seen[-1].result == result
    assert any("the trace failed on attempt_ended" in r.getMessage() and r.exc_info
               for r in caplog.records)


@pytest.mark.parametrize(("kind", "name"), [("sync", "search"), ("async", "asearch")])
def test_records_are_made_from_rows_when_read(kind: str, name: str) -> None:
    calls: list[str] = []
    runner = ToolRunner(registry(calls), sleep=lambda seconds: None)
    call(kind, runner, name)
    first, again = runner.trace.records, runner.trace.records
    assert first == again and first[0] is not again[0]  # equal records, made on each read
    (record,) = first
    assert (record.tool, record.step, record.attempt, record.outcome, record.handler_ran,
            record.replayed) == (name, "attempt", 1, "ok", True, False)
    assert record.started_at <= record.ended_at
    assert record.landed_at is not None and record.started_at <= record.landed_at
    assert runner.trace.call_counts() == {name: 1} and len(runner.trace) == 1


def test_without_an_added_observer_no_event_object_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentkit.policy import events

    made: list[type] = []

    def new(cls: type) -> Any:
        made.append(cls)
        return object.__new__(cls)

    monkeypatch.setattr(events, "_new", new)  # how the runner's emit makes each event
    calls: list[str] = []
    runner = ToolRunner(registry(calls), sleep=lambda seconds: None)
    runner.call("search", {"query": "q"})
    assert made == [] and len(runner.trace) == 1
    kept: list[CallEvent] = []
    remove = runner.add_observer(kept.append)
    runner.call("search", {"query": "q"})
    assert made == [CallEvent] * 4
    assert [e.kind for e in kept] == ["call_started", "attempt_started", "attempt_ended",
                                      "call_ended"]
    remove()
    runner.call("search", {"query": "q"})
    assert len(made) == 4 and len(kept) == 4 and len(runner.trace) == 3
