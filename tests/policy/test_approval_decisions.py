"""An approval's decision (docs/design.md#approvals: an approval has an owner).

- A runner whose registry does not hold the approval's tool cannot run it: ``approve`` answers
  ``unknown_tool`` and the approval **stays pending** (it used to be settled ``unknown_tool``
  for good, so the call could never run under its key); a runner that holds the tool then
  runs it once.
- A decision that took effect is kept in the record: ``decision`` (``approved``/``denied``)
  and ``decided_at`` (the runner's clock), so a person can be told what came first. A run
  refused before anything ran (no budget) leaves the approval pending and undecided.

Every store (memory, SQLite, PostgreSQL), both drivers; the handler's real calls are counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentkit import Budget, CallContext, ToolRegistry, ToolRunner, ToolSpec

NOW = 1_700_000_000.0


class Invoices:
    """A downstream service that counts the invoices it really sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, invoice: str) -> str:
        self.sent.append(invoice)
        return f"sent {invoice}"


def send_invoice_spec(invoices: Invoices) -> ToolSpec:
    def send_invoice(invoice: str) -> str:
        return invoices.send(invoice)

    return ToolSpec("send_invoice", "Send an invoice.", "irreversible_write", 5.0, 1, 500,
                    send_invoice)


def other_spec() -> ToolSpec:
    return ToolSpec("lookup", "Look something up.", "read", 5.0, 1, 500, lambda q: q)


def runner_on(store: Any, *specs: ToolSpec, clock: Callable[[], float] = lambda: NOW,
              budget: Budget | None = None) -> ToolRunner:
    return ToolRunner(ToolRegistry(list(specs)), store=store, budget=budget, clock=clock,
                      context=CallContext(task_id="conversation-1", principal="host"),
                      sleep=lambda _s: None)


def test_a_runner_without_the_tool_leaves_the_approval_pending(backend, driver):
    invoices = Invoices()
    store = backend()
    server = runner_on(store, send_invoice_spec(invoices))
    asked = driver(server, "call", "send_invoice", {"invoice": "inv-1"})
    assert asked["error"] == "approval_required"
    approval_id = asked["approval_id"]

    elsewhere = runner_on(store, other_spec())  # a CLI started without the server's registry
    refused = driver(elsewhere, "approve", approval_id)
    assert refused == {"ok": False, "error": "unknown_tool", "retryable": False, "attempts": 0,
                       "replayed": False}
    record = server.approvals.get(approval_id)
    assert record is not None and record["state"] == "pending"
    assert "decision" not in record
    assert [r["approval_id"] for r in server.pending_approvals()] == [approval_id]
    assert invoices.sent == []

    done = driver(runner_on(store, send_invoice_spec(invoices)), "approve", approval_id)
    assert done["ok"] is True and done["data"] == "sent inv-1" and done["replayed"] is False
    assert invoices.sent == ["inv-1"]  # run once, by the runner that holds the tool
    again = driver(server, "call", "send_invoice", {"invoice": "inv-1"})
    assert again["ok"] is True and again["replayed"] is True
    assert invoices.sent == ["inv-1"]


def test_the_decision_and_its_time_are_kept_in_the_record(backend, driver):
    invoices = Invoices()
    store = backend()
    clock_now = [NOW]

    def clock() -> float:
        return clock_now[0]

    runner = runner_on(store, send_invoice_spec(invoices), clock=clock)
    approve_id = driver(runner, "call", "send_invoice", {"invoice": "inv-a"})["approval_id"]
    deny_id = driver(runner, "call", "send_invoice", {"invoice": "inv-d"})["approval_id"]
    clock_now[0] = NOW + 30.0
    assert driver(runner, "approve", approve_id)["ok"] is True
    approved = runner.approvals.get(approve_id)
    assert approved is not None and approved["state"] == "settled"
    assert (approved["decision"], approved["decided_at"]) == ("approved", NOW + 30.0)
    clock_now[0] = NOW + 45.0
    assert driver(runner, "deny", deny_id)["error"] == "forbidden"
    denied = runner.approvals.get(deny_id)
    assert denied is not None and (denied["decision"], denied["decided_at"]) == ("denied", NOW + 45.0)
    # the same decisions again: replayed, the first decision's time kept
    clock_now[0] = NOW + 60.0
    assert driver(runner, "approve", approve_id)["replayed"] is True
    assert driver(runner, "deny", deny_id)["replayed"] is True
    assert runner.approvals.get(approve_id)["decided_at"] == NOW + 30.0  # type: ignore[index]
    assert runner.approvals.get(deny_id)["decided_at"] == NOW + 45.0  # type: ignore[index]
    assert invoices.sent == ["inv-a"]


def test_an_approved_run_refused_before_it_ran_leaves_no_decision(backend, driver):
    """No budget left when the person approves: nothing ran, the approval is pending again
    and undecided, so a person may still deny it (and a later approve runs it once)."""
    invoices = Invoices()
    store = backend()
    budget = Budget()
    clock_now = [NOW]
    runner = runner_on(store, send_invoice_spec(invoices), budget=budget,
                       clock=lambda: clock_now[0])
    approval_id = driver(runner, "call", "send_invoice", {"invoice": "inv-1"})["approval_id"]
    budget.max_attempts = budget.used  # spent
    clock_now[0] = NOW + 10.0
    assert driver(runner, "approve", approval_id)["error"] == "budget_exhausted"
    record = runner.approvals.get(approval_id)
    assert record is not None and record["state"] == "pending"
    assert "decision" not in record and "decided_at" not in record
    assert invoices.sent == []
    budget.max_attempts = None
    clock_now[0] = NOW + 20.0
    assert driver(runner, "approve", approval_id)["ok"] is True
    record = runner.approvals.get(approval_id)
    assert record is not None and (record["decision"], record["decided_at"]) == ("approved", NOW + 20.0)
    assert invoices.sent == ["inv-1"]
