"""Process killed mid-write: after a restart, the status lookup recovers; no second write.

Every run of the handler appends a line to a log file on disk, so the count survives the
process that made it (a counter in memory would die with the child).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from agentkit import SQLiteIdempotencyStore, ToolRegistry, ToolRunner, ToolSpec

    work = Path(sys.argv[1])
    crash = sys.argv[2] == "crash"

    def save(name: str, text: str) -> dict:
        with open(work / "runs.log", "a") as log:
            log.write("run\\n")
        (work / name).write_text(text)          # the write takes effect ...
        if crash:
            os._exit(1)                          # ... and the process dies before recording it
        return {"saved": name}

    def status(name: str, text: str):
        target = work / name
        return {"saved": name} if target.exists() and target.read_text() == text else None

    spec = ToolSpec("save", "Save a file.", "reversible_write", 5.0, 3, 200, save, status_lookup=status)
    store = SQLiteIdempotencyStore(work / "store.sqlite")
    runner = ToolRunner(ToolRegistry([spec]), store=store, sleep=lambda s: None)
    print(runner.call("save", {"name": "brief.md", "text": "hello"}))
    """
)


def run(work: Path, mode: str) -> subprocess.CompletedProcess[str]:
    script = work / "child.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, str(script), str(work), mode],
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_write_killed_before_its_result_was_recorded_is_not_run_again(tmp_path):
    crashed = run(tmp_path, "crash")
    assert crashed.returncode == 1 and (tmp_path / "brief.md").read_text() == "hello"
    assert (tmp_path / "runs.log").read_text().count("run") == 1

    restarted = run(tmp_path, "normal")
    assert restarted.returncode == 0, restarted.stderr
    assert "'ok': True" in restarted.stdout and '"saved": "brief.md"' in restarted.stdout
    assert (tmp_path / "runs.log").read_text().count("run") == 1, "the handler ran a second time"

    replayed = run(tmp_path, "normal")  # the recovered receipt is now the stored result
    assert "'replayed': True" in replayed.stdout
    assert (tmp_path / "runs.log").read_text().count("run") == 1


def test_a_process_killed_before_the_write_lets_the_restart_write_once(tmp_path):
    script = SCRIPT.replace('(work / name).write_text(text)          # the write takes effect ...',
                            'pass')
    (tmp_path / "child.py").write_text(script)
    crashed = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(tmp_path), "crash"],
                             capture_output=True, text=True, timeout=120, check=False)
    assert crashed.returncode == 1 and not (tmp_path / "brief.md").exists()
    restarted = run(tmp_path, "normal")
    assert "'ok': True" in restarted.stdout and "'attempts': 1" in restarted.stdout
    assert (tmp_path / "runs.log").read_text().count("run") == 2  # the crashed try + one real write
    assert (tmp_path / "brief.md").read_text() == "hello"


PAYMENT_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from agentkit import SQLiteIdempotencyStore, ToolRegistry, ToolRunner, ToolSpec

    work, mode, lookup = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "lookup"

    def pay(to: str, cents: int) -> str:
        with open(work / "payments.log", "a") as log:
            log.write(f"{to} {cents}\\n")            # the payment lands ...
        if mode == "approve_and_die":
            os._exit(1)                              # ... and the process dies mid-write
        return f"paid {cents} to {to}"

    def status(to: str, cents: int):
        landed = (work / "payments.log").read_text().splitlines() if (work / "payments.log").exists() else []
        return f"paid {cents} to {to}" if f"{to} {cents}" in landed else None

    spec = ToolSpec("pay", "Pay.", "irreversible_write", 5.0, 1, 200, pay,
                    status_lookup=status if lookup else None)
    # a later process looks after the approval's lease (the dead approver's worst case) passed
    later = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    runner = ToolRunner(ToolRegistry([spec]), store=SQLiteIdempotencyStore(work / "store.sqlite"),
                        sleep=lambda s: None, clock=lambda: time.time() + later)
    asked = runner.call("pay", {"to": "ada", "cents": 500})
    if mode == "approve_and_die":
        runner.approve(asked["approval_id"])
    print(json.dumps({"call": asked, "pending": len(runner.pending_approvals()),
                      "again": runner.call("pay", {"to": "ada", "cents": 500})}))
    """
)


def pay_child(work: Path, mode: str, lookup: bool, later: float = 0.0) -> subprocess.CompletedProcess[str]:
    script = work / "pay.py"
    script.write_text(PAYMENT_SCRIPT)
    return subprocess.run([sys.executable, str(script), str(work), mode,
                           "lookup" if lookup else "none", str(later)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_an_approval_whose_approver_died_mid_write_is_settled_by_the_next_call(tmp_path):
    """Before, every later call of the same payment answered ``in_progress`` for ever (the
    approval stayed ``running`` and in nobody's list); ``approve(id)`` alone recovered it, and
    only once the dead approver's lease had passed. Now the call goes approve's way, and a
    dead approver is seen at once (its process is gone on this host: docs/design.md#approvals):
    the status lookup settles it: the receipt, and no second payment."""
    import json

    died = pay_child(tmp_path, "approve_and_die", lookup=True)
    assert died.returncode == 1
    assert (tmp_path / "payments.log").read_text().splitlines() == ["ada 500"]
    soon = json.loads(pay_child(tmp_path, "ask", lookup=True).stdout)
    assert (soon["call"]["ok"], soon["call"]["data"]) == (True, "paid 500 to ada")
    assert soon["again"]["data"] == "paid 500 to ada" and soon["again"]["replayed"] is True
    assert soon["pending"] == 0
    later = json.loads(pay_child(tmp_path, "ask", lookup=True, later=600).stdout)
    assert later["call"]["replayed"] is True and later["call"]["data"] == "paid 500 to ada"
    assert (tmp_path / "payments.log").read_text().splitlines() == ["ada 500"]  # one payment


def test_without_a_lookup_the_next_call_settles_it_outcome_unknown(tmp_path):
    import json

    assert pay_child(tmp_path, "approve_and_die", lookup=False).returncode == 1
    later = json.loads(pay_child(tmp_path, "ask", lookup=False, later=600).stdout)
    assert (later["call"]["error"], later["call"]["retryable"]) == ("outcome_unknown", False)
    assert later["again"]["error"] == "outcome_unknown"  # settled: never paid a second time
    assert (tmp_path / "payments.log").read_text().splitlines() == ["ada 500"]
