"""Budget counts (docs/design.md#budget): an uncapped budget counts its units with Tallies and
no lock, a capped one checks and counts under its lock. ``max_attempts`` may be set (or unset)
after units were spent, and then counts every unit taken before; ``max_per_effect`` is fixed
when the budget is made. Through a ToolRunner, a budget capped mid-run refuses the next attempt
and the handler is not called again."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from agentkit import Budget, Effect, ToolRegistry, ToolRunner, ToolSpec

THREADS = 4
SPENDS = 2_000  # per thread


def _together(target: Any, count: int = THREADS) -> None:
    start = threading.Barrier(count)

    def run() -> None:
        start.wait()
        target()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)


# ------------------------------------------------------------------ uncapped


def test_concurrent_spends_on_an_uncapped_budget_are_all_counted() -> None:
    budget = Budget()
    taken: list[bool] = []

    def spender() -> None:
        mine = [budget.spend() for _ in range(SPENDS)]
        taken.extend(mine)

    _together(spender)
    assert taken == [True] * (THREADS * SPENDS)
    assert budget.used == THREADS * SPENDS
    assert budget.remaining is None


def test_concurrent_spends_and_refunds_on_an_uncapped_budget_count_exactly() -> None:
    budget = Budget()

    def spender() -> None:
        for n in range(SPENDS):
            budget.spend(Effect.REVERSIBLE_WRITE)
            if n % 4 == 0:
                budget.refund(Effect.REVERSIBLE_WRITE)

    _together(spender)
    assert budget.used == THREADS * (SPENDS - SPENDS // 4)
    assert budget.remaining is None


def test_an_uncapped_budget_can_always_spend() -> None:
    budget = Budget()
    for _ in range(10):
        assert budget.spend("irreversible_write")
    assert budget.can_spend() and budget.can_spend("irreversible_write")
    assert budget.used == 10


# ------------------------------------------------------------------ refunds in both modes


def test_refunds_of_a_capped_budget_give_units_back() -> None:
    budget = Budget(3)
    assert budget.spend() and budget.spend() and budget.spend()
    assert not budget.spend()
    budget.refund()
    assert (budget.used, budget.remaining) == (2, 1)
    assert budget.spend()
    assert not budget.spend()
    assert (budget.used, budget.remaining) == (3, 0)


def test_refunds_of_an_uncapped_budget_give_units_back() -> None:
    budget = Budget()
    budget.spend()
    budget.spend()
    budget.refund()
    assert budget.used == 1 and budget.remaining is None


def test_a_unit_spent_uncapped_can_be_refunded_after_capping() -> None:
    budget = Budget()
    for _ in range(3):
        budget.spend()
    budget.max_attempts = 3
    assert not budget.spend()
    budget.refund()  # gives back one of the units taken before the cap
    assert (budget.used, budget.remaining) == (2, 1)
    assert budget.spend()
    assert not budget.spend()
    assert budget.used == 3


def test_a_unit_spent_capped_can_be_refunded_after_uncapping() -> None:
    budget = Budget(5)
    budget.spend()
    budget.spend()
    budget.max_attempts = None
    budget.refund()
    assert budget.used == 1 and budget.remaining is None


# ------------------------------------------------------------------ capping after the fact


def _spent(n: int) -> Budget:
    budget = Budget()
    for _ in range(n):
        assert budget.spend()
    return budget


def test_capping_at_used_refuses_the_next_spend_and_counts_the_earlier_units() -> None:
    budget = _spent(5)
    budget.max_attempts = budget.used
    assert budget.max_attempts == 5
    assert budget.remaining == 0
    assert not budget.can_spend()
    assert not budget.spend()
    assert budget.used == 5  # a refused spend takes nothing


def test_capping_below_used_refuses_and_remaining_is_zero() -> None:
    budget = _spent(5)
    budget.max_attempts = 2
    assert not budget.spend()
    assert (budget.used, budget.remaining) == (5, 0)


def test_capping_two_above_used_allows_exactly_two_more() -> None:
    budget = _spent(4)
    budget.max_attempts = budget.used + 2
    assert budget.remaining == 2
    assert [budget.spend() for _ in range(4)] == [True, True, False, False]
    assert (budget.used, budget.remaining) == (6, 0)


def test_uncapping_again_lets_spends_through_and_keeps_counting() -> None:
    budget = _spent(3)
    budget.max_attempts = 3
    assert not budget.spend()
    budget.max_attempts = None
    assert budget.max_attempts is None and budget.remaining is None
    assert budget.spend() and budget.spend()
    assert budget.used == 5
    budget.max_attempts = 6  # capped again: the units of both uncapped spells count
    assert budget.spend()
    assert not budget.spend()
    assert (budget.used, budget.remaining) == (6, 0)


def test_concurrent_spenders_after_capping_take_exactly_the_units_left() -> None:
    budget = _spent(50)
    budget.max_attempts = 150
    taken: list[bool] = []

    def spender() -> None:
        mine = [budget.spend() for _ in range(100)]
        taken.extend(mine)

    _together(spender)
    assert taken.count(True) == 100
    assert (budget.used, budget.remaining) == (150, 0)


# ------------------------------------------------------------------ caps per effect


def test_concurrent_spenders_never_exceed_a_cap_per_effect() -> None:
    budget = Budget(max_per_effect={"reversible_write": 40})
    taken: list[bool] = []

    def spender() -> None:
        mine = [budget.spend(Effect.REVERSIBLE_WRITE) for _ in range(100)]
        taken.extend(mine)

    _together(spender)
    assert taken.count(True) == 40 and len(taken) == THREADS * 100
    assert budget.used == 40
    assert budget.remaining is None  # no cap on units in all
    assert not budget.can_spend(Effect.REVERSIBLE_WRITE)
    assert budget.can_spend(Effect.READ) and budget.spend(Effect.READ)  # other effects go on
    assert budget.used == 41


def test_a_cap_per_effect_and_a_total_cap_both_hold() -> None:
    budget = Budget(3, max_per_effect={Effect.IRREVERSIBLE_WRITE: 1})
    assert budget.spend("irreversible_write")
    assert not budget.spend("irreversible_write")
    assert budget.spend("read") and budget.spend("read")
    assert not budget.spend("read")
    assert (budget.used, budget.remaining) == (3, 0)


def test_can_spend_takes_nothing() -> None:
    budget = Budget(1, max_per_effect={"read": 1})
    assert budget.can_spend() and budget.can_spend("read")
    assert budget.used == 0
    assert budget.spend()
    assert not budget.can_spend() and not budget.can_spend("reversible_write")
    assert budget.used == 1


def test_max_per_effect_is_a_read_only_mapping_fixed_at_construction() -> None:
    caps: dict[Effect | str, int] = {"irreversible_write": 1}
    budget = Budget(max_per_effect=caps)
    assert dict(budget.max_per_effect) == {Effect.IRREVERSIBLE_WRITE: 1}
    with pytest.raises(TypeError):
        budget.max_per_effect[Effect.READ] = 5  # type: ignore[index]
    with pytest.raises(TypeError):
        del budget.max_per_effect[Effect.IRREVERSIBLE_WRITE]  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        budget.max_per_effect = {}  # type: ignore[misc]
    caps["irreversible_write"] = 5  # the caller's dict was copied
    caps["read"] = 0
    assert dict(budget.max_per_effect) == {Effect.IRREVERSIBLE_WRITE: 1}
    assert budget.spend("irreversible_write") and not budget.spend("irreversible_write")
    assert budget.spend("read")


# ------------------------------------------------------------------ validating the cap


@pytest.mark.parametrize("bad", [-1, 1.5, 2.0, "3", [3], True, False])
@pytest.mark.parametrize("before", [None, 4])
def test_an_invalid_cap_raises_value_error_and_leaves_the_cap_unchanged(
    bad: Any, before: int | None
) -> None:
    budget = Budget(before)
    budget.spend()
    with pytest.raises(ValueError, match="max_attempts"):
        budget.max_attempts = bad
    assert budget.max_attempts == before
    assert budget.used == 1
    assert budget.remaining == (None if before is None else before - 1)
    assert budget.spend()  # still capped (or not) as before


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_an_invalid_cap_is_refused_when_the_budget_is_made(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        Budget(bad)


def test_zero_is_a_valid_cap() -> None:
    budget = Budget()
    budget.max_attempts = 0
    assert not budget.spend() and budget.remaining == 0 and budget.used == 0


# ------------------------------------------------------------------ through a runner


class Search:
    """A read handler (``handler``) that counts its real calls; ``during`` runs inside one."""

    def __init__(self) -> None:
        self.calls = 0
        self.during: Any = None

        def search(query: str) -> str:
            self.calls += 1
            if self.during is not None:
                during, self.during = self.during, None
                during()
            return "found"

        self.handler = search


def _runner(search: Search, attempts: int = 1) -> ToolRunner:
    spec = ToolSpec("search", "Search.", "read", 5.0, attempts, 100, search.handler)
    return ToolRunner(ToolRegistry([spec]), sleep=lambda seconds: None)


def _call(kind: str, runner: ToolRunner, query: str) -> dict[str, Any]:
    if kind == "sync":
        return runner.call("search", {"query": query})
    return asyncio.run(runner.acall("search", {"query": query}))


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_runner_capped_at_its_used_units_answers_budget_exhausted(kind: str) -> None:
    handler = Search()
    runner = _runner(handler)
    for n in range(3):
        assert _call(kind, runner, f"q{n}")["ok"]
    assert handler.calls == 3 and runner.budget.used == 3
    runner.budget.max_attempts = runner.budget.used
    result = _call(kind, runner, "q")
    assert result == {"ok": False, "error": "budget_exhausted", "retryable": False,
                      "attempts": 0, "replayed": False}
    assert handler.calls == 3  # nothing ran
    assert (runner.budget.used, runner.budget.remaining) == (3, 0)
    steps = [(r.step, r.outcome) for r in runner.trace]
    assert steps[-1] == ("refused", "budget_exhausted")
    assert runner.trace.call_counts() == {"search": 3}


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_budget_capped_during_an_attempt_refuses_the_retry(kind: str) -> None:
    """The cap is set from inside the handler (on its worker thread) while the runner's budget
    is still uncapped: the attempt in progress is counted, the retry is refused."""
    handler = Search()
    runner = _runner(handler, attempts=3)

    def cap_then_drop() -> None:
        runner.budget.max_attempts = runner.budget.used
        raise ConnectionError("dropped")

    handler.during = cap_then_drop
    result = _call(kind, runner, "q")
    assert result == {"ok": False, "error": "budget_exhausted", "retryable": False,
                      "attempts": 1, "replayed": False}
    assert handler.calls == 1
    assert (runner.budget.used, runner.budget.remaining) == (1, 0)
    assert [(r.step, r.attempt, r.outcome) for r in runner.trace] == [
        ("attempt", 1, "transient_failure"), ("refused", 1, "budget_exhausted")]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_uncapping_a_runner_s_budget_lets_calls_run_again(kind: str) -> None:
    handler = Search()
    runner = _runner(handler)
    assert _call(kind, runner, "a")["ok"]
    runner.budget.max_attempts = runner.budget.used
    assert _call(kind, runner, "b")["error"] == "budget_exhausted"
    runner.budget.max_attempts = None
    assert _call(kind, runner, "c") == {"ok": True, "data": "found", "attempts": 1,
                                        "replayed": False}
    assert handler.calls == 2 and runner.budget.used == 2


@pytest.mark.parametrize("cap", [None, 5])
def test_an_unknown_effect_is_a_value_error_capped_or_not(cap: int | None) -> None:
    budget = Budget(cap)
    with pytest.raises(ValueError):
        budget.spend("no_such_effect")
    with pytest.raises(ValueError):
        budget.refund("no_such_effect")
    assert budget.used == 0
