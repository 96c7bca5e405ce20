"""The failure matrix (docs/design.md#failure-matrix): every row of data/failure_matrix.csv passes, a wrong
expectation is reported as a mismatch, and single cells show what really happened."""

from __future__ import annotations

import csv
import subprocess
import sys
import time

import pytest

from agentkit import faults
from agentkit.demo.matrix import (
    ARGUMENTS,
    CELLS,
    COLUMNS,
    CSV_PATH,
    EFFECTS,
    FAILURES,
    OUTPUT_LIMIT,
    PAYMENT_FAILURES,
    REVERSIBLE,
    Bench,
    CellResult,
    check_row,
    label,
    load_matrix,
    observe,
    play,
    run_matrix,
)

WAIT = 10.0


@pytest.fixture(scope="module")
def frame():
    return run_matrix()


def steps(cell: CellResult) -> list[tuple[str, str]]:
    return [(r.step, r.outcome) for r in cell.runner.trace]


# ------------------------------------------------------------------ the CSV


def test_the_csv_has_one_row_per_cell_of_design_section_8():
    rows = load_matrix()
    assert [(r["failure"], r["effect"]) for r in rows] == list(CELLS)
    assert len(rows) == 25  # the chapter's 23, and the two payment rows (docs/design.md#current-call)
    assert {r["failure"] for r in rows} == set(FAILURES)
    assert all(isinstance(r["handler_calls"], int) and r["note"] for r in rows)
    with open(CSV_PATH, newline="", encoding="utf-8") as f:
        assert next(csv.reader(f)) == ["failure", "effect", "expected", "handler_calls", "note"]


def test_the_dash_cells_of_design_are_absent():
    for failure in ("same_write_repeated", "same_key_other_payload", "process_killed_mid_write"):
        assert (failure, "read") not in CELLS
    assert ("process_killed_mid_write", "irreversible_write") not in CELLS
    for failure in PAYMENT_FAILURES:  # a payment is an irreversible write
        assert [(f, e) for f, e in CELLS if f == failure] == [(failure, "irreversible_write")]
    assert len(CELLS) == len(FAILURES) * len(EFFECTS) - 4 - 2 * len(PAYMENT_FAILURES)


def test_load_matrix_names_the_line_of_a_bad_row(tmp_path):
    good = CSV_PATH.read_text(encoding="utf-8").splitlines()
    cases = {
        "unknown failure": "gremlins,read,ok,0,x",
        "not a cell": "same_write_repeated,read,ok,1,x",
        "whole number": "budget_spent,read,budget_exhausted,two,x",
        "appears twice": good[1],
    }
    for message, line in cases.items():
        path = tmp_path / "bad.csv"
        path.write_text("\n".join([*good[:2], line]) + "\n", encoding="utf-8")
        with pytest.raises(ValueError, match=message) as raised:
            load_matrix(path)
        assert "line 3" in str(raised.value)
    (tmp_path / "header.csv").write_text("failure,effect,expected\n", encoding="utf-8")
    with pytest.raises(ValueError, match="header"):
        load_matrix(tmp_path / "header.csv")


def test_check_row_accepts_strings_and_ints():
    row = check_row({"failure": "budget_spent", "effect": "read", "expected": "budget_exhausted",
                     "handler_calls": "0"})
    assert row == {"failure": "budget_spent", "effect": "read", "expected": "budget_exhausted",
                   "handler_calls": 0, "note": ""}
    with pytest.raises(ValueError, match="missing expected"):
        check_row({"failure": "budget_spent", "effect": "read", "handler_calls": 0})


# ------------------------------------------------------------------ the whole matrix


def test_run_matrix_has_the_columns_and_every_row_passes(frame):
    assert list(frame.columns) == COLUMNS
    assert [tuple(x) for x in frame[["failure", "effect"]].to_numpy()] == list(CELLS)
    failed = frame[~frame["pass"]]
    assert failed.empty, failed.to_string(index=False)
    assert (frame["handler_calls"] == frame["expected_calls"]).all()
    assert (frame["observed"] == frame["expected"]).all()


def test_refusals_and_spent_budgets_run_nothing_and_spend_nothing(frame):
    nothing = frame[frame["failure"].isin(["missing_argument", "authorization_denial", "budget_spent"])]
    assert len(nothing) == 9
    assert (nothing["handler_calls"] == 0).all() and (nothing["budget_used"] == 0).all()


def test_a_spent_budget_refuses_an_irreversible_write_at_the_call_and_asks_nobody():
    """What runs and what every text says agree: `budget_exhausted` at the call itself, no
    approval opened (so no person is asked), 0 handler calls; the CSV's note (the explorer's
    "why") says exactly that, never "after approval"."""
    cell = play("budget_spent", "irreversible_write")
    assert cell.result["error"] == "budget_exhausted"
    assert cell.handler_calls == 0 and cell.attempts == 0 and cell.budget_used == 0
    steps = [record.step for record in cell.runner.trace]
    assert steps and set(steps) == {"refused"}, steps  # no approval step, no attempt
    assert cell.runner.pending_approvals() == []
    (row,) = [r for r in load_matrix() if (r["failure"], r["effect"]) == ("budget_spent", "irreversible_write")]
    assert "no person is asked" in row["note"] and "after approval" not in row["note"]


def test_budget_counts_attempts_and_lookups(frame):
    used = {(f, e): b for f, e, b in frame[["failure", "effect", "budget_used"]].to_numpy()}
    assert used[("transient_disconnect", "read")] == 3  # three attempts
    assert used[("transient_disconnect", "reversible_write")] == 2  # one attempt, one lookup
    assert used[("timeout_outcome_unknown", "reversible_write")] == 2
    assert used[("process_killed_mid_write", "reversible_write")] == 1  # the lookup only


def test_a_wrong_expectation_is_reported_as_a_mismatch():
    rows = [
        {"failure": "budget_spent", "effect": "read", "expected": "ok", "handler_calls": 0},
        {"failure": "same_write_repeated", "effect": "reversible_write",
         "expected": "ok+replayed", "handler_calls": 2},  # right code, wrong count
        {"failure": "missing_argument", "effect": "read", "expected": "invalid_arguments",
         "handler_calls": 0},
    ]
    result = run_matrix(rows)  # sorted like the CSV: missing, repeated, budget
    assert list(result.columns) == COLUMNS
    assert result["pass"].tolist() == [True, False, False]
    assert result["observed"].tolist() == ["invalid_arguments", "ok+replayed", "budget_exhausted"]
    assert result["handler_calls"].tolist() == [0, 1, 0]
    assert result["expected_calls"].tolist() == [0, 2, 0]


def test_rows_come_back_sorted_like_the_csv():
    rows = [r for r in load_matrix() if r["failure"] in ("budget_spent", "missing_argument")]
    result = run_matrix(list(reversed(rows)))
    assert result["failure"].tolist() == ["missing_argument"] * 3 + ["budget_spent"] * 3
    assert result["effect"].tolist() == list(EFFECTS) * 2


def test_a_cell_that_cannot_be_played_is_reported_not_raised(monkeypatch):
    from agentkit.demo import matrix

    def broken(effect, workdir):
        raise RuntimeError("scenario bug")

    monkeypatch.setitem(matrix.SCENARIOS, "budget_spent", broken)
    result = run_matrix([{"failure": "budget_spent", "effect": "read",
                          "expected": "budget_exhausted", "handler_calls": 0}])
    assert result["observed"].tolist() == ["error: RuntimeError"] and not result["pass"].any()


def test_workdir_holds_the_crash_cells_files(tmp_path):
    result = run_matrix([{"failure": "process_killed_mid_write", "effect": "reversible_write",
                          "expected": "ok", "handler_calls": 1}], workdir=tmp_path)
    assert result["pass"].all()
    (cell_dir,) = tmp_path.iterdir()
    assert (cell_dir / "store.sqlite").exists()
    assert (cell_dir / "ledger" / "writes.log").read_text().splitlines() == ["draft-7"]


# ------------------------------------------------------------------ single cells


def test_play_refuses_a_dash_cell():
    with pytest.raises(ValueError, match="not a cell"):
        play("same_write_repeated", "read")
    with pytest.raises(ValueError):
        play("missing_argument", "delete_everything")


def test_play_is_fast_and_tells_the_story():
    started = time.perf_counter()
    cell = play("transient_disconnect", "reversible_write")
    assert time.perf_counter() - started < 2.0  # generous: it takes a few milliseconds
    assert (cell.observed, cell.handler_calls, cell.attempts, cell.budget_used, cell.writes) == (
        "ok", 1, 1, 2, 1)
    assert steps(cell) == [("attempt", "transient_failure"), ("status_lookup", "done")]
    assert cell.text.splitlines() == [
        'call save_draft {"draft_id":"draft-7","text":"Hello team, the report is ready."}',
        '  -> ok: {"draft_id": "draft-7", "chars": 32, "saved": true}',
        "handler calls: 1, attempts: 1, budget used: 2, writes landed: 1",
    ]
    assert str(cell) == cell.text


def test_irreversible_cells_ask_for_approval_then_run_once():
    cell = play("transient_disconnect", "irreversible_write")
    (asked, approved) = cell.steps
    assert asked[1]["error"] == "approval_required" and asked[0].startswith("call send_payment")
    assert approved[0] == f"approve {asked[1]['approval_id']}"
    # docs/design.md#irreversible-writes: the payment may have landed (it did), and send_payment has no status
    # lookup, so the kit cannot call it failed: outcome_unknown, never transient_failure
    assert (approved[1]["error"], approved[1]["retryable"]) == ("outcome_unknown", False)
    assert cell.writes == 1 and cell.handler_calls == 1  # it went out once: never retried


def test_timeout_of_an_irreversible_write_is_unknown_although_it_landed():
    cell = play("timeout_outcome_unknown", "irreversible_write")
    assert (cell.result["error"], cell.result["retryable"]) == ("outcome_unknown", False)
    assert cell.handler_calls == 1 and cell.writes == 1


def test_timeout_cells_leave_no_blocked_handler_behind():
    for effect in EFFECTS:
        cell = play("timeout_outcome_unknown", effect)
        handles = [r._handle for r in cell.runner.trace if r._handle is not None]
        assert handles and all(h.done.wait(WAIT) for h in handles)  # released by play()


def test_timeout_of_a_read_is_retried_and_stays_retryable():
    cell = play("timeout_outcome_unknown", "read")
    assert steps(cell) == [("attempt", "outcome_unknown"), ("attempt", "outcome_unknown")]
    assert cell.result["retryable"] is True


def test_oversized_output_keeps_the_limit_and_records_the_size():
    for effect in EFFECTS:
        result = play("oversized_output", effect).result
        assert len(result["data"]) <= OUTPUT_LIMIT and result["original_chars"] == 1_000_000


def test_same_write_repeated_replays_without_running():
    cell = play("same_write_repeated", "reversible_write")
    assert [r["replayed"] for _, r in cell.steps] == [False, True]
    assert cell.steps[0][1]["data"] == cell.steps[1][1]["data"]
    assert steps(cell) == [("attempt", "ok"), ("replay", "ok")]


def test_process_killed_mid_write_recovers_through_the_status_lookup(tmp_path):
    cell = play("process_killed_mid_write", "reversible_write", workdir=tmp_path)
    assert cell.observed == "ok" and cell.result["replayed"] is False
    assert cell.handler_calls == 1 and cell.writes == 1 and cell.attempts == 0
    assert steps(cell) == [("status_lookup", "done")]


def test_observe_words():
    assert observe({"ok": True, "data": "x"}) == "ok"
    assert observe({"ok": True, "truncated": True, "replayed": True}) == "ok+truncated+replayed"
    assert observe({"ok": False, "error": "busy", "retryable": True}) == "busy+retryable"
    assert observe({"ok": False, "error": "outcome_unknown", "retryable": False}) == "outcome_unknown"
    assert label("timeout_outcome_unknown") == "timeout outcome unknown"
    assert label(REVERSIBLE) == "reversible write"


# ------------------------------------------------------------------ beyond the table: the runner's
# other reversible-write paths (docs/design.md#runner-policy), on the same benches


def test_disconnect_before_the_write_asks_then_retries_with_the_same_key():
    bench = Bench(REVERSIBLE, fault=lambda fn: faults.fail_times(fn, 1))
    try:
        result = bench.ask(ARGUMENTS[REVERSIBLE])
        assert result["ok"] and result["attempts"] == 2
        assert bench.handler_calls == 2 and bench.ledger.writes == 1
        trace = [(r.step, r.outcome) for r in bench.runner.trace]
        assert trace == [("attempt", "transient_failure"), ("status_lookup", "not_done"),
                         ("attempt", "ok")]
    finally:
        bench.close()


def test_no_second_attempt_beside_a_timed_out_one_still_running():
    bench = Bench(REVERSIBLE, fault=faults.hang, timeout_seconds=0.1)
    try:
        result = bench.ask(ARGUMENTS[REVERSIBLE])
        # The lookup says "not done", but the first attempt may still write: no rewrite.
        assert (result["error"], result["retryable"], result["attempts"]) == ("outcome_unknown", False, 1)
        assert bench.handler_calls == 1 and bench.ledger.writes == 0
    finally:
        bench.close()


def test_a_write_without_status_lookup_is_never_rewritten():
    bench = Bench(REVERSIBLE, fault=lambda fn: faults.fail_times(fn, 1), status_lookup=None)
    try:
        result = bench.ask(ARGUMENTS[REVERSIBLE])
        assert (result["error"], result["retryable"]) == ("outcome_unknown", False)
        assert bench.handler_calls == 1
    finally:
        bench.close()


def test_importing_the_matrix_stays_light():
    code = ("import sys, agentkit.demo.matrix, agentkit.demo.faults, agentkit.faces.cli; "
            "assert 'pandas' not in sys.modules and 'ipywidgets' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
