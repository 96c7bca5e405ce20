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
