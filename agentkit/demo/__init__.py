"""The demo layer: a small world to watch the boundary and the policy at work.

- :mod:`~agentkit.demo.corpus`: the notes in ``data/sources/`` and their BM25 search;
- :mod:`~agentkit.demo.baseline`: the old ``dispatch_tool()`` the registry replaces;
- :mod:`~agentkit.demo.fake_model`: a scripted model that fixes search → read → finish;
- :mod:`~agentkit.demo.agent`: the agent loop and its transcript;
- :mod:`~agentkit.demo.tools`: the demo tools (search, read, save a brief, send a message);
- :mod:`~agentkit.demo.faults`: fault injection that counts the handler's real calls;
- :mod:`~agentkit.demo.scenarios` and :mod:`~agentkit.demo.matrix`: every failure of the
  failure matrix provoked for real, and the table that compares it with ``failure_matrix.csv``;
- :mod:`~agentkit.demo.harness`: :func:`audit`, the same failures played on any tool of yours;
- :mod:`~agentkit.demo.resources`: where the shipped data lives.

This layer imports the boundary and the policy, never the faces or the lessons above it.
"""

from __future__ import annotations

from agentkit.demo import faults, matrix
from agentkit.demo.agent import Transcript, run_agent, run_baseline
from agentkit.demo.fake_model import FakeModel, FinalAnswer, ToolCall, first_sentence
from agentkit.demo.faults import count_calls
from agentkit.demo.harness import audit
from agentkit.demo.tools import DemoTools, make_demo_registry, outbox_lines

__all__ = [
    "DemoTools",
    "FakeModel",
    "FinalAnswer",
    "ToolCall",
    "Transcript",
    "audit",
    "count_calls",
    "faults",
    "first_sentence",
    "make_demo_registry",
    "matrix",
    "outbox_lines",
    "run_agent",
    "run_baseline",
]
