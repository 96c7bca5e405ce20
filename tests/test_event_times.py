"""Event times (agentkit/policy/steps.py, docs/design.md#events): an attempt that finished in
time ends at the boundary's own ``Attempt.finished_at`` (no second clock read); one whose
caller stopped waiting, or that never ran, is stamped when the policy learns it. A read's first
attempt begins with its call; a retry begins after the attempt before it ended. And
``Observers.live`` (agentkit/policy/events.py): with no observer added, the runner's trace is
told only the events that end a step."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentkit import ToolRegistry, ToolRunner, ToolSpec
from agentkit.boundary.attempt import running_attempt
from agentkit.policy.events import CallEvent, Observers
from agentkit.policy.trace import Trace

TIMEOUT = 5.0  # for handlers that answer at once
SHORT = 0.05  # the boundary's timeout, for a handler that does not answer until released
READ_KINDS = ["call_started", "attempt_started", "attempt_ended", "call_ended"]


def search(query: str) -> str:
    return "found"


async def asearch(query: str) -> str:
    return "found"


def _runner(*specs: ToolSpec) -> tuple[ToolRunner, list[CallEvent]]:
    runner = ToolRunner(ToolRegistry(list(specs)), sleep=lambda seconds: None)
    events: list[CallEvent] = []
    runner.add_observer(events.append)
    return runner, events


def _call(how: str, runner: ToolRunner, name: str, arguments: Any) -> dict[str, Any]:
    if how == "call":
        return runner.call(name, arguments)
    return asyncio.run(runner.acall(name, arguments))


def _one(events: list[CallEvent], kind: str) -> CallEvent:
    (event,) = [e for e in events if e.kind == kind]
    return event


class _At(logging.Handler):
    """Notes the time (and runs ``then``) when the agentkit logger says ``text``: the boundary
    logs its answer on the caller's thread just before the policy learns it."""

    def __init__(self, text: str, then: Any = None) -> None:
        super().__init__()
        self.text = text
        self.then = then
        self.times: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            if self.then is not None:
                self.then()
            self.times.append(time.monotonic())


@pytest.fixture
def attach() -> Iterator[Callable[[logging.Handler], None]]:
    """Attaches a handler to the agentkit logger (at WARNING) for the test."""
    logger = logging.getLogger("agentkit")
    level = logger.level
    logger.setLevel(logging.WARNING)
    attached: list[logging.Handler] = []

    def add(handler: logging.Handler) -> None:
        logger.addHandler(handler)
        attached.append(handler)

    yield add
    for handler in attached:
        logger.removeHandler(handler)
    logger.setLevel(level)


# sync call; acall of a sync handler (worker thread); acall of a coroutine handler (on the loop)
WAYS = [("call", search), ("acall", search), ("acall", asearch)]


# ------------------------------------------------------------------ reads that finish in time


@pytest.mark.parametrize(("how", "handler"), WAYS)
def test_a_read_s_first_attempt_begins_with_its_call(how: str, handler: Any) -> None:
    runner, events = _runner(ToolSpec("search", "Search.", "read", TIMEOUT, 3, 100, handler))
    assert _call(how, runner, "search", {"query": "q"})["ok"]
    assert [e.kind for e in events] == READ_KINDS
    started, attempt_started = events[0], events[1]
    assert attempt_started.at == started.at
    (record,) = runner.trace.records
    assert record.started_at == started.at


@pytest.mark.parametrize(("how", "handler"), WAYS)
def test_an_attempt_that_finished_in_time_ends_when_its_handler_returned(
    how: str, handler: Any
) -> None:
    runner, events = _runner(ToolSpec("search", "Search.", "read", TIMEOUT, 3, 100, handler))
    assert _call(how, runner, "search", {"query": "q"})["ok"]
    ended = _one(events, "attempt_ended")
    assert ended.attempt is not None and ended.attempt.finished_at is not None
    assert ended.at == ended.attempt.finished_at
    (record,) = runner.trace.records
    assert record.ended_at == ended.at
    assert events[0].at <= ended.at <= events[-1].at


@pytest.mark.parametrize("how", ["call", "acall"])
def test_a_retry_begins_after_the_attempt_before_it_ended(how: str) -> None:
    failed: list[str] = []

    def flaky(query: str) -> str:
        if not failed:
            failed.append(query)
            raise ConnectionError("dropped")
        return "found"

    runner, events = _runner(ToolSpec("search", "Search.", "read", TIMEOUT, 3, 100, flaky))
    assert _call(how, runner, "search", {"query": "q"})["attempts"] == 2
    kinds = [(e.kind, e.number) for e in events]
    assert kinds == [("call_started", 0), ("attempt_started", 1), ("attempt_ended", 1),
                     ("attempt_started", 2), ("attempt_ended", 2), ("call_ended", 0)]
    call_started, started_1, ended_1, started_2, ended_2, _ = events
    assert started_1.at == call_started.at
    assert started_2.at >= ended_1.at > call_started.at
    for ended in (ended_1, ended_2):
        assert ended.attempt is not None and ended.at == ended.attempt.finished_at
    first, second = runner.trace.records
    assert (first.started_at, first.ended_at) == (started_1.at, ended_1.at)
    assert (second.started_at, second.ended_at) == (started_2.at, ended_2.at)


@pytest.mark.parametrize("how", ["call", "acall"])
def test_a_write_s_attempt_ends_when_its_handler_returned(how: str) -> None:
    def save(item: str) -> str:
        return "saved"

    runner, events = _runner(ToolSpec("save", "Save.", "reversible_write", TIMEOUT, 3, 100,
                                      save))
    assert _call(how, runner, "save", {"item": "a"})["ok"]
    started, ended = _one(events, "attempt_started"), _one(events, "attempt_ended")
    assert ended.attempt is not None and ended.at == ended.attempt.finished_at
    assert events[0].at <= started.at <= ended.at
    (record,) = runner.trace.records
    assert (record.started_at, record.ended_at) == (started.at, ended.at)


# ------------------------------------------------------------------ attempts the caller gave up on


@pytest.mark.parametrize("how", ["call", "acall"])
def test_a_timed_out_attempt_is_stamped_when_the_policy_learns_it(
    how: str, attach: Callable[[logging.Handler], None]
) -> None:
    release = threading.Event()

    def slow(query: str) -> str:
        release.wait(10)
        return "late"

    gave_up = _At("no answer within")
    attach(gave_up)
    runner, events = _runner(ToolSpec("slow", "Slow.", "read", SHORT, 1, 100, slow))
    running: list[bool] = []
    runner.add_observer(lambda e: running.append(e.kind == "attempt_ended"
                                                 and e.attempt is not None
                                                 and e.attempt.finished_at is None))
    try:
        assert _call(how, runner, "slow", {"query": "q"})["error"] == "outcome_unknown"
    finally:
        release.set()
    ended = _one(events, "attempt_ended")
    assert running.count(True) == 1  # still running when its end was told
    (boundary_gave_up,) = gave_up.times
    assert ended.at >= boundary_gave_up
    assert ended.at <= events[-1].at
    (record,) = runner.trace.records
    assert record.ended_at == ended.at


@pytest.mark.parametrize("how", ["call", "acall"])
def test_a_busy_attempt_is_stamped_when_the_policy_learns_it(
    how: str, attach: Callable[[logging.Handler], None]
) -> None:
    release = threading.Event()

    def hold(query: str) -> str:
        release.wait(10)
        return query

    busy = _At("busy, no slot within")
    attach(busy)
    runner, events = _runner(ToolSpec("hold", "Hold.", "read", SHORT, 1, 100, hold,
                                      max_concurrency=1))
    try:
        assert runner.call("hold", {"query": "a"})["error"] == "outcome_unknown"  # holds the slot
        events.clear()
        assert _call(how, runner, "hold", {"query": "b"})["error"] == "busy"
    finally:
        release.set()
    started, ended = _one(events, "attempt_started"), _one(events, "attempt_ended")
    assert ended.handler_ran is False and ended.outcome == "busy"
    assert ended.attempt is not None and ended.attempt.finished_at is None  # it never ran
    (learned,) = busy.times
    assert started.at < ended.at and ended.at >= learned


@pytest.mark.parametrize("how", ["call", "acall"])
def test_a_timed_out_attempt_that_returns_just_after_is_still_stamped_when_learned(
    how: str, attach: Callable[[logging.Handler], None]
) -> None:
    """The boundary gives up on the handler (``outcome_unknown``), and the handler returns in
    the moment before the policy reads ``attempt.finished_at``. The caller stopped waiting
    first, so the attempt must still end when the policy learns it, not when the handler
    returned. The moment is held open deterministically: the boundary's "no answer within"
    log line (on the caller's thread, just before the policy learns the answer) lets the
    handler go and waits until the attempt has really returned."""
    release = threading.Event()
    attempts: list[Any] = []

    def slow(query: str) -> str:
        # the handler's own Attempt, to wait until it has returned
        attempts.append(running_attempt.get())
        release.wait(10)
        return "late"

    def let_it_return() -> None:
        release.set()
        assert attempts[0].done.wait(10)

    gave_up = _At("no answer within", then=let_it_return)
    attach(gave_up)
    runner, events = _runner(ToolSpec("slow", "Slow.", "read", SHORT, 1, 100, slow))
    try:
        assert _call(how, runner, "slow", {"query": "q"})["error"] == "outcome_unknown"
    finally:
        release.set()
    ended = _one(events, "attempt_ended")
    (learned,) = gave_up.times  # noted after the attempt had returned
    assert attempts[0].finished_at < learned
    # (as the code stands, ended.at is attempts[0].finished_at: the handler's return)
    assert ended.at >= learned


# ------------------------------------------------------------------ Observers.live


def test_observers_are_live_only_while_one_is_added() -> None:
    told: list[str] = []

    def first(kind: str, *args: Any, **kwargs: Any) -> None:
        told.append(kind)

    observers = Observers(first=first)
    assert observers.live is False and observers.emit is first
    remove_a = observers.add(lambda event: None)
    assert observers.live is True
    remove_b = observers.add(lambda event: None)
    remove_a()
    assert observers.live is True  # one is still added
    remove_b()
    assert observers.live is False and observers.emit is first
    observers.emit("attempt_ended", "c", "t", "read", 1.0)
    assert told == ["attempt_ended"]


class _NoteKinds:
    """Every kind the runner's trace is told. Patched onto the Trace class (not the instance)
    before the runner is made, because the runner hands its Observers the trace's bound
    ``note`` when it is made: this is the public method the trace is told through, and the
    test needs no private attribute of the runner or its observers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kinds: list[str] = []
        original = Trace.note
        outer = self

        def note(self: Trace, kind: str, *args: Any, **kwargs: Any) -> None:
            outer.kinds.append(kind)
            original(self, kind, *args, **kwargs)

        monkeypatch.setattr(Trace, "note", note)


@pytest.mark.parametrize(("how", "handler"), WAYS)
def test_without_an_observer_a_read_tells_its_trace_only_that_its_attempt_ended(
    how: str, handler: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    noted = _NoteKinds(monkeypatch)
    runner = ToolRunner(ToolRegistry([ToolSpec("search", "Search.", "read", TIMEOUT, 3, 100,
                                               handler)]), sleep=lambda seconds: None)
    assert _call(how, runner, "search", {"query": "q"})["ok"]
    assert noted.kinds == ["attempt_ended"]
    assert len(runner.trace) == 1

    seen: list[CallEvent] = []
    remove = runner.add_observer(seen.append)
    noted.kinds.clear()
    assert _call(how, runner, "search", {"query": "q"})["ok"]
    assert [e.kind for e in seen] == READ_KINDS
    assert noted.kinds == READ_KINDS  # an observer listens: the trace is told everything

    remove()
    noted.kinds.clear()
    assert _call(how, runner, "search", {"query": "q"})["ok"]
    assert noted.kinds == ["attempt_ended"]  # the last one removed: back to the ends only
    assert len(seen) == 4 and len(runner.trace) == 3


@pytest.mark.parametrize("how", ["call", "acall"])
def test_without_an_observer_a_retried_read_tells_its_trace_each_attempt_s_end(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed: list[str] = []

    def flaky(query: str) -> str:
        if not failed:
            failed.append(query)
            raise ConnectionError("dropped")
        return "found"

    noted = _NoteKinds(monkeypatch)
    runner = ToolRunner(ToolRegistry([ToolSpec("search", "Search.", "read", TIMEOUT, 3, 100,
                                               flaky)]), sleep=lambda seconds: None)
    assert _call(how, runner, "search", {"query": "q"})["attempts"] == 2
    assert noted.kinds == ["attempt_ended", "attempt_ended"]
    assert [(r.attempt, r.outcome) for r in runner.trace] == [(1, "transient_failure"), (2, "ok")]


@pytest.mark.parametrize(("how", "handler"), WAYS)
def test_an_observer_sees_a_read_s_four_events_in_order(how: str, handler: Any) -> None:
    runner, events = _runner(ToolSpec("search", "Search.", "read", TIMEOUT, 3, 100, handler))
    result = _call(how, runner, "search", {"query": "q"})
    assert [e.kind for e in events] == READ_KINDS
    assert len({e.call_id for e in events}) == 1
    assert [e.number for e in events] == [0, 1, 1, 0]
    assert events[2].outcome == "ok" and events[2].handler_ran is True
    assert events[-1].result == result
    assert all(a.at <= b.at for a, b in itertools.pairwise(events))
