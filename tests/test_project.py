"""The project's promises to its users: light import, a sorted public API, conda in step."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import agentkit

ROOT = Path(__file__).resolve().parent.parent
#: The distribution's name (what pip installs), which is not the import name: PyPI's `agentkit`
#: is someone else's project.
DISTRIBUTION = "agentkit-boundary"


def test_public_api_is_sorted_and_complete():
    assert agentkit.__all__ == sorted(agentkit.__all__)
    for name in agentkit.__all__:
        assert hasattr(agentkit, name), name
    for pinned in ["Budget", "CallContext", "Effect", "ErrorCode", "IdempotencyStore",
                   "SQLiteIdempotencyStore", "ToolRegistry", "ToolRunner", "ToolSpec", "invoke_tool"]:
        assert pinned in agentkit.__all__


def test_import_is_light():
    code = ("import sys, agentkit; print(sorted({'pandas', 'ipywidgets', 'matplotlib', 'jsonschema', "
            "'opentelemetry', 'agents', 'pydantic_ai', 'langgraph', 'langchain_core'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_py_typed_marker_ships():
    assert (ROOT / "agentkit" / "py.typed").exists()


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower()


#: The rule for environment.yml: it installs exactly what a learner's `make lab` and
#: `make frameworks` install, i.e. the runtime dependencies and the `notebooks` and `frameworks`
#: extras with every extra they name in turn (`agentkit-boundary[mcp]`, ...), so a conda or Binder
#: user can run every notebook; and no developer tool (`dev` alone brings those: a developer
#: adds it with pip inside the environment).
ENVIRONMENT_EXTRAS = ("notebooks", "frameworks")
#: What only a developer needs: never in a learner's environment.
DEVELOPER_TOOLS = {"mypy", "ruff", "playwright", "pytest", "hypothesis", "nbval", "pandas-stubs"}


def _self_extras(requirement: str) -> list[str]:
    match = re.fullmatch(r"agentkit-boundary\[([\w,\s-]+)\]", requirement.strip())
    return [] if match is None else [e.strip() for e in match.group(1).split(",")]


def test_environment_yml_matches_pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = {_name(r) for r in project["dependencies"]}
    todo, seen = list(ENVIRONMENT_EXTRAS), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in extras[extra]:
            if requirement.startswith(DISTRIBUTION):
                todo += _self_extras(requirement)
            else:
                wanted.add(_name(requirement))
    assert not wanted & DEVELOPER_TOOLS, f"a developer tool in the learners' extras: {wanted & DEVELOPER_TOOLS}"
    text = (ROOT / "environment.yml").read_text()
    listed = {_name(m) for m in re.findall(r"^\s+- ([A-Za-z][\w.-]*[^\n]*)$", text, re.MULTILINE)}
    listed -= {"python", "pip", "pip:", "conda-forge"}
    assert "conda-forge" in text
    assert wanted == listed, f"only in pyproject: {wanted - listed}; only in environment.yml: {listed - wanted}"
    assert "- -e ." in text, "environment.yml must install the package itself"


def test_dev_brings_every_extra_a_learner_gets():
    """`make install` (dev) must run every notebook and test: it names the learners' extras."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = {e for requirement in extras["dev"] for e in _self_extras(requirement)}
    assert set(ENVIRONMENT_EXTRAS) <= named
    learners = {_name(r) for extra in ENVIRONMENT_EXTRAS for r in extras[extra]}
    assert not learners & DEVELOPER_TOOLS


def test_lab_settings_silence_the_news_popup():
    """`make install` copies this into the venv's JupyterLab settings: no news pop-up."""
    import json

    overrides = json.loads((ROOT / "jupyter-config" / "overrides.json").read_text())
    notification = overrides["@jupyterlab/apputils-extension:notification"]
    assert notification == {"checkForUpdates": False, "fetchNews": "false"}
    installed = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    if installed.exists():  # made by `make install`
        assert json.loads(installed.read_text()) == overrides


def test_the_tests_are_laid_out_like_the_package() -> None:
    """A change's tests are found next to where it lives: one folder per layer of the package
    (agentkit/boundary → tests/boundary, …), notebooks/ and browser/ for the lessons as run, and
    at the top only the checks of the project as a whole (layers, docs, packaging, README and
    the examples/ scripts that show it)."""
    tests = ROOT / "tests"
    layers = {p.name for p in (ROOT / "agentkit").iterdir()
              if (p / "__init__.py").is_file() and p.name != "data"}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert folders == layers | {"notebooks", "browser", "typing"}, folders ^ (layers | {"notebooks", "browser", "typing"})
    for folder in layers:
        assert sorted((tests / folder).glob("test_*.py")), f"tests/{folder}/ has no test"
    whole = {p.name for p in tests.glob("test_*.py")}
    assert whole == {
        "test_bench_harness.py", "test_docs.py", "test_examples.py", "test_layers.py",
        "test_makefile.py", "test_offline_room.py", "test_project.py", "test_readme.py", "test_user_typing.py",
        "test_wheel.py",
    }, whole
    names = [p.name for p in tests.rglob("*.py") if p.parent.name != "typing" and p.name != "conftest.py"]
    assert len(names) == len(set(names)), "a module name is used twice under tests/"
