"""docs/design.md#layers enforced: each layer imports only the layers below it, no private
name crosses a module, and ``import agentkit`` (or one of its two lower layers) stays light.

Every ``import`` statement of every module under ``agentkit/`` counts, wherever it stands: at
module level, inside a function (a lazy import is still a dependency), and inside an
``if TYPE_CHECKING:`` block. Type-only imports count because a type in a signature is part
of the module's contract: a faces module may name a policy type, but a boundary function
whose signature names a demo type has made the boundary depend on the demo, whether or not
the import runs. The top-level ``agentkit/__init__.py`` and ``__main__.py`` are exempt: they
are the façade over all layers.

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
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import agentkit

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agentkit"
#: Lowest first: a module may import its own layer and those before it in this list.
LAYERS = ("boundary", "policy", "demo", "faces")
FACADE = {PACKAGE / "__init__.py", PACKAGE / "__main__.py"}
#: What the boundary and policy must not load at import time (docs/design.md#layers).
HEAVY = ("pandas", "ipywidgets", "matplotlib", "mcp", "psycopg", "opentelemetry",
         # the framework faces' frameworks (agentkit.faces.openai_agents, pydantic_ai, langgraph)
         "agents", "pydantic_ai", "langgraph", "langchain_core")


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

    def check_target(target: str, line: int) -> None:
        target_rank = layer_of(target)
        if rank is not None and target_rank is not None and target_rank > rank:
            above = LAYERS[target_rank] if target_rank < len(LAYERS) else "the agentkit façade"
            found.append(Violation(line, f"{importer} ({LAYERS[rank]}) imports {target} ({above})"))

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
    ("agentkit.policy.trace", "def f():\n    import agentkit.faces.timeline\n",
     "agentkit.policy.trace (policy) imports agentkit.faces.timeline (faces)"),
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
])
def test_the_checker_finds_a_bad_import(importer, source, expected):
    messages = [v.message for v in check_source(source, importer)]
    assert expected in messages


@pytest.mark.parametrize(("importer", "source"), [
    ("agentkit.faces.widgets", "from agentkit.policy.runner import ToolRunner\n"),
    ("agentkit.faces.timeline",
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agentkit.policy.trace import TraceRecord\n"),
    ("agentkit.demo.tools", "from agentkit.boundary.spec import Effect, ToolSpec\nimport json\n"),
    ("agentkit.policy.runner", "from agentkit.policy.budget import Budget\n"),
    ("agentkit.boundary.invoke", "def _own():\n    pass\n_own()\nfrom __future__ import annotations\n"),
    ("agentkit.boundary.invoke", "import os\nos._exit\n"),  # not an agentkit module
])
def test_the_checker_allows_a_good_import(importer, source):
    assert check_source(source, importer) == []


def test_every_package_module_is_checked():
    modules = {module_name(p) for p in package_modules()}
    for expected in ("agentkit.boundary.invoke", "agentkit.policy.runner",
                     "agentkit.policy.stores", "agentkit.demo.matrix", "agentkit.faces.cli"):
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


def test_a_store_imported_alone_runs_once_through_the_policy():
    """A store imports nothing of the policy above it (the circle test), yet its ``run_once``
    is the policy's claim → run → complete: importing one store module is enough for it to
    work, and the operation runs once (its real call count), the second call a replay."""
    code = (
        "import json\n"
        "import agentkit.policy.stores.memory as memory\n"
        "calls = []\n"
        "store = memory.IdempotencyStore()\n"
        "def op():\n"
        "    calls.append(1)\n"
        "    return {'ok': True, 'data': 'x'}\n"
        "first, second = store.run_once('k', op, 'f'), store.run_once('k', op, 'f')\n"
        "print(json.dumps([first, second, len(calls)], sort_keys=True))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    first, second, calls = json.loads(out.stdout)
    assert first == {"ok": True, "data": "x"}
    assert second == {"ok": True, "data": "x", "replayed": True}
    assert calls == 1


@pytest.mark.parametrize("modules", [
    ["agentkit"], ["agentkit.boundary"], ["agentkit.policy"],
    ["agentkit.boundary", "agentkit.policy", "agentkit"],
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
    """The probe above is not vacuous: importing the faces' widgets does load ipywidgets."""
    pytest.importorskip("ipywidgets")
    code = ("import sys, agentkit.faces.widgets\n"
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
