"""The host's own call id names an approval's settling too (rev 4: a durable engine's step or
activity id), on both drivers; without one the runner makes its own."""

from __future__ import annotations

import asyncio

from agentkit import ToolRegistry, ToolRunner, ToolSpec


def runner_with_a_payment() -> tuple[ToolRunner, list[int]]:
    paid: list[int] = []

    def send_payment(cents: int) -> str:
        """Send a payment."""
        paid.append(cents)
        return f"paid {cents}"

    spec = ToolSpec("send_payment", "Send a payment.", "irreversible_write", 5.0, 1, 200,
                    send_payment)
    return ToolRunner(ToolRegistry([spec])), paid


def call_ids(runner: ToolRunner) -> list[str]:
    return [record.call_id for record in runner.trace.records]


def test_approve_and_deny_take_the_hosts_call_id():
    runner, paid = runner_with_a_payment()
    first = runner.call("send_payment", {"cents": 1}, call_id="wf-1:1")
    assert runner.approve(first["approval_id"], call_id="wf-1:2")["ok"] is True
    second = runner.call("send_payment", {"cents": 2}, call_id="wf-1:3")
    assert runner.deny(second["approval_id"], call_id="wf-1:4")["error"] == "forbidden"
    assert call_ids(runner) == ["wf-1:1", "wf-1:2", "wf-1:3", "wf-1:4"]
    assert paid == [1]


def test_the_async_twins_take_it_too():
    runner, paid = runner_with_a_payment()

    async def run() -> None:
        first = await runner.acall("send_payment", {"cents": 1}, call_id="wf-2:1")
        assert (await runner.aapprove(first["approval_id"], call_id="wf-2:2"))["ok"] is True
        second = await runner.acall("send_payment", {"cents": 2}, call_id="wf-2:3")
        denied = await runner.adeny(second["approval_id"], call_id="wf-2:4")
        assert denied["error"] == "forbidden"

    asyncio.run(run())
    assert call_ids(runner) == ["wf-2:1", "wf-2:2", "wf-2:3", "wf-2:4"]
    assert paid == [1]


def test_without_one_the_runner_names_it():
    runner, paid = runner_with_a_payment()
    asked = runner.call("send_payment", {"cents": 1}, call_id="c1")
    runner.approve(asked["approval_id"], call_id="")  # empty: not a name
    asking, settling = call_ids(runner)
    assert asking == "c1" and settling not in ("", "c1")
    assert paid == [1]
