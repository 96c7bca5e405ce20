"""agentkit.faces.framework.task_runner: a runner for one conversation, the runner it was made
from under the conversation's task id (no framework needed)."""

from __future__ import annotations

import asyncio

from _conversations import PAYMENT, REFUND, Ledger

from agentkit import Budget, CallContext, SQLiteIdempotencyStore, ToolRunner
from agentkit.faces.framework import task_runner


def test_two_conversations_each_refund_once_and_the_same_one_replays():
    ledger = Ledger()
    runner = ledger.runner()
    first = task_runner(runner, "thread-a").call("refund", REFUND)
    other = task_runner(runner, "thread-b").call("refund", REFUND)
    again = task_runner(runner, "thread-a").call("refund", REFUND)
    assert ledger.refunds == ["o-1", "o-1"]  # once per conversation
    assert (first["replayed"], other["replayed"], again["replayed"]) == (False, False, True)
    assert first["data"] == other["data"] == again["data"]


def test_a_conversation_never_replays_the_runners_own_task():
    ledger = Ledger()
    runner = ledger.runner()
    runner.call("refund", REFUND)
    asyncio.run(task_runner(runner, "thread-a").acall("refund", REFUND))
    assert ledger.refunds == ["o-1", "o-1"]


def test_an_approval_is_its_conversations_own():
    """Conversation B's identical payment asks for its own approval; A's settled one is not
    B's receipt (before, B read A's ``paid``, replayed, and nobody paid B's)."""
    ledger = Ledger()
    runner = ledger.runner()
    a, b = task_runner(runner, "a"), task_runner(runner, "b")
    asked = a.call("send_payment", PAYMENT)
    assert a.approve(asked["approval_id"])["ok"] and ledger.payments == ["ada"]
    again = b.call("send_payment", PAYMENT)
    assert again["error"] == "approval_required" and again["approval_id"] != asked["approval_id"]
    [pending] = runner.pending_approvals()
    assert pending["task_id"] == "b"
    assert b.approve(again["approval_id"])["ok"]
    assert ledger.payments == ["ada", "ada"]


def test_the_twin_shares_the_runners_parts_and_observers():
    ledger = Ledger()
    budget = Budget(5)
    runner = ToolRunner(ledger.registry, budget=budget, sleep=lambda seconds: None,
                        context=CallContext(task_id="support", principal="ops", scopes={"x"}))
    twin = task_runner(runner, "thread-a")
    events: list[str] = []
    runner.add_observer(lambda event: events.append(event.kind))  # added after the twin
    twin.call("refund", REFUND)
    assert twin.context == CallContext(task_id="thread-a", principal="ops", scopes={"x"})
    assert runner.context.task_id == "support"
    assert (twin.registry, twin.store, twin.budget, twin.trace, twin.approvals) == (
        runner.registry, runner.store, runner.budget, runner.trace, runner.approvals)
    assert budget.used == 1
    assert [r.step for r in runner.trace.records] == ["attempt"]
    assert "call_ended" in events


def test_no_conversation_is_the_runner_itself_and_any_identity_is_its_str():
    runner = Ledger().runner()
    assert task_runner(runner, None) is runner
    assert task_runner(runner, "") is runner
    assert task_runner(runner, "default") is runner  # already the runner's own task
    assert task_runner(runner, 7).context.task_id == "7"


def test_a_restart_of_the_same_conversation_keeps_its_keys(tmp_path):
    ledger = Ledger()
    path = tmp_path / "store.sqlite"
    task_runner(ledger.runner(SQLiteIdempotencyStore(path)), "thread-a").call("refund", REFUND)
    restarted = ledger.runner(SQLiteIdempotencyStore(path))  # a new process, the same store
    assert task_runner(restarted, "thread-a").call("refund", REFUND)["replayed"] is True
    assert task_runner(restarted, "thread-b").call("refund", REFUND)["replayed"] is False
    assert ledger.refunds == ["o-1", "o-1"]
