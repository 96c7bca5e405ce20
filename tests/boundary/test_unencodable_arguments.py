"""Values JSON can hold but Python cannot encode, or that the check cannot evaluate (issue 17).

A model's arguments are its input: whatever the encoder or the schema check cannot handle is
``invalid_arguments`` with a short reason, the handler never runs, and nothing is a
``tool_failure`` or a traceback. Checked through every entry point (invoke_tool, ainvoke_tool,
ToolRunner.call and acall) for each effect, with the handler's real call count.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import pytest

from agentkit import ToolRegistry, ToolRunner, ToolSpec, ainvoke_tool, invoke_tool

DIGITS = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4_300
HUGE = 10 ** (DIGITS + 10)


class Liar:
    """Claims to be a str through ``__class__``: the base method then refuses it."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return str


class LoudStr(str):
    def __str__(self) -> str:
        raise RuntimeError("never called")

    def __len__(self) -> int:
        raise RuntimeError("never called")


class Stringy:
    def __str__(self) -> str:
        return "looks like text"


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def _cyclic() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


ANY = {"type": "object", "properties": {"x": {}}, "additionalProperties": False}
HALVES = {"type": "object", "properties": {"x": {"type": "number", "multipleOf": 0.5}},
          "additionalProperties": False}

BAD: list[tuple[str, dict[str, Any], Any]] = [
    ("huge int", ANY, HUGE),
    ("huge negative int", ANY, -HUGE),
    ("huge int nested", ANY, {"a": [{"b": [HUGE]}]}),
    ("huge int among floats", ANY, [1.0, 2.0, HUGE]),
    ("nan", ANY, float("nan")),
    ("infinity", ANY, float("inf")),
    ("nested -infinity", ANY, {"k": [float("-inf")]}),
    ("too deep", ANY, _deep(500)),
    ("cyclic", ANY, _cyclic()),
    ("object with __str__", ANY, Stringy()),
    ("lying __class__", ANY, Liar()),
    ("lying __class__ nested", ANY, {"k": [Liar()]}),
    ("bytes", ANY, b"bytes"),
    ("tuple key dict", ANY, {(1, 2): "v"}),
    ("multipleOf overflow", HALVES, 10**400),
]


def _registry(effect: str, schema: dict[str, Any], calls: list[Any]) -> ToolRegistry:
    def handler(x: Any = None) -> str:
        calls.append(x)
        return "ran"

    return ToolRegistry([ToolSpec("t", "A tool.", effect, 2.0, 1, 1_000, handler, parameters=schema)])


def _assert_refused(result: dict[str, Any], calls: list[Any]) -> None:
    assert result["ok"] is False and result["error"] == "invalid_arguments", result
    assert isinstance(result["detail"], str) and 0 < len(result["detail"]) <= 120
    assert "Traceback" not in result["detail"]
    assert calls == []


@pytest.mark.parametrize(("label", "schema", "value"), BAD, ids=[b[0] for b in BAD])
def test_invoke_tool_refuses_what_it_cannot_encode_or_check(label, schema, value, caplog):
    calls: list[Any] = []
    registry = _registry("read", schema, calls)
    with caplog.at_level(logging.WARNING, logger="agentkit"):
        _assert_refused(invoke_tool(registry, "t", {"x": value}), calls)
        _assert_refused(asyncio.run(ainvoke_tool(registry, "t", {"x": value})), calls)
    assert not [r for r in caplog.records if r.exc_info], "no traceback in the log either"


@pytest.mark.parametrize("effect", ["read", "reversible_write", "irreversible_write"])
@pytest.mark.parametrize(("label", "schema", "value"), BAD, ids=[b[0] for b in BAD])
def test_the_runner_refuses_them_before_any_key_or_approval(label, schema, value, effect):
    calls: list[Any] = []
    runner = ToolRunner(_registry(effect, schema, calls))
    _assert_refused(runner.call("t", {"x": value}), calls)
    _assert_refused(asyncio.run(runner.acall("t", {"x": value})), calls)
    assert runner.pending_approvals() == []


def test_the_reason_names_the_number_and_never_echoes_it():
    calls: list[Any] = []
    result = invoke_tool(_registry("read", ANY, calls), "t", {"x": {"n": HUGE}})
    assert result["detail"] == "arguments hold a number too long to write as JSON text"
    assert "1000" not in result["detail"]


def test_values_just_inside_the_limits_still_run():
    calls: list[Any] = []
    registry = _registry("read", ANY, calls)
    longest = 10 ** (DIGITS - 1)  # DIGITS digits: still encodable
    assert invoke_tool(registry, "t", {"x": longest})["ok"] is True
    assert invoke_tool(registry, "t", {"x": _deep(90)})["ok"] is True
    assert invoke_tool(registry, "t", {"x": LoudStr("plain")})["ok"] is True
    assert calls == [longest, _deep(90), "plain"] and type(calls[2]) is str


def test_integral_floats_are_still_coerced_where_an_integer_is_wanted():
    seen: list[Any] = []

    def handler(n: int, x: float) -> str:
        seen.append((n, x))
        return "ok"

    registry = ToolRegistry([ToolSpec("t", "A tool.", "read", 2.0, 1, 100, handler)])
    assert invoke_tool(registry, "t", {"n": 2.0, "x": 3.0})["ok"] is True
    assert seen == [(2, 3.0)] and type(seen[0][0]) is int and type(seen[0][1]) is float
