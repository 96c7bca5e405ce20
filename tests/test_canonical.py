"""The one canonical JSON and fingerprint (agentkit.boundary.canonical)."""

from __future__ import annotations

import hashlib

import pytest

from agentkit.boundary.canonical import canonical_json, fingerprint_of


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
    from agentkit.boundary.canonical import intent_json

    assert intent_json({"cents": 5}) == intent_json({"cents": 5.0}) == '{"cents":5}'
    assert intent_json({"x": [1.0, {"y": -0.0}]}) == intent_json({"x": [1, {"y": 0}]})
    assert intent_json({"cents": 5.5}) == '{"cents":5.5}'
    assert intent_json({"flag": True}) != intent_json({"flag": 1})
    assert intent_json({"flag": False}) != intent_json({"flag": 0})
    assert intent_json({"big": 1e20}) == intent_json({"big": 10**20})
    assert intent_json({"big": 2**60 + 1}) != intent_json({"big": float(2**60 + 1)})  # not equal
    assert canonical_json({"cents": 5.0}) == '{"cents":5.0}'  # stored texts keep their type
