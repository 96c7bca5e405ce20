"""An approval has an owner, and a dead approver is seen at once (docs/design.md#approvals).

- Every approval records its task and, under an engine face, its workflow; only that
  workflow's runner decides it (a plain ``approve``/``deny`` is refused and leaves it
  pending), and when the workflow ends what it left pending is settled ``forbidden``.
- An approved irreversible write whose approver process was killed (SIGKILL, mid-payment) is
  recovered at once by the owner check, as a reversible write's claim is, not after its
  lease: the status lookup settles it (the receipt, or it runs once), or without a lookup it
  is ``outcome_unknown`` — never a second payment.

Real payments are counted in a ledger file that the handler appends to, in this process and
in the killed one (tests/policy/_approval_worker.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _approval_worker import ledger_lines, make_registry
from test_stores import Backend  # tests/ is on sys.path (pytest rootdir-relative import)

from agentkit import CallContext, ToolRunner
from agentkit.faces.durable import WorkflowRunners
from agentkit.policy.approvals import PENDING, RUNNING, SETTLED
from agentkit.policy.drivers import run_store_steps

WORKER = Path(__file__).with_name("_approval_worker.py")
ROOT = Path(__file__).resolve().parents[2]
DBOS_WF = {"engine": "dbos", "id": "order-7"}
FORBIDDEN = {"ok": False, "error": "forbidden", "retryable": False, "attempts": 0,
             "replayed": False}


def runner_of(store: Any, workdir: Path, workflow: dict[str, str] | None = None,
              task_id: str = "default") -> ToolRunner:
    runner = ToolRunner(make_registry(workdir), store=store, context=CallContext(task_id=task_id))
    runner.approvals.workflow = workflow
    return runner


def payments(workdir: Path) -> int:
    return len(ledger_lines(workdir))


# --------------------------------------------------------------------------- the owner


def test_every_approval_records_its_task_and_workflow(backend, tmp_path):
    store = backend()
    plain = runner_of(store, tmp_path, task_id="chat-1")
    owned = WorkflowRunners(make_registry(tmp_path), store, None, {}, engine="dbos").get("order-7")
    first = plain.call("send_invoice", {"to": "ana", "cents": 5})["approval_id"]
    second = owned.call("send_invoice", {"to": "ana", "cents": 5})["approval_id"]
    assert first != second  # two tasks, two keys
    records = {r["approval_id"]: r for r in store.list_approvals()}
    assert (records[first]["task_id"], records[first]["workflow"]) == ("chat-1", None)
    assert (records[second]["task_id"], records[second]["workflow"]) == ("order-7", DBOS_WF)


def test_a_plain_decision_on_a_workflows_approval_is_refused_and_leaves_it_pending(
        backend, tmp_path):
    store = backend()
    workflow = runner_of(store, tmp_path, DBOS_WF, task_id="order-7")
    approval_id = workflow.call("send_invoice", {"to": "bob", "cents": 7})["approval_id"]
    plain = runner_of(store, tmp_path)
    other = runner_of(store, tmp_path, {"engine": "dbos", "id": "order-8"})
    temporal = runner_of(store, tmp_path, {"engine": "temporal", "id": "order-7"})
    for decider in (plain, other, temporal):
        assert decider.approve(approval_id) == FORBIDDEN
        assert decider.deny(approval_id) == FORBIDDEN
    assert store.get_approval(approval_id)["state"] == PENDING
    assert payments(tmp_path) == 0
    # the workflow's own runner decides it: one payment
    paid = workflow.approve(approval_id)
    assert paid["ok"] is True and paid["attempts"] == 1
    assert payments(tmp_path) == 1
    # once settled, anyone is told what happened (a replay), and nothing runs again
    assert plain.approve(approval_id)["replayed"] is True
    assert payments(tmp_path) == 1


def test_an_async_plain_decision_is_refused_too(backend, tmp_path):
    store = backend()
    workflow = runner_of(store, tmp_path, DBOS_WF, task_id="order-7")
    approval_id = workflow.call("send_invoice", {"to": "eve", "cents": 3})["approval_id"]
    plain = runner_of(store, tmp_path)

    async def decide() -> tuple[dict[str, Any], dict[str, Any]]:
        return await plain.aapprove(approval_id), await plain.adeny(approval_id)

    assert asyncio.run(decide()) == (FORBIDDEN, FORBIDDEN)
    assert store.get_approval(approval_id)["state"] == PENDING
    assert payments(tmp_path) == 0


def test_a_workflow_that_ended_leaves_none_of_its_approvals_pending(backend, tmp_path):
    store = backend()
    workflow = runner_of(store, tmp_path, DBOS_WF, task_id="order-7")
    mine = [workflow.call("send_invoice", {"to": to, "cents": 1})["approval_id"]
            for to in ("a", "b")]
    others = runner_of(store, tmp_path, {"engine": "dbos", "id": "order-8"}, task_id="order-8")
    theirs = others.call("send_invoice", {"to": "a", "cents": 1})["approval_id"]
    closed = run_store_steps(store, workflow.approvals.close_owned(DBOS_WF, FORBIDDEN))
    assert sorted(closed) == sorted(mine)
    for approval_id in mine:
        record = store.get_approval(approval_id)
        assert record["state"] == SETTLED and record["result"] == FORBIDDEN
        assert workflow.approve(approval_id) == {**FORBIDDEN, "replayed": True}
    assert store.get_approval(theirs)["state"] == PENDING
    assert [r["approval_id"] for r in others.pending_approvals()] == [theirs]
    assert payments(tmp_path) == 0


# --------------------------------------------------------------------------- a dead approver


class Approver:
    """An approver in its own process (tests/policy/_approval_worker.py), stopped inside
    the handler, before or after the payment."""

    def __init__(self, backend: Backend, workdir: Path, approval_id: str, when: str) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), backend.spec, str(workdir), approval_id, when],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env)
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()  # blocks until the handler stops there
        assert line == "reached", line + self.process.stderr.read()  # type: ignore[union-attr]

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        assert self.process.returncode == -signal.SIGKILL

    def go_on(self) -> str:
        out, err = self.process.communicate(input="", timeout=60)
        assert self.process.returncode == 0, err
        return out


def approve(runner: ToolRunner, approval_id: str, driver: str) -> dict[str, Any]:
    if driver == "sync":
        return runner.approve(approval_id)
    return asyncio.run(runner.aapprove(approval_id))


CASES = [
    # tool, where the approver died, what the next approver gets, real payments in all
    ("send_invoice", "before", {"ok": True, "data": "paid 9 cents to kim", "attempts": 1,
                                "replayed": False}, 1),
    ("send_invoice", "after", {"ok": True, "data": "paid 9 cents to kim", "attempts": 0,
                               "replayed": False}, 1),
    ("send_blind", "before", {"ok": False, "error": "outcome_unknown", "retryable": False,
                              "attempts": 0, "replayed": False}, 0),
    ("send_blind", "after", {"ok": False, "error": "outcome_unknown", "retryable": False,
                             "attempts": 0, "replayed": False}, 1),
]


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize(("tool", "when", "expected", "paid"), CASES)
def test_an_approver_killed_mid_payment_is_recovered_at_once(sql_backend, tmp_path, driver, tool,
                                                             when, expected, paid):
    store = sql_backend()
    runner = runner_of(store, tmp_path)
    approval_id = runner.call(tool, {"to": "kim", "cents": 9})["approval_id"]
    Approver(sql_backend, tmp_path, approval_id, when).kill()
    assert store.get_approval(approval_id)["state"] == RUNNING  # its lease is minutes away
    assert payments(tmp_path) == (1 if when == "after" else 0)
    # the next approver does not wait out the lease: the owner check sees the process gone
    assert approve(runner, approval_id, driver) == expected
    assert payments(tmp_path) == paid
    if expected["ok"]:  # settled: asking again replays, nothing runs
        assert store.get_approval(approval_id)["state"] == SETTLED
        assert runner.approve(approval_id) == {**expected, "attempts": 0, "replayed": True}
    # the model's own call asks again the same way: never a second payment
    again = runner.call(tool, {"to": "kim", "cents": 9})
    assert again["error" if not again["ok"] else "data"] == expected.get("error", expected.get("data"))
    assert payments(tmp_path) == paid


def test_a_live_approver_in_another_process_is_still_in_progress(sql_backend, tmp_path):
    store = sql_backend()
    runner = runner_of(store, tmp_path)
    approval_id = runner.call("send_invoice", {"to": "lou", "cents": 4})["approval_id"]
    approver = Approver(sql_backend, tmp_path, approval_id, "before")
    try:
        busy = runner.approve(approval_id)
        assert busy["error"] == "in_progress" and busy["retryable"] is True
        assert payments(tmp_path) == 0
    finally:
        out = approver.go_on()
    assert "'ok': True" in out
    assert runner.approve(approval_id) == {"ok": True, "data": "paid 4 cents to lou",
                                           "attempts": 0, "replayed": True}
    assert payments(tmp_path) == 1
