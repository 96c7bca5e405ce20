"""The faces layer: what people and hosts touch.

- :mod:`~agentkit.faces.widgets`: the notebook explorers (failure explorer, approval panel,
  agent stepper), built on ipywidgets;
- :mod:`~agentkit.faces.timeline`: the attempt timeline, drawn with matplotlib;
- :mod:`~agentkit.faces.lesson`: small helpers the notebooks share (workspaces, one-line
  results, captured log lines);
- :mod:`~agentkit.faces.exercises`: the exercises with ``check()``, ``hint()`` and
  ``solution()``;
- :mod:`~agentkit.faces.cli`: ``python -m agentkit``;
- :mod:`~agentkit.faces.otel`: OpenTelemetry spans for every tool call (``instrument(runner)``,
  optional extra ``otel``; import the module itself).
- the framework faces (``docs/design.md#framework-faces``), each imported by name and each
  needing its framework: :mod:`~agentkit.faces.openai_agents`,
  :mod:`~agentkit.faces.pydantic_ai`, :mod:`~agentkit.faces.langgraph`; notebook 08 runs
  :mod:`~agentkit.faces.framework_cases` through them (:mod:`~agentkit.faces.framework_runs`).
- the durable-engine faces (``docs/design.md#durable-engines``), each imported by name and
  each needing its engine: :mod:`~agentkit.faces.dbos` (``DurableTools``, extra ``dbos``) and
  :mod:`~agentkit.faces.temporal` (``activities``, extra ``temporal``), sharing
  :mod:`~agentkit.faces.durable` (one runner per workflow).

Names load on first use, so ``python -m agentkit`` needs neither ipywidgets nor matplotlib.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the lazy names' types, for type checkers and IDEs
    from agentkit.faces.lesson import capture_log, fresh_workspace, show
    from agentkit.faces.timeline import plot_timeline
    from agentkit.faces.widgets import AgentStepper, ApprovalPanel, FailureExplorer

_HOMES = {
    "AgentStepper": "agentkit.faces.widgets",
    "ApprovalPanel": "agentkit.faces.widgets",
    "FailureExplorer": "agentkit.faces.widgets",
    "capture_log": "agentkit.faces.lesson",
    "fresh_workspace": "agentkit.faces.lesson",
    "plot_timeline": "agentkit.faces.timeline",
    "show": "agentkit.faces.lesson",
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
        raise AttributeError(f"module 'agentkit.faces' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
