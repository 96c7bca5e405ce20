"""docs/design.md#layers enforced: each layer imports only the layers below it, no private
name crosses a module, and ``import agentkit`` (or one of its two lower layers) stays light.

Every ``import`` statement of every module under ``agentkit/`` counts, wherever it stands: at
module level, inside a function (a lazy import is still a dependency), and inside an
``if TYPE_CHECKING:`` block. Type-only imports count because a type in a signature is part
of the module's contract: a faces module may name a policy type, but a boundary function
whose signature names a demo type has made the boundary depend on the demo, whether or not
the import runs. A string that names a higher layer's module (``importlib.import_module(
"agentkit.lessons.widgets")``) counts too: it is the same dependency, spelled later. The
top-level ``agentkit/__init__.py`` and ``__main__.py`` are exempt: they are the façade over
all layers.

The top floor is split by who touches it: ``faces`` (what hosts touch) below ``lessons`` (what
a learner touches). A lesson may use a face; a face never imports a lesson, so a host that
loads a face pulls no learner code. One face module is allowed to *name* lesson modules in
strings, and it is listed in ``SHIMS`` with why: the old import paths of what moved to the
lessons, kept for one release. It gets no other allowance (an ``import`` of a lesson is still a
violation there), and a test below checks at run time that importing it, or any face, loads no
lesson.

Inside a layer no circle either (docs/design.md#layers, rev 4): the same import statements,
every module of the package counted (the façade too), make a graph with no cycle. An import
``from a.b import c`` names the module ``a.b.c`` when ``c`` is one, else ``a.b``; the parent
packages Python runs on the way are not counted, or every module would circle with the
package that imports it.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import agentkit

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agentkit"
#: Lowest first: a module may import its own layer and those before it in this list.
LAYERS = ("boundary", "policy", "demo", "faces", "lessons")
#: The shims: face modules that may name a lesson module in a string (never import one), each a
#: thin alias that serves an old import path of what moved, for one release.
SHIMS = {
    "agentkit.faces.moved": "the old paths of agentkit.faces.widgets, .timeline, .lesson, "
                            ".exercises, .framework_cases, .framework_runs and the names "
                            "`from agentkit.faces import show, ...`, until the next release",
}
FACADE = {PACKAGE / "__init__.py", PACKAGE / "__main__.py"}
#: What the boundary and policy must not load at import time (docs/design.md#layers).
HEAVY = ("pandas", "ipywidgets", "matplotlib", "mcp", "psycopg", "opentelemetry",
         # the framework faces' frameworks (agentkit.faces.openai_agents, pydantic_ai, langgraph)
         "agents", "pydantic_ai", "langgraph", "langchain_core",
         # the durable-engine faces' engines (agentkit.faces.dbos, agentkit.faces.temporal)
         "dbos", "temporalio")


@dataclass(frozen=True)
class Violation:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int | None:
    """The rank of ``module``'s layer; None outside the layers. The façade ``agentkit`` itself
    ranks above every layer: a layer that imports it imports all of them."""
    parts = module.split(".")
    if parts[0] != "agentkit":
        return None
    if len(parts) == 1:
        return len(LAYERS)
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def names_layer_module(text: str) -> bool:
    """Whether ``text`` is exactly the dotted name of a module inside a layer (a string handed
    to ``importlib.import_module``), not prose, a logger name or an attribute key."""
    parts = text.split(".")
    return (len(parts) >= 2 and parts[0] == "agentkit" and parts[1] in LAYERS
            and all(part.isidentifier() for part in parts))


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package of agentkit (found on disk, not imported)."""
    relative = Path(*dotted.split("."))
    return (ROOT / relative).with_suffix(".py").is_file() or (ROOT / relative / "__init__.py").is_file()


def resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def check_source(source: str, importer: str, *, is_package: bool = False) -> list[Violation]:
    """The §10 violations in one module's source: upward imports, private names imported
    from another module, and private attributes read from an imported agentkit module."""
    rank = layer_of(importer)
    tree = ast.parse(source)
    found: list[Violation] = []
    module_aliases: dict[str, str] = {}  # local name -> agentkit module it is bound to

    def check_target(target: str, line: int, how: str = "imports", where: str = "") -> None:
        target_rank = layer_of(target)
        if rank is not None and target_rank is not None and target_rank > rank:
            above = LAYERS[target_rank] if target_rank < len(LAYERS) else "the agentkit façade"
            found.append(Violation(line, f"{importer} ({LAYERS[rank]}) {how} {target} ({above}){where}"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check_target(alias.name, node.lineno)
                last = alias.name.rsplit(".", 1)[-1]
                if is_private(last) and alias.name.startswith("agentkit."):
                    found.append(Violation(node.lineno, f"imports the private module {alias.name}"))
                if alias.name.startswith("agentkit"):
                    if alias.asname:
                        module_aliases[alias.asname] = alias.name
                    elif "." not in alias.name:
                        module_aliases[alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            source_module = resolve(node, importer, is_package)
            if not source_module.startswith("agentkit"):
                continue
            check_target(source_module, node.lineno)
            for alias in node.names:
                full = f"{source_module}.{alias.name}"
                if is_module(full):
                    check_target(full, node.lineno)
                    module_aliases[alias.asname or alias.name] = full
                if is_private(alias.name) and source_module != importer:
                    found.append(Violation(
                        node.lineno, f"imports the private name {alias.name} from {source_module}"))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and importer not in SHIMS and names_layer_module(node.value)):
            check_target(node.value, node.lineno, "names", " in a string")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in module_aliases and is_private(node.attr)
                and module_aliases[node.value.id] != importer):
            found.append(Violation(
                node.lineno,
                f"reads the private name {node.attr} of {module_aliases[node.value.id]}"))
    return sorted(found, key=lambda v: v.line)


def package_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p not in FACADE)


def imported_modules(source: str, importer: str, *, is_package: bool = False) -> set[str]:
    """The agentkit modules one module's source imports, from every import statement (at
    module level, in a function, under ``TYPE_CHECKING``), itself left out."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "agentkit")
        elif isinstance(node, ast.ImportFrom):
            source_module = resolve(node, importer, is_package)
            if source_module.split(".")[0] != "agentkit":
                continue
            for alias in node.names:
                full = f"{source_module}.{alias.name}"
                found.add(full if is_module(full) else source_module)
    found.discard(importer)
    return found


def import_graph() -> dict[str, set[str]]:
    """Every module of the package (the façade too) and the agentkit modules it imports."""
    return {
        module_name(path): imported_modules(path.read_text(encoding="utf-8"), module_name(path),
                                            is_package=path.name == "__init__.py")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The graph's circles: its strongly connected components of more than one module
    (Tarjan's algorithm), in the order they close."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                components.append(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return components


def closed_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One circle through ``component`` (a strongly connected set), from its first module."""
    start = min(component)
    path, seen = [start], {start}
    while True:  # walk inside the component until a module comes round again
        step = min(target for target in graph[path[-1]] if target in component)
        if step in seen:
            return [*path[path.index(step):], step]
        path.append(step)
        seen.add(step)


# ---------------------------------------------------------------- the checker catches what it must


@pytest.mark.parametrize(("importer", "source", "expected"), [
    ("agentkit.boundary.invoke", "from agentkit.policy.runner import ToolRunner\n",
     "agentkit.boundary.invoke (boundary) imports agentkit.policy.runner (policy)"),
    ("agentkit.policy.trace", "def f():\n    import agentkit.lessons.timeline\n",
     "agentkit.policy.trace (policy) imports agentkit.lessons.timeline (lessons)"),
    ("agentkit.demo.agent",
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agentkit.faces import widgets\n",
     "agentkit.demo.agent (demo) imports agentkit.faces (faces)"),
    ("agentkit.boundary.spec", "from agentkit import ToolRunner\n",
     "agentkit.boundary.spec (boundary) imports agentkit (the agentkit façade)"),
    ("agentkit.policy.runner", "from agentkit import demo\n",
     "agentkit.policy.runner (policy) imports agentkit.demo (demo)"),
    ("agentkit.policy.runner", "from agentkit.boundary.invoke import _pipeline\n",
     "imports the private name _pipeline from agentkit.boundary.invoke"),
    ("agentkit.demo.matrix", "import agentkit.boundary.concurrency as c\nc._POOL.submit(f)\n",
     "reads the private name _POOL of agentkit.boundary.concurrency"),
    ("agentkit.policy.stores.memory", "from .algorithm import _helper\n",
     "imports the private name _helper from agentkit.policy.stores.algorithm"),
    ("agentkit.policy.stores.memory", "from ...demo import faults\n",
     "agentkit.policy.stores.memory (policy) imports agentkit.demo (demo)"),
    # a face never imports a lesson, however the import is spelled
    ("agentkit.faces.cli", "from agentkit.lessons import show\n",
     "agentkit.faces.cli (faces) imports agentkit.lessons (lessons)"),
    ("agentkit.faces.mcp", "def f():\n    import agentkit.lessons.widgets\n",
     "agentkit.faces.mcp (faces) imports agentkit.lessons.widgets (lessons)"),
    ("agentkit.faces.otel",
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from agentkit.lessons.timeline import plot_timeline\n",
     "agentkit.faces.otel (faces) imports agentkit.lessons.timeline (lessons)"),
    ("agentkit.faces.openai_agents", "from ..lessons import framework_cases\n",
     "agentkit.faces.openai_agents (faces) imports agentkit.lessons.framework_cases (lessons)"),
    ("agentkit.faces.langgraph", "from agentkit import lessons\n",
     "agentkit.faces.langgraph (faces) imports agentkit.lessons (lessons)"),
    ("agentkit.faces.cli",
     "import importlib\ndef f():\n    return importlib.import_module('agentkit.lessons.exercises')\n",
     "agentkit.faces.cli (faces) names agentkit.lessons.exercises (lessons) in a string"),
    # the shim's allowance is for naming a lesson in a string, never for importing one
    ("agentkit.faces.moved", "from agentkit.lessons import widgets\n",
     "agentkit.faces.moved (faces) imports agentkit.lessons.widgets (lessons)"),
    # nothing below the top floor imports either half of it
    ("agentkit.demo.agent", "from agentkit.lessons.notebook import show\n",
     "agentkit.demo.agent (demo) imports agentkit.lessons.notebook (lessons)"),
    ("agentkit.policy.runner", "import agentkit.faces.otel\n",
     "agentkit.policy.runner (policy) imports agentkit.faces.otel (faces)"),
    ("agentkit.boundary.invoke", "HOME = 'agentkit.policy.runner'\n",
     "agentkit.boundary.invoke (boundary) names agentkit.policy.runner (policy) in a string"),
])
def test_the_checker_finds_a_bad_import(importer, source, expected):
    messages = [v.message for v in check_source(source, importer)]
    assert expected in messages


@pytest.mark.parametrize(("importer", "source"), [
    ("agentkit.lessons.widgets", "from agentkit.policy.runner import ToolRunner\n"),
    ("agentkit.lessons.timeline",
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agentkit.policy.trace import TraceRecord\n"),
    ("agentkit.demo.tools", "from agentkit.boundary.spec import Effect, ToolSpec\nimport json\n"),
    ("agentkit.policy.runner", "from agentkit.policy.budget import Budget\n"),
    ("agentkit.boundary.invoke", "def _own():\n    pass\n_own()\nfrom __future__ import annotations\n"),
    ("agentkit.boundary.invoke", "import os\nos._exit\n"),  # not an agentkit module
    # a lesson may use a face, and any layer below
    ("agentkit.lessons.framework_runs", "def f():\n    from agentkit.faces import openai_agents\n"),
    ("agentkit.lessons.widgets", "from agentkit.demo import matrix\nfrom agentkit.faces import cli\n"),
    # strings that are not a higher layer's module: a logger, an attribute key, prose
    ("agentkit.boundary.invoke", "LOG = 'agentkit'\nKEY = 'agentkit.effect'\n"),
    ("agentkit.faces.otel", "SEE = 'agentkit.lessons.timeline draws the same calls'\n"),
    # the one listed shim may name the new homes of what moved
    ("agentkit.faces.moved", "MOVED = {'agentkit.faces.widgets': 'agentkit.lessons.widgets'}\n"),
])
def test_the_checker_allows_a_good_import(importer, source):
    assert check_source(source, importer) == []


def test_every_package_module_is_checked():
    modules = {module_name(p) for p in package_modules()}
    for expected in ("agentkit.boundary.invoke", "agentkit.policy.runner",
                     "agentkit.policy.stores", "agentkit.demo.matrix", "agentkit.faces.cli",
                     "agentkit.lessons.widgets", "agentkit.lessons.exercises.framework"):
        assert expected in modules
    assert all(layer_of(m) is not None and layer_of(m) < len(LAYERS) for m in modules)


def test_the_cycle_check_finds_the_circle_of_issue_27():
    """The four policy modules that imported each other, each edge from a real statement of
    theirs (two of them lazy imports inside a function), make one circle."""
    sources = {
        "agentkit.policy.stores.algorithm": "def run_once():\n"
        "    from agentkit.policy.drivers import run_store_steps\n"
        "    from agentkit.policy.steps import invoke, once\n",
        "agentkit.policy.steps": "from agentkit.policy.approvals import Approvals\n"
        "from agentkit.policy.stores.algorithm import Claim\n",
        "agentkit.policy.approvals": "from agentkit.policy.drivers import run_store_steps\n",
        "agentkit.policy.drivers": "from agentkit.policy.stores.algorithm import StoreError\n",
        "agentkit.policy.runner": "from agentkit.policy.steps import Policy\n",
    }
    graph = {module: imported_modules(source, module) for module, source in sources.items()}
    assert circles(graph) == [set(sources) - {"agentkit.policy.runner"}]  # all four, not the runner
    path = closed_path(graph, circles(graph)[0])  # what the failure message shows
    assert path[0] == path[-1] and all(b in graph[a] for a, b in itertools.pairwise(path))


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c", "a"]]),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b", "a"], ["c", "d", "c"]]),
    ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, []),  # a diamond is no circle
])
def test_the_cycle_finder_on_small_graphs(graph, expected):
    assert sorted(closed_path(graph, found) for found in circles(graph)) == expected


def test_an_import_names_the_module_not_its_parents():
    assert imported_modules("from agentkit.policy.stores import memory\n",
                            "agentkit.policy.runner") == {"agentkit.policy.stores.memory"}
    assert imported_modules("from agentkit.policy.stores import IdempotencyStore\n",
                            "agentkit.policy.runner") == {"agentkit.policy.stores"}
    assert imported_modules("from .owner import this_host\nimport json\n",
                            "agentkit.policy.stores.algorithm") == {"agentkit.policy.stores.owner"}


# ---------------------------------------------------------------- the package itself


def test_no_module_imports_in_a_circle():
    graph = import_graph()
    assert "agentkit.policy.stores.algorithm" in graph and len(graph) > 60
    found = circles(graph)
    assert not found, "import circles:\n" + "\n".join(
        " → ".join(closed_path(graph, circle)) + f"; the circle: {', '.join(sorted(circle))}"
        for circle in found)


@pytest.mark.parametrize("path", package_modules(), ids=lambda p: module_name(p))
def test_module_respects_the_layers(path):
    violations = check_source(path.read_text(encoding="utf-8"), module_name(path),
                              is_package=path.name == "__init__.py")
    assert not violations, "\n".join(map(str, violations))


def face_modules() -> list[str]:
    return [module_name(p) for p in package_modules() if layer_of(module_name(p)) == 3]


def test_the_top_floor_is_split_by_who_touches_it():
    """faces below lessons, both above the demo; every module of either lives in its folder."""
    assert LAYERS.index("demo") < LAYERS.index("faces") < LAYERS.index("lessons")
    assert LAYERS[3] == "faces"
    faces = set(face_modules())
    assert {"agentkit.faces.cli", "agentkit.faces.mcp", "agentkit.faces.otel",
            "agentkit.faces.openai_agents", "agentkit.faces.pydantic_ai",
            "agentkit.faces.langgraph", "agentkit.faces.framework"} <= faces
    lessons = {module_name(p) for p in package_modules()} - faces
    for learner_module in ("agentkit.lessons.widgets", "agentkit.lessons.timeline",
                           "agentkit.lessons.notebook", "agentkit.lessons.exercises",
                           "agentkit.lessons.framework_cases", "agentkit.lessons.framework_runs"):
        assert learner_module in lessons
        assert learner_module.replace("lessons", "faces", 1) not in faces


def test_shims_are_listed_face_modules_that_name_real_lessons():
    """The exemption is narrow: each shim is a face module that exists, and every lesson module
    it names exists (an alias to nothing would be a broken promise, not a shim)."""
    faces = set(face_modules())
    for shim in SHIMS:
        assert shim in faces, f"{shim} is not a face module"
        path = ROOT / Path(*shim.split(".")).with_suffix(".py")
        named = [n.value for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and names_layer_module(n.value) and layer_of(n.value) == LAYERS.index("lessons")]
        assert named, f"{shim} names no lesson: it needs no exemption"
        missing = [name for name in named if not is_module(name)]
        assert not missing, f"{shim} names lesson modules that do not exist: {missing}"


def test_no_face_loads_a_lesson(tmp_path):
    """At run time too: importing every face (the shim included) and running the command line
    leaves no ``agentkit.lessons`` module loaded. A face whose framework is not installed is
    reported, not skipped silently."""
    code = (
        "import importlib, sys\n"
        f"for name in {face_modules()!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError as e:\n"
        "        if (e.name or '').startswith('agentkit'):\n"
        "            raise\n"
        "        print('not installed:', name, e.name)\n"
        "from agentkit.faces.cli import main\n"
        f"assert main(['demo', '--workspace', {str(tmp_path / 'ws')!r}]) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] == ['agentkit', 'lessons']))\n"
    )
    out = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code],
                         capture_output=True, text=True, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "not installed" not in out.stdout, out.stdout  # the dev extra brings every framework
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_lesson_probe_sees_a_lesson():
    """The probe above is not vacuous: a lesson module, once imported, is in ``sys.modules``
    under the name it looks for."""
    code = ("import sys, agentkit.lessons.exercises\n"
            "print(sorted(m for m in sys.modules if m.split('.')[:2] == ['agentkit', 'lessons'])[:2])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "['agentkit.lessons', 'agentkit.lessons.exercises']"


@pytest.mark.parametrize("modules", [
    ["agentkit"], ["agentkit.boundary"], ["agentkit.policy"],
    ["agentkit.boundary", "agentkit.policy", "agentkit"],
    ["agentkit.faces"], ["agentkit.lessons"],
])
def test_import_loads_no_heavy_dependency(modules):
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"heavy = {list(HEAVY)!r}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_the_light_import_check_sees_a_heavy_module():
    """The probe above is not vacuous: importing the lessons' widgets does load ipywidgets."""
    pytest.importorskip("ipywidgets")
    code = ("import sys, agentkit.lessons.widgets\n"
            "print('ipywidgets' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "True"


# ---------------------------------------------------------------- the typing test stays in step


TYPING_TEST = ROOT / "tests" / "typing" / "public_api.py"


def test_typing_test_uses_every_public_name():
    tree = ast.parse(TYPING_TEST.read_text(encoding="utf-8"))
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {n.attr for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
             and n.value.id == "agentkit"}
    missing = sorted(set(agentkit.__all__) - used)
    assert not missing, f"tests/typing/public_api.py does not use {missing}"


def test_typing_test_runs():
    """What mypy checks in ``make typecheck`` also runs: the file is a working program."""
    spec = importlib.util.spec_from_file_location("agentkit_typing_public_api", TYPING_TEST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.use_the_api()
