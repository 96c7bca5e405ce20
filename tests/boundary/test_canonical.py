"""The one canonical JSON and fingerprint (agentkit.boundary.canonical)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkit.boundary.canonical import canonical_json, fingerprint_of, intent_json


def test_canonical_json_and_fingerprint_ignore_key_order() -> None:
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
    assert canonical_json({"x": {"d": [1, 2], "c": None}}) == '{"x":{"c":null,"d":[1,2]}}'
    assert fingerprint_of({"a": 1, "b": [1, 2]}) == fingerprint_of({"b": [1, 2], "a": 1})
    assert fingerprint_of({"a": 1}) != fingerprint_of({"a": 2})
    assert fingerprint_of("x") == hashlib.sha256(b'"x"').hexdigest()


def test_canonical_json_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(TypeError):
        canonical_json({"a": object()})


def test_intent_json_writes_numbers_equal_in_value_alike_and_keeps_bools_apart() -> None:
    assert intent_json({"cents": 5}) == intent_json({"cents": 5.0}) == '{"cents":5}'
    assert intent_json({"x": [1.0, {"y": -0.0}]}) == intent_json({"x": [1, {"y": 0}]})
    assert intent_json({"cents": 5.5}) == '{"cents":5.5}'
    assert intent_json({"flag": True}) != intent_json({"flag": 1})
    assert intent_json({"flag": False}) != intent_json({"flag": 0})
    assert intent_json({"big": 1e20}) == intent_json({"big": 10**20})
    assert intent_json({"big": 2**60 + 1}) != intent_json({"big": float(2**60 + 1)})  # not equal
    assert canonical_json({"cents": 5.0}) == '{"cents":5.0}'  # stored texts keep their type


def _ints_where_equal(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _ints_where_equal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_ints_where_equal(item) for item in value]
    return value


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(_JSON)
def test_intent_json_is_the_canonical_text_with_every_equal_float_an_int(value: object) -> None:
    assert intent_json(value) == canonical_json(_ints_where_equal(value))
