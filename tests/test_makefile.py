"""`make lab` as the README promises: --allow-root for root only, JUPYTER_ARGS passed through.

Read from ``make -n`` (print, do not run): the recipe line is what would start JupyterLab.
Who is root is decided by ``id -u``, so each case puts a fake ``id`` first on the PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def lab_command(tmp_path: Path, uid: int, *make_args: str) -> list[str]:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (fake / "id").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    env.pop("JUPYTER_ARGS", None)
    out = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "lab", *make_args],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert out.returncode == 0, out.stderr
    (line,) = [line for line in out.stdout.splitlines() if "jupyter lab" in line]
    return line.split()


def test_root_gets_allow_root(tmp_path: Path) -> None:
    command = lab_command(tmp_path, 0)
    assert command[1:] == ["lab", "--notebook-dir=notebooks", "--allow-root"]


def test_other_users_do_not(tmp_path: Path) -> None:
    command = lab_command(tmp_path, 1000)
    assert command[1:] == ["lab", "--notebook-dir=notebooks"]


def test_jupyter_args_are_passed_through(tmp_path: Path) -> None:
    extra = "JUPYTER_ARGS=--port=8890 --no-browser"
    assert lab_command(tmp_path, 1000, extra)[1:] == [
        "lab", "--notebook-dir=notebooks", "--port=8890", "--no-browser",
    ]
    assert lab_command(tmp_path, 0, extra)[1:] == [
        "lab", "--notebook-dir=notebooks", "--allow-root", "--port=8890", "--no-browser",
    ]
