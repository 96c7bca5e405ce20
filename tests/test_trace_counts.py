"""The trace's counts (agentkit/policy/trace.py, docs/design.md#events): rows kept in a bounded
deque, rows and handler runs counted per tool by Tallies, so ``len(trace)`` is the rows kept,
``dropped`` the rows let go and ``call_counts()`` every handler run ever traced, also under
many threads and tasks at once. A Trace fed as an ordinary observer (``trace.observe``) ends
with the same records as the runner's own. A finished attempt's record keeps one time; a late
one's keeps an AttemptTimes filled when the handler returns."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from agentkit import IdempotencyStore, ToolRegistry, ToolRunner, ToolSpec
from agentkit.boundary.attempt import mark_landed
from agentkit.policy.events import CallEvent
from agentkit.policy.trace import AttemptTimes, Trace, TraceRecord

TIMEOUT = 5.0  # for handlers that answer at once
SHORT = 0.05  # the boundary's timeout, for a handler that does not answer until released


class Runs:
    """Real handler calls per tool (thread safe)."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, tool: str) -> None:
        with self._lock:
            self.count[tool] += 1


def _refused(trace: Trace, call_id: str, tool: str = "t") -> None:
    trace.note("refused", call_id, tool, "read", 1.0, outcome="invalid_arguments", since=0.5)


def _ran(trace: Trace, call_id: str, tool: str = "t") -> None:
    trace.note("attempt_ended", call_id, tool, "read", 2.0, 1, "ok", True, since=1.5)


# ------------------------------------------------------------------ the counts, one thread


def test_a_bounded_trace_keeps_the_latest_rows_and_counts_the_rest_as_dropped() -> None:
    trace = Trace(max_records=3)
    for n in range(5):
        _refused(trace, f"r{n}")
    for n in range(2):
        _ran(trace, f"a{n}")
    assert len(trace) == 3
    assert [r.call_id for r in trace] == ["r4", "a0", "a1"]
    assert trace.dropped == 4  # rows without a handler run are let go (and counted) too
    assert trace.call_counts() == {"t": 2}


def test_call_counts_count_the_runs_of_dropped_rows() -> None:
    trace = Trace(max_records=1)
    for n in range(4):
        _ran(trace, f"a{n}", tool="one")
    _ran(trace, "b", tool="two")
    _refused(trace, "c", tool="three")
    assert trace.call_counts() == {"one": 4, "two": 1}  # a tool with no run is not listed
    assert (len(trace), trace.dropped) == (1, 5)


def test_an_unbounded_trace_drops_nothing() -> None:
    trace = Trace(max_records=None)
    for n in range(20):
        _ran(trace, f"a{n}")
    assert (len(trace), trace.dropped, trace.call_counts()) == (20, 0, {"t": 20})


def test_a_new_trace_is_empty() -> None:
    trace = Trace(max_records=2)
    assert (len(trace), trace.dropped, trace.call_counts(), trace.records) == (0, 0, {}, [])


def test_records_added_whole_are_counted_like_noted_ones() -> None:
    trace = Trace(max_records=1)
    for n, ran in enumerate([True, False, True]):
        trace.add(TraceRecord(f"c{n}", "t", "read", "attempt", 1, "ok", ran, False, 1.0, 2.0))
    assert (len(trace), trace.dropped, trace.call_counts()) == (1, 2, {"t": 2})


# ------------------------------------------------------------------ many threads and tasks


KEEP = 40
SYNC_THREADS = 3
ROUNDS = 200  # per thread, and tasks on the event loop's thread


def _busy_registry(runs: Runs) -> ToolRegistry:
    def search(query: str) -> str:
        runs("search")
        return "found"

    def flaky(query: str) -> str:
        runs("flaky")
        raise ConnectionError("dropped")

    async def asearch(query: str) -> str:
        runs("asearch")
        return "found"

    return ToolRegistry([
        ToolSpec("search", "Search.", "read", TIMEOUT, 1, 100, search),
        ToolSpec("flaky", "Flaky.", "read", TIMEOUT, 2, 100, flaky),
        ToolSpec("asearch", "Search.", "read", TIMEOUT, 1, 100, asearch),
    ])


def test_counts_stay_exact_under_threads_and_tasks_at_once() -> None:
    runs = Runs()
    runner = ToolRunner(_busy_registry(runs), sleep=lambda seconds: None,
                        max_trace_records=KEEP)
    start = threading.Barrier(SYNC_THREADS + 1)
    refusals: list[int] = []
    failures: list[BaseException] = []

    def sync_caller() -> None:
        try:
            start.wait()
            refused = 0
            for _ in range(ROUNDS):
                assert runner.call("search", {"query": "q"})["ok"]
                assert runner.call("flaky", {"query": "q"})["attempts"] == 2
                assert runner.call("search", {"query": 5})["error"] == "invalid_arguments"
                refused += 1
            refusals.append(refused)
        except BaseException as exc:
            failures.append(exc)

    async def tasks() -> int:
        async def one() -> int:
            assert (await runner.acall("asearch", {"query": "q"}))["ok"]
            assert (await runner.acall("search", {"query": "q"}))["ok"]
            assert (await runner.acall("flaky", {"query": "q"}))["attempts"] == 2
            assert (await runner.acall("nope", {}))["error"] == "unknown_tool"
            return 1

        return sum(await asyncio.gather(*(one() for _ in range(ROUNDS))))

    def async_caller() -> None:
        try:
            start.wait()
            refusals.append(asyncio.run(tasks()))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=sync_caller) for _ in range(SYNC_THREADS)]
    threads.append(threading.Thread(target=async_caller))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
    real = dict(runs.count)
    assert real == {"search": (SYNC_THREADS + 1) * ROUNDS, "flaky": 2 * (SYNC_THREADS + 1) * ROUNDS,
                    "asearch": ROUNDS}
    rows = sum(real.values()) + sum(refusals)  # one row per attempt, one per refusal
    trace = runner.trace
    assert len(trace) == KEEP and len(trace.records) == KEEP
    assert trace.dropped == rows - KEEP
    assert trace.call_counts() == dict(sorted(real.items()))


# ------------------------------------------------------------------ trace.observe, the same rows


class Ledger:
    """A tiny external system for the writes, and what the slow write waits for."""

    def __init__(self) -> None:
        self.landed: dict[str, bool] = {}
        self.calls: Counter[str] = Counter()
        self.release = threading.Event()
        self.failed_once: set[str] = set()


def _mixed_registry(ledger: Ledger) -> ToolRegistry:
    def search(query: str) -> str:
        ledger.calls["search"] += 1
        if query.startswith("flaky") and query not in ledger.failed_once:
            ledger.failed_once.add(query)
            raise ConnectionError("dropped")
        return "found"

    def save(item: str) -> dict[str, str]:
        ledger.calls["save"] += 1
        ledger.landed[item] = True
        return {"saved": item}

    def slow_save(item: str) -> dict[str, str]:
        ledger.calls["slow_save"] += 1
        ledger.landed[item] = True
        mark_landed()
        ledger.release.wait(10)  # the caller gives up first
        return {"saved": item}

    def status(item: str) -> dict[str, str] | None:
        return {"saved": item} if ledger.landed.get(item) else None

    def send(item: str) -> dict[str, str]:
        ledger.calls["send"] += 1
        return {"sent": item}

    key = {"idempotency_key": lambda context, arguments: f"k:{arguments['item']}"}
    return ToolRegistry([
        ToolSpec("search", "Search.", "read", TIMEOUT, 3, 100, search),
        ToolSpec("save", "Save.", "reversible_write", TIMEOUT, 3, 100, save,
                 status_lookup=status, **key),
        ToolSpec("slow_save", "Save slowly.", "reversible_write", SHORT, 3, 100, slow_save,
                 status_lookup=status, **key),
        ToolSpec("send", "Send.", "irreversible_write", TIMEOUT, 1, 100, send, **key),
    ])


def _play(kind: str, runner: ToolRunner) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        out = [
            await runner.acall("search", {"query": "a"}),
            await runner.acall("search", {"query": "flaky-b"}),
            await runner.acall("search", {"query": 1}),
            await runner.acall("save", {"item": "a"}),
            await runner.acall("save", {"item": "a"}),
            await runner.acall("slow_save", {"item": "s"}),
        ]
        asked = await runner.acall("send", {"item": "x"})
        out += [asked, await runner.aapprove(asked["approval_id"])]
        other = await runner.acall("send", {"item": "y"})
        out += [other, await runner.adeny(other["approval_id"])]
        return out

    if kind == "async":
        return asyncio.run(go())
    out = [
        runner.call("search", {"query": "a"}),
        runner.call("search", {"query": "flaky-b"}),
        runner.call("search", {"query": 1}),
        runner.call("save", {"item": "a"}),
        runner.call("save", {"item": "a"}),
        runner.call("slow_save", {"item": "s"}),
    ]
    asked = runner.call("send", {"item": "x"})
    out += [asked, runner.approve(asked["approval_id"])]
    other = runner.call("send", {"item": "y"})
    out += [other, runner.deny(other["approval_id"])]
    return out


def _fields(record: TraceRecord) -> tuple[Any, ...]:
    return (record.call_id, record.tool, record.effect, record.step, record.attempt,
            record.outcome, record.handler_ran, record.replayed)


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    ledger = Ledger()
    yield ledger
    ledger.release.set()  # nothing stays hung, whatever the test did


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_trace_fed_as_an_observer_ends_with_the_runner_s_own_records(
    kind: str, ledger: Ledger
) -> None:
    runner = ToolRunner(_mixed_registry(ledger), sleep=lambda seconds: None)
    other = Trace(max_records=None)
    runner.add_observer(other.observe)
    results = _play(kind, runner)
    assert [r.get("error", "ok") for r in results] == [
        "ok", "ok", "invalid_arguments", "ok", "ok", "ok", "approval_required", "ok",
        "approval_required", "forbidden"]
    assert results[4]["replayed"] is True
    assert ledger.calls == {"search": 3, "save": 1, "slow_save": 1, "send": 1}

    own, observed = runner.trace.records, other.records
    assert [_fields(r) for r in observed] == [_fields(r) for r in own]
    assert [(r.started_at, r.ended_at) for r in observed] == [
        (r.started_at, r.ended_at) for r in own]
    assert other.call_counts() == runner.trace.call_counts() == {
        "save": 1, "search": 3, "send": 1, "slow_save": 1}
    assert (len(other), other.dropped) == (len(own), 0)
    # the mix really was played: each kind of step is there
    steps = {(r.tool, r.step, r.outcome) for r in own}
    assert {("search", "attempt", "transient_failure"), ("search", "refused", "invalid_arguments"),
            ("save", "replay", "ok"), ("slow_save", "attempt", "outcome_unknown"),
            ("slow_save", "status_lookup", "done"), ("send", "approval", "approval_required"),
            ("send", "attempt", "ok"), ("send", "approval", "forbidden")} <= steps
    # the late attempt is kept as its times in both traces, the landing already among them
    late_own = next(r for r in own if r.outcome == "outcome_unknown")
    late_observed = next(r for r in observed if r.outcome == "outcome_unknown")
    assert isinstance(late_own._handle, AttemptTimes)
    assert isinstance(late_observed._handle, AttemptTimes)
    assert late_own.landed_at is not None and late_own.landed_at == late_observed.landed_at


# ------------------------------------------------------------------ what a record keeps of its attempt


def _attempts_seen(runner: ToolRunner) -> list[Any]:
    """The boundary's Attempt of every attempt_ended event, in order."""
    seen: list[Any] = []

    def keep(event: CallEvent) -> None:
        if event.kind == "attempt_ended":
            seen.append(event.attempt)

    runner.add_observer(keep)
    return seen


def test_a_finished_attempt_s_record_keeps_when_it_returned_as_one_float() -> None:
    def search(query: str) -> str:
        return "found"

    runner = ToolRunner(ToolRegistry([ToolSpec("search", "Search.", "read", TIMEOUT, 1, 100,
                                               search)]))
    attempts = _attempts_seen(runner)
    runner.call("search", {"query": "q"})
    (record,) = runner.trace.records
    (attempt,) = attempts
    assert type(record._handle) is float
    assert attempt.landed_at is None
    assert record._handle == record.landed_at == attempt.finished_at


def test_a_finished_attempt_s_record_keeps_the_time_its_handler_marked_landed() -> None:
    def save(item: str) -> str:
        mark_landed()
        return "saved"

    runner = ToolRunner(ToolRegistry([ToolSpec("save", "Save.", "reversible_write", TIMEOUT, 1,
                                               100, save)]))
    attempts = _attempts_seen(runner)
    assert runner.call("save", {"item": "a"})["ok"]
    (record,) = runner.trace.records
    (attempt,) = attempts
    assert type(record._handle) is float
    assert attempt.landed_at is not None and attempt.finished_at is not None
    assert record._handle == record.landed_at == attempt.landed_at
    assert attempt.landed_at <= attempt.finished_at


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_late_attempt_s_record_keeps_times_filled_when_it_returns(kind: str) -> None:
    release = threading.Event()

    def slow(query: str) -> str:
        release.wait(10)
        return "late"

    runner = ToolRunner(ToolRegistry([ToolSpec("slow", "Slow.", "read", SHORT, 1, 100, slow)]))
    returned = threading.Event()
    attempts: list[Any] = []

    def keep(event: CallEvent) -> None:
        if event.kind == "attempt_ended":
            attempts.append(event.attempt)
            # added after the trace's own callback (the trace was told first): when this one
            # runs, the trace has copied the times
            event.attempt.add_done_callback(returned.set)

    runner.add_observer(keep)
    try:
        if kind == "sync":
            result = runner.call("slow", {"query": "q"})
        else:
            result = asyncio.run(runner.acall("slow", {"query": "q"}))
        assert result["error"] == "outcome_unknown"
        (record,) = runner.trace.records
        assert isinstance(record._handle, AttemptTimes)
        assert record.landed_at is None  # still running: nothing to show yet
        assert not record._handle.done.is_set()
    finally:
        release.set()
    assert returned.wait(10)
    (attempt,) = attempts
    (record,) = runner.trace.records
    assert record._handle.done.is_set()
    assert record.landed_at is not None and record.landed_at == attempt.finished_at
    assert record.landed_at > record.ended_at  # it returned after the caller gave up
    assert isinstance(record._handle, AttemptTimes)
    assert record._handle.started_at == attempt.started_at


class _HoldLateCallbacks(logging.Handler):
    """Holds the worker thread inside the attempt's first done-callback (the boundary's
    "finished after the caller gave up" log line), i.e. after the attempt is marked done and
    before the callbacks registered after it (the trace's copy of the times) have run."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = threading.Event()
        self.go_on = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "finished after the caller gave up" in record.getMessage():
            self.inside.set()
            self.go_on.wait(10)


def test_once_a_late_record_s_done_flag_is_set_its_times_are_filled() -> None:
    """``AttemptTimes.done`` is "set once the attempt has really returned (for tests that wait
    for a late one)": whoever waits on it then reads ``landed_at``. The attempt's own flag is
    set before its done-callbacks run, and the trace copies the times in one of them, so the
    record's flag is its own, set after the copy. The moment between the two is held open here
    (the worker is paused inside an earlier callback) instead of being hit by luck: in it the
    record must not say done yet."""
    release = threading.Event()

    def slow(query: str) -> str:
        release.wait(10)
        return "late"

    runner = ToolRunner(ToolRegistry([ToolSpec("slow", "Slow.", "read", SHORT, 1, 100, slow)]))
    hold = _HoldLateCallbacks()
    logger = logging.getLogger("agentkit")
    level = logger.level
    logger.addHandler(hold)
    logger.setLevel(logging.WARNING)
    try:
        assert runner.call("slow", {"query": "q"})["error"] == "outcome_unknown"
        (record,) = runner.trace.records
        release.set()
        assert hold.inside.wait(10)
        # the attempt has returned, the trace's copy of its times not yet: not done, or filled
        assert not record._handle.done.is_set() or record.landed_at is not None
        hold.go_on.set()
        assert record._handle.done.wait(10)  # the record says its attempt has returned ...
        assert record.landed_at is not None  # ... so its times are there
    finally:
        hold.go_on.set()
        release.set()
        logger.removeHandler(hold)
        logger.setLevel(level)


class _StoreWithAMomentInside(IdempotencyStore):
    """The memory store, which runs ``during_complete`` (once) when a write's result is
    recorded: between the approved run's end and its approval being settled."""

    during_complete: Any = None

    def complete(self, key: str, mine: Any, result: Any, full_sync: bool = False) -> None:
        during, self.during_complete = self.during_complete, None
        if during is not None:
            during()
        super().complete(key, mine, result, full_sync)


def test_an_approved_run_is_recorded_once_even_when_its_row_was_let_go() -> None:
    """After an approved run, its ``approval_settled`` repeats the run's end and is not
    recorded, even in a bounded trace where another thread's rows have already pushed the
    run's own row out: the decision must not depend on which rows are still kept. Here another
    thread's read lands at the moment the run's result is stored (deterministically, from
    inside the store step)."""
    def search(query: str) -> str:
        return "found"

    sent: list[str] = []

    def send(item: str) -> dict[str, str]:
        sent.append(item)
        return {"sent": item}

    store = _StoreWithAMomentInside()
    runner = ToolRunner(ToolRegistry([
        ToolSpec("search", "Search.", "read", TIMEOUT, 1, 100, search),
        ToolSpec("send", "Send.", "irreversible_write", TIMEOUT, 1, 100, send),
    ]), store=store, max_trace_records=1)

    def another_thread_reads() -> None:
        other = threading.Thread(target=runner.call, args=("search", {"query": "q"}))
        other.start()
        other.join(10)
        assert not other.is_alive()

    asked = runner.call("send", {"item": "x"})
    store.during_complete = another_thread_reads
    assert runner.approve(asked["approval_id"])["ok"]
    assert sent == ["x"] and store.during_complete is None
    # rows: the approval asked, the approved attempt, the other thread's read; nothing more
    assert len(runner.trace) + runner.trace.dropped == 3
    assert [(r.tool, r.step) for r in runner.trace] == [("search", "attempt")]
    assert runner.trace.call_counts() == {"search": 1, "send": 1}


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True])
def test_an_invalid_trace_bound_is_a_value_error(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_records"):
        Trace(bad)
