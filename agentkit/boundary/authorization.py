"""Authorization: the second stage. May *this* caller run *this* tool with *these* arguments?

Checked after the schema (so policies see well-formed arguments) and before anything runs.
Two kinds of rule: the scopes a spec requires, and registry-level policies such as "paths
stay inside the workspace". A refusal is ``forbidden``; its reason goes to the log only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentkit.boundary.context import CallContext
from agentkit.boundary.spec import ToolSpec

#: A policy returns None to allow, or a short reason to refuse (logged, never shown).
#: Raising ``PermissionError`` refuses too.
Policy = Callable[[ToolSpec, dict[str, Any], CallContext], "str | None"]


def authorize(
    spec: ToolSpec, arguments: dict[str, Any], context: CallContext, policies: list[Policy]
) -> str | None:
    """The reason the call is refused, or None when it may run.

    A policy that fails with any exception refuses the call: authorization fails closed.
    """
    missing = spec.required_scopes - context.scopes
    if missing:
        return f"missing scope(s): {', '.join(sorted(missing))}"
    for policy in policies:
        try:
            reason = policy(spec, arguments, context)
        except PermissionError as exc:
            return f"policy {_name(policy)} refused: {exc}"
        except Exception as exc:
            return f"policy {_name(policy)} failed ({type(exc).__name__}); failing closed"
        if reason:
            return f"policy {_name(policy)} refused: {reason}"
    return None


def _name(policy: Callable[..., Any]) -> str:
    return getattr(policy, "__name__", type(policy).__name__)
