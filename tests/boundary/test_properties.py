"""invoke_tool never raises for model input, and always answers with a JSON-serialisable dict."""

from __future__ import annotations

import json
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from agentkit import ErrorCode, ToolRegistry, ToolSpec, invoke_tool


def search(query: str, limit: int = 3, tags: list[str] | None = None) -> dict:
    return {"query": query, "limit": limit, "tags": tags}


def crash(**kwargs) -> str:
    raise RuntimeError("boom")


REGISTRY = ToolRegistry([
    ToolSpec("search", "Search.", "read", 2.0, 1, 50, search),
    ToolSpec("crash", "Crashes.", "reversible_write", 2.0, 1, 50, crash),
])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
odd_values = (
    st.sets(st.integers(), max_size=3)
    | st.tuples(st.integers())
    | st.builds(object)
    | st.binary(max_size=8)
    | st.complex_numbers(allow_nan=False)
    | st.just(threading.Lock())
)
anything = st.recursive(
    json_values | odd_values,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.one_of(st.text(max_size=6), st.integers(), st.none()), inner, max_size=3),
    max_leaves=10,
)
names = st.one_of(st.sampled_from(["search", "crash", "", "Search", "search "]), st.text(max_size=10),
                  st.integers(), st.none(), st.lists(st.text(max_size=3), max_size=2))
search_like = st.fixed_dictionaries({"query": anything}, optional={"limit": anything, "tags": anything})

CODES = {c.value for c in ErrorCode}


@settings(max_examples=300, deadline=None)
@given(name=names, arguments=st.one_of(anything, search_like))
def test_invoke_tool_never_raises_and_answers_json(name, arguments):
    result = invoke_tool(REGISTRY, name, arguments)
    assert isinstance(result, dict) and isinstance(result["ok"], bool)
    text = json.dumps(result, allow_nan=False)
    assert json.loads(text) == result
    if result["ok"]:
        assert isinstance(result["data"], str) and len(result["data"]) <= 50
    else:
        assert result["error"] in CODES and isinstance(result["retryable"], bool)
