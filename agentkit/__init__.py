"""agentkit: one reliable execution boundary around every tool an LLM agent can call.

    schema check → authorization → concurrency/timeout → handler → redact/truncate → stable error

``invoke_tool`` runs one attempt through that pipeline; ``ToolRunner`` applies the policy of
each side-effect level above it. Importing agentkit imports neither pandas nor ipywidgets:
the boundary and the policy stay light, and the demo and widget layers load on demand.
"""

from __future__ import annotations

import logging

from .backoff import set_testing
from .budget import Budget
from .context import CallContext
from .errors import ErrorCode
from .invoke import invoke_tool
from .registry import ToolRegistry
from .runner import ToolRunner
from .spec import Effect, ToolSpec
from .stores import IdempotencyStore, SQLiteIdempotencyStore

__all__ = [
    "Budget",
    "CallContext",
    "Effect",
    "ErrorCode",
    "IdempotencyStore",
    "SQLiteIdempotencyStore",
    "ToolRegistry",
    "ToolRunner",
    "ToolSpec",
    "invoke_tool",
    "set_testing",
]

# A library never configures logging; without this, Python's last-resort handler would print
# every logged failure to stderr, and into every notebook cell that demonstrates one.
logging.getLogger("agentkit").addHandler(logging.NullHandler())
