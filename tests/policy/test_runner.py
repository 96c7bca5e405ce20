"""ToolRunner: the policy of each effect (docs/design.md#runner-policy), counted in real handler calls."""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import pytest

from agentkit import (
    Budget,
    CallContext,
    IdempotencyStore,
    NotApplied,
    SQLiteIdempotencyStore,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
)
from agentkit.boundary.canonical import canonical_json


class Ledger:
    """A tiny external system: writes land here; the status lookup reads it back."""

    def __init__(self):
        self.rows: dict[str, str] = {}
        self.calls = 0
        self.lookups = 0
        self.lock = threading.Lock()

    def write(self, key: str, value: str) -> dict:
        with self.lock:
            self.calls += 1
            self.rows[key] = value
        return {"saved": key}

    def status(self, key: str, value: str):
        self.lookups += 1
        return {"saved": key} if self.rows.get(key) == value else None


class Sleeps(list):
    """An injected sleep that records its delays and never waits."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def runner_for(*specs, budget=None, store=None, sleep=None, **kw) -> ToolRunner:
    return ToolRunner(ToolRegistry(specs), budget=budget, store=store, sleep=sleep if sleep is not None else Sleeps(), **kw)


def read_spec(handler, attempts=3, timeout=1.0, **kw):
    return ToolSpec("lookup", "Look something up.", "read", timeout, attempts, 100, handler, **kw)


def write_spec(ledger, handler=None, lookup=True, attempts=3, timeout=1.0, **kw):
    return ToolSpec("save", "Save a value.", "reversible_write", timeout, attempts, 100,
                    handler or ledger.write, status_lookup=ledger.status if lookup else None, **kw)


def send_spec(handler, attempts=1, timeout=1.0, **kw):
    return ToolSpec("send", "Send a message.", "irreversible_write", timeout, attempts, 100, handler, **kw)


# ------------------------------------------------------------------ reads

def test_read_retries_transient_faults_up_to_max_attempts(counted):
    failures = iter([ConnectionError(), TimeoutError()])

    def flaky(q: str) -> str:
        exc = next(failures, None)
        if exc:
            raise exc
        return "found"

    handler = counted(flaky)
    sleeps = Sleeps()
    runner = runner_for(read_spec(handler), sleep=sleeps)
    result = runner.call("lookup", {"q": "x"})
    assert result == {"ok": True, "data": "found", "attempts": 3, "replayed": False}
    assert handler.calls == 3 and runner.budget.used == 3
    assert len(sleeps) == 2  # a backoff before each retry


def test_read_gives_up_after_max_attempts(counted):
    def down(q: str) -> str:
        raise ConnectionError("down")

    handler = counted(down)
    runner = runner_for(read_spec(handler, attempts=2))
    assert runner.call("lookup", {"q": "x"}) == {
        "ok": False, "error": "transient_failure", "retryable": True, "attempts": 2, "replayed": False}
    assert handler.calls == 2


def test_read_does_not_retry_a_tool_failure(counted):
    handler = counted(lambda q: 1 / 0)
    runner = runner_for(read_spec(handler, parameters={"type": "object", "properties": {"q": {"type": "string"}}}))
    assert runner.call("lookup", {"q": "x"})["error"] == "tool_failure"
    assert handler.calls == 1


def test_read_retries_a_timeout(counted):
    gate = threading.Event()
    calls = []

    def slow_once(q: str) -> str:
        calls.append(q)
        if len(calls) == 1:
            gate.wait(10)
        return "second time lucky"

    runner = runner_for(read_spec(slow_once, timeout=0.05))
    try:
        result = runner.call("lookup", {"q": "x"})
    finally:
        gate.set()
    assert result["ok"] and result["attempts"] == 2 and len(calls) == 2


def test_backoff_is_jittered_exponential_unless_testing():
    import agentkit
    from agentkit.policy.backoff import Backoff

    agentkit.set_testing(False)
    try:
        backoff = Backoff(base=0.1, cap=1.0, seed=1)
        delays = [backoff.delay(n) for n in range(1, 6)]
    finally:
        agentkit.set_testing(True)
    for n, delay in enumerate(delays, start=1):
        ceiling = min(1.0, 0.1 * 2 ** (n - 1))
        assert ceiling / 2 <= delay < ceiling
    assert Backoff().delay(3) == 0.0  # testing switch on: instant


def test_invalid_arguments_and_unknown_tools_cost_nothing(counted):
    handler = counted(lambda q: q)
    runner = runner_for(read_spec(handler, parameters={"type": "object", "properties": {"q": {"type": "string"}},
                                                        "required": ["q"], "additionalProperties": False}))
    assert runner.call("lookup", {})["error"] == "invalid_arguments"
    assert runner.call("nope", {"q": "x"})["error"] == "unknown_tool"
    assert runner.call("lookup", "q=x")["error"] == "invalid_arguments"
    assert handler.calls == 0 and runner.budget.used == 0
    assert list(runner.trace.to_frame()["step"]) == ["refused"] * 3


# ------------------------------------------------------------------ reversible writes

def test_same_write_repeated_runs_once():
    ledger = Ledger()
    runner = runner_for(write_spec(ledger))
    first = runner.call("save", {"key": "k", "value": "v"})
    second = runner.call("save", {"key": "k", "value": "v"})
    assert first == {"ok": True, "data": '{"saved": "k"}', "attempts": 1, "replayed": False}
    assert second == {"ok": True, "data": '{"saved": "k"}', "attempts": 0, "replayed": True}
    assert ledger.calls == 1 and runner.trace.call_counts() == {"save": 1}


def test_disconnect_after_the_write_landed_is_settled_by_the_status_lookup():
    ledger = Ledger()

    def write_then_drop(key: str, value: str) -> dict:
        ledger.write(key, value)
        raise ConnectionError("connection reset after commit")

    sleeps = Sleeps()
    runner = runner_for(write_spec(ledger, handler=write_then_drop), sleep=sleeps)
    result = runner.call("save", {"key": "k", "value": "v"})
    assert result == {"ok": True, "data": '{"saved": "k"}', "attempts": 1, "replayed": False}
    assert ledger.calls == 1 and ledger.lookups == 1
    assert len(sleeps) == 1  # the lookup comes after the backoff
    assert runner.budget.used == 2  # one attempt, one lookup
    steps = list(runner.trace.to_frame()["step"])
    assert steps == ["attempt", "status_lookup"]


def test_disconnect_before_the_write_retries_with_the_same_key():
    ledger = Ledger()
    state = {"fail": 1}

    def drop_first(key: str, value: str) -> dict:
        if state["fail"]:
            state["fail"] -= 1
            raise ConnectionError("reset before commit")
        return ledger.write(key, value)

    runner = runner_for(write_spec(ledger, handler=drop_first))
    result = runner.call("save", {"key": "k", "value": "v"})
    assert result["ok"] and result["attempts"] == 2
    assert ledger.calls == 1 and ledger.lookups == 1
    assert list(runner.trace.to_frame()["outcome"]) == ["transient_failure", "not_done", "ok"]


def test_timeout_after_commit_is_recovered_after_the_backoff():
    ledger = Ledger()
    release = threading.Event()
    order = []

    def commit_then_hang(key: str, value: str) -> dict:
        ledger.write(key, value)
        release.wait(10)
        return {"saved": key}

    def sleep(seconds):
        order.append("sleep")

    spec = write_spec(ledger, handler=commit_then_hang, timeout=0.05)
    original_status = ledger.status
    ledger.status = lambda key, value: order.append("lookup") or original_status(key, value)  # type: ignore[method-assign]
    spec = ToolSpec(spec.name, spec.description, spec.effect, 0.05, 3, 100, commit_then_hang,
                    status_lookup=ledger.status)
    runner = runner_for(spec, sleep=sleep)
    try:
        result = runner.call("save", {"key": "k", "value": "v"})
    finally:
        release.set()
    assert result == {"ok": True, "data": '{"saved": "k"}', "attempts": 1, "replayed": False}
    assert ledger.calls == 1
    assert order == ["sleep", "lookup"]


def test_no_second_attempt_beside_a_timed_out_attempt_still_running():
    ledger = Ledger()
    release = threading.Event()
    entered = []

    def hang_before_commit(key: str, value: str) -> dict:
        entered.append(key)
        release.wait(10)
        return ledger.write(key, value)

    runner = runner_for(write_spec(ledger, handler=hang_before_commit, timeout=0.05))
    try:
        result = runner.call("save", {"key": "k", "value": "v"})
        # "not done" proves nothing while the first attempt may still commit
        assert result == {"ok": False, "error": "outcome_unknown", "retryable": False,
                          "attempts": 1, "replayed": False}
        assert entered == ["k"] and ledger.lookups == 1
        # the claim stays: asking again does not write beside it
        again = runner.call("save", {"key": "k", "value": "v"})
        assert again["error"] == "in_progress" and again["attempts"] == 0
        assert entered == ["k"]
    finally:
        release.set()


def test_once_the_late_attempt_returns_the_next_call_asks_the_lookup():
    ledger = Ledger()
    release = threading.Event()
    entered = []

    def hang_then_commit(key: str, value: str) -> dict:
        entered.append(key)
        release.wait(10)
        return ledger.write(key, value)

    runner = runner_for(write_spec(ledger, handler=hang_then_commit, timeout=0.05))
    first = runner.call("save", {"key": "k", "value": "v"})
    assert first["error"] == "outcome_unknown" and ledger.calls == 0
    release.set()
    runner.trace.records[0]._handle.done.wait(10)  # the late attempt commits and returns
    deadline = time.monotonic() + 10
    result = runner.call("save", {"key": "k", "value": "v"})
    while result.get("error") == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.01)  # the done-callback runs just after the handler returns
        result = runner.call("save", {"key": "k", "value": "v"})
    # not in_progress for a whole lease: the lookup finds the write, no second attempt
    assert result == {"ok": True, "data": '{"saved": "k"}', "attempts": 0, "replayed": False}
    assert entered == ["k"] and ledger.calls == 1
    assert runner.call("save", {"key": "k", "value": "v"})["replayed"]


def test_outcome_unknown_without_a_lookup_stays_unknown_until_released(counted):
    def drop(key: str, value: str) -> dict:
        raise ConnectionError("reset")

    handler = counted(drop)
    store = IdempotencyStore()
    runner = runner_for(ToolSpec("save", "Save.", "reversible_write", 1.0, 3, 100, handler), store=store)
    assert runner.call("save", {"key": "k", "value": "v"})["error"] == "outcome_unknown"
    again = runner.call("save", {"key": "k", "value": "v"})
    assert again["error"] == "outcome_unknown" and again["retryable"] is False
    assert handler.calls == 1  # never rewritten blindly
    digest = hashlib.sha256(canonical_json({"key": "k", "value": "v"}).encode()).hexdigest()
    store.release(f"default:save:{digest}")  # the default key: task, tool, argument hash
    assert runner.call("save", {"key": "k", "value": "v"})["error"] == "outcome_unknown"
    assert handler.calls == 2  # a person released the key: one more real try


def test_without_a_status_lookup_a_timeout_is_never_rewritten(counted):
    ledger = Ledger()
    release = threading.Event()

    def hang(key: str, value: str) -> dict:
        release.wait(10)
        return ledger.write(key, value)

    handler = counted(hang)
    runner = runner_for(write_spec(ledger, handler=handler, lookup=False, timeout=0.05))
    try:
        result = runner.call("save", {"key": "k", "value": "v"})
    finally:
        release.set()
    assert result["error"] == "outcome_unknown" and result["retryable"] is False
    assert handler.calls == 1 and ledger.lookups == 0


def test_a_failing_status_lookup_means_unknown(counted):
    def write(key: str, value: str) -> dict:
        raise ConnectionError()

    def broken_lookup(key: str, value: str):
        raise RuntimeError("status API down")

    handler = counted(write)
    spec = ToolSpec("save", "Save.", "reversible_write", 1.0, 3, 100, handler, status_lookup=broken_lookup)
    runner = runner_for(spec)
    result = runner.call("save", {"key": "k", "value": "v"})
    assert result["error"] == "outcome_unknown" and result["retryable"] is False
    assert handler.calls == 1


def test_same_key_other_payload_is_a_conflict():
    ledger = Ledger()
    spec = write_spec(ledger, idempotency_key=lambda ctx, args: f"{ctx.task_id}:{args['key']}")
    runner = runner_for(spec)
    assert runner.call("save", {"key": "k", "value": "v1"})["ok"]
    conflict = runner.call("save", {"key": "k", "value": "v2"})
    assert conflict == {"ok": False, "error": "idempotency_conflict", "retryable": False,
                        "attempts": 0, "replayed": False}
    assert ledger.calls == 1


def test_the_default_key_names_task_tool_and_arguments():
    ledger = Ledger()
    spec = write_spec(ledger)
    store = IdempotencyStore()
    first = ToolRunner(ToolRegistry([spec]), store=store, context=CallContext(task_id="t1"), sleep=Sleeps())
    other_task = ToolRunner(ToolRegistry([write_spec(ledger)]), store=store,
                            context=CallContext(task_id="t2"), sleep=Sleeps())
    first.call("save", {"key": "k", "value": "v"})
    assert first.call("save", {"value": "v", "key": "k"})["replayed"]  # key order does not matter
    assert not other_task.call("save", {"key": "k", "value": "v"})["replayed"]
    assert ledger.calls == 2


def test_a_write_that_says_not_applied_leaves_the_key_free(counted):
    state = {"n": 0}

    def fail_first(key: str, value: str) -> str:
        state["n"] += 1
        if state["n"] == 1:
            raise NotApplied("validation failed downstream")
        return "saved"

    handler = counted(fail_first)
    runner = runner_for(ToolSpec("save", "Save.", "reversible_write", 1.0, 3, 100, handler))
    assert runner.call("save", {"key": "k", "value": "v"})["error"] == "tool_failure"
    assert runner.call("save", {"key": "k", "value": "v"})["ok"]
    assert handler.calls == 2


def test_a_durable_store_replays_after_restart(tmp_path):
    ledger = Ledger()
    path = tmp_path / "store.sqlite"
    with SQLiteIdempotencyStore(path) as store:
        assert runner_for(write_spec(ledger), store=store).call("save", {"key": "k", "value": "v"})["ok"]
    with SQLiteIdempotencyStore(path) as store:
        again = runner_for(write_spec(ledger), store=store).call("save", {"key": "k", "value": "v"})
    assert again["replayed"] and ledger.calls == 1


# ------------------------------------------------------------------ irreversible writes

def test_irreversible_write_waits_for_approval_then_runs_once(counted):
    handler = counted(lambda to, body: {"sent": to})
    spec = send_spec(handler, parameters={"type": "object", "properties": {
        "to": {"type": "string"}, "body": {"type": "string"}}})
    runner = runner_for(spec)
    asked = runner.call("send", {"to": "ana", "body": "hi"})
    assert asked["error"] == "approval_required" and asked["retryable"] is False
    assert asked["attempts"] == 0 and handler.calls == 0
    approval_id = asked["approval_id"]
    assert runner.call("send", {"to": "ana", "body": "hi"})["approval_id"] == approval_id
    assert runner.pending_approvals() == [{"approval_id": approval_id, "tool": "send",
                                           "arguments": {"to": "ana", "body": "hi"},
                                           "task_id": "default", "principal": "anonymous"}]
    done = runner.approve(approval_id)
    assert done == {"ok": True, "data": '{"sent": "ana"}', "attempts": 1, "replayed": False}
    again = runner.approve(approval_id)
    assert again == {"ok": True, "data": '{"sent": "ana"}', "attempts": 0, "replayed": True}
    assert runner.call("send", {"to": "ana", "body": "hi"})["replayed"]
    assert handler.calls == 1 and runner.pending_approvals() == []


def test_an_approval_is_bound_to_its_arguments(counted):
    handler = counted(lambda to, body: to)
    runner = runner_for(send_spec(handler, parameters={"type": "object"}))
    first = runner.call("send", {"to": "ana", "body": "hi"})["approval_id"]
    second = runner.call("send", {"to": "bob", "body": "hi"})["approval_id"]
    assert first != second
    assert runner.approve(first)["data"] == "ana"
    assert handler.calls == 1  # approving one id never runs the other call
    assert runner.approve(second)["data"] == "bob"
    assert handler.calls == 2


def test_deny_settles_as_forbidden(counted):
    handler = counted(lambda to, body: to)
    runner = runner_for(send_spec(handler, parameters={"type": "object"}))
    approval_id = runner.call("send", {"to": "ana", "body": "hi"})["approval_id"]
    assert runner.deny(approval_id) == {"ok": False, "error": "forbidden", "retryable": False,
                                        "attempts": 0, "replayed": False}
    assert runner.approve(approval_id)["error"] == "forbidden"
    assert runner.call("send", {"to": "ana", "body": "hi"})["error"] == "forbidden"
    assert handler.calls == 0


@pytest.mark.parametrize("bad_id", ["apr-unknown", "", None, 42, ["apr"]])
def test_unknown_approval_ids_are_forbidden(bad_id):
    runner = runner_for(send_spec(lambda to: to))
    assert runner.approve(bad_id)["error"] == "forbidden"
    assert runner.deny(bad_id)["error"] == "forbidden"


def test_approvals_expire(counted):
    now = [1000.0]
    handler = counted(lambda to: to)
    runner = runner_for(send_spec(handler), approval_ttl_seconds=60, clock=lambda: now[0])
    old = runner.call("send", {"to": "ana"})["approval_id"]
    now[0] += 61
    assert runner.approve(old)["error"] == "forbidden"
    fresh = runner.call("send", {"to": "ana"})["approval_id"]
    assert fresh != old
    assert runner.approve(old)["error"] == "forbidden"  # an expired id stays refused
    assert runner.approve(fresh)["ok"] and handler.calls == 1


def test_an_irreversible_failure_is_not_retried(counted):
    """docs/design.md#irreversible-writes: a disconnect does not prove the write failed; with no status lookup
    the outcome is unknown (never transient_failure), and nothing is retried."""
    def drop(to: str) -> str:
        raise ConnectionError("reset")

    handler = counted(drop)
    runner = runner_for(send_spec(handler))
    approval_id = runner.call("send", {"to": "ana"})["approval_id"]
    result = runner.approve(approval_id)
    assert result == {"ok": False, "error": "outcome_unknown", "retryable": False,
                      "attempts": 1, "replayed": False}
    assert runner.approve(approval_id)["error"] == "outcome_unknown"  # the settled result
    assert handler.calls == 1


def test_an_irreversible_timeout_is_outcome_unknown_once(counted):
    release = threading.Event()
    handler = counted(lambda to: release.wait(10))
    runner = runner_for(send_spec(handler, timeout=0.05, parameters={"type": "object"}))
    approval_id = runner.call("send", {"to": "ana"})["approval_id"]
    try:
        result = runner.approve(approval_id)
        assert result["error"] == "outcome_unknown" and result["retryable"] is False
        assert runner.approve(approval_id)["error"] == "outcome_unknown"
    finally:
        release.set()
    assert handler.calls == 1


def test_concurrent_approvals_run_once(counted):
    gate = threading.Event()
    handler = counted(lambda to: gate.wait(10) and to)
    runner = runner_for(send_spec(handler, timeout=5))
    approval_id = runner.call("send", {"to": "ana"})["approval_id"]
    results = []
    threads = [threading.Thread(target=lambda: results.append(runner.approve(approval_id))) for _ in range(4)]
    for t in threads:
        t.start()
    while handler.calls == 0:
        threading.Event().wait(0.01)
    gate.set()
    for t in threads:
        t.join(10)
    assert handler.calls == 1
    assert sorted(r.get("error", "ok") for r in results).count("ok") >= 1


def test_approvals_survive_a_restart(tmp_path, counted):
    handler = counted(lambda to: to)
    path = tmp_path / "store.sqlite"
    with SQLiteIdempotencyStore(path) as store:
        approval_id = runner_for(send_spec(handler), store=store).call("send", {"to": "ana"})["approval_id"]
    with SQLiteIdempotencyStore(path) as store:
        result = runner_for(send_spec(handler), store=store).approve(approval_id)
    assert result["ok"] and handler.calls == 1


# ------------------------------------------------------------------ budget

def test_retries_spend_the_budget(counted):
    handler = counted(lambda q: (_ for _ in ()).throw(ConnectionError()))
    runner = runner_for(read_spec(handler, attempts=5, parameters={"type": "object"}), budget=Budget(2))
    result = runner.call("lookup", {"q": "x"})
    assert result["error"] == "budget_exhausted" and result["attempts"] == 2
    assert handler.calls == 2 and runner.budget.remaining == 0
    assert runner.call("lookup", {"q": "y"})["error"] == "budget_exhausted"
    assert handler.calls == 2


def test_an_exhausted_budget_runs_nothing(counted):
    handler = counted(lambda q: q)
    runner = runner_for(read_spec(handler, parameters={"type": "object"}), budget=Budget(0))
    assert runner.call("lookup", {"q": "x"}) == {"ok": False, "error": "budget_exhausted",
                                                "retryable": False, "attempts": 0, "replayed": False}
    assert handler.calls == 0


def test_budget_caps_per_effect(counted):
    handler = counted(lambda to: to)
    runner = runner_for(send_spec(handler), budget=Budget(max_per_effect={"irreversible_write": 1}))
    first = runner.call("send", {"to": "ana"})["approval_id"]
    second = runner.call("send", {"to": "bob"})["approval_id"]
    assert runner.approve(first)["ok"]
    assert runner.approve(second)["error"] == "budget_exhausted"
    assert handler.calls == 1


def test_budget_is_thread_safe():
    budget = Budget(100)
    taken = []
    threads = [threading.Thread(target=lambda: taken.extend(budget.spend() for _ in range(50)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert taken.count(True) == 100 and budget.used == 100 and budget.remaining == 0
    assert Budget().remaining is None


def test_busy_spends_no_budget():
    release = threading.Event()
    entered = threading.Event()

    def hold(q: str) -> str:
        entered.set()
        release.wait(10)
        return q

    spec = read_spec(hold, attempts=1, timeout=0.05, max_concurrency=1)
    runner = runner_for(spec, budget=Budget(10))
    try:
        assert runner.call("lookup", {"q": "a"})["error"] == "outcome_unknown"
        assert entered.is_set() and runner.budget.used == 1
        assert runner.call("lookup", {"q": "b"})["error"] == "busy"
        assert runner.budget.used == 1
    finally:
        release.set()


# ------------------------------------------------------------------ trace

def test_trace_frame_and_counts(counted):
    ledger = Ledger()
    runner = runner_for(write_spec(ledger))
    runner.call("save", {"key": "k", "value": "v"})
    runner.call("save", {"key": "k", "value": "v"})
    frame = runner.trace.to_frame()
    assert list(frame.columns) == ["call_id", "tool", "effect", "step", "attempt", "outcome",
                                   "handler_ran", "replayed"]
    assert list(frame["step"]) == ["attempt", "replay"]
    assert list(frame["handler_ran"]) == [True, False]
    assert "duration_s" in runner.trace.to_frame(durations=True).columns
    assert runner.trace.call_counts() == {"save": 1}


def test_a_refusal_before_the_handler_does_not_use_up_the_approval(counted):
    handler = counted(lambda to: to)
    store = IdempotencyStore()
    budget = Budget(1)
    spent = runner_for(send_spec(handler), store=store, budget=budget)
    approval_id = spent.call("send", {"to": "ana"})["approval_id"]
    assert budget.spend()  # the task spends its last unit elsewhere before the approval
    assert spent.approve(approval_id)["error"] == "budget_exhausted"
    fresh = runner_for(send_spec(handler), store=store)
    assert fresh.approve(approval_id) == {"ok": True, "data": "ana", "attempts": 1, "replayed": False}
    assert handler.calls == 1


def test_results_keep_one_key_order_when_replayed():
    ledger = Ledger()
    runner = runner_for(write_spec(ledger))
    first = runner.call("save", {"key": "k", "value": "v"})
    second = runner.call("save", {"key": "k", "value": "v"})
    assert list(first) == list(second) == ["ok", "data", "attempts", "replayed"]


def test_the_hosts_call_id_names_the_call_in_the_trace() -> None:
    """docs/design.md#public-api (rev 3): a host's own tool-call id names the call."""
    import asyncio

    registry = ToolRegistry()
    calls: list[str] = []

    def echo(text: str) -> str:
        calls.append(text)
        return text

    registry.register(ToolSpec("echo", "Echo.", "read", 1.0, 1, 100, echo))
    runner = ToolRunner(registry)
    assert runner.call("echo", {"text": "a"}, call_id="call_abc")["ok"]
    assert asyncio.run(runner.acall("echo", {"text": "b"}, call_id="call_def"))["ok"]
    assert runner.call("echo", {"text": "c"})["ok"]
    ids = [record.call_id for record in runner.trace]
    assert ids[:2] == ["call_abc", "call_def"] and ids[2] not in ("call_abc", "call_def", "")
    assert calls == ["a", "b", "c"]


@pytest.mark.parametrize("effect", ["reversible_write", "irreversible_write"])
def test_numbers_equal_in_value_are_one_intent_and_a_bool_is_not_a_number(effect: str) -> None:
    """``5`` and ``5.0`` are one amount: the default key is one, the write runs once (before,
    ``5.0`` ran a second time). ``True`` and ``1`` stay two intents."""
    ran: list[Any] = []

    def pay(cents: Any) -> str:
        ran.append(cents)
        return f"paid {cents}"

    runner = ToolRunner(ToolRegistry([ToolSpec("pay", "Pay.", effect, 2.0, 1, 100, pay)]))

    def call(cents: Any) -> dict[str, Any]:
        result = runner.call("pay", {"cents": cents})
        if result.get("error") == "approval_required":
            result = runner.approve(result["approval_id"])
        return result

    first, again = call(5), call(5.0)
    assert first["data"] == again["data"] == "paid 5"
    assert again["replayed"] is True and ran == [5]
    call(True)
    call(1)
    assert ran == [5, True, 1]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_approve_and_deny_take_the_hosts_call_id(driver: str) -> None:
    import asyncio

    sent: list[str] = []

    def send(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    runner = ToolRunner(ToolRegistry([ToolSpec("send", "Send.", "irreversible_write", 2.0, 1,
                                               100, send)]))
    seen: list[tuple[str, str]] = []
    runner.add_observer(lambda event: seen.append((event.kind, event.call_id)))
    ada = runner.call("send", {"to": "ada"}, call_id="host-1")
    bob = runner.call("send", {"to": "bob"}, call_id="host-2")
    if driver == "sync":
        runner.approve(ada["approval_id"], call_id="host-1")
        runner.deny(bob["approval_id"], call_id="host-2")
    else:
        asyncio.run(runner.aapprove(ada["approval_id"], call_id="host-1"))
        asyncio.run(runner.adeny(bob["approval_id"], call_id="host-2"))
    assert sent == ["ada"]
    assert {call_id for _, call_id in seen} == {"host-1", "host-2"}
    assert {r.call_id for r in runner.trace.records} == {"host-1", "host-2"}
    runner.approve(ada["approval_id"], call_id="")  # not usable: the runner names it itself
    assert seen[-1][1].startswith("call-")


def test_for_task_shares_everything_but_the_task_id(counted):
    handler = counted(lambda key, value: "saved")
    handler.__name__ = "save"
    spec = ToolSpec("save", "Save.", "reversible_write", 1.0, 1, 100, handler,
                    parameters={"type": "object", "properties": {"key": {"type": "string"},
                                                                 "value": {"type": "string"}}})
    budget = Budget(max_attempts=10)
    base = ToolRunner(ToolRegistry([spec]), budget=budget,
                      context=CallContext(task_id="a", principal="ada"), sleep=Sleeps())
    other = base.for_task("b")
    assert base.for_task("a") is base
    assert (other.context.task_id, other.context.principal) == ("b", "ada")
    assert other.store is base.store and other.budget is budget and other.trace is base.trace
    assert base.call("save", {"key": "k", "value": "v"})["ok"]
    assert not other.call("save", {"key": "k", "value": "v"})["replayed"]  # its own key
    assert base.for_task("b").call("save", {"key": "k", "value": "v"})["replayed"]
    assert handler.calls == 2 and budget.used == 2
    assert len(base.trace.records) >= 2
    with pytest.raises(ValueError):
        base.for_task("")
