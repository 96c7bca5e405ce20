"""The lessons layer: what a learner touches in the notebooks.

- :mod:`~agentkit.lessons.widgets`: the notebook explorers (failure explorer, approval panel,
  agent stepper), built on ipywidgets;
- :mod:`~agentkit.lessons.timeline`: the attempt timeline, drawn with matplotlib;
- :mod:`~agentkit.lessons.notebook`: small helpers the notebooks share (workspaces, one-line
  results, checkers' verdicts, tables that fit the page, captured log lines);
- :mod:`~agentkit.lessons.exercises`: the exercises with ``check()``, ``hint()`` and
  ``solution()`` (notebooks 06 and 07);
- :mod:`~agentkit.lessons.framework_cases`: notebook 08's failure cases, and
  :mod:`~agentkit.lessons.framework_runs`, which runs them through each framework alone and
  through its face (each framework imported only when a case runs through it).

This is the top floor (``docs/design.md#layers``): a lesson may import any layer, the faces
included (notebook 08's runs go through the framework faces), and nothing imports a lesson:
a host that loads a face never pulls learner code.

Names load on first use, so ``from agentkit.lessons import show`` needs neither ipywidgets nor
matplotlib.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the lazy names' types, for type checkers and IDEs
    from agentkit.lessons.notebook import capture_log, fresh_workspace, show
    from agentkit.lessons.timeline import plot_timeline
    from agentkit.lessons.widgets import AgentStepper, ApprovalPanel, FailureExplorer

_HOMES = {
    "AgentStepper": "agentkit.lessons.widgets",
    "ApprovalPanel": "agentkit.lessons.widgets",
    "FailureExplorer": "agentkit.lessons.widgets",
    "capture_log": "agentkit.lessons.notebook",
    "fresh_workspace": "agentkit.lessons.notebook",
    "plot_timeline": "agentkit.lessons.timeline",
    "show": "agentkit.lessons.notebook",
}

__all__ = [
    "AgentStepper",
    "ApprovalPanel",
    "FailureExplorer",
    "capture_log",
    "fresh_workspace",
    "plot_timeline",
    "show",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agentkit.lessons' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
