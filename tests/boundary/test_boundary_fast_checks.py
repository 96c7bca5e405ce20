"""The boundary's shortcuts for the common case decide exactly as the full checks do:
a short output with no redaction hint is shown whole, and flat ASCII arguments are sized
by a worst-case count that never lets through what the exact JSON length would refuse."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentkit import ToolRegistry, ToolSpec, invoke_tool
from agentkit.boundary.redaction import REDACTED, Redactor, render_value, shape_output


class FullScan(Redactor):
    """A redactor that never takes the shortcut: the reference."""

    def finds_nothing(self, text: str) -> bool:
        return False


#: Pieces that make hints and secrets likely (mixed case, the letters that read as ASCII).
PIECES = st.sampled_from([
    "q", " ", "\"", ":", "=", "/", "<", "-", "_", "x", "TOKEN", "token", "Pass", "word", "PWD",
    "secret", "api", "Key", "k", "\u212a", "\u0130", "\u0131", "bearer ", "Basic ", "sk-",
    "abcdefghijklmnop1234", "eyJhbGciOi", ".", "AKIA", "ghp_", "xox", "://u:p@h", "<password>",
    "--token ", "\u00e9", "\n",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(PIECES, max_size=24).map("".join))
def test_the_shortcut_finds_what_the_full_scan_finds(text: str) -> None:
    quick, full = Redactor(), FullScan()
    assert quick.spans(text) == full.spans(text)
    for limit in (0, 5, 40, 4096):
        assert shape_output(text, limit, quick) == shape_output(text, limit, full)


def test_the_shortcut_is_taken_only_with_the_default_patterns() -> None:
    assert Redactor().finds_nothing('["q", "q", "q"]')
    assert not Redactor([re.compile("q")]).finds_nothing("q")
    assert Redactor([re.compile("q")]).spans("q")[0].replacement == REDACTED
    assert not Redactor().finds_nothing("x" * 5_000)  # long text: the scan decides


@given(st.lists(st.one_of(st.text(max_size=8), st.integers(), st.none(), st.booleans(),
                          st.lists(st.text(max_size=3), max_size=3)), max_size=6))
def test_render_value_is_json_dumps_text(value: list[Any]) -> None:
    assert render_value(value) == json.dumps(value, ensure_ascii=False)
    assert render_value(tuple(value)) == json.dumps(value, ensure_ascii=False)


def echo(**kwargs: Any) -> str:
    return "ok"


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.text(alphabet="ab\"\\\x01", max_size=4),
        st.one_of(st.text(alphabet="ab\"\\\x01\u00e9", max_size=6), st.none(), st.booleans(),
                  st.integers(min_value=-(2**70), max_value=2**70)),
        max_size=4,
    ),
    st.integers(min_value=2, max_value=120),
)
def test_flat_arguments_are_refused_exactly_when_their_json_is_too_long(
    arguments: dict[str, Any], limit: int
) -> None:
    schema = {"type": "object", "additionalProperties": True}
    registry = ToolRegistry([ToolSpec("echo", "Echo.", "read", 2.0, 1, 100, echo,
                                      parameters=schema, max_argument_chars=limit)])
    size = len(json.dumps(arguments, ensure_ascii=False))
    result = invoke_tool(registry, "echo", arguments)
    if size <= limit:
        assert result == {"ok": True, "data": "ok"}
    else:
        assert result["error"] == "invalid_arguments"
        assert result["detail"] == f"arguments are {size} characters of JSON; the limit is {limit}"
