"""The boundary's contract points of issue 10 (docs/design.md#result-shape, #error-codes):
what reaches the handler, what the model is told about bad input, how policies fail closed.
Real handler calls counted."""

from __future__ import annotations

import json
import logging
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkit import CallContext, ToolRegistry, ToolRunner, ToolSpec, invoke_tool


class Seen:
    """A handler that records exactly what it was given."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return "ok"


def one_tool(handler, parameters, *, policies=(), effect="read") -> ToolRegistry:
    spec = ToolSpec("t", "Test tool.", effect, 2.0, 1, 200, handler, parameters=parameters)
    return ToolRegistry([spec], policies=policies)


# ------------------------------------------------------------------ integers

def test_an_integral_float_reaches_an_integer_field_as_an_int():
    seen: list[dict] = []

    def take(limit: int, scores: list[int], ratio: float = 1.0, maybe: int | None = None) -> str:
        seen.append({"limit": limit, "scores": scores, "ratio": ratio, "maybe": maybe})
        return str([None] * limit)  # a float limit would raise TypeError here

    registry = ToolRegistry([ToolSpec("t", "T.", "read", 2.0, 1, 500, take)])
    result = invoke_tool(registry, "t", {"limit": 2.0, "scores": [1.0, 3], "ratio": 2.0, "maybe": 4.0})
    assert result == {"ok": True, "data": "[None, None]"}
    assert len(seen) == 1
    assert type(seen[0]["limit"]) is int and seen[0]["limit"] == 2
    assert [type(s) for s in seen[0]["scores"]] == [int, int]
    assert type(seen[0]["ratio"]) is float  # a number field keeps its float
    assert type(seen[0]["maybe"]) is int


@pytest.mark.parametrize("value", [2.5, 1e-9, float("inf")])
def test_a_fractional_float_is_invalid_for_an_integer_field(value):
    seen = Seen()
    registry = one_tool(seen, {"type": "object", "properties": {"n": {"type": "integer"}}})
    result = invoke_tool(registry, "t", {"n": value})
    assert result["error"] == "invalid_arguments"
    assert seen.calls == []


# ------------------------------------------------------------------ lone surrogates

@pytest.mark.parametrize("arguments", [{"q": "a\ud800b"}, {"q": ["x", "\udfff"]}, {"\ud83d": "x"}])
def test_arguments_holding_a_lone_surrogate_are_invalid(arguments):
    seen = Seen()
    registry = one_tool(seen, {"type": "object"})
    result = invoke_tool(registry, "t", arguments)
    assert result["error"] == "invalid_arguments"
    assert "surrogate" in result["detail"]
    json.dumps(result).encode("utf-8")
    assert seen.calls == []


# ------------------------------------------------------------------ hostile subclasses

class RaisingEq(dict):
    def __eq__(self, other):
        raise RuntimeError("eq")

    __ne__ = __eq__
    __hash__ = None  # type: ignore[assignment]

    def items(self):
        raise RuntimeError("items")

    def keys(self):
        raise RuntimeError("keys")


class RaisingStr(str):
    def __eq__(self, other):
        raise RuntimeError("eq")

    def __hash__(self):
        raise RuntimeError("hash")

    def __str__(self):
        raise RuntimeError("str")

    def __getitem__(self, item):
        raise RuntimeError("getitem")


class KeyStr(str):
    def __eq__(self, other):
        raise RuntimeError("eq")

    __hash__ = str.__hash__

    def __str__(self):
        raise RuntimeError("str")


class Lying(dict):
    def __iter__(self):
        raise RuntimeError("iter")


@pytest.mark.parametrize("effect", ["read", "reversible_write", "irreversible_write"])
@pytest.mark.parametrize(
    "name, arguments",
    [
        ("t", RaisingEq(q="x")),
        ("t", {"q": RaisingStr("x")}),
        (RaisingStr("t"), {"q": "x"}),
        (RaisingStr("nope"), {"q": "x"}),
        ("t", Lying(q="x")),
        ("t", {KeyStr("q"): "x"}),
    ],
)
def test_the_runner_never_raises_for_hostile_subclasses(effect, name, arguments):
    seen = Seen()
    registry = one_tool(seen, {"type": "object", "properties": {"q": {"type": "string"}}},
                        effect=effect)
    runner = ToolRunner(registry, sleep=lambda s: None)
    result = runner.call(name, arguments)
    assert isinstance(result, dict) and isinstance(result["ok"], bool)
    json.dumps(result)
    # what reached a handler (if anything) is plain JSON with exact types
    for call in seen.calls:
        assert type(call["q"]) is str
        assert all(type(k) is str for k in call)


def test_a_dict_subclass_that_round_trips_still_reaches_the_handler_as_a_plain_dict():
    seen = Seen()
    registry = one_tool(seen, {"type": "object", "properties": {"q": {"type": "string"}}})
    assert invoke_tool(registry, "t", RaisingEq(q="x"))["ok"] is True
    assert seen.calls == [{"q": "x"}] and type(seen.calls[0]["q"]) is str


# ------------------------------------------------------------------ policies

class BadBool:
    def __bool__(self):
        raise RuntimeError("no truth value")

    def __eq__(self, other):
        raise RuntimeError("eq")


@pytest.mark.parametrize(
    "answer, allowed",
    [(None, True), (True, True), (False, False), ("outside the workspace", False),
     ("", False), (BadBool(), False), (0, False), (1, False), ([], False), ({"ok": True}, False)],
)
def test_a_policy_allows_only_with_none_or_true(answer, allowed, caplog):
    seen = Seen()

    def policy(spec, arguments, context):
        return answer

    registry = one_tool(seen, {"type": "object"}, policies=[policy])
    for effect_runner in (lambda: invoke_tool(registry, "t", {}),
                          lambda: ToolRunner(registry).call("t", {})):
        with caplog.at_level(logging.WARNING, logger="agentkit"):
            result = effect_runner()
        if allowed:
            assert result["ok"] is True
        else:
            assert result["error"] == "forbidden" and result["retryable"] is False
    assert len(seen.calls) == (2 if allowed else 0)
    if not allowed and not isinstance(answer, (bool, str)):
        assert f"returned a {type(answer).__name__}" in caplog.text  # the log says why


def test_a_refusing_policy_s_reason_is_logged_not_shown(caplog):
    seen = Seen()
    registry = one_tool(seen, {"type": "object"},
                        policies=[lambda spec, args, ctx: "path outside the workspace"])
    with caplog.at_level(logging.WARNING, logger="agentkit"):
        result = invoke_tool(registry, "t", {})
    assert result == {"ok": False, "error": "forbidden", "retryable": False}
    assert "path outside the workspace" in caplog.text


def test_a_raising_policy_fails_closed_and_keeps_its_traceback(caplog):
    seen = Seen()

    def broken_policy(spec, arguments, context):
        raise KeyError("missing config")

    registry = one_tool(seen, {"type": "object"}, policies=[broken_policy])
    with caplog.at_level(logging.WARNING, logger="agentkit"):
        result = invoke_tool(registry, "t", {})
    assert result["error"] == "forbidden" and seen.calls == []
    records = [r for r in caplog.records if r.exc_info]
    assert records and records[0].exc_info[0] is KeyError
    assert "broken_policy" in caplog.text and "Traceback" in caplog.text


@pytest.mark.parametrize(
    "policy",
    [lambda spec, arguments: None, lambda: None, lambda a, b, c, d: None, "not callable", None],
)
def test_add_policy_checks_the_signature_when_added(policy):
    registry = ToolRegistry()
    with pytest.raises(TypeError):
        registry.add_policy(policy)
    with pytest.raises(TypeError):
        ToolRegistry(policies=[policy])
    assert registry.policies == []


@pytest.mark.parametrize(
    "policy",
    [lambda spec, arguments, context: None, lambda *args: None,
     lambda spec, arguments, context, extra=None: None],
)
def test_add_policy_accepts_callables_that_take_three_arguments(policy):
    registry = ToolRegistry()
    registry.add_policy(policy)
    assert registry.policies == [policy]


# ------------------------------------------------------------------ detail (point 11)

DIGIT_KEYS = st.one_of(
    st.text(alphabet="0123456789", min_size=1, max_size=20),
    st.text(alphabet="٠١٢٣٤٥٦٧٨٩०१२३४५६७८९０１２３", min_size=1, max_size=12),
    st.text(min_size=1, max_size=12),
)
SCALARS = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=20), st.booleans(),
                    st.none())
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(DIGIT_KEYS, inner, max_size=3), max_leaves=8)

NESTED = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "maxLength": 5},
        "n": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
        "d": {"type": "object", "additionalProperties": {"type": "integer"}},
        "strict": {"type": "object", "properties": {"a": {"type": "string"}},
                   "additionalProperties": False},
        "free": {"type": "object", "additionalProperties": {"type": "object",
                                                            "properties": {"x": {"type": "integer"}}}},
    },
    "required": ["text"],
    "additionalProperties": False,
}
SCHEMA_TEXT = json.dumps(NESTED)


def _leaves(value, out):
    """Every key and scalar value of the arguments, as the text it would be echoed as."""
    if isinstance(value, dict):
        for key, item in value.items():
            out.append(key)
            _leaves(item, out)
    elif isinstance(value, list):
        for item in value:
            _leaves(item, out)
    elif isinstance(value, str):
        out.append(value)
    elif value is not None and not isinstance(value, bool):
        out.append(json.dumps(value))


KEYED = st.dictionaries(DIGIT_KEYS, VALUES, min_size=1, max_size=3)
ARGUMENTS = st.fixed_dictionaries(
    # "text" valid or not: when it is valid, the checks reach the nested fields
    {"text": st.text(max_size=5) | VALUES},
    optional={"n": VALUES, "tags": st.lists(VALUES, max_size=3) | VALUES, "d": KEYED | VALUES,
              "strict": KEYED | VALUES, "free": st.dictionaries(DIGIT_KEYS, KEYED, max_size=2),
              "zzz-extra": VALUES},
) | st.dictionaries(DIGIT_KEYS, VALUES, max_size=4)


@settings(max_examples=400, deadline=None)
@given(arguments=ARGUMENTS)
def test_detail_never_contains_a_key_or_value_from_the_arguments(arguments):
    seen = Seen()
    registry = one_tool(seen, NESTED)
    result = invoke_tool(registry, "t", arguments)
    if result["ok"]:
        assert len(seen.calls) == 1
        return
    assert seen.calls == []
    detail = result["detail"]
    leaves: list[str] = []
    _leaves(arguments, leaves)
    for leaf in leaves:
        # Text the schema itself holds (a field name, a type) may appear; nothing else may.
        if len(leaf) >= 3 and leaf not in SCHEMA_TEXT and leaf not in _FIXED_WORDS:
            assert leaf not in detail, (leaf, detail)
    # no digit of any script that the schema does not hold
    for char in detail:
        if unicodedata.category(char) == "Nd":
            assert char in "0123456789"


_FIXED_WORDS = (
    "missing required field unexpected allowed fields must be of type breaks the rule "
    "arguments characters of JSON limit is one of none in field nest deeper than levels "
    "hold only values valid Unicode text a lone surrogate was sent"
)


@pytest.mark.parametrize(
    "arguments, detail",
    [
        ({"text": "a", "d": {"4111111111111111": "x"}}, "field 'd.*' must be of type integer"),
        ({"text": "a", "d": {"٤١١١١١١١": "x"}}, "field 'd.*' must be of type integer"),
        ({"text": "a", "free": {"4111111111111111": {"x": "y"}}},
         "field 'free.*' must be of type integer"),
        ({"text": "a", "strict": {"4111111111111111": 1}},
         "unexpected field in strict; allowed fields: a"),
        ({"text": "a", "4111111111111111": 1},
         "unexpected field; allowed fields: d, free, n, strict, tags, text"),
        ({"text": "a", "tags": ["a", 4111111111111111]}, "field 'tags[1]' must be of type string"),
        ({"text": "a", "n": -4111111111111111}, "field 'n' breaks the rule minimum=0"),
    ],
)
def test_unknown_keys_are_reported_by_their_parent_only(arguments, detail):
    seen = Seen()
    result = invoke_tool(one_tool(seen, NESTED), "t", arguments)
    assert result["detail"] == detail
    assert seen.calls == []


def test_a_context_is_not_model_input():
    # CallContext stays the caller's: a str subclass task id does not crash the key either
    seen = Seen()
    registry = one_tool(seen, {"type": "object"}, effect="reversible_write")
    runner = ToolRunner(registry, context=CallContext(task_id="t1"))
    assert runner.call("t", {})["ok"] is True and len(seen.calls) == 1
