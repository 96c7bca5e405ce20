"""`make lab` as the README promises: --allow-root for root only, JUPYTER_ARGS passed through.

Read from ``make -n`` (print, do not run): the recipe line is what would start JupyterLab.
Who is root is decided by ``id -u``, so each case puts a fake ``id`` first on the PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


def pytest_command(tmp_path: Path) -> list[str]:
    (line,) = [line for line in make_dry(tmp_path, "test", f"WHEELS={tmp_path / 'none'}")
               if " -m pytest " in line]
    return line.split()


def test_make_test_loads_the_startup_plugin_before_anything_and_skips_the_browser_suite(
        tmp_path: Path) -> None:
    command = pytest_command(tmp_path)
    start = command.index("pytest")
    assert command[start + 1:start + 3] == ["-p", "tests._lean_pytest"]
    assert "--ignore=tests/browser" in command
    assert command[command.index("--dist") + 1] == "loadfile"


def test_the_plugin_keeps_jsonschemas_iri_grammar_out_and_nbformat_working() -> None:
    """What tests/_lean_pytest.py does to a fresh interpreter: the grammar's package is
    installed (so jsonschema would import it), yet it is never imported, and nbformat and
    jsonschema still validate, without the IRI format, as where the package is missing."""
    code = (
        "import importlib.metadata, sys\n"
        "import tests._lean_pytest\n"
        "import jsonschema, nbformat\n"
        "nbformat.validate(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1')]))\n"
        "jsonschema.validate('x', {'type': 'string', 'format': 'iri'},"
        " format_checker=jsonschema.FormatChecker())\n"
        "print(bool(importlib.metadata.version('rfc3987-syntax')),"
        " 'iri' in jsonschema.FormatChecker().checkers, sys.modules['rfc3987_syntax'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "None"]


PROBE = '''\
import atexit
import os

FOLDER = os.environ["PROBE_FOLDER"]


class FreedAtTeardown:
    def __init__(self):  # what __del__ needs, held here: the teardown clears modules' names
        self.path, self.flags = os.path.join(FOLDER, "teardown"), os.O_CREAT | os.O_WRONLY
        self.open, self.close = os.open, os.close

    def __del__(self):
        self.close(self.open(self.path, self.flags))


KEPT = FreedAtTeardown()  # a module's global: freed by the interpreter's final teardown
atexit.register(lambda: open(os.path.join(FOLDER, "atexit"), "w").close())


def test_in_a_worker():
    assert os.environ["PYTEST_XDIST_WORKER"] == "gw0"
'''


def test_a_worker_runs_its_atexit_handlers_and_skips_the_teardown(tmp_path: Path) -> None:
    """With tests/_lean_pytest.py an xdist worker still runs every ``atexit`` handler, and
    leaves without the interpreter's final teardown; the same module run as a script (the
    probe's own check) sees both."""
    seen = {}
    for case, command in (
        ("script", ["test_probe.py"]),
        ("worker", ["-m", "pytest", "-p", "tests._lean_pytest", "-n", "1", "-q",
                    "-p", "no:cacheprovider", "-p", "no:nbval", "-p", "no:langsmith_plugin",
                    "-c", "pytest.ini", "test_probe.py"]),
    ):
        folder = tmp_path / case
        folder.mkdir()
        (folder / "pytest.ini").write_text("[pytest]\n")
        (folder / "test_probe.py").write_text(PROBE)
        out = subprocess.run(
            [sys.executable, *command], cwd=folder, capture_output=True, text=True, timeout=120,
            env=dict(os.environ, PROBE_FOLDER=str(folder), PYTHONPATH=str(ROOT)), check=False)
        assert out.returncode == 0, out.stdout + out.stderr
        seen[case] = sorted(path.name for path in folder.iterdir()
                            if path.name in ("atexit", "teardown"))
        if case == "worker":
            assert "1 passed" in out.stdout, out.stdout
    assert seen == {"script": ["atexit", "teardown"], "worker": ["atexit"]}


def test_a_wheelhouse_serves_the_learners_installs_only(tmp_path: Path) -> None:
    """The wheelhouse holds what `make lab` and `make frameworks` need, not the developer
    tools: with one filled, `make install` (and so `make test`) still reads the index."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "pip-99-py3-none-any.whl").write_bytes(b"")
    installs = pip_installs(make_dry(tmp_path, "test", f"WHEELS={wheels}"))
    assert installs[-1].endswith("'.[dev]'") and "--no-index" not in installs[-1]
