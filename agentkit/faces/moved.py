"""The old homes of what moved to :mod:`agentkit.lessons`: one release of aliases that warn.

agentkit 0.1 kept what a learner touches (widgets, the timeline, the notebook helpers, the
exercises, notebook 08's framework cases) in ``agentkit.faces``; it now lives in
``agentkit.lessons`` (``docs/design.md#layers``). Until the next release the old paths keep
working, and each use raises a ``DeprecationWarning`` that names the new home::

    import agentkit.faces.widgets                   # is agentkit.lessons.widgets
    from agentkit.faces.exercises import q1         # agentkit.lessons.exercises.q1
    from agentkit.faces.lesson import show          # agentkit.lessons.notebook.show
    from agentkit.faces import fresh_workspace      # agentkit.lessons.fresh_workspace

An old path is an alias, not a copy: it gives the lesson module itself (the same object, the
same classes), so code that mixes old and new paths sees one module. A face never imports a
lesson, and this module is no exception: it only *names* the new homes, and an import hook
(:class:`MovedModuleFinder`, which answers for the old module paths and nothing else) loads a
lesson when a caller asks for an old path, never before. ``import agentkit.faces`` or any face
loads no lesson. ``tests/test_layers.py`` holds this module to that: it is the one face allowed
to name a lesson module in a string (its ``SHIMS``), and only with a thin alias such as these.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

#: Each old module path and its new home. The submodules of a moved package follow it:
#: ``agentkit.faces.exercises.own_tool`` is ``agentkit.lessons.exercises.own_tool``.
MOVED_MODULES: dict[str, str] = {
    "agentkit.faces.exercises": "agentkit.lessons.exercises",
    "agentkit.faces.framework_cases": "agentkit.lessons.framework_cases",
    "agentkit.faces.framework_runs": "agentkit.lessons.framework_runs",
    "agentkit.faces.lesson": "agentkit.lessons.notebook",
    "agentkit.faces.timeline": "agentkit.lessons.timeline",
    "agentkit.faces.widgets": "agentkit.lessons.widgets",
}

#: The names ``from agentkit.faces import …`` gave, now ``from agentkit.lessons import …``.
MOVED_NAMES: tuple[str, ...] = (
    "AgentStepper",
    "ApprovalPanel",
    "FailureExplorer",
    "capture_log",
    "fresh_workspace",
    "plot_timeline",
    "show",
)

#: Where :data:`MOVED_NAMES` live now.
NAMES_HOME = "agentkit.lessons"


def new_home(old: str) -> str | None:
    """The module ``old`` moved to (a moved package's submodule included); None if it did not."""
    for moved, home in MOVED_MODULES.items():
        if old == moved or old.startswith(moved + "."):
            return home + old[len(moved):]
    return None


def moved_name(name: str) -> Any:
    """``agentkit.faces.<name>`` for a name that moved to :mod:`agentkit.lessons`, with a
    ``DeprecationWarning``; ``AttributeError`` for any other name (the faces package has no
    names of its own). Called by ``agentkit.faces.__getattr__``: the warning points at the
    caller of that."""
    if name not in MOVED_NAMES:
        raise AttributeError(f"module 'agentkit.faces' has no attribute {name!r}")
    warnings.warn(
        f"agentkit.faces.{name} moved to {NAMES_HOME}.{name}: import it from {NAMES_HOME} "
        "(the old path goes in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module(NAMES_HOME), name)


class AliasLoader(importlib.abc.Loader):
    """Loads an old module path as the module at its new home, and warns."""

    def __init__(self, old: str, new: str) -> None:
        self.old = old
        self.new = new
        self.new_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        self.new_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the old path's spec on the module it was given: the module
        # keeps its own (its name, its file, what importlib.reload needs).
        module.__spec__ = self.new_spec
        warnings.warn(
            f"{self.old} moved to {self.new}: import it from there "
            "(the old path goes in the next release)",
            DeprecationWarning,
            stacklevel=2,  # past the import system's own frames: the caller's import line
        )


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old module paths of :data:`MOVED_MODULES` (and nothing else)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        home = new_home(fullname)
        if home is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, AliasLoader(fullname, home))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once): first, because an emptied old folder
    (``faces/exercises/`` holding only ``__pycache__``) would otherwise be found as a namespace
    package, and a moved package's submodules as second copies of the lesson modules."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
