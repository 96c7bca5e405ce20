"""Authorization: the second stage. May *this* caller run *this* tool with *these* arguments?

Checked after the schema (so policies see well-formed arguments) and before anything runs.
Two kinds of rule: the scopes a spec requires, and registry-level policies such as "paths
stay inside the workspace". A refusal is ``forbidden``; its reason goes to the log only.
"""

from __future__ import annotations

import inspect
import logging
import types
from collections.abc import Callable
from typing import Any

from agentkit.boundary.context import CallContext
from agentkit.boundary.redaction import type_name
from agentkit.boundary.spec import ToolSpec

log = logging.getLogger("agentkit")

#: A policy returns None or True to allow, False or a short reason (str) to refuse (logged,
#: never shown). Raising ``PermissionError`` refuses too. Anything else it returns, or any
#: other exception it raises, refuses the call: authorization fails closed.
Policy = Callable[[ToolSpec, dict[str, Any], CallContext], "str | bool | None"]


def check_policy(policy: Any) -> None:
    """Refuse, when it is added, a policy that cannot be called as ``policy(spec, arguments,
    context)``: a wrong signature would otherwise refuse every call at run time."""
    if not callable(policy):
        raise TypeError(f"a policy must be callable, not {type(policy).__name__}")
    try:
        signature = inspect.signature(policy)
    except (TypeError, ValueError):
        return  # a builtin or C callable without a signature: trust it
    try:
        signature.bind(None, None, None)
    except TypeError:
        raise TypeError(
            f"policy {policy_name(policy)} must accept (spec, arguments, context); "
            f"its signature is {signature}"
        ) from None


def authorize(
    spec: ToolSpec, arguments: dict[str, Any], context: CallContext, policies: list[Policy]
) -> str | None:
    """The reason the call is refused, or None when it may run.

    A policy that fails with any exception, or answers with anything but None, a bool or a
    str, refuses the call: authorization fails closed, and the log says why.
    """
    missing = spec.required_scopes - context.scopes
    if missing:
        return f"missing scope(s): {', '.join(sorted(missing))}"
    for policy in policies:
        name = policy_name(policy)
        try:
            answer: object = policy(spec, arguments, context)
        except PermissionError as exc:
            return f"policy {name} refused: {_text(exc)}"
        except Exception as exc:
            log.warning("policy %s raised %s; failing closed", name, type(exc).__name__,
                        exc_info=exc)
            return f"policy {name} failed ({type(exc).__name__}); failing closed"
        # Compared by identity and exact type only: a returned object's own __bool__ or
        # __eq__ is never called (it could raise, or lie).
        if answer is None or answer is True:
            continue
        if answer is False:
            return f"policy {name} refused"
        if isinstance(answer, str):
            return f"policy {name} refused: {str.__str__(answer)[:200]}"
        log.warning(
            "policy %s returned a %s, not None, a bool or a str; failing closed",
            name, type_name(answer),
        )
        return f"policy {name} returned a {type_name(answer)}; failing closed"
    return None


def policy_name(policy: Any) -> str:
    """A policy's name for the log, read without running any of the policy's own code."""
    if isinstance(policy, (types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return str(policy.__name__)[:64]
    return type_name(policy)


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:200]
    except Exception:
        return type(exc).__name__
