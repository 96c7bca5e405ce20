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


def make_dry(tmp_path: Path, target: str, *make_args: str) -> list[str]:
    """The recipe lines `make -n target` would run for a venv that does not exist yet."""
    out = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, f"VENV={tmp_path / 'venv'}", *make_args],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def pip_installs(lines: list[str]) -> list[str]:
    return [line for line in lines if " -m pip install" in line]


def test_lab_installs_the_notebooks_extra_and_no_developer_tool(tmp_path: Path) -> None:
    installs = pip_installs(make_dry(tmp_path, "lab", f"WHEELS={tmp_path / 'none'}"))
    assert [line.split()[-1] for line in installs] == ["pip", "'.[notebooks]'"]
    assert not any("dev" in line for line in installs)


def test_test_installs_the_dev_extra(tmp_path: Path) -> None:
    installs = pip_installs(make_dry(tmp_path, "test", f"WHEELS={tmp_path / 'none'}"))
    assert installs[-1].endswith("'.[dev]'")


def test_frameworks_is_its_own_step_on_top_of_the_lab(tmp_path: Path) -> None:
    installs = pip_installs(make_dry(tmp_path, "frameworks", f"WHEELS={tmp_path / 'none'}"))
    assert [line.split()[-1] for line in installs] == [
        "pip", "'.[notebooks]'", "'.[notebooks,frameworks]'"]


def test_a_wheelhouse_makes_every_install_offline(tmp_path: Path) -> None:
    """With a wheel in WHEELS, pip never looks at an index: every install (pip itself, the
    lab, the frameworks) reads only the wheelhouse."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "pip-99-py3-none-any.whl").write_bytes(b"")
    installs = pip_installs(make_dry(tmp_path, "frameworks", f"WHEELS={wheels}"))
    assert len(installs) == 3
    for line in installs:
        assert f"--no-index --find-links {wheels}" in line, line
    # and without one, nothing changes: the index as usual
    for line in pip_installs(make_dry(tmp_path, "frameworks", f"WHEELS={tmp_path / 'none'}")):
        assert "--no-index" not in line, line


def test_wheelhouse_builds_what_the_room_installs(tmp_path: Path) -> None:
    (line,) = [line for line in make_dry(tmp_path, "wheelhouse") if " -m pip wheel" in line]
    assert line.split()[-3:] == ["pip", "'setuptools>=77'", "'.[notebooks,frameworks]'"]
    assert "--wheel-dir wheels" in line
