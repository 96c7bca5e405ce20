"""The old homes of what moved from ``agentkit.faces`` to ``agentkit.lessons``
(``agentkit/faces/moved.py``): for one release each old path still works, gives the lesson
module or name itself, and warns with a ``DeprecationWarning`` that names the new home, at the
caller's own line. The new paths are silent, and importing a face loads no lesson
(``tests/test_layers.py``).
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import agentkit.faces
import agentkit.lessons
from agentkit.faces import moved

ROOT = Path(__file__).resolve().parents[2]

#: Pinned here, not read from the shim: a path dropped from its table before the release that
#: announces it fails this test.
OLD_MODULES = {
    "agentkit.faces.exercises": "agentkit.lessons.exercises",
    "agentkit.faces.framework_cases": "agentkit.lessons.framework_cases",
    "agentkit.faces.framework_runs": "agentkit.lessons.framework_runs",
    "agentkit.faces.lesson": "agentkit.lessons.notebook",
    "agentkit.faces.timeline": "agentkit.lessons.timeline",
    "agentkit.faces.widgets": "agentkit.lessons.widgets",
}
OLD_NAMES = ("AgentStepper", "ApprovalPanel", "FailureExplorer", "capture_log",
             "fresh_workspace", "plot_timeline", "show")
LATER = "(the old path goes in the next release)"


@pytest.fixture
def fresh_old_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test imports the old paths as if for the first time: the aliases an earlier import
    left in ``sys.modules`` and on ``agentkit.faces`` are taken away (and put back afterwards).
    The lesson modules themselves stay loaded: they are what the aliases must give."""
    for name in list(sys.modules):
        if moved.new_home(name) is not None:
            monkeypatch.delitem(sys.modules, name)
    for old in OLD_MODULES:
        monkeypatch.delattr(agentkit.faces, old.rsplit(".", 1)[1], raising=False)


def learner_runs(statement: str) -> tuple[dict[str, Any], list[warnings.WarningMessage]]:
    """Run ``statement`` as a learner's own code (file ``<learner>``); its names and warnings."""
    namespace: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        # the statement is this file's own import line, run under a learner's file name
        exec(compile(statement, "<learner>", "exec"), namespace)  # noqa: S102
    return namespace, record


def test_the_shim_serves_exactly_the_pinned_paths():
    assert moved.MOVED_MODULES == OLD_MODULES
    assert sorted(moved.MOVED_NAMES) == sorted(OLD_NAMES) == sorted(agentkit.lessons.__all__)
    assert moved.NAMES_HOME == "agentkit.lessons"
    assert agentkit.faces.__all__ == []


@pytest.mark.usefixtures("fresh_old_paths")
@pytest.mark.parametrize(("old", "new"), sorted(OLD_MODULES.items()))
def test_an_old_module_path_is_the_lesson_module_and_warns(old, new):
    namespace, record = learner_runs(f"import {old} as alias\n")
    alias = namespace["alias"]
    assert alias is importlib.import_module(new)
    assert (alias.__name__, alias.__spec__.name) == (new, new)  # it keeps its own identity
    assert sys.modules[old] is alias
    assert [(w.category, str(w.message), w.filename, w.lineno) for w in record] == [
        (DeprecationWarning, f"{old} moved to {new}: import it from there {LATER}", "<learner>", 1),
    ]


@pytest.mark.usefixtures("fresh_old_paths")
def test_a_moved_package_brings_its_submodules():
    namespace, record = learner_runs(
        "from agentkit.faces.exercises.own_tool import q6\n"
        "from agentkit.faces.exercises import q1\n"
    )
    from agentkit.lessons.exercises import own_tool, q1
    assert namespace["q6"] is own_tool.q6
    assert namespace["q1"] is q1
    # one module under two names, never a second copy with its own exercises and counters
    assert sys.modules["agentkit.faces.exercises.own_tool"] is own_tool
    assert [(str(w.message), w.filename) for w in record] == [
        ("agentkit.faces.exercises moved to agentkit.lessons.exercises: "
         f"import it from there {LATER}", "<learner>"),
        ("agentkit.faces.exercises.own_tool moved to agentkit.lessons.exercises.own_tool: "
         f"import it from there {LATER}", "<learner>"),
    ]


@pytest.mark.parametrize("name", OLD_NAMES)
def test_an_old_name_is_the_lesson_name_and_warns(name):
    namespace, record = learner_runs(f"from agentkit.faces import {name}\n")
    assert namespace[name] is getattr(agentkit.lessons, name)
    expected = (DeprecationWarning,
                f"agentkit.faces.{name} moved to agentkit.lessons.{name}: "
                f"import it from agentkit.lessons {LATER}", "<learner>", 1)
    # `from package import name` asks the package twice (importlib's hasattr, then the
    # import itself): under the default filters one line shows it once.
    assert record
    assert {(w.category, str(w.message), w.filename, w.lineno) for w in record} == {expected}


def test_an_unknown_name_is_an_attribute_error_and_no_warning():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(AttributeError, match="module 'agentkit.faces' has no attribute 'nope'"):
            _ = agentkit.faces.nope
        with pytest.raises(ImportError, match="cannot import name 'nope' from 'agentkit.faces'"):
            from agentkit.faces import nope  # noqa: F401
    assert record == []


def test_the_finder_answers_for_the_moved_paths_only():
    finder = moved.MovedModuleFinder()
    for name in ("agentkit.faces.cli", "agentkit.faces.otel", "agentkit.faces.widgetsx",
                 "agentkit.faces.lessons", "agentkit.lessons.widgets", "widgets"):
        assert finder.find_spec(name, None) is None, name
    spec = finder.find_spec("agentkit.faces.exercises.own_tool", None)
    assert spec is not None
    assert moved.new_home(spec.name) == "agentkit.lessons.exercises.own_tool"
    assert sum(isinstance(f, moved.MovedModuleFinder) for f in sys.meta_path) == 1
    moved.install()  # again: still one
    assert sum(isinstance(f, moved.MovedModuleFinder) for f in sys.meta_path) == 1


@pytest.mark.usefixtures("fresh_old_paths")
def test_an_emptied_old_folder_does_not_shadow_the_alias(tmp_path, monkeypatch):
    """After a checkout, ``agentkit/faces/exercises/`` may linger holding only ``__pycache__``
    (git leaves ignored files): a folder Python would import as an empty namespace package,
    and through which a moved package's submodules would load a second time, unless the
    shim's finder is asked first."""
    (tmp_path / "exercises" / "__pycache__").mkdir(parents=True)
    monkeypatch.setattr(agentkit.faces, "__path__", [*agentkit.faces.__path__, str(tmp_path)])
    namespace, _ = learner_runs("import agentkit.faces.exercises.own_tool as own\n")
    from agentkit.lessons.exercises import own_tool
    assert namespace["own"] is own_tool
    assert sys.modules["agentkit.faces.exercises"] is importlib.import_module(
        "agentkit.lessons.exercises")


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          check=False, cwd=ROOT)


def test_a_learner_script_sees_the_warning_by_default():
    """Python shows a DeprecationWarning raised by ``__main__``'s own code (a script, a
    notebook cell): the learner reads where the name went, once per line."""
    out = run_python("-c", "from agentkit.faces import show\nimport agentkit.faces.lesson\n")
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == [
        "<string>:1: DeprecationWarning: agentkit.faces.show moved to agentkit.lessons.show: "
        f"import it from agentkit.lessons {LATER}",
        "<string>:2: DeprecationWarning: agentkit.faces.lesson moved to "
        f"agentkit.lessons.notebook: import it from there {LATER}",
    ]


def test_the_new_paths_are_silent():
    """What the notebooks import warns about nothing, even with warnings as errors: nbval
    compares a cell's stderr."""
    out = run_python("-W", "error", "-c", (
        "from agentkit.lessons import AgentStepper, ApprovalPanel, FailureExplorer, "
        "capture_log, fresh_workspace, plot_timeline, show\n"
        "from agentkit.lessons.exercises import q1, q6\n"
        "from agentkit.lessons.framework_cases import CASES\n"
        "from agentkit.lessons.framework_runs import run_case\n"
        "from agentkit.faces import langgraph, mcp, openai_agents, otel, pydantic_ai\n"
    ))
    assert (out.returncode, out.stderr) == (0, "")


def old_paths_imported(source: str) -> list[str]:
    """The old paths an ``import`` statement of ``source`` names (absolute imports only: the
    package and the notebooks use no other kind)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if moved.new_home(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if moved.new_home(node.module):
                found.append(node.module)
            elif node.module == "agentkit.faces":
                found += [f"agentkit.faces.{alias.name}" for alias in node.names
                          if alias.name in moved.MOVED_NAMES
                          or moved.new_home(f"agentkit.faces.{alias.name}")]
    return found


def repository_sources() -> list[tuple[str, str]]:
    """Every Python source of the kit, its tests, tools and benchmarks, and every notebook's
    code (IPython's ``%`` and ``!`` lines left out), with where it is."""
    sources = []
    for folder in ("agentkit", "tests", "tools", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            sources.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")))
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for number, cell in enumerate(cells):
            if cell["cell_type"] == "code":
                lines = "".join(cell["source"]).splitlines()
                code = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))
                sources.append((f"{path.relative_to(ROOT)} cell {number}", code))
    return sources


def test_the_checker_finds_an_old_path():
    assert old_paths_imported(
        "import agentkit.faces.widgets\n"
        "from agentkit.faces.exercises.framework import Exercise\n"
        "from agentkit.faces import cli, exercises, show\n"
        "def f():\n    from agentkit.faces.lesson import capture_log\n"
    ) == ["agentkit.faces.widgets", "agentkit.faces.exercises.framework",
          "agentkit.faces.exercises", "agentkit.faces.show", "agentkit.faces.lesson"]
    assert old_paths_imported("from agentkit.faces import cli, langgraph\n"
                              "from agentkit.lessons import show\nimport agentkit.faces\n") == []


def test_nothing_in_the_repository_imports_an_old_path():
    """The old paths are for code outside the kit: inside it, an old path would hide a
    dependency behind a warning (a module merged from a branch that predates the move, say)."""
    sources = repository_sources()
    assert any(where.startswith("notebooks/08") for where, _ in sources)
    found = {where: old for where, source in sources if (old := old_paths_imported(source))}
    assert found == {}
