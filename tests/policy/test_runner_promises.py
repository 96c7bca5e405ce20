"""ToolRunner keeps its promises at the edges (issue 10): a write never runs twice, the runner
never raises for model input, and what it remembers stays bounded. Real handler calls counted."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading

import pytest

from agentkit import (
    Budget,
    CallContext,
    IdempotencyStore,
    SQLiteIdempotencyStore,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    invoke_tool,
)
from agentkit.policy.stores import StoreError


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


class _Signal(logging.Handler):
    """Sets an event when the agentkit logger reports a late handler finishing (the moment
    the timed-out attempt has really returned)."""

    def __init__(self) -> None:
        super().__init__()
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "finished after the caller gave up" in record.getMessage():
            self.event.set()


# ------------------------------------------------------------------ point 1: the lookup race

def test_a_write_landing_while_the_lookup_runs_is_never_repeated():
    """The handler blocks until the lookup has looked; the lookup then waits for the write to
    land and the attempt to return, and answers its stale "not done". That answer proves
    nothing: the attempt was still running when the lookup started."""
    rows: dict[str, str] = {}
    looked = threading.Event()
    landed = threading.Event()
    handler_calls = []
    signal = _Signal()
    logger = logging.getLogger("agentkit")
    logger.addHandler(signal)

    def write(key: str, value: str) -> dict:
        handler_calls.append(key)
        looked.wait(10)  # still "running" while the lookup looks
        rows[key] = value
        landed.set()
        return {"saved": key}

    def lookup(key: str, value: str):
        answer = {"saved": key} if rows.get(key) == value else None
        looked.set()
        landed.wait(10)  # the write lands while the lookup runs …
        signal.event.wait(10)  # … and the attempt has returned before the lookup answers
        return answer

    spec = ToolSpec("save", "Save a value.", "reversible_write", 0.5, 3, 100, write,
                    status_lookup=lookup)
    runner = ToolRunner(ToolRegistry([spec]), sleep=Sleeps())
    try:
        result = runner.call("save", {"key": "k", "value": "v"})
    finally:
        logger.removeHandler(signal)
        looked.set()
        landed.set()
    assert result["ok"] is False and result["error"] == "outcome_unknown"
    assert result["retryable"] is False and result["attempts"] == 1
    assert handler_calls == ["k"]  # one real write, never a second beside or after it
    assert rows == {"k": "v"}


def test_not_done_after_the_attempt_returned_still_retries():
    """The other side of the race: an attempt that had returned before the lookup started
    (a disconnect) and a lookup saying "not done" is retried with the same key."""
    rows: dict[str, str] = {}
    handler_calls = []

    def write(key: str, value: str) -> dict:
        handler_calls.append(key)
        if len(handler_calls) == 1:
            raise ConnectionError("reset before commit")
        rows[key] = value
        return {"saved": key}

    def lookup(key: str, value: str):
        return {"saved": key} if rows.get(key) == value else None

    spec = ToolSpec("save", "Save a value.", "reversible_write", 1.0, 3, 100, write,
                    status_lookup=lookup)
    runner = ToolRunner(ToolRegistry([spec]), sleep=Sleeps())
    result = runner.call("save", {"key": "k", "value": "v"})
    assert result["ok"] is True and result["attempts"] == 2
    assert handler_calls == ["k", "k"] and rows == {"k": "v"}


# ------------------------------------------------------------------ point 3: rendering


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")

    __repr__ = __str__


def _huge_int() -> int:
    if not hasattr(sys, "get_int_max_str_digits"):  # Python 3.10: no limit, use an object
        raise pytest.skip("ints of any size render on this Python")
    return 10 ** (sys.get_int_max_str_digits() + 10)


@pytest.mark.parametrize("make", [Unprintable, _huge_int, lambda: {"x": Unprintable()}],
                         ids=["str_raises", "int_too_large", "nested"])
@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_an_unrenderable_write_result_is_ok_recorded_and_replayed(make, store, tmp_path):
    value = make()
    calls = []

    def write(key: str) -> object:
        calls.append(key)
        return value

    spec = ToolSpec("save", "Save.", "reversible_write", 2.0, 3, 100, write,
                    status_lookup=lambda key: None)
    backend = IdempotencyStore() if store == "memory" else SQLiteIdempotencyStore(tmp_path / "s.db")
    runner = ToolRunner(ToolRegistry([spec]), store=backend, sleep=Sleeps())
    first = runner.call("save", {"key": "k"})
    expected = f"<unrenderable {type(value).__name__}>"
    assert first == {"ok": True, "data": expected, "attempts": 1, "replayed": False}
    again = runner.call("save", {"key": "k"})
    assert again == {"ok": True, "data": expected, "attempts": 0, "replayed": True}
    assert calls == ["k"]  # the handler returned once; the repeat did not write again


def test_rendering_runs_inside_the_attempt_so_the_timeout_covers_it():
    release = threading.Event()
    rendering = threading.Event()

    class SlowText:
        def __str__(self) -> str:
            rendering.set()
            release.wait(5)  # rendering this value hangs until the test lets it go
            return "slow"

    calls = []

    def read() -> object:
        calls.append(1)
        return SlowText()

    spec = ToolSpec("slow", "Slow to render.", "read", 0.2, 1, 100, read,
                    parameters={"type": "object"})
    try:
        result = invoke_tool(ToolRegistry([spec]), "slow", {})
        assert rendering.is_set()  # the handler returned and rendering had begun …
        # … and the caller did not wait for it: the attempt's timeout covered rendering
        assert result == {"ok": False, "error": "outcome_unknown", "retryable": True}
    finally:
        release.set()
    assert calls == [1]


def test_a_str_subclass_s_length_is_not_trusted():
    class Liar(str):
        def __len__(self) -> int:
            return 3

        def __str__(self) -> str:
            return "lie"

    text = Liar("x" * 500)
    spec = ToolSpec("t", "T.", "read", 2.0, 1, 100, lambda: text, parameters={"type": "object"})
    result = invoke_tool(ToolRegistry([spec]), "t", {})
    assert result == {"ok": True, "data": "x" * 100, "truncated": True, "original_chars": 500}
    assert type(result["data"]) is str


def test_lone_surrogates_in_outputs_become_replacement_characters():
    spec = ToolSpec("t", "T.", "read", 2.0, 1, 100, lambda: "a\ud800b\udfffc",
                    parameters={"type": "object"})
    data_spec = ToolSpec("j", "J.", "read", 2.0, 1, 100, lambda: {"k": "x\udc80"},
                         parameters={"type": "object"})
    registry = ToolRegistry([spec, data_spec])
    assert invoke_tool(registry, "t", {})["data"] == "a\ufffdb\ufffdc"
    assert invoke_tool(registry, "j", {})["data"] == '{"k": "x\ufffd"}'
    for name in ("t", "j"):
        json.dumps(ToolRunner(registry).call(name, {})).encode("utf-8")


# ------------------------------------------------------------------ point 5: no thread

_NO_THREAD_CHILD = r"""
import json, threading
from agentkit import ToolRegistry, ToolRunner, ToolSpec, invoke_tool

calls = []
def handler(q: str) -> str:
    calls.append(q)
    return "ran"

spec = ToolSpec("t", "T.", "read", 1.0, 2, 100, handler, max_concurrency=1)
write = ToolSpec("w", "W.", "reversible_write", 1.0, 2, 100, handler, max_concurrency=1)
registry = ToolRegistry([spec, write])
entry = registry.entry("t")

real_start = threading.Thread.start
def no_thread(self):
    raise RuntimeError("can't start new thread")
threading.Thread.start = no_thread
out = {"invoke": invoke_tool(registry, "t", {"q": "a"}),
       "runner_read": ToolRunner(registry, sleep=lambda s: None).call("t", {"q": "b"}),
       "runner_write": ToolRunner(registry, sleep=lambda s: None).call("w", {"q": "c"})}
out["slot_free"] = entry.slot.acquire(timeout=0)
if out["slot_free"]:
    entry.slot.release()
threading.Thread.start = real_start
out["after"] = invoke_tool(registry, "t", {"q": "d"})
out["calls"] = calls
print(json.dumps(out))
"""


def test_when_no_worker_thread_can_start_the_attempt_is_busy_and_its_slot_is_freed():
    # A fresh interpreter, so that no idle worker thread exists and a new one must start.
    completed = subprocess.run([sys.executable, "-c", _NO_THREAD_CHILD], capture_output=True,
                               text=True, timeout=120, check=True)
    out = json.loads(completed.stdout.strip().splitlines()[-1])
    assert out["invoke"] == {"ok": False, "error": "busy", "retryable": True}
    assert out["runner_read"]["error"] == "busy" and out["runner_read"]["attempts"] == 0
    assert out["runner_write"]["error"] == "busy" and out["runner_write"]["attempts"] == 0
    assert out["slot_free"] is True  # the acquired slot was released: nothing holds it
    assert out["after"] == {"ok": True, "data": "ran"}
    assert out["calls"] == ["d"]  # nothing ran while no thread could start


# ------------------------------------------------------------------ approvals in the store


def _send_registry(calls: list[str]) -> ToolRegistry:
    def send(to: str) -> dict:
        calls.append(to)
        return {"sent": to}

    return ToolRegistry([ToolSpec("send", "Send.", "irreversible_write", 2.0, 1, 200, send)])


def test_pending_approvals_come_from_the_store_so_a_new_runner_sees_them(tmp_path):
    path = tmp_path / "approvals.db"
    calls: list[str] = []
    first = ToolRunner(_send_registry(calls), store=SQLiteIdempotencyStore(path),
                       context=CallContext(task_id="t1", principal="ana"))
    ana = first.call("send", {"to": "ana"})["approval_id"]
    bob = first.call("send", {"to": "bob"})["approval_id"]
    # A restarted kernel: a new store object, a new registry, a new runner on the same file.
    later = ToolRunner(_send_registry(calls), store=SQLiteIdempotencyStore(path))
    assert later.pending_approvals() == [
        {"approval_id": ana, "tool": "send", "arguments": {"to": "ana"}, "task_id": "t1",
         "principal": "ana"},
        {"approval_id": bob, "tool": "send", "arguments": {"to": "bob"}, "task_id": "t1",
         "principal": "ana"},
    ]
    assert later.approve(ana)["ok"] is True
    assert later.deny(bob)["error"] == "forbidden"
    assert first.pending_approvals() == [] and later.pending_approvals() == []
    assert calls == ["ana"]


_PENDING_CHILD = r"""
import json, sys
from agentkit import SQLiteIdempotencyStore, ToolRegistry, ToolRunner, ToolSpec
spec = ToolSpec("send", "Send.", "irreversible_write", 2.0, 1, 200, lambda to: to)
runner = ToolRunner(ToolRegistry([spec]), store=SQLiteIdempotencyStore(sys.argv[1]))
print(json.dumps([a["approval_id"] for a in runner.pending_approvals()]))
"""


def test_a_new_process_sees_the_approvals_an_earlier_one_opened(tmp_path):
    path = tmp_path / "approvals.db"
    calls: list[str] = []
    runner = ToolRunner(_send_registry(calls), store=SQLiteIdempotencyStore(path))
    asked = runner.call("send", {"to": "ana"})["approval_id"]
    done = subprocess.run([sys.executable, "-c", _PENDING_CHILD, str(path)], capture_output=True,
                          text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == [asked]
    assert calls == []


def test_expired_approvals_are_not_pending(tmp_path):
    now = [1000.0]
    calls: list[str] = []
    runner = ToolRunner(_send_registry(calls), approval_ttl_seconds=60, clock=lambda: now[0])
    old = runner.call("send", {"to": "ana"})["approval_id"]
    now[0] += 61
    assert runner.pending_approvals() == []
    assert runner.approve(old)["error"] == "forbidden"
    fresh = runner.call("send", {"to": "ana"})["approval_id"]
    assert fresh != old and [a["approval_id"] for a in runner.pending_approvals()] == [fresh]
    assert calls == []


class Recording(IdempotencyStore):
    """An in-memory store that records which approval methods the runner used."""

    def __init__(self) -> None:
        super().__init__()
        self.used: list[str] = []

    def create_approval(self, approval_id, record):
        self.used.append("create_approval")
        return super().create_approval(approval_id, record)

    def put_approval(self, approval_id, record):
        self.used.append("put_approval")
        return super().put_approval(approval_id, record)


def test_opening_an_approval_is_one_atomic_insert_if_absent():
    store = Recording()
    calls: list[str] = []
    runner = ToolRunner(_send_registry(calls), store=store)
    first = runner.call("send", {"to": "ana"})["approval_id"]
    again = runner.call("send", {"to": "ana"})["approval_id"]
    assert first == again
    assert "put_approval" not in store.used and store.used.count("create_approval") == 2
    assert len(store.list_approvals()) == 1


def test_racing_openers_in_two_processes_share_one_approval(tmp_path):
    path = tmp_path / "approvals.db"
    start = threading.Barrier(8)
    ids: list[str] = []

    def open_one() -> None:
        runner = ToolRunner(_send_registry([]), store=SQLiteIdempotencyStore(path))
        start.wait(10)
        ids.append(runner.call("send", {"to": "ana"})["approval_id"])

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(ids) == 8 and len(set(ids)) == 1
    assert len(SQLiteIdempotencyStore(path).list_approvals()) == 1


class Broken(IdempotencyStore):
    """A store whose approval records cannot be reached."""

    def __init__(self, failing: set[str]) -> None:
        super().__init__()
        self.failing = failing

    def _fail(self, name: str) -> None:
        if name in self.failing:
            raise StoreError(f"store at /nowhere: {name} failed (disk I/O error)")

    def create_approval(self, approval_id, record):
        self._fail("create_approval")
        return super().create_approval(approval_id, record)

    def get_approval(self, approval_id):
        self._fail("get_approval")
        return super().get_approval(approval_id)

    def update_approval(self, approval_id, expected_state, record):
        self._fail("update_approval")
        return super().update_approval(approval_id, expected_state, record)

    def decide_approval(self, approval_id, expected, record, audit):  # a decision's update
        self._fail("update_approval")
        return super().decide_approval(approval_id, expected, record, audit)


def test_a_store_failure_around_approvals_is_busy_and_nothing_runs():
    calls: list[str] = []
    runner = ToolRunner(_send_registry(calls), store=Broken({"create_approval"}))
    asked = runner.call("send", {"to": "ana"})
    assert asked == {"ok": False, "error": "busy", "retryable": True, "attempts": 0,
                     "replayed": False}
    store = Broken(set())
    runner = ToolRunner(_send_registry(calls), store=store)
    approval_id = runner.call("send", {"to": "ana"})["approval_id"]
    store.failing = {"get_approval"}
    assert runner.approve(approval_id)["error"] == "busy"
    assert runner.deny(approval_id)["error"] == "busy"
    store.failing = {"update_approval"}
    assert runner.approve(approval_id)["error"] == "busy"
    assert calls == []
    store.failing = set()
    assert runner.approve(approval_id)["ok"] is True and calls == ["ana"]


def test_with_the_budget_spent_no_approval_is_opened():
    store = IdempotencyStore()
    calls: list[str] = []
    runner = ToolRunner(_send_registry(calls), store=store, budget=Budget(0))
    result = runner.call("send", {"to": "ana"})
    assert result == {"ok": False, "error": "budget_exhausted", "retryable": False,
                      "attempts": 0, "replayed": False}
    assert store.list_approvals() == [] and runner.pending_approvals() == []
    capped = ToolRunner(_send_registry(calls), store=store,
                        budget=Budget(max_per_effect={"irreversible_write": 0}))
    assert capped.call("send", {"to": "bob"})["error"] == "budget_exhausted"
    assert store.list_approvals() == [] and calls == []


@pytest.mark.parametrize("attempts", [2, 3, 10])
def test_an_irreversible_write_that_could_be_retried_is_refused_when_made(attempts):
    with pytest.raises(ValueError, match="max_attempts must be 1"):
        ToolSpec("send", "Send.", "irreversible_write", 1.0, attempts, 100, lambda to: to)
    assert ToolSpec("send", "Send.", "irreversible_write", 1.0, 1, 100, lambda to: to)


# ------------------------------------------------------------------ memory

_MEMORY_CHILD = r"""
import gc, json, tracemalloc
from agentkit import ToolRegistry, ToolRunner, ToolSpec

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

big = ToolSpec("big", "Big.", "read", 30.0, 1, 2000, lambda n: "x" * 5_000_000 + str(n))
small = ToolSpec("small", "Small.", "read", 30.0, 1, 200, lambda n: {"n": n, "text": "hi " * 20})
runner = ToolRunner(ToolRegistry([big, small]))
for i in range(1000):
    runner.call("small", {"n": i})
gc.collect()
before = rss()
for i in range(50_000):
    runner.call("small", {"n": i})
gc.collect()
grown = rss() - before
tracemalloc.start()
gc.collect()
start = tracemalloc.get_traced_memory()[0]
for i in range(20):
    runner.call("big", {"n": i})
gc.collect()
held = tracemalloc.get_traced_memory()[0] - start
print(json.dumps({"grown": grown, "held": held, "kept": len(runner.trace),
                  "dropped": runner.trace.dropped, "counts": runner.trace.call_counts()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_memory_stays_bounded_over_50k_runner_calls():
    """Stated bounds: 50,000 calls grow RSS by under 48 MiB (measured: about 4 MB; before the
    fix, 100k calls grew it by ~229 MB), and 20 calls returning 5 MB each hold under 8 MiB
    afterwards (before: ~95 MB, every raw value kept alive by the trace)."""
    done = subprocess.run([sys.executable, "-c", _MEMORY_CHILD], capture_output=True, text=True,
                          timeout=600, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["grown"] < 48 * 2**20, out
    assert out["held"] < 8 * 2**20, out
    assert out["kept"] == 10_000 and out["dropped"] == 51_020 - 10_000
    assert out["counts"] == {"big": 20, "small": 51_000}  # counted though records were dropped


def test_the_trace_bound_is_configurable_and_keeps_the_latest():
    seen = []
    spec = ToolSpec("t", "T.", "read", 2.0, 1, 100, lambda n: seen.append(n) or n)
    runner = ToolRunner(ToolRegistry([spec]), max_trace_records=5)
    for n in range(12):
        runner.call("t", {"n": n})
    assert len(runner.trace) == 5 and runner.trace.dropped == 7
    assert [r.call_id for r in runner.trace] == [r.call_id for r in runner.trace.records]
    assert runner.trace.call_counts() == {"t": 12} and len(seen) == 12
    with pytest.raises(ValueError):
        ToolRunner(ToolRegistry([]), max_trace_records=0)


def test_a_trace_record_does_not_keep_the_handler_s_value_or_exception_alive(caplog):
    import gc
    import weakref

    caplog.set_level(logging.CRITICAL, logger="agentkit")  # pytest's log capture keeps records

    class Payload:
        pass

    refs: list[weakref.ref] = []

    def make() -> object:
        payload = Payload()
        refs.append(weakref.ref(payload))
        raise ConnectionError("dropped")  # the exception's frame holds `payload`

    spec = ToolSpec("t", "T.", "read", 2.0, 2, 100, make, parameters={"type": "object"})
    runner = ToolRunner(ToolRegistry([spec]), sleep=Sleeps())
    assert runner.call("t", {})["error"] == "transient_failure"
    gc.collect()
    assert len(refs) == 2 and all(ref() is None for ref in refs)
    # each record kept when its attempt returned (a time), never the attempt itself
    assert all(type(r._handle) is float and r.landed_at == r._handle for r in runner.trace)
