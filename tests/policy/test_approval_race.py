"""Approvers racing on one approval (docs/design.md#approvals): one runs the write, the others
are told at once, on either driver, whichever of them wins.

Four ``aapprove`` tasks on one event loop and four ``approve`` threads race on one approval
whose handler blocks on an event until the test releases it. The losers must answer
(``in_progress``) while the payment is still under way, not after it: a loser that waited for
the winner would answer a stale ``in_progress`` for a write that has already landed.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from test_stores import WAIT  # tests/ is on sys.path (pytest rootdir-relative import)

from agentkit import ToolRegistry, ToolRunner, ToolSpec


class Payment:
    """A payment that blocks until released, counting its real calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = threading.Event()
        self.gate = threading.Event()

    def pay(self, invoice: str) -> str:
        self.calls += 1
        self.started.set()
        if not self.gate.wait(WAIT):
            raise AssertionError("the test never released the payment")
        return f"paid {invoice}"


async def until_done(tasks: list[asyncio.Task[Any]], count: int) -> None:
    """Wait (on the tasks themselves, no sleeps) until ``count`` of them are done."""
    while sum(task.done() for task in tasks) < count:
        await asyncio.wait([t for t in tasks if not t.done()], return_when=asyncio.FIRST_COMPLETED)


class Answered:
    """Counts approvers that have answered, threads and tasks alike; waits for a count."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = threading.Condition()

    def one(self, *_: Any) -> None:
        with self.changed:
            self.count += 1
            self.changed.notify_all()

    def wait_for(self, count: int) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.count >= count, WAIT)


@pytest.mark.parametrize("first", ["tasks", "threads"])
def test_racing_approvers_are_told_at_once_while_the_winner_pays(backend, first):
    payment = Payment()
    spec = ToolSpec("pay", "Pay an invoice.", "irreversible_write", WAIT, 1, 200, payment.pay)
    runner = ToolRunner(ToolRegistry([spec]), store=backend(), sleep=lambda _s: None)
    approval_id = runner.call("pay", {"invoice": "inv-1"})["approval_id"]
    answered = Answered()
    answers: list[dict[str, Any]] = []

    def approve_in_a_thread() -> None:
        answers.append(runner.approve(approval_id))
        answered.one()

    threads = [threading.Thread(target=approve_in_a_thread) for _ in range(4)]

    async def race() -> list[dict[str, Any]]:
        if first == "threads":
            for thread in threads:
                thread.start()
        tasks = [asyncio.create_task(runner.aapprove(approval_id)) for _ in range(4)]
        for task in tasks:
            task.add_done_callback(answered.one)
        await asyncio.sleep(0)  # the tasks take their first step
        if first == "tasks":
            for thread in threads:
                thread.start()
        assert await asyncio.to_thread(payment.started.wait, WAIT)
        # Seven of the eight approvers lose, and each answers while the payment is under way.
        assert await asyncio.to_thread(answered.wait_for, 7)
        assert answered.count == 7 and payment.calls == 1
        payment.gate.set()
        return await asyncio.gather(*tasks)

    from_tasks = asyncio.run(race())
    for thread in threads:
        thread.join(WAIT)
    results = from_tasks + answers
    assert payment.calls == 1
    assert sorted(r.get("error", "ok") for r in results) == ["in_progress"] * 7 + ["ok"]
    assert runner.approve(approval_id)["replayed"]  # settled: the payment's result again
    assert payment.calls == 1
