"""Who decides (docs/design.md#approvals-desk): ``approve``/``deny`` record the person, an
approval may need two different people (four eyes: one person approving twice counts once),
and a person may ask the status lookup again about an approved call in doubt — on every
store and both drivers, with the handler's real runs counted."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from test_stores import Backend  # tests/ is on sys.path

from agentkit import ToolRegistry, ToolRunner, ToolSpec
from agentkit.policy.drivers import run_store_steps

WAIT = 30


class Bank:
    """A payment tool that counts its real runs, and a status lookup whose answer a test sets:
    ``"done"`` (the receipt), ``"not done"`` (None) or ``"unknown"`` (it raises)."""

    def __init__(self, *, lands_then_raises: bool = False) -> None:
        self.paid: list[dict[str, Any]] = []
        self.lookups = 0
        self.answer = "unknown"
        self.lands_then_raises = lands_then_raises

    def pay(self, to: str, cents: int) -> str:
        self.paid.append({"to": to, "cents": cents})
        if self.lands_then_raises:
            raise RuntimeError("the bank answered, and the client could not read it")
        return f"paid {cents} to {to}"

    def lookup(self, to: str, cents: int) -> Any:
        self.lookups += 1
        if self.answer == "unknown":
            raise ConnectionError("the bank's status API is down")
        return f"paid {cents} to {to}" if self.answer == "done" else None

    def registry(self, *, with_lookup: bool = True) -> ToolRegistry:
        registry = ToolRegistry()
        registry.register(ToolSpec("pay", "Pay an invoice", "irreversible_write", 5, 1, 200,
                                   self.pay, status_lookup=self.lookup if with_lookup else None))
        return registry


def audit(store: Any) -> list[tuple[str, Any]]:
    return [(e["action"], e["who"]) for e in map(json.loads, store.audit_entries())]


def test_the_person_is_kept_with_the_decision(backend: Backend, driver) -> None:
    bank = Bank()
    runner = ToolRunner(bank.registry(), store=backend())
    paid_id = runner.call("pay", {"to": "ana", "cents": 5})["approval_id"]
    denied_id = runner.call("pay", {"to": "bob", "cents": 6})["approval_id"]
    assert driver(runner, "approve", paid_id, approver="alice")["ok"] is True
    assert driver(runner, "deny", denied_id, approver="bert")["error"] == "forbidden"
    assert runner.approvals.get(paid_id)["decided_by"] == "alice"
    assert runner.approvals.get(denied_id)["decided_by"] == "bert"
    assert audit(runner.store) == [("approve", "alice"), ("deny", "bert")]
    assert len(bank.paid) == 1


def test_without_a_name_the_decision_is_kept_and_names_nobody(backend: Backend) -> None:
    bank = Bank()
    runner = ToolRunner(bank.registry(), store=backend())
    approval_id = runner.call("pay", {"to": "ana", "cents": 5})["approval_id"]
    assert runner.approve(approval_id)["ok"] is True
    assert "decided_by" not in runner.approvals.get(approval_id)
    assert audit(runner.store) == [("approve", None)] and len(bank.paid) == 1


@pytest.mark.parametrize("name", ["", " alice", "al\u202eice", "a\u200bb", "x" * 81, 7, "a\nb"])
def test_a_name_that_could_mislead_is_refused_before_anything(name: Any) -> None:
    bank = Bank()
    runner = ToolRunner(bank.registry())
    approval_id = runner.call("pay", {"to": "ana", "cents": 5})["approval_id"]
    with pytest.raises(ValueError, match="approver must be a printable name"):
        runner.approve(approval_id, approver=name)
    assert runner.approvals.get(approval_id)["state"] == "pending" and bank.paid == []


def test_four_eyes_needs_two_different_people(backend: Backend, driver) -> None:
    bank = Bank()
    runner = ToolRunner(bank.registry(), store=backend())
    approval_id = runner.call("pay", {"to": "ana", "cents": 5})["approval_id"]
    run_store_steps(runner.store, runner.approvals.require(approval_id, 2))
    first = driver(runner, "approve", approval_id, approver="alice")
    assert first["error"] == "approval_required" and first["approval_id"] == approval_id
    again = driver(runner, "approve", approval_id, approver="alice")  # twice: counts once
    assert again["error"] == "approval_required"
    nobody = driver(runner, "approve", approval_id, approver=None)  # no name: counts nothing
    assert nobody["error"] == "approval_required"
    assert bank.paid == [] and runner.approvals.get(approval_id)["state"] == "pending"
    assert [s["who"] for s in runner.approvals.get(approval_id)["signoffs"]] == ["alice"]
    assert driver(runner, "approve", approval_id, approver="bob")["ok"] is True
    assert driver(runner, "approve", approval_id, approver="carol")["replayed"] is True
    assert bank.paid == [{"to": "ana", "cents": 5}]
    assert audit(runner.store) == [("sign_off", "alice"), ("approve", "bob")]


def test_four_eyes_one_deny_is_enough(backend: Backend) -> None:
    bank = Bank()
    runner = ToolRunner(bank.registry(), store=backend())
    approval_id = runner.call("pay", {"to": "ana", "cents": 5})["approval_id"]
    run_store_steps(runner.store, runner.approvals.require(approval_id, 2))
    assert runner.approve(approval_id, approver="alice")["error"] == "approval_required"
    assert runner.deny(approval_id, approver="bob")["error"] == "forbidden"
    assert runner.approve(approval_id, approver="carol")["error"] == "forbidden"
    assert bank.paid == [] and audit(runner.store) == [("sign_off", "alice"), ("deny", "bob")]


def _sign_at_once(sql_backend: Backend, bank: Bank, approval_id: str) -> dict[str, dict[str, Any]]:
    """alice and bob approve ``approval_id`` at once, each on a store of their own."""
    start = threading.Barrier(2, timeout=WAIT)
    results: dict[str, dict[str, Any]] = {}

    def sign(name: str) -> None:
        mine = ToolRunner(bank.registry(), store=sql_backend())
        start.wait()
        results[name] = mine.approve(approval_id, approver=name)

    threads = [threading.Thread(target=sign, args=(name,)) for name in ("alice", "bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    return results


def test_two_people_signing_at_once_pay_once_and_both_are_kept(sql_backend: Backend) -> None:
    for round_ in range(4):
        bank = Bank()
        runner = ToolRunner(bank.registry(), store=sql_backend())
        approval_id = runner.call("pay", {"to": f"p{round_}", "cents": 5})["approval_id"]
        run_store_steps(runner.store, runner.approvals.require(approval_id, 2))
        results = _sign_at_once(sql_backend, bank, approval_id)
        assert len(bank.paid) == 1, results
        assert sorted(r.get("error", "ok") for r in results.values()) == ["approval_required", "ok"]
        record = runner.approvals.get(approval_id)
        assert {s["who"] for s in record["signoffs"]} | {record["decided_by"]} == {"alice", "bob"}


def test_require_leaves_a_decided_approval_as_it_is(backend: Backend) -> None:
    bank = Bank()
    runner = ToolRunner(bank.registry(), store=backend())
    approval_id = runner.call("pay", {"to": "ana", "cents": 5})["approval_id"]
    assert runner.approve(approval_id, approver="alice")["ok"] is True
    record = run_store_steps(runner.store, runner.approvals.require(approval_id, 2))
    assert record is not None and "approvers_needed" not in record
    assert run_store_steps(runner.store, runner.approvals.require("apr-none", 2)) is None
    with pytest.raises(ValueError):
        run_store_steps(runner.store, runner.approvals.require(approval_id, 0))


# ---------------------------------------------------------------- ask the lookup again


def _in_doubt(backend: Backend) -> tuple[Bank, ToolRunner, str]:
    """An approved payment that landed and then raised, its lookup down: outcome_unknown."""
    bank = Bank(lands_then_raises=True)
    runner = ToolRunner(bank.registry(), store=backend())
    approval_id = runner.call("pay", {"to": "ana", "cents": 5})["approval_id"]
    result = runner.approve(approval_id, approver="alice")
    assert result["error"] == "outcome_unknown" and len(bank.paid) == 1
    return bank, runner, approval_id


def test_asking_the_lookup_again_settles_a_payment_that_landed(backend: Backend,
                                                               driver) -> None:
    bank, runner, approval_id = _in_doubt(backend)
    assert driver(runner, "recheck", approval_id, approver="ops")["error"] == "outcome_unknown"
    bank.answer = "done"  # (above: the lookup still down)
    result = driver(runner, "recheck", approval_id, approver="ops")
    assert result["ok"] is True and result["data"] == "paid 5 to ana"
    assert runner.approve(approval_id)["data"] == "paid 5 to ana"  # the receipt is its result
    assert runner.store.key_entry(runner.approvals.get(approval_id)["key"]).state == "completed"
    assert len(bank.paid) == 1 and bank.lookups >= 3
    assert audit(runner.store)[-2:] == [("lookup", "ops"), ("lookup", "ops")]
    assert driver(runner, "recheck", approval_id)["replayed"] is True  # settled: not asked again
    assert len(bank.paid) == 1


def test_asking_the_lookup_again_frees_a_payment_that_did_not_land(backend: Backend,
                                                                   driver) -> None:
    bank, runner, approval_id = _in_doubt(backend)
    bank.answer = "not done"
    result = driver(runner, "recheck", approval_id, approver="ops")
    assert result["error"] == "transient_failure" and result["retryable"] is False
    key = runner.approvals.get(approval_id)["key"]
    assert runner.store.key_entry(key) is None  # the key is free
    assert len(bank.paid) == 1  # the handler never ran again


def test_a_tool_without_a_lookup_stays_in_doubt(backend: Backend, driver) -> None:
    bank = Bank(lands_then_raises=True)
    runner = ToolRunner(bank.registry(with_lookup=False), store=backend())
    approval_id = runner.call("pay", {"to": "ana", "cents": 5})["approval_id"]
    assert runner.approve(approval_id, approver="alice")["error"] == "outcome_unknown"
    assert driver(runner, "recheck", approval_id, approver="ops")["error"] == "outcome_unknown"
    assert len(bank.paid) == 1 and bank.lookups == 0
    assert driver(runner, "recheck", "apr-unknown")["error"] == "forbidden"
