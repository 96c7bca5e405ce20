"""The demo's payment service, which deduplicates by key as payment APIs do, and the failure
matrix's payment rows (docs/design.md#current-call, #failure-matrix): a worker killed after the
payment, its key forwarded (one payment, no lookup of the tool's own) or not (two payments).
Payments are the service's real charges, counted on disk across processes."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agentkit import SQLiteIdempotencyStore, ToolRegistry, ToolRunner
from agentkit.demo import matrix
from agentkit.demo.harness import audit_records
from agentkit.demo.payments import IdempotencyKeyReused, PaymentService
from agentkit.demo.scenarios import (
    ARGUMENTS,
    IRREVERSIBLE,
    LEARNER,
    PAYMENT_FAILURES,
    Bench,
    Subject,
    make_payment_tool,
    payment_key,
    run_child,
)

KEY = payment_key(LEARNER, ARGUMENTS[IRREVERSIBLE])  # "matrix:send_payment:pay-42"
WAIT = 10.0


def steps(cell: matrix.CellResult) -> list[tuple[str, str]]:
    return [(r.step, r.outcome) for r in cell.runner.trace]


# ------------------------------------------------------------------ the service


def test_a_key_seen_before_answers_the_original_charge_and_pays_nothing(tmp_path: Path) -> None:
    service = PaymentService(tmp_path / "payments.sqlite3")
    first = service.charge("ACME Ltd", 120, idempotency_key="k-1")
    again = service.charge("ACME Ltd", 120, idempotency_key="k-1")
    assert again == first == {"charge": "ch_1", "to": "ACME Ltd", "amount": 120, "status": "succeeded"}
    assert (service.requests, service.payments, service.replays) == (2, 1, 1)
    other = service.charge("ACME Ltd", 120, idempotency_key="k-2")  # another key: another payment
    assert other["charge"] == "ch_2" and service.payments == 2


def test_without_a_key_every_request_is_a_payment(tmp_path: Path) -> None:
    service = PaymentService(tmp_path / "payments.sqlite3")
    charges = [service.charge("ACME Ltd", 120) for _ in range(3)]
    assert [c["charge"] for c in charges] == ["ch_1", "ch_2", "ch_3"]
    assert (service.requests, service.payments, service.replays) == (3, 3, 0)
    assert [c["idempotency_key"] for c in service.charges()] == [None, None, None]


def test_a_key_reused_with_other_parameters_is_refused_and_pays_nothing(tmp_path: Path) -> None:
    service = PaymentService(tmp_path / "payments.sqlite3")
    service.charge("ACME Ltd", 120, idempotency_key="k-1")
    with pytest.raises(IdempotencyKeyReused, match="other parameters"):
        service.charge("ACME Ltd", 999, idempotency_key="k-1")
    with pytest.raises(IdempotencyKeyReused):
        service.charge("Other Ltd", 120, idempotency_key="k-1")
    assert (service.requests, service.payments, service.replays) == (3, 1, 0)
    assert service.charges() == [{"charge": "ch_1", "to": "ACME Ltd", "amount": 120,
                                  "status": "succeeded", "idempotency_key": "k-1"}]


def test_one_key_from_many_threads_at_once_is_one_payment(tmp_path: Path) -> None:
    service = PaymentService(tmp_path / "payments.sqlite3")
    start = threading.Barrier(8)
    answers: list[dict[str, object]] = []

    def pay() -> None:
        start.wait(WAIT)
        answers.append(PaymentService(service.path).charge("ACME Ltd", 120, idempotency_key="k-1"))

    threads = [threading.Thread(target=pay) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert len(answers) == 8 and all(a == answers[0] for a in answers)
    assert (service.payments, service.replays) == (1, 7)


def test_the_service_counts_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "payments.sqlite3"
    code = ("import sys; from agentkit.demo.payments import PaymentService; "
            "print(PaymentService(sys.argv[1]).charge('ACME Ltd', 120, idempotency_key='k-1')['charge'])")
    child = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                           timeout=60, check=True)
    assert child.stdout.strip() == "ch_1"
    service = PaymentService(path)
    assert service.charge("ACME Ltd", 120, idempotency_key="k-1")["charge"] == "ch_1"
    assert (service.requests, service.payments) == (2, 1)


# ------------------------------------------------------------------ the tool


def test_the_payment_tool_forwards_the_runner_s_key(tmp_path: Path) -> None:
    service = PaymentService(tmp_path / "payments.sqlite3")
    tool = make_payment_tool(service)
    runner = ToolRunner(ToolRegistry([tool]), context=LEARNER)
    asked = runner.call("send_payment", ARGUMENTS[IRREVERSIBLE])
    paid = runner.approve(asked["approval_id"])
    assert paid["ok"] and '"charge": "ch_1"' in paid["data"]
    assert service.charges()[0]["idempotency_key"] == KEY  # the runner's key, sent downstream
    assert service.payments == 1
    # Outside a call there is no key to forward (current_call() is None): the same resend
    # called by hand is a new request, a new payment.
    assert tool.status_lookup is not None
    assert tool.status_lookup(**ARGUMENTS[IRREVERSIBLE])["charge"] == "ch_2"
    assert service.payments == 2


def test_a_tool_that_does_not_forward_sends_no_key(tmp_path: Path) -> None:
    service = PaymentService(tmp_path / "payments.sqlite3")
    runner = ToolRunner(ToolRegistry([make_payment_tool(service, forward_key=False)]), context=LEARNER)
    runner.approve(runner.call("send_payment", ARGUMENTS[IRREVERSIBLE])["approval_id"])
    assert [c["idempotency_key"] for c in service.charges()] == [None]


# ------------------------------------------------------------------ the matrix's payment rows


def test_killed_after_the_payment_with_the_key_forwarded_pays_once(tmp_path: Path) -> None:
    cell = matrix.play("killed_after_payment_key_forwarded", "irreversible_write", workdir=tmp_path)
    assert cell.observed == "ok" and cell.result["replayed"] is False and cell.attempts == 0
    assert cell.handler_calls == 1  # the dead worker's; the new runner ran no attempt
    assert cell.writes == 1  # one payment
    assert steps(cell) == [("status_lookup", "done")]  # the resend, answered by the original charge
    assert '"charge": "ch_1"' in cell.result["data"]
    (work,) = tmp_path.iterdir()
    service = PaymentService(work / "payments.sqlite3")
    assert (service.requests, service.payments, service.replays) == (2, 1, 1)
    assert [c["idempotency_key"] for c in service.charges()] == [KEY]


def test_killed_after_the_payment_without_the_key_pays_twice(tmp_path: Path) -> None:
    cell = matrix.play("killed_after_payment_key_not_forwarded", "irreversible_write", workdir=tmp_path)
    assert cell.observed == "ok" and cell.handler_calls == 1
    assert cell.writes == 2  # the resend was a new request: a second payment
    assert steps(cell) == [("status_lookup", "done")]
    assert '"charge": "ch_2"' in cell.result["data"]  # the model is told of the second one
    (work,) = tmp_path.iterdir()
    service = PaymentService(work / "payments.sqlite3")
    assert (service.requests, service.payments, service.replays) == (2, 2, 0)


def _after_the_kill(tmp_path: Path, *, forward: bool, **spec_changes: object) -> tuple[Bench, PaymentService]:
    """A worker asked, was approved, paid and died; a new runner on the same store."""
    service = PaymentService(tmp_path / "payments.sqlite3")
    run_child("pay_and_die", str(tmp_path), "forward" if forward else "plain")
    assert service.payments == 1
    bench = Bench(IRREVERSIBLE, spec=make_payment_tool(service, forward_key=forward),
                  store=SQLiteIdempotencyStore(tmp_path / "store.sqlite"), writes_in=service,
                  **spec_changes)
    return bench, service


def test_after_recovery_asking_again_replays_and_pays_nothing(tmp_path: Path) -> None:
    bench, service = _after_the_kill(tmp_path, forward=True)
    try:
        first = bench.ask(ARGUMENTS[IRREVERSIBLE])
        again = bench.ask(ARGUMENTS[IRREVERSIBLE])
        assert first["ok"] and again["ok"] and again["replayed"] is True
        assert again["data"] == first["data"]
        assert bench.fault.calls == 0 and service.requests == 2 and service.payments == 1
    finally:
        bench.close()


def test_without_any_lookup_the_kill_is_outcome_unknown_and_pays_once(tmp_path: Path) -> None:
    """What the key buys: the same kill with no status lookup leaves the model with
    outcome_unknown and a person to find out (the kit never re-runs a write on a guess)."""
    bench, service = _after_the_kill(tmp_path, forward=False, status_lookup=None)
    try:
        result = bench.ask(ARGUMENTS[IRREVERSIBLE])
        assert (result["error"], result["retryable"]) == ("outcome_unknown", False)
        assert bench.fault.calls == 0 and service.requests == 1 and service.payments == 1
    finally:
        bench.close()


def test_the_matrix_table_shows_the_payments_beside_the_handler_calls() -> None:
    rows = [r for r in matrix.load_matrix() if r["failure"] in PAYMENT_FAILURES]
    records = matrix.matrix_records(rows)
    assert [(r["failure"], r["handler_calls"], r["writes"], r["pass"]) for r in records] == [
        ("killed_after_payment_key_forwarded", 1, 1, True),
        ("killed_after_payment_key_not_forwarded", 1, 2, True),
    ]
    notes = [r["note"] for r in rows]
    assert "1 payment" in notes[0] and "2 payments" in notes[1]


def test_the_payment_rows_play_the_demo_tool_only(tmp_path: Path) -> None:
    service = PaymentService(tmp_path / "payments.sqlite3")
    mine = Subject.of(make_payment_tool(service), ARGUMENTS[IRREVERSIBLE])
    with pytest.raises(ValueError, match="demo's payment tool"):
        matrix.play("killed_after_payment_key_forwarded", "irreversible_write", subject=mine)
    records = audit_records(make_payment_tool(service), ARGUMENTS[IRREVERSIBLE],
                            {**ARGUMENTS[IRREVERSIBLE], "amount": 999})
    assert not {r["failure"] for r in records} & set(PAYMENT_FAILURES)


def test_a_subject_s_bench_plays_the_payment_rows(tmp_path: Path) -> None:
    """Notebook 09 instruments every bench a subject makes: the recovering runner is one."""
    made: list[Bench] = []

    @dataclasses.dataclass(frozen=True)
    class Watched(Subject):
        def bench(self, **options: object) -> Bench:
            bench = super().bench(**options)
            made.append(bench)
            return bench

    cell = matrix.play("killed_after_payment_key_forwarded", "irreversible_write",
                       workdir=tmp_path, subject=Watched.demo("irreversible_write"))
    assert [bench.runner for bench in made] == [cell.runner]
    assert made[0].spec.name == "send_payment" and made[0].writes == 1
