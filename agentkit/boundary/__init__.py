"""The boundary layer: one attempt of one tool call, through every stage of the pipeline.

    schema check → authorization → concurrency/timeout → handler → redact/truncate → stable error

Each stage has its own module, named after the picture:

- :mod:`~agentkit.boundary.spec` and :mod:`~agentkit.boundary.context`: what a tool is
  (``ToolSpec``, ``Effect``) and who calls it (``CallContext``);
- :mod:`~agentkit.boundary.registry`: the tools, their compiled validators and the
  model-visible descriptions (OpenAI, Anthropic, MCP);
- :mod:`~agentkit.boundary.schema`: the *schema check*;
- :mod:`~agentkit.boundary.authorization`: *authorization* (scopes, registry policies);
- :mod:`~agentkit.boundary.concurrency`: *concurrency/timeout*, the ways to run one attempt,
  over :mod:`~agentkit.boundary.workers` (the worker pool), :mod:`~agentkit.boundary.slot`
  (``max_concurrency``), :mod:`~agentkit.boundary.deadlines` (the loop's shared deadlines),
  :mod:`~agentkit.boundary.attempt` (the attempt and its done flag) and
  :mod:`~agentkit.boundary.cancellation` (a deadline or a cancellation, told apart);
- :mod:`~agentkit.boundary.redaction`: *redact/truncate* of the raw result;
- :mod:`~agentkit.boundary.errors`: the *stable error* codes and their ``retryable`` flag;
- :mod:`~agentkit.boundary.invoke`: ``invoke_tool``, which runs the stages in order.

This layer imports nothing above it (see ``docs/design.md#layers``).
"""

from __future__ import annotations

from agentkit.boundary.context import CallContext
from agentkit.boundary.errors import RETRYABLE, ErrorCode
from agentkit.boundary.invoke import invoke_tool
from agentkit.boundary.redaction import Redactor
from agentkit.boundary.registry import RegisteredTool, ToolRegistry
from agentkit.boundary.schema import derive_parameters
from agentkit.boundary.spec import Effect, ToolSpec

__all__ = [
    "RETRYABLE",
    "CallContext",
    "Effect",
    "ErrorCode",
    "Redactor",
    "RegisteredTool",
    "ToolRegistry",
    "ToolSpec",
    "derive_parameters",
    "invoke_tool",
]
