"""Fault wrappers (agentkit.demo.faults): each one fails the way it says, counts the handler's real
calls, and is deterministic: blocking faults wait on an event that the test releases."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agentkit import (
    Budget,
    CallContext,
    NotApplied,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    faults,
    invoke_tool,
)
from agentkit.boundary.schema import derive_parameters

WAIT = 10.0  # upper bound on every wait for another thread


def lookup(order_id: str, verbose: bool = False) -> dict[str, Any]:
    """Look an order up."""
    return {"order_id": order_id, "state": "shipped"}


class Ledger:
    """A tiny write target: the writes that really landed."""

    def __init__(self) -> None:
        self.entries: list[str] = []

    def write(self, ref: str) -> dict[str, Any]:
        self.entries.append(ref)
        return {"ref": ref, "saved": True}


def spec_for(
    handler: Any, *, effect: str = "read", timeout: float = 5.0, max_output_chars: int = 100,
    **changes: Any,
) -> ToolSpec:
    attempts = 1 if effect == "irreversible_write" else 3  # an irreversible write never retries
    return ToolSpec("tool", "A test tool.", effect, timeout, attempts, max_output_chars, handler,
                    **changes)


class Caller:
    """Calls ``fn`` on its own thread, so a test can watch a blocked call from outside."""

    def __init__(self, fn: Any, **kwargs: Any) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(fn, kwargs), daemon=True)
        self.thread.start()

    def _run(self, fn: Any, kwargs: dict[str, Any]) -> None:
        try:
            self.result = fn(**kwargs)
        except BaseException as exc:  # handed to the test
            self.error = exc
        finally:
            self.done.set()


# ------------------------------------------------------------------ wrapping and counting


@pytest.mark.parametrize(
    "make",
    [
        faults.count_calls,
        lambda fn: faults.fail_times(fn, 2),
        faults.deny,
        faults.hang,
        faults.commit_then_timeout,
        faults.huge_output,
        faults.leak_secret,
        faults.slow_lookup,
    ],
    ids=["count_calls", "fail_times", "deny", "hang", "commit_then_timeout", "huge_output",
         "leak_secret", "slow_lookup"],
)
def test_every_fault_keeps_the_handlers_name_doc_and_schema(make):
    fault = make(lookup)
    assert isinstance(fault, faults.Fault)
    assert fault.__wrapped__ is lookup
    assert fault.__name__ == "lookup" and fault.__doc__ == "Look an order up."
    assert fault.calls == 0 and fault.inner_calls == 0
    registered = ToolRegistry([spec_for(fault)]).get("tool")
    assert registered.parameters == derive_parameters(lookup)
    fault.release()


def test_count_calls_passes_through_and_counts():
    fault = faults.count_calls(lookup)
    assert fault(order_id="A1") == {"order_id": "A1", "state": "shipped"}
    assert fault(order_id="A2", verbose=True)["order_id"] == "A2"
    assert (fault.calls, fault.inner_calls) == (2, 2)


def test_counting_is_thread_safe():
    fault = faults.count_calls(lambda: None)
    barrier = threading.Barrier(8)

    def hammer() -> None:
        barrier.wait(WAIT)
        for _ in range(200):
            fault()

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert fault.calls == 1600 and fault.inner_calls == 1600


def test_nested_faults_count_separately():
    inner = faults.fail_times(lookup, 1)
    outer = faults.count_calls(inner)
    with pytest.raises(ConnectionError):
        outer(order_id="A1")
    assert outer(order_id="A1")["state"] == "shipped"
    assert (outer.calls, inner.calls, inner.inner_calls) == (2, 2, 1)
    assert ToolRegistry([spec_for(outer)]).get("tool").parameters == derive_parameters(lookup)


def test_wait_for_calls_is_an_event_not_a_poll():
    fault = faults.count_calls(lambda: None)
    assert fault.wait_for_calls(0, timeout=0)
    assert not fault.wait_for_calls(1, timeout=0.01)
    caller = Caller(fault)
    assert fault.wait_for_calls(1, timeout=WAIT)
    assert caller.done.wait(WAIT)


# ------------------------------------------------------------------ fail_times, deny


def test_fail_times_raises_for_the_first_n_calls_then_calls_fn():
    fault = faults.fail_times(lookup, 2)
    for number in (1, 2):
        with pytest.raises(ConnectionError, match=f"call {number}"):
            fault(order_id="A1")
    assert fault(order_id="A1")["state"] == "shipped"
    assert (fault.calls, fault.inner_calls) == (3, 1)


def test_fail_times_after_call_lets_the_write_land_first():
    ledger = Ledger()
    fault = faults.fail_times(ledger.write, 1, after_call=True)
    with pytest.raises(ConnectionError):
        fault(ref="w1")
    assert ledger.entries == ["w1"]  # the write landed; only the answer was lost
    assert fault(ref="w2") == {"ref": "w2", "saved": True}
    assert ledger.entries == ["w1", "w2"] and fault.calls == 2


def test_fail_times_takes_an_exception_class_or_instance():
    with pytest.raises(TimeoutError):
        faults.fail_times(lookup, 1, TimeoutError)(order_id="A1")
    boom = OSError("disk on fire")
    with pytest.raises(OSError, match="disk on fire"):
        faults.fail_times(lookup, 1, boom)(order_id="A1")
    assert faults.fail_times(lookup, 0)(order_id="A1")["state"] == "shipped"
    with pytest.raises(ValueError):
        faults.fail_times(lookup, -1)


def test_fail_times_through_the_runner_retries_a_read_to_success():
    fault = faults.fail_times(lookup, 2)
    runner = ToolRunner(ToolRegistry([spec_for(fault)]), sleep=lambda s: None)
    result = runner.call("tool", {"order_id": "A1"})
    assert result["ok"] and result["attempts"] == 3
    assert fault.calls == 3 and runner.budget.used == 3


def test_deny_raises_permission_error_and_never_calls_fn():
    fault = faults.deny(lookup)
    with pytest.raises(PermissionError):
        fault(order_id="A1")
    assert (fault.calls, fault.inner_calls) == (1, 0)


def test_deny_is_forbidden_and_not_retried_even_for_a_read():
    fault = faults.deny(lookup)
    runner = ToolRunner(ToolRegistry([spec_for(fault)]), sleep=lambda s: None)
    result = runner.call("tool", {"order_id": "A1"})
    assert (result["error"], result["retryable"], result["attempts"]) == ("forbidden", False, 1)
    assert fault.calls == 1


# ------------------------------------------------------------------ blocking faults


def test_hang_blocks_until_released_then_calls_fn():
    fault = faults.hang(lookup)
    caller = Caller(fault, order_id="A1")
    assert fault.wait_for_calls(1, WAIT)
    assert not caller.done.is_set() and fault.inner_calls == 0  # blocked before fn
    fault.release()
    fault.release()  # releasing again is harmless
    assert caller.done.wait(WAIT)
    assert caller.result == {"order_id": "A1", "state": "shipped"}
    assert (fault.calls, fault.inner_calls) == (1, 1) and fault.released
    assert fault(order_id="A2")["order_id"] == "A2"  # released for good: later calls pass


def test_hang_is_bounded_even_if_nobody_releases_it():
    fault = faults.hang(lookup, max_block=0.05)
    caller = Caller(fault, order_id="A1")
    assert caller.done.wait(WAIT)
    assert caller.result["order_id"] == "A1" and not fault.released


def test_hang_through_the_boundary_is_outcome_unknown_and_frees_its_thread_on_release():
    fault = faults.hang(lookup)
    registry = ToolRegistry([spec_for(fault, timeout=0.05)])
    result = invoke_tool(registry, "tool", {"order_id": "A1"})
    assert (result["error"], result["retryable"]) == ("outcome_unknown", True)
    assert fault.calls == 1 and fault.inner_calls == 0
    fault.release()
    assert fault.wait_for_calls(1, WAIT)


def test_commit_then_timeout_writes_then_blocks():
    ledger = Ledger()
    fault = faults.commit_then_timeout(ledger.write)
    caller = Caller(fault, ref="w1")
    assert fault.committed.wait(WAIT)
    assert ledger.entries == ["w1"] and fault.commits == 1
    assert not caller.done.is_set()  # the write landed, the answer has not come back
    fault.release()
    assert caller.done.wait(WAIT) and caller.result == {"ref": "w1", "saved": True}


def test_commit_then_timeout_is_outcome_unknown_for_a_write_although_it_landed():
    ledger = Ledger()
    fault = faults.commit_then_timeout(ledger.write)
    registry = ToolRegistry([spec_for(fault, effect="irreversible_write", timeout=0.1)])
    with fault:
        result = invoke_tool(registry, "tool", {"ref": "pay-1"})
        assert (result["error"], result["retryable"]) == ("outcome_unknown", False)
        assert fault.committed.wait(WAIT) and ledger.entries == ["pay-1"]
    assert fault.released  # the context manager released it


def test_slow_lookup_leaves_a_reversible_write_unknown_and_never_rewrites():
    ledger = Ledger()
    handler = faults.commit_then_timeout(ledger.write)

    def status(ref: str) -> dict[str, Any] | None:
        return {"ref": ref, "saved": True} if ref in ledger.entries else None

    slow = faults.slow_lookup(status)
    spec = spec_for(handler, effect="reversible_write", timeout=0.1, status_lookup=slow)
    runner = ToolRunner(ToolRegistry([spec]), sleep=lambda s: None)
    try:
        result = runner.call("tool", {"ref": "d1"})
        assert (result["error"], result["retryable"], result["attempts"]) == ("outcome_unknown", False, 1)
        assert handler.calls == 1 and slow.calls == 1 and slow.inner_calls == 0
        assert ledger.entries == ["d1"]  # written once, never rewritten
        assert runner.budget.used == 2  # the attempt and the lookup
    finally:
        faults.release_all()


def test_release_all_lets_every_blocked_call_go():
    hung, stuck = faults.hang(lookup), faults.commit_then_timeout(lookup)
    callers = [Caller(hung, order_id="A1"), Caller(stuck, order_id="A2")]
    assert hung.wait_for_calls(1, WAIT) and stuck.committed.wait(WAIT)
    assert faults.release_all() >= 2
    assert all(c.done.wait(WAIT) for c in callers)
    assert [c.result["order_id"] for c in callers] == ["A1", "A2"]


# ------------------------------------------------------------------ output faults


def test_huge_output_is_exactly_chars_long_and_starts_with_the_result():
    fault = faults.huge_output(lookup, chars=5_000)
    text = fault(order_id="A1")
    assert len(text) == 5_000 and text.startswith('{"order_id": "A1", "state": "shipped"}\n')
    assert len(faults.huge_output(lookup)(order_id="A1")) == 1_000_000
    with pytest.raises(ValueError):
        faults.huge_output(lookup, chars=0)


def test_huge_output_is_truncated_by_the_boundary_with_its_original_size():
    fault = faults.huge_output(lookup)
    result = invoke_tool(ToolRegistry([spec_for(fault)]), "tool", {"order_id": "A1"})
    assert result["ok"] and result["truncated"] and result["original_chars"] == 1_000_000
    assert len(result["data"]) <= 100 and fault.calls == 1


def test_leak_secret_returns_two_fake_secrets_that_the_boundary_redacts():
    fault = faults.leak_secret(lookup)
    raw = fault(order_id="A1")
    assert faults.FAKE_API_KEY in raw and f"password={faults.FAKE_PASSWORD}" in raw
    result = invoke_tool(ToolRegistry([spec_for(fault, max_output_chars=1000)]), "tool", {"order_id": "A1"})
    assert result["ok"] and result["redactions"] == 2
    assert faults.FAKE_API_KEY not in result["data"] and faults.FAKE_PASSWORD not in result["data"]
    assert '"order_id": "A1"' in result["data"] and fault.calls == 2


def test_budget_spent_means_no_fault_ever_runs():
    fault = faults.count_calls(lookup)
    runner = ToolRunner(ToolRegistry([spec_for(fault)]), budget=Budget(0), context=CallContext())
    assert runner.call("tool", {"order_id": "A1"})["error"] == "budget_exhausted"
    assert fault.calls == 0


def test_repr_names_the_fault_and_its_calls():
    fault = faults.fail_times(lookup, 1)
    assert repr(fault) == "<fail_times(lookup) calls=0>"


@pytest.mark.parametrize("cls", [faults.Fault, faults.FailTimes, faults.Deny, faults.Hang,
                                 faults.SlowLookup, faults.CommitThenTimeout, faults.HugeOutput,
                                 faults.LeakSecret])
def test_each_factory_name_is_its_class(cls):
    """One definition per fault: ``faults.<kind>`` is the class, so it cannot drift from it."""
    assert getattr(faults, cls.kind) is cls
    assert cls.kind in faults.__all__ and cls.__name__ in faults.__all__
    extra = (1,) if cls is faults.FailTimes else ()  # fail_times(fn, n) needs its n
    made = getattr(faults, cls.kind)(lookup, *extra)
    try:
        assert type(made) is cls and repr(made) == f"<{cls.kind}(lookup) calls=0>"
    finally:
        made.release()


def test_deny_is_not_applied_so_a_write_frees_its_key_without_a_lookup():
    asked = []

    def status(order_id: str, verbose: bool = False) -> None:
        asked.append(order_id)

    fault = faults.deny(lookup)
    spec = ToolSpec("tool", "A write that the downstream refuses.", "reversible_write", 1.0, 2,
                    100, fault, status_lookup=status)
    runner = ToolRunner(ToolRegistry([spec]), sleep=lambda s: None)
    first = runner.call("tool", {"order_id": "A1"})
    assert (first["error"], first["retryable"]) == ("forbidden", False)
    assert isinstance(faults.Denied("x"), NotApplied)
    second = runner.call("tool", {"order_id": "A1"})  # the key is free: it runs again
    assert second["error"] == "forbidden" and not second["replayed"]
    assert fault.calls == 2 and fault.inner_calls == 0 and asked == []
