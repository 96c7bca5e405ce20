"""What the runner returns: every result stamped the same way, its keys in one order.

A result is the boundary's dict (``ok`` and ``data``, or ``error``, ``retryable`` and the
rest, docs/design.md#result-shape) stamped with ``attempts`` (handler attempts that really
started) and ``replayed`` (a stored result given again). A write whose outcome is unknown is
never retryable, whatever the attempt said. Keys come in one order whether the result is
fresh from the boundary or read back from a store, which sorts them
(tests/test_result_order.py).
"""

from __future__ import annotations

from typing import Any

from agentkit.boundary.errors import ErrorCode
from agentkit.boundary.spec import Effect

__all__ = ["finish", "outcome"]

_UNKNOWN = ErrorCode.OUTCOME_UNKNOWN.value
_WRITES = {Effect.REVERSIBLE_WRITE.value, Effect.IRREVERSIBLE_WRITE.value}
#: The order every result's keys are given in (stored results come back with sorted keys).
_ORDER = ("ok", "data", "error", "retryable", "detail", "truncated", "original_chars",
          "redactions", "approval_id", "attempts", "replayed")


def finish(result: dict[str, Any], attempts: int, replayed: bool, effect: str) -> dict[str, Any]:
    """Stamp ``attempts``/``replayed``; a write whose outcome is unknown is never retryable.
    Keys come in one order: the known ones as in ``_ORDER``, any other after them as given."""
    if effect in _WRITES and result.get("error") == _UNKNOWN:
        result = {**result, "retryable": False}
    keys = tuple(result)
    order = _ORDERS.get(keys)
    if order is None:
        order = _order(keys)
    if order is _AS_GIVEN:  # the usual case: the boundary's keys, already in order
        out = dict(result)
        out["attempts"] = attempts
        out["replayed"] = replayed
        return out
    out = dict(result, attempts=attempts, replayed=replayed)
    return {key: out[key] for key in order}


def outcome(result: Any) -> str:
    """What an event says a result was: ``ok``, or its error code."""
    return "ok" if result.get("ok") else str(result.get("error", ""))


_RANK = {key: n for n, key in enumerate(_ORDER)}
#: ``_order``'s answer: the keys are in order already, ``attempts`` and ``replayed`` go last.
_AS_GIVEN: tuple[str, ...] = ("(as given)",)
#: ``_order``'s answers for key sequences of known keys only (so it stays small).
_ORDERS: dict[tuple[str, ...], tuple[str, ...]] = {}


def _order(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The order of a finished result's keys, for a result with ``keys``."""
    if "attempts" not in keys and "replayed" not in keys and _in_order(keys):
        order = _AS_GIVEN
    else:
        present = {*keys, "attempts", "replayed"}
        order = (*(key for key in _ORDER if key in present),
                 *(key for key in keys if key not in _RANK))
    if all(key in _RANK for key in keys):
        _ORDERS[keys] = order
    return order


def _in_order(keys: tuple[str, ...]) -> bool:
    """Whether every key is a known one and they come in ``_ORDER``'s order."""
    last = -1
    for key in keys:
        rank = _RANK.get(key, -1)
        if rank <= last:
            return False
        last = rank
    return True
