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
