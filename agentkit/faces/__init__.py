"""The faces layer: what hosts touch.

- :mod:`~agentkit.faces.cli`: ``python -m agentkit`` (also the ``agentkit`` console script);
- :mod:`~agentkit.faces.mcp`: the registry served to MCP hosts (optional extra ``mcp``);
- :mod:`~agentkit.faces.otel`: OpenTelemetry spans for every tool call (``instrument(runner)``,
  optional extra ``otel``);
- the framework faces (``docs/design.md#framework-faces``), each needing its framework:
  :mod:`~agentkit.faces.openai_agents`, :mod:`~agentkit.faces.pydantic_ai`,
  :mod:`~agentkit.faces.langgraph`, and :mod:`~agentkit.faces.framework`, the few lines the
  three share (it imports no framework).
- the durable-engine faces (``docs/design.md#durable-engines``), each imported by name and
  each needing its engine: :mod:`~agentkit.faces.dbos` (``DurableTools``, extra ``dbos``) and
  :mod:`~agentkit.faces.temporal` (``activities``, extra ``temporal``), sharing
  :mod:`~agentkit.faces.durable` (one runner per workflow).

Import each face by its module: the package itself loads none of them. What a learner touches
(widgets, timelines, exercises, notebook helpers, notebook 08's framework cases) is in the
layer above, :mod:`agentkit.lessons`. A lesson may use a face; a face never imports a lesson,
so a host that loads a face pulls no learner code (``docs/design.md#layers``, enforced by
``tests/test_layers.py``).

For one release the old paths of what moved keep working with a ``DeprecationWarning``:
``agentkit.faces.widgets``, ``.timeline``, ``.lesson``, ``.exercises``, ``.framework_cases``,
``.framework_runs`` and ``from agentkit.faces import show`` (and the other names that were
here). :mod:`~agentkit.faces.moved` serves them without importing a lesson until one is asked
for.
"""

from __future__ import annotations

from typing import Any

from agentkit.faces import moved

moved.install()

#: The faces are modules (``from agentkit.faces import cli``); the package has no names.
__all__: list[str] = []


def __getattr__(name: str) -> Any:
    """A name that moved to :mod:`agentkit.lessons` (``show``, ``FailureExplorer``, …), with a
    ``DeprecationWarning``; any other name is an ``AttributeError``."""
    return moved.moved_name(name)
