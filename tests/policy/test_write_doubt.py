"""A write's exception is doubt (docs/design.md#a-writes-exception-is-doubt): the status lookup first, never a blind rerun.

A write's handler that raises may have landed first (a bug reading the response). Each test
keeps a ledger of real effects and counts the handler's and the lookup's real calls, on every
store (memory, SQLite, PostgreSQL) and through both drivers (``call`` and ``acall``).
Only :class:`~agentkit.InvalidInput` and :class:`~agentkit.NotApplied` free the key at once.
"""

from __future__ import annotations

import pytest
from test_stores import Backend  # tests/ is on sys.path (pytest rootdir-relative import)

from agentkit import CallContext, InvalidInput, NotApplied, ToolRegistry, ToolRunner, ToolSpec

LEASE = 1_000.0  # past every lease these tools ask for


class Ledger:
    """A downstream service: what landed, the handler's and the lookup's real calls."""

    def __init__(self, raise_after: BaseException | None = None,
                 raise_before: BaseException | None = None, lookup_raises: bool = False) -> None:
        self.landed: dict[str, str] = {}
        self.handler_calls = 0
        self.lookup_calls = 0
        self.raise_after = raise_after  # the write lands, then the handler raises this
        self.raise_before = raise_before  # the handler raises this before anything lands
        self.lookup_raises = lookup_raises

    def write(self, ref: str) -> str:
        self.handler_calls += 1
        if self.raise_before is not None:
            error, self.raise_before = self.raise_before, None
            raise error
        self.landed[ref] = f"written {ref}"
        if self.raise_after is not None:
            error, self.raise_after = self.raise_after, None
            raise error
        return self.landed[ref]

    def lookup(self, ref: str) -> str | None:
        self.lookup_calls += 1
        if self.lookup_raises:
            raise ConnectionError("the status service is down")
        return self.landed.get(ref)


def spec_for(ledger: Ledger, effect: str, *, lookup: bool = True) -> ToolSpec:
    def write(ref: str) -> str:
        return ledger.write(ref)

    def status(ref: str) -> str | None:
        return ledger.lookup(ref)

    return ToolSpec("write", "Write one record.", effect, 5.0, 3 if effect == "reversible_write" else 1,
                    500, write, status_lookup=status if lookup else None)


def runner_on(backend: Backend, spec: ToolSpec, task: str = "t1") -> ToolRunner:
    return ToolRunner(ToolRegistry([spec]), store=backend(claim_ttl_seconds=LEASE),
                      context=CallContext(task_id=task), sleep=lambda _s: None)


# ------------------------------------------------------------------ reversible writes


def test_a_write_that_lands_then_raises_is_found_by_its_lookup_and_never_rerun(backend, driver):
    ledger = Ledger(raise_after=RuntimeError("could not parse the response"))
    runner = runner_on(backend, spec_for(ledger, "reversible_write"))
    first = driver(runner, "call", "write", {"ref": "r1"})
    assert first["ok"] and first["data"] == "written r1" and first["attempts"] == 1
    assert ledger.lookup_calls == 1
    again = driver(runner, "call", "write", {"ref": "r1"})
    assert again["ok"] and again["replayed"]
    assert ledger.handler_calls == 1 and len(ledger.landed) == 1


def test_a_write_that_raised_before_landing_fails_after_its_lookup_and_frees_the_key(backend, driver):
    ledger = Ledger(raise_before=KeyError("bug before the request"))
    runner = runner_on(backend, spec_for(ledger, "reversible_write"))
    first = driver(runner, "call", "write", {"ref": "r1"})
    assert first == {"ok": False, "error": "tool_failure", "retryable": False, "attempts": 1,
                     "replayed": False}
    assert ledger.lookup_calls == 1 and ledger.handler_calls == 1  # the failure stands: no retry
    again = driver(runner, "call", "write", {"ref": "r1"})  # the key is free: it runs
    assert again["ok"] and not again["replayed"]
    assert ledger.handler_calls == 2 and ledger.landed == {"r1": "written r1"}


def test_a_write_that_raised_with_no_lookup_is_outcome_unknown_and_keeps_its_claim(backend, driver):
    ledger = Ledger(raise_after=ValueError("the response was not JSON"))
    spec = spec_for(ledger, "reversible_write", lookup=False)
    runner = runner_on(backend, spec)
    first = driver(runner, "call", "write", {"ref": "r1"})
    assert first["error"] == "outcome_unknown" and first["retryable"] is False
    second = driver(runner, "call", "write", {"ref": "r1"})
    assert not second["ok"] and ledger.handler_calls == 1  # never rewritten blindly
    other = ToolRunner(ToolRegistry([spec]), store=runner.store, context=CallContext(task_id="t1"),
                       sleep=lambda _s: None)
    assert not driver(other, "call", "write", {"ref": "r1"})["ok"]  # a second runner neither
    assert ledger.handler_calls == 1
    key = next(iter(runner.store.entries())).key
    runner.store.release(key)  # a person who checked releases it: then it may run
    assert driver(runner, "call", "write", {"ref": "r1"})["ok"]
    assert ledger.handler_calls == 2


def test_a_write_whose_lookup_fails_after_an_exception_is_outcome_unknown_then_asks_again(backend, driver):
    ledger = Ledger(raise_after=RuntimeError("boom"), lookup_raises=True)
    runner = runner_on(backend, spec_for(ledger, "reversible_write"))
    first = driver(runner, "call", "write", {"ref": "r1"})
    assert first["error"] == "outcome_unknown" and first["retryable"] is False
    assert ledger.lookup_calls == 1
    ledger.lookup_raises = False  # the status service is back: the next caller asks it
    again = driver(runner, "call", "write", {"ref": "r1"})
    assert again["ok"] and again["data"] == "written r1" and again["attempts"] == 0
    assert ledger.handler_calls == 1 and ledger.lookup_calls == 2


@pytest.mark.parametrize("raised", [NotApplied("the card was declined"),
                                    InvalidInput("no such customer")])
def test_not_applied_and_invalid_input_free_the_key_without_a_lookup(backend, driver, raised):
    ledger = Ledger(raise_before=raised)
    runner = runner_on(backend, spec_for(ledger, "reversible_write"))
    first = driver(runner, "call", "write", {"ref": "r1"})
    code = "tool_failure" if isinstance(raised, NotApplied) else "invalid_arguments"
    assert first["error"] == code and first["retryable"] is False and first["attempts"] == 1
    assert ledger.lookup_calls == 0
    assert driver(runner, "call", "write", {"ref": "r1"})["ok"]
    assert ledger.handler_calls == 2 and ledger.lookup_calls == 0


class Declined(NotApplied, PermissionError):
    """A downstream refusal that is known to have done nothing."""


def test_a_permission_error_is_doubt_unless_it_is_also_not_applied(backend, driver):
    ledger = Ledger(raise_after=PermissionError("403 after the write"))
    runner = runner_on(backend, spec_for(ledger, "reversible_write"))
    found = driver(runner, "call", "write", {"ref": "r1"})
    assert found["ok"] and ledger.lookup_calls == 1  # it had landed: the receipt

    refused = Ledger(raise_before=Declined("403: not allowed"))
    runner = runner_on(backend, spec_for(refused, "reversible_write"), task="t2")
    first = driver(runner, "call", "write", {"ref": "r2"})
    assert first["error"] == "forbidden" and refused.lookup_calls == 0
    assert driver(runner, "call", "write", {"ref": "r2"})["ok"] and refused.handler_calls == 2


def test_a_connection_error_after_a_lookup_that_says_not_done_is_retried_with_the_same_key(backend, driver):
    ledger = Ledger(raise_before=ConnectionError("reset before the request was sent"))
    runner = runner_on(backend, spec_for(ledger, "reversible_write"))
    result = driver(runner, "call", "write", {"ref": "r1"})
    assert result["ok"] and result["attempts"] == 2  # unchanged: a disconnect is retried
    assert ledger.handler_calls == 2 and ledger.lookup_calls == 1


# ------------------------------------------------------------------ irreversible writes


def test_an_approved_write_that_lands_then_raises_is_settled_by_its_lookup(backend, driver):
    ledger = Ledger(raise_after=RuntimeError("could not read the payment's id"))
    runner = runner_on(backend, spec_for(ledger, "irreversible_write"))
    asked = driver(runner, "call", "write", {"ref": "inv-1"})
    assert asked["error"] == "approval_required" and ledger.handler_calls == 0
    approved = driver(runner, "approve", asked["approval_id"])
    assert approved["ok"] and approved["data"] == "written inv-1"
    assert ledger.lookup_calls == 1
    assert driver(runner, "approve", asked["approval_id"])["ok"]  # the settled result again
    assert driver(runner, "call", "write", {"ref": "inv-1"})["replayed"]
    assert ledger.handler_calls == 1 and len(ledger.landed) == 1


def test_an_approved_write_that_raised_without_a_lookup_is_outcome_unknown(backend, driver):
    ledger = Ledger(raise_after=RuntimeError("could not read the payment's id"))
    runner = runner_on(backend, spec_for(ledger, "irreversible_write", lookup=False))
    asked = driver(runner, "call", "write", {"ref": "inv-1"})
    approved = driver(runner, "approve", asked["approval_id"])
    assert approved["error"] == "outcome_unknown" and approved["retryable"] is False
    again = driver(runner, "approve", asked["approval_id"])
    assert again["error"] == "outcome_unknown" and ledger.handler_calls == 1


def test_an_approved_write_that_raised_before_landing_keeps_its_failure(backend, driver):
    ledger = Ledger(raise_before=RuntimeError("bug before the request"))
    runner = runner_on(backend, spec_for(ledger, "irreversible_write"))
    asked = driver(runner, "call", "write", {"ref": "inv-1"})
    approved = driver(runner, "approve", asked["approval_id"])
    assert approved["error"] == "tool_failure" and approved["retryable"] is False
    assert ledger.lookup_calls == 1 and ledger.handler_calls == 1 and not ledger.landed


def test_an_approved_write_that_says_not_applied_asks_no_lookup(backend, driver):
    ledger = Ledger(raise_before=NotApplied("the card was declined"))
    runner = runner_on(backend, spec_for(ledger, "irreversible_write"))
    asked = driver(runner, "call", "write", {"ref": "inv-1"})
    approved = driver(runner, "approve", asked["approval_id"])
    assert approved["error"] == "tool_failure" and approved["retryable"] is False
    assert ledger.lookup_calls == 0 and ledger.handler_calls == 1


def test_a_person_releases_a_stale_claim_through_the_runner_only(backend, driver):
    """``ToolRunner.release(key)``: a claim left in doubt (no lookup) is released, and the
    write may run again; a completed key, an unknown key are left as they are."""
    ledger = Ledger(raise_after=RuntimeError("could not parse the response"))
    runner = runner_on(backend, spec_for(ledger, "reversible_write", lookup=False))
    assert driver(runner, "call", "write", {"ref": "r1"})["error"] == "outcome_unknown"
    key = next(iter(runner.store.entries())).key
    assert runner.release("no-such-key") == "unknown"
    assert runner.release(key, who="ada", note="checked the ledger") == "released"
    assert driver(runner, "call", "write", {"ref": "r1"})["ok"] and ledger.handler_calls == 2
    assert runner.release(key) == "completed"
    assert ledger.handler_calls == 2
