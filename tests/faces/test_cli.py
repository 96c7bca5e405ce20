"""The command line: ``python -m agentkit matrix|demo``, its help and its exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentkit.demo.matrix import COLUMNS, CSV_PATH
from agentkit.faces.cli import main

ROOT = Path(__file__).resolve().parents[2]


def agentkit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
    )


def one_row_csv(tmp_path: Path, row: str) -> Path:
    path = tmp_path / "matrix.csv"
    header = CSV_PATH.read_text(encoding="utf-8").splitlines()[0]
    path.write_text(f"{header}\n{row}\n", encoding="utf-8")
    return path


def test_help_explains_both_commands():
    run = agentkit_cli("--help")
    assert run.returncode == 0
    assert "matrix" in run.stdout and "demo" in run.stdout
    sub = agentkit_cli("matrix", "--help")
    assert sub.returncode == 0 and "--csv" in sub.stdout


def test_matrix_prints_the_table_and_exits_0():
    run = agentkit_cli("matrix")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split() == COLUMNS
    assert len([line for line in lines if line.rstrip().endswith("True")]) == 25
    assert "False" not in run.stdout
    assert lines[-1] == "all 25 cells as expected"


def test_matrix_exits_1_on_a_wrong_row(tmp_path):
    csv_path = one_row_csv(tmp_path, "budget_spent,read,ok,0,deliberately wrong")
    run = agentkit_cli("matrix", "--csv", str(csv_path))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "budget_exhausted" in run.stdout and "False" in run.stdout
    assert "1 of 1 cells differ: budget_spent × read" in run.stdout


def test_matrix_exits_2_on_an_unusable_csv(tmp_path):
    csv_path = one_row_csv(tmp_path, "gremlins,read,ok,0,no such failure")
    run = agentkit_cli("matrix", "--csv", str(csv_path))
    assert run.returncode == 2 and "unknown failure 'gremlins'" in run.stderr
    missing = agentkit_cli("matrix", "--csv", str(tmp_path / "nowhere.csv"))
    assert missing.returncode == 2


def test_unknown_or_missing_subcommand_is_a_usage_error():
    bogus = agentkit_cli("explode")
    assert bogus.returncode == 2 and "invalid choice" in bogus.stderr
    assert agentkit_cli().returncode == 2


def test_main_runs_in_process(tmp_path, capsys):
    csv_path = one_row_csv(tmp_path, "missing_argument,read,invalid_arguments,0,ok")
    assert main(["matrix", "--csv", str(csv_path)]) == 0
    assert "all 1 cells as expected" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0


def test_demo_prints_the_baseline_transcript():
    run = agentkit_cli("demo")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "Question: idempotency key retry"
    assert any(line.startswith("Answer: ") for line in lines)
    assert "search_local_sources" in run.stdout and "get_document" in run.stdout
