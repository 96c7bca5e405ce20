"""agentkit: one reliable execution boundary around every tool an LLM agent can call.

    schema check → authorization → concurrency/timeout → handler → redact/truncate → stable error

``invoke_tool`` runs one attempt through that pipeline; ``ToolRunner`` applies the policy of
each side-effect level above it. The package is layered (``docs/design.md#layers``):

- :mod:`agentkit.boundary`: one attempt, one module per stage of the picture;
- :mod:`agentkit.policy`: the runner, budget, approvals, trace and idempotency stores;
- :mod:`agentkit.demo`: the fake model, agent loop, demo tools, faults and failure matrix;
- :mod:`agentkit.faces`: what hosts touch: the command line, the MCP server, the framework
  faces and OpenTelemetry;
- :mod:`agentkit.lessons`: what a learner touches: widgets, timeline, notebook helpers,
  exercises and notebook 08's framework cases (a lesson may use a face, never the reverse).

Importing agentkit imports neither pandas nor ipywidgets: the boundary and the policy stay
light, and ``agentkit.faults`` and ``agentkit.matrix`` (the demo layer's modules) load on
first use.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from agentkit.boundary.call_info import CallInfo
from agentkit.boundary.concurrency import current_call
from agentkit.boundary.context import CallContext
from agentkit.boundary.errors import ErrorCode, InvalidInput, NotApplied
from agentkit.boundary.invoke import ainvoke_tool, invoke_tool
from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.policy.backoff import set_testing
from agentkit.policy.budget import Budget
from agentkit.policy.runner import ToolRunner
from agentkit.policy.stores import IdempotencyStore, SQLiteIdempotencyStore, open_store

if TYPE_CHECKING:  # the lazy modules' types (``as`` marks them re-exported, not unused)
    from agentkit.demo import faults as faults
    from agentkit.demo import matrix as matrix
    from agentkit.policy.stores.postgres import (
        PostgresIdempotencyStore as PostgresIdempotencyStore,
    )

__all__ = [
    "Budget",
    "CallContext",
    "CallInfo",
    "Effect",
    "ErrorCode",
    "IdempotencyStore",
    "InvalidInput",
    "NotApplied",
    "PostgresIdempotencyStore",
    "SQLiteIdempotencyStore",
    "ToolRegistry",
    "ToolRunner",
    "ToolSpec",
    "ainvoke_tool",
    "current_call",
    "invoke_tool",
    "open_store",
    "set_testing",
]

#: Demo modules reachable as ``agentkit.faults`` / ``from agentkit import matrix``, loaded lazily.
_LAZY_MODULES = {"faults": "agentkit.demo.faults", "matrix": "agentkit.demo.matrix"}
#: Names loaded from their module on first use: the PostgreSQL store (optional extra
#: ``postgres``) keeps psycopg out of ``import agentkit``.
_LAZY_NAMES = {"PostgresIdempotencyStore": "agentkit.policy.stores.postgres"}


def __getattr__(name: str) -> Any:
    home = _LAZY_MODULES.get(name)
    if home is not None:
        value: Any = importlib.import_module(home)
    elif name in _LAZY_NAMES:
        value = getattr(importlib.import_module(_LAZY_NAMES[name]), name)
    else:
        raise AttributeError(f"module 'agentkit' has no attribute {name!r}")
    globals()[name] = value
    return value


# A library never configures logging; without this, Python's last-resort handler would print
# every logged failure to stderr, and into every notebook cell that demonstrates one.
logging.getLogger("agentkit").addHandler(logging.NullHandler())
