"""The kit works installed: build the wheel, install it into a fresh venv, run it elsewhere.

An editable checkout hides packaging mistakes (a data file read through a path relative to
the source tree, a sub-package missing from ``[tool.setuptools] packages``, a command that
needs a notebook extra). So this test does what a new user does, offline and in seconds:

1. copy the sources a build needs into a temporary folder (so the shared checkout gets no
   ``build/`` folder, and no stale file from an earlier build can slip into the wheel) and
   build the wheel with ``pip wheel --no-deps --no-build-isolation`` against the venv's own
   setuptools (the ``dev`` extra pins the ``[build-system]`` version; no network);
2. check what the wheel carries: every module of the source tree, ``py.typed``, the data
   files (``failure_matrix.csv`` and every ``sources/*.md``) as ``agentkit/data/``, and the two
   runtime dependencies in its metadata;
3. make a fresh venv outside the checkout, install the wheel with ``--no-deps --no-index``,
   and give it the two runtime dependencies, apsw and fastjsonschema, by copying those
   distributions' recorded files (their RECORD) from this environment: offline and the same on every
   machine, where asking PyPI would need the network and its answer would change;
4. with the working directory outside the checkout and no ``PYTHONPATH``, run
   ``python -m agentkit demo`` and ``python -m agentkit matrix`` (whose crash cell starts a
   child process of the installed kit) and the ``agentkit`` console script: exit 0 each.

Nothing is skipped or cached: every run builds and installs afresh (about 10 s).
"""

from __future__ import annotations

import csv
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What a build reads from the checkout (pyproject's readme, the package, the data mapping).
BUILD_INPUTS = ("pyproject.toml", "README.md", "agentkit", "data")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def run(
    command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of what the build reads: the wheel is checked against this snapshot."""
    copy = tmp_path_factory.mktemp("source")
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, copy / name, ignore=IGNORED)
        else:
            shutil.copy2(path, copy / name)
    return copy


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    built = run([
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
        "--disable-pip-version-check", "--quiet", "--wheel-dir", str(dist), str(source),
    ])
    assert built.returncode == 0, (
        "the wheel did not build (is the venv's setuptools older than [build-system] asks? "
        f"run `make install`):\n{built.stdout}\n{built.stderr}"
    )
    (path,) = dist.glob("agentkit_boundary-*.whl")  # the distribution's name, normalised
    return path


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel, apsw and fastjsonschema, nothing else; returns its
    python."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    put = run([
        sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
        "--disable-pip-version-check", "--quiet", str(wheel),
    ])
    assert put.returncode == 0, put.stdout + put.stderr
    where = run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    purelib = Path(where.stdout.strip())
    copy_distribution("apsw", purelib)  # (compiled: this venv's Python is the same one)
    copy_distribution("fastjsonschema", purelib)
    return python


def copy_distribution(name: str, purelib: Path) -> None:
    """Install ``name`` into ``purelib`` by copying the files its RECORD lists (on Linux
    and macOS a venv's purelib and platlib are one folder, so a compiled one too)."""
    dist = importlib.metadata.distribution(name)
    files = dist.files or []
    assert files, f"{name} has no RECORD to copy from"
    for file in files:
        if file.parts[0] == ".." or "__pycache__" in file.parts:
            continue  # scripts outside site-packages, bytecode: neither is needed
        target = purelib / file
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(str(file.locate())), target)


def clean_env() -> dict[str, str]:
    """This environment minus anything that could lead the child back to the checkout."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PYTHONUSERBASE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory that is not the checkout and contains no agentkit folder."""
    assert not (tmp_path / "agentkit").exists()
    return tmp_path


def test_wheel_carries_modules_data_and_marker(source: Path, wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(source).as_posix() for p in (source / "agentkit").rglob("*.py")}
    assert modules, "no modules found in the checkout"
    missing = sorted(modules - names)
    assert not missing, f"modules not in the wheel (list their package in pyproject): {missing}"
    assert "agentkit/py.typed" in names
    assert "agentkit/data/failure_matrix.csv" in names
    notes = (source / "data" / "sources").glob("*.md")
    sources = {f"agentkit/data/sources/{p.name}" for p in notes}
    assert sources, "no corpus notes in data/sources"
    assert sources <= names, sorted(sources - names)
    strays = [n for n in names if n.startswith(("data/", "tests/", "notebooks/"))]
    assert not strays, f"the wheel ships checkout folders: {strays}"


def test_wheel_declares_exactly_the_runtime_dependency(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(meta).decode()
    required = [line.split(":", 1)[1].strip() for line in text.splitlines()
                if line.startswith("Requires-Dist:")]
    base = [r for r in required if "extra ==" not in r]
    assert [re.split(r"[<>=!~ ]", r, maxsplit=1)[0] for r in base] == ["apsw", "fastjsonschema"], base
    assert "Requires-Python: >=3.10" in text


def test_the_wheel_is_named_for_the_distribution_not_for_someone_elses_package(
        wheel: Path, installed: Path, elsewhere: Path) -> None:
    """PyPI's `agentkit` is another project: the wheel is `agentkit-boundary`, imported as
    `agentkit`, and its own metadata answers to that name once installed."""
    assert wheel.name.startswith("agentkit_boundary-"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(meta).decode()
    assert "Name: agentkit-boundary" in text.splitlines()
    extras = {line.split(":", 1)[1].strip() for line in text.splitlines()
              if line.startswith("Provides-Extra:")}
    assert {"mcp", "postgres", "dbos", "temporal", "otel", "docs"} <= extras, extras
    code = ("import importlib.metadata as m, agentkit\n"
            "print(m.version('agentkit-boundary'))\n"
            "try:\n    m.version('agentkit')\nexcept m.PackageNotFoundError:\n    print('none')\n")
    out = run([str(installed), "-c", code], cwd=elsewhere, env=clean_env())
    assert out.returncode == 0, out.stderr
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    declared = re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE)
    assert declared, "pyproject.toml names no version"
    assert out.stdout.split() == [declared.group(1), "none"], out.stdout


def test_installed_kit_is_the_wheel_and_stays_light(installed: Path, elsewhere: Path) -> None:
    code = (
        "import sys, agentkit; print(agentkit.__file__); "
        "print(sorted({'pandas', 'ipywidgets', 'matplotlib', 'numpy'} & set(sys.modules)))"
    )
    out = run([str(installed), "-c", code], cwd=elsewhere, env=clean_env())
    assert out.returncode == 0, out.stderr
    where, heavy = out.stdout.splitlines()
    assert Path(where).is_relative_to(installed.parent.parent), where
    assert heavy == "[]"
    # Only the base install is there: the commands below must not need the notebook extras.
    missing = run([str(installed), "-c", "import pandas"], cwd=elsewhere, env=clean_env())
    assert missing.returncode != 0 and "No module named 'pandas'" in missing.stderr


def test_installed_demo_prints_the_baseline(installed: Path, elsewhere: Path) -> None:
    out = run([str(installed), "-m", "agentkit", "demo"], cwd=elsewhere, env=clean_env())
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "Question: idempotency key retry"
    assert "search_local_sources" in out.stdout and "get_document" in out.stdout
    assert lines[-1].startswith("Answer: ") and "[doc:" in lines[-1]


def test_installed_matrix_plays_every_cell(source: Path, installed: Path, elsewhere: Path) -> None:
    with (source / "data" / "failure_matrix.csv").open(encoding="utf-8") as f:
        cells = len(list(csv.DictReader(f)))
    out = run([str(installed), "-m", "agentkit", "matrix"], cwd=elsewhere, env=clean_env())
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == f"all {cells} cells as expected"
    assert "process_killed_mid_write" in out.stdout  # the cell played in a child process
    assert not list(elsewhere.iterdir()), "the matrix left files in the working directory"


def test_installed_console_script(installed: Path, elsewhere: Path) -> None:
    script = installed.parent / ("agentkit.exe" if os.name == "nt" else "agentkit")
    out = run([str(script), "--help"], cwd=elsewhere, env=clean_env())
    assert out.returncode == 0, out.stderr
    assert "matrix" in out.stdout and "demo" in out.stdout
