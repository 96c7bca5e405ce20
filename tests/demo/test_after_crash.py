"""Three ways to be safe after a crash (agentkit/demo/after_crash.py, notebook 04 §11): a worker
killed for real right after its write, then the same request in a new runner on the same store.
Counted: the handler's real calls in both processes, the status lookups, the real payments or
committed rows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agentkit import ToolRegistry, ToolRunner, faults
from agentkit.demo import after_crash
from agentkit.demo.payments import PaymentService

EXPECTED = {  # way: (the model sees, handler calls in all, status lookups, payments or rows)
    "status_lookup": ("ok", 1, 1, 1),
    "forwarded_key": ("ok", 1, 1, 1),
    "key_not_forwarded": ("ok", 1, 1, 2),
    "one_transaction": ("ok", 2, 0, 1),
}


@pytest.mark.parametrize("way", after_crash.WAYS)
def test_each_way_after_a_worker_killed_after_its_write(way: str, tmp_path: Path) -> None:
    after_crash.kill_after_write(way, tmp_path)
    before = after_crash.effects(way, tmp_path)
    # the transactional write died before its commit: nothing committed; a payment went out
    assert before == (0 if way == "one_transaction" else 1)
    tool = after_crash.tool(way, tmp_path)
    handler = faults.count_calls(tool.handler)
    runner = ToolRunner(ToolRegistry([dataclasses.replace(tool, handler=handler)]),
                        store=after_crash.store(tmp_path), context=after_crash.TASK)
    try:
        result = runner.call(tool.name, after_crash.ARGUMENTS[way])
        again = runner.call(tool.name, after_crash.ARGUMENTS[way])
        lookups = [r.step for r in runner.trace].count("status_lookup")
    finally:
        runner.store.close()
    seen = "ok" if result["ok"] else result["error"]
    assert (seen, 1 + handler.calls, lookups, after_crash.effects(way, tmp_path)) == EXPECTED[way]
    assert again["ok"] and again["replayed"] is True  # settled: asking again runs nothing
    assert 1 + handler.calls == EXPECTED[way][1]


def test_the_forwarded_key_is_the_runner_s_and_the_lookup_way_sends_a_reference(tmp_path: Path) -> None:
    for way in ("status_lookup", "forwarded_key"):
        after_crash.kill_after_write(way, tmp_path / way)
    charged = PaymentService(tmp_path / "forwarded_key" / "payments.sqlite3").charges()
    assert [c["idempotency_key"] for c in charged] == ["task-11:send_payment:pay-42"]
    looked_up = PaymentService(tmp_path / "status_lookup" / "payments.sqlite3")
    assert looked_up.charges()[0]["idempotency_key"] is None
    assert looked_up.find("pay-42") == {"charge": "ch_1", "to": "ACME Ltd", "amount": 120,
                                        "status": "succeeded"}
    assert looked_up.find("pay-43") is None


def test_an_unknown_way_is_refused_before_any_process_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown way"):
        after_crash.kill_after_write("hope", tmp_path)
    with pytest.raises(ValueError, match="unknown way"):
        after_crash.tool("hope", tmp_path)
    assert not list(tmp_path.iterdir())
